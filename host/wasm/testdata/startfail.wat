;; startfail: a module whose wasm start function (how AssemblyScript runs
;; an entry file's top-level code) logs "start: hello", sets the error
;; message "start: failed" and traps, as an operator constructor that
;; throws does. The host must report the message, not crash reading memory
;; it has not looked up yet.
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (import "weir" "error" (func $error (param i32 i32)))
  (import "weir" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "start: hello")
  (data (i32.const 32) "start: failed")
  (func $start
    (call $log (i32.const 0) (i32.const 16) (i32.const 12))
    (call $error (i32.const 32) (i32.const 13))
    (unreachable))
  (start $start)
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
