//! rustpanic: a Rust test operator built with its function names kept
//! (the name section), for TestTrapStackRustNames. A record whose value is
//! "panic" panics in a closure that a generic operator's process calls, so
//! the trap's stack names functions in rustc's legacy mangling, a trait
//! impl on a generic type among them; other records pass through.
//!
//! Build (from the repository root, with Debian's rustc 1.63; like
//! guests/build.sh, but -C strip=debuginfo, not symbols, and no wasm-strip):
//!   F="--edition 2021 --target wasm32-unknown-unknown -C opt-level=3 -C debuginfo=0 -C strip=debuginfo -D warnings --remap-path-prefix=$PWD=."
//!   /usr/bin/rustc $F --crate-type rlib --crate-name weir -o /tmp/libweir.rlib guests/rust/weir/lib.rs
//!   /usr/bin/rustc $F --crate-type cdylib --extern weir=/tmp/libweir.rlib -o host/wasm/testdata/rustpanic.wasm host/wasm/testdata/rustpanic.rs

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
