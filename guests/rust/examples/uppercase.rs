//! uppercase: a stateless operator that turns ASCII a-z in each record's
//! value into A-Z; key and timestamp pass through unchanged, output on port 0.
//!
//! It converts 8 bytes per step (SWAR: a u64 as 8 byte lanes), then the last
//! len%8 bytes one by one: the same algorithm as every other language's
//! uppercase, so guests/conformance's BenchmarkUppercase compares like with like.

use weir::{Batch, Emitter, Operator, Result};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Converts the ASCII letters a-z among the 8 bytes of `x` to A-Z. No sum
/// carries out of its byte: the low 7 bits plus at most 0x1f stay below 0x100.
fn upper8(x: u64) -> u64 {
    let h = x & !HIGH; // each byte's low 7 bits
    let ge = h + ONES * (0x80 - b'a' as u64); // high bit set: low 7 bits >= 'a'
    let gt = h + ONES * (0x80 - b'z' as u64 - 1); // high bit set: low 7 bits > 'z'
    let m = ge & !gt & !x & HIGH; // high bit set: 'a' <= byte <= 'z', ASCII
    x ^ (m >> 2) // 0x80 >> 2 == 0x20: flip the case bit
}

struct Uppercase;

impl Operator for Uppercase {
    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        for r in input {
            let v = out.emit_with(0, r.key, r.value.len(), r.timestamp);
            let mut dst = v.chunks_exact_mut(8);
            let mut src = r.value.chunks_exact(8);
            for (d, s) in (&mut dst).zip(&mut src) {
                let x = u64::from_le_bytes(s.try_into().unwrap());
                d.copy_from_slice(&upper8(x).to_le_bytes());
            }
            for (d, s) in dst.into_remainder().iter_mut().zip(src.remainder()) {
                *d = s.to_ascii_uppercase();
            }
        }
        Ok(())
    }
}

weir::operator!(Uppercase);
