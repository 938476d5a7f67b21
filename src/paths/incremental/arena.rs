//! A join side's rows, kept as columns: the rows of one ingest that expire
//! at the same window end are one chunk of Arrow arrays, and a row's id is
//! its chunk's number and its index there. Reading pairs back is a gather of
//! those columns (`interleave`), not a decode of encoded rows one by one,
//! and storing rows copies no bytes per row beyond the arrays themselves.

use std::collections::BTreeMap;

use arrow::array::{new_empty_array, Array, ArrayRef, UInt32Array};
use arrow::compute::{interleave, take};
use arrow::datatypes::DataType;
use rustc_hash::FxHashMap;

use crate::time::EventTime;

/// The most rows one chunk holds (an index is 32 bits).
const CHUNK_ROWS: usize = u32::MAX as usize;

/// A side's rows by id, each readable until its expiry passes.
pub(super) struct ColumnArena {
    /// The types of the columns kept (for a gather of no rows).
    types: Vec<DataType>,
    /// The chunks of the rows expiring at each end.
    by_expiry: BTreeMap<EventTime, Vec<u32>>,
    /// Each chunk's columns, by number.
    chunks: FxHashMap<u32, Vec<ArrayRef>>,
    next: u32,
}

/// An id: the chunk's number above its index.
fn split(id: u64) -> (u32, usize) {
    ((id >> 32) as u32, (id & u64::from(u32::MAX)) as usize)
}

impl ColumnArena {
    pub(super) fn new(types: Vec<DataType>) -> Self {
        ColumnArena {
            types,
            by_expiry: BTreeMap::new(),
            chunks: FxHashMap::default(),
            next: 0,
        }
    }

    /// Stores rows `rows` of `cols` (one array per kept column), all
    /// expiring at `expiry`; their ids, in the order of `rows`.
    pub(super) fn push(
        &mut self,
        cols: &[ArrayRef],
        rows: &[u32],
        expiry: EventTime,
    ) -> arrow::error::Result<Vec<u64>> {
        let mut ids = Vec::with_capacity(rows.len());
        for part in rows.chunks(CHUNK_ROWS) {
            // every row of the arrays: held as they are (no copy)
            let whole = cols.first().is_some_and(|c| c.len() == part.len())
                && part.iter().enumerate().all(|(i, &r)| r as usize == i);
            let chunk: Vec<ArrayRef> = match whole {
                true => cols.to_vec(),
                false => {
                    let at = UInt32Array::from(part.to_vec());
                    cols.iter()
                        .map(|c| take(c.as_ref(), &at, None))
                        .collect::<arrow::error::Result<_>>()?
                }
            };
            let no = self.start();
            self.chunks.insert(no, chunk);
            self.by_expiry.entry(expiry).or_default().push(no);
            ids.extend((0..part.len() as u64).map(|i| (u64::from(no) << 32) | i));
        }
        Ok(ids)
    }

    /// A chunk number no chunk held now has.
    fn start(&mut self) -> u32 {
        while self.chunks.contains_key(&self.next) {
            self.next = self.next.wrapping_add(1);
        }
        let no = self.next;
        self.next = self.next.wrapping_add(1);
        no
    }

    /// The rows `ids`, in order, as one array per kept column; `None` if an
    /// id is of no row held.
    pub(super) fn gather(&self, ids: &[u64]) -> arrow::error::Result<Option<Vec<ArrayRef>>> {
        if ids.is_empty() {
            return Ok(Some(self.types.iter().map(new_empty_array).collect()));
        }
        let mut slot: FxHashMap<u32, usize> = FxHashMap::default();
        let mut chunks: Vec<&Vec<ArrayRef>> = Vec::new();
        let mut at = Vec::with_capacity(ids.len());
        // the chunk of the id before, its slot and rows: ids come in runs of
        // one chunk, so most are placed without a lookup or a call through
        // `dyn Array` for the chunk's length
        let mut last: Option<(u32, usize, usize)> = None;
        for &id in ids {
            let (no, i) = split(id);
            let (k, len) = match last {
                Some((n, k, len)) if n == no => (k, len),
                _ => {
                    let k = match slot.get(&no) {
                        Some(&k) => k,
                        None => {
                            let Some(chunk) = self.chunks.get(&no) else {
                                return Ok(None);
                            };
                            chunks.push(chunk);
                            slot.insert(no, chunks.len() - 1);
                            chunks.len() - 1
                        }
                    };
                    let len = chunks[k].first().map_or(usize::MAX, |c| c.len());
                    last = Some((no, k, len));
                    (k, len)
                }
            };
            if i >= len {
                return Ok(None);
            }
            at.push((k, i));
        }
        let mut out = Vec::with_capacity(self.types.len());
        for j in 0..self.types.len() {
            let arrays: Vec<&dyn Array> = chunks.iter().map(|c| c[j].as_ref()).collect();
            out.push(interleave(&arrays, &at)?);
        }
        Ok(Some(out))
    }

    /// Drops the rows that expire at or before `w`.
    pub(super) fn reclaim(&mut self, w: EventTime) {
        let keep = match w.checked_add(1) {
            Some(after) => self.by_expiry.split_off(&after),
            None => BTreeMap::new(),
        };
        for (_, nos) in std::mem::replace(&mut self.by_expiry, keep) {
            for no in nos {
                self.chunks.remove(&no);
            }
        }
    }

    /// Rows held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks
            .values()
            .map(|c| c.first().map_or(0, |a| a.len()))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{AsArray, Int64Array, StringArray};

    use super::*;

    /// Rows of random values (NULLs and empty strings too), stored in random
    /// subsets at random expiries, read back as stored, in any order and
    /// repeated, until their expiry passes, and not after; nothing is left
    /// once every expiry passed.
    #[test]
    fn rows_read_back_as_stored_until_they_expire() {
        let mut seed = 11u64;
        let mut next = move |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let mut arena = ColumnArena::new(vec![DataType::Int64, DataType::Utf8]);
        let mut held: Vec<(u64, Option<i64>, Option<String>, EventTime)> = Vec::new();
        for step in 0..50i64 {
            for _ in 0..3 {
                let n = next(30) as usize;
                let ints: Vec<Option<i64>> = (0..n)
                    .map(|_| (next(5) > 0).then(|| next(1000) as i64 - 500))
                    .collect();
                let strs: Vec<Option<String>> = (0..n)
                    .map(|_| (next(5) > 0).then(|| "x".repeat(next(4) as usize)))
                    .collect();
                let cols: Vec<ArrayRef> = vec![
                    Arc::new(Int64Array::from(ints.clone())),
                    Arc::new(StringArray::from(strs.clone())),
                ];
                let expiry = step * 10 + next(50) as i64;
                // all rows (held without a copy) or a subset
                let rows: Vec<u32> = match next(2) {
                    0 => (0..n as u32).collect(),
                    _ => (0..n as u32).filter(|_| next(2) == 0).collect(),
                };
                let ids = arena.push(&cols, &rows, expiry).expect("push");
                for (&r, id) in rows.iter().zip(ids) {
                    held.push((id, ints[r as usize], strs[r as usize].clone(), expiry));
                }
            }
            let w = step * 10;
            arena.reclaim(w);
            held.retain(|h| h.3 > w);
            let order: Vec<usize> = (0..held.len() * 2)
                .map(|_| next(held.len().max(1) as u64) as usize)
                .filter(|&i| i < held.len())
                .collect();
            let ids: Vec<u64> = order.iter().map(|&i| held[i].0).collect();
            let got = arena.gather(&ids).expect("gather").expect("held");
            let (a, b) = (
                got[0].as_primitive::<arrow::datatypes::Int64Type>(),
                got[1].as_string::<i32>(),
            );
            for (k, &i) in order.iter().enumerate() {
                assert_eq!(a.is_valid(k).then(|| a.value(k)), held[i].1);
                assert_eq!(b.is_valid(k).then(|| b.value(k).to_string()), held[i].2);
            }
            assert_eq!(arena.len(), held.len());
        }
        assert_eq!(
            arena.gather(&[]).expect("gather").expect("none")[1].len(),
            0
        );
        let gone = held.first().map(|h| h.0);
        arena.reclaim(EventTime::MAX);
        assert_eq!(arena.len(), 0);
        assert!(arena.chunks.is_empty() && arena.by_expiry.is_empty());
        if let Some(id) = gone {
            assert!(arena.gather(&[id]).expect("gather").is_none());
        }
    }
}
