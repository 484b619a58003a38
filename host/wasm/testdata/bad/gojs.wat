;; refused: a Go program built with GOOS=js GOARCH=wasm: it imports the
;; gojs host functions and exports run/resume/getsp, none of the ABI (the
;; Go SDK's exports are built for wasip1 only)
(module
  (import "gojs" "runtime.wasmExit" (func (param i32)))
  (memory (export "mem") 1)
  (func (export "run") (param i32 i32))
  (func (export "resume"))
  (func (export "getsp") (result i32) (i32.const 0)))
