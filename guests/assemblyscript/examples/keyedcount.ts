// keyedcount: counts the records of each key and, for every input record in
// order, emits key=the record's key, value=the key's new count in decimal,
// with the input record's timestamp. Keys are arbitrary bytes.
//
// State (shared by every SDK's keyedcount): keyed state (abi/ABI.md §8,
// KeyedStateWriter), "WKS1" then one entry per key in ascending bytewise
// order of the key, its value the count as a u64 (8 bytes, little-endian).
// weir can therefore redistribute the counts by key when the operator's
// parallelism changes on a restore; partition its input by key.
import {
  Batch, Emitter, KeyedStateWriter, Operator, StateReader, StateWriter,
  compareBytes, copyBytes, readKeyedState, register,
} from "weir";
export * from "weir/exports";

class Entry {
  constructor(public key: Uint8Array, public hash: u32, public count: u64) {}
}

/** FNV-1a of the len bytes at ptr. */
function hashBytes(ptr: usize, len: i32): u32 {
  let h: u32 = 2166136261;
  for (let i = 0; i < len; i++) h = (h ^ <u32>load<u8>(ptr + i)) * 16777619;
  return h;
}

/** Orders entries bytewise by key, a proper prefix first. */
function byKey(a: Entry, b: Entry): i32 {
  return compareBytes(a.key.dataStart, a.key.length, b.key.dataStart, b.key.length);
}

class KeyedCount extends Operator {
  /** The counts, one entry per key, in first-seen order. */
  entries: Array<Entry> = [];
  /** A hash index over entries by key (open addressing, linear probing):
   * 1 + the entry's index, or 0 for a free slot; a power of two in size,
   * at most 3/4 full. */
  slots: Int32Array = new Int32Array(16);
  /** Scratch space for a count's decimal digits. */
  digits: usize = memory.data(20);

  /** Returns the entry of the key (the len bytes at ptr), adding it with
   * count 0 if it is new. */
  entry(ptr: usize, len: i32): Entry {
    const h = hashBytes(ptr, len);
    const mask = this.slots.length - 1;
    let i = <i32>h & mask;
    for (;;) {
      const s = unchecked(this.slots[i]);
      if (s == 0) break;
      const e = unchecked(this.entries[s - 1]);
      if (e.hash == h && compareBytes(e.key.dataStart, e.key.length, ptr, len) == 0) return e;
      i = (i + 1) & mask;
    }
    const e = new Entry(copyBytes(ptr, len), h, 0);
    this.entries.push(e);
    unchecked(this.slots[i] = this.entries.length);
    if (this.entries.length * 4 > this.slots.length * 3) this.rehash(this.slots.length * 2);
    return e;
  }

  /** Rebuilds the hash index with size slots. */
  rehash(size: i32): void {
    const slots = new Int32Array(size);
    const mask = size - 1;
    for (let j = 0; j < this.entries.length; j++) {
      let i = <i32>unchecked(this.entries[j]).hash & mask;
      while (unchecked(slots[i]) != 0) i = (i + 1) & mask;
      unchecked(slots[i] = j + 1);
    }
    this.slots = slots;
  }

  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      const e = this.entry(input.keyPtr, input.keyLen);
      e.count++;
      // Format the count in decimal, right-aligned in digits[0..20).
      let n = e.count, at = 20;
      do {
        store<u8>(this.digits + <usize>(--at), <u8>(0x30 + n % 10));
        n /= 10;
      } while (n);
      out.emit(0, input.keyPtr, input.keyLen, this.digits + <usize>at, 20 - at, input.timestamp);
    }
    return null;
  }

  snapshot(w: StateWriter): string | null {
    const sorted = this.entries.slice(0);
    sorted.sort(byKey); // the same counts, the same bytes
    const kw = new KeyedStateWriter(w);
    const v = memory.data(8);
    for (let i = 0; i < sorted.length; i++) {
      const e = sorted[i];
      store<u64>(v, e.count);
      kw.put(e.key.dataStart, e.key.length, v, 8);
    }
    return null;
  }

  restore(r: StateReader): string | null {
    this.entries = [];
    this.slots = new Int32Array(16);
    // Entries come in any order after a rescale; a key given twice keeps
    // its last count.
    return readKeyedState<KeyedCount>(r, this,
      (c: KeyedCount, k: usize, kl: i32, v: usize, vl: i32): string | null => {
        if (vl != 8) return "keyedcount: a count of " + vl.toString() + " bytes, want 8";
        c.entry(k, kl).count = load<u64>(v);
        return null;
      });
  }
}

register(new KeyedCount());
