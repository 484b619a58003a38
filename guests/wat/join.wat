;; join — a two-input stateful weir operator written by hand against abi/ABI.md.
;;
;; An equi-join on the record key: port 0 is the left input, port 1 the
;; right. Every record of both sides is buffered in arrival order. A record
;; arriving on one side is joined with every buffered record of the other
;; side with the same key, in arrival order, emitting key=k,
;; value=left.value "|" right.value, timestamp=max(left.ts, right.ts)
;; (signed); then it is buffered itself.
;;
;; State (shared by every SDK's join): byte 0x01, u32 n_left, n_left
;; records, u32 n_right, n_right records; a record is u32 key_len, key, u32
;; value_len, value, i64 timestamp; both sides in arrival order.
;;
;; Each side is a singly linked list in arrival order. A side's fields live
;; at 64 + 16*port: head @0, tail link @4 (the address to store the next
;; node's pointer into: the head field while empty, else the last node's
;; next), count @8. Node: next i32 @0, key_len @4, value_len @8,
;; key_ptr @12, value_ptr @16, timestamp i64 @24. Build: wat2wasm join.wat
(module
  ;; ABI §2: the host functions this module uses, from import module "weir".
  (import "weir" "emit" (func $emit (param i32 i32 i32) (result i32)))
  (import "weir" "error" (func $error (param i32 i32)))
  (import "weir" "snapshot_write" (func $snapshot_write (param i32 i32) (result i32)))
  (import "weir" "restore_read" (func $restore_read (param i32 i32) (result i32)))

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

  ;; ==========================================================================
  ;; State streams (ABI §2): snapshot_write appends chunks to the state
  ;; stream during weir_snapshot; restore_read reads it back during
  ;; weir_restore. Both go through one 64 KiB staging chunk.
  ;; ==========================================================================
  (data (i32.const 1056) "weir: state ended early")        ;; 23 bytes
  (data (i32.const 1088) "weir: state has trailing bytes") ;; 30 bytes
  (data (i32.const 1120) "weir: snapshot_write failed")    ;; 27 bytes

  (global $chunk (mut i32) (i32.const 0))    ;; 64 KiB staging buffer, 0 until needed
  (global $chunk_len (mut i32) (i32.const 0))
  (global $chunk_pos (mut i32) (i32.const 0)) ;; restore: next unread byte
  (global $chunk_eof (mut i32) (i32.const 0)) ;; restore: the host said "end"

  ;; $chunk_init allocates the staging buffer once; 0 on success.
  (func $chunk_init (result i32)
    (if (i32.eqz (global.get $chunk))
      (then
        (global.set $chunk (call $alloc (i32.const 65536)))
        (if (i32.eqz (global.get $chunk)) (then (return (call $oom))))))
    (global.set $chunk_len (i32.const 0))
    (global.set $chunk_pos (i32.const 0))
    (global.set $chunk_eof (i32.const 0))
    (i32.const 0))

  ;; $sw_flush hands the staged bytes to the host.
  (func $sw_flush (result i32)
    (local $rc i32)
    (if (i32.eqz (global.get $chunk_len)) (then (return (i32.const 0))))
    (local.set $rc (call $snapshot_write (global.get $chunk) (global.get $chunk_len)))
    (global.set $chunk_len (i32.const 0))
    (if (local.get $rc) (then (return (call $fail (i32.const 1120) (i32.const 27)))))
    (i32.const 0))

  ;; $sw_write appends len bytes at ptr to the state stream.
  (func $sw_write (param $ptr i32) (param $len i32) (result i32)
    (local $n i32)
    (block $done
      (loop $more
        (br_if $done (i32.eqz (local.get $len)))
        ;; n = min(len, room)
        (local.set $n (i32.sub (i32.const 65536) (global.get $chunk_len)))
        (if (i32.lt_u (local.get $len) (local.get $n)) (then (local.set $n (local.get $len))))
        (memory.copy (i32.add (global.get $chunk) (global.get $chunk_len)) (local.get $ptr) (local.get $n))
        (global.set $chunk_len (i32.add (global.get $chunk_len) (local.get $n)))
        (local.set $ptr (i32.add (local.get $ptr) (local.get $n)))
        (local.set $len (i32.sub (local.get $len) (local.get $n)))
        (if (i32.eq (global.get $chunk_len) (i32.const 65536))
          (then (if (call $sw_flush) (then (return (i32.const 1))))))
        (br $more)))
    (i32.const 0))

  ;; Little-endian integers go through the scratch at 40.
  (func $sw_u8 (param $v i32) (result i32)
    (i32.store8 (i32.const 40) (local.get $v))
    (call $sw_write (i32.const 40) (i32.const 1)))
  (func $sw_u32 (param $v i32) (result i32)
    (i32.store (i32.const 40) (local.get $v))
    (call $sw_write (i32.const 40) (i32.const 4)))
  (func $sw_u64 (param $v i64) (result i32)
    (i64.store (i32.const 40) (local.get $v))
    (call $sw_write (i32.const 40) (i32.const 8)))

  ;; $sr_fill makes unread restore bytes available and returns how many: 0
  ;; only at the end of the stream (a short read is not the end, ABI §2).
  (func $sr_fill (result i32)
    (local $n i32)
    (if (i32.lt_u (global.get $chunk_pos) (global.get $chunk_len))
      (then (return (i32.sub (global.get $chunk_len) (global.get $chunk_pos)))))
    (if (global.get $chunk_eof) (then (return (i32.const 0))))
    (local.set $n (call $restore_read (global.get $chunk) (i32.const 65536)))
    (global.set $chunk_pos (i32.const 0))
    (if (i32.le_s (local.get $n) (i32.const 0))
      (then
        (global.set $chunk_eof (i32.const 1))
        (local.set $n (i32.const 0))))
    (global.set $chunk_len (local.get $n))
    (local.get $n))

  ;; $sr_read reads exactly len bytes into ptr; status 1 if the stream ends first.
  (func $sr_read (param $ptr i32) (param $len i32) (result i32)
    (local $n i32)
    (block $done
      (loop $more
        (br_if $done (i32.eqz (local.get $len)))
        (local.set $n (call $sr_fill))
        (if (i32.eqz (local.get $n)) (then (return (call $fail (i32.const 1056) (i32.const 23)))))
        (if (i32.lt_u (local.get $len) (local.get $n)) (then (local.set $n (local.get $len))))
        (memory.copy (local.get $ptr) (i32.add (global.get $chunk) (global.get $chunk_pos)) (local.get $n))
        (global.set $chunk_pos (i32.add (global.get $chunk_pos) (local.get $n)))
        (local.set $ptr (i32.add (local.get $ptr) (local.get $n)))
        (local.set $len (i32.sub (local.get $len) (local.get $n)))
        (br $more)))
    (i32.const 0))

  ;; $sr_end_check fails a restore that left bytes unread.
  (func $sr_end_check (param $status i32) (result i32)
    (if (local.get $status) (then (return (local.get $status))))
    (if (call $sr_fill) (then (return (call $fail (i32.const 1088) (i32.const 30)))))
    (i32.const 0))

  (data (i32.const 68) "\40\00\00\00")                   ;; left tail link = 64 (its head)
  (data (i32.const 84) "\50\00\00\00")                   ;; right tail link = 80 (its head)
  (data (i32.const 1152) "join: unknown state version")  ;; 27 bytes
  (data (i32.const 1184) "join: input port must be 0 (left) or 1 (right)") ;; 46 bytes

  (func (export "weir_init") (param $ptr i32) (param $len i32) (result i32)
    (i32.const 0))

  ;; $side is the address of a port's fields.
  (func $side (param $port i32) (result i32)
    (i32.add (i32.const 64) (i32.shl (local.get $port) (i32.const 4))))

  ;; $append links a node (its fields set) at the end of a side's list.
  (func $append (param $side i32) (param $node i32)
    (i32.store (local.get $node) (i32.const 0))
    (i32.store (i32.load offset=4 (local.get $side)) (local.get $node))
    (i32.store offset=4 (local.get $side) (local.get $node))
    (i32.store offset=8 (local.get $side) (i32.add (i32.load offset=8 (local.get $side)) (i32.const 1))))

  ;; $pair emits key with value left "|" right: status 0, or 1 out of memory.
  (func $pair (param $key i32) (param $klen i32) (param $l i32) (param $llen i32)
              (param $r i32) (param $rlen i32) (param $ts i64) (result i32)
    (local $dst i32)
    (local.set $dst (call $out_record (local.get $key) (local.get $klen)
      (i32.add (local.get $llen) (i32.add (i32.const 1) (local.get $rlen))) (local.get $ts)))
    (if (i32.eqz (local.get $dst)) (then (return (call $oom))))
    (memory.copy (local.get $dst) (local.get $l) (local.get $llen))
    (local.set $dst (i32.add (local.get $dst) (local.get $llen)))
    (i32.store8 (local.get $dst) (i32.const 0x7c))         ;; '|'
    (memory.copy (i32.add (local.get $dst) (i32.const 1)) (local.get $r) (local.get $rlen))
    (i32.const 0))

  ;; $match joins one record of port with the buffered records of the other.
  (func $match (param $port i32) (param $key i32) (param $klen i32)
               (param $val i32) (param $vlen i32) (param $ts i64) (result i32)
    (local $node i32) (local $t i64) (local $rc i32)
    (local.set $node (i32.load (call $side (i32.sub (i32.const 1) (local.get $port)))))
    (block $done
      (loop $nodes
        (br_if $done (i32.eqz (local.get $node)))
        (if (i32.eq (i32.load offset=4 (local.get $node)) (local.get $klen))
          (then
            (if (i32.eqz (call $bytes_ne (i32.load offset=12 (local.get $node)) (local.get $key) (local.get $klen)))
              (then
                ;; timestamp = max, signed
                (local.set $t (i64.load offset=24 (local.get $node)))
                (if (i64.gt_s (local.get $ts) (local.get $t)) (then (local.set $t (local.get $ts))))
                (local.set $rc
                  (if (result i32) (i32.eqz (local.get $port))
                    (then (call $pair (local.get $key) (local.get $klen) (local.get $val) (local.get $vlen)
                            (i32.load offset=16 (local.get $node)) (i32.load offset=8 (local.get $node)) (local.get $t)))
                    (else (call $pair (local.get $key) (local.get $klen)
                            (i32.load offset=16 (local.get $node)) (i32.load offset=8 (local.get $node))
                            (local.get $val) (local.get $vlen) (local.get $t)))))
                (if (local.get $rc) (then (return (local.get $rc))))))))
        (local.set $node (i32.load (local.get $node)))
        (br $nodes)))
    (i32.const 0))

  ;; $bytes_ne reports whether n bytes at a and b differ.
  (func $bytes_ne (param $a i32) (param $b i32) (param $n i32) (result i32)
    (local $i i32)
    (block $same
      (loop $bytes
        (br_if $same (i32.ge_u (local.get $i) (local.get $n)))
        (if (i32.ne (i32.load8_u (i32.add (local.get $a) (local.get $i)))
                    (i32.load8_u (i32.add (local.get $b) (local.get $i))))
          (then (return (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $bytes)))
    (i32.const 0))

  ;; ABI §5.4: one record batch (ABI §3) per call, from input port 0 or 1.
  (func (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (local $n i32) (local $i i32) (local $klen i32) (local $vlen i32) (local $ts i64) (local $node i32)
    (if (i32.gt_u (local.get $port) (i32.const 1))
      (then (return (call $fail (i32.const 1184) (i32.const 46)))))
    (local.set $n (i32.load (local.get $ptr)))
    (local.set $ptr (i32.add (local.get $ptr) (i32.const 4)))
    (block $done
      (loop $records
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (i32.store (i32.const 8) (local.get $i))               ;; cursor = i
        (local.set $klen (i32.load (local.get $ptr)))
        (local.set $vlen (i32.load offset=4 (local.get $ptr)))
        (local.set $ts (i64.load offset=8 (local.get $ptr)))
        (if (call $match (local.get $port) (i32.add (local.get $ptr) (i32.const 16)) (local.get $klen)
              (i32.add (local.get $ptr) (i32.add (i32.const 16) (local.get $klen))) (local.get $vlen) (local.get $ts))
          (then (return (call $finish (i32.const 1)))))
        ;; buffer a copy: the input buffer is reused by the next call (ABI §4)
        (local.set $node (call $alloc (i32.add (i32.const 32) (i32.add (local.get $klen) (local.get $vlen)))))
        (if (i32.eqz (local.get $node)) (then (return (call $finish (call $oom)))))
        (i32.store offset=4 (local.get $node) (local.get $klen))
        (i32.store offset=8 (local.get $node) (local.get $vlen))
        (i32.store offset=12 (local.get $node) (i32.add (local.get $node) (i32.const 32)))
        (i32.store offset=16 (local.get $node) (i32.add (local.get $node) (i32.add (i32.const 32) (local.get $klen))))
        (i64.store offset=24 (local.get $node) (local.get $ts))
        (memory.copy (i32.add (local.get $node) (i32.const 32)) (i32.add (local.get $ptr) (i32.const 16))
                     (i32.add (local.get $klen) (local.get $vlen)))  ;; key and value are adjacent
        (call $append (call $side (local.get $port)) (local.get $node))
        (local.set $ptr (i32.add (local.get $ptr) (i32.add (i32.const 16) (i32.add (local.get $klen) (local.get $vlen)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $records)))
    (call $finish (i32.const 0)))

  ;; $write_side writes a side's count and records.
  (func $write_side (param $side i32) (result i32)
    (local $node i32)
    (if (call $sw_u32 (i32.load offset=8 (local.get $side))) (then (return (i32.const 1))))
    (local.set $node (i32.load (local.get $side)))
    (block $done
      (loop $nodes
        (br_if $done (i32.eqz (local.get $node)))
        (if (call $sw_u32 (i32.load offset=4 (local.get $node))) (then (return (i32.const 1))))
        (if (call $sw_write (i32.load offset=12 (local.get $node)) (i32.load offset=4 (local.get $node)))
          (then (return (i32.const 1))))
        (if (call $sw_u32 (i32.load offset=8 (local.get $node))) (then (return (i32.const 1))))
        (if (call $sw_write (i32.load offset=16 (local.get $node)) (i32.load offset=8 (local.get $node)))
          (then (return (i32.const 1))))
        (if (call $sw_u64 (i64.load offset=24 (local.get $node))) (then (return (i32.const 1))))
        (local.set $node (i32.load (local.get $node)))
        (br $nodes)))
    (i32.const 0))

  ;; ABI §5.5: version, then the lefts, then the rights.
  (func (export "weir_snapshot") (result i32)
    (if (call $chunk_init) (then (return (i32.const 1))))
    (if (call $sw_u8 (i32.const 1)) (then (return (i32.const 1))))
    (if (call $write_side (call $side (i32.const 0))) (then (return (i32.const 1))))
    (if (call $write_side (call $side (i32.const 1))) (then (return (i32.const 1))))
    (call $sw_flush))

  ;; $read_side reads a side's count and records, appending each.
  (func $read_side (param $side i32) (result i32)
    (local $n i32) (local $len i32) (local $node i32) (local $val i32)
    (if (call $sr_read (i32.const 40) (i32.const 4)) (then (return (i32.const 1))))
    (local.set $n (i32.load (i32.const 40)))
    (block $done
      (loop $records
        (br_if $done (i32.eqz (local.get $n)))
        ;; the node with its key ...
        (if (call $sr_read (i32.const 40) (i32.const 4)) (then (return (i32.const 1))))
        (local.set $len (i32.load (i32.const 40)))
        (local.set $node (call $alloc (i32.add (i32.const 32) (local.get $len))))
        (if (i32.eqz (local.get $node)) (then (return (call $oom))))
        (i32.store offset=4 (local.get $node) (local.get $len))
        (i32.store offset=12 (local.get $node) (i32.add (local.get $node) (i32.const 32)))
        (if (call $sr_read (i32.add (local.get $node) (i32.const 32)) (local.get $len)) (then (return (i32.const 1))))
        ;; ... its value in a block of its own ...
        (if (call $sr_read (i32.const 40) (i32.const 4)) (then (return (i32.const 1))))
        (local.set $len (i32.load (i32.const 40)))
        (local.set $val (call $alloc (local.get $len)))
        (if (i32.eqz (local.get $val)) (then (return (call $oom))))
        (i32.store offset=8 (local.get $node) (local.get $len))
        (i32.store offset=16 (local.get $node) (local.get $val))
        (if (call $sr_read (local.get $val) (local.get $len)) (then (return (i32.const 1))))
        ;; ... and its timestamp
        (if (call $sr_read (i32.add (local.get $node) (i32.const 24)) (i32.const 8)) (then (return (i32.const 1))))
        (call $append (local.get $side) (local.get $node))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $records)))
    (i32.const 0))

  ;; ABI §5.3: read the state back on a fresh instance; an empty stream
  ;; means "no state yet".
  (func (export "weir_restore") (result i32)
    (if (call $chunk_init) (then (return (i32.const 1))))
    (if (i32.eqz (call $sr_fill)) (then (return (i32.const 0))))
    (if (call $sr_read (i32.const 40) (i32.const 1)) (then (return (i32.const 1))))
    (if (i32.ne (i32.load8_u (i32.const 40)) (i32.const 1))
      (then (return (call $fail (i32.const 1152) (i32.const 27)))))
    (if (call $read_side (call $side (i32.const 0))) (then (return (i32.const 1))))
    (if (call $read_side (call $side (i32.const 1))) (then (return (i32.const 1))))
    (call $sr_end_check (i32.const 0))))
