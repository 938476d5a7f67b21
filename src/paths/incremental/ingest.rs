//! Rows into the dataflow: WHERE, keys and aggregate arguments evaluated on
//! the Arrow batch, keys encoded, and the batch pre-aggregated by
//! (window, key) so the dataflow gets one update per group, not per row.
//!
//! The fold is column-wise: one pass over the rows assigns each its group
//! slot (window or pane, and key id), then one pass per aggregate folds its
//! argument column into the slots' states, reading the Arrow array directly.

use arrow::array::AsArray;
use arrow::array::{
    make_array, new_null_array, Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array,
    Float64Array, Int64Array, RecordBatch, UInt32Array, UInt64Array, UInt8Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, Int64Type};
use arrow::row::Rows;
use datafusion::physical_expr::PhysicalExpr;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use thund_dataflows::{AggKind, AggState, Panes, Value};

use super::extremes::extremes_only;
use super::keys::{
    fixed_rows, packed, packed_columns, packed_mid, shard_of, FixedRows, KeyDictionary, Keys,
    MixMap, PackedKey, GLOBAL,
};
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::sql::checked::canonical_array;
use crate::paths::OnTime;
use crate::plan::{CompiledAgg, Tagged};
use crate::time::EventTime;
use crate::window::{TimeWindows, Window};

/// One aggregate's argument over a batch, typed for the column-wise fold.
pub(super) enum Arg {
    /// `COUNT`: only whether each row's argument is non-null matters.
    Count(Option<NullBuffer>),
    Float(Float64Array),
    Int(Int64Array),
    UInt(UInt64Array),
    Decimal(Decimal128Array),
}

impl Arg {
    /// Row `i`'s value as an integer fold takes it (a `COUNT` counts 1;
    /// `None` for a float, which no integer fold takes).
    pub(super) fn int_at(&self, i: usize) -> Option<i128> {
        match self {
            Arg::Count(_) => Some(1),
            Arg::Float(_) => None,
            Arg::Int(a) => Some(i128::from(a.value(i))),
            Arg::UInt(a) => Some(i128::from(a.value(i))),
            Arg::Decimal(a) => Some(a.value(i)),
        }
    }

    pub(super) fn nulls(&self) -> Option<&NullBuffer> {
        match self {
            Arg::Count(n) => n.as_ref(),
            Arg::Float(a) => a.nulls(),
            Arg::Int(a) => a.nulls(),
            Arg::UInt(a) => a.nulls(),
            Arg::Decimal(a) => a.nulls(),
        }
    }
}

/// Rows per batch from which the shards fold on their own threads (below, the
/// threads would cost more than they save).
const PARALLEL_ROWS: usize = 4096;

/// One shard's groups of this trigger: `(unit, key id)`, their states (one
/// typed column per aggregate), and the lookups that find them.
#[derive(Default)]
pub(super) struct Groups {
    groups: Vec<(Window, u64)>,
    cols: Vec<Col>,
    /// The units (windows or panes) met so far, by index: the lookups below
    /// hash a unit's index, not the unit.
    units: FxHashMap<Window, usize>,
    index: FxHashMap<(usize, u64), usize>,
    short_index: MixMap<(usize, u128), usize>,
    /// The same for keys of 16 to 31 bytes, by [`packed_mid`] key.
    mid_index: MixMap<(usize, (u128, u128)), usize>,
    /// The same for keys of at most 12 bytes in the first 2^24 units, whose
    /// unit fits in the packed key's unused bytes: 24-byte entries instead of
    /// 48, so twice as many stay in cache.
    narrow_index: MixMap<(u64, u64), u32>,
    /// The new groups of keys of at most 15 bytes, and of 16 to 31, whose
    /// ids are yet to be interned (in one batch after the rows).
    pending_short: Pending<u128>,
    pending_mid: Pending<(u128, u128)>,
    /// Their ids, as the dictionary gives them.
    pending_ids: Vec<u64>,
    /// Session windows, by group slot: its rows' first and last time, how
    /// many rows, how many WHERE let through.
    extent: Vec<[i64; 4]>,
}

impl Groups {
    /// Empties the groups, keeping their buffers and tables for the next trigger.
    fn clear(&mut self) {
        self.groups.clear();
        self.cols.iter_mut().for_each(Col::clear);
        self.units.clear();
        self.index.clear();
        self.short_index.clear();
        self.mid_index.clear();
        self.narrow_index.clear();
        self.pending_short.clear();
        self.pending_mid.clear();
        self.extent.clear();
    }

    /// Whether its buffers are worth keeping for the next trigger (those of a
    /// trigger with very many groups are let go).
    fn reusable(&self) -> bool {
        self.groups.capacity() <= KEEP_GROUPS
    }
}

/// New groups whose keys' ids are yet to be interned, in the order they
/// were made: their slots, and their packed keys with the end of the last
/// window each feeds. Interned in one batch after the rows (see
/// [`KeyDictionary::intern_packed`]), so that the dictionary's cache misses
/// overlap.
struct Pending<K> {
    slots: Vec<usize>,
    keys: Vec<(K, EventTime)>,
}

impl<K> Default for Pending<K> {
    fn default() -> Self {
        Pending {
            slots: Vec::new(),
            keys: Vec::new(),
        }
    }
}

impl<K: PackedKey> Pending<K> {
    fn clear(&mut self) {
        self.slots.clear();
        self.keys.clear();
    }

    /// A new group's `slot`, of key `key` whose last window ends at `end`.
    #[inline]
    fn push(&mut self, slot: usize, key: K, end: EventTime) -> usize {
        self.slots.push(slot);
        self.keys.push((key, end));
        slot
    }

    /// Interns the keys in `dict` (shard `shard` of `shards`) and gives
    /// their groups in `groups` their ids; empties itself.
    fn resolve(
        &mut self,
        dict: &mut KeyDictionary,
        groups: &mut [(Window, u64)],
        ids: &mut Vec<u64>,
        (shard, shards): (usize, usize),
    ) {
        if self.keys.is_empty() {
            return;
        }
        dict.intern_packed(&self.keys, ids);
        for (&slot, &local) in self.slots.iter().zip(ids.iter()) {
            groups[slot].1 = Keys::id(local, shard, shards);
        }
        self.clear();
    }
}

/// Groups per shard whose buffers are kept from one trigger to the next.
const KEEP_GROUPS: usize = 1 << 16;

/// One aggregate's states over a shard's groups, by group slot: `count` non-null
/// inputs and, once it is positive, the value folded so far.
enum Col {
    Count(Vec<i64>),
    Float { count: Vec<i64>, val: Vec<f64> },
    Int { count: Vec<i64>, val: Vec<i128> },
}

impl Col {
    fn new(kind: AggKind) -> Self {
        match kind {
            AggKind::Count => Col::Count(Vec::new()),
            k if k.is_float() => Col::Float {
                count: Vec::new(),
                val: Vec::new(),
            },
            _ => Col::Int {
                count: Vec::new(),
                val: Vec::new(),
            },
        }
    }

    /// Removes every group's state, keeping the buffers.
    fn clear(&mut self) {
        match self {
            Col::Count(count) => count.clear(),
            Col::Float { count, val } => {
                count.clear();
                val.clear();
            }
            Col::Int { count, val } => {
                count.clear();
                val.clear();
            }
        }
    }

    /// Adds the empty state of a new group.
    fn push(&mut self) {
        match self {
            Col::Count(count) => count.push(0),
            Col::Float { count, val } => {
                count.push(0);
                val.push(0.0);
            }
            Col::Int { count, val } => {
                count.push(0);
                val.push(0);
            }
        }
    }

    /// The state of group slot `s`.
    fn state(&self, s: usize) -> AggState {
        let (count, value) = match self {
            Col::Count(count) => (count[s], Value::Int(i128::from(count[s]))),
            Col::Float { count, val } => (count[s], Value::Float(val[s])),
            Col::Int { count, val } => (count[s], Value::Int(val[s])),
        };
        if count == 0 {
            AggState::EMPTY
        } else {
            AggState { count, value }
        }
    }
}

/// A batch's group keys, encoded: by `arrow::row` (any key), or, when every
/// key column is an integer and a row fits, straight to each row's [`packed`]
/// form (see [`packed_columns`]: the same integers, without encoding rows),
/// or for keys of 16 to 31 bytes to the bytes `arrow::row` would give, one
/// fixed array per row (see [`fixed_rows`]).
enum KeyRows {
    Rows(Rows),
    Packed(Vec<u128>),
    Fixed(FixedRows),
}

impl KeyRows {
    /// Row `i`'s packed key and, if it has none (a key of 16 bytes or more),
    /// its bytes.
    #[inline]
    fn get(&self, i: usize) -> (Option<u128>, &[u8]) {
        match self {
            KeyRows::Rows(r) => {
                let bytes = r.row(i).data();
                (packed(bytes), bytes)
            }
            KeyRows::Packed(p) => (Some(p[i]), &[]),
            KeyRows::Fixed(f) => (None, &f.rows[i][..f.len]),
        }
    }
}

/// The unit of the last row looked at, and the times `[lo, hi)` that share it.
struct Run {
    lo: EventTime,
    hi: EventTime,
    unit: Window,
    /// Its index in [`Groups::units`].
    index: usize,
    /// When its last window closes.
    expires: EventTime,
    /// Whether that was at or before the previous watermark (its rows make no group).
    closed: bool,
}

/// What every shard reads of one batch.
struct Batch<'a> {
    pass: &'a [bool],
    key_rows: Option<&'a KeyRows>,
    /// Each shard's rows, in order (empty with one shard or no keys: every
    /// row is shard 0's).
    rows_of: &'a [Vec<usize>],
    times: &'a [i64],
    args: &'a [Arg],
    kinds: &'a [AggKind],
    /// By fold column (of `args`), the first aggregate that folds it.
    first: &'a [usize],
    panes: Option<Panes>,
    windows: &'a TimeWindows,
    w_prev: Option<EventTime>,
    shards: usize,
    /// No group keys (a global aggregate, whose dataflow key may still be a
    /// value kept per value): a window with rows has its row.
    global: bool,
    /// Session windows: a row WHERE refuses still extends its session (its
    /// slot's extent), without feeding an aggregate.
    session: bool,
}

impl Batch<'_> {
    /// Fold error `e` of fold column `c` in a group of `unit` (`extent`: a
    /// session's), naming the aggregate and the unit (a pane's first window
    /// is named by `dataflow_error`), or the session of the batch's rows.
    #[cold]
    fn at(
        &self,
        e: thund_dataflows::Error,
        unit: Window,
        extent: Option<&[i64; 4]>,
        c: usize,
    ) -> thund_dataflows::Error {
        let window = match extent {
            // (a session's unit is three gaps: see `session`)
            Some(&[first, last, ..]) if self.session => {
                Window::new(first, last.saturating_add((unit.end - unit.start) / 3))
            }
            _ => unit,
        };
        e.placed(window, self.first.get(c).copied())
    }

    /// The unit (pane, or last window) of time `t`, the times that share it,
    /// and its index in `units` (added if new).
    fn run_of(&self, t: EventTime, units: &mut FxHashMap<Window, usize>) -> Run {
        let (unit, lo, hi, expires) = match self.panes {
            Some(p) => {
                let pane = p.pane_of(t);
                (pane, pane.start, pane.end, p.expiry(pane))
            }
            None => {
                let (w, lo, hi) = self.windows.last_window_run(t);
                (w, lo, hi, w.end)
            }
        };
        let next = units.len();
        Run {
            lo,
            hi,
            unit,
            index: *units.entry(unit).or_insert(next),
            expires,
            closed: self.w_prev.is_some_and(|wp| expires <= wp),
        }
    }
}

/// Folds the rows of `b` whose key shard `shard` owns into `g`, interning
/// their keys in `dict` (that shard's dictionary). A global aggregate's rows
/// all belong to shard 0.
fn fold_shard(
    b: &Batch<'_>,
    shard: usize,
    dict: &mut KeyDictionary,
    g: &mut Groups,
) -> std::result::Result<(), thund_dataflows::Error> {
    if b.key_rows.is_none() && shard != 0 {
        return Ok(());
    }
    // pass 1: the slot of each row that feeds a group, with the rows and the
    // keys' encoding chosen once per batch, not per row
    macro_rules! pass1 {
        ($key:expr) => {
            match b.rows_of.get(shard) {
                Some(own) => assign_slots(b, shard, dict, g, own.iter().copied(), $key),
                None => assign_slots(b, shard, dict, g, 0..b.pass.len(), $key),
            }
        };
    }
    let fed = match b.key_rows {
        None => pass1!(|_| None),
        Some(KeyRows::Packed(p)) => pass1!(|i| Some((Some(p[i]), &[][..]))),
        Some(KeyRows::Rows(r)) => pass1!(|i| {
            let bytes = r.row(i).data();
            Some((packed(bytes), bytes))
        }),
        Some(KeyRows::Fixed(f)) => pass1!(|i| Some((None, &f.rows[i][..f.len]))),
    };
    // pass 2: one pass per aggregate over its argument column
    for (c, ((arg, &kind), col)) in b.args.iter().zip(b.kinds).zip(&mut g.cols).enumerate() {
        fold_arg(kind, arg, &fed, col)
            .map_err(|(e, slot)| b.at(e, g.groups[slot].0, g.extent.get(slot), c))?;
    }
    Ok(())
}

/// A packed key `p` of at most 12 bytes with unit index `u < 2^24` in its
/// unused bytes 12..15 (below the length byte), as two words: distinct
/// `(u, p)` give distinct results. `None` for longer keys or later units.
#[inline]
fn narrow(p: u128, u: usize) -> Option<(u64, u64)> {
    let len = (p >> 120) as usize;
    if len > 12 || u >= 1 << 24 {
        return None;
    }
    Some((p as u64, (p >> 64) as u64 | (u as u64) << 32))
}

/// Pass 1 of [`fold_shard`] over `rows` (in order): `(row, slot)` for each
/// row that feeds a group. A row feeds one unit: its pane (hopping windows)
/// or its window (tumbling); a key is interned with the end of the last
/// window it feeds.
fn assign_slots<'k>(
    b: &Batch<'_>,
    shard: usize,
    dict: &mut KeyDictionary,
    g: &mut Groups,
    rows: impl Iterator<Item = usize>,
    key_of: impl Fn(usize) -> Option<(Option<u128>, &'k [u8])>,
) -> Vec<(usize, usize)> {
    let mut fed: Vec<(usize, usize)> = Vec::with_capacity(rows.size_hint().0);
    let mut run: Option<Run> = None;
    for i in rows {
        let passes = b.pass[i];
        // a filtered row makes no group; a global aggregate still has its
        // window (with a value kept per value, as an entry that counts nothing)
        if !passes && !b.global && !b.session {
            continue;
        }
        let t = b.times[i];
        let run = match &mut run {
            Some(r) if r.lo <= t && t < r.hi => r,
            slot => slot.insert(b.run_of(t, &mut g.units)),
        };
        // the unit closed before the row came (the late rule refuses such rows)
        if run.closed {
            continue;
        }
        let (unit, u, expires) = (run.unit, run.index, run.expires);
        let key = key_of(i);
        let fits_u32 = g.groups.len() < u32::MAX as usize;
        // (borrowing the groups apart from the tables whose entries make them)
        let (groups, cols) = (&mut g.groups, &mut g.cols);
        let mut new_group = |key: u64| push_group(groups, cols, b.kinds, unit, key);
        let id = |local| Keys::id(local, shard, b.shards);
        // a short key finds its group by its packed bytes: the dictionary is
        // asked once per group and trigger, not once per row, and after the
        // rows, for all of them at once
        let slot = match key {
            Some((Some(p), _)) => {
                let pending = &mut g.pending_short;
                let mut new_short = || pending.push(new_group(PENDING), p, expires);
                // (past 2^32 groups, the wide table: a group found in neither
                // table again is only split in two, which the dataflow sums)
                match narrow(p, u).filter(|_| fits_u32) {
                    Some(k) => {
                        *g.narrow_index
                            .entry(k)
                            .or_insert_with(|| new_short() as u32) as usize
                    }
                    None => *g.short_index.entry((u, p)).or_insert_with(new_short),
                }
            }
            // a key of 16 to 31 bytes likewise, by its two integers
            Some((None, bytes)) => match packed_mid(bytes) {
                Some(m) => *g
                    .mid_index
                    .entry((u, m))
                    .or_insert_with(|| g.pending_mid.push(new_group(PENDING), m, expires)),
                None => {
                    let key = id(dict.intern(bytes, expires));
                    *g.index.entry((u, key)).or_insert_with(|| new_group(key))
                }
            },
            None => *g
                .index
                .entry((u, GLOBAL))
                .or_insert_with(|| new_group(GLOBAL)),
        };
        if b.session {
            if slot == g.extent.len() {
                g.extent.push([t, t, 0, 0]);
            }
            let e = &mut g.extent[slot];
            e[0] = e[0].min(t);
            e[1] = e[1].max(t);
            e[2] += 1;
            e[3] += i64::from(passes);
        }
        if passes {
            fed.push((i, slot));
        }
    }
    let at = (shard, b.shards);
    (g.pending_short).resolve(dict, &mut g.groups, &mut g.pending_ids, at);
    (g.pending_mid).resolve(dict, &mut g.groups, &mut g.pending_ids, at);
    fed
}

/// The key id of a new group until its key is interned (see [`Pending`]).
const PENDING: u64 = u64::MAX;

/// A new group of `unit` and `key`, its states (one per aggregate of
/// `kinds`) empty; its slot. Called once per group and trigger, not per row:
/// kept out of line, so that the per-row loop of [`assign_slots`] does not
/// carry it.
#[inline(never)]
fn push_group(
    groups: &mut Vec<(Window, u64)>,
    cols: &mut Vec<Col>,
    kinds: &[AggKind],
    unit: Window,
    key: u64,
) -> usize {
    groups.push((unit, key));
    if cols.len() < kinds.len() {
        *cols = kinds.iter().map(|&k| Col::new(k)).collect();
    }
    cols.iter_mut().for_each(Col::push);
    groups.len() - 1
}

/// Folds one aggregate's argument column into its typed states, for the
/// `(row, slot)` pairs of `fed` (the rows that feed a group, in row order),
/// with the kind chosen once per column rather than per row.
fn fold_arg(
    kind: AggKind,
    arg: &Arg,
    fed: &[(usize, usize)],
    col: &mut Col,
) -> std::result::Result<(), FoldError> {
    let nulls = arg.nulls();
    match (col, arg) {
        (Col::Count(count), _) => for_each_fed(fed, nulls, |_, s| bump(kind, &mut count[s])),
        (Col::Float { count, val }, Arg::Float(a)) => {
            let v = a.values();
            // the column is canonical already (see `IncrementalView::arg`)
            let x = |i: usize| v[i];
            match kind {
                AggKind::SumFloat => {
                    fold_typed(kind, fed, nulls, count, val, x, |y, x| Some(y + x))
                }
                AggKind::MinFloat => fold_typed(kind, fed, nulls, count, val, x, |y, x| {
                    Some(if x.total_cmp(&y).is_lt() { x } else { y })
                }),
                _ => fold_typed(kind, fed, nulls, count, val, x, |y, x| {
                    Some(if x.total_cmp(&y).is_gt() { x } else { y })
                }),
            }
        }
        (Col::Int { count, val }, Arg::Int(a)) => {
            fold_ints(kind, fed, nulls, count, val, |i| i128::from(a.value(i)))
        }
        (Col::Int { count, val }, Arg::UInt(a)) => {
            fold_ints(kind, fed, nulls, count, val, |i| i128::from(a.value(i)))
        }
        (Col::Int { count, val }, Arg::Decimal(a)) => {
            fold_ints(kind, fed, nulls, count, val, |i| a.value(i))
        }
        // the plan types every argument for its kind: a mismatch is named, never folded
        (_, arg) => match fed
            .iter()
            .find(|&&(i, _)| nulls.is_none_or(|n| n.is_valid(i)))
        {
            None => Ok(()),
            Some(&(i, s)) => Err((
                thund_dataflows::Error::TypeMismatch {
                    kind,
                    value: match arg {
                        Arg::Float(a) => Value::Float(a.value(i)),
                        Arg::Int(a) => Value::Int(i128::from(a.value(i))),
                        Arg::UInt(a) => Value::Int(i128::from(a.value(i))),
                        Arg::Decimal(a) => Value::Int(a.value(i)),
                        Arg::Count(_) => Value::Null,
                    },
                },
                s,
            )),
        },
    }
}

/// The rows of `batch` where a predicate (`what`: WHERE, FILTER) is true —
/// not false, not null — as a validity mask.
pub(super) fn true_rows(
    view: &str,
    what: &str,
    predicate: &dyn PhysicalExpr,
    batch: &RecordBatch,
    pass: Option<&[bool]>,
) -> Result<NullBuffer> {
    let m = evaluate(predicate, batch, pass).map_err(|e| Error::eval(view, e))?;
    let m = m.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
        Error::internal(view, format!("{what} did not evaluate to a boolean array"))
    })?;
    let values = match m.nulls() {
        None => m.values().clone(),
        Some(n) => m.values() & n.inner(),
    };
    Ok(NullBuffer::new(values))
}

/// `e` over `batch`, as SQL evaluates it after WHERE: where that fails and
/// WHERE let only the rows `pass` through, over those rows alone, NULL at
/// the others (which feed nothing). So `GROUP BY CAST(f AS BIGINT) … WHERE
/// ABS(f) < 10` never casts the infinity WHERE refused, on either path; a
/// batch whose every row can be evaluated is evaluated once, whole.
pub(super) fn evaluate(
    e: &dyn PhysicalExpr,
    batch: &RecordBatch,
    pass: Option<&[bool]>,
) -> datafusion::error::Result<ArrayRef> {
    let n = batch.num_rows();
    match (e.evaluate(batch).and_then(|c| c.into_array(n)), pass) {
        (Ok(a), _) => Ok(a),
        (Err(err), None) => Err(err),
        (Err(err), Some(pass)) if pass.iter().all(|p| *p) => Err(err),
        // no row passes: nothing is evaluated (a constant that fails, `ABS`
        // of `i64::MIN`, fails only where a row reaches it)
        (Err(err), Some(pass)) if !pass.iter().any(|p| *p) => match e.data_type(&batch.schema()) {
            Ok(t) => Ok(arrow::array::new_null_array(&t, n)),
            Err(_) => Err(err),
        },
        (Err(_), Some(pass)) => {
            let through = filter_record_batch(batch, &BooleanArray::from(pass.to_vec()))?;
            let a = e
                .evaluate(&through)
                .and_then(|c| c.into_array(through.num_rows()))?;
            let mut next = 0u32;
            let at: UInt32Array = (pass.iter())
                .map(|&p| {
                    p.then(|| {
                        next += 1;
                        next - 1
                    })
                })
                .collect();
            Ok(arrow::compute::take(&a, &at, None)?)
        }
    }
}

/// One more input in a count: an overflow is an error, never a wrap.
#[inline]
fn bump(kind: AggKind, count: &mut i64) -> std::result::Result<(), thund_dataflows::Error> {
    *count = count.checked_add(1).ok_or_else(|| overflow(kind))?;
    Ok(())
}

fn overflow(kind: AggKind) -> thund_dataflows::Error {
    thund_dataflows::Error::Overflow {
        kind,
        window: None,
        detail: String::new(),
        aggregate: None,
    }
}

/// A fold's error, and the group slot whose state it was folding.
type FoldError = (thund_dataflows::Error, usize);

/// Calls `f(row, slot)` for every pair of `fed` whose row is not null.
#[inline]
fn for_each_fed(
    fed: &[(usize, usize)],
    nulls: Option<&NullBuffer>,
    mut f: impl FnMut(usize, usize) -> std::result::Result<(), thund_dataflows::Error>,
) -> std::result::Result<(), FoldError> {
    let at = |&(i, s): &(usize, usize)| f(i, s).map_err(|e| (e, s));
    match nulls {
        None => fed.iter().try_for_each(at),
        Some(n) => fed.iter().filter(|&&(i, _)| n.is_valid(i)).try_for_each(at),
    }
}

/// A typed fold: a slot's first input is its value, later ones are combined
/// by `pick(value, input)` (`None`: an overflow).
#[inline]
fn fold_typed<V: Copy>(
    kind: AggKind,
    fed: &[(usize, usize)],
    nulls: Option<&NullBuffer>,
    count: &mut [i64],
    val: &mut [V],
    input: impl Fn(usize) -> V,
    pick: impl Fn(V, V) -> Option<V>,
) -> std::result::Result<(), FoldError> {
    for_each_fed(fed, nulls, |i, s| {
        let x = input(i);
        val[s] = if count[s] == 0 {
            x
        } else {
            pick(val[s], x).ok_or_else(|| overflow(kind))?
        };
        bump(kind, &mut count[s])
    })
}

/// An integer aggregate's fold (sums checked in `i128`).
fn fold_ints(
    kind: AggKind,
    fed: &[(usize, usize)],
    nulls: Option<&NullBuffer>,
    count: &mut [i64],
    val: &mut [i128],
    input: impl Fn(usize) -> i128,
) -> std::result::Result<(), FoldError> {
    match kind {
        AggKind::SumInt => fold_typed(kind, fed, nulls, count, val, input, i128::checked_add),
        AggKind::MinInt => fold_typed(kind, fed, nulls, count, val, input, |y, x| Some(y.min(x))),
        _ => fold_typed(kind, fed, nulls, count, val, input, |y, x| Some(y.max(x))),
    }
}

impl IncrementalView {
    /// The dataflow's key columns of a batch (`keys`: with several arguments
    /// kept per value, the group keys only), canonical (`-0.0` as `0.0`, one
    /// NaN); see [`evaluate`] for `pass`.
    pub(super) fn key_columns(
        &self,
        batch: &RecordBatch,
        pass: Option<&[bool]>,
    ) -> Result<Vec<ArrayRef>> {
        self.plan
            .keys
            .iter()
            .map(|k| self.canonical(k.as_ref(), batch, pass))
            .collect()
    }

    /// One expression over a batch, canonical (`-0.0` as `0.0`, one NaN).
    fn canonical(
        &self,
        e: &dyn PhysicalExpr,
        batch: &RecordBatch,
        pass: Option<&[bool]>,
    ) -> Result<ArrayRef> {
        evaluate(e, batch, pass)
            .map(|a| canonical_array(&a))
            .map_err(|err| Error::eval(&self.view, err))
    }

    /// The window in which a batch's rows (`times`, those `pass` lets through) split
    /// their entries: each row's aggregates kept per value fold into its
    /// value's entry, the others into its group's entry (the value NULL, for
    /// several arguments the first's), so a row whose value counts already
    /// need not be folded (see [`Self::unknown_values`]). Only where
    /// Update or Complete mode holds the window's entries, every row is in
    /// that one tumbling window, and the entries are plain (no sessions, no
    /// later stage, no top rows, no least and greatest values, a group key):
    /// a batch of windows opening now makes an entry per value anyway, and
    /// the group's entry would be one more.
    fn splits(&self, times: &[EventTime], pass: &[bool]) -> Option<Window> {
        let store = self.distinct.as_ref()?;
        if self.config.panes.is_some()
            || self.plan.keeps_refused_rows()
            || self.plan.extremes_per_value()
            || self.pruner.is_some()
            || self.plan.group_keys == 0
        {
            return None;
        }
        let mut through = times.iter().zip(pass).filter(|(_, p)| **p).map(|(t, _)| *t);
        let first = through.next()?;
        let (lo, hi) = through.fold((first, first), |(lo, hi), t| (lo.min(t), hi.max(t)));
        let window = self.plan.windows.last_window(lo);
        (window == self.plan.windows.last_window(hi) && store.holds(&window)).then_some(window)
    }

    /// Of the rows `pass` lets through, those whose value's entry (their
    /// key `r`, argument `tag`) `window` does not hold as counted already
    /// for every aggregate kept per value the row feeds (`args`, by fold).
    fn unknown_values(
        &self,
        store: &super::distinct::DistinctGroups,
        window: Window,
        r: &KeyRows,
        args: &[Arg],
        tag: usize,
        pass: &[bool],
    ) -> Vec<bool> {
        // by fold: the bits of the aggregates kept per value it feeds
        let feeds: Vec<(&Arg, Vec<usize>)> = args
            .iter()
            .enumerate()
            .map(|(x, arg)| {
                let bits = (self.folds.column_of.iter().enumerate())
                    .filter(|&(j, &c)| c == x && self.plan.aggs[j].tag == tag)
                    .filter_map(|(j, _)| store.seen_bit(j))
                    .collect();
                (arg, bits)
            })
            .filter(|(_, bits): &(&Arg, Vec<usize>)| !bits.is_empty())
            .collect();
        let mut bits: Vec<usize> = Vec::new();
        pass.iter()
            .enumerate()
            .map(|(i, &p)| {
                if !p {
                    return false;
                }
                bits.clear();
                for (arg, b) in &feeds {
                    if !arg.nulls().is_some_and(|v| v.is_null(i)) {
                        bits.extend_from_slice(b);
                    }
                }
                let (packed, bytes) = r.get(i);
                !self
                    .keys
                    .lookup(packed, bytes)
                    .is_some_and(|id| store.counted(&window, id, &bits))
            })
            .collect()
    }

    /// The key columns of the group entries of `n` rows with dataflow keys
    /// `keys`: the group keys, the first argument's index with several, and
    /// a NULL value.
    fn group_entry_columns(&self, keys: &[ArrayRef], n: usize) -> Vec<ArrayRef> {
        let mut cols = keys[..self.plan.group_keys].to_vec();
        if self.plan.tagged.is_some() {
            cols.push(Arc::new(UInt8Array::from_value(0, n)));
        }
        if let Some(value) = self.plan.key_fields.last() {
            cols.push(new_null_array(value.data_type(), n));
        }
        cols
    }

    /// With several arguments kept per value, the key columns of argument
    /// `tag`'s entries: the group keys' `groups`, `tag`, that argument's values.
    fn argument_key_columns(
        &self,
        t: &Tagged,
        groups: &[ArrayRef],
        batch: &RecordBatch,
        tag: usize,
        pass: &[bool],
    ) -> Result<Vec<ArrayRef>> {
        let index = u8::try_from(tag)
            .map_err(|_| Error::internal(&self.view, "an argument index past 255"))?;
        let values = self.canonical(t.args[tag].as_ref(), batch, Some(pass))?;
        let values: ArrayRef = match &t.encode {
            None => values,
            // arguments of different types: each value's row-format bytes
            Some(encoders) => {
                let rows = encoders[tag].convert_columns(&[values])?;
                Arc::new(BinaryArray::from_iter_values(rows.iter().map(|r| r.data())))
            }
        };
        let mut cols = groups.to_vec();
        cols.push(Arc::new(UInt8Array::from_value(index, batch.num_rows())));
        cols.push(values);
        Ok(cols)
    }

    /// An aggregate's argument column, typed for the fold. With `only` (its
    /// `FILTER`'s true rows, as validity), the other rows are null to it: no
    /// aggregate folds a null, so they feed nothing.
    pub(super) fn arg(
        &self,
        a: &CompiledAgg,
        arr: ArrayRef,
        only: Option<NullBuffer>,
    ) -> Result<Arg> {
        let wrong =
            |what: &str| Error::internal(&self.view, format!("an aggregate argument {what}"));
        if a.kind == AggKind::Count {
            return Ok(Arg::Count(NullBuffer::union(
                arr.logical_nulls().as_ref(),
                only.as_ref(),
            )));
        }
        let arr = match only {
            None => arr,
            Some(only) => {
                let data = arr.to_data();
                let nulls = NullBuffer::union(data.nulls(), Some(&only));
                // the same values, with fewer of them valid
                make_array(data.into_builder().nulls(nulls).build()?)
            }
        };
        Ok(match &a.input_type {
            // canonical once per column (`-0.0` as `0.0`, one NaN), not per row
            DataType::Float32 | DataType::Float64 => Arg::Float(
                canonical_array(&cast(&arr, &DataType::Float64)?)
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .ok_or_else(|| wrong("did not cast to Float64"))?
                    .clone(),
            ),
            DataType::Decimal128(_, _) => Arg::Decimal(
                arr.as_any()
                    .downcast_ref::<Decimal128Array>()
                    .ok_or_else(|| wrong("of type Decimal128 is not a Decimal128 array"))?
                    .clone(),
            ),
            DataType::UInt64 => Arg::UInt(
                arr.as_any()
                    .downcast_ref::<UInt64Array>()
                    .ok_or_else(|| wrong("of type UInt64 is not a UInt64 array"))?
                    .clone(),
            ),
            _ => Arg::Int(
                cast(&arr, &DataType::Int64)?
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| wrong("did not cast to Int64"))?
                    .clone(),
            ),
        })
    }

    /// Pre-aggregate this trigger's rows by (window or pane, key) and insert them.
    ///
    /// With more than one worker, the key dictionary has a shard per worker
    /// and each shard folds its keys' rows on its own thread (the calling one
    /// and scoped helpers; the workers wait for the updates meanwhile).
    pub(super) fn ingest(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<()> {
        let view = self.view.clone();
        let folds = &self.folds;
        let kinds: Vec<AggKind> = folds
            .first
            .iter()
            .map(|&j| self.plan.aggs[j].kind)
            .collect();
        let m = kinds.len();
        let shards = self.keys.shards_mut().len();
        // the last trigger's buffers, emptied
        let mut groups = std::mem::take(&mut self.scratch);
        groups.resize_with(shards, Groups::default);
        groups.iter_mut().for_each(Groups::clear);
        for mut o in on_time {
            let mut pass = vec![true; o.batch.num_rows()];
            for f in &self.plan.filters {
                let m = true_rows(&view, "WHERE", f.as_ref(), &o.batch, None)?;
                for (i, p) in pass.iter_mut().enumerate() {
                    *p &= m.is_valid(i);
                }
            }
            // a top-rows query: only the rows that can still be in a result
            if let Some(p) = &mut self.pruner {
                let keep = p.keep(
                    &view,
                    &o.batch,
                    o.times.values(),
                    &pass,
                    self.config.panes,
                    &self.plan.windows,
                    w_prev,
                )?;
                if let Some(keep) = keep {
                    let mask = BooleanArray::from(keep);
                    o.batch = filter_record_batch(&o.batch, &mask)?;
                    o.times = arrow::compute::filter(&o.times, &mask)?
                        .as_primitive::<Int64Type>()
                        .clone();
                    pass = pass
                        .into_iter()
                        .zip(mask.values().iter())
                        .filter(|(_, k)| *k)
                        .map(|(p, _)| p)
                        .collect();
                }
            }
            let batch = &o.batch;
            let n = batch.num_rows();
            let held = self.splits(o.times.values(), &pass);
            let split = held.is_some();
            // each FILTER's true rows, and each argument evaluated on the rows
            // its FILTER keeps (as SQL does: `SUM(-v) FILTER (WHERE v > 0)`
            // never negates `i64::MIN`), NULL elsewhere
            let filtered = folds
                .first
                .iter()
                .map(|&j| {
                    let a = &self.plan.aggs[j];
                    a.filter
                        .as_ref()
                        .map(|f| true_rows(&view, "FILTER", f.as_ref(), batch, Some(&pass)))
                        .transpose()
                })
                .collect::<Result<Vec<_>>>()?;
            // a value kept per value (the last key, or argument `tag`'s),
            // evaluated only where an aggregate kept per value takes the row:
            // every row WHERE keeps, unless each such aggregate has a FILTER
            // (then where one holds)
            let value_rows_of = |tag: Option<usize>| -> Option<Vec<bool>> {
                let fs: Vec<Option<&NullBuffer>> = (folds.first.iter().zip(&filtered))
                    .filter(|(j, _)| {
                        let a = &self.plan.aggs[**j];
                        a.per_value.is_some() && tag.is_none_or(|t| a.tag == t)
                    })
                    .map(|(_, f)| f.as_ref())
                    .collect();
                let fs: Vec<&NullBuffer> = match fs.is_empty() {
                    true => None,
                    false => fs.into_iter().collect(),
                }?;
                Some(
                    (pass.iter().enumerate())
                        .map(|(i, p)| *p && fs.iter().any(|f| f.is_valid(i)))
                        .collect(),
                )
            };
            let (value_rows, tag_rows): (Option<Vec<bool>>, Vec<Option<Vec<bool>>>) =
                match &self.plan.tagged {
                    Some(t) => (
                        None,
                        (0..t.args.len()).map(|g| value_rows_of(Some(g))).collect(),
                    ),
                    None => (value_rows_of(None), Vec::new()),
                };
            // the keys and arguments evaluated once per batch
            let mut keys = match &self.converter {
                None => Vec::new(),
                Some(_) => {
                    let last = self.plan.keys.len().saturating_sub(1);
                    let value = value_rows
                        .as_deref()
                        .filter(|_| self.plan.keeps_per_value());
                    (self.plan.keys.iter().enumerate())
                        .map(|(i, k)| match (i == last, value) {
                            (true, Some(rows)) => self.canonical(k.as_ref(), batch, Some(rows)),
                            _ => self.canonical(k.as_ref(), batch, Some(&pass)),
                        })
                        .collect::<Result<Vec<_>>>()?
                }
            };
            // MIN/MAX kept per value: two entries per unit and group
            if self.plan.extremes_per_value() {
                let only = extremes_only(
                    &keys,
                    o.times.values(),
                    &pass,
                    self.config.panes,
                    &self.plan.windows,
                )?;
                if let (Some(v), Some(last)) = (only, keys.last_mut()) {
                    *last = v;
                }
            }
            let arrs = folds
                .first
                .iter()
                .zip(&filtered)
                .map(|(&j, only)| {
                    let feeds: Option<Vec<bool>> = only.as_ref().map(|m| {
                        (pass.iter().enumerate())
                            .map(|(i, p)| *p && m.is_valid(i))
                            .collect()
                    });
                    let rows = feeds.as_deref().unwrap_or(&pass);
                    evaluate(self.plan.aggs[j].arg.as_ref(), batch, Some(rows))
                        .map_err(|e| Error::eval(&view, e))
                })
                .collect::<Result<Vec<_>>>()?;
            // one entry per row, or with several arguments kept per value one per argument;
            // split, the aggregates not kept per value in one more entry per row, its group's
            let tags = self.plan.tagged.as_ref().map_or(1, |t| t.args.len());
            for tag in 0..tags + usize::from(split) {
                let group_entry = tag == tags;
                let key_rows = match &self.converter {
                    None => None,
                    Some(conv) => {
                        let tagged;
                        let cols = match &self.plan.tagged {
                            _ if group_entry => {
                                tagged = self.group_entry_columns(&keys, n);
                                &tagged
                            }
                            None => &keys,
                            Some(t) => {
                                let rows = tag_rows.get(tag).and_then(|r| r.as_deref());
                                let rows = rows.unwrap_or(&pass);
                                tagged = self.argument_key_columns(t, &keys, batch, tag, rows)?;
                                &tagged
                            }
                        };
                        Some(match (packed_columns(cols), fixed_rows(cols)) {
                            (Some(p), _) => KeyRows::Packed(p),
                            (None, Some(f)) => KeyRows::Fixed(f),
                            (None, None) => KeyRows::Rows(conv.convert_columns(cols)?),
                        })
                    }
                };
                let mut args = Vec::with_capacity(m);
                let firsts = folds.first.iter().map(|&j| &self.plan.aggs[j]);
                for ((a, arr), filter) in firsts.zip(&arrs).zip(&filtered) {
                    let arr = arr.clone();
                    let elsewhere = match group_entry {
                        true => a.per_value.is_some(),
                        // another argument's entries fold it, or the group's
                        false => a.tag != tag || (split && a.per_value.is_none()),
                    };
                    let only = match elsewhere {
                        true => Some(NullBuffer::new_null(n)),
                        false => filter.clone(),
                    };
                    args.push(self.arg(a, arr, only)?);
                }
                // split, a row whose value counts already for each aggregate kept per
                // value it feeds adds nothing to its value's entry: not folded
                let unknown;
                let pass_here: &[bool] = match (held, &key_rows, &self.distinct) {
                    (Some(window), Some(r), Some(store)) if !group_entry => {
                        unknown = self.unknown_values(store, window, r, &args, tag, &pass);
                        &unknown
                    }
                    _ => &pass,
                };
                // each shard's rows, found once (a global aggregate's rows are all shard 0's)
                let mut rows_of: Vec<Vec<usize>> = Vec::new();
                if let (Some(r), true) = (&key_rows, shards > 1) {
                    rows_of = vec![Vec::with_capacity(n / shards + 1); shards];
                    for i in 0..n {
                        let (p, bytes) = r.get(i);
                        rows_of[shard_of(p, bytes, shards)].push(i);
                    }
                }
                let b = Batch {
                    pass: pass_here,
                    key_rows: key_rows.as_ref(),
                    rows_of: &rows_of,
                    times: o.times.values(),
                    args: &args,
                    kinds: &kinds,
                    first: &folds.first,
                    panes: self.config.panes,
                    windows: &self.plan.windows,
                    w_prev,
                    shards,
                    global: self.plan.group_keys == 0,
                    session: self.plan.keeps_refused_rows(),
                };
                let dicts = self.keys.shards_mut();
                let folded: Vec<std::result::Result<(), thund_dataflows::Error>> =
                    if shards > 1 && n >= PARALLEL_ROWS && key_rows.is_some() {
                        std::thread::scope(|scope| {
                            let b = &b;
                            let mut work = dicts.iter_mut().zip(groups.iter_mut()).enumerate();
                            let first = work.next();
                            let helpers: Vec<_> = work
                                .map(|(s, (d, g))| scope.spawn(move || fold_shard(b, s, d, g)))
                                .collect();
                            let mut out: Vec<_> = first
                                .map(|(s, (d, g))| fold_shard(b, s, d, g))
                                .into_iter()
                                .collect();
                            out.extend(helpers.into_iter().map(|h| {
                                h.join().unwrap_or_else(|_| {
                                    Err(thund_dataflows::Error::InvalidConfig {
                                        reason: "an ingest thread panicked".to_string(),
                                    })
                                })
                            }));
                            out
                        })
                    } else {
                        dicts
                            .iter_mut()
                            .zip(groups.iter_mut())
                            .enumerate()
                            .map(|(s, (d, g))| fold_shard(&b, s, d, g))
                            .collect()
                    };
                for r in folded {
                    r.map_err(|e| {
                        super::dataflow_error(&view, &self.plan.aggs, self.config.panes, e)
                    })?;
                }
            }
        }
        // flat: every group's states side by side, one allocation per trigger
        let mut keys: Vec<(Window, u64)> = Vec::new();
        let mut states: Vec<AggState> = Vec::new();
        for g in &groups {
            keys.extend_from_slice(&g.groups);
            states.reserve(g.groups.len() * folds.column_of.len());
            for s in 0..g.groups.len() {
                states.extend(folds.column_of.iter().map(|&c| g.cols[c].state(s)));
                if let Some(&[first, last, rows, through]) = g.extent.get(s) {
                    states.extend(super::session::extra_states(first, last, rows, through));
                }
            }
        }
        groups.retain(Groups::reusable);
        self.scratch = groups;
        if let Some(store) = &self.sessions {
            // the sessions Update mode shows, then the units this watermark
            // evicts from sessions still open, carried to their last unit
            let m = states.len() / keys.len().max(1);
            self.touched = keys
                .iter()
                .enumerate()
                .filter_map(|(i, (_, k))| match states[i * m + m - 3].value {
                    Value::Int(t) => Some((*k, t as EventTime)),
                    _ => None,
                })
                .collect();
            if let Some(w) = w {
                let carries = store
                    .carries(&keys, &states, w)
                    .map_err(|e| Error::dataflow(&view, e))?;
                for (unit, k, st) in carries {
                    keys.push((unit, k));
                    states.extend(st);
                }
            }
        }
        if keys.is_empty() {
            return Ok(());
        }
        self.dataflow
            .insert_states(&keys, &states)
            .map_err(|e| super::dataflow_error(&view, &self.plan.aggs, self.config.panes, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distinct (unit, key) pairs stay distinct in the narrow table, at every
    /// key length it takes and at the edges of the unit range; longer keys and
    /// later units are left to the wide one.
    #[test]
    fn narrow_keys_are_distinct_per_unit() {
        let bytes: Vec<u8> = (0u8..16).map(|i| i.wrapping_mul(89) ^ 0x3c).collect();
        let mut seen = std::collections::HashSet::new();
        let mut n = 0;
        for len in 0..=12 {
            // the empty key once; others twice, their last byte differing
            for &fill in &[0x00u8, 0xff][..if len == 0 { 1 } else { 2 }] {
                let mut key = bytes[..len].to_vec();
                if let Some(last) = key.last_mut() {
                    *last = fill;
                }
                let p = packed(&key).expect("short");
                for u in [0usize, 1, 255, 256, (1 << 24) - 1] {
                    assert!(seen.insert(narrow(p, u).expect("narrow")), "{key:?} {u}");
                    n += 1;
                }
                assert_eq!(narrow(p, 1 << 24), None);
            }
        }
        assert_eq!(seen.len(), n);
        for len in 13..=15 {
            assert_eq!(narrow(packed(&bytes[..len]).expect("short"), 0), None);
        }
    }
}
