;; refused: the exports C's weir.h defines by itself (the version marker,
;; weir_input, weir_cursor) and a reactor initializer, without those
;; WEIR_OPERATOR(init, process, snapshot, restore) adds
(module
  (memory (export "memory") 1)
  (global $cursor i32 (i32.const 1024))
  (func (export "_initialize"))
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param i32) (result i32) (i32.const 2048))
  (func (export "weir_cursor") (result i32) (global.get $cursor)))
