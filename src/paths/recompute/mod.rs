//! The recompute path: DataFusion evaluates the view's SQL per window over
//! that window's buffered, non-late rows.
//!
//! It is the always-correct path (any SQL DataFusion runs) and the oracle the
//! incremental path is tested against. Its cost follows the change: a trigger
//! evaluates only the windows it dirtied (Update, Complete) or closed
//! (Append), and the rows of closed windows are evicted. The SQL is planned
//! once per view; each evaluation swaps the window's rows into the view's
//! in-memory tables and executes that plan.
//!
//! One file per window layout: [`unwindowed`] (one result over all rows),
//! [`panes`] (tumbling and hopping windows over rows stored by pane),
//! [`session`] (per-key sessions); [`state`] is this path's checkpoint format.

mod panes;
mod session;
mod state;
mod unwindowed;

use arrow::array::{Int64Array, RecordBatch};
use arrow::datatypes::{DataType, SchemaRef};

use super::changes::{changed_rows, take_rows};
use super::closed::ClosedResults;
use super::sql::SqlEvaluator;
use super::{
    output_schema, with_bounds, OnTime, RuntimeStats, SourceInfo, StepOutput, ViewRuntime,
};
use crate::error::Result;
use crate::spec::{OutputMode, WindowKind, WindowSpec};
use crate::state::Export;
use crate::time::{bound_type, EventTime};
use crate::window::late::Refusals;
use crate::window::{TimeWindows, Window};

/// How a view's rows are buffered, by its window kind.
enum Layout {
    /// No window: all rows, one result.
    All(unwindowed::Unwindowed),
    /// Tumbling or hopping windows; rows by pane.
    Time(panes::PaneWindows),
    /// Per-key sessions.
    Session(session::Sessions),
}

/// What every layout needs to evaluate windows and emit their rows.
struct Emitter<'a> {
    eval: &'a SqlEvaluator,
    out: &'a SchemaRef,
    mode: OutputMode,
    bound: Option<&'a DataType>,
    closed: &'a mut ClosedResults,
}

impl Emitter<'_> {
    /// A window's (or the whole view's) rows in the output schema, with the
    /// `final` flag in Update mode when `fin` is given.
    fn rows(
        &self,
        win: Option<Window>,
        result: &RecordBatch,
        fin: Option<bool>,
    ) -> Result<RecordBatch> {
        with_bounds(self.out, win.map(|w| (w, self.bound)), result, fin)
    }

    /// An open window's changed rows (Update mode).
    fn provisional(
        &self,
        out: &mut StepOutput,
        win: Window,
        old: Option<&RecordBatch>,
        new: &RecordBatch,
    ) -> Result<()> {
        let emit = changed_rows(old, new)?;
        if emit.num_rows() > 0 {
            out.batches.push(self.rows(Some(win), &emit, Some(false))?);
        }
        Ok(())
    }

    /// A window that closed with `result`: emitted (Append, Update) or kept
    /// for every later trigger (Complete).
    fn close(&mut self, out: &mut StepOutput, win: Window, result: &RecordBatch) -> Result<()> {
        out.windows_closed += 1;
        let fin = (self.mode == OutputMode::Update).then_some(true);
        let b = self.rows(Some(win), result, fin)?;
        if self.mode == OutputMode::Complete {
            self.closed.push(b);
        } else if b.num_rows() > 0 {
            out.batches.push(b);
        }
        Ok(())
    }
}

/// The recompute runtime of one view.
pub(crate) struct RecomputeView {
    eval: SqlEvaluator,
    out: SchemaRef,
    mode: OutputMode,
    bound: Option<DataType>,
    sources: Vec<SourceInfo>,
    layout: Layout,
    /// Complete mode: every closed window's final rows, kept for re-emission.
    closed_results: ClosedResults,
    /// Rows taken in since the last checkpoint: (source, rows, W from which
    /// no open window needs them).
    unsaved: Vec<(usize, RecordBatch, EventTime)>,
    /// Whether a state root takes checkpoints (else nothing is tracked for them).
    checkpointing: bool,
}

impl RecomputeView {
    pub fn new(
        view: &str,
        eval: SqlEvaluator,
        sources: &[SourceInfo],
        window: Option<&WindowSpec>,
        mode: OutputMode,
    ) -> Result<Self> {
        let bound =
            window.map(|_| bound_type(sources[0].schema.field(sources[0].event_time).data_type()));
        let out = output_schema(&eval.out_schema, bound.as_ref(), mode);
        let layout = match window.map(|w| &w.kind) {
            None => Layout::All(unwindowed::Unwindowed::new(sources.len())),
            Some(WindowKind::Session { gap, key }) => {
                Layout::Session(session::Sessions::new(view, &sources[0], *gap, key)?)
            }
            Some(_) => {
                let windows = window.and_then(TimeWindows::from_spec).ok_or_else(|| {
                    crate::error::Error::internal(view, "a time window without size")
                })?;
                Layout::Time(panes::PaneWindows::new(windows))
            }
        };
        Ok(RecomputeView {
            eval,
            out,
            mode,
            bound,
            sources: sources.to_vec(),
            layout,
            closed_results: ClosedResults::default(),
            unsaved: Vec::new(),
            checkpointing: false,
        })
    }

    /// Take rows in, into the buffers of their panes, sessions or the whole view.
    fn insert(&mut self, on_time: Vec<OnTime>, w_prev: Option<EventTime>) -> Result<()> {
        let n = self.sources.len();
        match &mut self.layout {
            Layout::All(a) => a.insert(on_time),
            Layout::Time(t) => t.insert(on_time, w_prev, n),
            Layout::Session(s) => s.insert(on_time),
        }
    }
}

impl ViewRuntime for RecomputeView {
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
        Ok(match &self.layout {
            Layout::All(_) => unwindowed::classify(times, w_prev),
            Layout::Time(t) => crate::window::late::classify_time(t.windows(), times, w_prev),
            Layout::Session(s) => s.classify(batch, times, w_prev)?,
        })
    }

    fn step(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput> {
        if self.checkpointing {
            for o in &on_time {
                let expiry = match &self.layout {
                    Layout::Time(t) => t.expiry(&o.times),
                    _ => EventTime::MAX,
                };
                self.unsaved.push((o.source, o.batch.clone(), expiry));
            }
        }
        self.insert(on_time, w_prev)?;
        // rows no open window needs any more need no checkpoint either
        self.unsaved
            .retain(|(_, _, exp)| w.is_none_or(|w| *exp > w));
        let mut emit = Emitter {
            eval: &self.eval,
            out: &self.out,
            mode: self.mode,
            bound: self.bound.as_ref(),
            closed: &mut self.closed_results,
        };
        let n = self.sources.len();
        let mut out = match &mut self.layout {
            Layout::All(a) => a.step(&mut emit, w == Some(EventTime::MAX))?,
            Layout::Time(t) => t.step(&mut emit, w, n)?,
            Layout::Session(s) => s.step(&mut emit, w)?,
        };
        out.batches.retain(|b| b.num_rows() > 0);
        Ok(out)
    }

    fn enable_checkpoints(&mut self) {
        self.checkpointing = true;
    }

    fn export(&mut self, want_full: bool) -> Result<Export> {
        state::export(self, want_full)
    }

    fn import(&mut self, w: Option<EventTime>, loaded: &thund_checkpoint::Loaded) -> Result<()> {
        state::import(self, w, loaded)
    }

    fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            buffered_rows: match &self.layout {
                Layout::All(a) => a.buffered_rows(),
                Layout::Time(t) => t.buffered_rows(),
                Layout::Session(s) => s.buffered_rows(),
            },
            state_records: None,
            frontier: None,
        }
    }
}

/// Group row indices by a function of their (non-null) event time.
fn group_by(
    times: &Int64Array,
    f: impl Fn(EventTime) -> EventTime,
) -> std::collections::BTreeMap<EventTime, Vec<u32>> {
    let mut m: std::collections::BTreeMap<EventTime, Vec<u32>> = Default::default();
    for (i, t) in times.iter().enumerate() {
        if let Some(t) = t {
            m.entry(f(t)).or_default().push(i as u32);
        }
    }
    m
}
