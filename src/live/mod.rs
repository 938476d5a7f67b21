//! The live runner: an [`Engine`] driven by async sources and a
//! processing-time clock, the way Spark Structured Streaming runs a query on
//! a trigger interval.
//!
//! [`Live`] reads every source (a [`Stream`] of Arrow batches) as batches
//! arrive, pushes them, and triggers
//! - every [`Live::trigger_interval`] of processing time (default 1 s; an
//!   interval fires whether or not rows came, so idle timeouts and the
//!   clock-assisted watermark move W), and/or
//! - as soon as [`Live::trigger_every_rows`] rows arrived since the last trigger.
//!
//! With a state root it checkpoints every [`Live::checkpoint_every`]
//! triggers (default every trigger). It stops when
//! - the `shutdown` future given to [`Live::run`] completes (Ctrl-C, say):
//!   the rows already received are triggered, and that last trigger is
//!   checkpointed before `run` returns;
//! - every source ended: the end of the stream (W = +∞, every window
//!   closes), unless [`Live::finish_at_end`] is off, when it keeps
//!   triggering on the interval until shutdown;
//! - a source fails or a batch is refused: what was accepted before it is
//!   triggered and checkpointed, and the [`Outcome`] names the source and why.
//!
//! **Replay.** The runner numbers each source's rows from where the engine's
//! checkpoint left it ([`Engine::source_offset`]) and pushes every batch with
//! its offset, so a restarted program resumes exactly once by starting each
//! source at `engine.source_offset(name)` rows (a Kafka offset, a file
//! position, …): the rows after the last checkpoint are read again and
//! nothing before it twice.
//!
//! **Clocks.** Triggers run on tokio's clock. The engine measures idleness
//! with its own [`Clock`]; build it with [`TokioClock`] so both
//! read one clock, which tokio's test clock (`tokio::time::pause`) then
//! drives deterministically.
//!
//! The [`Engine`] is a blocking API (it runs DataFusion on a runtime of its
//! own): build it and declare its views outside any async runtime, then
//! hand it to [`Live`].
//!
//! **Threads.** Pushes and triggers run on tokio's blocking pool
//! (`spawn_blocking`), never on the runtime's worker threads. The
//! `on_trigger` callback runs on the task that awaits [`Live::run`].
//!
//! ```
//! # use std::{sync::Arc, time::Duration};
//! # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
//! # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
//! # use thund::{Engine, ViewSpec, WindowSpec, live::{Live, Stopped, TokioClock}};
//! # let schema = Arc::new(Schema::new(vec![
//! #     Field::new("auction", DataType::Int64, false),
//! #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
//! # ]));
//! # let bids = |a: Vec<i64>, t: Vec<Option<i64>>| RecordBatch::try_new(schema.clone(), vec![
//! #     Arc::new(Int64Array::from(a)), Arc::new(TimestampMillisecondArray::from(t))]).unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()?;
//! // the engine is a blocking API: build it outside the runtime, with the runtime's clock
//! let clock = { let _in = rt.enter(); TokioClock::new() };
//! let mut engine = Engine::builder().with_clock(Arc::new(clock)).build()?;
//! engine.create_view(
//!     ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
//!         .source("bids", "ts", schema.clone())
//!         .window(WindowSpec::tumbling(Duration::from_secs(10)))
//!         .build()?,
//! )?;
//! let batches = vec![bids(vec![1, 1], vec![Some(1_000), Some(2_000)]), bids(vec![2], vec![Some(12_000)])];
//! let outcome = rt.block_on(
//!     Live::new(engine)
//!         .source("bids", futures::stream::iter(batches))
//!         .trigger_interval(Duration::from_millis(500))
//!         .run(std::future::pending()),
//! )?;
//! assert_eq!(outcome.stopped, Stopped::SourcesEnded);
//! assert_eq!(outcome.rows_out, 2); // [0 s, 10 s) and, at the end, [10 s, 20 s)
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::time::Duration;

use arrow::array::RecordBatch;
use futures::stream::{BoxStream, Stream, StreamExt};

use crate::engine::{Engine, TriggerReport};
use crate::error::{Error, Result};
use crate::watermark::Clock;

/// Processing time read from tokio's clock, in Unix milliseconds: real time
/// normally, and under `tokio::time::pause` the test's virtual time.
///
/// It reads the clock of the runtime it was made in (make it inside the
/// runtime, or under `rt.enter()`), from any thread: the engine reads it
/// on the blocking pool. Made outside any runtime it reads real time.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base_ms: i64,
    base: tokio::time::Instant,
    runtime: Option<tokio::runtime::Handle>,
}

impl TokioClock {
    /// A clock that reads the system time now and moves with the current
    /// runtime's clock.
    pub fn new() -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        let base = {
            let _in = runtime.as_ref().map(|h| h.enter());
            tokio::time::Instant::now()
        };
        TokioClock {
            base_ms: crate::watermark::SystemClock.now_ms(),
            base,
            runtime,
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        let now = {
            let _in = self.runtime.as_ref().map(|h| h.enter());
            tokio::time::Instant::now()
        };
        let gone = now.saturating_duration_since(self.base);
        self.base_ms
            .saturating_add(i64::try_from(gone.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Why [`Live::run`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The shutdown future completed; the last trigger was checkpointed.
    Shutdown,
    /// Every source ended and the end of the stream was triggered.
    SourcesEnded,
    /// A source's stream yielded an error, or the engine refused one of its
    /// batches (the engine kept what it had accepted before it).
    SourceFailed {
        /// The source.
        source: String,
        /// The number of the batch (from 1, of this run) that failed.
        batch: u64,
        /// What went wrong.
        message: String,
    },
}

/// What a [`Live::run`] did, with the engine back to read or run again.
pub struct Outcome {
    /// The engine, as of the last trigger.
    pub engine: Engine,
    /// Why the run stopped.
    pub stopped: Stopped,
    /// Triggers this run took (the end of the stream included).
    pub triggers: u64,
    /// Checkpoints this run queued (all committed when `run` returns).
    pub checkpoints: u64,
    /// Rows pushed, over all sources.
    pub rows_in: u64,
    /// Rows the triggers emitted, over all views.
    pub rows_out: u64,
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outcome")
            .field("stopped", &self.stopped)
            .field("triggers", &self.triggers)
            .field("checkpoints", &self.checkpoints)
            .field("rows_in", &self.rows_in)
            .field("rows_out", &self.rows_out)
            .finish_non_exhaustive()
    }
}

type Source = (
    String,
    BoxStream<'static, std::result::Result<RecordBatch, String>>,
);
type OnTrigger = Box<dyn FnMut(&TriggerReport) -> Result<()> + Send>;

/// An engine run live: see the [module docs](self).
pub struct Live {
    engine: Engine,
    sources: Vec<Source>,
    interval: Duration,
    every_rows: Option<u64>,
    checkpoint_every: u64,
    finish_at_end: bool,
    on_trigger: Option<OnTrigger>,
}

impl Live {
    /// A runner for `engine`, whose views are declared already.
    pub fn new(engine: Engine) -> Self {
        Live {
            engine,
            sources: Vec::new(),
            interval: Duration::from_secs(1),
            every_rows: None,
            checkpoint_every: 1,
            finish_at_end: true,
            on_trigger: None,
        }
    }

    /// Feed source `name` from `batches`.
    pub fn source(
        self,
        name: &str,
        batches: impl Stream<Item = RecordBatch> + Send + 'static,
    ) -> Self {
        self.try_source(name, batches.map(Ok::<_, std::convert::Infallible>))
    }

    /// Feed source `name` from a stream that can fail; an error stops the
    /// run ([`Stopped::SourceFailed`]) after what came before it is triggered.
    pub fn try_source<E: std::fmt::Display>(
        mut self,
        name: &str,
        batches: impl Stream<Item = std::result::Result<RecordBatch, E>> + Send + 'static,
    ) -> Self {
        self.sources.push((
            name.to_string(),
            batches.map(|b| b.map_err(|e| e.to_string())).boxed(),
        ));
        self
    }

    /// Trigger every `every` of processing time (default 1 s); zero turns
    /// the interval off (then [`Self::trigger_every_rows`] is needed).
    pub fn trigger_interval(mut self, every: Duration) -> Self {
        self.interval = every;
        self
    }

    /// Also trigger as soon as `rows` rows (over all sources) arrived since
    /// the last trigger.
    pub fn trigger_every_rows(mut self, rows: u64) -> Self {
        self.every_rows = Some(rows);
        self
    }

    /// With a state root, checkpoint every `n` triggers (default 1); the
    /// last trigger of a run is always checkpointed. Zero is refused by `run`.
    pub fn checkpoint_every(mut self, n: u64) -> Self {
        self.checkpoint_every = n;
        self
    }

    /// Whether the end of every source is the end of the stream (default
    /// true: W = +∞ and every window closes). Off, the runner goes on
    /// triggering on the interval until shutdown — the case the
    /// clock-assisted watermark (`advance_when_idle`) is for.
    pub fn finish_at_end(mut self, on: bool) -> Self {
        self.finish_at_end = on;
        self
    }

    /// Call `f` with every trigger's report, before the trigger is
    /// checkpointed; an error from `f` stops the run with that error, and
    /// that trigger is not checkpointed.
    pub fn on_trigger(
        mut self,
        f: impl FnMut(&TriggerReport) -> Result<()> + Send + 'static,
    ) -> Self {
        self.on_trigger = Some(Box::new(f));
        self
    }

    /// Run until `shutdown` completes or the sources end (see the
    /// [module docs](self)). An error of the engine (a failed trigger or
    /// checkpoint) or of `on_trigger` is returned as is; the engine is then
    /// dropped, and a restart resumes from the last committed checkpoint.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<Outcome> {
        let Live {
            engine,
            sources,
            interval,
            every_rows,
            checkpoint_every,
            finish_at_end,
            on_trigger,
        } = self;
        let mut run = Running {
            checkpointing: engine.has_state_root(),
            engine: Some(engine),
            checkpoint_every,
            since_checkpoint: 0,
            triggers: 0,
            checkpoints: 0,
            rows_in: 0,
            rows_out: 0,
            on_trigger,
        };
        match run
            .go(sources, interval, every_rows, finish_at_end, shutdown)
            .await
        {
            Ok(stopped) => Ok(Outcome {
                engine: run.engine.take().ok_or_else(lost)?,
                stopped,
                triggers: run.triggers,
                checkpoints: run.checkpoints,
                rows_in: run.rows_in,
                rows_out: run.rows_out,
            }),
            Err(e) => {
                // the engine owns runtimes, which must not be dropped on an
                // async task: drop it on the blocking pool
                if let Some(engine) = run.engine.take() {
                    let _ = tokio::task::spawn_blocking(move || drop(engine)).await;
                }
                Err(e)
            }
        }
    }
}

fn lost() -> Error {
    Error::Live("the engine was lost: a blocking call panicked".into())
}

/// The engine between blocking calls, and the run's counts.
struct Running {
    engine: Option<Engine>,
    checkpointing: bool,
    checkpoint_every: u64,
    since_checkpoint: u64,
    triggers: u64,
    checkpoints: u64,
    rows_in: u64,
    rows_out: u64,
    on_trigger: Option<OnTrigger>,
}

impl Running {
    fn engine(&self) -> Result<&Engine> {
        self.engine.as_ref().ok_or_else(lost)
    }

    /// The run itself; the engine stays in `self` whatever happens.
    async fn go(
        &mut self,
        sources: Vec<Source>,
        interval: Duration,
        every_rows: Option<u64>,
        finish_at_end: bool,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Stopped> {
        let engine = self.engine()?;
        let views = engine.views().join(", ");
        if sources.is_empty() {
            return Err(Error::Live(format!(
                "no sources: add one per source of the views ({views})"
            )));
        }
        if interval.is_zero() && every_rows.is_none() {
            return Err(Error::Live(
                "nothing triggers: set trigger_interval above zero or trigger_every_rows".into(),
            ));
        }
        if every_rows == Some(0) {
            return Err(Error::Live("trigger_every_rows(0): give at least 1".into()));
        }
        if self.checkpoint_every == 0 {
            return Err(Error::Live("checkpoint_every(0): give at least 1".into()));
        }
        for (i, (name, _)) in sources.iter().enumerate() {
            if sources[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::Live(format!("source `{name}` is fed twice")));
            }
            // a source no view reads is the engine's typed error
            engine.event_time_domain(name)?;
        }
        let names: Vec<String> = sources.iter().map(|(n, _)| n.clone()).collect();
        let mut offsets: Vec<u64> = names
            .iter()
            .map(|n| engine.source_offset(n).unwrap_or(0))
            .collect();
        let mut batches_seen = vec![0u64; names.len()];
        let mut open = sources.len();
        let mut merged =
            futures::stream::select_all(sources.into_iter().enumerate().map(|(i, (_, s))| {
                s.map(move |b| (i, Some(b)))
                    .chain(futures::stream::once(async move { (i, None) }))
                    .boxed()
            }));
        // an interval past the clock's range never fires (no panic on overflow)
        let first = tokio::time::Instant::now().checked_add(interval);
        let mut ticks = first.filter(|_| !interval.is_zero()).map(|at| {
            let mut t = tokio::time::interval_at(at, interval);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let mut since_trigger = 0u64;
        tokio::pin!(shutdown);
        let stopped = loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break Stopped::Shutdown,
                _ = async {
                    match ticks.as_mut() {
                        Some(t) => t.tick().await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.trigger(false).await?;
                    since_trigger = 0;
                }
                item = merged.next(), if open > 0 => match item {
                    Some((i, Some(Ok(batch)))) => {
                        batches_seen[i] += 1;
                        let rows = batch.num_rows() as u64;
                        let name = names[i].clone();
                        let at = offsets[i] + rows;
                        let pushed = self.blocking(move |e| e.push_at(&name, batch, at)).await?;
                        if let Err(e) = pushed {
                            break Stopped::SourceFailed {
                                source: names[i].clone(),
                                batch: batches_seen[i],
                                message: e.to_string(),
                            };
                        }
                        offsets[i] = at;
                        self.rows_in += rows;
                        since_trigger += rows;
                        if every_rows.is_some_and(|n| since_trigger >= n) {
                            self.trigger(false).await?;
                            since_trigger = 0;
                        }
                    }
                    Some((i, Some(Err(message)))) => {
                        break Stopped::SourceFailed {
                            source: names[i].clone(),
                            batch: batches_seen[i] + 1,
                            message,
                        };
                    }
                    Some((_, None)) | None => {
                        open -= 1;
                        if open == 0 && finish_at_end {
                            break Stopped::SourcesEnded;
                        }
                    }
                }
            }
        };
        // the last trigger of the run, always checkpointed
        self.since_checkpoint = self.checkpoint_every.saturating_sub(1);
        self.trigger(stopped == Stopped::SourcesEnded).await?;
        if self.checkpointing {
            self.blocking(|e| e.sync_checkpoints()).await??;
        }
        Ok(stopped)
    }

    /// Run `f` on the engine on tokio's blocking pool.
    async fn blocking<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Engine) -> T + Send + 'static,
    ) -> Result<T> {
        let mut engine = self.engine.take().ok_or_else(lost)?;
        let (engine, out) = tokio::task::spawn_blocking(move || {
            let out = f(&mut engine);
            (engine, out)
        })
        .await
        .map_err(|e| Error::Live(format!("a blocking engine call failed: {e}")))?;
        self.engine = Some(engine);
        Ok(out)
    }

    /// One trigger (the end of the stream when `finishing`), its callback,
    /// and its checkpoint when one is due.
    async fn trigger(&mut self, finishing: bool) -> Result<()> {
        let report = self
            .blocking(move |e| if finishing { e.finish() } else { e.trigger() })
            .await??;
        self.triggers += 1;
        self.rows_out += report
            .views
            .iter()
            .map(|v| v.output_rows() as u64)
            .sum::<u64>();
        if let Some(f) = self.on_trigger.as_mut() {
            f(&report)?;
        }
        self.since_checkpoint += 1;
        if self.checkpointing && self.since_checkpoint >= self.checkpoint_every {
            self.blocking(|e| e.checkpoint(serde_json::Value::Null))
                .await??;
            self.checkpoints += 1;
            self.since_checkpoint = 0;
        }
        Ok(())
    }
}
