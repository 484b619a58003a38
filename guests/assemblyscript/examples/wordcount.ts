// wordcount: splits each value on ASCII whitespace and, for every word in
// order, increments its count and emits key=word, value=decimal count, with
// the input record's timestamp.
//
// State (shared by every SDK's wordcount): 0x01, u32 n, then n entries in
// ascending bytewise order of the word: u32 word_len, word, u64 count.
import {
  Batch, Emitter, Operator, StateReader, StateWriter, compareBytes, copyBytes, register,
} from "weir";
export * from "weir/exports";

class Entry {
  constructor(public word: Uint8Array, public count: u64) {}
}

function isSpace(c: u8): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d;
}

class WordCount extends Operator {
  /** The counts, sorted by word so lookups bisect and snapshots need no sort. */
  entries: Array<Entry> = [];
  /** Scratch space for a count's decimal digits. */
  digits: usize = memory.data(20);

  /** Returns the index of the word, or -(insertion point) - 1. */
  find(ptr: usize, len: i32): i32 {
    let lo = 0, hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const w = this.entries[mid].word;
      const c = compareBytes(w.dataStart, w.length, ptr, len);
      if (c == 0) return mid;
      if (c < 0) lo = mid + 1;
      else hi = mid;
    }
    return -lo - 1;
  }

  /** Inserts e at index i, shifting the later entries up. */
  insert(i: i32, e: Entry): void {
    const a = this.entries;
    a.push(e);
    for (let j = a.length - 1; j > i; j--) a[j] = a[j - 1];
    a[i] = e;
  }

  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      const v = input.valuePtr, end = v + <usize>input.valueLen;
      let p = v;
      while (p < end) {
        while (p < end && isSpace(load<u8>(p))) p++;
        const start = p;
        while (p < end && !isSpace(load<u8>(p))) p++;
        if (p > start) this.count(out, start, <i32>(p - start), input.timestamp);
      }
    }
    return null;
  }

  count(out: Emitter, ptr: usize, len: i32, ts: i64): void {
    let i = this.find(ptr, len);
    if (i < 0) {
      i = -i - 1;
      this.insert(i, new Entry(copyBytes(ptr, len), 0));
    }
    const e = this.entries[i];
    e.count++;
    // Format the count in decimal, right-aligned in digits[0..20).
    let n = e.count, at = 20;
    do {
      store<u8>(this.digits + <usize>(--at), <u8>(0x30 + n % 10));
      n /= 10;
    } while (n);
    out.emit(0, ptr, len, this.digits + <usize>at, 20 - at, ts);
  }

  snapshot(w: StateWriter): string | null {
    w.writeU8(1);
    w.writeU32(<u32>this.entries.length);
    for (let i = 0; i < this.entries.length; i++) {
      const e = this.entries[i];
      w.writeBytes(e.word.dataStart, e.word.length);
      w.writeU64(e.count);
    }
    return null;
  }

  restore(r: StateReader): string | null {
    if (r.atEnd()) return null; // never snapshotted
    if (r.readU8() != 1) return "wordcount: unknown state version";
    const n = r.readU32();
    for (let i: u32 = 0; i < n && r.error === null; i++) {
      const word = r.readBytes();
      const count = r.readU64();
      const at = this.find(word.dataStart, word.length);
      if (at >= 0) return "wordcount: duplicate word in state";
      this.insert(-at - 1, new Entry(word, count));
    }
    return null;
  }
}

register(new WordCount());
