//! Queries over one grouped aggregate (see `plan::post`): the aggregate is
//! the dataflow's, and the rest of the query runs per window on DataFusion
//! over that window's groups — a few rows per key, not the window's rows.
//!
//! A window's groups are those of its closing report (Append), or the open
//! groups the host keeps (Update and Complete, as for ranked windows). Rows
//! WHERE refuses still make their window exist (a window whose every row was
//! refused has no groups, and the rest of the query runs over none), as the
//! recompute path evaluates every window that took rows.

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt32Array,
};
use arrow::compute::take;
use arrow::datatypes::{Int64Type, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::datasource::TableProvider;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use rustc_hash::FxHashMap;
use thund_dataflows::{AggState, Step, Update};

use super::keys::KeyBytes;
use super::outer::OuterRun;
use super::render::GroupStates;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::changes::{changed_rows, take_rows, unmatched};
use crate::paths::sql::live::LiveTable;
use crate::paths::sql::{checked, SqlEvaluator};
use crate::paths::{with_bounds, StepOutput};
use crate::plan::{AggFunc, Extremal, PerRow, PostPlan, RankedRest};
use crate::spec::OutputMode;
use crate::window::Window;

/// The rest of a query and what evaluates it.
pub(super) struct PostRun {
    pub(super) eval: SqlEvaluator,
    /// The rest of the query over `table`, with Þund's arithmetic,
    /// optimized and physically planned once: each window only runs it.
    rest: Arc<dyn ExecutionPlan>,
    table: Arc<LiveTable>,
    /// A top-rows query: the table's columns from the candidates' keys.
    expand: Option<Vec<Option<usize>>>,
    /// Update mode: what each open window's result was at its last change
    /// (not kept when `parts` is: a window's changed partitions are
    /// evaluated before and after their change instead).
    shown: BTreeMap<Window, RecordBatch>,
    /// Update mode, a result that is the union of its partitions' (see
    /// `plan::rows`): each open window's groups by partition.
    parts: Option<Partitions>,
    /// A rest that depends only on the groups holding the window's extremum
    /// of one column (see `plan::extremal`): only they are handed to it.
    extremal: Option<Extremal>,
    /// With `extremal`: the rest over the groups holding the extremum as
    /// projections and filters, run without DataFusion.
    at_extremum: Option<PerRow>,
    /// Update mode, an extremum that is a `MAX` of a `COUNT`: each open
    /// window's groups that hold it, kept as groups change (see
    /// [`Holders`]); the view's open states are then those groups only.
    holders: FxHashMap<Window, Holders>,
    /// Update mode, a rest that is an outer aggregate with an exact inverse
    /// (see [`OuterRun`]).
    outer: Option<OuterRun>,
    /// A top-rows rest that ranks without DataFusion (see `plan::ranks`).
    ranked: Option<RankedRest>,
}

/// The groups of one open window that hold the greatest value of a `COUNT`
/// among its shown groups. A window's counts only grow while it is open
/// (rows only enter it), so a group that did not change cannot reach a new
/// greatest value: a trigger updates the holders from its changed groups
/// alone, instead of reading every group of the window.
struct Holders {
    best: i64,
    keys: rustc_hash::FxHashSet<u64>,
}

impl Holders {
    /// Group `key`, shown with `count`, changed (or was read first).
    fn offer(&mut self, key: u64, count: i64) {
        if count > self.best {
            self.best = count;
            self.keys.clear();
        }
        if count == self.best {
            self.keys.insert(key);
        }
    }
}

/// The partitions of a top-rows query's open groups, per window: a window
/// whose groups changed re-evaluates the query over its changed partitions
/// only, before and after the change, and emits the new rows less the old.
/// (Over the whole window, the rows of the other partitions are in both
/// results and cancel out.) The window's whole result is kept the same way,
/// less the old rows and plus the new, so that its close emits it without
/// running the query over all its groups. Where each result row's partition
/// is known (a rest ranked without DataFusion), the result is kept by
/// partition, and a changed partition's old rows are read there instead of
/// evaluated again.
struct Partitions {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    conv: RowConverter,
    /// The encoder of the query's result rows (`None` where a column type
    /// has no row encoding: a closing window then runs the query whole).
    out: Option<RowConverter>,
    windows: FxHashMap<Window, WindowParts>,
}

/// One window's groups by partition.
#[derive(Default)]
struct WindowParts {
    /// Each group's partition (an index into `groups`).
    of_key: FxHashMap<u64, u32>,
    /// Each partition's index, by its key bytes.
    index: FxHashMap<Box<[u8]>, u32>,
    /// Each partition's groups.
    groups: Vec<Vec<u64>>,
    /// The window's result as it stands, as a multiset of encoded rows.
    result: Kept,
}

impl WindowParts {
    /// Group `key` placed in the partition of bytes `part`.
    fn put(&mut self, part: &[u8], key: u64) {
        let p = match self.index.get(part) {
            Some(p) => *p,
            None => {
                let p = self.groups.len() as u32;
                self.index.insert(part.into(), p);
                self.groups.push(Vec::new());
                p
            }
        };
        self.groups[p as usize].push(key);
        self.of_key.insert(key, p);
    }
}

/// Old rows of a partition matched one by one against its new rows (more:
/// by a hash of their bytes).
const FEW_ROWS: usize = 16;

/// A window's result kept as encoded rows with their multiplicity, or,
/// where each result row's partition is known (a rest ranked without
/// DataFusion: see [`IncrementalView::eval_parts`]), as each partition's
/// rows.
#[derive(Default)]
struct Kept {
    rows: FxHashMap<Box<[u8]>, i64>,
    /// Each partition's rows (by its index in [`WindowParts::groups`]), where
    /// they are kept so: a changed partition's old rows are read here, not
    /// evaluated again.
    by_part: Option<Vec<Vec<Box<[u8]>>>>,
    /// The result's schema (from the last evaluation).
    schema: Option<SchemaRef>,
    /// Not usable: rows could not be encoded, or an old row was not found
    /// (an evaluation that is not a function of its groups, such as
    /// `ROW_NUMBER` among ties): the close runs the query whole.
    lost: bool,
}

impl Kept {
    /// Take `old` out of the result and put `new` in; returns the rows of
    /// `new` not in `old` (as multisets), what Update mode emits.
    fn replace(
        &mut self,
        conv: Option<&RowConverter>,
        old: &RecordBatch,
        new: &RecordBatch,
    ) -> Result<RecordBatch> {
        let Some(conv) = conv.filter(|_| !self.lost) else {
            self.lost = true;
            return changed_rows(Some(old), new);
        };
        self.schema = Some(new.schema());
        let old_rows = conv.convert_columns(old.columns())?;
        let new_rows = conv.convert_columns(new.columns())?;
        for r in old_rows.iter() {
            match self.rows.get_mut(r.data()) {
                Some(c) if *c > 1 => *c -= 1,
                Some(_) => {
                    self.rows.remove(r.data());
                }
                None => self.lost = true,
            }
        }
        for r in new_rows.iter() {
            *self.rows.entry(r.data().into()).or_default() += 1;
        }
        if old.num_rows() == 0 {
            return Ok(new.clone());
        }
        let keep = unmatched(
            old_rows.iter().map(|r| r.data()),
            new_rows.iter().map(|r| r.data()),
        );
        take_rows(new, &keep)
    }

    /// The partitions `touched` (ascending) changed: their rows are now
    /// those of `new` (row `i` of partition `part_of[i]`, each one of
    /// `touched`). Returns the rows of `new` not among those partitions' old
    /// rows (as multisets), in `new`'s order: what Update mode emits. The
    /// rows of the other partitions are in the window's result before and
    /// after alike.
    fn replace_parts(
        &mut self,
        conv: &RowConverter,
        touched: &[u32],
        new: &RecordBatch,
        part_of: &[u32],
    ) -> Result<RecordBatch> {
        debug_assert!(touched.windows(2).all(|p| p[0] < p[1]));
        self.schema = Some(new.schema());
        let rows = conv.convert_columns(new.columns())?;
        let by_part = self.by_part.get_or_insert_with(Vec::new);
        if let Some(&last) = touched.last() {
            if by_part.len() <= last as usize {
                by_part.resize_with(last as usize + 1, Vec::new);
            }
        }
        // the rows by partition (in `new`'s order within one), walked beside `touched`
        let mut order: Vec<(u32, u32)> = part_of.iter().copied().zip(0u32..).collect();
        order.sort_unstable();
        let mut order = order.as_slice();
        let mut emit: Vec<u32> = Vec::new();
        let mut stray = false;
        for &p in touched {
            let before = order.partition_point(|&(q, _)| q < p);
            stray |= before > 0;
            emit.extend(order[..before].iter().map(|&(_, i)| i));
            let n = order[before..].partition_point(|&(q, _)| q == p);
            let at = &order[before..before + n];
            order = &order[before + n..];
            let p = p as usize;
            let mut old = std::mem::take(&mut by_part[p]);
            let row = |i: u32| rows.row(i as usize).data();
            if old.len() > FEW_ROWS {
                let keep = unmatched(old.iter().map(|r| &r[..]), at.iter().map(|&(_, i)| row(i)));
                emit.extend(keep.into_iter().map(|k| at[k as usize].1));
                by_part[p] = at.iter().map(|&(_, i)| row(i).into()).collect();
                continue;
            }
            // a few old rows: each new row looked for among them, an equal
            // one kept as it is (and the new row not emitted)
            let mut kept = Vec::with_capacity(at.len());
            for &(_, i) in at {
                match old.iter().position(|r| &r[..] == row(i)) {
                    Some(k) => kept.push(old.swap_remove(k)),
                    None => {
                        emit.push(i);
                        kept.push(row(i).into());
                    }
                }
            }
            by_part[p] = kept;
        }
        if stray || !order.is_empty() {
            // a row of a partition that did not change: the result is not
            // the union of its partitions' after all (shown, and a closing
            // window runs the query whole)
            self.lost = true;
            emit.extend(order.iter().map(|&(_, i)| i));
        }
        emit.sort_unstable();
        take_rows(new, &emit)
    }

    /// The result as a batch, or `None` when it is not usable.
    fn batch(&self, conv: Option<&RowConverter>) -> Result<Option<RecordBatch>> {
        let (Some(conv), Some(schema), false) = (conv, &self.schema, self.lost) else {
            return Ok(None);
        };
        let parser = conv.parser();
        let cols = match &self.by_part {
            Some(parts) => conv.convert_rows(parts.iter().flatten().map(|r| parser.parse(r)))?,
            None => conv.convert_rows(
                self.rows
                    .iter()
                    .flat_map(|(r, &c)| std::iter::repeat_n(parser.parse(r), c.max(0) as usize)),
            )?,
        };
        Ok(Some(RecordBatch::try_new(schema.clone(), cols)?))
    }
}

impl PostRun {
    pub fn new(view: &str, plan: &PostPlan, eval: SqlEvaluator) -> Result<Self> {
        let rest = checked::rewrite(plan.rest.clone()).map_err(|e| Error::eval(view, e))?;
        // planned once: per window, only a run
        let rest = unbounded_windows(eval.prepare(&eval.optimize(&rest)?)?)
            .map_err(|e| Error::eval(view, e))?;
        let parts = match &plan.by_partition {
            Some(exprs) => Some(Partitions {
                exprs: exprs.iter().map(|(e, _)| e.clone()).collect(),
                conv: RowConverter::new(
                    exprs
                        .iter()
                        .map(|(_, dt)| SortField::new(dt.clone()))
                        .collect(),
                )
                .map_err(|e| Error::internal(view, e.to_string()))?,
                out: crate::paths::changes::converter_of(&rest.schema()).ok(),
                windows: FxHashMap::default(),
            }),
            None => None,
        };
        Ok(PostRun {
            rest,
            table: plan.table.clone(),
            expand: plan.expand.clone(),
            shown: BTreeMap::new(),
            parts,
            extremal: plan.extremal,
            at_extremum: plan.at_extremum.clone(),
            holders: FxHashMap::default(),
            outer: match &plan.outer {
                Some(o) => Some(OuterRun::new(view, o)?),
                None => None,
            },
            ranked: plan.ranked.clone(),
            eval,
        })
    }
}

/// `plan` with each streaming window operator replaced by the one that
/// evaluates a batch's partitions whole: the post stage runs over one
/// window's rows at once, and the streaming one keeps a state per partition
/// (keyed by `ScalarValue`s), which `perf` put at a third of Nexmark q18's
/// trigger with its one partition per bidder and auction.
fn unbounded_windows(
    plan: Arc<dyn ExecutionPlan>,
) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
    plan.transform_up(|p| {
        let Some(b) = p.downcast_ref::<BoundedWindowAggExec>() else {
            return Ok(Transformed::no(p));
        };
        let w = WindowAggExec::try_new(b.window_expr().to_vec(), b.input().clone(), false)?;
        Ok(Transformed::yes(Arc::new(w) as Arc<dyn ExecutionPlan>))
    })
    .map(|t| t.data)
}

/// Where `col` holds its extremum (`e.max`: its maximum), NULL counting as
/// no value: nowhere when every value is NULL (no group reaches a NULL
/// extremum).
fn extremal_mask(col: &ArrayRef, e: Extremal) -> Result<BooleanArray> {
    let opts = arrow::compute::SortOptions {
        descending: e.max,
        nulls_first: false,
    };
    let top = arrow::compute::sort_to_indices(col, Some(opts), Some(1))?;
    match top.values().first().map(|&at| at as usize) {
        Some(at) if col.is_valid(at) => {
            let best = arrow::array::Scalar::new(col.slice(at, 1));
            let eq = arrow::compute::kernels::cmp::eq(col, &best)?;
            // NULLs are not the extremum
            Ok(match eq.nulls() {
                Some(_) => arrow::compute::prep_null_mask_filter(&eq),
                None => eq,
            })
        }
        _ => Ok(BooleanArray::from(vec![false; col.len()])),
    }
}

/// Updates grouped by window, in window order (`updates` sorted by window).
fn by_window<'a>(updates: impl Iterator<Item = &'a Update>) -> Vec<(Window, Vec<&'a Update>)> {
    let mut out: Vec<(Window, Vec<&Update>)> = Vec::new();
    for u in updates {
        match out.last_mut() {
            Some((w, us)) if *w == u.window => us.push(u),
            _ => out.push((u.window, vec![u])),
        }
    }
    out
}

/// A changed window of a step by partition, before its states move in: its
/// touched partitions, their groups, and their result then (`None` where each
/// partition's rows are kept: see [`Kept::replace_parts`]).
type Before = (Window, Vec<u32>, Vec<u64>, Option<RecordBatch>);

/// An open group, borrowed where the host keeps it.
type OpenGroup<'a> = (&'a (Window, u64), &'a Vec<AggState>);

/// Window `w`'s open groups of `keys` (borrowed), those it has, in the
/// order of `keys`. Many keys are found in one walk of the map in key
/// order, a few steps from one key to the next before a fresh search (a
/// changed window's touched groups are often a good part of its groups:
/// a search per key cost q19 a tenth of its trigger).
fn open_of<'a>(open: &'a super::OpenStates, w: Window, keys: &[u64]) -> Vec<OpenGroup<'a>> {
    /// Entries stepped over before a fresh search.
    const STEPS: usize = 8;
    if keys.len() < 2 * STEPS {
        return keys
            .iter()
            .filter_map(|k| open.get_key_value(&(w, *k)))
            .collect();
    }
    let mut sorted: Vec<(u64, u32)> = keys.iter().zip(0u32..).map(|(&k, i)| (k, i)).collect();
    sorted.sort_unstable();
    let mut found: Vec<Option<OpenGroup<'a>>> = vec![None; keys.len()];
    let seek = |k: u64| open.range((w, k)..=(w, u64::MAX)).peekable();
    let mut walk = seek(sorted[0].0);
    for (k, i) in sorted {
        let mut steps = 0;
        while steps < STEPS && walk.next_if(|((_, g), _)| *g < k).is_some() {
            steps += 1;
        }
        if steps == STEPS && walk.peek().is_some_and(|((_, g), _)| *g < k) {
            walk = seek(k);
        }
        if let Some(&e) = walk.peek().filter(|((_, g), _)| *g == k) {
            found[i as usize] = Some(e);
        }
    }
    found.into_iter().flatten().collect()
}

/// Window `w`'s open groups (borrowed: a changed window's groups are read,
/// not copied).
pub(super) fn open_groups(open: &super::OpenStates, w: Window) -> Vec<OpenGroup<'_>> {
    open.range((w, 0)..=(w, u64::MAX)).collect()
}

impl IncrementalView {
    /// Whether a group with these states shows (a group only rows WHERE
    /// refused made exist does not, where there are group keys).
    pub(super) fn is_shown(&self, states: &[AggState]) -> bool {
        self.plan.group_keys == 0 || states.last().is_some_and(|s| s.count > 0)
    }

    /// The aggregate whose greatest value the rest depends on, where that is
    /// a `COUNT` (not per value) and the post stage keeps each window's
    /// [`Holders`] of it.
    fn counted_extremum(&self, post: &PostRun) -> Option<usize> {
        let e = post.extremal.filter(|e| e.max && post.expand.is_none())?;
        let j = e.column.checked_sub(self.plan.group_keys)?;
        let a = self.plan.aggs.get(j)?;
        let counted = a.func == AggFunc::Count && a.per_value.is_none();
        (counted && !self.plan.keeps_per_value()).then_some(j)
    }

    /// Update mode with a counted extremum (aggregate `j`): the step's
    /// changed groups offered to their windows' [`Holders`], and of each
    /// window only the groups that hold its greatest count kept open (their
    /// states moved in, not copied). A window without holders yet offers its
    /// open groups first (those a restore put back).
    fn keep_holders(&mut self, post: &mut PostRun, j: usize, changed: &mut [Update]) {
        for ups in changed.chunk_by_mut(|a, b| a.window == b.window) {
            let w = ups[0].window;
            let h = post.holders.entry(w).or_insert_with(|| {
                let mut h = Holders {
                    best: i64::MIN,
                    keys: Default::default(),
                };
                for ((_, key), states) in open_groups(&self.open, w) {
                    if self.is_shown(states) {
                        h.offer(*key, states[j].count);
                    }
                }
                h
            });
            for u in ups.iter() {
                if self.is_shown(&u.aggs) {
                    h.offer(u.key, u.aggs[j].count);
                }
            }
            let gone: Vec<u64> = open_groups(&self.open, w)
                .into_iter()
                .map(|((_, key), _)| *key)
                .filter(|key| !h.keys.contains(key))
                .collect();
            for key in gone {
                self.open.remove(&(w, key));
            }
            for u in ups.iter_mut() {
                if h.keys.contains(&u.key) {
                    self.open.insert((w, u.key), std::mem::take(&mut u.aggs));
                }
            }
        }
    }

    /// The groups of `groups` that show.
    pub(super) fn shown<G: GroupStates>(&self, groups: &[G]) -> Vec<G> {
        groups
            .iter()
            .copied()
            .filter(|u| self.is_shown(u.states()))
            .collect()
    }

    /// The table the rest reads, of `shown` (groups that show).
    pub(super) fn groups_table<G: GroupStates>(
        &self,
        post: &PostRun,
        shown: &[G],
    ) -> Result<RecordBatch> {
        let agg = self.agg_rows(shown)?;
        Ok(RecordBatch::try_new(
            post.table.schema(),
            agg.columns().to_vec(),
        )?)
    }

    /// The rest of the query over window `win`'s groups `groups`.
    fn post_eval<G: GroupStates>(
        &self,
        post: &PostRun,
        win: Window,
        groups: &[G],
    ) -> Result<RecordBatch> {
        let shown = self.shown(groups);
        // only the groups holding the extremum, where the rest reads no others
        // (the rest without its condition needs them found even among one)
        let keys = self.plan.group_keys;
        let compiled = post.at_extremum.as_ref().filter(|_| post.expand.is_none());
        let shown = match post
            .extremal
            .filter(|_| post.expand.is_none() && (shown.len() > 1 || compiled.is_some()))
        {
            Some(e) if e.column >= keys => {
                let j = e.column - keys;
                let col = self.column(&self.plan.aggs[j], &shown, j)?;
                let mask = extremal_mask(&col, e)?;
                shown
                    .into_iter()
                    .zip(mask.values().iter())
                    .filter_map(|(g, at)| at.then_some(g))
                    .collect()
            }
            _ => shown,
        };
        let agg = self.agg_rows(&shown)?;
        let cols = match &post.expand {
            None => match post
                .extremal
                .filter(|e| e.column < keys && (agg.num_rows() > 1 || compiled.is_some()))
            {
                Some(e) => {
                    let mask = extremal_mask(agg.column(e.column), e)?;
                    arrow::compute::filter_record_batch(&agg, &mask)?
                        .columns()
                        .to_vec()
                }
                None => agg.columns().to_vec(),
            },
            Some(columns) => self.expand(&agg, columns, &post.table.schema(), false)?,
        };
        let rows = RecordBatch::try_new(post.table.schema(), cols)?;
        if let Some(per_row) = compiled {
            let (out, _) = per_row.run(rows).map_err(|e| Error::eval(&self.view, e))?;
            return post.eval.as_output(&out);
        }
        if let Some(ranked) = &post.ranked {
            let out = ranked.run(rows).map_err(|e| Error::eval(&self.view, e))?;
            return post.eval.as_output(&out);
        }
        post.eval.run_prepared(
            &post.rest,
            &[post.table.as_ref()],
            vec![vec![rows]],
            Some(self.shown_window(win)),
        )
    }

    /// A top-rows query's candidates as rows: each group (the columns read,
    /// then its count) repeated count times (`once`: each group once,
    /// whatever its count), the columns never read filled with a default.
    fn expand(
        &self,
        agg: &RecordBatch,
        columns: &[Option<usize>],
        schema: &SchemaRef,
        once: bool,
    ) -> Result<Vec<ArrayRef>> {
        Ok(self.expand_traced(agg, columns, schema, once)?.0)
    }

    /// [`Self::expand`], and for each candidate row its group's row in `agg`.
    fn expand_traced(
        &self,
        agg: &RecordBatch,
        columns: &[Option<usize>],
        schema: &SchemaRef,
        once: bool,
    ) -> Result<(Vec<ArrayRef>, Vec<u32>)> {
        let counts = agg
            .column(self.plan.group_keys)
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| Error::internal(&self.view, "a candidate's count is not an Int64"))?;
        if !once {
            let counted = counts.iter().map(|c| c.unwrap_or(0));
            super::copies(&self.view, "a window's candidate rows", counted)?;
        }
        let mut idx: Vec<u32> = Vec::new();
        for (i, c) in counts.iter().enumerate() {
            let times = match once {
                true => 1,
                false => c.unwrap_or(0).max(0) as usize,
            };
            idx.extend(std::iter::repeat_n(i as u32, times));
        }
        let idx = UInt32Array::from(idx);
        let cols = schema
            .fields()
            .iter()
            .zip(columns)
            .map(|(f, c)| match c {
                Some(k) => Ok(take(agg.column(*k).as_ref(), &idx, None)?),
                None if f.is_nullable() => Ok(new_null_array(f.data_type(), idx.len())),
                None => ScalarValue::new_default(f.data_type())
                    .and_then(|v| v.to_array_of_size(idx.len()))
                    .map_err(|e| Error::eval(&self.view, e)),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((cols, idx.values().to_vec()))
    }

    fn untraced(&self) -> Error {
        Error::internal(
            &self.view,
            "a result traced to its partitions that cannot be",
        )
    }

    /// Whether each result row's partition is known: a top-rows rest
    /// ranked without DataFusion, whose result rows are kept encoded.
    fn traces(post: &PostRun, parts: &Partitions) -> bool {
        post.ranked.is_some() && post.expand.is_some() && parts.out.is_some()
    }

    /// The rest over `groups` (of `wp`'s window; see [`Self::traces`]), and
    /// each result row's partition: that of the group it came from.
    /// Evaluated as [`Self::post_eval`] does (a top-rows rest reads every
    /// shown group: no extremum is looked for).
    fn eval_parts<G: GroupStates>(
        &self,
        post: &PostRun,
        wp: &WindowParts,
        groups: &[G],
    ) -> Result<(RecordBatch, Vec<u32>)> {
        let (Some(ranked), Some(columns)) = (&post.ranked, &post.expand) else {
            return Err(self.untraced());
        };
        let shown = self.shown(groups);
        let agg = self.agg_rows(&shown)?;
        let (cols, candidates) = self.expand_traced(&agg, columns, &post.table.schema(), false)?;
        let rows = RecordBatch::try_new(post.table.schema(), cols)?;
        let (out, from) = ranked
            .run_traced(rows)
            .map_err(|e| Error::eval(&self.view, e))?;
        let part_of = from
            .iter()
            .map(|&c| {
                let key = shown[candidates[c as usize] as usize].key();
                wp.of_key.get(&key).copied().ok_or_else(|| {
                    Error::internal(&self.view, "a result row of a group in no partition")
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok((post.eval.as_output(&out)?, part_of))
    }

    fn post_rows(
        &self,
        win: Window,
        result: &RecordBatch,
        fin: Option<bool>,
    ) -> Result<RecordBatch> {
        let win = self.shown_window(win);
        with_bounds(&self.out, Some((win, Some(&self.plan.bound))), result, fin)
    }

    /// After a restore (Update mode): what each open window showed is its
    /// result over the restored groups, which are as they were at its last
    /// change, so a resumed run shows what an uninterrupted one does.
    pub(super) fn restore_shown(&mut self) -> Result<()> {
        let Some(mut post) = self.post.take() else {
            return Ok(());
        };
        post.shown.clear();
        post.holders.clear();
        if let Some(outer) = post.outer.as_mut() {
            // built again from the restored groups when a window next changes
            outer.clear();
        }
        if let Some(parts) = post.parts.as_mut() {
            // rebuilt from the restored groups when a window next changes
            parts.windows.clear();
        }
        let result = (|| {
            if self.mode != OutputMode::Update || post.parts.is_some() || post.outer.is_some() {
                return Ok(());
            }
            let mut windows: Vec<Window> = self.open.keys().map(|(w, _)| *w).collect();
            windows.dedup();
            for w in windows {
                let groups = open_groups(&self.open, w);
                let res = self.post_eval(&post, w, &groups)?;
                post.shown.insert(w, res);
            }
            Ok(())
        })();
        self.post = Some(post);
        result
    }

    /// A step of a view with a post stage, after the dataflow advanced.
    pub(super) fn step_post(&mut self, step: &mut Step, out: &mut StepOutput) -> Result<()> {
        let Some(mut post) = self.post.take() else {
            return Err(Error::internal(&self.view, "a post stage without its plan"));
        };
        let result = self.step_post_with(&mut post, step, out);
        self.post = Some(post);
        result
    }

    fn step_post_with(
        &mut self,
        post: &mut PostRun,
        step: &mut Step,
        out: &mut StepOutput,
    ) -> Result<()> {
        let mut parts = post
            .parts
            .take()
            .filter(|_| self.mode == OutputMode::Update);
        let result = self.step_post_parts(post, parts.as_mut(), step, out);
        post.parts = parts;
        result
    }

    /// The partitions of window `w` that `changed` (its changed groups)
    /// touch, and their groups, every group of `w` placed in its partition
    /// first.
    fn touched(
        &self,
        post: &PostRun,
        parts: &mut Partitions,
        w: Window,
        changed: &[&Update],
    ) -> Result<(Vec<u32>, Vec<u64>)> {
        let traces = Self::traces(post, parts);
        let Partitions {
            exprs,
            conv,
            out,
            windows,
        } = parts;
        let wp = match windows.entry(w) {
            Entry::Occupied(o) => o.into_mut(),
            // a window first seen (or first since a restore): its open groups placed
            Entry::Vacant(v) => {
                let wp = v.insert(WindowParts::default());
                let open = open_groups(&self.open, w);
                self.place(post, exprs, conv, wp, &open)?;
                // its result as it stands (after a restore), kept from here on
                match (traces, out.as_ref()) {
                    (true, Some(out)) => {
                        let (res, part_of) = self.eval_parts(post, wp, &open)?;
                        let all: Vec<u32> = (0..wp.groups.len() as u32).collect();
                        wp.result.replace_parts(out, &all, &res, &part_of)?;
                    }
                    _ if !open.is_empty() => {
                        let res = self.post_eval(post, w, &open)?;
                        let none = RecordBatch::new_empty(res.schema());
                        wp.result.replace(out.as_ref(), &none, &res)?;
                    }
                    _ => {}
                }
                wp
            }
        };
        let fresh: Vec<&Update> = changed
            .iter()
            .copied()
            .filter(|u| !wp.of_key.contains_key(&u.key))
            .collect();
        self.place(post, exprs, conv, wp, &fresh)?;
        let mut touched: Vec<u32> = changed
            .iter()
            .filter_map(|u| wp.of_key.get(&u.key).copied())
            .collect();
        touched.sort_unstable();
        touched.dedup();
        let keys = touched
            .iter()
            .flat_map(|&p| wp.groups[p as usize].iter().copied())
            .collect();
        Ok((touched, keys))
    }

    /// Place `groups` (not placed yet) in their partitions of `wp`.
    fn place<G: GroupStates>(
        &self,
        post: &PostRun,
        exprs: &[Arc<dyn PhysicalExpr>],
        conv: &RowConverter,
        wp: &mut WindowParts,
        groups: &[G],
    ) -> Result<()> {
        // a group only rows WHERE refused made exist is in no partition: the
        // rest never reads it, nor evaluates its partition's keys (`ABS(v)`
        // of the `i64::MIN` that WHERE refused)
        let shown: Vec<G>;
        let groups = match groups.iter().all(|g| self.is_shown(g.states())) {
            true => groups,
            false => {
                shown = (groups.iter().copied())
                    .filter(|g| self.is_shown(g.states()))
                    .collect();
                &shown
            }
        };
        let Some(columns) = post.expand.as_ref().filter(|_| !groups.is_empty()) else {
            return Ok(());
        };
        if let Some(width) = self.partition_prefix(exprs, columns) {
            for g in groups {
                let key = self.keys.bytes(g.key());
                let Some(part) = key.get(..width) else {
                    return Err(Error::internal(
                        &self.view,
                        "a candidate's key is shorter than its partition's columns",
                    ));
                };
                wp.put(part, g.key());
            }
            return Ok(());
        }
        let agg = self.agg_rows(groups)?;
        let cols = self.expand(&agg, columns, &post.table.schema(), true)?;
        let rows = RecordBatch::try_new(post.table.schema(), cols)?;
        let values = exprs
            .iter()
            .map(|e| {
                e.evaluate(&rows)
                    .and_then(|c| c.into_array(rows.num_rows()))
            })
            .collect::<datafusion::error::Result<Vec<_>>>()
            .map_err(|e| Error::eval(&self.view, e))?;
        let bytes = conv.convert_columns(&values)?;
        for (g, part) in groups.iter().zip(bytes.iter()) {
            wp.put(part.data(), g.key());
        }
        Ok(())
    }

    /// Where the partition is the candidates' first group keys (in any
    /// order) and each has a fixed width in the row format: the width of
    /// their bytes, the head of every candidate's key bytes (each column's
    /// encoding follows the one before it). Equal heads are equal
    /// partitions, so a candidate is placed without decoding its key.
    fn partition_prefix(
        &self,
        exprs: &[Arc<dyn PhysicalExpr>],
        columns: &[Option<usize>],
    ) -> Option<usize> {
        use datafusion::physical_expr::expressions::Column;
        let mut keys: Vec<usize> = exprs
            .iter()
            .map(|e| {
                let c = e.downcast_ref::<Column>()?;
                columns.get(c.index()).copied().flatten()
            })
            .collect::<Option<Vec<_>>>()?;
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() || keys.iter().enumerate().any(|(i, &k)| i != k) {
            return None;
        }
        keys.iter()
            .map(|&k| {
                let f = self.plan.key_fields.get(k)?;
                super::distinct::fixed_width(f.data_type())
            })
            .sum()
    }

    /// By partition, window `w` closing with its final `groups`: its kept
    /// result with the partitions that changed in the closing step
    /// re-evaluated (before, from the open groups, and after, from `groups`),
    /// or `None` where it is not kept. The window's open groups are removed.
    fn close_kept(
        &mut self,
        post: &PostRun,
        parts: &mut Partitions,
        w: Window,
        groups: &[&Update],
    ) -> Result<Option<RecordBatch>> {
        // closing groups whose state moved, and open groups that are gone:
        // both sorted by key, merged
        let (mut moved, mut gone): (Vec<&Update>, Vec<u64>) = (Vec::new(), Vec::new());
        let mut open = self.open.range((w, 0)..=(w, u64::MAX)).peekable();
        for &u in groups {
            while let Some(((_, k), _)) = open.next_if(|((_, k), _)| *k < u.key) {
                gone.push(*k);
            }
            match open.next_if(|((_, k), _)| *k == u.key) {
                Some((_, a)) if *a == u.aggs => {}
                _ => moved.push(u),
            }
        }
        gone.extend(open.map(|((_, k), _)| *k));
        let result = (|| {
            if !parts.windows.contains_key(&w) {
                return Ok(None);
            }
            if !moved.is_empty() || !gone.is_empty() {
                let gone_updates: Vec<Update> = gone
                    .iter()
                    .map(|&key| Update {
                        window: w,
                        key,
                        aggs: Vec::new(),
                    })
                    .collect();
                let changed: Vec<&Update> = moved.iter().copied().chain(&gone_updates).collect();
                let traces = Self::traces(post, parts);
                let (touched, keys) = self.touched(post, parts, w, &changed)?;
                // (traced, the partitions' old rows are kept: not evaluated)
                let old = match traces {
                    true => None,
                    false => Some(self.post_eval(post, w, &open_of(&self.open, w, &keys))?),
                };
                let new: Vec<&Update> = keys
                    .iter()
                    .filter_map(|k| {
                        let at = groups.binary_search_by_key(k, |u| u.key).ok()?;
                        Some(groups[at])
                    })
                    .collect();
                let wp = parts.windows.entry(w).or_default();
                match (old, parts.out.as_ref()) {
                    (Some(old), out) => {
                        let new = self.post_eval(post, w, &new)?;
                        wp.result.replace(out, &old, &new)?;
                    }
                    (None, out) => {
                        let (new, part_of) = self.eval_parts(post, wp, &new)?;
                        let out = out.ok_or_else(|| self.untraced())?;
                        wp.result.replace_parts(out, &touched, &new, &part_of)?;
                    }
                }
            }
            match parts.windows.get(&w) {
                Some(wp) => wp.result.batch(parts.out.as_ref()),
                None => Ok(None),
            }
        })();
        parts.windows.remove(&w);
        // every open group of `w` goes (the closing ones and those gone):
        // the window's range is cut out whole, not removed key by key
        let mut from_w = self.open.split_off(&(w, 0));
        let mut after = from_w.split_off(&(w, u64::MAX));
        if let Some(last) = after.remove(&(w, u64::MAX)) {
            self.dataflow.recycle(last);
        }
        self.open.append(&mut after);
        // their state vectors go back to the workers, as those of groups
        // replaced in a step do, not freed one by one here
        for states in from_w.into_values() {
            self.dataflow.recycle(states);
        }
        result
    }

    fn step_post_parts(
        &mut self,
        post: &mut PostRun,
        mut parts: Option<&mut Partitions>,
        step: &mut Step,
        out: &mut StepOutput,
    ) -> Result<()> {
        let closed = by_window(step.closed.iter());
        out.windows_closed = closed.len() as u64;
        // by partition: each changed window's touched partitions, evaluated before the change
        // (traced, not evaluated: each partition's old rows are kept)
        let mut before: Vec<Before> = Vec::new();
        if let Some(parts) = parts.as_deref_mut() {
            let traces = Self::traces(post, parts);
            for (w, changed) in by_window(step.changed.iter()) {
                let (touched, keys) = self.touched(post, parts, w, &changed)?;
                let old = match traces {
                    true => None,
                    false => Some(self.post_eval(post, w, &open_of(&self.open, w, &keys))?),
                };
                before.push((w, touched, keys, old));
            }
        }
        let counted = match (self.mode, parts.is_none()) {
            (OutputMode::Update, true) => self.counted_extremum(post),
            _ => None,
        };
        // an outer aggregate: what the changed windows emit, before their states move in
        let outer = match (self.mode, post.outer.take()) {
            (OutputMode::Update, Some(mut run)) => {
                let closing: Vec<Window> = closed.iter().map(|(w, _)| *w).collect();
                let emit = self.outer_changes(post, &mut run, &step.changed, &closing);
                if emit.is_err() {
                    run.clear();
                }
                post.outer = Some(run);
                Some(emit)
            }
            (_, run) => {
                post.outer = run;
                None
            }
        };
        if let Some(j) = counted {
            self.keep_holders(post, j, &mut step.changed);
        } else if self.mode != OutputMode::Append {
            // the step's states moved in, not copied: only their windows are read after
            // (and the states they replace go back to the workers)
            for u in step.changed.iter_mut() {
                let aggs = std::mem::take(&mut u.aggs);
                match self.open.entry((u.window, u.key)) {
                    std::collections::btree_map::Entry::Occupied(mut o) => {
                        self.dataflow.recycle(std::mem::replace(o.get_mut(), aggs));
                    }
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(aggs);
                    }
                }
            }
        }
        if self.mode != OutputMode::Append && parts.is_none() {
            for u in &step.closed {
                if let Some(old) = self.open.remove(&(u.window, u.key)) {
                    self.dataflow.recycle(old);
                }
            }
        }
        match self.mode {
            OutputMode::Append => {
                for (w, groups) in &closed {
                    let res = self.post_eval(post, *w, groups)?;
                    out.batches.push(self.post_rows(*w, &res, None)?);
                }
            }
            OutputMode::Update => {
                // the closing windows evaluated first: each starts before
                // every open one, so an error names the first window by
                // start that fails, as the recompute path does (their rows
                // are emitted after the open windows' changes)
                let mut done = Vec::with_capacity(closed.len());
                for (w, groups) in &closed {
                    // by partition: the result kept, where it is
                    let kept = match parts.as_deref_mut() {
                        Some(parts) => self.close_kept(post, parts, *w, groups)?,
                        None => None,
                    };
                    let res = match kept {
                        Some(res) => res,
                        None => self.post_eval(post, *w, groups)?,
                    };
                    done.push((*w, res));
                }
                if let Some(parts) = parts {
                    for (w, touched, keys, old) in before {
                        let new = open_of(&self.open, w, &keys);
                        let wp = parts.windows.entry(w).or_default();
                        let emit = match (old, parts.out.as_ref()) {
                            (Some(old), out) => {
                                let res = self.post_eval(post, w, &new)?;
                                wp.result.replace(out, &old, &res)?
                            }
                            (None, out) => {
                                let (res, part_of) = self.eval_parts(post, wp, &new)?;
                                let out = out.ok_or_else(|| self.untraced())?;
                                wp.result.replace_parts(out, &touched, &res, &part_of)?
                            }
                        };
                        out.batches.push(self.post_rows(w, &emit, Some(false))?);
                    }
                } else if let Some(emit) = outer {
                    for (w, rows) in emit? {
                        out.batches.push(self.post_rows(w, &rows, Some(false))?);
                    }
                } else {
                    // (with a counted extremum, a window's open groups are its holders)
                    let mut changed: Vec<Window> = step.changed.iter().map(|u| u.window).collect();
                    changed.dedup();
                    for w in changed {
                        let groups = open_groups(&self.open, w);
                        let res = self.post_eval(post, w, &groups)?;
                        let emit = changed_rows(post.shown.get(&w), &res)?;
                        out.batches.push(self.post_rows(w, &emit, Some(false))?);
                        post.shown.insert(w, res);
                    }
                }
                for (w, res) in done {
                    out.batches.push(self.post_rows(w, &res, Some(true))?);
                    post.shown.remove(&w);
                    post.holders.remove(&w);
                    if let Some(outer) = post.outer.as_mut() {
                        outer.close(&w);
                    }
                }
            }
            OutputMode::Complete => {
                for (w, groups) in &closed {
                    let res = self.post_eval(post, *w, groups)?;
                    self.closed_results.push(self.post_rows(*w, &res, None)?);
                }
                out.batches.extend(self.closed_results.all());
                let mut windows: Vec<Window> = self.open.keys().map(|(w, _)| *w).collect();
                windows.dedup();
                for w in windows {
                    let groups = open_groups(&self.open, w);
                    let res = self.post_eval(post, w, &groups)?;
                    out.batches.push(self.post_rows(w, &res, None)?);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use proptest::prelude::*;

    /// One step of a result kept by partition: the partitions it touches
    /// (a subset of 0..6), and each touched partition's new rows.
    fn part_steps() -> impl Strategy<Value = Vec<Vec<(u32, Vec<i64>)>>> {
        let rows = proptest::collection::vec(0i64..6, 0..40);
        let step = proptest::collection::btree_map(0u32..6, rows, 0..4)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>());
        proptest::collection::vec(step, 1..8)
    }

    proptest! {
        /// A result kept by partition emits, at each step, the rows of its
        /// touched partitions less their old rows (as multisets), and holds
        /// the union of every partition's last rows: partitions of few rows
        /// and of many (matched by hash), repeated rows among them.
        #[test]
        fn kept_by_partition_emits_the_new_rows_less_the_old(steps in part_steps()) {
            let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
            let conv = RowConverter::new(vec![SortField::new(DataType::Int64)]).expect("conv");
            let mut kept = Kept::default();
            let mut model: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
            for step in steps {
                let touched: Vec<u32> = step.iter().map(|(p, _)| *p).collect();
                // the rows of the partitions interleaved, as a ranking gives them
                let mut rows: Vec<(u32, i64)> = step
                    .iter()
                    .flat_map(|(p, vs)| vs.iter().map(move |v| (*p, *v)))
                    .collect();
                rows.sort_by_key(|&(p, v)| (v, p));
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1)))],
                )
                .expect("batch");
                let part_of: Vec<u32> = rows.iter().map(|r| r.0).collect();
                let emitted = kept
                    .replace_parts(&conv, &touched, &batch, &part_of)
                    .expect("replace");
                let mut got: Vec<i64> = emitted
                    .column(0)
                    .as_primitive::<Int64Type>()
                    .values()
                    .to_vec();
                got.sort_unstable();
                let mut expected: Vec<i64> = Vec::new();
                for (p, new) in &step {
                    let mut old = model.remove(p).unwrap_or_default();
                    for v in new {
                        match old.iter().position(|o| o == v) {
                            Some(k) => {
                                old.swap_remove(k);
                            }
                            None => expected.push(*v),
                        }
                    }
                    model.insert(*p, new.clone());
                }
                expected.sort_unstable();
                prop_assert_eq!(got, expected);
                let all = kept.batch(Some(&conv)).expect("batch").expect("kept");
                let mut all: Vec<i64> = all.column(0).as_primitive::<Int64Type>().values().to_vec();
                all.sort_unstable();
                let mut held: Vec<i64> = model.values().flatten().copied().collect();
                held.sort_unstable();
                prop_assert_eq!(all, held);
            }
        }

        /// The walk finds what a search per key finds, in the keys' order:
        /// keys held or not, in runs or far apart, of the window or of its
        /// neighbours.
        #[test]
        fn open_of_finds_what_a_search_per_key_finds(
            held in proptest::collection::btree_set((0i64..3, 0u64..400), 0..300),
            keys in proptest::collection::vec(0u64..420, 0..120),
            w in 0i64..3,
        ) {
            let window = |s: i64| Window { start: s * 10, end: s * 10 + 10 };
            let open: super::super::OpenStates = held
                .iter()
                .map(|&(s, k)| ((window(s), k), Vec::new()))
                .collect();
            let w = window(w);
            let searched: Vec<(Window, u64)> = keys
                .iter()
                .filter_map(|k| open.get_key_value(&(w, *k)))
                .map(|(k, _)| *k)
                .collect();
            let walked: Vec<(Window, u64)> = open_of(&open, w, &keys).iter().map(|(k, _)| **k).collect();
            prop_assert_eq!(walked, searched);
        }
    }
}
