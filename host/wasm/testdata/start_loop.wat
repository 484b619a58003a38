;; start_loop: an operator whose start function (the module's start section,
;; run when the module is instantiated) never returns.
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (memory (export "memory") 1)
  (func $start (loop $forever (br $forever)))
  (start $start)
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
