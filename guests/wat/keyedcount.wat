;; keyedcount — a stateful weir operator with keyed state, written by hand
;; against abi/ABI.md.
;;
;; Counts the records of each key: for each input record in order it
;; increments count[key] (the record's key; the value is not looked at)
;; and emits key=the key, value=the new count in decimal ASCII,
;; timestamp=the input record's, on port 0. It takes no config.
;;
;; State, in the keyed layout (ABI §8, the same bytes as every SDK's
;; keyedcount): "WKS1", then one entry per key in ascending bytewise order
;; of the key (a proper prefix first), each laid out as a batch record:
;; u32 key_len, u32 value_len = 8, i64 reserved = 0, key, u64 count;
;; little-endian. With no keys the state is just "WKS1". Because it is
;; keyed, weir can split the counts by key when the operator's parallelism
;; changes on a restore; partition its input by key.
;;
;; The counts live in a singly linked list kept in that same order, as in
;; wordcount.wat, so a snapshot is a walk of the list. Node: next i32 @0,
;; key_len i32 @4, count i64 @8, key bytes @16. The head pointer is at
;; address 64 (so "the link to update" is always an address: 64 or a
;; node's @0). Finding a key walks the list, so a record costs time in
;; proportion to the number of keys before its own: fine for thousands of
;; keys; for hundreds of thousands per subtask, index the nodes by a hash
;; of the key. Build: wat2wasm keyedcount.wat
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
  ;;   [40, 56)      scratch: a state entry's 16-byte header, or its count,
  ;;                 on its way to or from the host
  ;;   [64, 128)     this operator's fixed fields (see below)
  ;;   [1024, 1280)  constant strings (data segments)
  ;;   [1280, 1344)  an error message put together at run time
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
  ;; weir_restore borrows it for keys: no payload is in it then.
  (func $weir_input (export "weir_input") (param $size i32) (result i32)
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
  (data (i32.const 1088) "weir: snapshot_write failed")    ;; 27 bytes

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
    (if (local.get $rc) (then (return (call $fail (i32.const 1088) (i32.const 27)))))
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

  ;; ABI §8: the keyed layout's magic, and keyedcount's own messages.
  (data (i32.const 1120) "WKS1")                                               ;; 4 bytes
  (data (i32.const 1152) "keyedcount: state is not in the keyed state layout") ;; 50 bytes
  (data (i32.const 1216) "keyedcount: a count of ")                            ;; 23 bytes
  (data (i32.const 1248) " bytes, want 8")                                     ;; 14 bytes

  ;; ABI §5: weir_init gets the config bytes; keyedcount takes none.
  (func (export "weir_init") (param $ptr i32) (param $len i32) (result i32)
    (i32.const 0))

  ;; $cmp orders two byte strings bytewise, a proper prefix first:
  ;; negative, zero or positive.
  (func $cmp (param $a i32) (param $alen i32) (param $b i32) (param $blen i32) (result i32)
    (local $i i32) (local $n i32) (local $d i32)
    (local.set $n (select (local.get $alen) (local.get $blen) (i32.lt_u (local.get $alen) (local.get $blen))))
    (block $equal_prefix
      (loop $bytes
        (br_if $equal_prefix (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $d (i32.sub (i32.load8_u (i32.add (local.get $a) (local.get $i)))
                               (i32.load8_u (i32.add (local.get $b) (local.get $i)))))
        (if (local.get $d) (then (return (local.get $d))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $bytes)))
    (i32.sub (local.get $alen) (local.get $blen)))

  ;; $node_for returns the key's node, inserting it with count 0 at its
  ;; place in the order if it is new; 0 when memory runs out. The walk
  ;; starts at link: 64 (the head) or a node whose key sorts before this
  ;; one (weir_restore's shortcut).
  (func $node_for (param $link i32) (param $k i32) (param $len i32) (result i32)
    (local $node i32) (local $c i32) (local $new i32)
    (block $insert
      (loop $walk
        (local.set $node (i32.load (local.get $link)))
        (br_if $insert (i32.eqz (local.get $node)))            ;; end of list
        (local.set $c (call $cmp (i32.add (local.get $node) (i32.const 16)) (i32.load offset=4 (local.get $node))
                                 (local.get $k) (local.get $len)))
        (if (i32.eqz (local.get $c)) (then (return (local.get $node))))  ;; found
        (br_if $insert (i32.gt_s (local.get $c) (i32.const 0)))  ;; passed its place
        (local.set $link (local.get $node))                    ;; node's next is @0
        (br $walk)))
    ;; insert a new node between link and node
    (local.set $new (call $alloc (i32.add (i32.const 16) (local.get $len))))
    (if (i32.eqz (local.get $new)) (then (return (i32.const 0))))
    (i32.store (local.get $new) (local.get $node))
    (i32.store offset=4 (local.get $new) (local.get $len))
    (i64.store offset=8 (local.get $new) (i64.const 0))
    (memory.copy (i32.add (local.get $new) (i32.const 16)) (local.get $k) (local.get $len))
    (i32.store (local.get $link) (local.get $new))
    (local.get $new))

  ;; $decimal writes v in decimal ASCII right-aligned in [16, 36) and
  ;; returns the address of its first digit (the length is 36 - address).
  (func $decimal (param $v i64) (result i32)
    (local $p i32)
    (local.set $p (i32.const 36))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 0x30) (i32.wrap_i64 (i64.rem_u (local.get $v) (i64.const 10)))))
      (local.set $v (i64.div_u (local.get $v) (i64.const 10)))
      (br_if $digits (i64.ne (local.get $v) (i64.const 0))))
    (local.get $p))

  ;; $count_key counts one record of key k and emits its new count.
  (func $count_key (param $k i32) (param $len i32) (param $ts i64) (result i32)
    (local $node i32) (local $digits i32) (local $dlen i32) (local $dst i32)
    (local.set $node (call $node_for (i32.const 64) (local.get $k) (local.get $len)))
    (if (i32.eqz (local.get $node)) (then (return (call $oom))))
    (i64.store offset=8 (local.get $node) (i64.add (i64.load offset=8 (local.get $node)) (i64.const 1)))
    (local.set $digits (call $decimal (i64.load offset=8 (local.get $node))))
    (local.set $dlen (i32.sub (i32.const 36) (local.get $digits)))
    (local.set $dst (call $out_record (local.get $k) (local.get $len) (local.get $dlen) (local.get $ts)))
    (if (i32.eqz (local.get $dst)) (then (return (call $oom))))
    (memory.copy (local.get $dst) (local.get $digits) (local.get $dlen))
    (i32.const 0))

  ;; ABI §5.4: one record batch (ABI §3) per call.
  ;;   batch  := count:u32  record * count
  ;;   record := key_len:u32  value_len:u32  timestamp:i64  key  value
  (func (export "weir_process") (param $port i32) (param $ptr i32) (param $len i32) (result i32)
    (local $n i32) (local $i i32) (local $klen i32) (local $key i32)
    (local.set $n (i32.load (local.get $ptr)))
    (local.set $ptr (i32.add (local.get $ptr) (i32.const 4)))
    (block $done
      (loop $records
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (i32.store (i32.const 8) (local.get $i))               ;; cursor = i
        (local.set $klen (i32.load (local.get $ptr)))
        (local.set $key (i32.add (local.get $ptr) (i32.const 16)))
        (if (call $count_key (local.get $key) (local.get $klen) (i64.load offset=8 (local.get $ptr)))
          (then (return (call $finish (i32.const 1)))))
        ;; next record starts after the 16-byte header, key and value
        (local.set $ptr (i32.add (i32.add (local.get $key) (local.get $klen))
                                 (i32.load offset=4 (local.get $ptr))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $records)))
    (call $finish (i32.const 0)))

  ;; ABI §5.5, §8: write the state stream: "WKS1", then the list in order,
  ;; each node as an entry whose value is its count. The header is that of
  ;; a batch record (ABI §3) with the timestamp's place reserved (0); the
  ;; count goes out as the node holds it, a u64 in little-endian order.
  (func (export "weir_snapshot") (result i32)
    (local $node i32)
    (if (call $chunk_init) (then (return (i32.const 1))))
    (if (call $sw_write (i32.const 1120) (i32.const 4)) (then (return (i32.const 1))))
    (local.set $node (i32.load (i32.const 64)))
    (block $done
      (loop $entries
        (br_if $done (i32.eqz (local.get $node)))
        (i32.store (i32.const 40) (i32.load offset=4 (local.get $node)))  ;; key_len
        (i32.store (i32.const 44) (i32.const 8))                         ;; value_len
        (i64.store (i32.const 48) (i64.const 0))                         ;; reserved
        (if (call $sw_write (i32.const 40) (i32.const 16)) (then (return (i32.const 1))))
        (if (call $sw_write (i32.add (local.get $node) (i32.const 16)) (i32.load offset=4 (local.get $node)))
          (then (return (i32.const 1))))
        (if (call $sw_write (i32.add (local.get $node) (i32.const 8)) (i32.const 8))
          (then (return (i32.const 1))))
        (local.set $node (i32.load (local.get $node)))
        (br $entries)))
    (call $sw_flush))

  ;; $bad_count fails a restore on an entry whose value is not 8 bytes:
  ;; "keyedcount: a count of N bytes, want 8", put together at 1280.
  (func $bad_count (param $vlen i32) (result i32)
    (local $digits i32) (local $dlen i32)
    (local.set $digits (call $decimal (i64.extend_i32_u (local.get $vlen))))
    (local.set $dlen (i32.sub (i32.const 36) (local.get $digits)))
    (memory.copy (i32.const 1280) (i32.const 1216) (i32.const 23))
    (memory.copy (i32.const 1303) (local.get $digits) (local.get $dlen))
    (memory.copy (i32.add (i32.const 1303) (local.get $dlen)) (i32.const 1248) (i32.const 14))
    (call $fail (i32.const 1280) (i32.add (i32.const 37) (local.get $dlen))))

  ;; ABI §5.3, §8: read the state back. An empty stream means "no state
  ;; yet"; anything else must start with "WKS1", and its entries run to the
  ;; end of the stream (a cut entry fails in $sr_read). The counts are
  ;; replaced, not added to.
  ;;
  ;; A stream this module wrote is sorted, so each entry goes right after
  ;; the previous one and the walk starts there. After a rescale the host
  ;; hands over the entries of several old subtasks one after another (ABI
  ;; §8): each part sorted, the whole not, so an entry that does not sort
  ;; after the previous one is placed by a walk from the head. A key seen
  ;; twice keeps its last count.
  (func (export "weir_restore") (result i32)
    (local $klen i32) (local $vlen i32) (local $key i32) (local $prev i32) (local $link i32) (local $node i32)
    (i32.store (i32.const 64) (i32.const 0))                   ;; no counts
    (if (call $chunk_init) (then (return (i32.const 1))))
    (if (i32.eqz (call $sr_fill)) (then (return (i32.const 0))))
    (if (call $sr_read (i32.const 40) (i32.const 4)) (then (return (i32.const 1))))
    (if (i32.ne (i32.load (i32.const 40)) (i32.load (i32.const 1120)))
      (then (return (call $fail (i32.const 1152) (i32.const 50)))))
    (block $done
      (loop $entries
        (br_if $done (i32.eqz (call $sr_fill)))                ;; the end, between entries
        ;; the header: key_len @40, value_len @44, reserved @48 (ignored)
        (if (call $sr_read (i32.const 40) (i32.const 16)) (then (return (i32.const 1))))
        (local.set $klen (i32.load (i32.const 40)))
        (local.set $vlen (i32.load (i32.const 44)))
        (if (i32.ne (local.get $vlen) (i32.const 8)) (then (return (call $bad_count (local.get $vlen)))))
        ;; the key into the input buffer, the count into the scratch at 40
        (local.set $key (call $weir_input (local.get $klen)))
        (if (i32.eqz (local.get $key)) (then (return (call $oom))))
        (if (call $sr_read (local.get $key) (local.get $klen)) (then (return (i32.const 1))))
        (if (call $sr_read (i32.const 40) (i32.const 8)) (then (return (i32.const 1))))
        ;; start the walk after the previous entry if this key sorts after it
        (local.set $link (i32.const 64))
        (if (local.get $prev)
          (then
            (if (i32.lt_s (call $cmp (i32.add (local.get $prev) (i32.const 16)) (i32.load offset=4 (local.get $prev))
                                     (local.get $key) (local.get $klen))
                          (i32.const 0))
              (then (local.set $link (local.get $prev))))))
        (local.set $node (call $node_for (local.get $link) (local.get $key) (local.get $klen)))
        (if (i32.eqz (local.get $node)) (then (return (call $oom))))
        (i64.store offset=8 (local.get $node) (i64.load (i32.const 40)))
        (local.set $prev (local.get $node))
        (br $entries)))
    (i32.const 0)))
