//! join: an equi-join on the record key of two inputs, port 0 (left) and
//! port 1 (right). Every record of both sides is buffered in arrival order. A
//! new record is joined with every buffered record of the other side that has
//! the same key, in arrival order: key=k, value=left.value "|" right.value,
//! timestamp=max of the two; then it is buffered itself.
//!
//! State (shared by every SDK's join): 0x01, u32 n_left, n_left records, u32
//! n_right, n_right records; a record is u32 key_len, key, u32 value_len,
//! value, i64 timestamp; both sides in arrival order.

use weir::{Batch, Emitter, Operator, Result, StateReader, StateWriter};

/// A buffered record.
struct Row {
    key: Vec<u8>,
    value: Vec<u8>,
    timestamp: i64,
}

#[derive(Default)]
struct Join {
    /// sides[0] holds the lefts, sides[1] the rights, in arrival order.
    sides: [Vec<Row>; 2],
}

impl Operator for Join {
    fn process(&mut self, port: u32, input: Batch<'_>, out: &mut Emitter) -> Result {
        let port = port as usize;
        if port > 1 {
            return Err("join: input port must be 0 (left) or 1 (right)".into());
        }
        for r in input {
            for o in self.sides[1 - port].iter().filter(|o| o.key == r.key) {
                let (left, right) = if port == 0 {
                    (r.value, &o.value[..])
                } else {
                    (&o.value[..], r.value)
                };
                let v = out.emit_with(
                    0,
                    r.key,
                    left.len() + 1 + right.len(),
                    r.timestamp.max(o.timestamp),
                );
                v[..left.len()].copy_from_slice(left);
                v[left.len()] = b'|';
                v[left.len() + 1..].copy_from_slice(right);
            }
            self.sides[port].push(Row {
                key: r.key.to_vec(),
                value: r.value.to_vec(),
                timestamp: r.timestamp,
            });
        }
        Ok(())
    }

    fn snapshot(&mut self, w: &mut StateWriter) -> Result {
        w.write_u8(1)?;
        for side in &self.sides {
            w.write_u32(side.len() as u32)?;
            for row in side {
                w.write_bytes(&row.key)?;
                w.write_bytes(&row.value)?;
                w.write_i64(row.timestamp)?;
            }
        }
        Ok(())
    }

    fn restore(&mut self, r: &mut StateReader) -> Result {
        if r.at_end()? {
            return Ok(()); // never snapshotted
        }
        if r.read_u8()? != 1 {
            return Err("join: unknown state version".into());
        }
        for side in &mut self.sides {
            for _ in 0..r.read_u32()? {
                let key = r.read_bytes()?;
                let value = r.read_bytes()?;
                let timestamp = r.read_i64()?;
                side.push(Row {
                    key,
                    value,
                    timestamp,
                });
            }
        }
        Ok(())
    }
}

weir::operator!(Join::default());
