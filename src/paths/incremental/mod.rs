//! The incremental path: a compiled aggregate plan maintained by a
//! timely/differential dataflow (`thund-dataflows`) whose timestamps are
//! event time.
//!
//! Before rows enter ([`ingest`]): WHERE, group keys and aggregate arguments
//! are evaluated on the Arrow batch with the plan's physical expressions,
//! keys are encoded with `arrow::row::RowConverter`, and the batch is
//! pre-aggregated by (window, key). After results leave ([`render`]): keys
//! are decoded, accumulators become Arrow columns shaped like the Aggregate
//! node's output, and HAVING and the select list run on that batch.
//! [`state`] is this path's checkpoint format. Values kept per value are
//! merged per group in [`distinct`]; session windows are panes chained into
//! sessions in [`session`].

mod arena;
mod distinct;
mod extremes;
mod ingest;
mod join;
mod keys;
mod outer;
mod post;
mod prune;
mod render;
mod session;
mod state;

use std::collections::BTreeMap;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};
use thund_dataflows::{AggState, Cluster, Config, Update, WindowedAggregate};

pub(crate) use join::JoinView;
use keys::Keys;

use super::changes::Shown;
use super::closed::ClosedResults;
use super::{output_schema, OnTime, RuntimeStats, StepOutput, ViewRuntime};
use crate::error::{Error, Result};
use crate::plan::CompiledAggregate;
use crate::spec::OutputMode;
use crate::state::Export;
use crate::time::EventTime;
use crate::window::late::{classify_time, Refusals};
use crate::window::Window;

/// Open `(window, key id)` states, by window and key.
type OpenStates = BTreeMap<(Window, u64), Vec<AggState>>;

/// Open states as dataflow updates (to render or export them).
fn updates_of(states: &OpenStates) -> Vec<Update> {
    states
        .iter()
        .map(|((w, k), a)| Update {
            window: *w,
            key: *k,
            aggs: a.clone(),
        })
        .collect()
}

/// The most rows one evaluation makes of counted rows (a join pair, a
/// top-rows candidate, each repeated as many times as it counts): beyond it
/// the evaluation is refused with [`Error::Unsupported`] rather than
/// exhausting memory. Counts that large come from a window with that many
/// identical rows, or from a checkpoint this engine did not write.
pub(crate) const MAX_COPIES: u64 = 1 << 28;

/// How many rows `counts` make when each counted row is repeated as many
/// times as it counts (negative counts as none), or the error saying `what`
/// would be more than [`MAX_COPIES`].
fn copies(view: &str, what: &str, counts: impl IntoIterator<Item = i64>) -> Result<usize> {
    let mut total: u64 = 0;
    for c in counts {
        total = total.saturating_add(c.max(0) as u64);
        if total > MAX_COPIES {
            return Err(Error::Unsupported {
                view: view.to_string(),
                message: format!(
                    "{what} would be more than {MAX_COPIES} rows in one evaluation \
                     (rows repeated by their counts); Þund does not materialise that many at once"
                ),
            });
        }
    }
    Ok(total as usize)
}

/// The encoder of a plan's group keys (`None` for a global aggregate).
fn key_converter(plan: &CompiledAggregate) -> Result<Option<RowConverter>> {
    if plan.key_fields.is_empty() {
        return Ok(None);
    }
    let fields = plan
        .key_fields
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(Some(RowConverter::new(fields)?))
}

/// Which aggregates fold the same state: same kind, same argument, same
/// `FILTER`, same entries, both kept per value or neither (`SUM(v)` and `AVG(v)` both keep `(count, sum)` of `v`). The host folds each distinct
/// state once per row and hands it to every aggregate that shares it.
struct Folds {
    /// The first aggregate of each distinct state, in plan order.
    first: Vec<usize>,
    /// By aggregate: the index in `first` of its state.
    column_of: Vec<usize>,
}

impl Folds {
    fn of(plan: &CompiledAggregate) -> Self {
        let mut first: Vec<usize> = Vec::new();
        let column_of = plan
            .aggs
            .iter()
            .enumerate()
            .map(|(j, a)| {
                let same = |&d: &usize| {
                    let b = &plan.aggs[d];
                    b.kind == a.kind
                        && b.tag == a.tag
                        && b.per_value.is_some() == a.per_value.is_some()
                        && b.arg.as_ref() == a.arg.as_ref()
                        && match (&b.filter, &a.filter) {
                            (None, None) => true,
                            (Some(x), Some(y)) => x.as_ref() == y.as_ref(),
                            _ => false,
                        }
                };
                first.iter().position(same).unwrap_or_else(|| {
                    first.push(j);
                    first.len() - 1
                })
            })
            .collect();
        Folds { first, column_of }
    }
}

/// A dataflow error of view `view` whose aggregates are `aggs`: an
/// overflow of a known aggregate names it and its SQL type, as the recompute
/// path does (`SUM(t.x) overflows Decimal128(38, 0) in window [0, 1000)`),
/// and for a pane of hopping windows (`panes`) the first window that holds
/// it.
pub(super) fn dataflow_error(
    view: &str,
    aggs: &[crate::plan::CompiledAgg],
    panes: Option<thund_dataflows::Panes>,
    e: thund_dataflows::Error,
) -> Error {
    match e {
        thund_dataflows::Error::Overflow {
            window,
            aggregate: Some(j),
            ..
        } if (j as usize) < aggs.len() => {
            let j = j as usize;
            let window = match (window, panes) {
                (Some(w), Some(p)) if p.pane_of(w.start) == w => p.windows_of(w).next(),
                (w, _) => w,
            };
            Error::Overflow {
                view: view.to_string(),
                aggregate: aggs[j].name.clone(),
                data_type: aggs[j].output_type.to_string(),
                window_start: window.map_or(EventTime::MIN, |w| w.start),
                window_end: window.map_or(EventTime::MAX, |w| w.end),
                value: "beyond 128 bits".to_string(),
            }
        }
        e => Error::dataflow(view, e),
    }
}

/// The incremental runtime of one view.
pub(crate) struct IncrementalView {
    view: String,
    plan: CompiledAggregate,
    mode: OutputMode,
    out: SchemaRef,
    /// Encodes group keys (`None` for a global aggregate).
    converter: Option<RowConverter>,
    dataflow: WindowedAggregate,
    /// The engine's worker threads, which the dataflow runs on.
    cluster: Cluster,
    config: Config,
    /// Complete mode, and a post stage in Update mode: current states of
    /// open (window, key)s (over a counted extremum, only the groups holding
    /// it: see `post::Holders`), and closed results.
    open: OpenStates,
    closed_results: ClosedResults,
    /// Open groups changed since the last checkpoint (what a delta epoch writes).
    unsaved: OpenStates,
    /// Whether a state root takes checkpoints (else nothing is tracked for them).
    checkpointing: bool,
    /// Update mode: what each open group's row last showed.
    shown: Shown,
    /// Group keys by id (the dataflow carries the ids).
    keys: Keys,
    /// The distinct states the host folds.
    folds: Folds,
    /// The host's fold buffers, kept between triggers (one per key shard).
    scratch: Vec<ingest::Groups>,
    /// `COUNT(DISTINCT …)` in Update and Complete modes: the open entries of
    /// each group (made at the first changes).
    distinct: Option<distinct::DistinctGroups>,
    /// Session windows: the open units and the sessions they chain into.
    sessions: Option<session::SessionStore>,
    /// Session windows: each key that took rows this trigger, with a time of
    /// those rows (the sessions Update mode shows).
    touched: Vec<(u64, EventTime)>,
    /// A query over one aggregate: the rest of it, per window.
    post: Option<post::PostRun>,
    /// A top-rows query: what rules rows out before the dataflow.
    pruner: Option<prune::Pruner>,
    /// How much later than its units each window the output shows ends: 0,
    /// except under a join over hopping windows, whose pairs are held in
    /// the unit of one slide at their window's start (see `join`).
    end_shift: i64,
}

impl IncrementalView {
    /// Start the dataflow for a compiled plan. A view that is never
    /// `checkpointed` runs it without a trace: nothing would read it.
    pub fn new(
        view: &str,
        plan: CompiledAggregate,
        mode: OutputMode,
        cluster: Cluster,
        checkpointed: bool,
        eval: crate::paths::sql::SqlEvaluator,
    ) -> Result<Self> {
        let converter = key_converter(&plan)?;
        let workers = cluster.workers();
        let mut kinds: Vec<_> = plan.aggs.iter().map(|a| a.kind).collect();
        if plan.keeps_refused_rows() {
            kinds.extend(session::EXTRAS);
        }
        let post = match &plan.post {
            Some(p) => Some(post::PostRun::new(view, p, eval)?),
            None => None,
        };
        let pruner = match &plan.prune {
            Some(p) => Some(prune::Pruner::new(view, p)?),
            None => None,
        };
        let sessions = plan
            .session
            .map(|gap| session::SessionStore::new(gap, kinds.clone()));
        let mut config = Config::new(kinds).with_workers(workers);
        // hopping windows: one update per pane, the dataflow derives the windows
        if plan.windows.size() != plan.windows.slide() && plan.session.is_none() {
            config = config.with_panes(plan.windows.panes());
        }
        if !checkpointed {
            config = config.without_trace();
        }
        let mut dataflow = WindowedAggregate::spawn_on(&cluster, config.clone())
            .map_err(|e| Error::dataflow(view, e))?;
        // Append mode without checkpoints reads only closed windows (sessions
        // read every unit's changes)
        dataflow.report_changes(mode != OutputMode::Append || sessions.is_some());
        let out = output_schema(&plan.query_schema, Some(&plan.bound), mode);
        let folds = Folds::of(&plan);
        let always_changes = plan.rows_always_change();
        let keys_shown = plan.keys_shown();
        Ok(IncrementalView {
            view: view.to_string(),
            plan,
            mode,
            out,
            converter,
            dataflow,
            cluster,
            config,
            open: BTreeMap::new(),
            closed_results: ClosedResults::default(),
            unsaved: BTreeMap::new(),
            checkpointing: false,
            shown: match (always_changes, keys_shown) {
                (true, _) => Shown::always_changing(),
                (false, true) => Shown::keyed(),
                (false, false) => Shown::default(),
            },
            keys: Keys::new(workers),
            folds,
            scratch: Vec::new(),
            distinct: None,
            sessions,
            touched: Vec::new(),
            post,
            pruner,
            end_shift: 0,
        })
    }

    /// Window `w` as the output shows it (see `end_shift`).
    fn shown_window(&self, w: Window) -> Window {
        Window::new(w.start, w.end.saturating_add(self.end_shift))
    }
}

impl ViewRuntime for IncrementalView {
    fn output_schema(&self) -> SchemaRef {
        self.out.clone()
    }

    fn classify(
        &self,
        _source: usize,
        batch: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
    ) -> Result<Refusals> {
        match &self.sessions {
            Some(s) => self.classify_sessions(s, batch, times, w_prev),
            None => Ok(classify_time(&self.plan.windows, times, w_prev)),
        }
    }

    /// Take in this trigger's rows, advance the dataflow to `w`, emit per the output mode.
    fn step(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput> {
        self.ingest(on_time, w_prev, w)?;
        let mut out = StepOutput::default();
        let Some(w) = w else { return Ok(out) };
        let mut step = self
            .dataflow
            .advance_to(w)
            .map_err(|e| dataflow_error(&self.view, &self.plan.aggs, self.config.panes, e))?;
        if self.checkpointing {
            match self.config.panes {
                // what the dataflow holds: pane states, until their last window closes
                Some(p) => {
                    for u in &step.changed_panes {
                        self.unsaved.insert((u.window, u.key), u.aggs.clone());
                    }
                    self.unsaved.retain(|(pane, _), _| p.expiry(*pane) > w);
                }
                None => {
                    for u in &step.changed {
                        self.unsaved.insert((u.window, u.key), u.aggs.clone());
                    }
                    for u in &step.closed {
                        self.unsaved.remove(&(u.window, u.key));
                    }
                }
            }
        }
        if self.sessions.is_some() {
            let touched = std::mem::take(&mut self.touched);
            self.step_sessions(&step, &touched, w, &mut out)?;
            self.dataflow.recycle_step(step);
            out.batches.retain(|b| b.num_rows() > 0);
            self.keys.reclaim(w);
            return Ok(out);
        }
        if let Some(p) = &mut self.pruner {
            p.evict(w);
        }
        if self.post.is_some() {
            self.step_post(&mut step, &mut out)?;
            self.dataflow.recycle_step(step);
            out.batches.retain(|b| b.num_rows() > 0);
            self.keys.reclaim(w);
            return Ok(out);
        }
        // the windows that closed (closed updates come in the order of windows)
        let mut closed_windows: Vec<Window> = step.closed.iter().map(|u| u.window).collect();
        closed_windows.dedup();
        out.windows_closed = closed_windows.len() as u64;
        // COUNT(DISTINCT …): the dataflow's entries are (group, value); a
        // group's row merges its entries (see `distinct`)
        let distinct = self.plan.keeps_per_value();
        let entries: Vec<&Update> = step.closed.iter().collect();
        let merged_closed = match distinct {
            true => self.merge_closed(&entries)?,
            false => Vec::new(),
        };
        let closed: Vec<&Update> = match distinct {
            true => merged_closed.iter().collect(),
            false => entries,
        };
        let changed: Vec<&Update> = step.changed.iter().collect();
        let merged_changed = match (distinct, self.mode) {
            (true, OutputMode::Update | OutputMode::Complete) => self.merge_changed(&changed)?,
            _ => Vec::new(),
        };
        if let Some(d) = &mut self.distinct {
            for w in &closed_windows {
                d.close(w);
            }
        }
        match self.mode {
            OutputMode::Append => out.batches.push(self.render(&closed, None)?),
            OutputMode::Update if self.plan.order.is_some() => {
                // ORDER BY … LIMIT per window: a changed window shows the top
                // of all its groups, less what it showed before
                // the step's states moved in (the ones they replace go back to the workers)
                for u in step.changed.iter_mut() {
                    let aggs = std::mem::take(&mut u.aggs);
                    if let Some(old) = self.open.insert((u.window, u.key), aggs) {
                        self.dataflow.recycle(old);
                    }
                }
                for u in &step.closed {
                    if let Some(old) = self.open.remove(&(u.window, u.key)) {
                        self.dataflow.recycle(old);
                    }
                }
                let mut windows: Vec<Window> = step.changed.iter().map(|u| u.window).collect();
                windows.dedup();
                let done = self.render(&closed, Some(true))?;
                // each changed window's open groups, rendered where they are kept
                let open: Vec<_> = windows
                    .iter()
                    .flat_map(|w| self.open.range((*w, 0)..=(*w, u64::MAX)))
                    .collect();
                let (rows, from) = self.render_indexed(&open, Some(false))?;
                let window_of: Vec<Window> = from.iter().map(|&i| open[i].0 .0).collect();
                out.batches
                    .push(self.shown.replaced(&windows, &rows, &window_of)?);
                for w in &closed_windows {
                    self.shown.close(w);
                }
                out.batches.push(done);
            }
            OutputMode::Update => {
                // the closing windows rendered first: each starts before
                // every open one (of a tumbling or hopping window), so an
                // error names the first window by start that fails, as in
                // Append and Complete modes and on the recompute path
                let done = self.render(&closed, Some(true))?;
                // only groups whose projected row changed (the rule both paths follow)
                let (changed, groups): (Vec<&Update>, Vec<(Window, u64)>) = match distinct {
                    true => merged_changed
                        .iter()
                        .map(|(u, id)| (u, (u.window, *id)))
                        .unzip(),
                    false => changed.iter().map(|u| (*u, (u.window, u.key))).unzip(),
                };
                let (rows, from) = self.render_indexed(&changed, Some(false))?;
                out.batches.push(self.shown.changed(&groups, &rows, &from)?);
                for w in &closed_windows {
                    self.shown.close(w);
                }
                out.batches.push(done);
            }
            OutputMode::Complete => {
                if !distinct {
                    for u in &step.changed {
                        self.open.insert((u.window, u.key), u.aggs.clone());
                    }
                    for u in &step.closed {
                        self.open.remove(&(u.window, u.key));
                    }
                }
                let done = self.render(&closed, None)?;
                self.closed_results.push(done);
                out.batches.extend(self.closed_results.all());
                let open = match distinct {
                    true => self.merge_open(),
                    false => updates_of(&self.open),
                };
                let refs: Vec<&Update> = open.iter().collect();
                out.batches.push(self.render(&refs, None)?);
            }
        }
        self.dataflow.recycle_step(step);
        out.batches.retain(|b| b.num_rows() > 0);
        // every window ending at or before w has closed and been rendered
        self.keys.reclaim(w);
        Ok(out)
    }

    fn enable_checkpoints(&mut self) {
        self.checkpointing = true;
        self.dataflow.report_changes(true);
    }

    fn export(&mut self, want_full: bool) -> Result<Export> {
        self.export_state(want_full)
    }

    fn import(&mut self, w: Option<EventTime>, loaded: &thund_checkpoint::Loaded) -> Result<()> {
        self.import_state(w, loaded)
    }

    fn stats(&self) -> RuntimeStats {
        let f = self.dataflow.frontier();
        RuntimeStats {
            buffered_rows: 0,
            // in Update and Complete modes the host also holds the open
            // groups' states (a post stage's groups, or a top-rows query's
            // candidates); with COUNT(DISTINCT …), the open groups' entries;
            // with sessions, the units; for top rows, the order keys its
            // pruning rule keeps
            state_records: Some(
                self.dataflow.state_size()
                    + self.open.len()
                    + self.distinct.as_ref().map_or(0, |d| d.len())
                    + self.sessions.as_ref().map_or(0, |s| s.len())
                    + self.pruner.as_ref().map_or(0, |p| p.len()),
            ),
            frontier: (f != EventTime::MIN).then_some(f),
        }
    }
}
