// join: an equi-join on the record key of two inputs, port 0 (left) and port
// 1 (right). Every record of both sides is buffered in arrival order. A new
// record is joined with every buffered record of the other side that has the
// same key, in arrival order: key=k, value=left.value "|" right.value,
// timestamp=max of the two; then it is buffered itself.
//
// State (shared by every SDK's join): 0x01, u32 n_left, n_left records, u32
// n_right, n_right records; a record is u32 key_len, key, u32 value_len,
// value, i64 timestamp; both sides in arrival order.
import {
  Batch, Emitter, Operator, StateReader, StateWriter, compareBytes, copyBytes, register,
} from "weir";
export * from "weir/exports";

class Row {
  constructor(public key: Uint8Array, public value: Uint8Array, public ts: i64) {}
}

class Join extends Operator {
  lefts: Array<Row> = [];
  rights: Array<Row> = [];

  process(port: i32, input: Batch, out: Emitter): string | null {
    if (port != 0 && port != 1) return "join: input port must be 0 (left) or 1 (right)";
    const other = port == 0 ? this.rights : this.lefts;
    const mine = port == 0 ? this.lefts : this.rights;
    while (input.next()) {
      const kp = input.keyPtr, kl = input.keyLen, vp = input.valuePtr, vl = input.valueLen;
      for (let i = 0; i < other.length; i++) {
        const o = other[i];
        if (compareBytes(o.key.dataStart, o.key.length, kp, kl) != 0) continue;
        const ts = input.timestamp > o.ts ? input.timestamp : o.ts;
        const dst = out.emitAlloc(0, kp, kl, vl + 1 + o.value.length, ts);
        if (port == 0) {
          memory.copy(dst, vp, vl);
          store<u8>(dst + <usize>vl, 0x7c);
          memory.copy(dst + <usize>vl + 1, o.value.dataStart, o.value.length);
        } else {
          memory.copy(dst, o.value.dataStart, o.value.length);
          store<u8>(dst + <usize>o.value.length, 0x7c);
          memory.copy(dst + <usize>o.value.length + 1, vp, vl);
        }
      }
      mine.push(new Row(copyBytes(kp, kl), copyBytes(vp, vl), input.timestamp));
    }
    return null;
  }

  snapshot(w: StateWriter): string | null {
    w.writeU8(1);
    writeSide(w, this.lefts);
    writeSide(w, this.rights);
    return null;
  }

  restore(r: StateReader): string | null {
    if (r.atEnd()) return null; // never snapshotted
    if (r.readU8() != 1) return "join: unknown state version";
    readSide(r, this.lefts);
    readSide(r, this.rights);
    return null;
  }
}

function writeSide(w: StateWriter, rows: Array<Row>): void {
  w.writeU32(<u32>rows.length);
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i];
    w.writeBytes(row.key.dataStart, row.key.length);
    w.writeBytes(row.value.dataStart, row.value.length);
    w.writeI64(row.ts);
  }
}

function readSide(r: StateReader, rows: Array<Row>): void {
  const n = r.readU32();
  for (let i: u32 = 0; i < n && r.error === null; i++) {
    const key = r.readBytes();
    const value = r.readBytes();
    rows.push(new Row(key, value, r.readI64()));
  }
}

register(new Join());
