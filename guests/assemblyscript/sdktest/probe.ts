// probe: exercises the SDK features the examples do not, for the
// conformance suite's TestSDKProbe (same behaviour in every SDK):
//   - record i of a batch goes to output port (i + 1) % 2 with its value
//     unchanged, so port batches are emitted in first-use order;
//   - a record whose value is "trap" traps (the host reports the cursor);
//   - a record whose value is "fail" fails the call with "probe: fail";
//   - a record whose value is "log" is also logged at warn level as "probe: log";
//   - end of input on port p emits key "eoi", value the decimal p, on port 0;
//   - checkpointComplete(id) fails with "probe: negative checkpoint" for id < 0.
import { Batch, Emitter, LOG_WARN, Operator, log, register } from "../weir";
export * from "../weir/exports";

/** Reports whether the len bytes at ptr are the ASCII string s. */
function is(ptr: usize, len: i32, s: string): bool {
  if (len != s.length) return false;
  for (let i = 0; i < len; i++) {
    if (<i32>load<u8>(ptr + i) != s.charCodeAt(i)) return false;
  }
  return true;
}

class Probe extends Operator {
  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      if (is(input.valuePtr, input.valueLen, "trap")) unreachable();
      if (is(input.valuePtr, input.valueLen, "fail")) return "probe: fail";
      if (is(input.valuePtr, input.valueLen, "log")) log(LOG_WARN, "probe: log");
      out.emit((input.index + 1) % 2, input.keyPtr, input.keyLen, input.valuePtr, input.valueLen, input.timestamp);
    }
    return null;
  }

  checkpointComplete(id: i64): string | null {
    return id < 0 ? "probe: negative checkpoint" : null;
  }

  endOfInput(port: i32, out: Emitter): string | null {
    out.emitBytes(0, Uint8Array.wrap(String.UTF8.encode("eoi")), Uint8Array.wrap(String.UTF8.encode(port.toString())), 0);
    return null;
  }
}

register(new Probe());
