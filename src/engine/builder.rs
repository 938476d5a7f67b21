//! [`EngineBuilder`]: the engine's settings, with `with_*` setters.

use std::collections::BTreeMap;
use std::sync::Arc;

use thund_checkpoint::BlockingCheckpointStore;

use super::Engine;
use crate::error::{Error, Result};
use crate::state::sidecar::Sidecar;
use crate::watermark::{Clock, SystemClock};

/// Builds an [`Engine`].
///
/// ```
/// let engine = thund::Engine::builder().workers(1).build()?;
/// assert_eq!(engine.epoch(), 0);
/// # Ok::<(), thund::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct EngineBuilder {
    clock: Option<Arc<dyn Clock>>,
    workers: Option<usize>,
    state_root: Option<String>,
    retain: Option<usize>,
    compact_every: Option<usize>,
    rejected_retention: Option<usize>,
    takeover: bool,
    subscriber_buffer: Option<usize>,
    no_tables: bool,
}

impl EngineBuilder {
    /// Processing-time clock for idle timeouts (default: the system clock).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use thund::{Engine, ManualClock};
    ///
    /// let clock = Arc::new(ManualClock::new(0));
    /// let engine = Engine::builder().with_clock(clock.clone()).build()?;
    /// clock.advance(std::time::Duration::from_secs(60)); // idle timeouts now see a minute pass
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Number of timely workers of the engine (default 1): one timely
    /// instance, started with the first incremental view, hosts every
    /// incremental view's dataflow. One worker is stepped on the thread that
    /// pushes and triggers (no thread is started, and nothing crosses between
    /// threads); `n >= 2` run on `n` threads of their own. Data is exchanged
    /// between the workers by key, and results do not depend on their number.
    /// With `n >= 2`, large batches are also pre-aggregated on `n` threads, one
    /// per key shard. At most [`thund_dataflows::MAX_WORKERS`]: more is an
    /// error when the first incremental view is created.
    ///
    /// ```
    /// let engine = thund::Engine::builder().workers(2).build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n.max(1));
        self
    }

    /// Checkpoint to, and resume from, a state root: `file:///abs/path` or
    /// `memory://name` (`s3://` with the `s3` feature of `thund-checkpoint`).
    /// Each view takes a writer lease there; a second engine on the same
    /// root and view is refused.
    ///
    /// ```
    /// let engine = thund::Engine::builder()
    ///     .with_state_root("memory://builder-doc")
    ///     .build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn with_state_root(mut self, url: &str) -> Self {
        self.state_root = Some(url.to_string());
        self
    }

    /// Write a full checkpoint every `n` epochs (default 10); the epochs in
    /// between write only what changed and reference older files. `1`
    /// makes every checkpoint full.
    ///
    /// ```
    /// let engine = thund::Engine::builder()
    ///     .with_state_root("memory://compaction-doc")
    ///     .checkpoint_compaction(1) // every epoch full
    ///     .build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn checkpoint_compaction(mut self, n: usize) -> Self {
        self.compact_every = Some(n.max(1));
        self
    }

    /// Committed epochs kept per view (default 2, at least 1).
    ///
    /// ```
    /// let engine = thund::Engine::builder()
    ///     .with_state_root("memory://retain-doc")
    ///     .retain_epochs(3)
    ///     .build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn retain_epochs(mut self, n: usize) -> Self {
        self.retain = Some(n.max(1));
        self
    }

    /// Entries each view's rejected-row relation keeps (default
    /// [`DEFAULT_REJECTED_RETENTION`](crate::DEFAULT_REJECTED_RETENTION),
    /// 100 000); past it the oldest are dropped and counted in
    /// [`ViewCounters::rejected_rows_evicted`](crate::ViewCounters::rejected_rows_evicted).
    /// [`Engine::drain_late_rows`](crate::Engine::drain_late_rows) empties it.
    ///
    /// ```
    /// let engine = thund::Engine::builder().rejected_row_retention(1_000).build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn rejected_row_retention(mut self, n: usize) -> Self {
        self.rejected_retention = Some(n);
        self
    }

    /// Take each view's writer lease even if another process holds it (an
    /// operator's override, for a lease left by a process that died on
    /// another host, or a garbage lease file). Without it, only a lease of a
    /// dead process on this host is taken over. **Risk:** if the other
    /// writer is in fact alive, both write epochs and the state root is
    /// corrupted; make sure it is gone first.
    ///
    /// ```
    /// let engine = thund::Engine::builder()
    ///     .with_state_root("memory://takeover-doc")
    ///     .force_takeover(true)
    ///     .build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn force_takeover(mut self, force: bool) -> Self {
        self.takeover = force;
        self
    }

    /// How many triggers' changes the engine keeps for each view's
    /// subscribers (default 64, at least 1): a subscriber further behind is
    /// told it lagged and resumes from the view's contents (see
    /// [`crate::Subscription`]). The rows are held once for all subscribers.
    ///
    /// ```
    /// let engine = thund::Engine::builder().subscriber_buffer(8).build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn subscriber_buffer(mut self, triggers: usize) -> Self {
        self.subscriber_buffer = Some(triggers);
        self
    }

    /// Whether views are kept as tables (default `true`): with `false` the
    /// engine keeps no contents (nothing to maintain per trigger, nothing in
    /// checkpoints), so `query`, `lookup` and `contents` are errors and a
    /// subscriber that falls behind the buffer is ended instead of given the
    /// contents. Subscriptions work either way.
    ///
    /// ```
    /// let engine = thund::Engine::builder().tables(false).build()?;
    /// # drop(engine);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn tables(mut self, keep: bool) -> Self {
        self.no_tables = !keep;
        self
    }

    /// Build the engine; a state root is opened here (a bad URL is an error now).
    ///
    /// ```
    /// let err = thund::Engine::builder().with_state_root("ftp://nope").build();
    /// assert!(matches!(err, Err(thund::Error::Checkpoint { .. })));
    /// ```
    pub fn build(self) -> Result<Engine> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let (store, sidecar) = match &self.state_root {
            None => (None, None),
            Some(url) => {
                let mut store = BlockingCheckpointStore::open(url)
                    .map_err(|e| Error::checkpoint(format!("state root {url}"), e))?;
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
            cluster: None,
            takeover: if self.takeover {
                thund_checkpoint::Takeover::Force
            } else {
                thund_checkpoint::Takeover::IfStale
            },
            rejected_retention: self
                .rejected_retention
                .unwrap_or(super::rejected::DEFAULT_REJECTED_RETENTION),
            tables: crate::table::Tables::new(),
            subscriber_buffer: self.subscriber_buffer.unwrap_or(64).max(1),
            keep_tables: !self.no_tables,
        })
    }
}
