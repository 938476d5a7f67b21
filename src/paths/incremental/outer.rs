//! Update mode over a post stage that is an outer aggregate with an exact
//! inverse (see `plan::outer`): each open window's outer groups are kept as
//! states. A trigger's changed inner groups take their old rows out of their
//! outer groups and put their new rows in, and only the outer groups they
//! touched are evaluated again (the rest above the outer aggregate only
//! projects and filters its rows, so the others show what they showed).
//!
//! The window's inner groups stay open on the host as for every post stage:
//! they are the old rows a change takes out, the rows a window's outer
//! groups are built from the first time it changes (or after a restore),
//! and the rows its close evaluates the whole rest over.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Decimal128Array, Int64Array, RecordBatch, RecordBatchOptions, UInt64Array,
};
use arrow::buffer::NullBuffer;
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::datasource::TableProvider;
use datafusion::physical_plan::ExecutionPlan;
use rustc_hash::FxHashMap;
use thund_dataflows::{AggKind, AggState, Update, Value};

use super::ingest::true_rows;
use super::render::GroupStates;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::changes::changed_rows;
use crate::paths::sql::checked::{self, canonical_array};
use crate::paths::sql::live::LiveTable;
use crate::paths::sql::SqlEvaluator;
use crate::plan::{CompiledAggregate, OuterPlan};
use crate::window::Window;

/// One window's outer groups, by their key's row-format bytes.
type OuterGroups = FxHashMap<Box<[u8]>, OuterGroup>;

/// The outer aggregate of a post stage, as Update mode keeps it.
pub(super) struct OuterRun {
    /// The part below the outer aggregate, over the groups table, planned once.
    below: Arc<dyn ExecutionPlan>,
    /// The rest above it, over `table`, planned once.
    above: Arc<dyn ExecutionPlan>,
    table: Arc<LiveTable>,
    /// The encoder of the outer group keys.
    conv: RowConverter,
    /// Each open window's outer groups (a window that has not changed since
    /// it opened or since a restore has none yet).
    windows: FxHashMap<Window, OuterGroups>,
}

/// An outer group: how many rows below feed it, and its states.
#[derive(Clone)]
struct OuterGroup {
    rows: i64,
    states: Vec<AggState>,
}

/// An outer group as rendering reads it.
#[derive(Clone, Copy)]
struct OuterRow<'a> {
    window: Window,
    states: &'a [AggState],
}

impl GroupStates for OuterRow<'_> {
    fn window(&self) -> Window {
        self.window
    }
    fn key(&self) -> u64 {
        0
    }
    fn states(&self) -> &[AggState] {
        self.states
    }
}

impl OuterRun {
    pub fn new(view: &str, plan: &OuterPlan, eval: &SqlEvaluator) -> Result<Self> {
        let prepare = |p: &datafusion::logical_expr::LogicalPlan| -> Result<_> {
            let p = checked::rewrite(p.clone()).map_err(|e| Error::eval(view, e))?;
            eval.prepare(&eval.optimize(&p)?)
        };
        let fields = plan.aggregate.key_fields[..plan.aggregate.group_keys]
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(OuterRun {
            below: prepare(&plan.below)?,
            above: prepare(&plan.above)?,
            table: plan.table.clone(),
            conv: RowConverter::new(fields).map_err(|e| Error::internal(view, e.to_string()))?,
            windows: FxHashMap::default(),
        })
    }

    /// Forget every window's outer groups (after a restore, or an error):
    /// each is built again from its open groups when it next changes.
    pub fn clear(&mut self) {
        self.windows.clear();
    }

    /// Window `w` closed.
    pub fn close(&mut self, w: &Window) {
        self.windows.remove(w);
    }
}

/// An aggregate's input per row below: whether it feeds the aggregate, and
/// the value it adds (a `COUNT` adds one).
struct Fed {
    valid: Option<NullBuffer>,
    values: Option<Vec<i128>>,
}

impl IncrementalView {
    fn outer_plan(&self) -> Result<&OuterPlan> {
        self.plan
            .post
            .as_ref()
            .and_then(|p| p.outer.as_deref())
            .ok_or_else(|| Error::internal(&self.view, "an outer aggregate without its plan"))
    }

    /// Update mode: the rows each window of `changed` (not one of `closing`)
    /// emits, its changed groups' states not yet in the open states.
    pub(super) fn outer_changes(
        &self,
        post: &super::post::PostRun,
        run: &mut OuterRun,
        changed: &[Update],
        closing: &[Window],
    ) -> Result<Vec<(Window, RecordBatch)>> {
        let plan = &self.outer_plan()?.aggregate;
        let mut out = Vec::new();
        let mut at = 0;
        while at < changed.len() {
            let w = changed[at].window;
            let end = at + changed[at..].iter().take_while(|u| u.window == w).count();
            let ups: Vec<&Update> = changed[at..end].iter().collect();
            at = end;
            if closing.contains(&w) {
                // its close shows it whole
                continue;
            }
            if !run.windows.contains_key(&w) {
                let open = super::post::open_groups(&self.open, w);
                let rows = self.below_rows(post, run, w, &open)?;
                let mut groups = OuterGroups::default();
                self.fold_outer(plan, run, w, &mut groups, &rows, 1, &mut None)?;
                run.windows.insert(w, groups);
            }
            let keys: Vec<u64> = ups.iter().map(|u| u.key).collect();
            let old = super::post::open_of(&self.open, w, &keys);
            let old = self.below_rows(post, run, w, &old)?;
            let new = self.below_rows(post, run, w, &ups)?;
            let mut groups = run.windows.remove(&w).unwrap_or_default();
            let mut before = Some(FxHashMap::default());
            let folded = self
                .fold_outer(plan, run, w, &mut groups, &old, -1, &mut before)
                .and_then(|_| self.fold_outer(plan, run, w, &mut groups, &new, 1, &mut before));
            let before = before.unwrap_or_default();
            groups.retain(|_, g| g.rows > 0);
            folded?;
            let was: Vec<(&[u8], &OuterGroup)> = before
                .iter()
                .filter_map(|(k, g)| g.as_ref().map(|g| (k.as_ref(), g)))
                .filter(|(_, g)| g.rows > 0)
                .collect();
            let is: Vec<(&[u8], &OuterGroup)> = before
                .keys()
                .filter_map(|k| groups.get_key_value(k).map(|(k, g)| (k.as_ref(), g)))
                .collect();
            let was = self.above_rows(post, run, plan, w, &was)?;
            let is = self.above_rows(post, run, plan, w, &is)?;
            out.push((w, changed_rows(Some(&was), &is)?));
            run.windows.insert(w, groups);
        }
        Ok(out)
    }

    /// The rows below the outer aggregate of window `w`'s `groups` (those
    /// shown).
    fn below_rows<G: GroupStates>(
        &self,
        post: &super::post::PostRun,
        run: &OuterRun,
        w: Window,
        groups: &[G],
    ) -> Result<RecordBatch> {
        let table = self.groups_table(post, groups)?;
        if table.num_rows() == 0 {
            return Ok(RecordBatch::new_empty(run.below.schema()));
        }
        post.eval.run_prepared_as(
            &run.below,
            &[post.table.as_ref()],
            vec![vec![table]],
            Some(self.shown_window(w)),
            run.below.schema(),
        )
    }

    /// Fold `rows` (rows below, of window `w`) into `groups` with `sign`
    /// (1: they enter, -1: they leave); with `before`, each outer group's
    /// state before its first change is put there (`None`: it did not exist).
    #[allow(clippy::too_many_arguments)]
    fn fold_outer(
        &self,
        plan: &CompiledAggregate,
        run: &OuterRun,
        w: Window,
        groups: &mut OuterGroups,
        rows: &RecordBatch,
        sign: i64,
        before: &mut Option<FxHashMap<Box<[u8]>, Option<OuterGroup>>>,
    ) -> Result<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let view = &self.view;
        let keys = plan
            .keys
            .iter()
            .map(|k| {
                k.evaluate(rows)
                    .and_then(|c| c.into_array(n))
                    .map(|a| canonical_array(&a))
                    .map_err(|e| Error::eval(view, e))
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let keys = run.conv.convert_columns(&keys)?;
        let fed = plan
            .aggs
            .iter()
            .map(|a| {
                let arg = a
                    .arg
                    .evaluate(rows)
                    .and_then(|c| c.into_array(n))
                    .map_err(|e| Error::eval(view, e))?;
                let only = match &a.filter {
                    Some(f) => Some(true_rows(view, "FILTER", f.as_ref(), rows)?),
                    None => None,
                };
                let valid = NullBuffer::union(arg.logical_nulls().as_ref(), only.as_ref());
                let values = match a.kind {
                    AggKind::Count => None,
                    _ => Some(int_values(view, &a.input_type, &arg)?),
                };
                Ok(Fed { valid, values })
            })
            .collect::<Result<Vec<Fed>>>()?;
        let empty = vec![AggState::EMPTY; plan.aggs.len()];
        for (i, key) in keys.iter().enumerate() {
            let key = key.data();
            if let Some(before) = before.as_mut() {
                if !before.contains_key(key) {
                    before.insert(key.into(), groups.get(key).cloned());
                }
            }
            let g = match groups.get_mut(key) {
                Some(g) => g,
                None => groups.entry(key.into()).or_insert(OuterGroup {
                    rows: 0,
                    states: empty.clone(),
                }),
            };
            g.rows += sign;
            for ((a, f), st) in plan.aggs.iter().zip(&fed).zip(g.states.iter_mut()) {
                if f.valid.as_ref().is_some_and(|v| v.is_null(i)) {
                    continue;
                }
                let count = st.count + sign;
                let sum = match (&f.values, st.value) {
                    (None, _) => Some(i128::from(count)),
                    (Some(v), Value::Int(s)) => s.checked_add(i128::from(sign) * v[i]),
                    (Some(v), _) => Some(i128::from(sign) * v[i]),
                }
                .ok_or_else(|| Error::Overflow {
                    view: view.clone(),
                    aggregate: a.name.clone(),
                    data_type: "a 128-bit sum".into(),
                    window_start: w.start,
                    window_end: w.end,
                    value: format!("{:?} + {}", st.value, f.values.as_ref().map_or(0, |v| v[i])),
                })?;
                *st = AggState {
                    count,
                    value: if count > 0 {
                        Value::Int(sum)
                    } else {
                        Value::Null
                    },
                };
            }
        }
        Ok(())
    }

    /// The rest above the outer aggregate over window `w`'s outer `groups`.
    fn above_rows(
        &self,
        post: &super::post::PostRun,
        run: &OuterRun,
        plan: &CompiledAggregate,
        w: Window,
        groups: &[(&[u8], &OuterGroup)],
    ) -> Result<RecordBatch> {
        let schema: SchemaRef = run.table.schema();
        let parser = run.conv.parser();
        let mut cols = run
            .conv
            .convert_rows(groups.iter().map(|(k, _)| parser.parse(k)))?;
        let states: Vec<OuterRow> = groups
            .iter()
            .map(|(_, g)| OuterRow {
                window: w,
                states: &g.states,
            })
            .collect();
        for (j, a) in plan.aggs.iter().enumerate() {
            cols.push(self.column(a, &states, j)?);
        }
        let rows = RecordBatch::try_new_with_options(
            schema,
            cols,
            &RecordBatchOptions::new().with_row_count(Some(groups.len())),
        )?;
        post.eval.run_prepared(
            &run.above,
            &[run.table.as_ref()],
            vec![vec![rows]],
            Some(self.shown_window(w)),
        )
    }
}

/// An integer or decimal argument's values as `i128` (0 where NULL).
fn int_values(view: &str, input_type: &DataType, arg: &ArrayRef) -> Result<Vec<i128>> {
    let wrong = |what: &str| Error::internal(view, format!("an aggregate argument {what}"));
    Ok(match input_type {
        DataType::Decimal128(_, _) => arg
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .ok_or_else(|| wrong("of type Decimal128 is not a Decimal128 array"))?
            .values()
            .to_vec(),
        DataType::UInt64 => arg
            .as_any()
            .downcast_ref::<UInt64Array>()
            .ok_or_else(|| wrong("of type UInt64 is not a UInt64 array"))?
            .values()
            .iter()
            .map(|&v| i128::from(v))
            .collect(),
        _ => cast(arg, &DataType::Int64)?
            .as_any()
            .downcast_ref::<Int64Array>()
            .ok_or_else(|| wrong("did not cast to Int64"))?
            .values()
            .iter()
            .map(|&v| i128::from(v))
            .collect(),
    })
}
