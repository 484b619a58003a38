;; start_abort: an operator whose start function fails the way an
;; AssemblyScript module's top-level code does on abort: it sets its message
;; with weir.error, then traps.
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (import "weir" "error" (func $error (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "abort in top-level code")
  (func $start
    (call $error (i32.const 16) (i32.const 23))
    unreachable)
  (start $start)
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
