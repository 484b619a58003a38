;; refused: an import from env whose name has a newline: the error names it
;; quoted, on one line
(module
  (import "env" "foo\0abar" (func))
  (memory (export "memory") 1)
  (func (export "weir_abi_v1")))
