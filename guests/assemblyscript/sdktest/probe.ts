// probe: exercises the SDK features the examples do not, for the
// conformance suite's TestSDKProbe (same behaviour in every SDK):
//   - record i of a batch goes to output port (i + 1) % 2 with its value
//     unchanged, so port batches are emitted in first-use order;
//   - a record whose value is "trap" traps (the host reports the cursor);
//   - a record whose value is "fail" fails the call with "probe: fail"
//     (the host reports the cursor with the error);
//   - a record whose value is "panic" throws "probe: panic" (the host
//     reports the message and the cursor with the trap);
//   - (AssemblyScript) a record whose value is "abort" calls
//     abort("probe: abort"), with the message alone, as operators do;
//   - a record whose value is "log" is also logged at warn level as "probe: log";
//   - a record whose value is "badport" is emitted to output port 2000, past
//     every SDK's port limit, which fails the call with the SDK's message;
//   - (Rust and AssemblyScript) a record whose value is "alloc" asks for a
//     buffer the memory limit cannot hold: here 512 MiB (an ArrayBuffer of
//     1 GiB is past AssemblyScript's own limit, and throws "Invalid
//     length" first), for which the runtime's heap cannot grow, and it
//     traps with a bare `unreachable`;
//   - end of input on port p emits key "eoi", value the decimal p, on port 0;
//   - checkpointComplete(id) fails with "probe: negative checkpoint" for id < 0;
//   - snapshot writes u8 1, bytes "probe" (u32 length + bytes), i64 -2;
//     restore reads them back (an empty state is fine) and fails with
//     "probe: bad state" if they differ;
//   - with the config "keyed-begin-after-state" the snapshot writes a
//     version byte and then starts a keyed state, which the SDK fails,
//     saying what to do, though snapshot ignores the error and returns null;
//   - with the config "state-after-keyed" the snapshot puts k=v in a keyed
//     state and then writes a byte to the StateWriter itself, and with
//     "keyed-put-after-state" it puts k2=v2 after that byte: the SDK fails
//     either, saying what to do, though snapshot ignores the errors and
//     returns null;
//   - with the config "two-keyed-writers" the snapshot puts k=v with a
//     KeyedStateWriter and k2=v2 with a second one: the SDK fails it,
//     saying what to do, though snapshot ignores the errors and returns
//     null;
//   - with the config "empty-writes-around-keyed" the snapshot writes no
//     bytes to the StateWriter, puts k=v in a keyed state, and writes no
//     bytes again: a correct keyed state, which the SDK takes;
//   - with the config "keyed-strings" the snapshot is keyed state put with
//     putString: "ключ" = "värde €", then "plain" = "" (UTF-8); restore reads
//     them back with utf8String and fails with "probe: bad state" if they
//     differ;
//   - (AssemblyScript) with the config "value-codec" the probe keeps a
//     versioned record per key, read with ValueReader and written with
//     ValueWriter: each record's value is version 1 (u8 1, u64 count) or
//     version 2 (u8 2, u64 count, u32 n, n byte strings: u32 length and the
//     bytes), read over the record's pointer and length, or over a copy (a
//     Uint8Array) when the key is "copy"; the probe keeps it as version 2
//     (v1 has no byte strings) and emits that on port 0. Version 9 holds
//     one of each: u8, u16, u32, u64, i64, f64, byte string, string; the
//     probe emits it as it wrote it back, and keeps nothing. Another
//     version fails the call with "probe: value version V", bytes after
//     the value with "probe: N bytes after a version V value", and a read
//     past the value's end with the SDK's message, as a trap. The snapshot
//     is keyed state, the keys in first-seen order, each value version 2;
//     restore reads versions 1 and 2 as process does.
import {
  Batch, Emitter, KeyedStateWriter, LOG_WARN, Operator, StateReader, StateWriter, ValueReader, ValueWriter,
  compareBytes, copyBytes, log, readKeyedState, register, utf8String,
} from "weir";
export * from "weir/exports";

/** Reports whether the len bytes at ptr are the ASCII string s. */
function is(ptr: usize, len: i32, s: string): bool {
  if (len != s.length) return false;
  for (let i = 0; i < len; i++) {
    if (<i32>load<u8>(ptr + i) != s.charCodeAt(i)) return false;
  }
  return true;
}

/** The entries of the "keyed-strings" state, keys and values in turn. */
const KEYED_STRINGS: string[] = ["ключ", "värde €", "plain", ""];

class Probe extends Operator {
  keyedAfterState: bool = false;
  keyedStrings: bool = false;
  /** 1 writes a byte after the keyed state's entry, 2 another entry after
   * that byte (the config). */
  stateAfterKeyed: i32 = 0;
  /** The snapshot puts each entry with a KeyedStateWriter of its own. */
  twoKeyedWriters: bool = false;
  /** The snapshot writes no bytes before and after its keyed state. */
  emptyWrites: bool = false;
  /** Restore's count of the keyed-strings entries read back. */
  read: i32 = 0;
  /** The config "value-codec": the records' values are versioned records. */
  valueCodec: bool = false;
  /** value-codec's keys, in first-seen order, and their version 2 values. */
  keys: Array<Uint8Array> = [];
  values: Array<Uint8Array> = [];
  /** Builds each version 2 value. */
  w: ValueWriter = new ValueWriter(16); // small: the long values grow it

  init(config: Uint8Array): string | null {
    const c = String.UTF8.decode(config.buffer);
    this.keyedAfterState = c == "keyed-begin-after-state";
    this.keyedStrings = c == "keyed-strings";
    this.stateAfterKeyed = c == "state-after-keyed" ? 1 : c == "keyed-put-after-state" ? 2 : 0;
    this.twoKeyedWriters = c == "two-keyed-writers";
    this.emptyWrites = c == "empty-writes-around-keyed";
    this.valueCodec = c == "value-codec";
    return null;
  }

  /** Reads a value-codec value from r into this.w, as version 2 (or, for
   * version 9, as it is); returns null, or the call's error. */
  decode(r: ValueReader): string | null {
    const w = this.w.reset();
    const version = r.readU8();
    if (version == 9) {
      w.writeU8(9).writeU8(r.readU8()).writeU16(r.readU16()).writeU32(r.readU32()).writeU64(r.readU64())
        .writeI64(r.readI64()).writeF64(r.readF64()).writeArray(r.readBytes()).writeString(r.readString());
    } else if (version == 1 || version == 2) {
      w.writeU8(2).writeU64(r.readU64());
      if (version == 1) {
        w.writeU32(0);
      } else {
        const n = r.readU32();
        w.writeU32(n);
        for (let i: u32 = 0; i < n; i++) w.writeArray(r.readBytes());
      }
    } else {
      return "probe: value version " + version.toString();
    }
    if (!r.done) return "probe: " + r.remaining.toString() + " bytes after a version " + version.toString() + " value";
    return null;
  }

  /** Keeps this.w's value as the key's (the len bytes at ptr). */
  keep(ptr: usize, len: i32): void {
    for (let i = 0; i < this.keys.length; i++) {
      const k = this.keys[i];
      if (compareBytes(k.dataStart, k.length, ptr, len) == 0) {
        this.values[i] = this.w.toBytes();
        return;
      }
    }
    this.keys.push(copyBytes(ptr, len));
    this.values.push(this.w.toBytes());
  }

  process(port: i32, input: Batch, out: Emitter): string | null {
    if (this.valueCodec) {
      while (input.next()) {
        const r = is(input.keyPtr, input.keyLen, "copy")
          ? ValueReader.of(input.value())
          : new ValueReader(input.valuePtr, input.valueLen);
        const err = this.decode(r);
        if (err !== null) return err;
        if (load<u8>(this.w.ptr) != 9) this.keep(input.keyPtr, input.keyLen);
        out.emit(0, input.keyPtr, input.keyLen, this.w.ptr, this.w.length, input.timestamp);
      }
      return null;
    }
    while (input.next()) {
      if (is(input.valuePtr, input.valueLen, "trap")) unreachable();
      if (is(input.valuePtr, input.valueLen, "fail")) return "probe: fail";
      if (input.valueString() == "panic") throw new Error("probe: " + input.valueString());
      if (is(input.valuePtr, input.valueLen, "abort")) abort("probe: abort");
      if (is(input.valuePtr, input.valueLen, "log")) log(LOG_WARN, "probe: log");
      if (is(input.valuePtr, input.valueLen, "alloc")) {
        const b = new ArrayBuffer(1 << 29);
        store<u8>(changetype<usize>(b), 1);
      }
      const port = is(input.valuePtr, input.valueLen, "badport") ? 2000 : (input.index + 1) % 2;
      out.emit(port, input.keyPtr, input.keyLen, input.valuePtr, input.valueLen, input.timestamp);
    }
    return null;
  }

  checkpointComplete(id: i64): string | null {
    return id < 0 ? "probe: negative checkpoint" : null;
  }

  snapshot(w: StateWriter): string | null {
    if (this.valueCodec) {
      const kw = new KeyedStateWriter(w);
      for (let i = 0; i < this.keys.length; i++) kw.putBytes(this.keys[i], this.values[i]);
      return null;
    }
    if (this.emptyWrites) {
      w.write(0, 0);
      new KeyedStateWriter(w).putString("k", "v");
      w.write(0, 0);
      return w.error;
    }
    if (this.twoKeyedWriters) {
      new KeyedStateWriter(w).putString("k", "v");
      new KeyedStateWriter(w).putString("k2", "v2");
      return null; // w.error ignored: the snapshot fails all the same
    }
    if (this.stateAfterKeyed != 0) {
      const kw = new KeyedStateWriter(w);
      kw.putString("k", "v");
      w.writeU8(1);
      if (this.stateAfterKeyed == 2) kw.putString("k2", "v2");
      return null; // w.error ignored: the snapshot fails all the same
    }
    if (this.keyedAfterState) {
      w.writeU8(1);
      const kw = new KeyedStateWriter(w);
      kw.putBytes(Uint8Array.wrap(String.UTF8.encode("k")), Uint8Array.wrap(String.UTF8.encode("v")));
      return null; // kw.error ignored: the snapshot fails all the same
    }
    if (this.keyedStrings) {
      const kw = new KeyedStateWriter(w);
      for (let i = 0; i < KEYED_STRINGS.length; i += 2) kw.putString(KEYED_STRINGS[i], KEYED_STRINGS[i + 1]);
      return null;
    }
    w.writeU8(1);
    const b = String.UTF8.encode("probe");
    w.writeBytes(changetype<usize>(b), b.byteLength);
    w.writeI64(-2);
    return null;
  }

  restore(r: StateReader): string | null {
    if (this.valueCodec) {
      this.keys = [];
      this.values = [];
      return readKeyedState<Probe>(r, this,
        (p: Probe, k: usize, kl: i32, v: usize, vl: i32): string | null => {
          const err = p.decode(new ValueReader(v, vl));
          if (err !== null) return err;
          if (load<u8>(p.w.ptr) == 9) return "probe: a version 9 value in the state";
          p.keep(k, kl);
          return null;
        });
    }
    if (this.keyedStrings) {
      this.read = 0;
      const err = readKeyedState<Probe>(r, this,
        (p: Probe, k: usize, kl: i32, v: usize, vl: i32): string | null => {
          const i = p.read * 2;
          p.read++;
          if (i + 1 >= KEYED_STRINGS.length || utf8String(k, kl) != KEYED_STRINGS[i] ||
            utf8String(v, vl) != KEYED_STRINGS[i + 1]) return "probe: bad state";
          return null;
        });
      if (err !== null) return err;
      return this.read * 2 == KEYED_STRINGS.length ? null : "probe: bad state";
    }
    if (r.atEnd()) return null;
    const v = r.readU8();
    const b = r.readBytes();
    const i = r.readI64();
    if (r.error !== null) return r.error;
    if (v != 1 || !is(b.dataStart, b.length, "probe") || i != -2) return "probe: bad state";
    return null;
  }

  endOfInput(port: i32, out: Emitter): string | null {
    const key = String.UTF8.encode("eoi");
    out.emitString(0, changetype<usize>(key), key.byteLength, port.toString(), 0);
    return null;
  }
}

register(new Probe());
