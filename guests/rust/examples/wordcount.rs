//! wordcount: splits each value on ASCII whitespace and, for every word in
//! order, increments its count and emits key=word, value=decimal count, with
//! the input record's timestamp.
//!
//! State (shared by every SDK's wordcount): 0x01, u32 n, then n entries in
//! ascending bytewise order of the word: u32 word_len, word, u64 count.

use std::collections::BTreeMap;
use weir::{Batch, Emitter, Operator, Result, StateReader, StateWriter};

#[derive(Default)]
struct WordCount {
    /// Counts by word; a BTreeMap iterates in the state's bytewise order.
    counts: BTreeMap<Vec<u8>, u64>,
}

fn is_space(c: &u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

impl Operator for WordCount {
    fn process(&mut self, _port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        for r in input {
            for word in r.value.split(is_space).filter(|w| !w.is_empty()) {
                let count = match self.counts.get_mut(word) {
                    Some(c) => c,
                    None => self.counts.entry(word.to_vec()).or_insert(0),
                };
                *count += 1;
                out.emit(0, word, count.to_string().as_bytes(), r.timestamp);
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, w: &mut StateWriter) -> Result {
        w.write_u8(1)?;
        w.write_u32(self.counts.len() as u32)?;
        for (word, count) in &self.counts {
            w.write_bytes(word)?;
            w.write_u64(*count)?;
        }
        Ok(())
    }

    fn restore(&mut self, r: &mut StateReader) -> Result {
        if r.at_end()? {
            return Ok(()); // never snapshotted
        }
        if r.read_u8()? != 1 {
            return Err("wordcount: unknown state version".into());
        }
        for _ in 0..r.read_u32()? {
            let word = r.read_bytes()?;
            let count = r.read_u64()?;
            self.counts.insert(word, count);
        }
        Ok(())
    }
}

weir::operator!(WordCount::default());
