//! rustpanic: a Rust test operator built with its function names kept
//! (the name section), for TestTrapStackRustNames. A record whose value is
//! "panic" panics in a closure that a generic operator's process calls, so
//! the trap's stack names functions in rustc's legacy mangling, a trait
//! impl on a generic type among them; other records pass through.
//!
//! guests/build.sh builds it (with Debian's rustc 1.63, as the Rust
//! guests, but -C strip=debuginfo, not symbols, and no wasm-strip), and
//! guests/build.sh -check checks the committed rustpanic.wasm is what it
//! builds.

use weir::{Batch, Emitter, Operator, Result};

struct Checked<F>(F);

impl<F: Fn(&[u8])> Operator for Checked<F> {
    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        for r in input {
            each(r.value, &self.0);
            out.emit(0, r.key, r.value, r.timestamp);
        }
        Ok(())
    }
}

#[inline(never)]
fn each<F: Fn(&[u8])>(v: &[u8], f: &F) {
    f(v)
}

weir::operator!(Checked(|v: &[u8]| if v == b"panic" {
    panic!("rustpanic: panic")
}));
