//! The incremental windowed join (see `plan::join`): each side's rows are
//! evaluated on the host (its filters and projections, its join keys), kept
//! as columns (see [`super::arena`]), and handed to a
//! `thund_dataflows::WindowedJoin` as ids by (window, join key): a key's id
//! is its value where the key is one integer column, else its bytes
//! (`arrow::row`) interned per window. The pairs it returns are kept per
//! open window, and the rest of the query runs per window on DataFusion over
//! that window's pairs, gathered back into columns. Where the rest is an aggregate over the
//! join's output (see `plan::joined`), the new pairs of a step are decoded
//! and folded into it instead: an [`IncrementalView`] over the join's
//! output, each pair at its window's start (over hopping windows, in the
//! unit of one slide there, under a watermark `size − slide` behind), which
//! emits per the output mode; no pairs are kept.
//!
//! A window exists once any source gave it an on-time row (even one a side's
//! filter refuses), as on the recompute path, so a global aggregate over the
//! join shows its empty windows too.
//!
//! State files: each side's open rows (`join-left`, `join-right`: window
//! bounds, multiplicity, the side's columns), the open windows
//! (`join-windows`), and Complete mode's closed results. A restore re-inserts
//! the rows at the restored watermark, at any worker count; the dataflow's
//! pairs of the open windows come back from that re-insertion.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::{
    concat_batches, filter, filter_record_batch, prep_null_mask_filter, FilterBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::datasource::TableProvider;
use datafusion::physical_plan::ExecutionPlan;
use rustc_hash::FxHashMap;
use thund_dataflows::{Cluster, JoinRow, Pair, Side, WindowedJoin};

use super::arena::ColumnArena;
use super::keys::WindowKeyIds;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::changes::changed_rows;
use crate::paths::closed::ClosedResults;
use crate::paths::sql::live::LiveTable;
use crate::paths::sql::{checked, SqlEvaluator};
use crate::paths::{
    output_schema, with_bounds, OnTime, RuntimeStats, SourceInfo, StepOutput, ViewRuntime,
};
use crate::plan::{CompiledJoin, CompiledSide, SideStep};
use crate::spec::OutputMode;
use crate::state::{operator, Export, StateFile};
use crate::time::EventTime;
use crate::window::late::{classify_time, Refusals};
use crate::window::{TimeWindows, Window};

/// A pair of a window, `(left id, right id)`, with its multiplicity.
type CountedPair = ((u64, u64), i64);

/// Operator names of this runtime's state files.
const SIDE_FILES: [&str; 2] = ["join-left", "join-right"];
const WINDOWS_FILE: &str = "join-windows";

/// The windows of `t`, earliest first, kept in `run` with the times that
/// share them ([`TimeWindows::windows_run`]): rows mostly in time order
/// ask for their windows once per run.
fn windows_at<'a>(
    run: &'a mut Option<(EventTime, EventTime, Vec<Window>)>,
    windows: &TimeWindows,
    t: EventTime,
) -> &'a [Window] {
    if !run.as_ref().is_some_and(|(lo, hi, _)| *lo <= t && t < *hi) {
        let (lo, hi) = windows.windows_run(t);
        *run = Some((lo, hi, windows.windows_of(t).collect()));
    }
    run.as_ref().map_or(&[], |(_, _, w)| w.as_slice())
}

/// Rows of the columns nothing reads kept built (see `JoinView::widen`).
const FILLER_ROWS: usize = 1 << 16;

/// The incremental runtime of a windowed join view.
pub(crate) struct JoinView {
    view: String,
    plan: CompiledJoin,
    mode: OutputMode,
    out: SchemaRef,
    eval: SqlEvaluator,
    /// The rest of the query over `table`, planned once.
    rest: Arc<dyn ExecutionPlan>,
    table: Arc<LiveTable>,
    /// By source index: the sides it feeds.
    feeds: Vec<Vec<usize>>,
    /// Encodes join keys (both sides: the same types).
    key_conv: RowConverter,
    /// Join keys' ids per window (the dataflow carries them).
    keys: WindowKeyIds,
    /// Whether a join key's id is its value: one integer column whose NULLs
    /// never meet (no dictionary then).
    by_value: bool,
    /// Each side's rows, by id.
    rows: [ColumnArena; 2],
    cluster: Cluster,
    join: WindowedJoin,
    /// The join's output per open window: `(left id, right id) -> count`.
    pairs: BTreeMap<Window, FxHashMap<(u64, u64), i64>>,
    /// Open windows that took an on-time row from any source.
    windows: BTreeSet<Window>,
    /// Windows that took rows since their last evaluation (Update mode).
    dirty: BTreeSet<Window>,
    /// Update mode: each open window's result at its last evaluation.
    shown: BTreeMap<Window, RecordBatch>,
    /// Update mode over a rest that maps each pair on its own: the rows shown
    /// so far of each open window they are all the rows of (it opened in this
    /// run, not before a restore, and took no retraction). Its final rows are
    /// these and its last pairs' rows, not the rest run over all its pairs.
    rows_shown: BTreeMap<Window, Vec<RecordBatch>>,
    closed_results: ClosedResults,
    /// The rest of the query as an incremental aggregate over the join's
    /// output, where it is one: it keeps the groups and emits.
    then: Option<Box<IncrementalView>>,
    /// The columns nothing reads, by side, column and nullability: NULLs
    /// (or the type's default) as long as the longest batch so far, sliced
    /// to each batch instead of built again for it.
    fillers: RefCell<FxHashMap<(usize, usize, bool), ArrayRef>>,
}

/// The watermark `w` as the aggregate a join feeds over hopping windows
/// takes it: a unit (one slide at a window's start) closes when its window
/// does, `shift` (size − slide) later.
fn unit_time(w: Option<EventTime>, shift: i64) -> Option<EventTime> {
    w.map(|w| match w {
        EventTime::MAX => EventTime::MAX,
        w => w.saturating_sub(shift),
    })
}

/// An error of the aggregate a join feeds, naming the window (not its unit).
fn shown_error(e: Error, shift: i64) -> Error {
    let end = |x: i64| match x {
        EventTime::MAX => x,
        x => x.saturating_add(shift),
    };
    match e {
        Error::Overflow {
            view,
            aggregate,
            data_type,
            window_start,
            window_end,
            value,
        } => Error::Overflow {
            view,
            aggregate,
            data_type,
            window_start,
            window_end: end(window_end),
            value,
        },
        // (a dataflow's overflow is an `Error::Overflow` too: see `Error::dataflow`)
        other => other,
    }
}

/// The dataflow input of side `s`.
fn side_of(s: usize) -> Side {
    if s == 0 {
        Side::Left
    } else {
        Side::Right
    }
}

/// A row converter over columns of these types.
fn converter(types: &[DataType]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        types.iter().map(|t| SortField::new(t.clone())).collect(),
    )?)
}

/// The types of the columns a side keeps.
fn kept_types(side: &CompiledSide) -> Vec<DataType> {
    side.keep.iter().map(|&j| side.fields[j].clone()).collect()
}

/// A schema of columns `c0…` of these types (all nullable).
/// Each row's join key, as its id in a window is made of it.
enum RowKeys {
    /// The key's value is its id.
    Values(Vec<u64>),
    /// The key's bytes, interned per window.
    Encoded(arrow::row::Rows),
}

/// The values of one integer column of at most 64 bits as distinct `u64`s
/// (`None`: another type). NULL slots give whatever value they hold.
fn value_ids(col: &ArrayRef) -> Option<Vec<u64>> {
    use arrow::datatypes::*;
    macro_rules! ids {
        ($t:ty) => {
            col.as_primitive_opt::<$t>()
                .map(|a| a.values().iter().map(|&v| v as u64).collect())
        };
    }
    match col.data_type() {
        DataType::Int8 => ids!(Int8Type),
        DataType::Int16 => ids!(Int16Type),
        DataType::Int32 => ids!(Int32Type),
        DataType::Int64 => ids!(Int64Type),
        DataType::UInt8 => ids!(UInt8Type),
        DataType::UInt16 => ids!(UInt16Type),
        DataType::UInt32 => ids!(UInt32Type),
        DataType::UInt64 => ids!(UInt64Type),
        DataType::Date32 => ids!(Date32Type),
        DataType::Date64 => ids!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => ids!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => ids!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => ids!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => ids!(TimestampNanosecondType),
        _ => None,
    }
}

/// Row `i`'s join key id in `window` (`ids`: the windows' dictionaries).
fn key_id(ids: &mut WindowKeyIds, keys: &RowKeys, i: usize, window: Window) -> u64 {
    match keys {
        RowKeys::Values(v) => v[i],
        RowKeys::Encoded(rows) => ids.intern(window, rows.row(i).as_ref()),
    }
}

/// Each side's (empty) store of rows.
fn arenas(plan: &CompiledJoin) -> [ColumnArena; 2] {
    [0, 1].map(|s| ColumnArena::new(kept_types(&plan.sides[s])))
}

fn schema_of(types: &[DataType]) -> SchemaRef {
    Arc::new(Schema::new(
        types
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(format!("c{i}"), t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

/// `cols` as a batch of `n` rows (their own schema, all nullable).
fn batch_of(cols: Vec<ArrayRef>, n: usize) -> Result<RecordBatch> {
    let types: Vec<DataType> = cols.iter().map(|c| c.data_type().clone()).collect();
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
    Ok(RecordBatch::try_new_with_options(
        schema_of(&types),
        cols,
        &options,
    )?)
}

impl JoinView {
    pub fn new(
        view: &str,
        plan: CompiledJoin,
        mode: OutputMode,
        cluster: Cluster,
        eval: SqlEvaluator,
        sources: &[SourceInfo],
    ) -> Result<Self> {
        let mut feeds = vec![Vec::new(); sources.len()];
        for (i, side) in plan.sides.iter().enumerate() {
            let s = sources
                .iter()
                .position(|s| s.name == side.source)
                .or_else(|| {
                    sources
                        .iter()
                        .position(|s| s.name.eq_ignore_ascii_case(&side.source))
                })
                .ok_or_else(|| {
                    Error::internal(
                        view,
                        format!("the join reads an unknown source {}", side.source),
                    )
                })?;
            feeds[s].push(i);
        }
        let rest = checked::rewrite(plan.rest.clone()).map_err(|e| Error::eval(view, e))?;
        let rest = eval.prepare(&eval.optimize(&rest)?)?;
        let out = output_schema(&eval.out_schema, Some(&plan.bound), mode);
        let key_conv = converter(&plan.key_types)?;
        let join = WindowedJoin::spawn_on(&cluster).map_err(|e| Error::dataflow(view, e))?;
        let mut plan = plan;
        let then = match plan.then.take() {
            Some(agg) => {
                let mut then =
                    IncrementalView::new(view, *agg, mode, cluster.clone(), false, eval.clone())?;
                then.end_shift = plan.then_shift;
                Some(Box::new(then))
            }
            None => None,
        };
        let rows = arenas(&plan);
        let by_value = !plan.nulls_meet
            && matches!(&plan.key_types[..], [t] if value_ids(&arrow::array::new_empty_array(t)).is_some());
        Ok(JoinView {
            then,
            view: view.to_string(),
            table: plan.table.clone(),
            plan,
            mode,
            out,
            eval,
            rest,
            feeds,
            key_conv,
            keys: WindowKeyIds::default(),
            by_value,
            rows,
            cluster,
            join,
            pairs: BTreeMap::new(),
            windows: BTreeSet::new(),
            dirty: BTreeSet::new(),
            shown: BTreeMap::new(),
            rows_shown: BTreeMap::new(),
            closed_results: ClosedResults::default(),
            fillers: RefCell::default(),
        })
    }

    /// A side's rows of `batch` (its filters and projections) and their event times.
    fn side_rows(
        &self,
        side: &CompiledSide,
        batch: &RecordBatch,
        times: &Int64Array,
    ) -> Result<(RecordBatch, Int64Array)> {
        let (mut batch, mut times) = (batch.clone(), times.clone());
        let err = |e| Error::eval(&self.view, e);
        for step in &side.steps {
            let n = batch.num_rows();
            match step {
                SideStep::Filter(p) => {
                    let mask = p
                        .evaluate(&batch)
                        .and_then(|v| v.into_array(n))
                        .map_err(err)?;
                    let mask = mask.as_boolean_opt().ok_or_else(|| {
                        Error::internal(&self.view, "a join side's filter is not a boolean")
                    })?;
                    let mask: BooleanArray = match mask.null_count() {
                        0 => mask.clone(),
                        _ => prep_null_mask_filter(mask),
                    };
                    batch = filter_record_batch(&batch, &mask)?;
                    times = filter(&times, &mask)?.as_primitive().clone();
                }
                SideStep::Project(exprs) => {
                    let cols = exprs
                        .iter()
                        .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
                        .collect::<datafusion::error::Result<Vec<_>>>()
                        .map_err(err)?;
                    batch = batch_of(cols, n)?;
                }
            }
        }
        Ok((batch, times))
    }

    /// The dataflow rows of side `s` for the side's rows `rows`, each in its
    /// windows `windows_of(times[i])` that end after `w_prev`.
    fn join_rows(
        &mut self,
        s: usize,
        rows: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
        out: &mut Vec<JoinRow>,
    ) -> Result<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let (key_cols, key_rows) = self.encode(s, rows)?;
        // a row per window it is in: at least one each (room made once, not by doubling)
        out.reserve(n);
        let floor = w_prev.unwrap_or(EventTime::MIN);
        let open = |window: &Window| w_prev.is_none() || window.end > floor;
        // the rows that join, stored once each until the last of their
        // windows closes: by that expiry
        let mut by_expiry: BTreeMap<EventTime, Vec<u32>> = BTreeMap::new();
        let mut run = None;
        // the key columns that hold a NULL (none, mostly: no row is then
        // asked through `dyn Array`)
        let nullable: Vec<&ArrayRef> = match self.plan.nulls_meet {
            true => Vec::new(),
            false => key_cols.iter().filter(|c| c.null_count() > 0).collect(),
        };
        for i in 0..n {
            if nullable.iter().any(|c| c.is_null(i)) {
                continue;
            }
            let t = times.value(i);
            let Some(&last) = windows_at(&mut run, &self.plan.windows, t).last() else {
                continue;
            };
            if open(&last) {
                by_expiry.entry(last.end).or_default().push(i as u32);
            }
        }
        let kept: Vec<ArrayRef> = self.plan.sides[s]
            .keep
            .iter()
            .map(|&j| rows.column(j).clone())
            .collect();
        let side_of = side_of(s);
        for (expiry, at) in by_expiry {
            let ids = self.rows[s].push(&kept, &at, expiry)?;
            for (&i, id) in at.iter().zip(ids) {
                let t = times.value(i as usize);
                for &window in windows_at(&mut run, &self.plan.windows, t)
                    .iter()
                    .filter(|w| open(w))
                {
                    out.push(JoinRow {
                        side: side_of,
                        window,
                        key: key_id(&mut self.keys, &key_rows, i as usize, window),
                        row: id,
                        count: 1,
                    });
                }
            }
        }
        Ok(())
    }

    /// Side `s`'s rows `rows` (all the side's columns): the join key columns
    /// and the keys as their ids are made of them.
    fn encode(&self, s: usize, rows: &RecordBatch) -> Result<(Vec<ArrayRef>, RowKeys)> {
        let n = rows.num_rows();
        let key_cols = self.plan.sides[s]
            .keys
            .iter()
            .map(|e| e.evaluate(rows).and_then(|v| v.into_array(n)))
            .collect::<datafusion::error::Result<Vec<_>>>()
            .map_err(|e| Error::eval(&self.view, e))?;
        if let (true, [col]) = (self.by_value, &key_cols[..]) {
            if let Some(v) = value_ids(col) {
                return Ok((key_cols, RowKeys::Values(v)));
            }
        }
        let key_rows = self.key_conv.convert_columns(&key_cols)?;
        Ok((key_cols, RowKeys::Encoded(key_rows)))
    }

    /// Take in one trigger's on-time rows.
    fn ingest(&mut self, on_time: Vec<OnTime>, w_prev: Option<EventTime>) -> Result<()> {
        let mut rows = Vec::new();
        let mut sides: [Vec<(RecordBatch, Int64Array)>; 2] = [Vec::new(), Vec::new()];
        for o in &on_time {
            // every on-time row makes its open windows exist (looked up once per
            // run of rows in the same windows: rows come mostly in time order)
            let mut run: Option<(EventTime, EventTime)> = None;
            for &t in o.times.values() {
                if run.is_some_and(|(lo, hi)| lo <= t && t < hi) {
                    continue;
                }
                run = Some(self.plan.windows.windows_run(t));
                for window in self.plan.windows.windows_of(t) {
                    if w_prev.is_none_or(|w| window.end > w) {
                        self.windows.insert(window);
                        self.dirty.insert(window);
                    }
                }
            }
            let feeds = self.feeds.get(o.source).cloned().unwrap_or_default();
            for s in feeds {
                sides[s].push(self.side_rows(&self.plan.sides[s], &o.batch, &o.times)?);
            }
        }
        // each side's rows of the trigger as one batch: stored in as few
        // chunks as they have expiries, however many batches they came in
        for (s, mut parts) in sides.into_iter().enumerate() {
            let (side_rows, times) = match parts.len() {
                0 => continue,
                1 => parts.swap_remove(0),
                _ => {
                    let batches: Vec<&RecordBatch> = parts.iter().map(|p| &p.0).collect();
                    let schema = batches[0].schema();
                    let times: Vec<&dyn Array> = parts.iter().map(|p| &p.1 as &dyn Array).collect();
                    (
                        arrow::compute::concat_batches(&schema, batches)?,
                        arrow::compute::concat(&times)?.as_primitive().clone(),
                    )
                }
            };
            self.join_rows(s, &side_rows, &times, w_prev, &mut rows)?;
        }
        self.join
            .insert(rows)
            .map_err(|e| Error::dataflow(&self.view, e))
    }

    fn add_pairs(&mut self, pairs: Vec<Pair>) {
        for p in pairs {
            let e = self.pairs.entry(p.window).or_default();
            let c = e.entry((p.left, p.right)).or_default();
            *c += p.count;
            if *c == 0 {
                e.remove(&(p.left, p.right));
            }
        }
    }

    /// The rest of the query over window `win`'s join output.
    fn eval_window(&self, win: Window) -> Result<RecordBatch> {
        let mut pairs: Vec<CountedPair> = self
            .pairs
            .get(&win)
            .map(|p| p.iter().map(|(k, c)| (*k, *c)).collect())
            .unwrap_or_default();
        pairs.sort_unstable();
        self.eval_pairs(win, &pairs)
    }

    /// The rest of the query over `pairs` (left id, right id, count) of window `win`.
    fn eval_pairs(&self, win: Window, pairs: &[CountedPair]) -> Result<RecordBatch> {
        super::copies(
            &self.view,
            "a window's join output",
            pairs.iter().map(|p| p.1),
        )?;
        let batch = self.decode(
            pairs
                .iter()
                .flat_map(|&(p, c)| std::iter::repeat_n(p, c.max(0) as usize)),
        )?;
        self.eval.run_prepared(
            &self.rest,
            &[self.table.as_ref()],
            vec![vec![batch]],
            Some(win),
        )
    }

    /// The pairs kept of `pairs`: those that meet the join's other conditions.
    fn kept_pairs(&self, pairs: Vec<Pair>) -> Result<Vec<Pair>> {
        if self.plan.pair_filter.is_none() || pairs.is_empty() {
            return Ok(pairs);
        }
        let batch = self.decode(pairs.iter().map(|p| (p.left, p.right)))?;
        let Some(kept) = self.pair_mask(&batch)? else {
            return Ok(pairs);
        };
        Ok(pairs
            .into_iter()
            .zip(kept.values().iter())
            .filter(|(_, k)| *k)
            .map(|(p, _)| p)
            .collect())
    }

    /// Where the join's other conditions hold — not false, not NULL — on
    /// `batch` (pairs as rows of the join's output), if it has any.
    fn pair_mask(&self, batch: &RecordBatch) -> Result<Option<BooleanArray>> {
        let Some(cond) = &self.plan.pair_filter else {
            return Ok(None);
        };
        let kept =
            super::ingest::true_rows(&self.view, "a join condition", cond.as_ref(), batch, None)?;
        Ok(Some(BooleanArray::new(kept.into_inner(), None)))
    }

    /// The pairs kept of `pairs` (see [`Self::kept_pairs`]) as rows of the
    /// join's output table (each as many times as it counts), at their
    /// window's start: the input of the aggregate the join feeds.
    fn pair_rows(&self, pairs: &[Pair]) -> Result<Vec<OnTime>> {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let total = super::copies(
            &self.view,
            "a step's join output",
            pairs.iter().map(|p| p.count),
        )?;
        // each pair as many times as it counts, in one pass over the pairs
        // into vectors sized first (the copies' iterators cannot tell their
        // length, and an iterator of copies costs more than a loop of pushes)
        let (mut left, mut right) = (Vec::with_capacity(total), Vec::with_capacity(total));
        let mut starts = Vec::with_capacity(total);
        for p in pairs {
            for _ in 0..p.count.max(0) {
                left.push(p.left);
                right.push(p.right);
                starts.push(p.window.start);
            }
        }
        let (kept, n) = self.decode_kept((left, right))?;
        let batch = self.assemble(kept.clone(), n)?;
        let times = Int64Array::from(starts);
        // one predicate, its bits counted and prepared once for all the columns
        let pred = self
            .pair_mask(&batch)?
            .map(|mask| FilterBuilder::new(&mask).optimize().build());
        let (batch, times) = match pred {
            // no condition, or every pair kept: nothing to filter
            None => (batch, times),
            Some(pred) if pred.count() == n => (batch, times),
            Some(pred) => {
                // the decoded columns filtered, the others filled in again
                // (filtering a column of NULLs costs as much as a real one)
                let [l, r] = kept;
                let pick = |cols: Vec<ArrayRef>| -> Result<Vec<ArrayRef>> {
                    cols.iter().map(|c| Ok(pred.filter(c.as_ref())?)).collect()
                };
                let batch = self.assemble([pick(l)?, pick(r)?], pred.count())?;
                (batch, pred.filter(&times)?.as_primitive().clone())
            }
        };
        Ok(vec![OnTime {
            source: 0,
            batch,
            times,
        }])
    }

    /// The aggregate the join feeds (a join built with one).
    fn then_mut(&mut self) -> Result<&mut IncrementalView> {
        match self.then.as_deref_mut() {
            Some(then) => Ok(then),
            None => Err(Error::internal(&self.view, "a join without its aggregate")),
        }
    }

    /// One step of a join that feeds an aggregate: the step's new pairs
    /// folded into it, and what it emits.
    fn step_then(
        &mut self,
        pairs: Vec<Pair>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput> {
        let rows = self.pair_rows(&pairs)?;
        let shift = self.plan.then_shift;
        let mut out = self
            .then_mut()?
            .step(rows, unit_time(w_prev, shift), unit_time(w, shift))
            .map_err(|e| shown_error(e, shift))?;
        if let Some(w) = w {
            let before = self.windows.len();
            self.windows.retain(|x| x.end > w);
            out.windows_closed = (before - self.windows.len()) as u64;
            self.keys.reclaim(w);
            for d in &mut self.rows {
                d.reclaim(w);
            }
        }
        self.dirty.clear();
        Ok(out)
    }

    /// Pairs (left id, right id) as rows of the join's output table.
    fn decode(&self, pairs: impl Iterator<Item = (u64, u64)>) -> Result<RecordBatch> {
        let (kept, n) = self.decode_kept(pairs.unzip())?;
        self.assemble(kept, n)
    }

    /// The kept columns of both sides of pairs given as their left and right
    /// row ids, and how many pairs.
    fn decode_kept(
        &self,
        (left, right): (Vec<u64>, Vec<u64>),
    ) -> Result<([Vec<ArrayRef>; 2], usize)> {
        let n = left.len();
        Ok((
            [self.side_columns(0, &left)?, self.side_columns(1, &right)?],
            n,
        ))
    }

    /// Side `s`'s kept columns of its rows `ids`.
    fn side_columns(&self, s: usize, ids: &[u64]) -> Result<Vec<ArrayRef>> {
        self.rows[s]
            .gather(ids)?
            .ok_or_else(|| Error::internal(&self.view, "a join's pair names a row no longer held"))
    }

    /// Both sides' kept columns (`n` rows) as rows of the join's output
    /// table, the columns nothing reads filled in.
    fn assemble(&self, kept: [Vec<ArrayRef>; 2], n: usize) -> Result<RecordBatch> {
        let schema = self.table.schema();
        let mut cols: Vec<ArrayRef> = Vec::new();
        for (s, kept) in kept.into_iter().enumerate() {
            let at = if s == 0 {
                0
            } else {
                self.plan.sides[0].fields.len()
            };
            cols.extend(self.widen(s, kept, n, |j| schema.field(at + j).clone())?);
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(n));
        Ok(RecordBatch::try_new_with_options(schema, cols, &options)?)
    }

    /// A side's kept columns `kept` (`n` rows) as all its columns: those
    /// nothing reads are NULL, or their type's default where `field(j)` is
    /// not nullable.
    fn widen(
        &self,
        s: usize,
        kept: Vec<ArrayRef>,
        n: usize,
        field: impl Fn(usize) -> Field,
    ) -> Result<Vec<ArrayRef>> {
        let side = &self.plan.sides[s];
        let mut kept = kept.into_iter();
        let mut out = Vec::with_capacity(side.fields.len());
        for j in 0..side.fields.len() {
            if side.keep.contains(&j) {
                out.push(kept.next().ok_or_else(|| {
                    Error::internal(&self.view, "a join side lost a kept column")
                })?);
                continue;
            }
            let f = field(j);
            let key = (s, j, f.is_nullable());
            let mut fillers = self.fillers.borrow_mut();
            let filler = match fillers.get(&key) {
                Some(a) if a.len() >= n => a.clone(),
                held => {
                    // room for twice the last length (a few builds as batches
                    // grow), up to FILLER_ROWS kept; a longer batch builds its own
                    let len = match n <= FILLER_ROWS {
                        true => n
                            .max(held.map_or(0, |a| a.len().saturating_mul(2)))
                            .min(FILLER_ROWS),
                        false => n,
                    };
                    let a = if f.is_nullable() {
                        arrow::array::new_null_array(f.data_type(), len)
                    } else {
                        datafusion::common::ScalarValue::new_default(f.data_type())
                            .and_then(|v| v.to_array_of_size(len))
                            .map_err(|e| Error::eval(&self.view, e))?
                    };
                    if len <= FILLER_ROWS {
                        fillers.insert(key, a.clone());
                    }
                    a
                }
            };
            out.push(filler.slice(0, n));
        }
        Ok(out)
    }

    fn bounded(&self, win: Window, res: &RecordBatch, fin: Option<bool>) -> Result<RecordBatch> {
        with_bounds(&self.out, Some((win, Some(&self.plan.bound))), res, fin)
    }

    /// Forget a closed window.
    fn close(&mut self, win: &Window) {
        self.windows.remove(win);
        self.pairs.remove(win);
        self.dirty.remove(win);
        self.shown.remove(win);
        self.rows_shown.remove(win);
    }

    /// Each side's open rows, decoded, as its state file.
    fn side_file(&self, s: usize, rows: &[JoinRow]) -> Result<StateFile> {
        let mine: Vec<&JoinRow> = rows.iter().filter(|r| r.side == side_of(s)).collect();
        let starts = Int64Array::from_iter_values(mine.iter().map(|r| r.window.start));
        let ends = Int64Array::from_iter_values(mine.iter().map(|r| r.window.end));
        let counts = Int64Array::from_iter_values(mine.iter().map(|r| r.count));
        let ids: Vec<u64> = mine.iter().map(|r| r.row).collect();
        let decoded = self.side_columns(s, &ids)?;
        let mut cols: Vec<ArrayRef> = vec![Arc::new(starts), Arc::new(ends), Arc::new(counts)];
        cols.extend(decoded);
        let mut fields = vec![
            Field::new("window_start", DataType::Int64, false),
            Field::new("window_end", DataType::Int64, false),
            Field::new("count", DataType::Int64, false),
        ];
        fields.extend(
            schema_of(&kept_types(&self.plan.sides[s]))
                .fields()
                .iter()
                .map(|f| f.as_ref().clone()),
        );
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?;
        Ok(StateFile::new(
            SIDE_FILES[s],
            0,
            vec![batch],
            EventTime::MAX,
        ))
    }
}

impl ViewRuntime for JoinView {
    fn output_schema(&self) -> SchemaRef {
        self.out.clone()
    }

    fn classify(
        &self,
        _source: usize,
        _batch: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
    ) -> Result<Refusals> {
        Ok(classify_time(&self.plan.windows, times, w_prev))
    }

    fn step(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput> {
        self.ingest(on_time, w_prev)?;
        let mut out = StepOutput::default();
        // without a watermark yet (a source gave no row), nothing closes, but
        // the pairs so far still show in Update and Complete modes
        let target = w.unwrap_or_else(|| self.join.frontier());
        let step = self
            .join
            .advance_to(target)
            .map_err(|e| Error::dataflow(&self.view, e))?;
        if self.then.is_some() {
            return self.step_then(step.pairs, w_prev, w);
        }
        // Update mode over a rest that maps each pair on its own: a window's
        // new rows are the rest over its new pairs (rows only enter open windows)
        let pairs = self.kept_pairs(step.pairs)?;
        let fresh: Vec<Pair> = match self.mode == OutputMode::Update && self.plan.row_wise {
            true => pairs.clone(),
            false => Vec::new(),
        };
        // a window opening now has all its rows shown from here on, unless a
        // pair of it is ever retracted
        let mut last = None;
        for p in &fresh {
            // pairs come in runs of a window: looked up once a run
            if last != Some(p.window) && !self.pairs.contains_key(&p.window) {
                self.rows_shown.entry(p.window).or_default();
            }
            last = Some(p.window);
        }
        for p in fresh.iter().filter(|p| p.count <= 0) {
            self.rows_shown.remove(&p.window);
        }
        self.add_pairs(pairs);
        let w = match w {
            Some(w) => w,
            None => EventTime::MIN,
        };
        let closing: Vec<Window> = self
            .windows
            .iter()
            .copied()
            .filter(|x| x.end <= w)
            .collect();
        out.windows_closed = closing.len() as u64;
        match self.mode {
            OutputMode::Append => {
                for win in &closing {
                    let res = self.eval_window(*win)?;
                    out.batches.push(self.bounded(*win, &res, None)?);
                    self.close(win);
                }
            }
            OutputMode::Update if self.plan.row_wise => {
                let mut by_window: BTreeMap<Window, Vec<CountedPair>> = BTreeMap::new();
                for p in fresh.iter().filter(|p| p.window.end > w) {
                    by_window
                        .entry(p.window)
                        .or_default()
                        .push(((p.left, p.right), p.count));
                }
                for (win, pairs) in &by_window {
                    let res = self.eval_pairs(*win, pairs)?;
                    out.batches.push(self.bounded(*win, &res, Some(false))?);
                    if let Some(shown) = self.rows_shown.get_mut(win) {
                        shown.push(res);
                    }
                }
                self.dirty.clear();
                for win in &closing {
                    let res = match self.rows_shown.remove(win) {
                        Some(mut parts) if !parts.is_empty() => {
                            // the rows shown, and those of its pairs of this step
                            let last: Vec<CountedPair> = fresh
                                .iter()
                                .filter(|p| p.window == *win)
                                .map(|p| ((p.left, p.right), p.count))
                                .collect();
                            if !last.is_empty() {
                                parts.push(self.eval_pairs(*win, &last)?);
                            }
                            concat_batches(&parts[0].schema(), &parts)?
                        }
                        _ => self.eval_window(*win)?,
                    };
                    out.batches.push(self.bounded(*win, &res, Some(true))?);
                    self.close(win);
                }
            }
            OutputMode::Update => {
                // the closing windows evaluated first: each starts before
                // every open one, so an error names the first window by
                // start that fails (emitted after the open ones' changes)
                let mut done = Vec::with_capacity(closing.len());
                for win in &closing {
                    done.push(self.eval_window(*win)?);
                }
                let dirty: Vec<Window> = self.dirty.iter().copied().filter(|x| x.end > w).collect();
                for win in dirty {
                    let res = self.eval_window(win)?;
                    let emit = changed_rows(self.shown.get(&win), &res)?;
                    out.batches.push(self.bounded(win, &emit, Some(false))?);
                    self.shown.insert(win, res);
                }
                self.dirty.clear();
                for (win, res) in closing.iter().zip(done) {
                    out.batches.push(self.bounded(*win, &res, Some(true))?);
                    self.close(win);
                }
            }
            OutputMode::Complete => {
                for win in &closing {
                    let res = self.eval_window(*win)?;
                    self.closed_results.push(self.bounded(*win, &res, None)?);
                    self.close(win);
                }
                out.batches.extend(self.closed_results.all());
                let open: Vec<Window> = self.windows.iter().copied().collect();
                for win in open {
                    let res = self.eval_window(win)?;
                    out.batches.push(self.bounded(win, &res, None)?);
                }
                self.dirty.clear();
            }
        }
        out.batches.retain(|b| b.num_rows() > 0);
        self.keys.reclaim(w);
        for d in &mut self.rows {
            d.reclaim(w);
        }
        Ok(out)
    }

    fn enable_checkpoints(&mut self) {}

    fn export(&mut self, _want_full: bool) -> Result<Export> {
        let rows = self
            .join
            .snapshot()
            .map_err(|e| Error::dataflow(&self.view, e))?;
        let mut files = vec![self.side_file(0, &rows)?, self.side_file(1, &rows)?];
        let starts = Int64Array::from_iter_values(self.windows.iter().map(|x| x.start));
        let ends = Int64Array::from_iter_values(self.windows.iter().map(|x| x.end));
        let windows = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("window_start", DataType::Int64, false),
                Field::new("window_end", DataType::Int64, false),
            ])),
            vec![Arc::new(starts), Arc::new(ends)],
        )?;
        files.push(StateFile::new(
            WINDOWS_FILE,
            0,
            vec![windows],
            EventTime::MAX,
        ));
        match &mut self.then {
            Some(then) => files.extend(then.closed_results.export(true)),
            None => files.extend(self.closed_results.export(true)),
        }
        Ok(Export {
            files,
            full: true,
            deferred: None,
        })
    }

    fn import(&mut self, w: Option<EventTime>, loaded: &thund_checkpoint::Loaded) -> Result<()> {
        let at = w.unwrap_or(EventTime::MIN);
        let bad = |what: &str, m: &str| Error::format(&self.view, format!("{what}: {m}"));
        let int = |b: &RecordBatch, i: usize, what: &str| {
            b.column(i)
                .as_primitive_opt::<arrow::datatypes::Int64Type>()
                .cloned()
                .ok_or_else(|| bad(what, "expected Int64"))
        };
        self.keys = WindowKeyIds::default();
        self.rows = arenas(&self.plan);
        self.windows.clear();
        for b in loaded.batches(WINDOWS_FILE) {
            let (s, e) = (int(b, 0, WINDOWS_FILE)?, int(b, 1, WINDOWS_FILE)?);
            for i in 0..b.num_rows() {
                let win = Window::new(s.value(i), e.value(i));
                if win.end > at {
                    self.windows.insert(win);
                }
            }
        }
        let mut rows = Vec::new();
        for (s, &what) in SIDE_FILES.iter().enumerate() {
            let fields = self.plan.sides[s].keep.len();
            for b in loaded.batches(what) {
                if b.num_columns() != 3 + fields {
                    return Err(bad(what, "unexpected columns"));
                }
                let (starts, ends, counts) = (int(b, 0, what)?, int(b, 1, what)?, int(b, 2, what)?);
                let kept = b.columns()[3..].to_vec();
                let n = b.num_rows();
                let types = &self.plan.sides[s].fields;
                let wide = self.widen(s, kept.clone(), n, |j| {
                    Field::new(format!("c{j}"), types[j].clone(), true)
                })?;
                let side_rows = batch_of(wide, n)?;
                // the side's rows once per stored (window, row), in that window
                let (_, key_rows) = self.encode(s, &side_rows)?;
                let mut by_end: BTreeMap<EventTime, Vec<u32>> = BTreeMap::new();
                for i in 0..n {
                    let window = Window::new(starts.value(i), ends.value(i));
                    if window.end <= at || counts.value(i) <= 0 {
                        return Err(bad(what, "a row of a closed window or without a count"));
                    }
                    if counts.value(i) as u64 > super::MAX_COPIES {
                        return Err(bad(
                            what,
                            &format!(
                                "row {i} counts {}, more than the {} copies of a row Þund makes",
                                counts.value(i),
                                super::MAX_COPIES
                            ),
                        ));
                    }
                    by_end.entry(window.end).or_default().push(i as u32);
                }
                let mut made = Vec::new();
                for (end, at) in by_end {
                    let ids = self.rows[s].push(&kept, &at, end)?;
                    for (&i, id) in at.iter().zip(ids) {
                        let (i, window) = (i as usize, Window::new(starts.value(i as usize), end));
                        made.push(JoinRow {
                            side: side_of(s),
                            window,
                            key: key_id(&mut self.keys, &key_rows, i, window),
                            row: id,
                            count: counts.value(i),
                        });
                    }
                }
                rows.extend(made);
            }
        }
        let (join, pairs) = WindowedJoin::restore_on(&self.cluster, at, rows)
            .map_err(|e| Error::dataflow(&self.view, e))?;
        self.join = join;
        self.pairs.clear();
        self.dirty.clear();
        self.shown.clear();
        let closed =
            ClosedResults::restored(loaded.batches(operator::COMPLETE_CLOSED).cloned().collect());
        if self.then.is_some() {
            // the aggregate over the open windows' pairs, as it stood: what
            // it would emit for them now was emitted before the checkpoint
            let rows = self.pair_rows(&pairs)?;
            let at = unit_time(w, self.plan.then_shift);
            let then = self.then_mut()?;
            then.step(rows, at, at)?;
            then.closed_results = closed;
            return Ok(());
        }
        let pairs = self.kept_pairs(pairs)?;
        self.add_pairs(pairs);
        self.closed_results = closed;
        if self.mode == OutputMode::Update && !self.plan.row_wise {
            // what each open window showed is its result over the restored rows
            let open: Vec<Window> = self.windows.iter().copied().collect();
            for win in open {
                let res = self.eval_window(win)?;
                self.shown.insert(win, res);
            }
        }
        Ok(())
    }

    fn stats(&self) -> RuntimeStats {
        let f = self.join.frontier();
        RuntimeStats {
            buffered_rows: 0,
            // the workers' rows, the pairs the host keeps per open window, the groups of
            // the aggregate the join feeds
            state_records: Some(
                self.join.state_size()
                    + self.pairs.values().map(|p| p.len()).sum::<usize>()
                    + self
                        .then
                        .as_ref()
                        .and_then(|t| t.stats().state_records)
                        .unwrap_or(0),
            ),
            frontier: (f != EventTime::MIN).then_some(f),
        }
    }
}
