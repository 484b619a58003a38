;; refused: declares a minimum memory of 2000 pages (125 MiB), over the 64 MiB default
(module

  (memory (export "memory") 2000)
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_process") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0))
  (func (export "weir_abi_v1")))
