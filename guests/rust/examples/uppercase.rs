//! uppercase: a stateless operator that turns ASCII a-z in each record's
//! value into A-Z; key and timestamp pass through unchanged, output on port 0.

use weir::{Batch, Emitter, Operator, Result};

struct Uppercase;

impl Operator for Uppercase {
    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        for r in input {
            let v = out.emit_with(0, r.key, r.value.len(), r.timestamp);
            for (d, s) in v.iter_mut().zip(r.value) {
                *d = s.to_ascii_uppercase();
            }
        }
        Ok(())
    }
}

weir::operator!(Uppercase);
