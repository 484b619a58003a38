// An operator as a user writes it outside the repository: the SDK is the
// package "weir", which sourcebuild provides.
import { Batch, Emitter, Operator, register } from "weir";
export * from "weir/exports";

class Shout extends Operator {
  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      const n = input.valueLen;
      const p = out.emitAlloc(0, input.keyPtr, input.keyLen, n, input.timestamp);
      for (let i = 0; i < n; i++) {
        let c = load<u8>(input.valuePtr + i);
        if (c >= 97 && c <= 122) c -= 32;
        store<u8>(p + i, c);
      }
    }
    return null;
  }
}

register(new Shout());
