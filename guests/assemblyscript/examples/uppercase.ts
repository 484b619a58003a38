// uppercase: a stateless operator that turns ASCII a-z in each record's value
// into A-Z; key and timestamp pass through unchanged, output on port 0.
//
// It converts 8 bytes per step (SWAR: a u64 as 8 byte lanes), then the last
// len%8 bytes one by one: the same algorithm as every other language's
// uppercase, so guests/conformance's BenchmarkUppercase compares like with like.
import { Batch, Emitter, Operator, register } from "weir";
export * from "weir/exports";

const ONES: u64 = 0x0101010101010101;
const HIGH: u64 = 0x8080808080808080;

// upper8 converts the ASCII letters a-z (0x61..0x7a) among the 8 bytes of x
// to A-Z. No sum carries out of its byte: the low 7 bits plus at most 0x1f
// stay below 0x100.
function upper8(x: u64): u64 {
  const h = x & ~HIGH; // each byte's low 7 bits
  const ge = h + ONES * (0x80 - 0x61); // high bit set: low 7 bits >= 'a'
  const gt = h + ONES * (0x80 - 0x7a - 1); // high bit set: low 7 bits > 'z'
  const m = ge & ~gt & ~x & HIGH; // high bit set: 'a' <= byte <= 'z', ASCII
  return x ^ (m >> 2); // 0x80 >> 2 == 0x20: flip the case bit
}

class Uppercase extends Operator {
  process(port: i32, input: Batch, out: Emitter): string | null {
    while (input.next()) {
      const n = input.valueLen;
      const src = input.valuePtr;
      const dst = out.emitAlloc(0, input.keyPtr, input.keyLen, n, input.timestamp);
      let i = 0;
      for (; i + 8 <= n; i += 8) {
        store<u64>(dst + i, upper8(load<u64>(src + i)));
      }
      for (; i < n; i++) {
        const c = load<u8>(src + i);
        store<u8>(dst + i, c >= 0x61 && c <= 0x7a ? c - 0x20 : c);
      }
    }
    return null;
  }
}

register(new Uppercase());
