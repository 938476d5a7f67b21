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

use super::keys::{encode_rows, order_keys, order_keys_fit, ENCODED_ROW};

/// By (expiry, unit), then partition (its key bytes): the best order keys
/// kept, best first (smaller is before).
type Best<K> = BTreeMap<(EventTime, Window), FxHashMap<Box<[u8]>, Vec<K>>>;

/// The order keys kept: of integer columns (one or two, or more that take
/// at most 32 bytes), a pair of integers (see [`order_keys`]), which compare
/// as the bytes do; others, their `arrow::row` bytes.
enum Store {
    Ints(Best<(u128, u128)>),
    Bytes(Best<Box<[u8]>>),
}

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
}

pub(super) struct Pruner {
    partition: Vec<Arc<dyn PhysicalExpr>>,
    order: Vec<Arc<dyn PhysicalExpr>>,
    n: usize,
    part_conv: Option<RowConverter>,
    order_conv: RowConverter,
    /// The order columns' sort options, in `order_conv`'s order.
    order_options: Vec<SortOptions>,
    /// The best order keys of each open unit and partition.
    best: Store,
}

/// `exprs` over the rows of `batch` (see [`super::ingest::evaluate`] for `pass`).
fn values(
    view: &str,
    exprs: &[Arc<dyn PhysicalExpr>],
    batch: &RecordBatch,
    pass: &[bool],
) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| {
            super::ingest::evaluate(e.as_ref(), batch, Some(pass))
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
            best: match order_keys_fit(&p.order.iter().map(|(_, dt, _)| dt).collect::<Vec<_>>()) {
                true => Store::Ints(BTreeMap::new()),
                false => Store::Bytes(BTreeMap::new()),
            },
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
                BatchKeys::of(
                    c,
                    None,
                    &values(view, &self.partition, batch, pass)?,
                    n_rows,
                )
                .map_err(internal)?,
            ),
            None => None,
        };
        let order_cols = values(view, &self.order, batch, pass)?;
        let mut rows = Batch {
            pass,
            times,
            parts: parts.as_ref(),
            panes,
            windows,
            w_prev,
            keep: vec![true; n_rows],
            dropped: false,
        };
        match &mut self.best {
            Store::Ints(best) => {
                let keys = order_keys(&order_cols, &self.order_options).ok_or_else(|| {
                    Error::internal(view, "order keys of integers that do not encode")
                })?;
                rows.prune(best, self.n, |i| &keys[i], |k| *k);
            }
            Store::Bytes(best) => {
                let keys = self
                    .order_conv
                    .convert_columns(&order_cols)
                    .map_err(internal)?;
                rows.prune(best, self.n, |i| keys.row(i).data(), |k: &[u8]| k.into());
            }
        }
        let (keep, dropped) = (rows.keep, rows.dropped);
        Ok(dropped.then_some(keep))
    }

    /// How many order keys the rule keeps, over all open units.
    pub fn len(&self) -> usize {
        fn count<K>(best: &Best<K>) -> usize {
            best.values().flat_map(|u| u.values()).map(Vec::len).sum()
        }
        match &self.best {
            Store::Ints(b) => count(b),
            Store::Bytes(b) => count(b),
        }
    }

    /// Units whose last window ends at or before `w` need no entries.
    pub fn evict(&mut self, w: EventTime) {
        fn split<K>(best: &mut Best<K>, w: EventTime) {
            *best = best.split_off(&(
                w.saturating_add(1),
                Window::new(EventTime::MIN, EventTime::MIN),
            ));
        }
        match &mut self.best {
            Store::Ints(b) => split(b, w),
            Store::Bytes(b) => split(b, w),
        }
    }
}

/// One batch's rows, as [`Pruner::keep`] reads them, and what it decides.
struct Batch<'a> {
    pass: &'a [bool],
    times: &'a [i64],
    parts: Option<&'a BatchKeys>,
    panes: Option<Panes>,
    windows: &'a TimeWindows,
    w_prev: Option<EventTime>,
    keep: Vec<bool>,
    dropped: bool,
}

impl Batch<'_> {
    /// A row's unit, when its last window closes, and the times `[lo, hi)`
    /// that share it.
    fn run_of(&self, t: i64) -> (Window, EventTime, EventTime, EventTime) {
        match self.panes {
            Some(p) => {
                let pane = p.pane_of(t);
                (pane, p.expiry(pane), pane.start, pane.end)
            }
            None => {
                let (w, lo, hi) = self.windows.last_window_run(t);
                (w, w.end, lo, hi)
            }
        }
    }

    /// Rules out the rows with `n` rows strictly before them (by `key`, as
    /// kept in `best`, `own` making a kept key) in their unit and partition,
    /// and keeps the best `n` keys of each.
    fn prune<'k, K: std::borrow::Borrow<V>, V: Ord + ?Sized + 'k>(
        &mut self,
        best: &mut Best<K>,
        n: usize,
        key: impl Fn(usize) -> &'k V,
        own: impl Fn(&V) -> K,
    ) {
        let n_rows = self.pass.len();
        let mut i = 0;
        while i < n_rows {
            if !self.pass[i] {
                i += 1;
                continue;
            }
            let (unit, expires, lo, hi) = self.run_of(self.times[i]);
            if self.w_prev.is_some_and(|wp| expires <= wp) {
                i += 1;
                continue;
            }
            // the run of rows in this unit: its table found once, and
            // without partitions its one entry too (a lookup per row of the
            // empty partition key was 80 % of Nexmark q7's trigger in
            // `perf`, nearly all of it in the `memcmp` of an empty slice)
            let table = best.entry((expires, unit)).or_default();
            let mut only = match self.parts {
                None => Some(std::mem::take(table.entry(Box::default()).or_default())),
                Some(_) => None,
            };
            while i < n_rows {
                if self.pass[i] {
                    let t = self.times[i];
                    // (outside [lo, hi) only at the ends of time can the unit be the same)
                    if !(lo <= t && t < hi) && self.run_of(t).0 != unit {
                        break;
                    }
                    let k = key(i);
                    let kept = match only.as_mut() {
                        Some(b) => b,
                        // the partition's entry, allocated only the first time it is seen
                        None => {
                            let part = self.parts.map_or(&[][..], |p| p.bytes(i));
                            match table.get_mut(part) {
                                Some(b) => b,
                                None => table.entry(part.into()).or_default(),
                            }
                        }
                    };
                    // rows strictly before this one, among the best kept: all n
                    // when the n-th is (most rows, once a unit has n)
                    let before = match kept.get(n.wrapping_sub(1)) {
                        Some(nth) if nth.borrow() < k => n,
                        _ => kept.partition_point(|b| b.borrow() < k),
                    };
                    if before >= n {
                        self.keep[i] = false;
                        self.dropped = true;
                    } else {
                        let at = kept.partition_point(|b| b.borrow() <= k);
                        kept.insert(at, own(k));
                        kept.truncate(n);
                    }
                }
                i += 1;
            }
            if let Some(b) = only {
                table.insert(Box::default(), b);
            }
        }
    }
}
