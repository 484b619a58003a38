// The AssemblyScript guest SDK for weir operators (ABI version 1, abi/ABI.md).
//
// An operator extends Operator and is registered from the entry file, which
// also re-exports the ABI's exports:
//
//   import { Batch, Emitter, Operator, register } from "weir";
//   export * from "weir/exports";
//
//   class Passthrough extends Operator {
//     process(port: i32, input: Batch, out: Emitter): string | null {
//       while (input.next())
//         out.emit(0, input.keyPtr, input.keyLen, input.valuePtr, input.valueLen, input.timestamp);
//       return null;
//     }
//   }
//   register(new Passthrough());
//
// Callbacks return null on success or the error message the host reports.
// The SDK owns the input buffer, walks batches in place (records are pointer
// + length into the input, valid until the callback returns), keeps the
// record cursor the host reads when a call traps, collects each output port's
// records into one batch emitted once per call, and streams snapshots in
// 64 KiB chunks (KeyedStateWriter and readKeyedState for state in the keyed
// layout weir can redistribute on a rescale, abi/ABI.md §8; ValueWriter and
// ValueReader to build and read each entry's value, a read past its end
// failing the call). Build with asc
// 0.28 (see guests/build.sh); --exportStart _initialize has the host run the
// top-level code (register, the constructor) under its call deadline. The
// entry file imports this SDK as the package "weir"; --path names the
// directory that holds it (weir/index.ts):
//
//   asc op.ts -O3 --noAssert --exportStart _initialize \
//       --path WEIR/guests/assemblyscript --use abort=~lib/weir/index/weirAbort -o op.wasm
//
// weir builds an entry file it is given so itself (guests/README.md).

@external("weir", "emit")
declare function hostEmit(port: i32, ptr: usize, len: i32): i32;
@external("weir", "error")
declare function hostError(ptr: usize, len: i32): void;
@external("weir", "log")
declare function hostLog(level: i32, ptr: usize, len: i32): void;
@external("weir", "snapshot_write")
declare function hostSnapshotWrite(ptr: usize, len: i32): i32;
@external("weir", "restore_read")
declare function hostRestoreRead(ptr: usize, cap: i32): i32;

/** The size of snapshot chunks handed to the host and restore chunks asked for. */
export const CHUNK_SIZE: i32 = 65536;

/** Bounds the output port numbers an Emitter accepts. */
export const MAX_PORTS: i32 = 1024;

/** Log levels for log(). */
export const LOG_DEBUG: i32 = -1;
export const LOG_INFO: i32 = 0;
export const LOG_WARN: i32 = 1;
export const LOG_ERROR: i32 = 2;

/** The i32 the host reads on a trap: the index of the record being processed. */
export const cursorAddr: usize = memory.data(4);

/** Sends one line to the host log. */
export function log(level: i32, msg: string): void {
  const b = String.UTF8.encode(msg);
  hostLog(level, changetype<usize>(b), b.byteLength);
}

/** Sets the message the host reports for the failing call. */
export function setError(msg: string): void {
  const b = String.UTF8.encode(msg);
  hostError(changetype<usize>(b), b.byteLength);
}

/** Compares two byte strings bytewise, a proper prefix first: <0, 0, >0. */
export function compareBytes(a: usize, alen: i32, b: usize, blen: i32): i32 {
  const n = alen < blen ? alen : blen;
  for (let i = 0; i < n; i++) {
    const x = load<u8>(a + i), y = load<u8>(b + i);
    if (x != y) return <i32>x - <i32>y;
  }
  return alen - blen;
}

/** Copies len bytes at ptr into a new Uint8Array. */
export function copyBytes(ptr: usize, len: i32): Uint8Array {
  const a = new Uint8Array(len);
  memory.copy(a.dataStart, ptr, len);
  return a;
}

/** The len bytes at ptr decoded as UTF-8 (invalid bytes become U+FFFD): a
 * key or value readKeyedState hands its callback that putString wrote. */
export function utf8String(ptr: usize, len: i32): string {
  return String.UTF8.decodeUnsafe(ptr, <usize>len);
}

/** One input record batch, walked in place. After next() returns true the
 * current record's fields are set; they point into the input buffer. */
export class Batch {
  /** Records in the batch. */
  count: i32 = 0;
  /** Index of the current record, -1 before the first next(). */
  index: i32 = -1;
  keyPtr: usize = 0;
  keyLen: i32 = 0;
  valuePtr: usize = 0;
  valueLen: i32 = 0;
  /** Milliseconds since the Unix epoch, 0 when unknown. */
  timestamp: i64 = 0;
  private pos: usize = 0;

  /** Starts walking the batch at ptr (the host has validated it). */
  reset(ptr: usize): void {
    this.count = load<i32>(ptr);
    this.index = -1;
    this.pos = ptr + 4;
  }

  /** Advances to the next record; false at the end. */
  @inline next(): bool {
    // Through the object's address: each use of a managed reference costs a
    // store to AssemblyScript's shadow stack, and this runs once a record.
    const b = changetype<usize>(this);
    const index = load<i32>(b, offsetof<Batch>("index")) + 1;
    if (index >= load<i32>(b, offsetof<Batch>("count"))) {
      store<i32>(cursorAddr, -1);
      return false;
    }
    const p = load<usize>(b, offsetof<Batch>("pos"));
    const keyLen = load<i32>(p);
    const valueLen = load<i32>(p, 4);
    const keyPtr = p + 16;
    const valuePtr = keyPtr + <usize>keyLen;
    store<i32>(b, index, offsetof<Batch>("index"));
    store<i32>(b, keyLen, offsetof<Batch>("keyLen"));
    store<i32>(b, valueLen, offsetof<Batch>("valueLen"));
    store<i64>(b, load<i64>(p, 8), offsetof<Batch>("timestamp"));
    store<usize>(b, keyPtr, offsetof<Batch>("keyPtr"));
    store<usize>(b, valuePtr, offsetof<Batch>("valuePtr"));
    store<usize>(b, valuePtr + <usize>valueLen, offsetof<Batch>("pos"));
    store<i32>(cursorAddr, index);
    return true;
  }

  /** A copy of the current key. */
  key(): Uint8Array {
    return copyBytes(this.keyPtr, this.keyLen);
  }

  /** A copy of the current value. */
  value(): Uint8Array {
    return copyBytes(this.valuePtr, this.valueLen);
  }

  /** The current key decoded as UTF-8 (invalid bytes become U+FFFD). */
  keyString(): string {
    return String.UTF8.decodeUnsafe(this.keyPtr, <usize>this.keyLen);
  }

  /** The current value decoded as UTF-8 (invalid bytes become U+FFFD). */
  valueString(): string {
    return String.UTF8.decodeUnsafe(this.valuePtr, <usize>this.valueLen);
  }
}

/** A growable byte buffer in unmanaged memory. */
class Buf {
  ptr: usize = 0;
  len: i32 = 0;
  cap: i32 = 0;

  /** Makes room for more bytes and returns where they go. */
  grow(more: i32): usize {
    const need = this.len + more;
    if (need > this.cap) {
      let cap = this.cap ? this.cap : 1024;
      while (cap < need) cap <<= 1;
      this.ptr = this.ptr ? heap.realloc(this.ptr, cap) : heap.alloc(cap);
      this.cap = cap;
    }
    const at = this.ptr + <usize>this.len;
    this.len = need;
    return at;
  }
}

/** Copies n bytes from src to dst (which do not overlap). Up to 64 bytes go
 * as 8-byte loads and stores, reading and writing only the n bytes: on the
 * host (wazero) every memory.copy is a call to memmove, which costs more than
 * the copy of a short key or value. */
@inline function copyShort(dst: usize, src: usize, n: i32): void {
  if (<u32>n > 64) {
    memory.copy(dst, src, <usize>n);
  } else if (n >= 8) {
    // Whole words, then the last 8 bytes (overlapping what is copied).
    const last = <usize>(n - 8);
    for (let i: usize = 0; i < last; i += 8) store<u64>(dst + i, load<u64>(src + i));
    store<u64>(dst + last, load<u64>(src + last));
  } else {
    let i: usize = 0;
    if (n & 4) { store<u32>(dst, load<u32>(src)); i = 4; }
    if (n & 2) { store<u16>(dst + i, load<u16>(src + i)); i += 2; }
    if (n & 1) store<u8>(dst + i, load<u8>(src + i));
  }
}

// An Emitter keeps one 16-byte slot per output port it has seen, in
// unmanaged memory (the per-record path touches no managed object but the
// Emitter itself): the batch's buffer, its length and capacity, and its
// record count.
const SLOT_PTR = 0;
const SLOT_LEN = 4;
const SLOT_CAP = 8;
const SLOT_COUNT = 12;
const SLOT_SIZE = 16;

/** Collects output records; each port's records travel to the host as one
 * batch when the callback returns. */
export class Emitter {
  private slots: usize = 0;
  private nslots: i32 = 0;
  private used: Array<i32> = [];
  private scratch: Buf = new Buf();
  /** The first error (a bad port), reported when the callback returns. */
  error: string | null = null;

  /** Appends a record whose value is valueLen bytes the caller fills in at
   * the returned address. It is valid until the next emit: a later emit may
   * move the batch, so fill one record's value before emitting another. */
  @inline emitAlloc(port: i32, keyPtr: usize, keyLen: i32, valueLen: i32, ts: i64): usize {
    // The common case inline: a port already in use this call, with room
    // for the record. Everything else, negative lengths included, goes
    // through emitSlow.
    if (<u32>port < <u32>this.nslots) {
      const s = this.slots + (<usize>port << 4);
      const len = load<i32>(s, SLOT_LEN);
      const size = <u64>16 + <u64><u32>keyLen + <u64><u32>valueLen;
      if (len != 0 && <u64><u32>len + size <= <u64>load<u32>(s, SLOT_CAP)) {
        const p = load<usize>(s, SLOT_PTR) + <usize>len;
        store<u64>(p, <u64><u32>keyLen | (<u64><u32>valueLen << 32));
        store<i64>(p, ts, 8);
        copyShort(p + 16, keyPtr, keyLen);
        store<i32>(s, len + <i32>size, SLOT_LEN);
        store<i32>(s, load<i32>(s, SLOT_COUNT) + 1, SLOT_COUNT);
        return p + 16 + <usize>keyLen;
      }
    }
    return this.emitSlow(port, keyPtr, keyLen, valueLen, ts);
  }

  /** emitAlloc for a new or bad port, the first record on a port this
   * call, or a batch buffer that must grow. */
  private emitSlow(port: i32, keyPtr: usize, keyLen: i32, valueLen: i32, ts: i64): usize {
    if (port < 0 || port >= MAX_PORTS) {
      if (this.error === null) this.error = "weir: emit to output port " + port.toString() + ": out of range";
      this.scratch.len = 0;
      return this.scratch.grow(valueLen);
    }
    if (port >= this.nslots) {
      const n = port + 1;
      const old = <usize>this.nslots * SLOT_SIZE;
      const slots = this.slots ? heap.realloc(this.slots, <usize>n * SLOT_SIZE) : heap.alloc(<usize>n * SLOT_SIZE);
      memory.fill(slots + old, 0, <usize>n * SLOT_SIZE - old);
      this.slots = slots;
      this.nslots = n;
    }
    const s = this.slots + (<usize>port << 4);
    if (load<i32>(s, SLOT_LEN) == 0) {
      slotGrow(s, 4); // the count, written at flush
      this.used.push(port);
    }
    store<i32>(s, load<i32>(s, SLOT_COUNT) + 1, SLOT_COUNT);
    const p = slotGrow(s, 16 + keyLen + valueLen);
    store<i32>(p, keyLen);
    store<i32>(p, valueLen, 4);
    store<i64>(p, ts, 8);
    memory.copy(p + 16, keyPtr, keyLen);
    return p + 16 + <usize>keyLen;
  }

  /** Appends one record; key and value are copied. */
  @inline emit(port: i32, keyPtr: usize, keyLen: i32, valuePtr: usize, valueLen: i32, ts: i64): void {
    const v = this.emitAlloc(port, keyPtr, keyLen, valueLen, ts);
    copyShort(v, valuePtr, valueLen);
  }

  /** Appends one record given as arrays. */
  emitBytes(port: i32, key: Uint8Array, value: Uint8Array, ts: i64): void {
    this.emit(port, key.dataStart, key.length, value.dataStart, value.length, ts);
  }

  /** Appends one record whose value is a string, encoded as UTF-8; the key
   * is given by pointer and length (e.g. the input's keyPtr, keyLen). */
  emitString(port: i32, keyPtr: usize, keyLen: i32, value: string, ts: i64): void {
    const n = String.UTF8.byteLength(value);
    String.UTF8.encodeUnsafe(changetype<usize>(value), value.length, this.emitAlloc(port, keyPtr, keyLen, n, ts));
  }

  /** Emits each used port's batch when err is null; empties the emitter.
   * Returns the call's error, if any. */
  finish(err: string | null): string | null {
    if (err === null) err = this.error;
    for (let i = 0; i < this.used.length; i++) {
      const port = this.used[i];
      const s = this.slots + (<usize>port << 4);
      if (err === null) {
        const ptr = load<usize>(s, SLOT_PTR);
        store<i32>(ptr, load<i32>(s, SLOT_COUNT));
        const rc = hostEmit(port, ptr, load<i32>(s, SLOT_LEN));
        if (rc != 0) err = "weir: emit to output port " + port.toString() + " returned " + rc.toString();
      }
      store<i32>(s, 0, SLOT_LEN);
      store<i32>(s, 0, SLOT_COUNT);
    }
    this.used.length = 0;
    this.error = null;
    return err;
  }
}

/** Buf.grow for an Emitter slot at s: makes room for more bytes in its
 * batch and returns where they go. */
function slotGrow(s: usize, more: i32): usize {
  const len = load<i32>(s, SLOT_LEN);
  const need = len + more;
  let cap = load<i32>(s, SLOT_CAP);
  if (need > cap) {
    cap = cap ? cap : 1024;
    while (cap < need) cap <<= 1;
    const ptr = load<usize>(s, SLOT_PTR);
    store<usize>(s, ptr ? heap.realloc(ptr, cap) : heap.alloc(cap), SLOT_PTR);
    store<i32>(s, cap, SLOT_CAP);
  }
  store<i32>(s, need, SLOT_LEN);
  return load<usize>(s, SLOT_PTR) + <usize>len;
}

/** The error of a write to a StateWriter after a KeyedStateWriter started
 * on it, as the other SDKs say it. */
const ERR_STATE_AFTER_KEYED = "weir: other state after KeyedStateWriter: the keyed layout is the whole snapshot (write every entry with the KeyedStateWriter, nothing with the StateWriter itself)";

/** The error of a KeyedStateWriter made on a StateWriter that has one
 * already, as the other SDKs say it. */
const ERR_SECOND_KEYED_WRITER = "weir: a second KeyedStateWriter in one snapshot: the keyed layout is the whole snapshot (make one and put every entry with it)";

/** Streams a snapshot to the host in CHUNK_SIZE chunks. After a failure
 * every write is ignored and error says why. */
export class StateWriter {
  private buf: usize = heap.alloc(CHUNK_SIZE);
  private len: i32 = 0;
  private flushed: bool = false;
  /** A KeyedStateWriter started: only its entries may follow. */
  private keyed: bool = false;
  error: string | null = null;

  /** Whether anything was written yet. */
  get started(): bool {
    return this.len > 0 || this.flushed;
  }

  /** Whether a KeyedStateWriter started on this writer. */
  get keyedStarted(): bool {
    return this.keyed;
  }

  /** Appends len bytes at ptr to the state stream. After a KeyedStateWriter
   * started on this writer it fails the snapshot instead: the keyed layout
   * is the whole state, and bytes after (or between) its entries would make
   * a state in neither that layout nor one of the operator's own. */
  write(ptr: usize, len: i32): void {
    if (this.keyed && len > 0 && this.error === null) this.error = ERR_STATE_AFTER_KEYED;
    this.append(ptr, len);
  }

  /** Appends len bytes at ptr for a KeyedStateWriter, whose bytes, from its
   * magic on, are the only ones write lets follow. For KeyedStateWriter,
   * not for operators. */
  writeKeyed(ptr: usize, len: i32): void {
    this.keyed = true;
    this.append(ptr, len);
  }

  private append(ptr: usize, len: i32): void {
    while (len > 0 && this.error === null) {
      const room = CHUNK_SIZE - this.len;
      const n = len < room ? len : room;
      memory.copy(this.buf + <usize>this.len, ptr, n);
      this.len += n;
      ptr += n;
      len -= n;
      if (this.len == CHUNK_SIZE) this.flush();
    }
  }

  writeU8(v: u8): void {
    const p = memory.data(8);
    store<u8>(p, v);
    this.write(p, 1);
  }

  writeU32(v: u32): void {
    const p = memory.data(8);
    store<u32>(p, v);
    this.write(p, 4);
  }

  writeU64(v: u64): void {
    const p = memory.data(8);
    store<u64>(p, v);
    this.write(p, 8);
  }

  writeI64(v: i64): void {
    this.writeU64(<u64>v);
  }

  /** Writes a u32 length followed by the bytes. */
  writeBytes(ptr: usize, len: i32): void {
    this.writeU32(<u32>len);
    this.write(ptr, len);
  }

  /** Hands buffered bytes to the host. */
  flush(): void {
    if (this.len == 0 || this.error !== null) return;
    const rc = hostSnapshotWrite(this.buf, this.len);
    this.len = 0;
    this.flushed = true;
    if (rc != 0) this.error = "weir: snapshot_write returned " + rc.toString();
  }

  /** Releases the chunk buffer. */
  free(): void {
    heap.free(this.buf);
  }
}

/** Reads state back from the host in CHUNK_SIZE chunks. A read past the end
 * sets error, and every later read returns zeros. */
export class StateReader {
  private buf: usize = heap.alloc(CHUNK_SIZE);
  private len: i32 = 0;
  private pos: i32 = 0;
  private eof: bool = false;
  error: string | null = null;

  /** Makes unread bytes available; returns how many, 0 at the end. */
  private fill(): i32 {
    if (this.pos < this.len || this.eof) return this.len - this.pos;
    const n = hostRestoreRead(this.buf, CHUNK_SIZE);
    this.pos = 0;
    this.len = n > 0 ? n : 0;
    if (n <= 0) this.eof = true;
    if (n < 0 && this.error === null) this.error = "weir: restore_read returned " + n.toString();
    return this.len;
  }

  /** Reports whether the state stream is exhausted. */
  atEnd(): bool {
    return this.fill() == 0;
  }

  /** Reads exactly len bytes into ptr. */
  read(ptr: usize, len: i32): void {
    while (len > 0) {
      const have = this.error === null ? this.fill() : 0;
      if (have == 0) {
        if (this.error === null) this.error = "weir: state ended early";
        memory.fill(ptr, 0, len);
        return;
      }
      const n = len < have ? len : have;
      memory.copy(ptr, this.buf + <usize>this.pos, n);
      this.pos += n;
      ptr += n;
      len -= n;
    }
  }

  readU8(): u8 {
    const p = memory.data(8);
    this.read(p, 1);
    return load<u8>(p);
  }

  readU32(): u32 {
    const p = memory.data(8);
    this.read(p, 4);
    return load<u32>(p);
  }

  readU64(): u64 {
    const p = memory.data(8);
    this.read(p, 8);
    return load<u64>(p);
  }

  readI64(): i64 {
    return <i64>this.readU64();
  }

  /** Reads up to cap bytes into ptr; returns how many, 0 at the end of the
   * stream (or after a failed read, which sets error). */
  readSome(ptr: usize, cap: i32): i32 {
    if (cap <= 0 || this.error !== null) return 0;
    const have = this.fill();
    const n = cap < have ? cap : have;
    memory.copy(ptr, this.buf + <usize>this.pos, n);
    this.pos += n;
    return n;
  }

  /** Reads a u32 length followed by that many bytes. The array grows as
   * the bytes arrive, not to the length up front: a length past the end of
   * the stream (a corrupt state, or one in another format) sets error to
   * "weir: state ended early" instead of aborting with "Invalid length" or
   * trapping for memory. */
  readBytes(): Uint8Array {
    const n = this.readU32();
    if (this.error !== null) return new Uint8Array(0);
    let cap: u32 = n < <u32>CHUNK_SIZE ? n : <u32>CHUNK_SIZE;
    let a = new Uint8Array(<i32>cap);
    let got: u32 = 0;
    while (got < n) {
      if (got == cap) {
        cap = cap > n / 2 ? n : cap * 2;
        const b = new Uint8Array(<i32>cap);
        memory.copy(b.dataStart, a.dataStart, got);
        a = b;
      }
      const k = this.readSome(a.dataStart + <usize>got, <i32>(cap - got));
      if (k == 0) {
        if (this.error === null) this.error = "weir: state ended early";
        return new Uint8Array(0);
      }
      got += <u32>k;
    }
    return a;
  }

  /** Releases the chunk buffer. */
  free(): void {
    heap.free(this.buf);
  }
}

/** Writes an operator's state in the keyed layout (abi/ABI.md §8, "Keyed
 * state"): the magic "WKS1", then one entry per put, laid out as a batch
 * record (u32 key_len, u32 value_len, i64 0, key, value; little-endian).
 * weir can then redistribute the state by key when the operator's
 * parallelism changes on a restore (weir job restore -spec): each new subtask
 * gets the entries whose key it will receive records for. Use it only when
 * every entry's key is the key the operator's records arrive by, with its
 * inputs partitioned by key. Read it back with readKeyedState.
 *
 *   snapshot(w: StateWriter): string | null {
 *     const kw = new KeyedStateWriter(w);
 *     for (let i = 0; i < this.keys.length; i++)
 *       kw.putBytes(this.keys[i], this.values[i]);
 *     return null;
 *   }
 *
 * Entries go through w, so its error records a failed write (the snapshot
 * export reports it) and its chunks reach the host when snapshot returns;
 * there is nothing to close. */
export class KeyedStateWriter {
  /** Starts a keyed state on w: writes the magic. Write nothing else to w,
   * before or after: the keyed layout is the whole state, so after other
   * state (a version byte) or another KeyedStateWriter on w it fails the
   * snapshot, and so does w.write after it. */
  constructor(private w: StateWriter) {
    if (w.keyedStarted) {
      // A second magic among the first writer's entries.
      if (w.error === null) w.error = ERR_SECOND_KEYED_WRITER;
    } else if (w.started) {
      // Every later write is ignored once error is set.
      if (w.error === null)
        w.error = "weir: KeyedStateWriter after other state: the keyed layout is the whole snapshot (create it first, with no version byte before it)";
    } else {
      const magic = memory.data<u8>([0x57, 0x4b, 0x53, 0x31]); // "WKS1"
      w.writeKeyed(magic, 4);
    }
  }

  /** Writes the entry for the keyLen bytes at keyPtr, its value the valueLen
   * bytes at valuePtr. Each key at most once. */
  put(keyPtr: usize, keyLen: i32, valuePtr: usize, valueLen: i32): void {
    const h = memory.data(16);
    store<i32>(h, keyLen);
    store<i32>(h, valueLen, 4);
    store<i64>(h, 0, 8); // reserved: a batch record's timestamp
    this.w.writeKeyed(h, 16);
    this.w.writeKeyed(keyPtr, keyLen);
    this.w.writeKeyed(valuePtr, valueLen);
  }

  /** Writes the entry for key, its value given as an array. */
  putBytes(key: Uint8Array, value: Uint8Array): void {
    this.put(key.dataStart, key.length, value.dataStart, value.length);
  }

  /** Writes the entry for key, its value a string too, each encoded as
   * UTF-8 (the bytes Go's Put([]byte(s), ...) and Rust's put(s.as_bytes(),
   * ...) write); read them back with utf8String. */
  putString(key: string, value: string): void {
    const k = String.UTF8.encode(key), v = String.UTF8.encode(value);
    this.put(changetype<usize>(k), k.byteLength, changetype<usize>(v), v.byteLength);
  }

  /** The first failed write's message, or null (the StateWriter's error). */
  get error(): string | null {
    return this.w.error;
  }
}

/** The error of readKeyedState on a state in another layout: one a build of
 * the operator from before it wrote keyed state took, as the other SDKs say
 * it. */
export const ERR_NOT_KEYED_STATE = "weir: the state to restore is in a layout of its own, and this build of the operator reads keyed state (abi/ABI.md §8): restore with the build that wrote it, or have this build read the old layout too (state that does not start with \"WKS1\")";

/** Reads the rest of r, a state written with KeyedStateWriter (also one weir
 * redistributed after a rescale), and calls fn(ctx, keyPtr, keyLen,
 * valuePtr, valueLen) for each entry in order; the bytes are valid during
 * the call. An empty state has no entries. Returns null, the first error fn
 * returns, or why the state is not keyed state (no "WKS1" magic, which
 * ERR_NOT_KEYED_STATE says how to restore, an entry passing the end, a
 * failed read).
 *
 * AssemblyScript closures cannot capture locals, so what fn needs travels in
 * ctx, typically the operator:
 *
 *   restore(r: StateReader): string | null {
 *     return readKeyedState<Counts>(r, this,
 *       (c: Counts, k: usize, kl: i32, v: usize, vl: i32): string | null => {
 *         if (vl != 8) return "counts: a count of " + vl.toString() + " bytes, want 8";
 *         c.set(k, kl, load<u64>(v));
 *         return null;
 *       });
 *   }
 *
 * A load past valuePtr + valueLen reads whatever follows the value in
 * memory: check valueLen first, as above, or read the value with a
 * ValueReader(valuePtr, valueLen), whose reads past its end fail the call. */
export function readKeyedState<T>(
  r: StateReader, ctx: T,
  fn: (ctx: T, keyPtr: usize, keyLen: i32, valuePtr: usize, valueLen: i32) => string | null,
): string | null {
  // The whole stream, in unmanaged memory freed before returning.
  const b = new Buf();
  for (;;) {
    const at = b.grow(CHUNK_SIZE);
    const n = r.readSome(at, CHUNK_SIZE);
    b.len -= CHUNK_SIZE - n;
    if (n == 0) break;
  }
  let err = r.error;
  if (err === null && b.len > 0) err = keyedEntries<T>(b.ptr, b.len, ctx, fn);
  if (b.ptr) heap.free(b.ptr);
  return err;
}

/** Walks the len bytes of keyed state at ptr for readKeyedState. */
function keyedEntries<T>(
  ptr: usize, len: i32, ctx: T,
  fn: (ctx: T, keyPtr: usize, keyLen: i32, valuePtr: usize, valueLen: i32) => string | null,
): string | null {
  if (len < 4 || load<u32>(ptr) != 0x31534b57) // "WKS1" read little-endian
    return ERR_NOT_KEYED_STATE;
  for (let off: i32 = 4; off < len; ) {
    if (len - off < 16)
      return "weir: keyed state: entry header at byte " + off.toString() + " passes the end";
    const kl = load<u32>(ptr + <usize>off), vl = load<u32>(ptr + <usize>off, 4);
    const start = <u64>off + 16;
    if (start + <u64>kl + <u64>vl > <u64>len)
      return "weir: keyed state: entry at byte " + off.toString() + ": key of " + kl.toString() +
        " and value of " + vl.toString() + " bytes pass the end";
    const k = ptr + <usize>start, v = k + <usize>kl;
    const err = fn(ctx, k, <i32>kl, v, <i32>vl);
    if (err !== null) return err;
    off = <i32>(start + <u64>kl + <u64>vl);
  }
  return null;
}

/** Builds one value, for a KeyedStateWriter entry (or a StateWriter, or a
 * record), in a growable buffer: fixed-size numbers little-endian, byte
 * strings and strings as a u32 length then the bytes (UTF-8 for strings),
 * the layout of StateWriter's writeU32/writeBytes. Read it back with
 * ValueReader. Each write returns the writer, so a value is one expression;
 * reset() empties it to build the next value in the same buffer:
 *
 *   const v = new ValueWriter();
 *   for (let i = 0; i < keys.length; i++) {
 *     v.reset().writeU8(2).writeU64(counts[i]).writeString(names[i]); // version 2 first
 *     kw.put(keys[i].dataStart, keys[i].length, v.ptr, v.length);
 *   }
 *
 * (To a StateWriter: w.write(v.ptr, v.length), or w.writeBytes(v.ptr,
 * v.length) to have a length before it; to an Emitter: out.emit(port,
 * keyPtr, keyLen, v.ptr, v.length, ts).) ptr is valid until the next write
 * or reset (a write may move the bytes). */
export class ValueWriter {
  private buf: ArrayBuffer;
  private len: i32 = 0;

  /** A writer whose buffer holds capacity bytes before it grows. */
  constructor(capacity: i32 = 64) {
    this.buf = new ArrayBuffer(capacity > 0 ? capacity : 64);
  }

  /** Where the value's bytes start. */
  get ptr(): usize {
    return changetype<usize>(this.buf);
  }

  /** The value's length in bytes. */
  get length(): i32 {
    return this.len;
  }

  /** Empties the writer, keeping its buffer. */
  reset(): ValueWriter {
    this.len = 0;
    return this;
  }

  /** Makes room for n more bytes and returns where they go. */
  private room(n: i32): usize {
    // (4 + a length past 2 GiB.)
    if (n < 0) valueFailed("weir: value writer: a value of more than 2 GiB");
    const len = this.len, cap = this.buf.byteLength;
    if (n > cap - len) {
      // An ArrayBuffer of 1 GiB or more throws "Invalid length": so does a
      // value that would need one.
      let c = <i64>cap * 2;
      while (c < <i64>len + <i64>n) c *= 2;
      const b = new ArrayBuffer(<i32>min<i64>(c, 0x7fffffff));
      memory.copy(changetype<usize>(b), changetype<usize>(this.buf), <usize>len);
      this.buf = b;
    }
    this.len = len + n;
    return changetype<usize>(this.buf) + <usize>len;
  }

  writeU8(v: u8): ValueWriter {
    store<u8>(this.room(1), v);
    return this;
  }

  writeU16(v: u16): ValueWriter {
    store<u16>(this.room(2), v);
    return this;
  }

  writeU32(v: u32): ValueWriter {
    store<u32>(this.room(4), v);
    return this;
  }

  writeU64(v: u64): ValueWriter {
    store<u64>(this.room(8), v);
    return this;
  }

  writeI64(v: i64): ValueWriter {
    store<i64>(this.room(8), v);
    return this;
  }

  /** Writes v's IEEE 754 bits (NaNs keep their payload). */
  writeF64(v: f64): ValueWriter {
    store<f64>(this.room(8), v);
    return this;
  }

  /** Writes a u32 length, then the len bytes at ptr (ValueReader.readBytes
   * reads them back). */
  writeBytes(ptr: usize, len: i32): ValueWriter {
    if (len < 0) valueFailed("weir: value writer: a byte string of " + len.toString() + " bytes");
    const p = this.room(4 + len);
    store<u32>(p, <u32>len);
    memory.copy(p + 4, ptr, <usize>len);
    return this;
  }

  /** writeBytes of an array's bytes. */
  writeArray(a: Uint8Array): ValueWriter {
    return this.writeBytes(a.dataStart, a.length);
  }

  /** Writes s as its UTF-8 byte length (u32), then its UTF-8 bytes
   * (ValueReader.readString reads it back). */
  writeString(s: string): ValueWriter {
    const n = String.UTF8.byteLength(s);
    const p = this.room(4 + n);
    store<u32>(p, <u32>n);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p + 4);
    return this;
  }

  /** A copy of the value. */
  toBytes(): Uint8Array {
    return copyBytes(this.ptr, this.len);
  }
}

/** Reads a value ValueWriter built, from the len bytes at ptr (as
 * readKeyedState and Batch hand them over) or from an array (of), front to
 * back. Every read is checked against the value's end: a read past it (a
 * value shorter than the reader expects: a corrupt state, another version's
 * layout) fails the call at once, with the SDK's message naming what was
 * read, where, and the value's length, and traps:
 *
 *   weir: value reader: u64 at offset 12 passes the value's end (16 bytes)
 *
 * so no read returns bytes from past the value. Check remaining (or done)
 * to decide what a value holds before reading it, e.g. a field a later
 * version added, and that a value has nothing after what you read. */
export class ValueReader {
  private pos: i32 = 0;
  /** The array of, held so that its bytes stay while the reader reads. */
  private keep: Uint8Array | null = null;

  /** Reads the len bytes at ptr, which must stay valid while it reads
   * (readKeyedState's value: during the callback). */
  constructor(private ptr: usize, private len: i32) {
    if (len < 0) valueFailed("weir: value reader: a value of " + len.toString() + " bytes");
  }

  /** Reads the bytes of a. */
  static of(a: Uint8Array): ValueReader {
    const r = new ValueReader(a.dataStart, a.length);
    r.keep = a;
    return r;
  }

  /** The value's length in bytes. */
  get length(): i32 {
    return this.len;
  }

  /** The offset of the next read. */
  get offset(): i32 {
    return this.pos;
  }

  /** The bytes not read yet. */
  get remaining(): i32 {
    return this.len - this.pos;
  }

  /** Whether every byte of the value has been read. */
  get done(): bool {
    return this.pos == this.len;
  }

  /** Takes the next n bytes, what says which, and returns where they are;
   * fails if they pass the end. */
  @inline private take(n: i32, what: string): usize {
    const pos = this.pos;
    if (n > this.len - pos) valuePastEnd(what, pos, this.len);
    this.pos = pos + n;
    return this.ptr + <usize>pos;
  }

  readU8(): u8 {
    return load<u8>(this.take(1, "u8"));
  }

  readU16(): u16 {
    return load<u16>(this.take(2, "u16"));
  }

  readU32(): u32 {
    return load<u32>(this.take(4, "u32"));
  }

  readU64(): u64 {
    return load<u64>(this.take(8, "u64"));
  }

  readI64(): i64 {
    return load<i64>(this.take(8, "i64"));
  }

  readF64(): f64 {
    return load<f64>(this.take(8, "f64"));
  }

  /** Takes a u32 length and that many bytes, what says of what (for
   * readBytes, readString), and returns where the bytes are. */
  private lengthPrefixed(what: string): usize {
    const n = load<u32>(this.take(4, "u32 length"));
    const pos = this.pos;
    if (n > <u32>(this.len - pos)) valuePastEnd(what + " of " + n.toString() + " bytes", pos, this.len);
    this.pos = pos + <i32>n;
    return this.ptr + <usize>pos;
  }

  /** Reads a u32 length and that many bytes (writeBytes, writeArray): a
   * copy. */
  readBytes(): Uint8Array {
    const start = this.pos + 4;
    const p = this.lengthPrefixed("byte string");
    return copyBytes(p, this.pos - start);
  }

  /** Reads a u32 length and that many bytes of UTF-8 (writeString; invalid
   * bytes become U+FFFD). */
  readString(): string {
    const start = this.pos + 4;
    const p = this.lengthPrefixed("string");
    return String.UTF8.decodeUnsafe(p, <usize>(this.pos - start));
  }
}

/** Fails the call for a ValueReader read of what at offset off past the end
 * of a value of len bytes. */
function valuePastEnd(what: string, off: i32, len: i32): void {
  valueFailed("weir: value reader: " + what + " at offset " + off.toString() +
    " passes the value's end (" + len.toString() + " bytes)");
}

/** Sets the call's error message and traps: no code runs on with a value
 * read wrong (or written wrong), whatever the callback would return. */
function valueFailed(msg: string): void {
  setError(msg);
  unreachable();
}

/** The error of a restore that returned before it read all of the state,
 * which weir_restore checks after restore: a state the operator cannot read
 * back whole is one it does not understand. */
export const ERR_TRAILING_STATE = "weir: state has trailing bytes: restore returned before reading all of it (read back everything snapshot writes)";

/** The error of Operator.restore's default, which reads nothing, on a
 * non-empty state: an operator that overrides snapshot but not restore. */
export const ERR_NO_RESTORE = "weir: the operator has state to restore but does not implement restore (implement restore to read back what snapshot writes)";

/** An operator. Override the callbacks you need; each returns null on
 * success or the error message the host reports. */
export class Operator {
  /** Validates and keeps the config bytes (a copy) from the job spec. */
  init(config: Uint8Array): string | null {
    return null;
  }

  /** Processes one record batch that arrived on input port port. */
  process(port: i32, input: Batch, out: Emitter): string | null {
    return "weir: operator does not implement process";
  }

  /** Writes all state that affects future output. */
  snapshot(w: StateWriter): string | null {
    return null;
  }

  /** Reads back what snapshot wrote; an operator that never snapshotted is
   * restored from an empty stream. The default reads nothing: it accepts
   * only an empty stream, and fails a non-empty one, saying that the
   * operator does not implement restore. */
  restore(r: StateReader): string | null {
    return r.atEnd() ? null : ERR_NO_RESTORE;
  }

  /** Input port port will deliver nothing more; may emit final results. */
  endOfInput(port: i32, out: Emitter): string | null {
    return null;
  }

  /** Checkpoint id is durable everywhere (may be delivered again). */
  checkpointComplete(id: i64): string | null {
    return null;
  }
}

/** The per-instance runtime behind the exports in exports.ts. */
export class Runtime {
  input: usize = 0;
  inputCap: i32 = 0;
  batch: Batch = new Batch();
  out: Emitter = new Emitter();
  constructor(public op: Operator) {}
}

let runtime: Runtime | null = null;

/** Registers the module's operator; call once from the entry file. */
export function register(op: Operator): void {
  store<i32>(cursorAddr, -1);
  runtime = new Runtime(op);
}

/** The registered runtime (used by exports.ts). */
export function current(): Runtime {
  const rt = runtime;
  if (rt === null) {
    setError("weir: no operator registered (call register in the entry file)");
    unreachable();
  }
  return changetype<Runtime>(rt);
}

/** Turns a callback's result into the export's status. */
export function status(err: string | null): i32 {
  if (err === null) return 0;
  setError(err);
  return 1;
}

/** Replaces AssemblyScript's env.abort import (build with
 * --use abort=~lib/weir/index/weirAbort): the message goes
 * to the host and the call traps. The parameters after the message are
 * optional, as in the abort it replaces, so that an operator's own
 * abort("message") compiles. */
export function weirAbort(message: string | null = null, fileName: string | null = null, line: u32 = 0, column: u32 = 0): void {
  let m = "abort: " + (message !== null ? message : "");
  if (fileName !== null) m += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  setError(m);
  unreachable();
}
