;; bombs: a test operator whose config byte chooses a way to make the host,
;; not its own memory, do unbounded work.
;;
;;   s  weir_snapshot: snapshot_write the whole memory, over and over, forever
;;   o  weir_process: grow memory to the limit, fill it with 'x', and write all
;;      of it but the first page to stdout in one fd_write, without a newline
;;   l  weir_process: log one line with weir.log and return, with no loop after
;;      it (where a slow host logger makes the call overrun its deadline)
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (import "weir" "snapshot_write" (func $snapshot_write (param i32 i32) (result i32)))
  (import "weir" "log" (func $log (param i32 i32 i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (global $mode (mut i32) (i32.const 0))
  (data (i32.const 16) "slow")

  (func (export "weir_abi_v1"))
  (func (export "weir_input") (param $size i32) (result i32) (i32.const 1024))
  (func (export "weir_init") (param $ptr i32) (param $len i32) (result i32)
    (if (local.get $len)
      (then (global.set $mode (i32.load8_u (local.get $ptr)))))
    (i32.const 0))

  (func (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (local $size i32)
    (if (i32.eq (global.get $mode) (i32.const 108)) ;; 'l'
      (then (call $log (i32.const 0) (i32.const 16) (i32.const 4))))
    (if (i32.eq (global.get $mode) (i32.const 111)) ;; 'o'
      (then
        (loop $grow
          (br_if $grow (i32.ge_s (memory.grow (i32.const 1)) (i32.const 0))))
        (local.set $size (i32.mul (memory.size) (i32.const 65536)))
        (memory.fill (i32.const 0) (i32.const 120) (local.get $size))
        ;; one iovec at address 0: [65536, size)
        (i32.store (i32.const 0) (i32.const 65536))
        (i32.store (i32.const 4) (i32.sub (local.get $size) (i32.const 65536)))
        (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
    (i32.const 0))

  (func (export "weir_snapshot") (result i32)
    (if (i32.eq (global.get $mode) (i32.const 115)) ;; 's'
      (then
        (loop $forever
          (drop (call $snapshot_write (i32.const 0) (i32.mul (memory.size) (i32.const 65536))))
          (br $forever))))
    (i32.const 0))

  (func (export "weir_restore") (result i32) (i32.const 0)))
