//! The engine: views, pushes, triggers, reports.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::compute::filter_record_batch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::incremental::IncrementalView;
use crate::plan::{PathKind, ViewPlan};
use crate::recompute::{OnTime, RecomputeView, Refusal, SourceInfo, SqlEvaluator};
use crate::sidecar::{fingerprint, CheckpointOutcome, Sidecar};
use crate::spec::ViewSpec;
use crate::time::{bound_type, display, is_event_time_type, to_millis, EventTime};
use crate::watermark::{Clock, SystemClock, WatermarkTracker};
use crate::watermark::{SourceWatermark, WatermarkSnapshot};
use std::collections::BTreeMap;
use thund_checkpoint::{BlockingCheckpointStore, Counters, EpochMeta, SourceState, Takeover};

/// Builds an [`Engine`].
#[derive(Debug, Default)]
pub struct EngineBuilder {
    clock: Option<Arc<dyn Clock>>,
    workers: Option<usize>,
    state_root: Option<String>,
    retain: Option<usize>,
    compact_every: Option<usize>,
}

impl EngineBuilder {
    /// Processing-time clock for idle timeouts (default: the system clock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Number of timely worker threads per incremental view (default 1);
    /// data is exchanged between them by key, and results do not depend on it.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n.max(1));
        self
    }

    /// Checkpoint to, and resume from, a state root: `file:///abs/path` or
    /// `memory://name` (`s3://` with the `s3` feature of `thund-checkpoint`).
    /// Each view takes a writer lease there; a second engine on the same
    /// root and view is refused.
    pub fn with_state_root(mut self, url: &str) -> Self {
        self.state_root = Some(url.to_string());
        self
    }

    /// Write a full checkpoint every `n` epochs (default 10); the epochs in
    /// between write only what changed and reference older files. `1`
    /// makes every checkpoint full.
    pub fn checkpoint_compaction(mut self, n: usize) -> Self {
        self.compact_every = Some(n.max(1));
        self
    }

    /// Committed epochs kept per view (default 2, at least 1).
    pub fn retain_epochs(mut self, n: usize) -> Self {
        self.retain = Some(n.max(1));
        self
    }

    /// Build the engine.
    pub fn build(self) -> Result<Engine> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::exec("<engine>", format!("cannot start the runtime: {e}")))?;
        let (store, sidecar) = match &self.state_root {
            None => (None, None),
            Some(url) => {
                let mut store = BlockingCheckpointStore::open(url)
                    .map_err(|e| Error::Checkpoint(format!("state root {url}: {e}")))?;
                if let Some(n) = self.retain {
                    store = store.with_retention(n);
                }
                (Some(store), Some(Sidecar::start()?))
            }
        };
        Ok(Engine {
            store,
            compact_every: self.compact_every.unwrap_or(10),
            sidecar,
            offsets: BTreeMap::new(),
            pending_offsets: BTreeMap::new(),
            views: Vec::new(),
            epoch: 0,
            clock: self.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            rt: Arc::new(rt),
            finished: false,
            workers: self.workers.unwrap_or(1),
        })
    }
}

/// Cumulative counters of one view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ViewCounters {
    /// Rows pushed to the view's sources and taken in at a trigger.
    pub rows: u64,
    /// Rows dropped as late.
    pub late_rows_dropped: u64,
    /// Rows refused for a NULL event time.
    pub invalid_rows: u64,
    /// Windows closed.
    pub windows_closed: u64,
}

/// What one trigger did for one view.
#[derive(Clone, Debug)]
pub struct ViewReport {
    /// The view.
    pub view: String,
    /// W before this trigger (`None` = −∞): rows were classified against it.
    pub previous_watermark: Option<EventTime>,
    /// W after this trigger: every window ending at or before it is final.
    pub watermark: Option<EventTime>,
    /// The dataflow's output frontier after this trigger (incremental path;
    /// `None` on the recompute path or while it is −∞). It equals `watermark`.
    pub frontier: Option<EventTime>,
    /// Rows taken in by this trigger (on time, late and invalid).
    pub rows: u64,
    /// Rows dropped as late by this trigger.
    pub late_rows_dropped: u64,
    /// Rows refused for a NULL event time by this trigger.
    pub invalid_rows: u64,
    /// Windows closed by this trigger.
    pub windows_closed: u64,
    /// The emitted rows (see the view's output schema).
    pub output: Vec<RecordBatch>,
    /// Set on the first trigger after a resume: what was restored.
    pub recovery: Option<Recovery>,
    /// Which path ran.
    pub path: PathKind,
    /// Why that path.
    pub reason: String,
    /// Time this view's part of the trigger took.
    pub latency: Duration,
}

impl ViewReport {
    /// Number of emitted rows.
    pub fn output_rows(&self) -> usize {
        self.output.iter().map(|b| b.num_rows()).sum()
    }
}

/// What one trigger (one epoch) did.
#[derive(Clone, Debug)]
pub struct TriggerReport {
    /// The epoch this trigger was (1 for the first).
    pub epoch: u64,
    /// Per view, in creation order.
    pub views: Vec<ViewReport>,
    /// Time the whole trigger took.
    pub latency: Duration,
    /// Checkpoints the sidecar committed (or failed) since the last report.
    pub checkpoints: Vec<CheckpointOutcome>,
}

impl TriggerReport {
    /// The report of one view.
    pub fn view(&self, name: &str) -> Option<&ViewReport> {
        self.views.iter().find(|v| v.view == name)
    }

    /// One JSON object per view, in the shape of `thund run --report`.
    pub fn to_json_lines(&self) -> Vec<serde_json::Value> {
        self.views
            .iter()
            .map(|v| {
                serde_json::json!({
                    "epoch": self.epoch,
                    "view": v.view,
                    "watermark": v.watermark,
                    "watermark_text": display(v.watermark),
                    "frontier": v.frontier,
                    "previous_watermark": v.previous_watermark,
                    "rows": v.rows,
                    "late_rows_dropped": v.late_rows_dropped,
                    "invalid_rows": v.invalid_rows,
                    "windows_closed": v.windows_closed,
                    "output_rows": v.output_rows(),
                    "path": v.path,
                    "reason": v.reason,
                    "latency_us": v.latency.as_micros() as u64,
                })
            })
            .collect()
    }
}

/// A row that was not taken in: late or without event time.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LateRow {
    source: String,
    event_time: Option<EventTime>,
    window: Option<crate::window::Window>,
    watermark: Option<EventTime>,
    reason: &'static str,
    epoch: u64,
}

enum ViewRuntime {
    Recompute(Box<RecomputeView>),
    Incremental(Box<IncrementalView>),
}

impl ViewRuntime {
    fn schema(&self) -> SchemaRef {
        match self {
            ViewRuntime::Recompute(r) => r.schema(),
            ViewRuntime::Incremental(r) => r.schema(),
        }
    }

    fn evaluator(&self) -> &SqlEvaluator {
        match self {
            ViewRuntime::Recompute(r) => r.evaluator(),
            ViewRuntime::Incremental(r) => r.evaluator(),
        }
    }
}

struct View {
    spec: ViewSpec,
    plan: ViewPlan,
    sources: Vec<SourceInfo>,
    tracker: WatermarkTracker,
    runtime: ViewRuntime,
    pending: Vec<Vec<RecordBatch>>,
    late: Vec<LateRow>,
    counters: ViewCounters,
    fingerprint: String,
    recovery: Option<Recovery>,
    recovery_reported: bool,
    /// Checkpoints since the last full one (0: the next one is full).
    since_full: usize,
    /// What the state root said at start besides a resume (see [`Engine::warnings`]).
    warnings: Vec<String>,
}

/// What a view resumed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Recovery {
    /// The checkpoint epoch resumed.
    pub epoch: u64,
    /// W restored.
    pub watermark: Option<EventTime>,
    /// Newer epochs passed over, with why (non-empty = a loud fall-back).
    pub fell_back_from: Vec<String>,
    /// Oddities the store noticed (ignored uncommitted epochs, …).
    pub warnings: Vec<String>,
    /// The caller's data stored with the epoch (see [`Engine::checkpoint`]).
    pub extra: serde_json::Value,
}

/// Þund's engine: holds views, takes Arrow batches, and at each trigger
/// emits what the watermark made final.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
/// use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
/// use thund::{Engine, ViewSpec, WindowSpec};
///
/// let schema = Arc::new(Schema::new(vec![
///     Field::new("auction", DataType::Int64, false),
///     Field::new("price", DataType::Int64, false),
///     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), false),
/// ]));
/// let mut engine = Engine::builder().build()?;
/// engine.create_view(
///     ViewSpec::builder("top", "SELECT auction, MAX(price) AS top FROM bids GROUP BY auction")
///         .source("bids", "ts", schema.clone())
///         .window(WindowSpec::tumbling(Duration::from_secs(10)))
///         .build()?,
/// )?;
/// let batch = RecordBatch::try_new(schema, vec![
///     Arc::new(Int64Array::from(vec![1, 1, 2])),
///     Arc::new(Int64Array::from(vec![5, 9, 7])),
///     Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_000, 12_000])),
/// ])?;
/// engine.push("bids", batch)?;
/// let report = engine.trigger()?; // W = 12s: the window [0s, 10s) closes
/// assert_eq!(report.view("top").unwrap().output_rows(), 1);
/// let last = engine.finish()?;    // W = +inf: [10s, 20s) closes too
/// assert_eq!(last.view("top").unwrap().output_rows(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Engine {
    store: Option<BlockingCheckpointStore>,
    compact_every: usize,
    sidecar: Option<Sidecar>,
    /// Per source, the caller's offset after the last batch a trigger took in.
    offsets: BTreeMap<String, u64>,
    pending_offsets: BTreeMap<String, u64>,
    views: Vec<View>,
    epoch: u64,
    clock: Arc<dyn Clock>,
    rt: Arc<tokio::runtime::Runtime>,
    finished: bool,
    workers: usize,
}

impl Engine {
    /// Start building an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Declare a view. Every check happens here: names, durations, the
    /// event-time column and its type, the SQL (parse, tables, columns).
    pub fn create_view(&mut self, spec: ViewSpec) -> Result<()> {
        spec.validate()?;
        let name = spec.name.clone();
        if self.views.iter().any(|v| v.spec.name == name) {
            return Err(Error::DuplicateView(name));
        }
        let mut sources = Vec::new();
        for s in &spec.sources {
            let schema = s.schema.clone().ok_or_else(|| {
                Error::spec(
                    &name,
                    format!("source `{}` has no schema (give one, or let the CLI infer it from the input)", s.name),
                )
            })?;
            let idx = schema.index_of(&s.event_time).map_err(|_| {
                Error::spec(
                    &name,
                    format!(
                        "event-time column `{}` is not in source `{}` (columns: {})",
                        s.event_time,
                        s.name,
                        schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
            let dt = schema.field(idx).data_type();
            if !is_event_time_type(dt) {
                return Err(Error::spec(
                    &name,
                    format!(
                        "event-time column `{}` of source `{}` has type {dt}; it must be a timestamp, a date or an integer of milliseconds",
                        s.event_time, s.name
                    ),
                ));
            }
            // a source read by several views must have one schema
            for v in &self.views {
                if let Some(o) = v.sources.iter().find(|o| o.name == s.name) {
                    if o.schema.fields() != schema.fields() {
                        return Err(Error::spec(
                            &name,
                            format!(
                                "source `{}` is declared by view `{}` with another schema",
                                s.name, v.spec.name
                            ),
                        ));
                    }
                }
            }
            sources.push(SourceInfo {
                name: s.name.clone(),
                schema,
                event_time: idx,
            });
        }
        let eval = SqlEvaluator::new(&name, &spec.sql, &sources, self.rt.clone())?;
        let bound = spec
            .window
            .as_ref()
            .map(|_| bound_type(sources[0].schema.field(sources[0].event_time).data_type()));
        let plan = ViewPlan::decide(&spec, eval.logical_plan());
        let runtime = match (&plan, spec.window.as_ref(), &bound) {
            (ViewPlan::Incremental(_), Some(w), Some(b)) => {
                let windows = crate::window::TimeWindows::from_spec(w).ok_or_else(|| {
                    Error::spec(
                        &name,
                        "the incremental path takes tumbling or hopping windows",
                    )
                })?;
                ViewRuntime::Incremental(Box::new(IncrementalView::new(
                    &name,
                    eval,
                    windows,
                    spec.output,
                    b.clone(),
                    self.workers,
                )?))
            }
            _ => ViewRuntime::Recompute(Box::new(RecomputeView::new(
                &name,
                eval,
                &sources,
                spec.window.as_ref(),
                spec.output,
                bound,
            )?)),
        };
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        let tracker = WatermarkTracker::new(
            &names,
            spec.watermark.allowed_lateness,
            spec.watermark.idle_timeout,
            self.clock.now_ms(),
        );
        let fingerprint = fingerprint(&format!(
            "v1|{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}",
            spec.name,
            spec.sql,
            sources
                .iter()
                .map(|s| (
                    s.name.as_str(),
                    s.event_time,
                    s.schema
                        .fields()
                        .iter()
                        .map(|f| format!("{}:{}:{}", f.name(), f.data_type(), f.is_nullable()))
                        .collect::<Vec<_>>()
                ))
                .collect::<Vec<_>>(),
            spec.window,
            spec.watermark,
            spec.output,
            plan,
        )); // not the worker count: state is re-partitioned on load
        let mut view = View {
            pending: vec![Vec::new(); sources.len()],
            spec,
            plan,
            sources,
            tracker,
            runtime,
            late: Vec::new(),
            counters: ViewCounters::default(),
            fingerprint,
            recovery: None,
            recovery_reported: false,
            since_full: 0,
            warnings: Vec::new(),
        };
        if let (Some(store), Some(sidecar)) = (&self.store, &mut self.sidecar) {
            match &mut view.runtime {
                ViewRuntime::Recompute(r) => r.enable_checkpoints(),
                ViewRuntime::Incremental(r) => r.enable_checkpoints(),
            }
            // fence first: a second writer must not even read a state it could corrupt
            let writer = store
                .acquire_with(&name, Takeover::IfStale)
                .map_err(|e| Error::Checkpoint(format!("view `{name}`: {e}")))?;
            let loaded = store
                .load_expecting(&name, &view.fingerprint)
                .map_err(|e| Error::Checkpoint(format!("view `{name}`: {e}")));
            let loaded = match loaded {
                Ok(l) => l,
                Err(e) => {
                    let _ = writer.release();
                    return Err(e);
                }
            };
            if loaded.is_none() {
                // a cold start is never silent: say which crashed first epochs it passed over
                if let Ok(thund_checkpoint::decision::ResumeDecision::ColdStart {
                    ignored_uncommitted,
                }) = store.decide(&name)
                {
                    if !ignored_uncommitted.is_empty() {
                        view.warnings.push(format!(
                            "cold start: ignored epochs {ignored_uncommitted:?}, written by a first checkpoint that crashed before its commit"
                        ));
                    }
                }
            }
            if let Some(l) = loaded {
                if let Err(e) = view.restore(&l, self.clock.now_ms()) {
                    let _ = writer.release();
                    return Err(e);
                }
                for s in &l.manifest.sources {
                    if let Some(o) = s.offset {
                        self.offsets.entry(s.name.clone()).or_insert(o);
                    }
                }
                self.epoch = self.epoch.max(l.manifest.epoch);
            }
            sidecar.register(writer)?;
        }
        self.views.push(view);
        Ok(())
    }

    /// Like [`Self::push`], recording the caller's position in `source`
    /// after this batch (rows, bytes, a log offset: the caller's unit). A
    /// checkpoint stores the offset of the last batch a trigger took in; after
    /// a resume, [`Self::source_offset`] says where to replay from.
    pub fn push_at(&mut self, source: &str, batch: RecordBatch, offset: u64) -> Result<()> {
        self.push(source, batch)?;
        self.pending_offsets.insert(source.to_string(), offset);
        Ok(())
    }

    /// Where to resume `source` from: the offset of the last batch taken in
    /// by a trigger (restored from a checkpoint, or since), if any.
    pub fn source_offset(&self, source: &str) -> Option<u64> {
        self.offsets.get(source).copied()
    }

    /// What opening the state root for a view noticed that is not a resume:
    /// for instance a cold start that passed over epochs a crashed first
    /// checkpoint left behind uncommitted.
    pub fn warnings(&self, view: &str) -> Result<&[String]> {
        Ok(&self.view(view)?.warnings)
    }

    /// What a view resumed from, if it resumed.
    pub fn recovery(&self, view: &str) -> Result<Option<&Recovery>> {
        Ok(self.view(view)?.recovery.as_ref())
    }

    /// Capture every view's state at the current epoch and hand it to the
    /// sidecar, which writes it in the background (`extra` is stored in the
    /// manifest and given back by [`Self::recovery`]). The next checkpoint
    /// waits while this one is still queued. Outcomes arrive in later
    /// trigger reports, or from [`Self::sync_checkpoints`].
    pub fn checkpoint(&mut self, extra: serde_json::Value) -> Result<()> {
        let Some(sidecar) = self.sidecar.as_mut() else {
            return Err(Error::Checkpoint(
                "no state root: build the engine with_state_root(url)".into(),
            ));
        };
        for v in &mut self.views {
            let names: Vec<String> = v.sources.iter().map(|s| s.name.clone()).collect();
            // a full epoch after every start (this process knows no older
            // files) and every `compact_every` epochs; deltas in between
            let want_full = v.since_full == 0 || v.since_full >= self.compact_every;
            let (files, full) = match &mut v.runtime {
                ViewRuntime::Recompute(r) => r.export(&names, want_full)?,
                ViewRuntime::Incremental(r) => (r.export(want_full)?, want_full),
            };
            v.since_full = if full { 1 } else { v.since_full + 1 };
            let snap = v.tracker.snapshot();
            let mut counters = Counters {
                late_rows_dropped: v.counters.late_rows_dropped,
                windows_closed: v.counters.windows_closed,
                ..Counters::default()
            };
            counters.other.insert("rows".into(), v.counters.rows);
            counters
                .other
                .insert("invalid_rows".into(), v.counters.invalid_rows);
            let meta = EpochMeta {
                fingerprint: v.fingerprint.clone(),
                watermark: snap.watermark,
                sources: snap
                    .sources
                    .iter()
                    .map(|s| SourceState {
                        name: s.name.clone(),
                        max_event_time: s.max_event_time,
                        idle: s.idle,
                        last_active_ms: Some(s.last_active_ms),
                        offset: self.offsets.get(&s.name).copied(),
                    })
                    .collect(),
                counters,
                emitted_frontier: snap.watermark,
                extra: extra.clone(),
            };
            sidecar.write(&v.spec.name, self.epoch, files, full, meta)?;
        }
        Ok(())
    }

    /// Wait until every queued checkpoint is committed; an error names the
    /// first that failed.
    pub fn sync_checkpoints(&mut self) -> Result<Vec<CheckpointOutcome>> {
        let out = self.sidecar.as_mut().map(|s| s.sync()).unwrap_or_default();
        if let Some(bad) = out.iter().find(|o| o.result.is_err()) {
            return Err(Error::Checkpoint(format!(
                "view `{}` epoch {}: {}",
                bad.view,
                bad.epoch,
                bad.result.as_ref().err().cloned().unwrap_or_default()
            )));
        }
        Ok(out)
    }

    /// Queue a batch for every view that reads `source`. It is checked
    /// against the source's schema first; an error leaves the engine as it was.
    pub fn push(&mut self, source: &str, batch: RecordBatch) -> Result<()> {
        if self.finished {
            return Err(Error::Finished);
        }
        let mut targets = Vec::new();
        for (vi, v) in self.views.iter().enumerate() {
            if let Some(si) = v.sources.iter().position(|s| s.name == source) {
                targets.push((vi, si));
            }
        }
        let Some(&(v0, s0)) = targets.first() else {
            let mut known: Vec<&str> = self
                .views
                .iter()
                .flat_map(|v| v.sources.iter().map(|s| s.name.as_str()))
                .collect();
            known.sort_unstable();
            known.dedup();
            return Err(Error::UnknownSource {
                source_name: source.to_string(),
                known: known.join(", "),
            });
        };
        let batch = conform(source, &self.views[v0].sources[s0].schema, batch)?;
        for (vi, si) in targets {
            self.views[vi].pending[si].push(batch.clone());
        }
        Ok(())
    }

    /// One trigger = one epoch: classify the rows pushed since the last
    /// trigger against the watermark in force, advance W, close every
    /// window with end ≤ W and emit per each view's output mode.
    pub fn trigger(&mut self) -> Result<TriggerReport> {
        if self.finished {
            return Err(Error::Finished);
        }
        self.run_trigger(false)
    }

    /// End of stream: a last trigger with W = +∞, so every open window closes.
    pub fn finish(&mut self) -> Result<TriggerReport> {
        if self.finished {
            return Err(Error::Finished);
        }
        let r = self.run_trigger(true)?;
        self.finished = true;
        Ok(r)
    }

    fn run_trigger(&mut self, finishing: bool) -> Result<TriggerReport> {
        let started = Instant::now();
        let epoch = self.epoch + 1;
        let now = self.clock.now_ms();
        let mut reports = Vec::with_capacity(self.views.len());
        for v in &mut self.views {
            reports.push(v.trigger(epoch, now, finishing)?);
        }
        self.epoch = epoch;
        let pending = std::mem::take(&mut self.pending_offsets);
        self.offsets.extend(pending);
        let checkpoints = self.sidecar.as_mut().map(|s| s.poll()).unwrap_or_default();
        Ok(TriggerReport {
            epoch,
            views: reports,
            latency: started.elapsed(),
            checkpoints,
        })
    }

    /// The current epoch (number of triggers run).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A view's current watermark (`None` = −∞).
    pub fn watermark(&self, view: &str) -> Result<Option<EventTime>> {
        Ok(self.view(view)?.tracker.watermark())
    }

    /// A view's output schema.
    pub fn output_schema(&self, view: &str) -> Result<SchemaRef> {
        Ok(self.view(view)?.runtime.schema())
    }

    /// A view's cumulative counters.
    pub fn counters(&self, view: &str) -> Result<ViewCounters> {
        Ok(self.view(view)?.counters)
    }

    /// Rows buffered for a view's open windows (recompute path).
    pub fn buffered_rows(&self, view: &str) -> Result<usize> {
        Ok(match &self.view(view)?.runtime {
            ViewRuntime::Recompute(r) => r.buffered_rows(),
            ViewRuntime::Incremental(_) => 0,
        })
    }

    /// Records held in a view's dataflow arrangements (`None` on the recompute path).
    pub fn state_size(&self, view: &str) -> Result<Option<usize>> {
        Ok(match &self.view(view)?.runtime {
            ViewRuntime::Recompute(_) => None,
            ViewRuntime::Incremental(r) => Some(r.state_size()),
        })
    }

    /// A view's dataflow output frontier (`None` on the recompute path or while −∞).
    pub fn frontier(&self, view: &str) -> Result<Option<EventTime>> {
        Ok(match &self.view(view)?.runtime {
            ViewRuntime::Recompute(_) => None,
            ViewRuntime::Incremental(r) => r.frontier(),
        })
    }

    /// The view's late-row relation: every row dropped as late or refused
    /// for a NULL event time — `source`, `event_time` (ms), `window_start`,
    /// `window_end` (the last window the row belonged to), `watermark` (W
    /// at the drop), `reason` (`late` or `null event time`), `epoch`.
    pub fn late_rows(&self, view: &str) -> Result<RecordBatch> {
        let v = self.view(view)?;
        let l = &v.late;
        let schema = Arc::new(Schema::new(vec![
            Field::new("source", DataType::Utf8, false),
            Field::new("event_time", DataType::Int64, true),
            Field::new("window_start", DataType::Int64, true),
            Field::new("window_end", DataType::Int64, true),
            Field::new("watermark", DataType::Int64, true),
            Field::new("reason", DataType::Utf8, false),
            Field::new("epoch", DataType::UInt64, false),
        ]));
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(
                    l.iter().map(|r| r.source.as_str()),
                )),
                Arc::new(Int64Array::from_iter(l.iter().map(|r| r.event_time))),
                Arc::new(Int64Array::from_iter(
                    l.iter().map(|r| r.window.map(|w| w.start)),
                )),
                Arc::new(Int64Array::from_iter(
                    l.iter().map(|r| r.window.map(|w| w.end)),
                )),
                Arc::new(Int64Array::from_iter(l.iter().map(|r| r.watermark))),
                Arc::new(StringArray::from_iter_values(l.iter().map(|r| r.reason))),
                Arc::new(UInt64Array::from_iter_values(l.iter().map(|r| r.epoch))),
            ],
        )?)
    }

    /// The plan of a view and the path it takes, as text.
    pub fn explain(&self, view: &str) -> Result<String> {
        let v = self.view(view)?;
        let s = &v.spec;
        let mut out = String::new();
        use std::fmt::Write;
        let _ = writeln!(out, "view: {}", s.name);
        let _ = writeln!(out, "sql: {}", s.sql.trim());
        for src in &v.sources {
            let _ = writeln!(
                out,
                "source: {} (event time `{}` {})",
                src.name,
                src.schema.field(src.event_time).name(),
                src.schema.field(src.event_time).data_type()
            );
        }
        let _ = writeln!(
            out,
            "watermark: max event time - {} (idle timeout: {})",
            humantime::format_duration(s.watermark.allowed_lateness),
            if s.watermark.idle_timeout.is_zero() {
                "never".to_string()
            } else {
                humantime::format_duration(s.watermark.idle_timeout).to_string()
            }
        );
        let _ = writeln!(out, "window: {}", describe_window(s));
        let _ = writeln!(out, "output: {:?}", s.output);
        match &v.plan {
            ViewPlan::Incremental(_) => {
                let _ = writeln!(out, "path: incremental");
            }
            other => {
                let _ = writeln!(out, "path: {} ({})", other.path(), other.reason());
            }
        }
        let _ = writeln!(out, "plan: {}", v.plan);
        let _ = writeln!(
            out,
            "logical plan:\n{}",
            v.runtime.evaluator().logical_plan().display_indent()
        );
        Ok(out)
    }

    /// The plan decided for a view.
    pub fn plan(&self, view: &str) -> Result<&ViewPlan> {
        Ok(&self.view(view)?.plan)
    }

    /// Names of the views, in creation order.
    pub fn views(&self) -> Vec<&str> {
        self.views.iter().map(|v| v.spec.name.as_str()).collect()
    }

    fn view(&self, name: &str) -> Result<&View> {
        self.views
            .iter()
            .find(|v| v.spec.name == name)
            .ok_or_else(|| Error::UnknownView(name.to_string()))
    }
}

fn describe_window(s: &ViewSpec) -> String {
    use crate::spec::WindowKind::*;
    let f = |d: Duration| humantime::format_duration(d).to_string();
    match &s.window {
        None => "none (the view spans all rows)".into(),
        Some(w) => {
            let k = match &w.kind {
                Tumbling { size } => format!("tumbling {}", f(*size)),
                Hopping { size, slide } => format!("hopping {} every {}", f(*size), f(*slide)),
                Session { gap, key } => {
                    format!("session gap {} keyed by [{}]", f(*gap), key.join(", "))
                }
            };
            if w.offset.is_zero() {
                k
            } else {
                format!("{k}, offset {}", f(w.offset))
            }
        }
    }
}

/// Check a batch against a source schema (names and types) and give it that
/// schema; non-nullable columns must hold no NULLs.
fn conform(source: &str, schema: &SchemaRef, batch: RecordBatch) -> Result<RecordBatch> {
    let err = |message: String| Error::SchemaMismatch {
        source_name: source.to_string(),
        message,
    };
    let got = batch.schema();
    if got.fields().len() != schema.fields().len() {
        return Err(err(format!(
            "expected {} columns ({}), got {} ({})",
            schema.fields().len(),
            names(schema),
            got.fields().len(),
            names(&got)
        )));
    }
    for (i, (want, have)) in schema.fields().iter().zip(got.fields().iter()).enumerate() {
        if want.name() != have.name() {
            return Err(err(format!(
                "column {i}: expected `{}`, got `{}`",
                want.name(),
                have.name()
            )));
        }
        if want.data_type() != have.data_type() {
            return Err(err(format!(
                "column `{}`: expected type {}, got {}",
                want.name(),
                want.data_type(),
                have.data_type()
            )));
        }
        if !want.is_nullable() && batch.column(i).null_count() > 0 {
            let row = (0..batch.num_rows())
                .find(|r| batch.column(i).is_null(*r))
                .unwrap_or(0);
            return Err(err(format!(
                "column `{}` is not nullable but row {row} is NULL",
                want.name()
            )));
        }
    }
    RecordBatch::try_new(schema.clone(), batch.columns().to_vec()).map_err(|e| err(e.to_string()))
}

fn names(s: &Schema) -> String {
    s.fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl View {
    /// Restore a loaded checkpoint: W and per-source state, counters, operator state.
    fn restore(&mut self, l: &thund_checkpoint::Loaded, now: i64) -> Result<()> {
        let m = &l.manifest;
        let snap = WatermarkSnapshot {
            watermark: m.watermark,
            sources: m
                .sources
                .iter()
                .map(|s| SourceWatermark {
                    name: s.name.clone(),
                    max_event_time: s.max_event_time,
                    last_active_ms: s.last_active_ms.unwrap_or(now),
                    idle: s.idle,
                })
                .collect(),
        };
        self.tracker.restore(&snap);
        self.counters = ViewCounters {
            rows: m.counters.other.get("rows").copied().unwrap_or(0),
            late_rows_dropped: m.counters.late_rows_dropped,
            invalid_rows: m.counters.other.get("invalid_rows").copied().unwrap_or(0),
            windows_closed: m.counters.windows_closed,
        };
        let batches = |op: &str| l.batches(op).cloned().collect::<Vec<RecordBatch>>();
        match &mut self.runtime {
            ViewRuntime::Incremental(r) => {
                let state: Vec<(u64, RecordBatch)> = l
                    .operators
                    .get("aggregate")
                    .into_iter()
                    .flatten()
                    .flat_map(|f| f.batches.iter().map(|b| (f.entry.epoch, b.clone())))
                    .collect();
                r.import(m.watermark, state, batches("complete-closed"))?
            }
            ViewRuntime::Recompute(r) => {
                let mut rows = Vec::new();
                for (si, src) in self.sources.iter().enumerate() {
                    for b in batches(&format!("rows-{}", src.name)) {
                        let b = conform(&src.name, &src.schema, b).map_err(|e| {
                            Error::Checkpoint(format!(
                                "view `{}`: stored rows: {e}",
                                self.spec.name
                            ))
                        })?;
                        let times = to_millis(b.column(src.event_time).as_ref())?;
                        rows.push(OnTime {
                            source: si,
                            batch: b,
                            times,
                        });
                    }
                }
                r.import(
                    m.watermark,
                    rows,
                    batches("complete-closed"),
                    batches("session-closed"),
                )?;
            }
        }
        self.recovery = Some(Recovery {
            epoch: m.epoch,
            watermark: m.watermark,
            fell_back_from: l.fell_back_from.iter().map(|s| format!("{s:?}")).collect(),
            warnings: l.warnings.clone(),
            extra: m.extra.clone(),
        });
        Ok(())
    }

    fn trigger(&mut self, epoch: u64, now: i64, finishing: bool) -> Result<ViewReport> {
        let started = Instant::now();
        let w_prev = self.tracker.watermark();
        let mut on_time = Vec::new();
        let (mut rows, mut late, mut invalid) = (0u64, 0u64, 0u64);
        let pending = std::mem::replace(&mut self.pending, vec![Vec::new(); self.sources.len()]);
        for (si, batches) in pending.into_iter().enumerate() {
            let src = &self.sources[si];
            for batch in batches {
                rows += batch.num_rows() as u64;
                let times = to_millis(batch.column(src.event_time).as_ref())?;
                let verdict = match &self.runtime {
                    ViewRuntime::Recompute(rt) => rt.classify(&batch, &times, w_prev)?,
                    ViewRuntime::Incremental(rt) => rt.classify(&times, w_prev),
                };
                let mut keep = Vec::with_capacity(verdict.len());
                for (i, v) in verdict.iter().enumerate() {
                    keep.push(v.is_none());
                    if let Some(r) = v {
                        let (window, reason) = match r {
                            Refusal::Late(w) => {
                                late += 1;
                                (*w, "late")
                            }
                            Refusal::NullTime => {
                                invalid += 1;
                                (None, "null event time")
                            }
                        };
                        self.late.push(LateRow {
                            source: src.name.clone(),
                            event_time: times.is_valid(i).then(|| times.value(i)),
                            window,
                            watermark: w_prev,
                            reason,
                            epoch,
                        });
                    }
                }
                let max = times.iter().flatten().max();
                if batch.num_rows() > 0 {
                    self.tracker.observe(si, max, now);
                }
                let mask = BooleanArray::from(keep);
                let kept = filter_record_batch(&batch, &mask)?;
                let kept_times = arrow::compute::filter(&times, &mask)?;
                let kept_times = kept_times
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .ok_or_else(|| Error::exec(&self.spec.name, "event times lost their type"))?;
                if kept.num_rows() > 0 {
                    on_time.push(OnTime {
                        source: si,
                        batch: kept,
                        times: kept_times,
                    });
                }
            }
        }
        let w = if finishing {
            Some(self.tracker.finish())
        } else {
            self.tracker.advance(now)
        };
        let (out, frontier) = match &mut self.runtime {
            ViewRuntime::Recompute(rt) => (rt.step(on_time, w_prev, w)?, None),
            ViewRuntime::Incremental(rt) => {
                let out = rt.step(on_time, w_prev, w)?;
                (out, rt.frontier())
            }
        };
        self.counters.rows += rows;
        self.counters.late_rows_dropped += late;
        self.counters.invalid_rows += invalid;
        self.counters.windows_closed += out.windows_closed;
        Ok(ViewReport {
            view: self.spec.name.clone(),
            previous_watermark: w_prev,
            watermark: w,
            frontier,
            recovery: if self.recovery_reported {
                None
            } else {
                self.recovery_reported = true;
                self.recovery.clone()
            },
            rows,
            late_rows_dropped: late,
            invalid_rows: invalid,
            windows_closed: out.windows_closed,
            output: out.batches,
            path: self.plan.path(),
            reason: self.plan.reason().to_string(),
            latency: started.elapsed(),
        })
    }
}
