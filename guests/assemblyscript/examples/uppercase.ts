// uppercase: a stateless operator that turns ASCII a-z in each record's value
// into A-Z; key and timestamp pass through unchanged, output on port 0.
import { Batch, Emitter, Operator, register } from "../weir";
export * from "../weir/exports";

class Uppercase extends Operator {
  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      const n = input.valueLen;
      const src = input.valuePtr;
      const dst = out.emitAlloc(0, input.keyPtr, input.keyLen, n, input.timestamp);
      for (let i = 0; i < n; i++) {
        const c = load<u8>(src + i);
        store<u8>(dst + i, c >= 0x61 && c <= 0x7a ? c - 0x20 : c);
      }
    }
    return null;
  }
}

register(new Uppercase());
