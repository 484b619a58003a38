//! The Rust guest SDK for weir operators (ABI version 1, `abi/ABI.md`).
//!
//! An operator is a type implementing [`Operator`], handed to [`operator!`]
//! in a `cdylib` crate:
//!
//! ```ignore
//! #[derive(Default)]
//! struct Upper;
//!
//! impl weir::Operator for Upper {
//!     fn process(&mut self, _port: u32, input: weir::Batch, out: &mut weir::Emitter) -> weir::Result {
//!         for r in input {
//!             out.emit_with(0, r.key, r.value.len(), r.timestamp)
//!                 .copy_from_slice(&r.value.to_ascii_uppercase());
//!         }
//!         Ok(())
//!     }
//! }
//!
//! weir::operator!(Upper::default());
//! ```
//!
//! The SDK implements the ABI's exports: it owns the input buffer
//! (`weir_input`), iterates batches in place, keeps the record cursor the host
//! reads when a call traps (`weir_cursor`), collects each output port's
//! records into one batch emitted once per call, streams snapshots in 64 KiB
//! chunks ([`StateWriter`], [`StateReader`] are `std::io::Write`/`Read`), and
//! turns returned errors and panics into the operator's error message.
//!
//! Build with Debian's rustc (no cargo needed), by its full path: a rustup
//! `rustc` earlier on `PATH` usually has no wasm32 standard library ("can't
//! find crate for `std`"), and both crates must come from the same rustc:
//!
//! ```text
//! /usr/bin/rustc --edition 2021 --target wasm32-unknown-unknown -O --crate-type rlib \
//!       --crate-name weir -o libweir.rlib weir/lib.rs
//! /usr/bin/rustc --edition 2021 --target wasm32-unknown-unknown -O --crate-type cdylib \
//!       -C strip=symbols --extern weir=libweir.rlib -o op.wasm op.rs
//! ```

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};

/// The size of the chunks [`StateWriter`] hands to the host and
/// [`StateReader`] asks the host for.
pub const CHUNK_SIZE: usize = 64 << 10;

/// Short keys and values are copied, and short values zero-filled, as
/// fixed-size blocks of up to this many bytes (then the vector truncated
/// to the exact length), which compile to a few 8-byte loads and stores:
/// on wasm32 without bulk memory the `memcpy`/`memset` calls that
/// `extend_from_slice` and `resize` make cost more than the bytes.
const SHORT: usize = 64;

/// Bounds the output port numbers an [`Emitter`] accepts.
pub const MAX_PORTS: usize = 1024;

/// Log levels for [`log`].
pub mod level {
    /// Debug messages.
    pub const DEBUG: i32 = -1;
    /// Informational messages.
    pub const INFO: i32 = 0;
    /// Warnings.
    pub const WARN: i32 = 1;
    /// Errors.
    pub const ERROR: i32 = 2;
}

#[link(wasm_import_module = "weir")]
extern "C" {
    #[link_name = "emit"]
    fn host_emit(port: i32, ptr: *const u8, len: i32) -> i32;
    #[link_name = "error"]
    fn host_error(ptr: *const u8, len: i32);
    #[link_name = "log"]
    fn host_log(level: i32, ptr: *const u8, len: i32);
    #[link_name = "snapshot_write"]
    fn host_snapshot_write(ptr: *const u8, len: i32) -> i32;
    #[link_name = "restore_read"]
    fn host_restore_read(ptr: *mut u8, cap: i32) -> i32;
}

/// An operator's error: its message is what the host reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    /// Returns an error with the given message.
    pub fn new(msg: impl Into<String>) -> Self {
        Error(msg.into())
    }

    /// The error's message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<&str> for Error {
    fn from(msg: &str) -> Self {
        Error(msg.to_string())
    }
}

impl From<String> for Error {
    fn from(msg: String) -> Self {
        Error(msg)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error(e.to_string())
    }
}

// Parse and decode errors convert too, so `?` works on what operators
// typically parse (configs, numbers in values); add context with
// `map_err(|e| format!("...: {}", e))` where the bare message is too terse.
impl From<std::num::ParseIntError> for Error {
    fn from(e: std::num::ParseIntError) -> Self {
        Error(e.to_string())
    }
}

impl From<std::num::ParseFloatError> for Error {
    fn from(e: std::num::ParseFloatError) -> Self {
        Error(e.to_string())
    }
}

impl From<std::str::Utf8Error> for Error {
    fn from(e: std::str::Utf8Error) -> Self {
        Error(e.to_string())
    }
}

impl From<std::string::FromUtf8Error> for Error {
    fn from(e: std::string::FromUtf8Error) -> Self {
        Error(e.to_string())
    }
}

/// The result of an operator's callbacks.
pub type Result<T = ()> = std::result::Result<T, Error>;

/// One stream record. Key and value borrow the input batch: copy what you
/// keep past the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// The record's key; may be empty.
    pub key: &'a [u8],
    /// The record's value.
    pub value: &'a [u8],
    /// Milliseconds since the Unix epoch, 0 when unknown.
    pub timestamp: i64,
}

/// An operator. Every method but `process` has a default that does nothing
/// (`restore`'s reads nothing, so implement it with `snapshot`).
pub trait Operator {
    /// Validates and keeps the config bytes from the job spec.
    fn init(&mut self, _config: &[u8]) -> Result {
        Ok(())
    }

    /// Processes one record batch that arrived on input port `port`.
    fn process(&mut self, port: u32, input: Batch<'_>, out: &mut Emitter) -> Result;

    /// Writes all state that affects future output.
    fn snapshot(&mut self, _w: &mut StateWriter) -> Result {
        Ok(())
    }

    /// Reads back what `snapshot` wrote, on a fresh instance after `init`.
    /// An operator that never snapshotted is restored from an empty stream.
    /// The default reads nothing: it accepts only an empty stream, and fails
    /// a non-empty one, saying that the operator does not implement restore.
    fn restore(&mut self, r: &mut StateReader) -> Result {
        match r.at_end()? {
            true => Ok(()),
            false => Err(Error::from(ERR_NO_RESTORE)),
        }
    }

    /// Input port `port` will deliver nothing more; final results may be
    /// emitted here.
    fn end_of_input(&mut self, _port: u32, _out: &mut Emitter) -> Result {
        Ok(())
    }

    /// Checkpoint `id` is durable everywhere (may be delivered again after
    /// a recovery).
    fn checkpoint_complete(&mut self, _id: i64) -> Result {
        Ok(())
    }
}

/// The error of a restore that returned before it read all of the state,
/// which the SDK checks after `restore`: a state the operator cannot read
/// back whole is one it does not understand.
const ERR_TRAILING_STATE: &str =
    "weir: state has trailing bytes: restore returned before reading all of it (read back everything snapshot writes)";

/// The error of `Operator::restore`'s default, which reads nothing, on a
/// non-empty state: an operator that implements `snapshot` but not
/// `restore`.
const ERR_NO_RESTORE: &str =
    "weir: the operator has state to restore but does not implement restore (implement restore to read back what snapshot writes)";

/// The index of the record being processed, read by the host when a call
/// traps; -1 outside a record. `AtomicI32` has the layout of `i32`.
static CURSOR: AtomicI32 = AtomicI32::new(-1);

// The per-record helpers are `#[inline]`: rustc 1.63 does not inline a
// non-generic function across crates without it, and the operator's crate
// is another crate, so every record would cost a call per helper.
#[inline]
fn set_cursor(i: i32) {
    CURSOR.store(i, Ordering::Relaxed);
}

#[inline]
fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// One input record batch, iterated in place.
pub struct Batch<'a> {
    rest: &'a [u8],
    count: u32,
    index: u32,
}

impl<'a> Batch<'a> {
    /// Wraps the bytes of a record batch (ABI §3); the host has validated it.
    #[inline]
    pub fn new(b: &'a [u8]) -> Self {
        Batch {
            rest: &b[4..],
            count: le_u32(b),
            index: 0,
        }
    }

    /// The number of records in the batch.
    #[inline]
    pub fn count(&self) -> usize {
        self.count as usize
    }
}

impl<'a> Iterator for Batch<'a> {
    type Item = Record<'a>;

    #[inline]
    fn next(&mut self) -> Option<Record<'a>> {
        if self.index >= self.count {
            set_cursor(-1);
            return None;
        }
        // One bounds check for the 16-byte header, then fixed-size reads,
        // which compile to 4- and 8-byte loads (the byte-by-byte indexing
        // this replaces compiled to a load per byte).
        let (h, rest) = self.rest.split_at(16);
        let klen = u32::from_le_bytes(h[..4].try_into().unwrap()) as usize;
        let vlen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
        let timestamp = i64::from_le_bytes(h[8..].try_into().unwrap());
        let (key, rest) = rest.split_at(klen);
        let (value, rest) = rest.split_at(vlen);
        self.rest = rest;
        set_cursor(self.index as i32);
        self.index += 1;
        Some(Record {
            key,
            value,
            timestamp,
        })
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.count - self.index) as usize;
        (n, Some(n))
    }
}

/// Collects output records. The records emitted to one port during a call
/// travel to the host as one batch when the call returns.
#[derive(Default)]
pub struct Emitter {
    ports: Vec<PortBatch>,
    used: Vec<usize>,
    scratch: Vec<u8>,
    err: Option<Error>,
}

/// One output port's batch during a call: the count's 4 bytes (written at
/// the end of the call), then the records; empty while the port is unused.
#[derive(Default)]
struct PortBatch {
    buf: Vec<u8>,
    count: u32,
}

impl Emitter {
    /// Appends one record to output port `port`; key and value are copied.
    #[inline]
    pub fn emit(&mut self, port: usize, key: &[u8], value: &[u8], timestamp: i64) {
        if self.start_record(port, key, value.len(), timestamp) {
            append(&mut self.ports[port].buf, value);
        }
    }

    /// Appends a record to output port `port` whose value is `value_len`
    /// bytes for the caller to fill in: the returned slice, zero-filled.
    #[inline]
    pub fn emit_with(
        &mut self,
        port: usize,
        key: &[u8],
        value_len: usize,
        timestamp: i64,
    ) -> &mut [u8] {
        let b = if self.start_record(port, key, value_len, timestamp) {
            &mut self.ports[port].buf
        } else {
            self.scratch.clear();
            &mut self.scratch
        };
        let start = b.len();
        if value_len <= SHORT && b.capacity() - start >= SHORT {
            b.extend_from_slice(&[0; SHORT]);
            b.truncate(start + value_len);
        } else {
            b.resize(start + value_len, 0);
        }
        &mut b[start..]
    }

    /// Appends a record's header and key to port `port`'s batch, for the
    /// value to follow; false (with the error kept for the end of the call)
    /// for a port past [`MAX_PORTS`]. Inlined into the operator's loop; the
    /// first record of a port in a call takes the out-of-line `first_use`.
    #[inline]
    fn start_record(&mut self, port: usize, key: &[u8], value_len: usize, timestamp: i64) -> bool {
        let in_use = match self.ports.get(port) {
            Some(p) => p.count != 0,
            None => false,
        };
        if !in_use && !self.first_use(port) {
            return false;
        }
        let p = &mut self.ports[port];
        p.count += 1;
        let b = &mut p.buf;
        // The slack lets a short key or value go in as a whole block.
        b.reserve(16 + key.len() + value_len.max(SHORT));
        // The header as one 16-byte append: one capacity check, not three.
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(value_len as u32).to_le_bytes());
        h[8..].copy_from_slice(&timestamp.to_le_bytes());
        b.extend_from_slice(&h);
        append(b, key);
        true
    }

    /// Readies port `port` for its first record of the call: false (with
    /// the error kept for the end of the call) for a port past
    /// [`MAX_PORTS`].
    #[cold]
    #[inline(never)]
    fn first_use(&mut self, port: usize) -> bool {
        if port >= MAX_PORTS {
            if self.err.is_none() {
                self.err = Some(Error(format!(
                    "weir: emit to output port {}: out of range (weir::MAX_PORTS is {})",
                    port, MAX_PORTS
                )));
            }
            return false;
        }
        if port >= self.ports.len() {
            self.ports.resize_with(port + 1, PortBatch::default);
        }
        self.ports[port].buf.extend_from_slice(&[0; 4]); // the count, written at flush
        self.used.push(port);
        true
    }

    /// Emits every used port's batch (when `ok`) and empties the emitter.
    fn finish(&mut self, result: Result) -> Result {
        let mut result = match self.err.take() {
            Some(e) => result.and(Err(e)),
            None => result,
        };
        for &port in &self.used {
            let p = &mut self.ports[port];
            let b = &mut p.buf;
            if result.is_ok() {
                b[..4].copy_from_slice(&p.count.to_le_bytes());
                // SAFETY: b is a live buffer of b.len() bytes; the host copies it.
                let rc = unsafe { host_emit(port as i32, b.as_ptr(), b.len() as i32) };
                if rc != 0 {
                    result = Err(Error(format!(
                        "weir: emit to output port {} returned {}",
                        port, rc
                    )));
                }
            }
            b.clear();
            p.count = 0;
        }
        self.used.clear();
        result
    }
}

/// Appends `s` to `b`, as `extend_from_slice` does, but a short `s` (up to
/// [`SHORT`] bytes, when `b` has the room) as a zeroed block overwritten by
/// two fixed-size copies that overlap, then truncated: 8-byte loads and
/// stores in place of a `memcpy` call.
#[inline]
fn append(b: &mut Vec<u8>, s: &[u8]) {
    let (start, n) = (b.len(), s.len());
    if n > SHORT || b.capacity() - start < SHORT {
        b.extend_from_slice(s);
        return;
    }
    b.extend_from_slice(&[0; SHORT]);
    let d = &mut b[start..start + n];
    if n > 32 {
        d[..32].copy_from_slice(&s[..32]);
        d[n - 32..].copy_from_slice(&s[n - 32..]);
    } else if n > 16 {
        d[..16].copy_from_slice(&s[..16]);
        d[n - 16..].copy_from_slice(&s[n - 16..]);
    } else if n >= 8 {
        d[..8].copy_from_slice(&s[..8]);
        d[n - 8..].copy_from_slice(&s[n - 8..]);
    } else if n >= 4 {
        d[..4].copy_from_slice(&s[..4]);
        d[n - 4..].copy_from_slice(&s[n - 4..]);
    } else if n > 0 {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
    b.truncate(start + n);
}

/// Streams an operator's snapshot to the host in [`CHUNK_SIZE`] chunks.
///
/// Its first error (a failed write, a [`KeyedStateWriter`] misused) is
/// sticky: every later write returns it, and the snapshot fails with it
/// when `snapshot` returns, also when `snapshot` ignored it and returned
/// `Ok`. A write to the `StateWriter` itself after a [`KeyedStateWriter`]
/// started on it is such an error: the keyed state is the whole snapshot.
pub struct StateWriter<'a> {
    buf: &'a mut Vec<u8>,
    /// A chunk went to the host already.
    flushed: bool,
    /// A [`KeyedStateWriter`] started: only its entries may follow.
    keyed: bool,
    /// The first error, which fails the snapshot.
    err: Option<Error>,
}

impl StateWriter<'_> {
    /// Keeps `msg` as the snapshot's error unless it has one already, and
    /// returns it as an `io::Error` for the write that failed.
    fn fail(&mut self, kind: io::ErrorKind, msg: String) -> io::Error {
        if self.err.is_none() {
            self.err = Some(Error(msg.clone()));
        }
        io::Error::new(kind, msg)
    }

    /// The snapshot's error so far, for a write to return.
    #[inline]
    fn check(&self) -> io::Result<()> {
        match &self.err {
            None => Ok(()),
            Some(e) => Err(io::Error::new(io::ErrorKind::Other, e.0.clone())),
        }
    }

    /// Appends `p` to the state: the bytes of every write, the keyed
    /// state's too.
    fn append(&mut self, mut p: &[u8]) -> io::Result<()> {
        self.check()?;
        while !p.is_empty() {
            let n = p.len().min(CHUNK_SIZE - self.buf.len());
            self.buf.extend_from_slice(&p[..n]);
            p = &p[n..];
            if self.buf.len() == CHUNK_SIZE {
                self.write_chunk()?;
            }
        }
        Ok(())
    }

    fn write_chunk(&mut self) -> io::Result<()> {
        // SAFETY: buf is a live buffer of buf.len() bytes; the host copies it.
        let rc = unsafe { host_snapshot_write(self.buf.as_ptr(), self.buf.len() as i32) };
        self.buf.clear();
        self.flushed = true;
        if rc != 0 {
            return Err(self.fail(
                io::ErrorKind::Other,
                format!("weir: snapshot_write returned {}", rc),
            ));
        }
        Ok(())
    }

    /// Writes one byte.
    pub fn write_u8(&mut self, v: u8) -> io::Result<()> {
        io::Write::write_all(self, &[v])
    }

    /// Writes a little-endian u32.
    pub fn write_u32(&mut self, v: u32) -> io::Result<()> {
        io::Write::write_all(self, &v.to_le_bytes())
    }

    /// Writes a little-endian u64.
    pub fn write_u64(&mut self, v: u64) -> io::Result<()> {
        io::Write::write_all(self, &v.to_le_bytes())
    }

    /// Writes a little-endian i64.
    pub fn write_i64(&mut self, v: i64) -> io::Result<()> {
        io::Write::write_all(self, &v.to_le_bytes())
    }

    /// Writes `b` as a u32 length followed by its bytes.
    pub fn write_bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.write_u32(b.len() as u32)?;
        io::Write::write_all(self, b)
    }
}

impl io::Write for StateWriter<'_> {
    fn write(&mut self, p: &[u8]) -> io::Result<usize> {
        self.check()?;
        if self.keyed && !p.is_empty() {
            // Bytes after (or between) the keyed state's entries: a state
            // in neither the keyed layout nor one of the operator's own.
            return Err(self.fail(io::ErrorKind::Other, ERR_STATE_AFTER_KEYED.to_string()));
        }
        let n = p.len().min(CHUNK_SIZE - self.buf.len());
        self.buf.extend_from_slice(&p[..n]);
        if self.buf.len() == CHUNK_SIZE {
            self.write_chunk()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.check()?;
        if self.buf.is_empty() {
            return Ok(());
        }
        self.write_chunk()
    }
}

/// Reads an operator's state back from the host in [`CHUNK_SIZE`] chunks.
pub struct StateReader<'a> {
    buf: &'a mut Vec<u8>,
    /// `buf[pos..end]` is read from the host and not yet by the operator.
    pos: usize,
    end: usize,
    eof: bool,
}

impl StateReader<'_> {
    /// Makes unread bytes available; returns how many, 0 at the end.
    fn fill(&mut self) -> io::Result<usize> {
        if self.pos < self.end || self.eof {
            return Ok(self.end - self.pos);
        }
        if self.buf.len() < CHUNK_SIZE {
            // Once per restore, not per read: the host may return a few
            // bytes at a time.
            self.buf.resize(CHUNK_SIZE, 0);
        }
        // SAFETY: buf has CHUNK_SIZE writable bytes.
        let n = unsafe { host_restore_read(self.buf.as_mut_ptr(), CHUNK_SIZE as i32) };
        self.pos = 0;
        if n < 0 {
            self.end = 0;
            self.eof = true;
            return Err(io::Error::new(
                io::ErrorKind::Other,
                format!("weir: restore_read returned {}", n),
            ));
        }
        self.end = n as usize;
        self.eof = n == 0;
        Ok(n as usize)
    }

    /// Reports whether the state stream is exhausted.
    pub fn at_end(&mut self) -> io::Result<bool> {
        Ok(self.fill()? == 0)
    }

    fn array<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut a = [0u8; N];
        self.read_exact_or_early_end(&mut a)?;
        Ok(a)
    }

    /// `read_exact`, but a stream that ends first says so in the words of
    /// the other SDKs ("weir: state ended early"), not std's "failed to
    /// fill whole buffer".
    fn read_exact_or_early_end(&mut self, p: &mut [u8]) -> io::Result<()> {
        io::Read::read_exact(self, p).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                io::Error::new(io::ErrorKind::UnexpectedEof, "weir: state ended early")
            }
            _ => e,
        })
    }

    /// Reads one byte.
    pub fn read_u8(&mut self) -> io::Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian u64.
    pub fn read_u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian i64.
    pub fn read_i64(&mut self) -> io::Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// Reads a u32 length followed by that many bytes. The vector grows as
    /// the bytes arrive, not to the length up front: a length past the end
    /// of the stream (a corrupt state, or one in another format) fails with
    /// "weir: state ended early", not with a trap for capacity overflow or
    /// an allocation past the memory limit.
    pub fn read_bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.read_u32()? as usize;
        let mut v = Vec::with_capacity(n.min(CHUNK_SIZE));
        io::Read::read_to_end(&mut io::Read::take(&mut *self, n as u64), &mut v)?;
        if v.len() < n {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "weir: state ended early",
            ));
        }
        Ok(v)
    }
}

impl io::Read for StateReader<'_> {
    fn read(&mut self, p: &mut [u8]) -> io::Result<usize> {
        let have = self.fill()?;
        let n = have.min(p.len());
        p[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The first four bytes of a state in the keyed layout (`abi/ABI.md` §8,
/// `abi.KeyedStateMagic`).
pub const KEYED_STATE_MAGIC: &[u8; 4] = b"WKS1";

/// Writes an operator's state in the keyed layout (`abi/ABI.md` §8): the
/// magic [`KEYED_STATE_MAGIC`], then one entry per key, laid out as a batch
/// record (`u32 key_len, u32 value_len, i64 0, key, value`). weir can then
/// redistribute the state by key when the operator's parallelism changes on
/// a restore (`weir job restore -spec`): each new subtask gets the entries
/// whose key it will receive records for. Use it only when every entry's
/// key is the key the operator's records arrive by, with its inputs
/// partitioned by key.
///
/// ```ignore
/// fn snapshot(&mut self, w: &mut weir::StateWriter) -> weir::Result {
///     let mut kw = weir::KeyedStateWriter::new(w)?;
///     for (key, count) in &self.counts {  // a BTreeMap: the same state, the same bytes
///         kw.put(key, &count.to_le_bytes())?;
///     }
///     Ok(())
/// }
/// ```
///
/// There is nothing to close: the entries go through the [`StateWriter`],
/// which the SDK flushes when `snapshot` returns. Write nothing to the
/// [`StateWriter`] itself once the keyed state starts: the keyed layout is
/// the whole snapshot, so the write fails, and so does the snapshot.
pub struct KeyedStateWriter<'w, 'a> {
    w: &'w mut StateWriter<'a>,
}

impl<'w, 'a> KeyedStateWriter<'w, 'a> {
    /// Starts a keyed state on `w` by writing the magic; with no entries
    /// put, the state is just the magic. The keyed layout is the whole
    /// state: after anything else written to `w` (a version byte), or
    /// after another `KeyedStateWriter` on `w` (one made per key in a
    /// loop), it fails, and so does the snapshot, also when `snapshot`
    /// drops the error (as `KeyedStateWriter::new(w).ok()` does) and
    /// returns `Ok`.
    pub fn new(w: &'w mut StateWriter<'a>) -> io::Result<Self> {
        if w.keyed {
            // Sticky: a second magic among the first writer's entries.
            return Err(w.fail(io::ErrorKind::Other, ERR_SECOND_KEYED_WRITER.to_string()));
        }
        if w.flushed || !w.buf.is_empty() {
            // Sticky: the state written so far is not in the keyed layout
            // the operator meant, and would fail only its first restore.
            return Err(w.fail(io::ErrorKind::Other, ERR_KEYED_AFTER_STATE.to_string()));
        }
        w.append(KEYED_STATE_MAGIC)?;
        w.keyed = true;
        Ok(KeyedStateWriter { w })
    }

    /// Writes the entry for `key`. Put each key at most once. An error
    /// fails the snapshot too, whatever `snapshot` does with it: the entry
    /// is missing, or cut short.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let (klen, vlen) = match (u32::try_from(key.len()), u32::try_from(value.len())) {
            (Ok(k), Ok(v)) => (k, v),
            _ => {
                return Err(self.w.fail(
                    io::ErrorKind::InvalidInput,
                    "weir: keyed state entry of 4 GiB or more".to_string(),
                ))
            }
        };
        let mut header = [0u8; 16]; // the reserved i64 stays 0
        header[..4].copy_from_slice(&klen.to_le_bytes());
        header[4..8].copy_from_slice(&vlen.to_le_bytes());
        self.w.append(&header)?;
        self.w.append(key)?;
        self.w.append(value)
    }
}

/// The error of [`KeyedStateWriter::new`] after other state, as the other
/// SDKs say it.
const ERR_KEYED_AFTER_STATE: &str = "weir: KeyedStateWriter after other state: the keyed layout is the whole snapshot (create it first, with no version byte before it)";

/// The error of [`KeyedStateWriter::new`] after another on the same
/// [`StateWriter`], as the other SDKs say it.
const ERR_SECOND_KEYED_WRITER: &str = "weir: a second KeyedStateWriter in one snapshot: the keyed layout is the whole snapshot (make one and put every entry with it)";

/// The error of a write to the [`StateWriter`] itself after a
/// [`KeyedStateWriter`] started, as the other SDKs say it.
const ERR_STATE_AFTER_KEYED: &str = "weir: other state after KeyedStateWriter: the keyed layout is the whole snapshot (write every entry with the KeyedStateWriter, nothing with the StateWriter itself)";

/// The error of [`read_keyed_state`] on a state in another layout: one a
/// build of the operator from before it wrote keyed state took, as the
/// other SDKs say it.
const ERR_NOT_KEYED_STATE: &str = "weir: the state to restore is in a layout of its own, and this build of the operator reads keyed state (abi/ABI.md §8): restore with the build that wrote it, or have this build read the old layout too (state that does not start with \"WKS1\")";

/// Reads a state written with [`KeyedStateWriter`] (or one weir
/// redistributed after a rescale, in the same layout but in no key order):
/// reads the whole stream, then calls `f(key, value)` for each entry in
/// order; the slices are valid during the call. An empty stream (an
/// operator that never snapshotted) has no entries. A non-empty stream that
/// does not start with [`KEYED_STATE_MAGIC`] (a state in another layout,
/// which the error says how to restore), or whose last entry is cut short,
/// is an error, as is the first error `f` returns (which stops the
/// reading, and is returned as it is: the message is the operator's).
///
/// ```ignore
/// fn restore(&mut self, r: &mut weir::StateReader) -> weir::Result {
///     weir::read_keyed_state(r, |key, value| {
///         self.values.insert(key.to_vec(), value.to_vec());
///         Ok(())
///     })
/// }
/// ```
pub fn read_keyed_state<F>(r: &mut StateReader, f: F) -> Result
where
    F: FnMut(&[u8], &[u8]) -> Result,
{
    let mut state = Vec::new();
    if let Err(e) = io::Read::read_to_end(r, &mut state) {
        return Err(Error(format!("weir: read keyed state: {}", e)));
    }
    keyed_entries(&state, f)
}

/// Calls `f` for each entry of a keyed state held in memory; an error of
/// the layout says so, one of `f` is its own.
fn keyed_entries<F>(state: &[u8], mut f: F) -> Result
where
    F: FnMut(&[u8], &[u8]) -> Result,
{
    if state.is_empty() {
        return Ok(());
    }
    if !state.starts_with(KEYED_STATE_MAGIC) {
        return Err(Error::from(ERR_NOT_KEYED_STATE));
    }
    let mut off = KEYED_STATE_MAGIC.len();
    while off < state.len() {
        if state.len() - off < 16 {
            return Err(Error(format!(
                "weir: keyed state: entry header at byte {} passes the end",
                off
            )));
        }
        let klen = le_u32(&state[off..]) as u64;
        let vlen = le_u32(&state[off + 4..]) as u64;
        let start = off + 16;
        if start as u64 + klen + vlen > state.len() as u64 {
            return Err(Error(format!(
                "weir: keyed state: entry at byte {}: key of {} and value of {} bytes pass the end",
                off, klen, vlen
            )));
        }
        let key_end = start + klen as usize;
        let end = key_end + vlen as usize;
        f(&state[start..key_end], &state[key_end..end])?;
        off = end;
    }
    Ok(())
}

/// Sends `msg` to the host log at a [`level`].
pub fn log(level: i32, msg: &str) {
    // SAFETY: msg is a live buffer of msg.len() bytes.
    unsafe { host_log(level, msg.as_ptr(), msg.len() as i32) }
}

/// The global allocator: std's (dlmalloc on wasm32), which, when an
/// allocation fails, first makes "weir: memory allocation of N bytes
/// failed" the call's error message. Rust then aborts (a trap); its own
/// report of the failure goes to stderr, which wasm32-unknown-unknown drops,
/// so without this the host could say only "wasm error: unreachable" (and
/// not even how much memory the instance had, when one request of many MiB
/// failed far below the limit). An operator that defines its own
/// `#[global_allocator]` builds this crate with `--cfg weir_own_allocator`,
/// which leaves this one out (and the report with it).
#[cfg(not(weir_own_allocator))]
struct ReportingAlloc;

// SAFETY: every call is passed on to System unchanged.
#[cfg(not(weir_own_allocator))]
unsafe impl std::alloc::GlobalAlloc for ReportingAlloc {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        checked(std::alloc::System.alloc(l), l.size())
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        checked(std::alloc::System.alloc_zeroed(l), l.size())
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        std::alloc::System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, size: usize) -> *mut u8 {
        checked(std::alloc::System.realloc(p, l, size), size)
    }
}

#[cfg(not(weir_own_allocator))]
#[global_allocator]
static ALLOC: ReportingAlloc = ReportingAlloc;

#[cfg(not(weir_own_allocator))]
#[inline(always)]
fn checked(p: *mut u8, size: usize) -> *mut u8 {
    if p.is_null() {
        allocation_failed(size);
    }
    p
}

/// Reports a failed allocation of `size` bytes to the host, without
/// allocating (the heap just ran out).
#[cfg(not(weir_own_allocator))]
#[cold]
#[inline(never)]
fn allocation_failed(size: usize) {
    const HEAD: &[u8] = b"weir: memory allocation of ";
    const TAIL: &[u8] = b" bytes failed";
    let mut m = [0u8; HEAD.len() + 20 + TAIL.len()];
    m[..HEAD.len()].copy_from_slice(HEAD);
    let mut digits = [0u8; 20];
    let (mut n, mut v) = (0, size as u64);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let mut at = HEAD.len();
    for d in digits[..n].iter().rev() {
        m[at] = *d;
        at += 1;
    }
    m[at..at + TAIL.len()].copy_from_slice(TAIL);
    at += TAIL.len();
    // SAFETY: m is a live buffer of at bytes.
    unsafe { host_error(m.as_ptr(), at as i32) };
}

/// Sets the message the host reports for the failing call.
fn report(e: &Error) -> i32 {
    let m = e.message();
    // SAFETY: m is a live buffer of m.len() bytes.
    unsafe { host_error(m.as_ptr(), m.len() as i32) };
    1
}

fn status(r: Result) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => report(&e),
    }
}

/// The per-instance runtime behind the exports [`operator!`] defines. Not
/// for direct use.
#[doc(hidden)]
pub struct Runtime {
    op: Box<dyn Operator>,
    input: Vec<u8>,
    out: Emitter,
    chunk: Vec<u8>,
}

#[doc(hidden)]
impl Runtime {
    /// Makes a panic's message the failing call's error message (the
    /// panic then traps). [`operator!`] installs it before it evaluates the
    /// operator's constructor, whose panics are the operator's too.
    pub fn install_panic_hook() {
        std::panic::set_hook(Box::new(|info| {
            report(&Error(info.to_string()));
        }));
    }

    pub fn new(op: Box<dyn Operator>) -> Self {
        Self::install_panic_hook();
        Runtime {
            op,
            input: Vec::new(),
            out: Emitter::default(),
            chunk: Vec::new(),
        }
    }

    pub fn cursor() -> *const i32 {
        &CURSOR as *const AtomicI32 as *const i32
    }

    pub fn input(&mut self, size: u32) -> *mut u8 {
        let size = (size as usize).max(1);
        if self.input.len() < size {
            self.input.resize(size, 0);
        }
        self.input.as_mut_ptr()
    }

    /// # Safety
    /// `ptr..ptr+len` must be the payload the host wrote into the input buffer.
    pub unsafe fn init(&mut self, ptr: *const u8, len: u32) -> i32 {
        let config = std::slice::from_raw_parts(ptr, len as usize);
        status(self.op.init(config))
    }

    /// # Safety
    /// `ptr..ptr+len` must be the record batch the host wrote into the input buffer.
    pub unsafe fn process(&mut self, port: u32, ptr: *const u8, len: u32) -> i32 {
        let batch = Batch::new(std::slice::from_raw_parts(ptr, len as usize));
        let r = self.op.process(port, batch, &mut self.out);
        if r.is_ok() {
            set_cursor(-1);
        } // else the cursor stays on the failing record, for the host's message
        status(self.out.finish(r))
    }

    pub fn end_of_input(&mut self, port: u32) -> i32 {
        let r = self.op.end_of_input(port, &mut self.out);
        status(self.out.finish(r))
    }

    pub fn checkpoint_complete(&mut self, id: i64) -> i32 {
        status(self.op.checkpoint_complete(id))
    }

    pub fn snapshot(&mut self) -> i32 {
        self.chunk.clear();
        self.chunk.reserve(CHUNK_SIZE);
        let mut w = StateWriter {
            buf: &mut self.chunk,
            flushed: false,
            keyed: false,
            err: None,
        };
        // The flush returns the writer's sticky error, if any: one the
        // operator ignored fails the snapshot all the same.
        let r = self
            .op
            .snapshot(&mut w)
            .and_then(|()| Ok(io::Write::flush(&mut w)?));
        self.chunk.clear();
        status(r)
    }

    pub fn restore(&mut self) -> i32 {
        self.chunk.clear();
        let mut r = StateReader {
            buf: &mut self.chunk,
            pos: 0,
            end: 0,
            eof: false,
        };
        let res = self.op.restore(&mut r).and_then(|()| match r.at_end()? {
            true => Ok(()),
            false => Err(Error::from(ERR_TRAILING_STATE)),
        });
        self.chunk.clear();
        status(res)
    }
}

/// Defines the module's exports around an operator: `weir::operator!(expr)`
/// where `expr` builds the operator (evaluated once, on first use).
#[macro_export]
macro_rules! operator {
    ($ctor:expr) => {
        ::std::thread_local! {
            static WEIR_RUNTIME: ::std::cell::RefCell<$crate::Runtime> = ::std::cell::RefCell::new({
                $crate::Runtime::install_panic_hook(); // before $ctor, which may panic
                $crate::Runtime::new(::std::boxed::Box::new($ctor))
            });
        }

        fn weir_with<R>(f: impl FnOnce(&mut $crate::Runtime) -> R) -> R {
            WEIR_RUNTIME.with(|rt| f(&mut rt.borrow_mut()))
        }

        #[no_mangle]
        pub extern "C" fn weir_abi_v1() {}

        #[no_mangle]
        pub extern "C" fn weir_cursor() -> *const i32 {
            $crate::Runtime::cursor()
        }

        #[no_mangle]
        pub extern "C" fn weir_input(size: u32) -> *mut u8 {
            weir_with(|rt| rt.input(size))
        }

        #[no_mangle]
        pub unsafe extern "C" fn weir_init(ptr: *const u8, len: u32) -> i32 {
            weir_with(|rt| rt.init(ptr, len))
        }

        #[no_mangle]
        pub unsafe extern "C" fn weir_process(port: u32, ptr: *const u8, len: u32) -> i32 {
            weir_with(|rt| rt.process(port, ptr, len))
        }

        #[no_mangle]
        pub extern "C" fn weir_end_of_input(port: u32) -> i32 {
            weir_with(|rt| rt.end_of_input(port))
        }

        #[no_mangle]
        pub extern "C" fn weir_checkpoint_complete(id: i64) -> i32 {
            weir_with(|rt| rt.checkpoint_complete(id))
        }

        #[no_mangle]
        pub extern "C" fn weir_snapshot() -> i32 {
            weir_with(|rt| rt.snapshot())
        }

        #[no_mangle]
        pub extern "C" fn weir_restore() -> i32 {
            weir_with(|rt| rt.restore())
        }
    };
}
