;; An operator written by hand whose weir_process calls $explode, which
;; traps: for the name its trap's stack gives that function. It emits
;; nothing and keeps no state; the input buffer starts at 64 KiB.
(module
  (memory (export "memory") 2)
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param $size i32) (result i32)
    (if (i32.gt_u (local.get $size) (i32.const 65536))
      (then (return (i32.const 0))))
    (i32.const 65536))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (call $explode)
    (i32.const 0))
  (func $explode unreachable)
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
