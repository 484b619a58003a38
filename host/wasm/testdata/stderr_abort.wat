;; stderr_abort: an operator that fails the way C++'s libc++ built without
;; exceptions does (std::stoll on "abc"): it writes a line of no known
;; form to stderr, "stoll: no conversion", then traps. The trap's message
;; gives that line.
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; iovec at 0: base 16, length 21
  (data (i32.const 0) "\10\00\00\00\15\00\00\00")
  (data (i32.const 16) "stoll: no conversion\n")
  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param i32 i32) (result i32) (i32.const 0))
  (func (export "weir_process") (param i32 i32 i32) (result i32)
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    unreachable)
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
