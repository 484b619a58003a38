;; uppercase — a stateless weir operator written by hand against abi/ABI.md.
;;
;; Turns ASCII a-z in each record's value into A-Z; key and timestamp pass
;; through unchanged; every input batch becomes at most one output batch on
;; port 0. Build: wat2wasm uppercase.wat -o uppercase.wasm
;;
;; The value is converted 8 bytes per step (SWAR: an i64 as 8 byte lanes),
;; then its last len%8 bytes one by one: the same algorithm as every other
;; language's uppercase, so guests/conformance's BenchmarkUppercase compares
;; like with like.
(module
  ;; ABI §2: the host functions this module uses, from import module "weir".
  (import "weir" "emit" (func $emit (param i32 i32 i32) (result i32)))
  (import "weir" "error" (func $error (param i32 i32)))

  ;; ==========================================================================
  ;; Memory map (one linear memory, exported as "memory"; ABI §1):
  ;;
  ;;   8             i32 record cursor: the index of the record being
  ;;                 processed, -1 outside a record. weir_cursor returns 8;
  ;;                 the host reads it when a call traps (ABI §6).
  ;;   [16, 36)      scratch: a count's decimal digits, right-aligned
  ;;   [40, 48)      scratch: a state integer on its way to or from the host
  ;;   [64, 128)     this operator's fixed fields (see below)
  ;;   [1024, ...)   constant strings (data segments)
  ;;   [65536, ...)  the heap: allocated upwards by $alloc, never freed.
  ;;
  ;; The heap only grows: the input and output buffers grow geometrically
  ;; (each new buffer at least doubles), so the space abandoned by old
  ;; buffers is bounded by the largest buffer; state is append-only.
  ;; ==========================================================================
  (memory (export "memory") 2)
  (data (i32.const 8) "\ff\ff\ff\ff")                   ;; cursor = -1
  (data (i32.const 1024) "weir: out of memory")          ;; 19 bytes

  ;; The first free heap byte.
  (global $heap (mut i32) (i32.const 65536))

  ;; The input buffer handed out by weir_input, and its capacity.
  (global $in_ptr (mut i32) (i32.const 0))
  (global $in_cap (mut i32) (i32.const 0))

  ;; The output batch for port 0, built during a call and emitted once at
  ;; its end: [out_ptr, out_ptr+out_len) holds the count (written at flush)
  ;; then out_count records.
  (global $out_ptr (mut i32) (i32.const 0))
  (global $out_cap (mut i32) (i32.const 0))
  (global $out_len (mut i32) (i32.const 0))
  (global $out_count (mut i32) (i32.const 0))

  ;; ABI §1: the version marker. Never called; its name is what counts.
  (func (export "weir_abi_v1"))

  ;; ABI §6: the address of the i32 record cursor.
  (func (export "weir_cursor") (result i32) (i32.const 8))

  ;; $alloc returns the address of n fresh bytes (8-aligned), growing memory
  ;; as needed, or 0 when memory cannot grow.
  (func $alloc (param $n i32) (result i32)
    (local $p i32) (local $end i32) (local $pages i32)
    (local.set $p (global.get $heap))
    (local.set $end (i32.and (i32.add (i32.add (local.get $p) (local.get $n)) (i32.const 7))
                             (i32.const -8)))
    (if (i32.lt_u (local.get $end) (local.get $p)) (then (return (i32.const 0)))) ;; wrapped
    ;; pages needed to cover [0, end): ceil(end / 65536)
    (local.set $pages (i32.add (i32.shr_u (local.get $end) (i32.const 16))
                               (i32.ne (i32.and (local.get $end) (i32.const 0xffff)) (i32.const 0))))
    (if (i32.gt_u (local.get $pages) (memory.size))
      (then
        (if (i32.eq (memory.grow (i32.sub (local.get $pages) (memory.size))) (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (local.get $end))
    (local.get $p))

  ;; $fail sets the host's error message for the current call to the len
  ;; bytes at ptr and returns status 1 (ABI §6: any non-zero status fails).
  (func $fail (param $ptr i32) (param $len i32) (result i32)
    (call $error (local.get $ptr) (local.get $len))
    (i32.const 1))

  (func $oom (result i32) (call $fail (i32.const 1024) (i32.const 19)))

  ;; ABI §4: before each call with a payload the host asks for a buffer of
  ;; at least size bytes (never 0 for success: 0 means "cannot allocate").
  ;; One buffer is kept and replaced by one at least twice as big on growth.
  (func (export "weir_input") (param $size i32) (result i32)
    (local $cap i32)
    (if (i32.gt_u (local.get $size) (global.get $in_cap))
      (then
        (local.set $cap (select (local.get $size) (i32.shl (global.get $in_cap) (i32.const 1))
                                (i32.gt_u (local.get $size) (i32.shl (global.get $in_cap) (i32.const 1)))))
        (global.set $in_ptr (call $alloc (local.get $cap)))
        (if (i32.eqz (global.get $in_ptr)) (then (global.set $in_cap (i32.const 0)) (return (i32.const 0))))
        (global.set $in_cap (local.get $cap))))
    (if (i32.eqz (global.get $in_ptr))              ;; size 0 before any buffer
      (then (global.set $in_ptr (call $alloc (i32.const 8)))))
    (global.get $in_ptr))

  ;; $out_record appends a record header and key to the output batch and
  ;; returns the address of its vlen value bytes for the caller to fill in
  ;; (0 when memory runs out). ABI §3: key_len u32, value_len u32,
  ;; timestamp i64, key, value; unaligned stores are fine in wasm.
  (func $out_record (param $key i32) (param $klen i32) (param $vlen i32) (param $ts i64) (result i32)
    (local $need i32) (local $cap i32) (local $new i32) (local $p i32)
    (if (i32.eqz (global.get $out_len)) (then (global.set $out_len (i32.const 4)))) ;; room for the count
    (local.set $need (i32.add (global.get $out_len)
                              (i32.add (i32.const 16) (i32.add (local.get $klen) (local.get $vlen)))))
    (if (i32.gt_u (local.get $need) (global.get $out_cap))
      (then
        ;; grow to max(need, 2*cap, 4096), copying what is built so far
        (local.set $cap (i32.shl (global.get $out_cap) (i32.const 1)))
        (if (i32.lt_u (local.get $cap) (i32.const 4096)) (then (local.set $cap (i32.const 4096))))
        (if (i32.lt_u (local.get $cap) (local.get $need)) (then (local.set $cap (local.get $need))))
        (local.set $new (call $alloc (local.get $cap)))
        (if (i32.eqz (local.get $new)) (then (return (i32.const 0))))
        (memory.copy (local.get $new) (global.get $out_ptr) (global.get $out_len))
        (global.set $out_ptr (local.get $new))
        (global.set $out_cap (local.get $cap))))
    (local.set $p (i32.add (global.get $out_ptr) (global.get $out_len)))
    (i32.store (local.get $p) (local.get $klen))
    (i32.store offset=4 (local.get $p) (local.get $vlen))
    (i64.store offset=8 (local.get $p) (local.get $ts))
    (memory.copy (i32.add (local.get $p) (i32.const 16)) (local.get $key) (local.get $klen))
    (global.set $out_len (local.get $need))
    (global.set $out_count (i32.add (global.get $out_count) (i32.const 1)))
    (i32.add (local.get $p) (i32.add (i32.const 16) (local.get $klen))))

  ;; $finish ends a call that may have emitted. On success (status 0) it
  ;; hands the output batch to the host with ONE emit (ABI §2: one batch per
  ;; port per call); a non-zero emit result fails the call. Either way the
  ;; output is emptied and the cursor reset.
  (func $finish (param $status i32) (result i32)
    (if (i32.and (i32.eqz (local.get $status)) (i32.ne (global.get $out_count) (i32.const 0)))
      (then
        (i32.store (global.get $out_ptr) (global.get $out_count))
        (local.set $status (call $emit (i32.const 0) (global.get $out_ptr) (global.get $out_len)))))
    (global.set $out_len (i32.const 0))
    (global.set $out_count (i32.const 0))
    (i32.store (i32.const 8) (i32.const -1))
    (local.get $status))

  ;; ABI §5: weir_init gets the config bytes; uppercase takes none.
  (func (export "weir_init") (param $ptr i32) (param $len i32) (result i32)
    (i32.const 0))

  ;; ABI §5: weir_process gets one record batch (ABI §3) in the input buffer.
  ;;   batch  := count:u32  record * count
  ;;   record := key_len:u32  value_len:u32  timestamp:i64  key  value
  (func (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (local $n i32) (local $i i32) (local $klen i32) (local $vlen i32)
    (local $src i32) (local $dst i32) (local $j i32) (local $c i32)
    (local $words i32) (local $x i64) (local $h i64) (local $m i64)
    (local.set $n (i32.load (local.get $ptr)))
    (local.set $ptr (i32.add (local.get $ptr) (i32.const 4)))  ;; first record
    (block $done
      (loop $records
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (i32.store (i32.const 8) (local.get $i))               ;; cursor = i
        (local.set $klen (i32.load (local.get $ptr)))
        (local.set $vlen (i32.load offset=4 (local.get $ptr)))
        ;; copy header and key out; get the place for the value
        (local.set $dst (call $out_record
          (i32.add (local.get $ptr) (i32.const 16)) (local.get $klen) (local.get $vlen)
          (i64.load offset=8 (local.get $ptr))))
        (if (i32.eqz (local.get $dst)) (then (return (call $finish (call $oom)))))
        ;; value: a-z (0x61..0x7a) minus 0x20, everything else as is
        (local.set $src (i32.add (local.get $ptr) (i32.add (i32.const 16) (local.get $klen))))
        (local.set $j (i32.const 0))
        ;; 8 bytes per step up to words = vlen rounded down to a multiple of
        ;; 8 (unaligned i64 loads and stores are fine in wasm). Per byte, with
        ;; h its low 7 bits (no sum below carries into the next byte: h plus
        ;; at most 0x1f stays below 0x100):
        ;;   h + 0x1f has its high bit set iff h >= 0x61 ('a')
        ;;   h + 0x05 has its high bit set iff h >= 0x7b ('z' + 1)
        ;; so m = (h + 0x1f) & ~(h + 0x05) & ~x & 0x80 is 0x80 exactly on the
        ;; bytes a-z (~x keeps only ASCII bytes, whose high bit is clear),
        ;; and x ^ (m >> 2) clears their 0x20 bit (0x80 >> 2 == 0x20).
        (local.set $words (i32.and (local.get $vlen) (i32.const -8)))
        (block $converted
          (loop $word
            (br_if $converted (i32.ge_u (local.get $j) (local.get $words)))
            (local.set $x (i64.load (i32.add (local.get $src) (local.get $j))))
            (local.set $h (i64.and (local.get $x) (i64.const 0x7f7f7f7f7f7f7f7f)))
            (local.set $m
              (i64.and
                (i64.and (i64.add (local.get $h) (i64.const 0x1f1f1f1f1f1f1f1f))
                         (i64.xor (i64.add (local.get $h) (i64.const 0x0505050505050505))
                                  (i64.const -1)))
                (i64.and (i64.xor (local.get $x) (i64.const -1))
                         (i64.const 0x8080808080808080))))
            (i64.store (i32.add (local.get $dst) (local.get $j))
                       (i64.xor (local.get $x) (i64.shr_u (local.get $m) (i64.const 2))))
            (local.set $j (i32.add (local.get $j) (i32.const 8)))
            (br $word)))
        ;; the last vlen%8 bytes one by one
        (block $copied
          (loop $bytes
            (br_if $copied (i32.ge_u (local.get $j) (local.get $vlen)))
            (local.set $c (i32.load8_u (i32.add (local.get $src) (local.get $j))))
            (if (i32.lt_u (i32.sub (local.get $c) (i32.const 0x61)) (i32.const 26))
              (then (local.set $c (i32.sub (local.get $c) (i32.const 0x20)))))
            (i32.store8 (i32.add (local.get $dst) (local.get $j)) (local.get $c))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $bytes)))
        ;; next record starts after the 16-byte header, key and value
        (local.set $ptr (i32.add (local.get $src) (local.get $vlen)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $records)))
    (call $finish (i32.const 0)))

  ;; ABI §5: no state, so the snapshot is empty and restore reads nothing
  ;; (a stateless operator need not import snapshot_write / restore_read).
  (func (export "weir_snapshot") (result i32) (i32.const 0))
  (func (export "weir_restore") (result i32) (i32.const 0)))
