//! keyedcount: counts the records of each key and emits key=the record's
//! key, value=the new count in decimal, with the input record's timestamp.
//! The config is ignored.
//!
//! State (the same bytes as Go's keyedcount): the keyed layout of
//! `abi/ABI.md` §8 ([`weir::KeyedStateWriter`]), one entry per key in
//! ascending bytewise order of the key, the value a u64 LE count; with no
//! keys, just "WKS1". weir redistributes it by key when the operator's
//! parallelism changes on a restore. Partition its input by key.

use std::collections::BTreeMap;
use weir::{Batch, Emitter, KeyedStateWriter, Operator, Result, StateReader, StateWriter};

#[derive(Default)]
struct KeyedCount {
    /// Counts by key; a BTreeMap iterates in the state's bytewise order.
    counts: BTreeMap<Vec<u8>, u64>,
}

impl Operator for KeyedCount {
    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        for r in input {
            let count = match self.counts.get_mut(r.key) {
                Some(c) => c,
                None => self.counts.entry(r.key.to_vec()).or_insert(0),
            };
            *count += 1;
            out.emit(0, r.key, count.to_string().as_bytes(), r.timestamp);
        }
        Ok(())
    }

    fn snapshot(&mut self, w: &mut StateWriter) -> Result {
        let mut kw = KeyedStateWriter::new(w)?;
        for (key, count) in &self.counts {
            kw.put(key, &count.to_le_bytes())?;
        }
        Ok(())
    }

    fn restore(&mut self, r: &mut StateReader) -> Result {
        let mut counts = BTreeMap::new();
        weir::read_keyed_state(r, |key, value| {
            let count: [u8; 8] = value
                .try_into()
                .map_err(|_| format!("keyedcount: a count of {} bytes, want 8", value.len()))?;
            counts.insert(key.to_vec(), u64::from_le_bytes(count));
            Ok(())
        })?;
        self.counts = counts;
        Ok(())
    }
}

weir::operator!(KeyedCount::default());
