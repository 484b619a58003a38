// An operator that traps in its own process on the value "boom", for the
// name its trap's stack gives that function.
import { Batch, Emitter, Operator, register } from "weir";
export * from "weir/exports";

class Boom extends Operator {
  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      if (input.valueLen == 4 && load<u8>(input.valuePtr) == 98) unreachable(); // "b…"
      out.emit(0, input.keyPtr, input.keyLen, input.valuePtr, input.valueLen, input.timestamp);
    }
    return null;
  }
}

register(new Boom());
