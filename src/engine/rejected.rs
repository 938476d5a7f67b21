//! The rejected-row relation of a view: every row that was not taken in —
//! late, without an event time, or refused by the reader of an input (a cell
//! that does not parse as its column's type) — with where it came from and
//! why. It is bounded: past its retention the oldest entries are dropped and
//! counted, and the caller can drain it.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::Result;
use crate::time::EventTime;
use crate::window::Window;

/// Entries a view's rejected-row relation keeps by default; older ones are
/// dropped (and counted in [`crate::ViewCounters::rejected_rows_evicted`]).
pub const DEFAULT_REJECTED_RETENTION: usize = 100_000;

/// A row an input reader refused before it became part of a batch, for
/// [`crate::Engine::push_invalid`]: it is counted as invalid at the next
/// trigger and kept in the view's rejected-row relation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InvalidRow {
    /// Where the row is: `file:line` (1-based, as an editor shows it), or
    /// whatever locates it in the caller's input.
    pub location: Option<String>,
    /// The column at fault.
    pub column: Option<String>,
    /// The offending value, as read.
    pub value: Option<String>,
    /// Why it is refused, in words.
    pub reason: String,
    /// The row's event time, if it could be read.
    pub event_time: Option<EventTime>,
}

/// One entry of the relation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rejected {
    pub source: String,
    pub event_time: Option<EventTime>,
    /// The last window the row belonged to (late rows).
    pub window: Option<Window>,
    /// W when the row was refused.
    pub watermark: Option<EventTime>,
    pub reason: String,
    pub epoch: u64,
    pub location: Option<String>,
    pub column: Option<String>,
    pub value: Option<String>,
}

/// The bounded relation.
#[derive(Debug)]
pub(super) struct RejectedRows {
    rows: VecDeque<Rejected>,
    retain: usize,
    evicted: u64,
}

impl RejectedRows {
    pub fn new(retain: usize) -> Self {
        RejectedRows {
            rows: VecDeque::new(),
            retain,
            evicted: 0,
        }
    }

    /// Keep an entry, dropping the oldest past the retention.
    pub fn push(&mut self, r: Rejected) {
        if self.retain == 0 {
            self.evicted += 1;
            return;
        }
        if self.rows.len() == self.retain {
            self.rows.pop_front();
            self.evicted += 1;
        }
        self.rows.push_back(r);
    }

    /// Entries dropped for the retention so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The relation as a batch.
    pub fn batch(&self) -> Result<RecordBatch> {
        to_batch(self.rows.iter())
    }

    /// The relation as a batch, emptied.
    pub fn drain(&mut self) -> Result<RecordBatch> {
        let b = to_batch(self.rows.iter())?;
        self.rows.clear();
        Ok(b)
    }
}

/// The relation's schema (see [`crate::Engine::late_rows`]).
fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("source", DataType::Utf8, false),
        Field::new("event_time", DataType::Int64, true),
        Field::new("window_start", DataType::Int64, true),
        Field::new("window_end", DataType::Int64, true),
        Field::new("watermark", DataType::Int64, true),
        Field::new("reason", DataType::Utf8, false),
        Field::new("epoch", DataType::UInt64, false),
        Field::new("location", DataType::Utf8, true),
        Field::new("column", DataType::Utf8, true),
        Field::new("value", DataType::Utf8, true),
    ]))
}

fn to_batch<'a>(rows: impl Iterator<Item = &'a Rejected> + Clone) -> Result<RecordBatch> {
    let l = rows;
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from_iter_values(
                l.clone().map(|r| r.source.as_str()),
            )),
            Arc::new(Int64Array::from_iter(l.clone().map(|r| r.event_time))),
            Arc::new(Int64Array::from_iter(
                l.clone().map(|r| r.window.map(|w| w.start)),
            )),
            Arc::new(Int64Array::from_iter(
                l.clone().map(|r| r.window.map(|w| w.end)),
            )),
            Arc::new(Int64Array::from_iter(l.clone().map(|r| r.watermark))),
            Arc::new(StringArray::from_iter_values(
                l.clone().map(|r| r.reason.as_str()),
            )),
            Arc::new(UInt64Array::from_iter_values(l.clone().map(|r| r.epoch))),
            Arc::new(StringArray::from_iter(
                l.clone().map(|r| r.location.as_deref()),
            )),
            Arc::new(StringArray::from_iter(
                l.clone().map(|r| r.column.as_deref()),
            )),
            Arc::new(StringArray::from_iter(l.map(|r| r.value.as_deref()))),
        ],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn late(i: i64) -> Rejected {
        Rejected {
            source: "s".into(),
            event_time: Some(i),
            window: None,
            watermark: None,
            reason: "late".into(),
            epoch: 1,
            location: None,
            column: None,
            value: None,
        }
    }

    #[test]
    fn keeps_the_newest_up_to_its_retention_and_counts_the_rest() {
        let mut r = RejectedRows::new(3);
        for i in 0..5 {
            r.push(late(i));
        }
        assert_eq!(r.evicted(), 2);
        let b = r.batch().expect("batch");
        let t = b
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("event_time");
        assert_eq!(t.values().to_vec(), vec![2, 3, 4]);
        assert_eq!(r.drain().expect("drain").num_rows(), 3);
        assert_eq!(r.batch().expect("batch").num_rows(), 0);
        let mut none = RejectedRows::new(0);
        none.push(late(1));
        assert_eq!(
            (none.evicted(), none.batch().expect("b").num_rows()),
            (1, 0)
        );
    }
}
