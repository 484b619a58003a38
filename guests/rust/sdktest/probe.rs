//! probe: exercises the SDK features the examples do not, for the
//! conformance suite's TestSDKProbe (same behaviour in every SDK):
//!   - record i of a batch goes to output port (i + 1) % 2 with its value
//!     unchanged, so port batches are emitted in first-use order;
//!   - a record whose value is "trap" traps (the host reports the cursor);
//!   - a record whose value is "fail" fails the call with "probe: fail"
//!     (the host reports the cursor with the error);
//!   - a record whose value is "panic" panics with "probe: panic" (the host
//!     reports the message and the cursor with the trap);
//!   - a record whose value is "log" is also logged at warn level as "probe: log";
//!   - (Rust and AssemblyScript) a record whose value is "alloc" asks for
//!     1 GiB, which fails: the SDK's allocator reports it before Rust aborts;
//!   - a record whose value is "badport" is emitted to output port 2000, past
//!     every SDK's port limit, which fails the call with the SDK's message;
//!   - end of input on port p emits key "eoi", value the decimal p, on port 0;
//!   - checkpoint_complete(id) fails with "probe: negative checkpoint" for id < 0;
//!   - snapshot writes u8 1, bytes "probe" (u32 length + bytes), i64 -2;
//!     restore reads them back (an empty state is fine) and fails with
//!     "probe: bad state" if they differ;
//!   - with the config "keyed-begin-after-state" the snapshot writes a
//!     version byte and then starts a keyed state, which the SDK fails,
//!     saying what to do; with "keyed-begin-after-state-ignored" the
//!     snapshot drops that error (`KeyedStateWriter::new(w).ok()`) and
//!     returns Ok, which fails it all the same;
//!   - with the config "state-after-keyed" the snapshot puts k=v in a keyed
//!     state and then writes a byte to the StateWriter itself, and with
//!     "keyed-put-after-state" it puts k2=v2 after that byte: the SDK fails
//!     either, saying what to do, though snapshot ignores the errors and
//!     returns Ok;
//!   - with the config "two-keyed-writers" the snapshot puts k=v with a
//!     KeyedStateWriter and k2=v2 with a second one (as a loop making one
//!     per key does): the SDK fails it, saying what to do, though snapshot
//!     ignores the errors and returns Ok;
//!   - with the config "empty-writes-around-keyed" the snapshot writes no
//!     bytes to the StateWriter, puts k=v in a keyed state, and writes no
//!     bytes again: a correct keyed state, which the SDK takes.

use weir::{Batch, Emitter, KeyedStateWriter, Operator, Result, StateReader, StateWriter};

#[derive(Default)]
struct Probe {
    keyed_after_state: bool,
    /// The snapshot drops the keyed state's errors.
    keyed_ignored: bool,
    /// 1 writes a byte after the keyed state's entry, 2 another entry
    /// after that byte (the config).
    state_after_keyed: u8,
    /// The snapshot puts each entry with a KeyedStateWriter of its own.
    two_keyed_writers: bool,
    /// The snapshot writes no bytes before and after its keyed state.
    empty_writes: bool,
}

impl Operator for Probe {
    fn init(&mut self, config: &[u8]) -> Result {
        let (config, ignored) = match config.strip_suffix(b"-ignored") {
            Some(c) => (c, true),
            None => (config, false),
        };
        self.keyed_after_state = config == b"keyed-begin-after-state";
        self.keyed_ignored = ignored;
        self.state_after_keyed = match config {
            b"state-after-keyed" => 1,
            b"keyed-put-after-state" => 2,
            _ => 0,
        };
        self.two_keyed_writers = config == b"two-keyed-writers";
        self.empty_writes = config == b"empty-writes-around-keyed";
        Ok(())
    }

    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        for (i, r) in input.enumerate() {
            match r.value {
                b"trap" => core::arch::wasm32::unreachable(),
                b"badport" => out.emit(2000, r.key, r.value, r.timestamp),
                b"fail" => return Err("probe: fail".into()),
                b"panic" => panic!("probe: panic"),
                b"alloc" => {
                    let v: Vec<u8> = Vec::with_capacity(1 << 30);
                    out.emit(0, r.key, &v, r.timestamp)
                }
                b"log" => {
                    weir::log(weir::level::WARN, "probe: log");
                    out.emit((i + 1) % 2, r.key, r.value, r.timestamp)
                }
                _ => out.emit((i + 1) % 2, r.key, r.value, r.timestamp),
            }
        }
        Ok(())
    }

    fn checkpoint_complete(&mut self, id: i64) -> Result {
        if id < 0 {
            return Err("probe: negative checkpoint".into());
        }
        Ok(())
    }

    fn snapshot(&mut self, w: &mut StateWriter) -> Result {
        if self.empty_writes {
            std::io::Write::write_all(w, &[])?;
            KeyedStateWriter::new(w)?.put(b"k", b"v")?;
            std::io::Write::write_all(w, &[])?;
            return Ok(());
        }
        if self.two_keyed_writers {
            let entries: [(&[u8], &[u8]); 2] = [(b"k", b"v"), (b"k2", b"v2")];
            for (key, value) in entries {
                if let Ok(mut kw) = KeyedStateWriter::new(w) {
                    let _ = kw.put(key, value);
                }
            }
            return Ok(());
        }
        if self.state_after_keyed != 0 {
            if let Ok(mut kw) = KeyedStateWriter::new(w) {
                let _ = kw.put(b"k", b"v");
            }
            let _ = w.write_u8(1);
            if self.state_after_keyed == 2 {
                if let Ok(mut kw) = KeyedStateWriter::new(w) {
                    let _ = kw.put(b"k2", b"v2");
                }
            }
            return Ok(());
        }
        if self.keyed_after_state && self.keyed_ignored {
            let _ = w.write_u8(1);
            if let Some(mut kw) = KeyedStateWriter::new(w).ok() {
                let _ = kw.put(b"k", b"v");
            }
            return Ok(());
        }
        if self.keyed_after_state {
            w.write_u8(1)?;
            KeyedStateWriter::new(w)?.put(b"k", b"v")?;
            return Ok(());
        }
        w.write_u8(1)?;
        w.write_bytes(b"probe")?;
        w.write_i64(-2)?;
        Ok(())
    }

    fn restore(&mut self, r: &mut StateReader) -> Result {
        if r.at_end()? {
            return Ok(());
        }
        let (v, b, i) = (r.read_u8()?, r.read_bytes()?, r.read_i64()?);
        if v != 1 || b != b"probe" || i != -2 {
            return Err("probe: bad state".into());
        }
        Ok(())
    }

    fn end_of_input(&mut self, port: u32, out: &mut Emitter) -> Result {
        out.emit(0, b"eoi", port.to_string().as_bytes(), 0);
        Ok(())
    }
}

weir::operator!(Probe::default());
