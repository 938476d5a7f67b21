//! The engine: views, pushes, triggers, checkpoints, reports.
//!
//! One file per job: [`builder`] (settings), [`input`] (source resolution and
//! batch checks), [`view`] (one view's trigger and restore), [`report`] (what
//! triggers return), [`explain`] (the plan as text). This file holds the
//! [`Engine`] and `create_view`, which runs the jobs in order.

mod builder;
mod explain;
mod input;
mod rejected;
mod report;
mod view;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use thund_checkpoint::{BlockingCheckpointStore, Counters, EpochMeta, SourceState, Takeover};

pub use builder::EngineBuilder;
pub(crate) use input::conform;
pub use rejected::{InvalidRow, DEFAULT_REJECTED_RETENTION};
pub use report::{Recovery, TriggerReport, ViewCounters, ViewReport};

use crate::error::{Error, Result};
use crate::paths::sql::SqlEvaluator;
use crate::plan::{plan_view, ViewPlan};
use crate::spec::{OutputMode, ViewSpec};
use crate::state::sidecar::{CheckpointOutcome, Sidecar};
use crate::state::{fingerprint, StateWarning};
use crate::time::{bound_type, EventTime};
use crate::watermark::{Clock, WatermarkTracker};
use crate::window::EventTimeDomain;
use view::View;

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
    /// The timely workers every incremental view's dataflow runs on, started with the
    /// first such view (one is stepped on the caller's thread, more run on threads).
    cluster: Option<thund_dataflows::Cluster>,
    takeover: Takeover,
    rejected_retention: usize,
    /// Every view's contents as of the last trigger, for readers on any thread.
    tables: crate::table::Tables,
    subscriber_buffer: usize,
    /// Whether views are kept as tables.
    keep_tables: bool,
}

impl Engine {
    /// Start building an engine.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let engine = Engine::builder().build()?;
    /// assert!(engine.views().is_empty());
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Declare a view. Every check happens here: names, durations, the
    /// event-time column and its type, the SQL (parse, tables, columns).
    /// Then the plan is decided and compiled, the path's runtime started,
    /// and — with a state root — the view's writer lease taken and its
    /// newest committed checkpoint restored.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let mut engine = Engine::builder().build()?;
    /// engine.create_view(counts())?;
    /// assert_eq!(engine.plan("counts")?.path(), thund::PathKind::Incremental);
    /// // the same name twice is refused
    /// assert!(matches!(engine.create_view(counts()), Err(thund::Error::DuplicateView(_))));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn create_view(&mut self, spec: ViewSpec) -> Result<()> {
        let (spec, layout, written) = lowered(spec)?;
        if self.views.iter().any(|v| v.spec.name == spec.name) {
            return Err(Error::DuplicateView(spec.name.clone()));
        }
        let name = spec.name.clone();
        let (sources, eval) = self.planned(&spec, layout.as_ref(), written.as_deref())?;
        let bound = spec
            .window
            .as_ref()
            .map(|_| bound_type(sources[0].schema.field(sources[0].event_time).data_type()));
        let logical = eval.logical_plan().clone();
        let planned = plan_view(
            &spec,
            &logical,
            eval.context(),
            bound.as_ref(),
            eval.out_schema.clone(),
        );
        let plan = planned.plan.clone();
        let cluster = match planned.incremental() {
            true => Some(self.cluster(&name)?),
            false => None,
        };
        // a view is checkpointed iff the engine has a state root (see `attach_state`)
        let checkpointed = self.store.is_some();
        let runtime =
            crate::paths::build(&name, &spec, planned, eval, &sources, cluster, checkpointed)?;
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        let tracker = WatermarkTracker::new(
            &names,
            spec.watermark.allowed_lateness,
            spec.watermark.idle_timeout,
            self.clock.now_ms(),
        )
        .advancing_when_idle(spec.watermark.advance_when_idle);
        let written = match (layout, written) {
            (Some(layout), Some(sql)) => {
                let (columns, schema) = layout.project(&runtime.output_schema(), spec.output);
                Some(view::Written {
                    sql,
                    columns,
                    schema,
                })
            }
            _ => None,
        };
        let output = match &written {
            Some(w) => w.schema.clone(),
            None => runtime.output_schema(),
        };
        let as_written = written.as_ref().map(|w| w.sql.as_str());
        let (fingerprint, fingerprint_parts) =
            view_fingerprint(&spec, as_written, &sources, &plan, &output);
        let runtime_schema = runtime.output_schema();
        let key = crate::table::key_columns(&logical).map(|cols| {
            let offset = if spec.window.is_some() { 2 } else { 0 };
            cols.into_iter().map(|c| c + offset).collect()
        });
        let shown: Vec<usize> = match &written {
            Some(w) => w.columns.clone(),
            None => (0..runtime_schema.fields().len()).collect(),
        };
        let layout =
            crate::table::contents::Layout::new(&name, output, &runtime_schema, key, &shown)?;
        let mut contents = crate::table::contents::Contents::new(
            Arc::new(layout),
            spec.output,
            spec.retention
                .unwrap_or_else(|| crate::spec::Retention::default_for(spec.window.as_ref())),
            spec.window.is_some(),
            &runtime_schema,
        );
        contents.enabled = self.keep_tables;
        let (changes, _) = tokio::sync::broadcast::channel(self.subscriber_buffer);
        let mut view = View {
            pending: vec![Vec::new(); sources.len()],
            spec,
            plan,
            logical,
            sources,
            tracker,
            runtime,
            rejected: rejected::RejectedRows::new(self.rejected_retention),
            pending_invalid: Vec::new(),
            counters: ViewCounters::default(),
            fingerprint,
            fingerprint_parts,
            recovery: None,
            recovery_reported: false,
            schedule: thund_checkpoint::policy::CheckpointSchedule::new(self.compact_every),
            warnings: Vec::new(),
            written,
            contents,
            changes,
        };
        self.attach_state(&mut view)?;
        self.views.push(view);
        self.publish();
        Ok(())
    }

    /// Create the views a SQL DDL text declares (`CREATE SOURCE … WATERMARK
    /// FOR …`, `CREATE VIEW … AS …`: see [`crate::spec::ddl`]), in order,
    /// and return their names. The whole text is parsed and checked first;
    /// if a view's query is then refused, the views declared before it stay
    /// created and the error names the view.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::Engine;
    /// let mut engine = Engine::builder().build()?;
    /// let views = engine.execute_sql(
    ///     "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP,
    ///                          WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
    ///      CREATE VIEW counts AS
    ///        SELECT auction, window_start, window_end, COUNT(*) AS n
    ///        FROM TUMBLE(bids, ts, INTERVAL '10' SECOND)
    ///        GROUP BY auction, window_start, window_end;",
    /// )?;
    /// assert_eq!(views, ["counts"]);
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, true),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// let bids = RecordBatch::try_new(schema, vec![
    ///     Arc::new(Int64Array::from(vec![7, 7])),
    ///     Arc::new(TimestampMillisecondArray::from(vec![1_000, 12_000])),
    /// ]).unwrap();
    /// engine.push("bids", bids)?;
    /// let report = engine.trigger()?; // W = 11 s: [0 s, 10 s) closes
    /// assert_eq!(report.view("counts").unwrap().output_rows(), 1);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn execute_sql(&mut self, ddl: &str) -> Result<Vec<String>> {
        let pipeline = crate::spec::ddl::parse(ddl)?;
        for v in &pipeline.views {
            if self.views.iter().any(|x| x.spec.name == v.name) {
                return Err(Error::DuplicateView(v.name.clone()));
            }
        }
        // every view checked before any is created: a text the engine refuses
        // creates nothing (no view of it reads another, so each checks alone)
        self.check_pipeline(&pipeline, |_| true)?;
        let mut names = Vec::new();
        for v in pipeline.views {
            names.push(v.name.clone());
            self.create_view(v)?;
        }
        Ok(names)
    }

    /// What [`Self::create_view`] refuses of `spec` in its window, its spec,
    /// its sources or its SQL, found without changing the engine.
    fn check_view(&self, spec: &ViewSpec) -> Result<()> {
        let (spec, layout, written) = lowered(spec.clone())?;
        self.planned(&spec, layout.as_ref(), written.as_deref())
            .map(|_| ())
    }

    /// [`Self::check_view`] of each view of a DDL text that `chosen` picks
    /// (by name), an error placed at its statement and query.
    pub(crate) fn check_pipeline(
        &self,
        p: &crate::spec::ddl::Pipeline,
        chosen: impl Fn(&str) -> bool,
    ) -> Result<()> {
        for (i, v) in p.views.iter().enumerate() {
            if chosen(&v.name) {
                self.check_view(v).map_err(|e| p.placed(i, e))?;
            }
        }
        Ok(())
    }

    /// `spec`'s sources, resolved against the views there are, its SQL
    /// planned over them, and the names of its output checked (`layout`: where
    /// a window in the SQL shows its bounds; see [`check_names`]). An error of
    /// the SQL shows the query as `written` when a window in it was lowered.
    fn planned(
        &self,
        spec: &ViewSpec,
        layout: Option<&crate::spec::window_sql::Layout>,
        written: Option<&str>,
    ) -> Result<(Vec<crate::paths::SourceInfo>, SqlEvaluator)> {
        let sources = input::resolve_sources(spec, &self.views, layout.map(|l| l.declared()))?;
        let eval = SqlEvaluator::new(&spec.name, &spec.sql, &sources, self.rt.clone()).map_err(
            |e| match (e, written) {
                (Error::Sql { view, source, .. }, Some(w)) => Error::Sql {
                    view,
                    sql: w.to_string(),
                    source,
                },
                (e, _) => e,
            },
        )?;
        check_names(spec, layout, &sources, &eval.out_schema)?;
        Ok((sources, eval))
    }

    /// The engine's timely workers (started on first use): one timely instance hosts every
    /// incremental view's dataflow.
    fn cluster(&mut self, view: &str) -> Result<thund_dataflows::Cluster> {
        if let Some(c) = &self.cluster {
            return Ok(c.clone());
        }
        let c = thund_dataflows::Cluster::for_workers(self.workers)
            .map_err(|e| Error::dataflow(view, e))?;
        self.cluster = Some(c.clone());
        Ok(c)
    }

    /// With a state root: fence the view (writer lease), then restore its
    /// newest committed epoch, or say which crashed first epochs a cold start
    /// passed over.
    fn attach_state(&mut self, view: &mut View) -> Result<()> {
        let (Some(store), Some(sidecar)) = (&self.store, &mut self.sidecar) else {
            return Ok(());
        };
        let name = view.spec.name.clone();
        let ctx = || format!("view `{name}`");
        view.runtime.enable_checkpoints();
        // fence first: a second writer must not even read a state it could corrupt
        let writer = store
            .acquire_with(&name, self.takeover)
            .map_err(|e| Error::checkpoint(ctx(), e))?;
        let restored = store
            .load_expecting(&name, &view.fingerprint)
            .map_err(|e| match e {
                thund_checkpoint::Error::FingerprintMismatch { epoch, .. } => {
                    let stored = stored_parts(store, &name, epoch);
                    Error::ViewChanged {
                        view: name.clone(),
                        epoch,
                        changed: changed_parts(&stored, &view.fingerprint_parts),
                    }
                }
                e => Error::checkpoint(ctx(), e),
            })
            .and_then(|loaded| match loaded {
                Some(l) => view.restore(&l, self.clock.now_ms()).map(|()| Some(l)),
                None => Ok(None),
            });
        let loaded = match restored {
            Ok(l) => l,
            Err(e) => {
                let _ = writer.release();
                return Err(e);
            }
        };
        // a garbage latest pointer is passed over, but never in silence
        if let Ok(listing) = store.list(&name) {
            if let thund_checkpoint::PointerState::Unreadable(reason) = listing.latest {
                view.warnings
                    .push(StateWarning::UnreadablePointer { reason });
            }
        }
        match loaded {
            Some(l) => {
                for s in &l.manifest.sources {
                    if let Some(o) = s.offset {
                        self.offsets.entry(s.name.clone()).or_insert(o);
                    }
                }
                // the engine's own count: the store's epoch skips numbers
                // that crashed writes left, the triggers do not
                let ours = l.manifest.trigger_epoch.unwrap_or(l.manifest.epoch);
                self.epoch = self.epoch.max(ours);
            }
            None => {
                // a cold start is never silent: say which crashed first epochs it passed over
                if let Ok(thund_checkpoint::decision::ResumeDecision::ColdStart {
                    ignored_uncommitted,
                }) = store.decide(&name)
                {
                    if !ignored_uncommitted.is_empty() {
                        view.warnings.push(StateWarning::IgnoredUncommitted {
                            epochs: ignored_uncommitted,
                        });
                    }
                }
            }
        }
        sidecar.register(writer)
    }

    /// Like [`Self::push`], recording the caller's position in `source`
    /// after this batch (rows, bytes, a log offset: the caller's unit). A
    /// checkpoint stores the offset of the last batch a trigger took in; after
    /// a resume, [`Self::source_offset`] says where to replay from.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push_at("bids", bids(vec![1, 2], vec![Some(1_000), Some(2_000)]), 2)?;
    /// assert_eq!(engine.source_offset("bids"), None); // taken in at the next trigger
    /// engine.trigger()?;
    /// assert_eq!(engine.source_offset("bids"), Some(2));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn push_at(&mut self, source: &str, batch: RecordBatch, offset: u64) -> Result<()> {
        self.push(source, batch)?;
        self.pending_offsets.insert(source.to_string(), offset);
        Ok(())
    }

    /// Where to resume `source` from: the offset of the last batch taken in
    /// by a trigger (restored from a checkpoint, or since), if any.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// assert_eq!(engine.source_offset("bids"), None);
    /// engine.push_at("bids", bids(vec![7], vec![Some(500)]), 1)?;
    /// engine.trigger()?;
    /// assert_eq!(engine.source_offset("bids"), Some(1));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn source_offset(&self, source: &str) -> Option<u64> {
        self.offsets.get(source).copied()
    }

    /// What opening the state root for a view noticed that is not a resume:
    /// for instance a cold start that passed over epochs a crashed first
    /// checkpoint left behind uncommitted.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let mut engine = Engine::builder().with_state_root("memory://warnings-doc").build()?;
    /// engine.create_view(counts())?;
    /// assert!(engine.warnings("counts")?.is_empty()); // a clean cold start
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn warnings(&self, view: &str) -> Result<&[StateWarning]> {
        Ok(&self.view(view)?.warnings)
    }

    /// What a view resumed from, if it resumed.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let root = "memory://recovery-doc";
    /// let mut first = Engine::builder().with_state_root(root).build()?;
    /// first.create_view(counts())?;
    /// first.push("bids", bids(vec![1], vec![Some(15_000)]))?;
    /// first.trigger()?;
    /// first.checkpoint(serde_json::json!({"note": "after trigger 1"}))?;
    /// first.sync_checkpoints()?;
    /// drop(first); // releases the writer lease
    ///
    /// let mut second = Engine::builder().with_state_root(root).build()?;
    /// second.create_view(counts())?;
    /// let r = second.recovery("counts")?.expect("resumed");
    /// assert_eq!((r.epoch, r.watermark), (1, Some(15_000)));
    /// assert_eq!(r.extra["note"], "after trigger 1");
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn recovery(&self, view: &str) -> Result<Option<&Recovery>> {
        Ok(self.view(view)?.recovery.as_ref())
    }

    /// Capture every view's state at the current epoch and hand it to the
    /// sidecar, which writes it in the background (`extra` is stored in the
    /// manifest and given back by [`Self::recovery`]). The next checkpoint
    /// waits while this one is still queued. Outcomes arrive in later
    /// trigger reports, or from [`Self::sync_checkpoints`].
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let mut engine = Engine::builder().with_state_root("memory://checkpoint-doc").build()?;
    /// engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1, 2], vec![Some(1_000), Some(2_000)]))?;
    /// engine.trigger()?;
    /// engine.checkpoint(serde_json::Value::Null)?;
    /// let done = engine.sync_checkpoints()?;
    /// assert!(done[0].result.as_ref().is_ok_and(|stats| stats.full));
    /// // without a state root there is nowhere to write
    /// let mut plain = Engine::builder().build()?;
    /// assert!(matches!(plain.checkpoint(serde_json::Value::Null), Err(thund::Error::NoStateRoot)));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn checkpoint(&mut self, extra: serde_json::Value) -> Result<()> {
        let Some(sidecar) = self.sidecar.as_mut() else {
            return Err(Error::NoStateRoot);
        };
        for v in &mut self.views {
            let mut export = v.runtime.export(v.schedule.want_full())?;
            v.schedule.record(export.full);
            export.files.extend(v.contents.export()?);
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
                fingerprint_parts: v.fingerprint_parts.clone(),
                watermark: snap.watermark,
                watermark_clock: snap.clock_base,
                trigger_epoch: Some(self.epoch),
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
            sidecar.write(&v.spec.name, self.epoch, export, meta)?;
        }
        Ok(())
    }

    /// Whether the engine was built with a state root (and so can [`Self::checkpoint`]).
    pub fn has_state_root(&self) -> bool {
        self.sidecar.is_some()
    }

    /// Wait until every queued checkpoint is committed; an error names the
    /// first that failed.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let mut engine = Engine::builder().with_state_root("memory://sync-doc").build()?;
    /// engine.create_view(counts())?;
    /// assert!(engine.sync_checkpoints()?.is_empty()); // nothing queued
    /// engine.checkpoint(serde_json::Value::Null)?;
    /// assert_eq!(engine.sync_checkpoints()?.len(), 1);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn sync_checkpoints(&mut self) -> Result<Vec<CheckpointOutcome>> {
        let out = self.sidecar.as_mut().map(|s| s.sync()).unwrap_or_default();
        if let Some(bad) = out.iter().find(|o| o.result.is_err()) {
            if let Err(e) = &bad.result {
                return Err(Error::Checkpoint {
                    context: format!("view `{}` epoch {}", bad.view, bad.epoch),
                    source: e.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Queue a batch for every view that reads `source`. It is checked
    /// against the source's schema first; an error leaves the engine as it was.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1], vec![Some(1_000)]))?;
    /// let unknown = engine.push("asks", bids(vec![1], vec![Some(1_000)]));
    /// assert!(matches!(unknown, Err(thund::Error::UnknownSource { .. })));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn push(&mut self, source: &str, batch: RecordBatch) -> Result<()> {
        if self.finished {
            return Err(Error::Finished);
        }
        let targets = self.targets(source)?;
        let (v0, s0) = targets[0];
        let batch = conform(source, &self.views[v0].sources[s0].schema, batch)?;
        for (vi, si) in targets {
            self.views[vi].pending[si].push(batch.clone());
        }
        Ok(())
    }

    /// One trigger = one epoch: classify the rows pushed since the last
    /// trigger against the watermark in force, advance W, close every
    /// window with end ≤ W and emit per each view's output mode.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1, 1, 2], vec![Some(1_000), Some(3_000), Some(10_500)]))?;
    /// let report = engine.trigger()?;
    /// let counts = report.view("counts").unwrap();
    /// assert_eq!(counts.watermark, Some(10_500));
    /// assert_eq!((counts.windows_closed, counts.output_rows()), (1, 1)); // [0s, 10s): auction 1, n = 2
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn trigger(&mut self) -> Result<TriggerReport> {
        if self.finished {
            return Err(Error::Finished);
        }
        self.run_trigger(false)
    }

    /// End of stream: a last trigger with W = +∞, so every open window closes.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1], vec![Some(1_000)]))?;
    /// let last = engine.finish()?;
    /// assert_eq!(last.view("counts").unwrap().output_rows(), 1);
    /// assert!(matches!(engine.trigger(), Err(thund::Error::Finished)));
    /// # Ok::<(), thund::Error>(())
    /// ```
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
        // the contents first, then the changes: a subscriber that lagged and
        // reads the contents has every trigger it was sent
        self.publish();
        for (v, r) in self.views.iter().zip(&reports) {
            // no subscriber is no error
            let _ = v.changes.send(Arc::new(crate::table::subscribe::Emitted {
                epoch,
                watermark: r.watermark,
                rows: r.output.clone(),
            }));
        }
        let checkpoints = self.sidecar.as_mut().map(|s| s.poll()).unwrap_or_default();
        Ok(TriggerReport {
            epoch,
            views: reports,
            latency: started.elapsed(),
            checkpoints,
        })
    }

    /// Publish every view's contents as of this epoch.
    fn publish(&self) {
        let views = self
            .views
            .iter()
            .map(|v| {
                let t = crate::table::ViewTable {
                    contents: v.contents.published(),
                    watermark: v.tracker.watermark(),
                    changes: v.changes.downgrade(),
                };
                (v.spec.name.clone(), t)
            })
            .collect();
        self.tables.publish(crate::table::Snapshot {
            epoch: self.epoch,
            views,
        });
    }

    /// The views as tables, as of the last trigger: a handle to query, look
    /// up and subscribe from any thread or task while this engine runs (see
    /// [`Tables`](crate::Tables)).
    pub fn tables(&self) -> crate::table::Tables {
        self.tables.clone()
    }

    /// Run DataFusion SQL over the views as of the last trigger: each view
    /// is a table of its open windows' current rows and its retained closed
    /// windows' final rows ([`crate::Retention`]), in its output columns.
    /// See [`Tables::query`](crate::Tables::query).
    pub fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        self.tables.query(sql)
    }

    /// One key's rows of `view` across the windows held, from its index.
    /// See [`Tables::lookup`](crate::Tables::lookup).
    pub fn lookup(
        &self,
        view: &str,
        key: &[datafusion::common::ScalarValue],
    ) -> Result<RecordBatch> {
        self.tables.lookup(view, key)
    }

    /// Subscribe to `view`'s per-trigger changes from the next trigger on.
    /// See [`Subscription`](crate::Subscription).
    pub fn subscribe(&self, view: &str) -> Result<crate::table::Subscription> {
        self.tables.subscribe(view)
    }

    /// The current epoch (number of triggers run).
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// assert_eq!(engine.epoch(), 0);
    /// engine.trigger()?;
    /// assert_eq!(engine.epoch(), 1);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A view's current watermark (`None` = −∞).
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// assert_eq!(engine.watermark("counts")?, None);
    /// engine.push("bids", bids(vec![1], vec![Some(4_000)]))?;
    /// engine.trigger()?;
    /// assert_eq!(engine.watermark("counts")?, Some(4_000)); // no allowed lateness
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn watermark(&self, view: &str) -> Result<Option<EventTime>> {
        Ok(self.view(view)?.tracker.watermark())
    }

    /// A view's output schema: `window_start`, `window_end`, the query's
    /// columns, and `final` in Update mode.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// let schema = engine.output_schema("counts")?;
    /// let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    /// assert_eq!(names, ["window_start", "window_end", "auction", "n"]);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn output_schema(&self, view: &str) -> Result<SchemaRef> {
        let v = self.view(view)?;
        Ok(match &v.written {
            Some(w) => w.schema.clone(),
            None => v.runtime.output_schema(),
        })
    }

    /// The columns that key `view`'s rows within a window (its `GROUP BY`
    /// columns; all of them under `DISTINCT`; none for a global aggregate),
    /// or `None` when its rows have no key: what [`Engine::lookup`] takes and
    /// a keyed sink upserts on (with the window bounds).
    pub fn key_columns(&self, view: &str) -> Result<Option<Vec<String>>> {
        let v = self.view(view)?;
        Ok(v.contents
            .layout
            .key_schema()
            .map(|s| s.fields().iter().map(|f| f.name().clone()).collect()))
    }

    /// The columns of `view`'s output that show each row's window start and
    /// end, and whether its windows grow, or `None` for a view without
    /// windows. A window in the spec shows both bounds first, as
    /// `window_start` and `window_end`; a window in the SQL shows them where
    /// and as the query selects them (or not). A database sink needs them
    /// ([`crate::io::db::DbSink::open`]).
    pub fn window_columns(&self, view: &str) -> Result<Option<WindowColumns>> {
        let v = self.view(view)?;
        let Some(window) = &v.spec.window else {
            return Ok(None);
        };
        let [start, end] = match &v.written {
            // the runtime's rows carry the bounds first; the written layout
            // picks its columns from them
            Some(w) => [0, 1].map(|b| {
                w.columns
                    .iter()
                    .position(|&c| c == b)
                    .map(|i| w.schema.field(i).name().clone())
            }),
            None => ["window_start", "window_end"].map(|b| Some(b.to_string())),
        };
        Ok(Some(WindowColumns {
            start,
            end,
            sessions: matches!(window.kind, crate::spec::WindowKind::Session { .. }),
        }))
    }

    /// `view`'s fingerprint: what its checkpoints must match (a hash of its
    /// per-window SQL, sources, window, watermark, output mode, plan and
    /// output columns).
    pub fn fingerprint(&self, view: &str) -> Result<String> {
        Ok(self.view(view)?.fingerprint.clone())
    }

    /// A view's cumulative counters.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1, 2], vec![Some(1_000), None]))?;
    /// engine.trigger()?;
    /// let c = engine.counters("counts")?;
    /// assert_eq!((c.rows, c.invalid_rows), (2, 1)); // a NULL event time is refused and counted
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn counters(&self, view: &str) -> Result<ViewCounters> {
        Ok(self.view(view)?.counters)
    }

    /// Rows buffered for a view's open windows (recompute path; 0 on the incremental path).
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// let mut engine = Engine::builder().build()?;
    /// let spec = ViewSpec::builder("all", "SELECT auction FROM bids")
    ///     .source("bids", "ts", schema.clone())
    ///     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    ///     .build()?;
    /// engine.create_view(spec)?; // no aggregate: the recompute path buffers rows
    /// engine.push("bids", bids(vec![1, 2], vec![Some(1_000), Some(2_000)]))?;
    /// engine.trigger()?;
    /// assert_eq!(engine.buffered_rows("all")?, 2);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn buffered_rows(&self, view: &str) -> Result<usize> {
        Ok(self.view(view)?.runtime.stats().buffered_rows)
    }

    /// Records a view holds for its open windows (`None` on the recompute
    /// path): the dataflow's, and what the host keeps beside it — the open
    /// groups' states in Update and Complete modes, `COUNT(DISTINCT …)`'s
    /// entries, session units, a top-rows rule's order keys.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1, 2], vec![Some(1_000), Some(2_000)]))?;
    /// engine.trigger()?;
    /// assert!(engine.state_size("counts")?.is_some_and(|n| n > 0));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn state_size(&self, view: &str) -> Result<Option<usize>> {
        Ok(self.view(view)?.runtime.stats().state_records)
    }

    /// A view's dataflow output frontier (`None` on the recompute path or
    /// while −∞); after every trigger it equals the watermark.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// engine.push("bids", bids(vec![1], vec![Some(12_000)]))?;
    /// engine.trigger()?;
    /// assert_eq!(engine.frontier("counts")?, engine.watermark("counts")?);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn frontier(&self, view: &str) -> Result<Option<EventTime>> {
        Ok(self.view(view)?.runtime.stats().frontier)
    }

    /// The view's rejected-row relation: every row not taken in — dropped
    /// as late, refused for a NULL event time, or refused by an input reader
    /// ([`Self::push_invalid`]) — with `source`, `event_time` (ms),
    /// `window_start`, `window_end` (the last window a late row belonged
    /// to), `watermark` (W at the drop), `reason` (`late`, `null event time`
    /// or the reader's words), `epoch`, and for reader refusals `location`
    /// (`file:line`), `column` and `value`. It keeps the newest
    /// [`EngineBuilder::rejected_row_retention`] entries (100 000 by default).
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone()).window(WindowSpec::tumbling(Duration::from_secs(10))).build()?)?;
    /// engine.push("bids", bids(vec![1], vec![Some(25_000)]))?;
    /// engine.trigger()?; // W = 25s: [0s, 10s) and [10s, 20s) are closed
    /// engine.push("bids", bids(vec![2], vec![Some(3_000)]))?;
    /// engine.trigger()?;
    /// let late = engine.late_rows("counts")?;
    /// assert_eq!(late.num_rows(), 1);
    /// assert_eq!(engine.counters("counts")?.late_rows_dropped, 1);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn late_rows(&self, view: &str) -> Result<RecordBatch> {
        self.view(view)?.rejected.batch()
    }

    /// The rejected-row relation (as [`Self::late_rows`]), emptied: the
    /// caller takes what it wants to keep.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone()).window(WindowSpec::tumbling(Duration::from_secs(10))).build()?)?;
    /// engine.push("bids", RecordBatch::try_new(schema.clone(), vec![
    ///     Arc::new(Int64Array::from(vec![1])),
    ///     Arc::new(TimestampMillisecondArray::from(vec![None]))])?)?;
    /// engine.trigger()?;
    /// assert_eq!(engine.drain_late_rows("counts")?.num_rows(), 1);
    /// assert_eq!(engine.late_rows("counts")?.num_rows(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn drain_late_rows(&mut self, view: &str) -> Result<RecordBatch> {
        self.view_mut(view)?.rejected.drain()
    }

    /// The event times every view reading `source` can place: a reader that
    /// knows where its rows come from refuses the others at their line
    /// (with [`EventTimeDomain::REASON`]) rather than leave the engine to
    /// refuse them without a location.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// let mut engine = Engine::builder().build()?;
    /// engine.create_view(
    ///     ViewSpec::builder("n", "SELECT COUNT(*) AS n FROM bids")
    ///         .source("bids", "ts", schema)
    ///         .window(WindowSpec::tumbling(Duration::from_secs(10)))
    ///         .build()?,
    /// )?;
    /// let domain = engine.event_time_domain("bids")?;
    /// assert!(domain.holds(1_000) && !domain.holds(i64::MAX));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn event_time_domain(&self, source: &str) -> Result<EventTimeDomain> {
        let targets = self.targets(source)?;
        Ok(EventTimeDomain::of(targets.iter().filter_map(|(vi, _)| {
            self.views[*vi].spec.window.as_ref()
        })))
    }

    /// Rows of `source` that an input reader refused (for instance a CSV
    /// cell that does not parse as its column's type): at the next trigger
    /// they count as `invalid_rows` of every view reading `source` and are
    /// kept in its rejected-row relation with their location, column, value
    /// and reason. Nothing else changes: the rows never enter a view.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, InvalidRow, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone()).window(WindowSpec::tumbling(Duration::from_secs(10))).build()?)?;
    /// engine.push_invalid("bids", vec![InvalidRow {
    ///     location: Some("bids.csv:50001".into()),
    ///     column: Some("auction".into()),
    ///     value: Some("n/a".into()),
    ///     reason: "not an Int64".into(),
    ///     event_time: None,
    /// }])?;
    /// let report = engine.trigger()?;
    /// assert_eq!(report.view("counts").unwrap().invalid_rows, 1);
    /// assert_eq!(engine.late_rows("counts")?.num_rows(), 1);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn push_invalid(&mut self, source: &str, rows: Vec<InvalidRow>) -> Result<()> {
        if self.finished {
            return Err(Error::Finished);
        }
        let targets = self.targets(source)?;
        for (vi, si) in targets {
            self.views[vi]
                .pending_invalid
                .extend(rows.iter().cloned().map(|r| (si, r)));
        }
        Ok(())
    }

    /// The plan of a view and the path it takes, as text.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// let text = engine.explain("counts")?;
    /// assert!(text.contains("path: incremental"));
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn explain(&self, view: &str) -> Result<String> {
        Ok(explain::explain(self.view(view)?))
    }

    /// The plan decided for a view.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// let plan = engine.plan("counts")?;
    /// assert_eq!(plan.path(), thund::PathKind::Incremental);
    /// assert_eq!(plan.reason(), None);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn plan(&self, view: &str) -> Result<&ViewPlan> {
        Ok(&self.view(view)?.plan)
    }

    /// Names of the views, in creation order.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
    /// # let counts = || ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build().unwrap();
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(counts())?;
    /// assert_eq!(engine.views(), ["counts"]);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn views(&self) -> Vec<&str> {
        self.views.iter().map(|v| v.spec.name.as_str()).collect()
    }

    /// (view, source index) of every view reading `source`; at least one.
    fn targets(&self, source: &str) -> Result<Vec<(usize, usize)>> {
        let targets: Vec<(usize, usize)> = self
            .views
            .iter()
            .enumerate()
            .filter_map(|(vi, v)| {
                v.sources
                    .iter()
                    .position(|s| s.name == source)
                    .map(|si| (vi, si))
            })
            .collect();
        if targets.is_empty() {
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
        }
        Ok(targets)
    }

    fn view_mut(&mut self, name: &str) -> Result<&mut View> {
        self.views
            .iter_mut()
            .find(|v| v.spec.name == name)
            .ok_or_else(|| Error::UnknownView(name.to_string()))
    }

    fn view(&self, name: &str) -> Result<&View> {
        self.views
            .iter()
            .find(|v| v.spec.name == name)
            .ok_or_else(|| Error::UnknownView(name.to_string()))
    }
}

/// What a checkpoint of this view must match to be restored, by part:
/// name, per-window SQL, sources and schemas, window, watermark, output mode,
/// plan and the output's columns — not the worker count (state is
/// re-partitioned on load), nor whether the window is written in the spec
/// or in the SQL (both give the same per-window SQL and window, and where
/// the SQL puts the bounds is in the output's columns). The fingerprint is a
/// hash of all parts; the parts are stored beside it so a mismatch can say
/// what changed. Beside them, outside the hash, the SQL as written where a
/// window in it was lowered ([`AS_WRITTEN`]), which a mismatch shows.
fn view_fingerprint(
    spec: &ViewSpec,
    written: Option<&str>,
    sources: &[crate::paths::SourceInfo],
    plan: &ViewPlan,
    output: &arrow::datatypes::Schema,
) -> (String, BTreeMap<String, String>) {
    let columns = |schema: &arrow::datatypes::Schema| {
        let cols: Vec<String> = schema
            .fields()
            .iter()
            .map(|f| {
                format!(
                    "{} {}{}",
                    f.name(),
                    f.data_type(),
                    if f.is_nullable() { "" } else { " NOT NULL" }
                )
            })
            .collect();
        cols.join(", ")
    };
    let sources = sources
        .iter()
        .map(|s| {
            format!(
                "{} (event time `{}`): {}",
                s.name,
                s.schema.field(s.event_time).name(),
                columns(&s.schema)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut parts: BTreeMap<String, String> = [
        ("name", spec.name.clone()),
        ("sql", spec.sql.clone()),
        ("sources", sources),
        ("window", format!("{:?}", spec.window)),
        ("watermark", format!("{:?}", spec.watermark)),
        ("output mode", format!("{:?}", spec.output)),
        ("plan", plan.to_string()),
        ("output", columns(output)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let text = parts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("|");
    if let Some(w) = written {
        parts.insert(AS_WRITTEN.to_string(), w.to_string());
    }
    (fingerprint(&format!("v3|{text}")), parts)
}

/// The fingerprint part that holds the SQL as written, where a window in it
/// was lowered: not hashed (the `sql` part is, lowered, as the spec form of
/// the same view gives it), shown instead of the `sql` part when that changed.
const AS_WRITTEN: &str = "sql as written";

/// The fingerprint parts stored in `epoch`'s manifest (empty if unreadable).
fn stored_parts(
    store: &BlockingCheckpointStore,
    view: &str,
    epoch: u64,
) -> BTreeMap<String, String> {
    store
        .list(view)
        .ok()
        .and_then(|l| {
            l.epochs.get(&epoch).and_then(|e| match &e.manifest {
                thund_checkpoint::ManifestState::Valid(m) => Some(m.fingerprint_parts.clone()),
                _ => None,
            })
        })
        .unwrap_or_default()
}

/// The parts of a view that differ from a checkpoint's, in words.
fn changed_parts(stored: &BTreeMap<String, String>, now: &BTreeMap<String, String>) -> Vec<String> {
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    // each side from a little before the first character where they differ
    let around = |was: &str, now: &str| -> (String, String) {
        let (was, now) = (flat(was), flat(now));
        let first = was
            .chars()
            .zip(now.chars())
            .take_while(|(a, b)| a == b)
            .count();
        let from = first.saturating_sub(40);
        let cut = |s: &str| {
            let tail: String = s.chars().skip(from).take(100).collect();
            let more = s.chars().count() > from + 100;
            format!(
                "{}{tail}{}",
                if from > 0 { "…" } else { "" },
                if more { "…" } else { "" }
            )
        };
        (cut(&was), cut(&now))
    };
    if stored.is_empty() {
        return vec!["the view (this checkpoint predates per-part fingerprints)".to_string()];
    }
    // the SQL as the user wrote it, where both sides kept it
    let written = |k: &str, v: &'_ str| -> (Option<String>, String) {
        match (k, stored.get(AS_WRITTEN), now.get(AS_WRITTEN)) {
            ("sql", Some(was), Some(now)) => (Some(was.clone()), now.clone()),
            _ => (stored.get(k).cloned(), v.to_string()),
        }
    };
    now.iter()
        .filter(|(k, v)| k.as_str() != AS_WRITTEN && stored.get(*k) != Some(*v))
        .map(|(k, v)| match written(k, v) {
            (Some(was), v) => {
                let (was, now) = around(&was, &v);
                format!("the {k} (was: {was}; now: {now})")
            }
            (None, v) => format!("the {k} (now: {})", around("", &v).1),
        })
        .collect()
}

/// Where a windowed view's output shows its windows ([`Engine::window_columns`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowColumns {
    /// The column showing each row's window start, if the view selects it.
    pub start: Option<String>,
    /// The column showing each row's window end, if the view selects it.
    pub end: Option<String>,
    /// Whether the windows are sessions: a session that grows or merges is a
    /// new window, and Update mode emits no retraction of the old one's rows.
    pub sessions: bool,
}

/// Names a view would give two things: a source column that a window
/// function's bounds (`window_start`, `window_end`) hide from the query, and
/// an output column named as another one (a bound the output adds before
/// the query's columns, Update mode's `final` flag after them, or a bound
/// the query selects under a column's name). Both paths would emit such a
/// view's rows alike, but no reader of the output could tell its columns
/// apart (a CSV header, a database table, the view as a table).
fn check_names(
    spec: &ViewSpec,
    layout: Option<&crate::spec::window_sql::Layout>,
    sources: &[crate::paths::SourceInfo],
    query: &arrow::datatypes::Schema,
) -> Result<()> {
    let v = &spec.name;
    if let Some(call) = layout.and_then(|l| l.call()) {
        for s in sources {
            let hidden = s.schema.fields().iter().find(|f| {
                ["window_start", "window_end", "window_time"]
                    .iter()
                    .any(|b| f.name().eq_ignore_ascii_case(b))
            });
            if let Some(f) = hidden {
                return Err(Error::spec(
                    v,
                    format!(
                        "source `{}` has a column `{}`, the name {call} gives a window bound: \
                         the query could not read that column; rename it in the source",
                        s.name,
                        f.name()
                    ),
                ));
            }
        }
    }
    // the output's names as its rows carry them
    let bound = spec.window.as_ref().map(|_| DataType::Int64);
    let runtime = crate::paths::output_schema(query, bound.as_ref(), spec.output);
    let shown = match layout {
        Some(l) => l.project(&runtime, spec.output).1,
        None => runtime,
    };
    let mut seen = std::collections::HashSet::new();
    for f in shown.fields() {
        let name = f.name();
        if seen.insert(name.as_str()) {
            continue;
        }
        let why = if name == "final" && spec.output == OutputMode::Update {
            "Update mode adds a column `final` (whether the row is final) after the query's \
             columns: rename the query's (AS …)"
                .to_string()
        } else if layout.is_none() && spec.window.is_some() && query.field_with_name(name).is_ok() {
            format!(
                "the output shows the window's bounds first, as `window_start` and \
                 `window_end`: rename the query's `{name}` (AS …)"
            )
        } else if query.fields().iter().filter(|f| f.name() == name).count() > 1 {
            "the query's result has two (from two tables, as `SELECT *` over a join \
             gives): name them apart (AS …)"
                .to_string()
        } else {
            "a window bound is selected under the name of another column: rename one (AS …)"
                .to_string()
        };
        return Err(Error::spec(
            v,
            format!("the output would have two columns named `{name}`: {why}"),
        ));
    }
    Ok(())
}

/// `spec` with a window its SQL declares taken out (the per-window query,
/// the layout of the written query's columns, the query as written), and
/// checked.
fn lowered(
    spec: ViewSpec,
) -> Result<(
    ViewSpec,
    Option<crate::spec::window_sql::Layout>,
    Option<String>,
)> {
    if let Some(m) = crate::spec::nesting::too_many_operators(&spec.sql) {
        return Err(Error::spec(&spec.name, m));
    }
    let (spec, layout, written) = match crate::spec::window_sql::lower(&spec)? {
        Some(l) => (l.spec, Some(l.layout), Some(l.written)),
        None => (spec, None, None),
    };
    spec.validate()?;
    Ok((spec, layout, written))
}
