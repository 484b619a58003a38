//! filter: keeps the records whose value contains the config bytes.

use weir::{Batch, Emitter, Operator, Result};

#[derive(Default)]
struct Filter {
    /// The substring to keep.
    needle: Vec<u8>,
}

impl Operator for Filter {
    fn init(&mut self, config: &[u8]) -> Result {
        if config.is_empty() {
            return Err("filter: config must be the substring to keep".into());
        }
        self.needle = config.to_vec();
        Ok(())
    }

    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        let n = &self.needle[..];
        for r in input {
            if r.value.windows(n.len()).any(|w| w == n) {
                out.emit(0, r.key, r.value, r.timestamp);
            }
        }
        Ok(())
    }
}

weir::operator!(Filter::default());
