;; refused: exports none of the ABI, as an SDK build that forgot the SDK's
;; exports does (AssemblyScript without `export * from ".../weir/exports"`,
;; Rust without weir::operator!; C without WEIR_OPERATOR still has weir.h's
;; own exports, see no_callbacks.wat): memory and a reactor initializer only
(module
  (memory (export "memory") 1)
  (func (export "_initialize")))
