;; refused: an operator's exports, one misspelled, without the ABI version
;; marker weir_abi_v1 (a Rust operator that left out weir::operator!)
(module
  (memory (export "memory") 1)
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_proces") (param i32 i32 i32) (result i32) (i32.const 0))
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
