;; passthrough: a weir operator written by hand from abi/ABI.md.
;;
;; It forwards every record batch it receives, unchanged, to output port 0,
;; with one emit per batch. It has no state and ignores its config.
;;
;; Memory layout: page 0 is left alone; the input buffer starts at 64 KiB
;; and the memory grows on demand so that [64 KiB, 64 KiB + size) exists.
;;
;; Build: wat2wasm passthrough.wat -o passthrough.wasm
(module
  ;; emit(port, ptr, len) -> status: the host copies the batch at once.
  (import "weir" "emit" (func $emit (param i32 i32 i32) (result i32)))
  ;; error(ptr, len): the message explaining a non-zero status.
  (import "weir" "error" (func $error (param i32 i32)))

  (memory (export "memory") 2)

  ;; The message for a failed emit, at address 16 (32 bytes).
  (data (i32.const 16) "passthrough: the host refused it")

  ;; Declares ABI version 1; never called.
  (func (export "weir_abi_v1"))

  ;; weir_input(size) -> addr: the buffer for the next payload. It starts at
  ;; 64 KiB; grow the memory until the buffer fits, or return 0.
  (func (export "weir_input") (param $size i32) (result i32)
    (local $need i32)
    ;; pages needed for [0, 65536 + size), minus the pages we have
    (local.set $need
      (i32.sub
        (i32.shr_u
          (i32.add (i32.add (local.get $size) (i32.const 65536)) (i32.const 65535))
          (i32.const 16))
        (memory.size)))
    (if (i32.gt_s (local.get $need) (i32.const 0))
      (then
        (if (i32.lt_s (memory.grow (local.get $need)) (i32.const 0))
          (then (return (i32.const 0))))))
    (i32.const 65536))

  ;; weir_init(ptr, len) -> status: no configuration.
  (func (export "weir_init") (param i32 i32) (result i32)
    (i32.const 0))

  ;; weir_process(port, ptr, len) -> status: emit the batch as it is (the
  ;; host checks every emitted batch itself). A non-zero emit result fails
  ;; the call anyway; we add a message.
  (func (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (if (call $emit (i32.const 0) (local.get $ptr) (local.get $len))
      (then
        (call $error (i32.const 16) (i32.const 32))
        (return (i32.const 1))))
    (i32.const 0))

  ;; No state: write nothing, read nothing.
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
