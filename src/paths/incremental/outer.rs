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

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::row::{RowConverter, Rows, SortField};
use datafusion::datasource::TableProvider;
use rustc_hash::{FxHashMap, FxHashSet};
use thund_dataflows::{AggKind, AggState, Update, Value};

use super::ingest::true_rows;
use super::render::GroupStates;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::changes::changed_rows;
use crate::paths::sql::checked::canonical_array;
use crate::plan::OuterPlan;
use crate::window::Window;

/// One window's outer groups, by their key's row-format bytes.
type OuterGroups = FxHashMap<Box<[u8]>, OuterGroup>;

/// What one inner group's row below adds to its outer group: the outer
/// group's key, and per aggregate the value it folds (`None`: it feeds
/// that aggregate nothing; a `COUNT` folds 1).
struct Contribution {
    key: Box<[u8]>,
    values: Vec<Option<i128>>,
}

/// The contributions of some inner groups, read from their rows below:
/// `inner[i]`'s is the outer key `keys.row(i)` and each argument's value at
/// `i` (built into a [`Contribution`] only where it is kept).
#[derive(Default)]
struct Fresh {
    inner: Vec<u64>,
    keys: Option<Rows>,
    args: Vec<super::ingest::Arg>,
}

impl Fresh {
    fn value(arg: &super::ingest::Arg, i: usize) -> Option<i128> {
        match arg.nulls() {
            Some(v) if v.is_null(i) => None,
            _ => arg.int_at(i),
        }
    }

    fn key(&self, i: usize) -> &[u8] {
        self.keys.as_ref().map_or(&[], |k| k.row(i).data())
    }

    /// Whether row `i` adds what `c` adds.
    fn is(&self, i: usize, c: &Contribution) -> bool {
        *c.key == *self.key(i)
            && c.values.len() == self.args.len()
            && self
                .args
                .iter()
                .zip(&c.values)
                .all(|(a, v)| Fresh::value(a, i) == *v)
    }

    fn build(&self, i: usize) -> Contribution {
        Contribution {
            key: self.key(i).into(),
            values: self.args.iter().map(|a| Fresh::value(a, i)).collect(),
        }
    }
}

/// The outer aggregate of a post stage, as Update mode keeps it.
pub(super) struct OuterRun {
    /// The encoder of the outer group keys.
    conv: RowConverter,
    /// Each open window's outer groups and what each inner group adds to
    /// them (a window that has not changed since it opened, or since a
    /// restore, has none yet).
    windows: FxHashMap<Window, OuterWindow>,
}

#[derive(Default)]
struct OuterWindow {
    groups: OuterGroups,
    /// By inner group key id: its row's contribution (none where the part
    /// below gives the group no row, or the group does not show).
    of: FxHashMap<u64, Contribution>,
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
    pub fn new(view: &str, plan: &OuterPlan) -> Result<Self> {
        let fields = plan.aggregate.key_fields[..plan.aggregate.group_keys]
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(OuterRun {
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
        let plan = self.outer_plan()?;
        let mut out = Vec::new();
        for ups in changed.chunk_by(|a, b| a.window == b.window) {
            let w = ups[0].window;
            if closing.contains(&w) {
                // its close shows it whole
                continue;
            }
            let mut win = match run.windows.remove(&w) {
                Some(win) => win,
                None => {
                    let mut win = OuterWindow::default();
                    let open = super::post::open_groups(&self.open, w);
                    let fresh = self.contributions(post, run, plan, &open)?;
                    for i in 0..fresh.inner.len() {
                        let c = fresh.build(i);
                        self.add(plan, w, &mut win.groups, &c, 1, None)?;
                        win.of.insert(fresh.inner[i], c);
                    }
                    win
                }
            };
            let refs: Vec<&Update> = ups.iter().collect();
            let fresh = self.contributions(post, run, plan, &refs)?;
            // an inner group whose row below adds what it added before moves
            // nothing (a MAX that stayed, its count grown), and is not built
            let (same, moved): (Vec<usize>, Vec<usize>) = (0..fresh.inner.len())
                .partition(|&i| win.of.get(&fresh.inner[i]).is_some_and(|c| fresh.is(i, c)));
            let same: FxHashSet<u64> = same.into_iter().map(|i| fresh.inner[i]).collect();
            let mut before = FxHashMap::default();
            for u in ups.iter().filter(|u| !same.contains(&u.key)) {
                if let Some(c) = win.of.remove(&u.key) {
                    self.add(plan, w, &mut win.groups, &c, -1, Some(&mut before))?;
                }
            }
            for i in moved {
                let c = fresh.build(i);
                self.add(plan, w, &mut win.groups, &c, 1, Some(&mut before))?;
                win.of.insert(fresh.inner[i], c);
            }
            win.groups.retain(|_, g| g.rows > 0);
            let was: Vec<(&[u8], &OuterGroup)> = before
                .iter()
                .filter_map(|(k, g)| g.as_ref().map(|g| (k.as_ref(), g)))
                .filter(|(_, g)| g.rows > 0)
                .collect();
            let is: Vec<(&[u8], &OuterGroup)> = before
                .keys()
                .filter_map(|k| win.groups.get_key_value(k).map(|(k, g)| (k.as_ref(), g)))
                .collect();
            let was = self.above_rows(post, run, plan, w, &was)?;
            let is = self.above_rows(post, run, plan, w, &is)?;
            out.push((w, changed_rows(Some(&was), &is)?));
            run.windows.insert(w, win);
        }
        Ok(out)
    }

    /// What the rows below of window `w`'s `groups` (those shown) add to
    /// the outer groups, by inner group key id (read, not yet built).
    fn contributions<G: GroupStates>(
        &self,
        post: &super::post::PostRun,
        run: &OuterRun,
        plan: &OuterPlan,
        groups: &[G],
    ) -> Result<Fresh> {
        let view = &self.view;
        let shown = self.shown(groups);
        let table = self.groups_table(post, &shown)?;
        if table.num_rows() == 0 {
            return Ok(Fresh::default());
        }
        let (rows, from) = plan.below.run(table).map_err(|e| Error::eval(view, e))?;
        let n = rows.num_rows();
        let agg = &plan.aggregate;
        let keys = agg
            .keys
            .iter()
            .map(|k| {
                k.evaluate(&rows)
                    .and_then(|c| c.into_array(n))
                    .map(|a| canonical_array(&a))
                    .map_err(|e| Error::eval(view, e))
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let keys = run.conv.convert_columns(&keys)?;
        // each argument typed as ingest types it, a FILTER's other rows null to it
        let args = agg
            .aggs
            .iter()
            .map(|a| {
                let arg = a
                    .arg
                    .evaluate(&rows)
                    .and_then(|c| c.into_array(n))
                    .map_err(|e| Error::eval(view, e))?;
                let only = match &a.filter {
                    Some(f) => Some(true_rows(view, "FILTER", f.as_ref(), &rows, None)?),
                    None => None,
                };
                self.arg(a, arg, only)
            })
            .collect::<Result<Vec<_>>>()?;
        let inner = from.iter().map(|&f| shown[f as usize].key()).collect();
        Ok(Fresh {
            inner,
            keys: Some(keys),
            args,
        })
    }

    /// The rest above the outer aggregate over window `w`'s outer `groups`.
    fn above_rows(
        &self,
        post: &super::post::PostRun,
        run: &OuterRun,
        plan: &OuterPlan,
        w: Window,
        groups: &[(&[u8], &OuterGroup)],
    ) -> Result<RecordBatch> {
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
        for (j, a) in plan.aggregate.aggs.iter().enumerate() {
            cols.push(self.column(a, &states, j)?);
        }
        let rows = RecordBatch::try_new_with_options(
            plan.table.schema(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(groups.len())),
        )?;
        let (rows, _) = plan
            .above
            .run(rows)
            .map_err(|e| Error::eval(&self.view, e))?;
        post.eval.as_output(&rows)
    }

    /// Fold contribution `c` into its outer group of window `w`'s `groups` with
    /// `sign` (1: it enters, -1: it leaves); with `before`, the outer group's
    /// state before its first change is put there (`None`: it did not exist).
    fn add(
        &self,
        plan: &OuterPlan,
        w: Window,
        groups: &mut OuterGroups,
        c: &Contribution,
        sign: i64,
        before: Option<&mut FxHashMap<Box<[u8]>, Option<OuterGroup>>>,
    ) -> Result<()> {
        let agg = &plan.aggregate;
        if let Some(before) = before {
            if !before.contains_key(&c.key) {
                before.insert(c.key.clone(), groups.get(&c.key).cloned());
            }
        }
        let g = match groups.get_mut(&c.key) {
            Some(g) => g,
            None => groups.entry(c.key.clone()).or_insert(OuterGroup {
                rows: 0,
                states: vec![AggState::EMPTY; agg.aggs.len()],
            }),
        };
        g.rows += sign;
        for ((a, v), st) in agg.aggs.iter().zip(&c.values).zip(g.states.iter_mut()) {
            let Some(v) = *v else { continue };
            let count = st.count + sign;
            let v = if sign < 0 { v.checked_neg() } else { Some(v) };
            let sum = match (a.kind, st.value, v) {
                (AggKind::Count, _, _) => Some(i128::from(count)),
                (_, Value::Int(s), Some(v)) => s.checked_add(v),
                (_, _, v) => v,
            };
            let sum = sum.ok_or_else(|| Error::Overflow {
                view: self.view.clone(),
                aggregate: a.name.clone(),
                data_type: a.output_type.to_string(),
                window_start: w.start,
                window_end: w.end,
                value: "beyond a 128-bit sum".into(),
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
        Ok(())
    }
}
