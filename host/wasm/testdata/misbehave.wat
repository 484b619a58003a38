;; misbehave: a test operator whose config byte chooses how weir_process
;; (and friends) behave, to prove the host contains every failure.
;;
;;   p  pass the batch through (the default; also for empty config)
;;   t  trap (unreachable) while the cursor says record 2
;;   c  trap (unreachable) while the cursor says record 16843009 (0x01010101,
;;      as a stray write of 1s over the SDK's state leaves it)
;;   l  loop forever (br)
;;   L  loop forever (br_if, inside a block inside the loop)
;;   T  loop forever (br_table)
;;   m  grow memory one page at a time until it fails, then trap
;;   M  grow memory one page at a time until it fails, then loop forever
;;   b  emit a malformed batch (count 5, no records)
;;   o  emit with a length past the end of memory
;;   O  emit with a pointer past the end of memory
;;   x  call proc_exit(3)
;;   e  return status 1 with message "boom"
;;   E  return status 7 without a message
;;   2  emit to output port 2
;;   s  emit during weir_snapshot; snapshot_write past memory end
;;   z  return 0 from weir_input after weir_init (cannot allocate)
;;   i  fail weir_init with message "bad config"
;;   g  table.grow by 2^31-1 entries: status 9 if refused, 0 if it grew
;;   w  snapshot_write "state" (a byte per call, in a loop) and restore_read
;;      it back into address 200
;;   d  slow: spin for the count in config bytes 1..4 (u32) on every record,
;;      trap on a record whose value starts with "!", pass the batch through
;;   G  followed by another mode: in the first weir_process call only, ask
;;      for 1 GiB (memory.grow of 16384 pages) and ignore the answer; then
;;      behave as that mode ("Gt" traps after a refused grow, "Gp" carries
;;      on after it)
;;
;; guests/build.sh builds it: wat2wasm --debug-names (names kept).
(module
  (import "weir" "emit" (func $emit (param i32 i32 i32) (result i32)))
  (import "weir" "error" (func $error (param i32 i32)))
  (import "weir" "snapshot_write" (func $snapshot_write (param i32 i32) (result i32)))
  (import "weir" "restore_read" (func $restore_read (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))

  (memory (export "memory") 2)
  (table $t 1 funcref)
  (global $mode (mut i32) (i32.const 112)) ;; 'p'
  (global $spin (mut i32) (i32.const 0))
  (global $grow (mut i32) (i32.const 0)) ;; 1: grow by 1 GiB in the next weir_process
  (data (i32.const 16) "boom")
  (data (i32.const 32) "bad config")
  (data (i32.const 48) "\05\00\00\00")   ;; a batch claiming 5 records
  (data (i32.const 64) "state")
  (data (i32.const 8) "\ff\ff\ff\ff")   ;; cursor = -1: outside a record
  (global $cursor_addr i32 (i32.const 8))

  (func (export "weir_abi_v1"))
  (func (export "weir_cursor") (result i32) (global.get $cursor_addr))

  (func (export "weir_input") (param $size i32) (result i32)
    (local $need i32)
    (if (i32.eq (global.get $mode) (i32.const 122)) ;; 'z'
      (then (return (i32.const 0))))
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

  (func (export "weir_init") (param $ptr i32) (param $len i32) (result i32)
    (if (local.get $len)
      (then (global.set $mode (i32.load8_u (local.get $ptr)))))
    (if (i32.and (i32.eq (global.get $mode) (i32.const 71)) ;; 'G'
                 (i32.ge_u (local.get $len) (i32.const 2)))
      (then
        (global.set $grow (i32.const 1))
        (global.set $mode (i32.load8_u offset=1 (local.get $ptr)))))
    (if (i32.ge_u (local.get $len) (i32.const 5))
      (then (global.set $spin (i32.load offset=1 (local.get $ptr)))))
    (if (i32.eq (global.get $mode) (i32.const 105)) ;; 'i'
      (then
        (call $error (i32.const 32) (i32.const 10))
        (return (i32.const 1))))
    (i32.const 0))

  (func $process (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (local $m i32)
    (local $n i32)
    (local $i i32)
    (local $off i32)
    (local $klen i32)
    (local $vlen i32)
    (local $k i32)
    (if (global.get $grow)
      (then
        (global.set $grow (i32.const 0))
        (drop (memory.grow (i32.const 16384)))))
    (local.set $m (global.get $mode))
    (if (i32.eq (local.get $m) (i32.const 100)) ;; 'd'
      (then
        (local.set $n (i32.load (local.get $ptr)))
        (local.set $off (i32.add (local.get $ptr) (i32.const 4)))
        (block $done
          (loop $rec
            (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
            (i32.store (global.get $cursor_addr) (local.get $i))
            (local.set $klen (i32.load (local.get $off)))
            (local.set $vlen (i32.load offset=4 (local.get $off)))
            (if (i32.gt_u (local.get $vlen) (i32.const 0))
              (then
                (if (i32.eq (i32.load8_u (i32.add (i32.add (local.get $off) (i32.const 16)) (local.get $klen)))
                            (i32.const 33)) ;; '!'
                  (then unreachable))))
            (local.set $k (global.get $spin))
            (loop $burn
              (local.set $k (i32.sub (local.get $k) (i32.const 1)))
              (br_if $burn (i32.gt_s (local.get $k) (i32.const 0))))
            (local.set $off (i32.add (local.get $off)
              (i32.add (i32.const 16) (i32.add (local.get $klen) (local.get $vlen)))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $rec)))
        (i32.store (global.get $cursor_addr) (i32.const -1))
        (return (call $emit (i32.const 0) (local.get $ptr) (local.get $len)))))
    (if (i32.eq (local.get $m) (i32.const 116)) ;; 't'
      (then
        (i32.store (global.get $cursor_addr) (i32.const 2))
        unreachable))
    (if (i32.eq (local.get $m) (i32.const 99)) ;; 'c'
      (then
        (i32.store (global.get $cursor_addr) (i32.const 0x01010101))
        unreachable))
    (if (i32.eq (local.get $m) (i32.const 108)) ;; 'l'
      (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $m) (i32.const 76)) ;; 'L'
      (then (loop $forever2 (block $inner (br_if $forever2 (i32.const 1))))))
    (if (i32.eq (local.get $m) (i32.const 84)) ;; 'T'
      (then (block $out (loop $forever3 (br_table $out $forever3 (i32.const 1))))))
    (if (i32.eq (local.get $m) (i32.const 109)) ;; 'm'
      (then
        (loop $grow
          (br_if $grow (i32.ge_s (memory.grow (i32.const 1)) (i32.const 0))))
        unreachable))
    (if (i32.eq (local.get $m) (i32.const 77)) ;; 'M'
      (then
        (loop $grow2
          (br_if $grow2 (i32.ge_s (memory.grow (i32.const 1)) (i32.const 0))))
        (loop $spin_forever (br $spin_forever))))
    (if (i32.eq (local.get $m) (i32.const 98)) ;; 'b'
      (then (return (call $emit (i32.const 0) (i32.const 48) (i32.const 4)))))
    (if (i32.eq (local.get $m) (i32.const 111)) ;; 'o': length past the end
      (then (drop (call $emit (i32.const 0) (local.get $ptr) (i32.const 0x7fffffff)))
            (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 79)) ;; 'O': pointer past the end
      (then (drop (call $emit (i32.const 0) (i32.const 0xfffffff0) (i32.const 4)))
            (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 120)) ;; 'x'
      (then (call $proc_exit (i32.const 3))))
    (if (i32.eq (local.get $m) (i32.const 101)) ;; 'e'
      (then
        (call $error (i32.const 16) (i32.const 4))
        (return (i32.const 1))))
    (if (i32.eq (local.get $m) (i32.const 69)) ;; 'E'
      (then (return (i32.const 7))))
    (if (i32.eq (local.get $m) (i32.const 103)) ;; 'g'
      (then
        (if (i32.eq (table.grow $t (ref.null func) (i32.const 0x7fffffff)) (i32.const -1))
          (then (return (i32.const 9))))
        (return (i32.const 0))))
    (if (i32.eq (local.get $m) (i32.const 50)) ;; '2'
      (then (return (call $emit (i32.const 2) (local.get $ptr) (local.get $len)))))
    (call $emit (i32.const 0) (local.get $ptr) (local.get $len)))

  (func (export "weir_end_of_input") (param $port i32) (result i32)
    ;; emits one empty batch on port 0
    (i32.store (i32.const 96) (i32.const 0))
    (call $emit (i32.const 0) (i32.const 96) (i32.const 4)))

  (func (export "weir_snapshot") (result i32)
    (local $i i32)
    (local $rc i32)
    (if (i32.eq (global.get $mode) (i32.const 115)) ;; 's'
      (then
        (drop (call $emit (i32.const 0) (i32.const 48) (i32.const 4)))
        (return (i32.const 0))))
    (if (i32.eq (global.get $mode) (i32.const 83)) ;; 'S': snapshot_write out of bounds
      (then (return (call $snapshot_write (i32.const 0xffffff00) (i32.const 0x1000)))))
    (if (i32.eq (global.get $mode) (i32.const 119)) ;; 'w': "state", a byte per call
      (then
        (local.set $i (i32.const 0))
        (loop $bytes
          (local.set $rc (call $snapshot_write (i32.add (i32.const 64) (local.get $i)) (i32.const 1)))
          (if (local.get $rc) (then (return (local.get $rc))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $bytes (i32.lt_u (local.get $i) (i32.const 5))))
        (return (i32.const 0))))
    (i32.const 0))

  (func (export "weir_restore") (result i32)
    (local $n i32)
    (local $off i32)
    ;; read the whole stream into address 200, then check it ends with 0
    (local.set $off (i32.const 200))
    (block $done
      (loop $read
        (local.set $n (call $restore_read (local.get $off) (i32.const 3)))
        (br_if $done (i32.eqz (local.get $n)))
        (if (i32.lt_s (local.get $n) (i32.const 0))
          (then (return (local.get $n))))
        (local.set $off (i32.add (local.get $off) (local.get $n)))
        (br $read)))
    ;; store the length read at address 196
    (i32.store (i32.const 196) (i32.sub (local.get $off) (i32.const 200)))
    (i32.const 0))

  (func (export "weir_checkpoint_complete") (param $id i64) (result i32)
    (if (i32.eq (global.get $mode) (i32.const 101)) ;; 'e'
      (then (return (i32.const 1))))
    (i32.const 0)))
