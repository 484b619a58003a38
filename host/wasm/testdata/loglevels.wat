;; loglevels: an operator whose weir_init logs at levels outside the ABI's
;; -1..2 (7 and -9), as an adversarial or buggy guest may: the host takes
;; them as error and debug.
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (import "weir" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "seven")
  (data (i32.const 32) "minus-nine")
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32)
    (call $log (i32.const 7) (i32.const 16) (i32.const 5))
    (call $log (i32.const -9) (i32.const 32) (i32.const 10))
    (i32.const 0))
  (func (export "weir_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
