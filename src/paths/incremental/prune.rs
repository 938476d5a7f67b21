//! Top-rows queries (see `plan::rows`): the host rules out, before the
//! dataflow sees them, the rows that already have `n` rows strictly before
//! them in their unit (pane, or tumbling window) and partition. Every
//! window holding a unit holds all its rows, so such a row is in no
//! window's result and changes no other row's rank there.
//!
//! The host keeps, per open unit and partition, the order keys of the best
//! `n` rows it let through (as comparable bytes: smaller is before), and
//! drops a unit's entries when the unit expires. After a restore it starts
//! empty: it then lets through more rows than it needs to, never fewer.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::SortOptions;
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::physical_expr::PhysicalExpr;
use rustc_hash::FxHashMap;
use thund_dataflows::Panes;

use crate::error::{Error, Result};
use crate::plan::Prune;
use crate::time::EventTime;
use crate::window::{TimeWindows, Window};

use super::keys::{encode_rows, ENCODED_ROW};

/// An order key: smaller is before. Integer keys (of at most 32 bytes,
/// see [`encode_rows`]) are their `arrow::row` bytes read as a big-endian
/// integer in two halves, which compares as the bytes do; others are the
/// bytes. One pruner's keys are all of one kind.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum OrderKey {
    Int(u128, u128),
    Bytes(Box<[u8]>),
}

/// Per partition (its key bytes), the best order keys kept, best first.
type Best = FxHashMap<Box<[u8]>, Vec<OrderKey>>;

/// A batch's keys: `arrow::row`'s, or for integer columns the same bytes
/// written without it, one fixed array per row (see [`encode_rows`]).
enum BatchKeys {
    Rows(Rows),
    Fixed(Vec<[u8; ENCODED_ROW]>, usize),
}

impl BatchKeys {
    fn of(
        conv: &RowConverter,
        options: Option<&[SortOptions]>,
        cols: &[ArrayRef],
        n: usize,
    ) -> std::result::Result<Self, arrow::error::ArrowError> {
        let mut fixed = vec![[0u8; ENCODED_ROW]; n];
        Ok(match encode_rows(cols, options, &mut fixed) {
            Some(len) => BatchKeys::Fixed(fixed, len),
            None => BatchKeys::Rows(conv.convert_columns(cols)?),
        })
    }

    fn bytes(&self, i: usize) -> &[u8] {
        match self {
            BatchKeys::Rows(r) => r.row(i).data(),
            BatchKeys::Fixed(f, len) => &f[i][..*len],
        }
    }

    fn order_key(&self, i: usize) -> OrderKey {
        match self {
            BatchKeys::Rows(r) => OrderKey::Bytes(r.row(i).data().into()),
            BatchKeys::Fixed(f, _) => {
                let half = |at: usize| {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(&f[i][at..at + 16]);
                    u128::from_be_bytes(b)
                };
                OrderKey::Int(half(0), half(16))
            }
        }
    }
}

pub(super) struct Pruner {
    partition: Vec<Arc<dyn PhysicalExpr>>,
    order: Vec<Arc<dyn PhysicalExpr>>,
    n: usize,
    part_conv: Option<RowConverter>,
    order_conv: RowConverter,
    /// The order columns' sort options, in `order_conv`'s order.
    order_options: Vec<SortOptions>,
    /// By (expiry, unit), then partition: the best order keys, best first.
    best: BTreeMap<(EventTime, Window), Best>,
}

fn values(
    view: &str,
    exprs: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| {
            e.evaluate(batch)
                .and_then(|c| c.into_array(batch.num_rows()))
                .map_err(|err| Error::eval(view, err))
        })
        .collect()
}

impl Pruner {
    pub fn new(view: &str, p: &Prune) -> Result<Self> {
        let internal = |e: arrow::error::ArrowError| Error::internal(view, e.to_string());
        let part_conv = match p.partition.is_empty() {
            true => None,
            false => Some(
                RowConverter::new(
                    p.partition
                        .iter()
                        .map(|(_, dt)| SortField::new(dt.clone()))
                        .collect(),
                )
                .map_err(internal)?,
            ),
        };
        let order_conv = RowConverter::new(
            p.order
                .iter()
                .map(|(_, dt, o)| SortField::new_with_options(dt.clone(), *o))
                .collect(),
        )
        .map_err(internal)?;
        Ok(Pruner {
            partition: p.partition.iter().map(|(e, _)| e.clone()).collect(),
            order: p.order.iter().map(|(e, _, _)| e.clone()).collect(),
            n: p.n,
            part_conv,
            order_conv,
            order_options: p.order.iter().map(|(_, _, o)| *o).collect(),
            best: BTreeMap::new(),
        })
    }

    /// Which rows of `batch` the dataflow still needs: `pass` (through
    /// WHERE) and not ruled out. Rows WHERE refuses and rows of units closed
    /// at `w_prev` are left as they are (`None`: every row is kept).
    #[allow(clippy::too_many_arguments)]
    pub fn keep(
        &mut self,
        view: &str,
        batch: &RecordBatch,
        times: &[i64],
        pass: &[bool],
        panes: Option<Panes>,
        windows: &TimeWindows,
        w_prev: Option<EventTime>,
    ) -> Result<Option<Vec<bool>>> {
        let n_rows = batch.num_rows();
        let internal = |e: arrow::error::ArrowError| Error::internal(view, e.to_string());
        let parts: Option<BatchKeys> = match &self.part_conv {
            Some(c) => Some(
                BatchKeys::of(c, None, &values(view, &self.partition, batch)?, n_rows)
                    .map_err(internal)?,
            ),
            None => None,
        };
        let orders = BatchKeys::of(
            &self.order_conv,
            Some(&self.order_options),
            &values(view, &self.order, batch)?,
            n_rows,
        )
        .map_err(internal)?;
        // a row's unit, when its last window closes, and the times [lo, hi) that share it
        let run_of = |t: i64| match panes {
            Some(p) => {
                let pane = p.pane_of(t);
                (pane, p.expiry(pane), pane.start, pane.end)
            }
            None => {
                let (w, lo, hi) = windows.last_window_run(t);
                (w, w.end, lo, hi)
            }
        };
        let mut keep = vec![true; n_rows];
        let mut dropped = false;
        let mut i = 0;
        while i < n_rows {
            if !pass[i] {
                i += 1;
                continue;
            }
            let (unit, expires, lo, hi) = run_of(times[i]);
            if w_prev.is_some_and(|wp| expires <= wp) {
                i += 1;
                continue;
            }
            // the run of rows in this unit: its table found once, and
            // without partitions its one entry too (a lookup per row of the
            // empty partition key was 80 % of Nexmark q7's trigger in
            // `perf`, nearly all of it in the `memcmp` of an empty slice)
            let table = self.best.entry((expires, unit)).or_default();
            let mut only = match parts {
                None => Some(std::mem::take(table.entry(Box::default()).or_default())),
                Some(_) => None,
            };
            while i < n_rows {
                if pass[i] {
                    let t = times[i];
                    // (outside [lo, hi) only at the ends of time can the unit be the same)
                    if !(lo <= t && t < hi) && run_of(t).0 != unit {
                        break;
                    }
                    let key = orders.order_key(i);
                    let best = match only.as_mut() {
                        Some(b) => b,
                        // the partition's entry, allocated only the first time it is seen
                        None => {
                            let part = parts.as_ref().map_or(&[][..], |p| p.bytes(i));
                            match table.get_mut(part) {
                                Some(b) => b,
                                None => table.entry(part.into()).or_default(),
                            }
                        }
                    };
                    // rows strictly before this one, among the best kept
                    let before = best.partition_point(|b| *b < key);
                    if before >= self.n {
                        keep[i] = false;
                        dropped = true;
                    } else {
                        let at = best.partition_point(|b| *b <= key);
                        best.insert(at, key);
                        best.truncate(self.n);
                    }
                }
                i += 1;
            }
            if let Some(b) = only {
                table.insert(Box::default(), b);
            }
        }
        Ok(dropped.then_some(keep))
    }

    /// How many order keys the rule keeps, over all open units.
    pub fn len(&self) -> usize {
        self.best
            .values()
            .flat_map(|u| u.values())
            .map(Vec::len)
            .sum()
    }

    /// Units whose last window ends at or before `w` need no entries.
    pub fn evict(&mut self, w: EventTime) {
        self.best = self.best.split_off(&(
            w.saturating_add(1),
            Window::new(EventTime::MIN, EventTime::MIN),
        ));
    }
}
