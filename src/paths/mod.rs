//! The two execution paths, side by side behind one trait, and what they share.
//!
//! ```text
//!                       ┌─────────────── ViewRuntime ───────────────┐
//!  on-time rows ──────► │ classify · step · export · import · stats │ ──► emitted batches
//!                       └───────────────────────────────────────────┘
//!                          │                                │
//!                 incremental/                         recompute/
//!     physical exprs → (window, key) updates       rows buffered by pane / session
//!     → thund-dataflows (event-time frontier)      → DataFusion per dirty / closing window
//!     → decode, HAVING, select list                (the oracle: any SQL)
//! ```
//!
//! Shared here: the sources a view reads ([`SourceInfo`]), the rows a
//! trigger takes in ([`OnTime`]), what a step emits ([`StepOutput`]), the
//! output schema rule ([`output_schema`]), the view's SQL planned once over
//! swappable in-memory tables ([`sql::SqlEvaluator`]) and Complete mode's
//! closed results ([`closed::ClosedResults`]). The engine drives a view only
//! through [`ViewRuntime`], and never asks which path it is.

pub(crate) mod changes;
pub(crate) mod closed;
pub(crate) mod incremental;
pub(crate) mod recompute;
pub(crate) mod sql;

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::{Error, Result};
use crate::plan::Planned;
use crate::spec::{OutputMode, ViewSpec};
use crate::state::Export;
use crate::time::{bound_column, EventTime};
use crate::window::late::Refusals;
use crate::window::Window;

/// A source as a view sees it.
#[derive(Clone, Debug)]
pub(crate) struct SourceInfo {
    pub name: String,
    pub schema: SchemaRef,
    /// Index of the event-time column.
    pub event_time: usize,
}

/// Rows of one source that passed the late check, with their event times.
pub(crate) struct OnTime {
    pub source: usize,
    pub batch: RecordBatch,
    pub times: Int64Array,
}

/// What a step emitted.
#[derive(Default)]
pub(crate) struct StepOutput {
    pub batches: Vec<RecordBatch>,
    pub windows_closed: u64,
}

/// Sizes and progress of a runtime, for reports and tests.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RuntimeStats {
    /// Rows buffered for open windows (recompute path).
    pub buffered_rows: usize,
    /// Records in dataflow arrangements (`None` on the recompute path).
    pub state_records: Option<usize>,
    /// The dataflow's output frontier (`None` on the recompute path or while −∞).
    pub frontier: Option<EventTime>,
}

/// One view's execution path. The engine classifies each pushed batch with
/// it, hands it the on-time rows at every trigger, and moves its state in and
/// out of checkpoints; each path owns both directions of its state format.
pub(crate) trait ViewRuntime: Send {
    /// The view's output schema: window bounds, the query's columns, and
    /// `final` in Update mode (see [`output_schema`]).
    fn output_schema(&self) -> SchemaRef;

    /// The rows of `batch` from source `source` (event times `times`) that
    /// are not taken in, against `w_prev`, and why; the others are.
    fn classify(
        &self,
        source: usize,
        batch: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
    ) -> Result<Refusals>;

    /// Take in this trigger's on-time rows, close every window that `w`
    /// closes, and emit per the output mode.
    fn step(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput>;

    /// Start tracking what changes between checkpoints (a state root is set).
    fn enable_checkpoints(&mut self);

    /// The state as checkpoint files: everything when `want_full`, else
    /// what changed since the last export (a path may write everything anyway
    /// and says so in [`Export::full`]).
    fn export(&mut self, want_full: bool) -> Result<Export>;

    /// Restore what [`Self::export`] wrote (merged over the epochs a
    /// manifest references) at watermark `w`.
    fn import(&mut self, w: Option<EventTime>, loaded: &thund_checkpoint::Loaded) -> Result<()>;

    /// Sizes and progress.
    fn stats(&self) -> RuntimeStats;
}

/// Build the runtime a plan chose.
pub(crate) fn build(
    view: &str,
    spec: &ViewSpec,
    planned: Planned,
    eval: sql::SqlEvaluator,
    sources: &[SourceInfo],
    cluster: Option<thund_dataflows::Cluster>,
    checkpointed: bool,
) -> Result<Box<dyn ViewRuntime>> {
    if let Some(join) = planned.join {
        let cluster = cluster.ok_or_else(|| {
            Error::internal(
                view,
                "an incremental plan needs the engine's worker threads",
            )
        })?;
        return Ok(Box::new(incremental::JoinView::new(
            view,
            join,
            spec.output,
            cluster,
            eval,
            sources,
        )?));
    }
    Ok(match (planned.compiled, cluster) {
        (Some(compiled), Some(cluster)) => Box::new(incremental::IncrementalView::new(
            view,
            compiled,
            spec.output,
            cluster,
            checkpointed,
            eval,
        )?),
        (Some(_), None) => {
            return Err(Error::internal(
                view,
                "an incremental plan needs the engine's worker threads",
            ))
        }
        (None, _) => Box::new(recompute::RecomputeView::new(
            view,
            eval,
            sources,
            spec.window.as_ref(),
            spec.output,
        )?),
    })
}

/// Prefix a query result with its window bounds and, in Update mode, the `final` flag.
pub(crate) fn with_bounds(
    out: &SchemaRef,
    window: Option<(Window, Option<&DataType>)>,
    result: &RecordBatch,
    fin: Option<bool>,
) -> Result<RecordBatch> {
    let n = result.num_rows();
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(out.fields().len());
    if let Some((w, Some(dt))) = window {
        cols.push(bound_column(w.start, dt, n));
        cols.push(bound_column(w.end, dt, n));
    }
    cols.extend(result.columns().iter().cloned());
    if let Some(fin) = fin {
        cols.push(Arc::new(BooleanArray::from(vec![fin; n])));
    }
    Ok(RecordBatch::try_new(out.clone(), cols)?)
}

/// Output schema of a view: window bounds, the query's columns, and `final` in Update mode.
pub(crate) fn output_schema(
    query: &Schema,
    bound: Option<&DataType>,
    mode: OutputMode,
) -> SchemaRef {
    let mut fields: Vec<Field> = Vec::new();
    if let Some(dt) = bound {
        fields.push(Field::new("window_start", dt.clone(), false));
        fields.push(Field::new("window_end", dt.clone(), false));
    }
    fields.extend(query.fields().iter().map(|f| f.as_ref().clone()));
    if mode == OutputMode::Update {
        fields.push(Field::new("final", DataType::Boolean, false));
    }
    Arc::new(Schema::new(fields))
}
