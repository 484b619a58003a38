// filter: keeps the records whose value contains the config bytes.
import { Batch, Emitter, Operator, register } from "weir";
export * from "weir/exports";

class Filter extends Operator {
  /** The substring to keep. */
  needle: Uint8Array = new Uint8Array(0);

  init(config: Uint8Array): string | null {
    if (config.length == 0) return "filter: config must be the substring to keep";
    this.needle = config;
    return null;
  }

  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      if (contains(input.valuePtr, input.valueLen, this.needle.dataStart, this.needle.length)) {
        out.emit(0, input.keyPtr, input.keyLen, input.valuePtr, input.valueLen, input.timestamp);
      }
    }
    return null;
  }
}

/** Reports whether the n bytes at needle occur in the len bytes at hay. */
function contains(hay: usize, len: i32, needle: usize, n: i32): bool {
  for (let i = 0; i + n <= len; i++) {
    if (memory.compare(hay + i, needle, n) == 0) return true;
  }
  return false;
}

register(new Filter());
