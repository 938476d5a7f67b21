//! The host-side handle on a running windowed-aggregate dataflow: [`WindowedAggregate`].

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::cluster::{Cluster, Links};
use super::worker::{lower, next_time, out_of_turn, Chunk, Command, DataflowId, Reply};
use crate::error::{Error, Result};
use crate::state::agg::{AggKind, AggState, Update};
use crate::state::diff::Acc;
use crate::state::open::{fold_closed, MAX_SPARE};
use crate::time::{event_time, start_of, Time};
use crate::typedefs::{owner_hash, WindowKey};
use crate::window::{expiry, EventTime, Key, Panes, Window};

/// What to run: how many worker threads, and which aggregates each `(window, key)` keeps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Number of timely worker threads (`timely::Config::process(workers)`); at least 1.
    pub workers: usize,
    /// The aggregates, in the order of [`Update::aggs`].
    pub aggs: Vec<AggKind>,
    /// With panes, inserted and restored updates are panes of this geometry and the
    /// dataflow derives the windows (see [`Panes`]); without, they are windows.
    pub panes: Option<Panes>,
    /// Whether the workers keep the arrangement's trace (on by default): what
    /// [`WindowedAggregate::begin_snapshot`] reads. Without it the open-window table is the
    /// whole state: the workers build no arrangement (no batcher, no merges, no retractions
    /// that evict closed windows) and fold each contribution into the table as it arrives
    /// (see [`Config::without_trace`]).
    pub trace: bool,
}

impl Config {
    /// One worker, the given aggregates.
    pub fn new(aggs: Vec<AggKind>) -> Self {
        Config {
            workers: 1,
            aggs,
            panes: None,
            trace: true,
        }
    }

    /// Keeps no trace: for a dataflow that is never snapshot (a view without
    /// checkpoints), which then costs no arrangement: contributions are exchanged to their
    /// owners and folded into the open-window table directly. A snapshot of it is
    /// [`Error::InvalidConfig`], and [`WindowedAggregate::state_size`] counts the open
    /// `(window, key)`s (and panes) the workers hold instead of trace records.
    pub fn without_trace(mut self) -> Self {
        self.trace = false;
        self
    }

    /// Takes pane updates of this geometry (see [`Panes`]).
    pub fn with_panes(mut self, panes: Panes) -> Self {
        self.panes = Some(panes);
        self
    }

    /// Sets the number of worker threads.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }
}

/// The outcome of one [`WindowedAggregate::advance_to`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// The output frontier after the step: every time before it is complete.
    pub frontier: EventTime,
    /// Windows with `end <= frontier` that closed in this step, with their final states,
    /// sorted by `(window, key)`. Each `(window, key)` closes exactly once over the life of
    /// the dataflow.
    pub closed: Vec<Update>,
    /// `(window, key)`s of still-open windows whose state changed since the previous step,
    /// with their current (provisional) states, sorted by `(window, key)`.
    pub changed: Vec<Update>,
    /// With [`Config::panes`]: the `(pane, key)`s whose state changed since the previous
    /// step and whose last window is still open, with their current states (what a
    /// checkpoint of the changes saves; [`WindowedAggregate::restore`] takes them back).
    /// Empty without panes, where `changed` is that, and without a trace
    /// ([`Config::without_trace`]), which no checkpoint reads.
    pub changed_panes: Vec<Update>,
}

/// The size of one arrangement on one worker, as of the last step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrangementSize {
    /// The worker's index.
    pub worker: usize,
    /// The arrangement's name.
    pub name: &'static str,
    /// Update records held in its trace's batches.
    pub records: usize,
}

/// Handle to a running windowed-aggregate dataflow on timely worker threads.
///
/// The handle is `Send` (not `Sync`): it may move between threads; its methods take
/// `&mut self` where they talk to the workers.
///
/// Timestamps are event time. The host inserts pre-aggregated [`Update`]s at the current
/// input time, then advances every worker's input to the watermark `w` with
/// [`advance_to`](Self::advance_to); windows with `end <= w` close, and their final states
/// come back exactly once.
///
/// ```
/// use thund_dataflows::{AggKind, AggState, Config, Update, Value, WindowedAggregate, Window};
///
/// let mut df = WindowedAggregate::spawn(Config::new(vec![AggKind::SumInt]))?;
/// let up = |s, v| Update {
///     window: Window::new(s, s + 10),
///     key: 7,
///     aggs: vec![AggState::from_value(AggKind::SumInt, Value::Int(v))],
/// };
/// df.insert(vec![up(0, 1), up(0, 2), up(10, 5)])?;
/// let step = df.advance_to(10)?;          // [0, 10) closes
/// assert_eq!(step.frontier, 10);
/// assert_eq!(step.closed.len(), 1);
/// assert_eq!(step.closed[0].aggs[0].value, Value::Int(3));
/// assert_eq!(step.changed[0].window, Window::new(10, 20));
/// let step = df.advance_to(i64::MAX)?;    // end of stream: everything closes
/// assert_eq!(step.closed[0].aggs[0].value, Value::Int(5));
/// # Ok::<(), thund_dataflows::Error>(())
/// ```
pub struct WindowedAggregate {
    config: Config,
    /// The worker threads this dataflow runs on, and its identifier there.
    cluster: Cluster,
    id: DataflowId,
    /// The current input time of every worker.
    time: Time,
    /// The output frontier after the last step (`None`: the stream ended).
    frontier: Option<Time>,
    /// Each worker's arrangement sizes after the last step.
    sizes: Vec<Vec<(&'static str, usize)>>,
    /// Each worker's open `(window, key)`s after the last step.
    open_groups: Vec<usize>,
    /// Updates inserted since the last step, by the worker that owns them, stamped with
    /// the input's time; sent at the next step.
    pending: Vec<Vec<(WindowKey, Time, Acc)>>,
    /// Changes observed by internal steps (snapshots), owed to the next `advance_to`.
    owed: BTreeMap<(Window, Key), Vec<AggState>>,
    /// The same for panes.
    owed_panes: BTreeMap<(Window, Key), Vec<AggState>>,
    /// The error that made the dataflow unusable.
    poisoned: Option<Error>,
    /// Whether steps report the open states that changed (see
    /// [`report_changes`](Self::report_changes)).
    report_changes: bool,
    /// State vectors handed back by [`recycle`](Self::recycle), for the workers to fill
    /// at the next step.
    spare: Vec<Vec<AggState>>,
    /// Open windows some worker received contributions of, as `(end, start)`: a window
    /// not among them that closes at a step is folded on the host (see
    /// [`close_fresh`](Self::close_fresh)).
    held: BTreeSet<(EventTime, EventTime)>,
    /// The closed windows a step folded on the host, sorted, for `advance_to`.
    fresh_closed: Vec<Update>,
}

impl std::fmt::Debug for WindowedAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowedAggregate")
            .field("config", &self.config)
            .field("frontier", &self.frontier())
            .field("state_size", &self.state_size())
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl WindowedAggregate {
    /// Starts a [`Cluster`] of its own with `config.workers` workers
    /// ([`Cluster::for_workers`]: one is stepped on the caller's thread, more run on threads
    /// of their own) and renders the dataflow there. The input time (and the frontier)
    /// starts at `EventTime::MIN`.
    pub fn spawn(config: Config) -> Result<Self> {
        let cluster = Cluster::for_workers(config.workers)?;
        Self::spawn_on(&cluster, config)
    }

    /// Renders the dataflow on the worker threads of `cluster`, beside whatever else runs
    /// there. `config.workers` must equal [`Cluster::workers`]. The input time (and the
    /// frontier) starts at `EventTime::MIN`.
    pub fn spawn_on(cluster: &Cluster, config: Config) -> Result<Self> {
        if config.workers != cluster.workers() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "the dataflow asks for {} workers, its cluster runs {}",
                    config.workers,
                    cluster.workers()
                ),
            });
        }
        if cluster.aborted() {
            return Err(Error::WorkerPanicked { worker: 0 });
        }
        let n = config.workers;
        let id = cluster.next_id();
        let mut df = WindowedAggregate {
            pending: vec![Vec::new(); n],
            cluster: cluster.clone(),
            id,
            time: Time::MIN,
            frontier: Some(Time::MIN),
            sizes: vec![Vec::new(); n],
            open_groups: vec![0; n],
            owed: BTreeMap::new(),
            owed_panes: BTreeMap::new(),
            poisoned: None,
            report_changes: true,
            spare: Vec::new(),
            held: BTreeSet::new(),
            fresh_closed: Vec::new(),
            config,
        };
        let (kinds, panes, trace) = (df.config.aggs.clone(), df.config.panes, df.config.trace);
        let replies = df.round(|_| Command::Build {
            id,
            kinds: kinds.clone(),
            panes,
            trace,
        })?;
        for (worker, reply) in replies.into_iter().enumerate() {
            if !matches!(reply, Reply::Built) {
                return Err(df.unexpected(worker, reply));
            }
        }
        Ok(df)
    }

    /// Starts a dataflow whose input (and frontier) is at `at`, holding `state`: the
    /// updates returned by [`snapshot`](Self::snapshot), from any number of workers.
    ///
    /// The updates are re-inserted at `at` and re-partitioned by key, so `config.workers`
    /// may differ from the snapshotted dataflow's. Restored states are not reported as
    /// `changed` by the next step (they were reported before the snapshot). An update whose
    /// window ended at or before `at` is [`Error::Late`].
    pub fn restore(config: Config, at: EventTime, state: Vec<Update>) -> Result<Self> {
        let cluster = Cluster::for_workers(config.workers)?;
        Self::restore_on(&cluster, config, at, state)
    }

    /// [`restore`](Self::restore) on the worker threads of `cluster` (see
    /// [`spawn_on`](Self::spawn_on)).
    pub fn restore_on(
        cluster: &Cluster,
        config: Config,
        at: EventTime,
        state: Vec<Update>,
    ) -> Result<Self> {
        let mut df = Self::spawn_on(cluster, config)?;
        if at == EventTime::MAX {
            if let Some(u) = state.first() {
                return Err(Error::Late {
                    window: u.window,
                    frontier: at,
                });
            }
            df.advance_to(at)?;
            return Ok(df);
        }
        if at > EventTime::MIN {
            df.advance_to(at)?;
        }
        df.insert(state)?;
        // Seal the restored states into the traces now, so a snapshot taken right away sees
        // them; their "changes" are not news to the caller.
        df.step(Some(df.next_time()?))?;
        df.owed.clear();
        df.owed_panes.clear();
        Ok(df)
    }

    /// Whether [`advance_to`](Self::advance_to) reports the open states that changed
    /// ([`Step::changed`], [`Step::changed_panes`]; on by default). A caller that only
    /// reads closed windows turns it off: the workers then neither track nor send them.
    /// Changes made while it was off are not reported once it is back on.
    pub fn report_changes(&mut self, on: bool) {
        self.report_changes = on;
    }

    /// The configuration this dataflow runs.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Inserts updates at the current input time.
    ///
    /// The caller drops late rows first: an update whose `window.end <= frontier()` is
    /// [`Error::Late`]. Updates are validated before anything is sent (a wrong number of
    /// states is [`Error::Arity`], a state of the wrong type [`Error::InvalidState`], a window
    /// with `start >= end` [`Error::InvalidWindow`]); on any of these errors nothing of the
    /// call is applied.
    ///
    /// Updates are routed to the worker that owns their `(window, key)` and enter its input
    /// at the next step; updates of one `(window, key)` are summed there (by the
    /// arrangement's consolidation, or the fold into the open windows without a trace).
    /// A window none of whose updates reached a worker and that the next step closes is
    /// summed on the caller's thread instead (the same states, without the round trip),
    /// so callers should pre-aggregate (see
    /// [`crate::PreAggregator`]): the dataflow's cost is per update. An `i128` overflow of such a
    /// sum is [`Error::Overflow`] from the next step, and poisons the dataflow.
    pub fn insert(&mut self, updates: Vec<Update>) -> Result<()> {
        self.check_usable()?;
        let frontier = self.frontier();
        for u in &updates {
            self.validate(u.window, &u.aggs, frontier)?;
        }
        self.reserve(updates.len());
        for u in updates {
            self.route(u.window, u.key, &u.aggs);
        }
        Ok(())
    }

    /// [`insert`](Self::insert) in a flat layout: `groups[i]`'s states are
    /// `states[i * m..(i + 1) * m]` for the `m` aggregates of the configuration (a length
    /// other than `groups.len() * m` is [`Error::Arity`]). The same checks, and no
    /// allocation per update.
    pub fn insert_states(&mut self, groups: &[(Window, Key)], states: &[AggState]) -> Result<()> {
        self.check_usable()?;
        let m = self.config.aggs.len();
        if states.len() != groups.len().saturating_mul(m) {
            return Err(Error::Arity {
                window: groups.first().map_or(Window::new(0, 0), |g| g.0),
                expected: groups.len().saturating_mul(m),
                found: states.len(),
            });
        }
        let frontier = self.frontier();
        self.reserve(groups.len());
        let each = || groups.iter().zip(states.chunks_exact(m.max(1)));
        if m > 0 {
            for (&(window, _), aggs) in each() {
                self.validate(window, aggs, frontier)?;
            }
            for (&(window, key), aggs) in each() {
                self.route(window, key, aggs);
            }
        } else {
            for &(window, key) in groups {
                self.validate(window, &[], frontier)?;
                self.route(window, key, &[]);
            }
        }
        Ok(())
    }

    /// Queues one validated update for the worker that owns it. The arrangement (or the
    /// fold without one) exchanges by this hash (`hash % peers`): sending each update to
    /// its owner keeps the exchange local. Any other choice would also be correct.
    fn route(&mut self, window: Window, key: Key, aggs: &[AggState]) {
        let n = self.pending.len() as u64;
        let owner = if n == 1 {
            0
        } else {
            let by_key = self.config.panes.is_some();
            (owner_hash(&(window, key), by_key) % n) as usize
        };
        let acc = Acc::insert(&self.config.aggs, aggs);
        self.pending[owner].push(((window, key), self.time, acc));
    }

    /// Room for `n` more updates, each worker's share (routing spreads keys about evenly),
    /// so a step's updates are not moved again and again as the vectors grow.
    fn reserve(&mut self, n: usize) {
        let share = n / self.pending.len() + n / 8 + 16;
        for p in &mut self.pending {
            p.reserve(share);
        }
    }

    /// Whether updates wait for the next step.
    fn has_pending(&self) -> bool {
        self.pending.iter().any(|p| !p.is_empty())
    }

    fn validate(&self, window: Window, aggs: &[AggState], frontier: EventTime) -> Result<()> {
        if window.start >= window.end {
            return Err(Error::InvalidWindow { window });
        }
        if expiry(self.config.panes, window) <= frontier {
            return Err(Error::Late { window, frontier });
        }
        if aggs.len() != self.config.aggs.len() {
            return Err(Error::Arity {
                window,
                expected: self.config.aggs.len(),
                found: aggs.len(),
            });
        }
        for (kind, state) in self.config.aggs.iter().zip(aggs) {
            // (the empty state is every kind's: most of a wide entry's are)
            if *state != AggState::EMPTY {
                state.validate(*kind)?;
            }
        }
        Ok(())
    }

    /// Advances every worker's input to the watermark `w` and runs until every worker's
    /// output frontier has passed it; returns the windows that closed (`end <= w`) and the
    /// open states that changed.
    ///
    /// `w` must not be below [`frontier`](Self::frontier) ([`Error::WatermarkRegressed`]).
    /// `w` equal to the frontier is a step that does not move time: it reports the changes
    /// of the rows inserted since the last step and closes nothing. `EventTime::MAX` is the
    /// end of stream: the inputs close and every window closes; later calls with
    /// `EventTime::MAX` return empty steps.
    ///
    /// After it returns, `frontier() == w`.
    pub fn advance_to(&mut self, w: EventTime) -> Result<Step> {
        self.check_usable()?;
        let frontier = self.frontier();
        if w < frontier {
            return Err(Error::WatermarkRegressed {
                requested: w,
                frontier,
            });
        }
        if self.frontier.is_none() {
            return Ok(Step {
                frontier,
                ..Step::default()
            });
        }
        let target = if w == EventTime::MAX {
            None
        } else if w > frontier {
            Some(start_of(w))
        } else {
            Some(self.next_time()?)
        };
        let (closed, changed, changed_panes) = self.step(target)?;
        // each (window, key) closes once: the sort alone; the windows folded on the host
        // are others
        let closed = merge_sorted(
            sorted_latest(closed),
            std::mem::take(&mut self.fresh_closed),
        );
        if !self.owed.is_empty() {
            for u in &closed {
                self.owed.remove(&(u.window, u.key));
            }
        }
        let changed = with_owed(&mut self.owed, changed);
        let now = self.frontier();
        let panes = self.config.panes;
        self.owed_panes
            .retain(|(pane, _), _| expiry(panes, *pane) > now);
        let changed_panes = with_owed(&mut self.owed_panes, changed_panes);
        Ok(Step {
            frontier: now,
            closed,
            changed,
            changed_panes,
        })
    }

    /// Takes back a state vector of a [`Step`] the caller is done with: the workers fill
    /// it again at a later step instead of allocating one (and the caller's thread does not
    /// free memory the workers' threads allocated, which general-purpose allocators make
    /// costly). Optional: a step's vectors may as well be dropped.
    pub fn recycle(&mut self, mut states: Vec<AggState>) {
        if states.capacity() >= self.config.aggs.len()
            && states.capacity() > 0
            && self.spare.len() < MAX_SPARE * self.config.workers
        {
            states.clear();
            self.spare.push(states);
        }
    }

    /// [`recycle`](Self::recycle) for every state vector of `step`.
    pub fn recycle_step(&mut self, step: Step) {
        let n = step.closed.len() + step.changed.len() + step.changed_panes.len();
        let room = (MAX_SPARE * self.config.workers).saturating_sub(self.spare.len());
        self.spare.reserve(n.min(room));
        for u in step
            .closed
            .into_iter()
            .chain(step.changed)
            .chain(step.changed_panes)
        {
            self.recycle(u.aggs);
        }
    }

    /// The time of a step that does not move the watermark.
    fn next_time(&self) -> Result<Time> {
        next_time(self.time)
    }

    /// Runs one step to `target` (`None`: end of stream) on every worker; returns the closed
    /// and changed updates (unsorted) and records frontier and state sizes.
    #[allow(clippy::type_complexity)]
    fn step(&mut self, target: Option<Time>) -> Result<(Vec<Update>, Vec<Update>, Vec<Update>)> {
        let (id, changes) = (self.id, self.report_changes);
        let fresh = match target {
            Some(t) if event_time(t) > self.frontier() => self.close_fresh(event_time(t)),
            _ => Ok(Vec::new()),
        };
        // the spare state vectors, shared out among the workers
        let n = self.config.workers;
        let mut spare = std::mem::take(&mut self.spare);
        let mut shares: Vec<Vec<Vec<AggState>>> = (0..n)
            .rev()
            .map(|w| spare.split_off(spare.len() * w / n))
            .collect();
        shares.reverse();
        let replies = self.round(|w| match target {
            Some(t) => Command::Advance(id, t, changes, std::mem::take(&mut shares[w])),
            None => Command::Finish(id),
        })?;
        let mut closed = Vec::new();
        let mut changed = Vec::new();
        let mut changed_panes = Vec::new();
        let mut first_error = None;
        let mut frontier: Option<Time> = None;
        for (w, reply) in replies.into_iter().enumerate() {
            match reply {
                Reply::Stepped {
                    out,
                    frontier: f,
                    sizes,
                    open_groups,
                    error,
                } => {
                    // one worker's vectors are taken whole, not copied
                    for (all, part) in [
                        (&mut closed, out.closed),
                        (&mut changed, out.changed),
                        (&mut changed_panes, out.changed_panes),
                    ] {
                        if all.is_empty() {
                            *all = part;
                        } else {
                            all.extend(part);
                        }
                    }
                    self.sizes[w] = sizes;
                    self.open_groups[w] = open_groups;
                    if first_error.is_none() {
                        first_error = error;
                    }
                    frontier = lower(frontier, f);
                }
                other => return Err(self.unexpected(w, other)),
            }
        }
        match target {
            Some(t) => {
                self.time = t;
                // Every worker's probe passed `t` and the input holds `t`: the frontier is `t`.
                self.frontier = Some(frontier.unwrap_or(t).min(t));
                // the windows that closed are held no more
                let now = event_time(t);
                self.held = match now.checked_add(1) {
                    Some(next) => self.held.split_off(&(next, EventTime::MIN)),
                    None => BTreeSet::new(),
                };
            }
            None => {
                self.time = Time::MAX;
                self.frontier = None;
                self.held.clear();
            }
        }
        if let Some(e) = first_error {
            return Err(self.poison(e));
        }
        match fresh {
            Ok(fresh) => self.fresh_closed = fresh,
            Err(e) => return Err(self.poison(e)),
        }
        Ok((closed, changed, changed_panes))
    }

    /// Takes the pending contributions of windows that close at this step (`end <= now`)
    /// and that no worker holds (all their contributions came since the last step), and
    /// folds them on the host: sent, they would be folded and closed within the step, so
    /// the result is the same closed updates (sorted by `(window, key)`) without the round
    /// trip. Without panes only (a pane feeds windows that close at other steps).
    fn close_fresh(&mut self, now: EventTime) -> Result<Vec<Update>> {
        if self.config.panes.is_some() {
            return Ok(Vec::new());
        }
        let held = &self.held;
        // decided once per run of one window's contributions
        let fresh = || {
            let mut last: Option<(Window, bool)> = None;
            move |w: Window| match last {
                Some((l, f)) if l == w => f,
                _ => {
                    let f = w.end <= now && !held.contains(&(w.end, w.start));
                    last = Some((w, f));
                    f
                }
            }
        };
        let mut is_fresh = fresh();
        let mut taken: Vec<&(WindowKey, Time, Acc)> = Vec::new();
        for part in &self.pending {
            for e in part {
                if is_fresh(e.0 .0) {
                    if taken.is_empty() {
                        taken.reserve(self.pending.iter().map(Vec::len).sum());
                    }
                    taken.push(e);
                }
            }
        }
        if taken.is_empty() {
            return Ok(Vec::new());
        }
        let order = sort_order(&taken, |e| e.0);
        let runs = order.map(|(_, i)| {
            let ((window, key), _, acc) = taken[i];
            (*window, *key, acc)
        });
        let closed = fold_closed(&self.config.aggs, runs, &mut self.spare)?;
        drop(taken);
        let mut is_fresh = fresh();
        for part in &mut self.pending {
            part.retain(|((w, _), _, _)| !is_fresh(*w));
        }
        Ok(closed)
    }

    /// The output frontier as event time: every time before it is complete, and every window
    /// with `end <= frontier()` has closed. Equals the last `w` passed to
    /// [`advance_to`](Self::advance_to) (`EventTime::MIN` before the first, `EventTime::MAX`
    /// after the end of stream).
    pub fn frontier(&self) -> EventTime {
        match self.frontier {
            Some(t) => event_time(t),
            None => EventTime::MAX,
        }
    }

    /// Total records in the arrangements' traces over all workers, as of the last step
    /// (without a trace, [`Config::without_trace`]: the open `(window, key)`s and
    /// `(pane, key)`s the workers hold).
    ///
    /// Bounded by the open `(window, key)`s (about two records each, times a logarithmic
    /// factor for batches not yet merged), not by the rows seen: closed windows are evicted.
    pub fn state_size(&self) -> usize {
        self.sizes.iter().flatten().map(|(_, n)| n).sum()
    }

    /// Every arrangement's size on every worker, as of the last step (what
    /// [`state_size`](Self::state_size) sums).
    pub fn arrangement_sizes(&self) -> Vec<ArrangementSize> {
        self.sizes
            .iter()
            .enumerate()
            .flat_map(|(worker, sizes)| {
                sizes.iter().map(move |&(name, records)| ArrangementSize {
                    worker,
                    name,
                    records,
                })
            })
            .collect()
    }

    /// Number of open `(window, key)`s (windows with `end > frontier()` that received an
    /// update), over all workers, as of the last step. With panes and changes not reported
    /// ([`report_changes`](Self::report_changes)), the workers keep no window (each is
    /// assembled from its panes when it closes) and this counts open `(pane, key)`s. `state_size()` stays within a small
    /// multiple of this (plus records of closed windows not yet merged away).
    pub fn open_groups(&self) -> usize {
        self.open_groups.iter().sum()
    }

    /// The open windows' states as held in each worker's trace, for a checkpoint: one
    /// [`Update`] per open `(window, key)`, sorted, per worker.
    ///
    /// Rows inserted since the last step are sealed into the traces first (a step that does
    /// not move the watermark; the changes it observes are reported by the next
    /// [`advance_to`](Self::advance_to)), so the snapshot holds everything inserted so far.
    /// Feed the concatenation of all workers' updates to [`restore`](Self::restore).
    ///
    /// This is [`begin_snapshot`](Self::begin_snapshot) and [`PendingSnapshot::wait`].
    pub fn snapshot(&mut self) -> Result<Vec<(usize, Vec<Update>)>> {
        self.begin_snapshot()?.wait()
    }

    /// Starts a [`snapshot`](Self::snapshot) and returns once every worker has captured its
    /// trace (its batches as of now, shared and immutable): the caller's thread does not
    /// read the state. Each worker then reads its captured batches a chunk at a time
    /// between later commands, so the dataflow keeps stepping meanwhile (a step waits for
    /// at most one chunk) and what later steps change is not in the snapshot.
    /// [`PendingSnapshot::wait`], on any thread, collects the result.
    pub fn begin_snapshot(&mut self) -> Result<PendingSnapshot> {
        self.check_usable()?;
        if !self.config.trace {
            return Err(Error::InvalidConfig {
                reason: "a snapshot of a dataflow built without a trace (Config::without_trace)"
                    .to_string(),
            });
        }
        let workers = self.config.workers;
        let (to, chunks) = std::sync::mpsc::channel();
        if self.frontier.is_none() {
            return Ok(PendingSnapshot::done(workers, chunks));
        }
        if self.has_pending() {
            let (closed, changed, changed_panes) = self.step(Some(self.next_time()?))?;
            debug_assert!(closed.is_empty());
            for u in changed {
                self.owed.insert((u.window, u.key), u.aggs);
            }
            for u in changed_panes {
                self.owed_panes.insert((u.window, u.key), u.aggs);
            }
        }
        let (id, frontier) = (self.id, self.frontier());
        let replies = self.round(|_| Command::Snapshot {
            id,
            frontier,
            to: to.clone(),
        })?;
        for (w, reply) in replies.into_iter().enumerate() {
            if !matches!(reply, Reply::SnapshotStarted) {
                return Err(self.unexpected(w, reply));
            }
        }
        Ok(PendingSnapshot {
            parts: vec![Some(Vec::new()); workers],
            chunks,
            reader: self.cluster.is_inline().then(|| self.cluster.clone()),
        })
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(e) => Err(Error::Poisoned {
                cause: Box::new(e.clone()),
            }),
            None => Ok(()),
        }
    }

    /// Marks the dataflow unusable and returns `e`.
    fn poison(&mut self, e: Error) -> Error {
        if self.poisoned.is_none() {
            self.poisoned = Some(e.clone());
        }
        e
    }

    /// One round with the workers, under the cluster's lock: sends the pending updates to
    /// their workers, then each worker its `command(worker)`, and waits for every worker's
    /// reply. A dead worker poisons the dataflow.
    fn round(&mut self, command: impl FnMut(usize) -> Command) -> Result<Vec<Reply>> {
        self.round_with(Vec::new(), command)
    }

    /// [`round`](Self::round), with `extra` commands sent to single workers first.
    fn round_with(
        &mut self,
        extra: Vec<(usize, Command)>,
        mut command: impl FnMut(usize) -> Command,
    ) -> Result<Vec<Reply>> {
        let cluster = self.cluster.clone();
        let mut links = cluster.links();
        let sent = self.send_pending(&mut links).and_then(|()| {
            for (w, c) in extra {
                links.send(w, c)?;
            }
            let mut w = 0;
            links.broadcast(|| {
                w += 1;
                command(w - 1)
            })
        });
        match sent.and_then(|()| links.gather()) {
            Ok(replies) => Ok(replies),
            Err(worker) => Err(self.poison(Error::WorkerPanicked { worker })),
        }
    }

    /// A reply that does not answer the command sent: the worker lost track of this
    /// dataflow. Poisons it.
    fn unexpected(&mut self, worker: usize, reply: Reply) -> Error {
        self.poison(out_of_turn(worker, reply))
    }

    /// Sends the pending updates to their workers.
    fn send_pending(&mut self, links: &mut Links) -> std::result::Result<(), usize> {
        for w in 0..self.pending.len() {
            if !self.pending[w].is_empty() {
                let part = std::mem::take(&mut self.pending[w]);
                // the windows the workers now hold (contributions come in runs of a window)
                let mut last = None;
                for ((window, _), _, _) in &part {
                    if last != Some(*window) {
                        last = Some(*window);
                        self.held.insert((window.end, window.start));
                    }
                }
                links.send(w, Command::Insert(self.id, part))?;
            }
        }
        Ok(())
    }
}

/// `changed` after the changes `owed` (taken): in `(window, key)` order, one
/// update per `(window, key)`, a later one replacing an earlier. Without owed
/// changes (a step with no snapshot since the last), a sort of the vector, not
/// a map built and drained per step.
fn with_owed(
    owed: &mut BTreeMap<(Window, Key), Vec<AggState>>,
    changed: Vec<Update>,
) -> Vec<Update> {
    if owed.is_empty() {
        return sorted_latest(changed);
    }
    for u in changed {
        owed.insert((u.window, u.key), u.aggs);
    }
    std::mem::take(owed)
        .into_iter()
        .map(|((window, key), aggs)| Update { window, key, aggs })
        .collect()
}

/// `updates` in `(window, key)` order, one per `(window, key)` (of equal ones,
/// the last). The windows of a step are few: each update is ordered by its
/// window's rank among them, its key and its index, and the updates (48 bytes
/// each) are moved once, not at every step of a sort. Where the three fit in
/// 64 bits (key ids are dense: they do unless a step holds very many windows
/// or keys), one integer per update is sorted; else a pair.
fn sorted_latest(updates: Vec<Update>) -> Vec<Update> {
    let order = sort_order(&updates, |u| (u.window, u.key));
    last_of_each(updates, order)
}

/// The order of `items` by `(window, key)` (`of` reads them): each one's sort key and
/// index, sorted, so equal `(window, key)`s come together in the order of their indices.
/// Sorted as one packed integer per item (window rank, key, index) where it fits.
fn sort_order<T>(items: &[T], of: impl Fn(&T) -> (Window, Key)) -> Order {
    let mut windows: Vec<Window> = items.iter().map(|u| of(u).0).collect();
    windows.dedup();
    windows.sort_unstable();
    windows.dedup();
    let rank = |w: &Window| windows.binary_search(w).unwrap_or_else(|r| r) as u64;
    let bits = |n: u64| u64::BITS - n.leading_zeros();
    let (rank_bits, index_bits) = (bits(windows.len() as u64), bits(items.len() as u64));
    let key_bits = bits(items.iter().map(|u| of(u).1).max().unwrap_or(0));
    if rank_bits + key_bits + index_bits <= u64::BITS {
        let mut packed: Vec<u64> = items
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let (window, key) = of(u);
                (rank(&window) << key_bits | key) << index_bits | i as u64
            })
            .collect();
        packed.sort_unstable();
        Order::Packed(packed.into_iter(), index_bits)
    } else {
        let mut wide: Vec<(u128, u32)> = items
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let (window, key) = of(u);
                (u128::from(rank(&window)) << 64 | u128::from(key), i as u32)
            })
            .collect();
        wide.sort_unstable();
        Order::Wide(wide.into_iter())
    }
}

/// What [`sort_order`] gives: `(sort key, index)` in order.
enum Order {
    /// Packed integers and the bits of their index.
    Packed(std::vec::IntoIter<u64>, u32),
    Wide(std::vec::IntoIter<(u128, u32)>),
}

impl Iterator for Order {
    type Item = (u128, usize);

    fn next(&mut self) -> Option<(u128, usize)> {
        match self {
            Order::Packed(packed, bits) => packed.next().map(|p| {
                let index = p & ((1u64 << *bits) - 1);
                (u128::from(p >> *bits), index as usize)
            }),
            Order::Wide(wide) => wide.next().map(|(k, i)| (k, i as usize)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Order::Packed(packed, _) => packed.size_hint(),
            Order::Wide(wide) => wide.size_hint(),
        }
    }
}

/// Two lists of updates sorted by `(window, key)`, with no `(window, key)` in both, as one.
fn merge_sorted(a: Vec<Update>, b: Vec<Update>) -> Vec<Update> {
    if b.is_empty() {
        return a;
    }
    if a.is_empty() {
        return b;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let take_a = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => (x.window, x.key) < (y.window, y.key),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return out,
        };
        out.extend(if take_a { a.next() } else { b.next() });
    }
}

/// `updates` in `order` (each one's sort key and index, sorted), the last of
/// each run of equal keys kept.
fn last_of_each(updates: Vec<Update>, order: impl Iterator<Item = (u128, usize)>) -> Vec<Update> {
    let mut slots: Vec<Option<Update>> = updates.into_iter().map(Some).collect();
    let mut out: Vec<Update> = Vec::with_capacity(slots.len());
    let mut last = None;
    for (k, i) in order {
        let Some(u) = slots[i].take() else {
            continue;
        };
        match (last == Some(k), out.last_mut()) {
            (true, Some(l)) => *l = u,
            _ => out.push(u),
        }
        last = Some(k);
    }
    out
}

/// A snapshot the workers are reading (see [`WindowedAggregate::begin_snapshot`]). `Send`:
/// it may be waited for on another thread, such as a checkpoint writer's.
#[derive(Debug)]
pub struct PendingSnapshot {
    /// Per worker, the updates received so far (`None` once its last chunk came).
    parts: Vec<Option<Vec<Update>>>,
    chunks: std::sync::mpsc::Receiver<Chunk>,
    /// An inline cluster, whose worker the waiting thread steps to read the chunks.
    reader: Option<Cluster>,
}

impl PendingSnapshot {
    /// A snapshot of a dataflow whose stream ended: every worker's part is empty.
    fn done(workers: usize, chunks: std::sync::mpsc::Receiver<Chunk>) -> Self {
        PendingSnapshot {
            parts: vec![None; workers],
            chunks,
            reader: None,
        }
    }

    /// The next chunk (`None`: no worker will send one). On an inline cluster the caller
    /// reads it, a chunk per turn of the cluster's lock, so a step on another thread waits
    /// for at most one chunk's reading, as with worker threads.
    fn next_chunk(&self) -> Option<Chunk> {
        loop {
            match self.chunks.try_recv() {
                Ok(chunk) => return Some(chunk),
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if !self.reader.as_ref().is_some_and(Cluster::read_chunk) {
                        return self.chunks.recv().ok();
                    }
                }
            }
        }
    }

    /// Waits for every worker's chunks: one [`Update`] per open `(window, key)`, sorted,
    /// per worker (what [`WindowedAggregate::snapshot`] returns). A worker that failed
    /// while reading gives its error (an overflow); one that died, or whose dataflow was
    /// dropped before it finished, gives [`Error::WorkerPanicked`].
    pub fn wait(mut self) -> Result<Vec<(usize, Vec<Update>)>> {
        let mut out: Vec<Vec<Update>> = vec![Vec::new(); self.parts.len()];
        while let Some(w) = self.parts.iter().position(Option::is_some) {
            let chunk = self
                .next_chunk()
                .ok_or(Error::WorkerPanicked { worker: w })?;
            let part = self.parts[chunk.worker]
                .as_mut()
                .ok_or(Error::WorkerPanicked {
                    worker: chunk.worker,
                })?;
            part.extend(chunk.updates?);
            if chunk.last {
                out[chunk.worker] = self.parts[chunk.worker].take().unwrap_or_default();
            }
        }
        Ok(out
            .into_iter()
            .enumerate()
            .map(|(w, mut updates)| {
                updates.sort_unstable();
                (w, updates)
            })
            .collect())
    }
}

impl Drop for WindowedAggregate {
    /// Retires the dataflow on every worker: its input closes and it runs until done (or is
    /// dropped, if a worker died). The cluster's threads stop with its last handle.
    fn drop(&mut self) {
        self.cluster.retire(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::agg::Value;

    proptest::proptest! {
        /// The sort of a step's changes equals the map it replaced: ordered by
        /// `(window, key)`, one per `(window, key)`, the last one kept; with
        /// small key ids (one packed integer sorted) and with ids near
        /// `u64::MAX` (pairs sorted).
        #[test]
        fn sorted_latest_is_the_map_of_the_updates(
            raw in proptest::collection::vec((0i64..4, 0i64..3, 0u64..6, -5i64..5), 0..60),
            high in proptest::prelude::any::<bool>(),
        ) {
            let updates: Vec<Update> = raw
                .iter()
                .map(|&(start, len, key, n)| Update {
                    window: Window { start: start * 10, end: start * 10 + 5 + len },
                    key: if high { u64::MAX - key } else { key << 20 | key },
                    aggs: vec![AggState { count: n, value: Value::Int(n.into()) }],
                })
                .collect();
            let mut map = BTreeMap::new();
            for u in &updates {
                map.insert((u.window, u.key), u.aggs.clone());
            }
            let want: Vec<((Window, Key), Vec<AggState>)> = map.into_iter().collect();
            let got: Vec<((Window, Key), Vec<AggState>)> = sorted_latest(updates)
                .into_iter()
                .map(|u| ((u.window, u.key), u.aggs))
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn the_handle_can_move_between_threads() {
        fn assert_send<T: Send + 'static>() {}
        assert_send::<WindowedAggregate>();
        let mut df = WindowedAggregate::spawn(Config::new(vec![AggKind::Count])).expect("spawn");
        df.advance_to(3).expect("advance");
        let df = std::thread::spawn(move || {
            df.advance_to(4).expect("advance");
            df
        })
        .join()
        .expect("join");
        assert_eq!(df.frontier(), 4);
    }

    /// Step `step`'s updates: keys 0..8 at times `step * 4 + key`, each in
    /// its window (or pane) of `width`, every state of value `step`.
    fn step_updates(kinds: &[AggKind], step: i64, width: i64) -> Vec<Update> {
        (0..8u64)
            .map(|key| {
                let s = (step * 4 + key as i64) / width * width;
                Update {
                    window: Window::new(s, s + width),
                    key,
                    aggs: kinds
                        .iter()
                        .map(|&k| AggState::from_value(k, Value::Int(i128::from(step))))
                        .collect(),
                }
            })
            .collect()
    }

    #[test]
    fn without_reported_changes_the_same_windows_close() {
        let kinds = vec![AggKind::Count, AggKind::MaxInt];
        let run = |report: bool, panes: bool| {
            let mut config = Config::new(kinds.clone()).with_workers(2);
            if panes {
                config = config.with_panes(Panes::new(20, 10, 0).expect("panes"));
            }
            let mut df = WindowedAggregate::spawn(config).expect("spawn");
            df.report_changes(report);
            let (mut closed, mut changed) = (Vec::new(), 0);
            for step in 0..30i64 {
                df.insert(step_updates(&kinds, step, if panes { 10 } else { 20 }))
                    .expect("insert");
                let s = df.advance_to(step * 4).expect("advance");
                changed += s.changed.len() + s.changed_panes.len();
                closed.extend(s.closed);
            }
            closed.extend(df.advance_to(EventTime::MAX).expect("finish").closed);
            (closed, changed)
        };
        for panes in [false, true] {
            let (on, changed_on) = run(true, panes);
            let (off, changed_off) = run(false, panes);
            assert!(on.len() > 20 && changed_on > 0, "panes {panes}");
            assert_eq!(changed_off, 0, "panes {panes}");
            assert_eq!(off, on, "panes {panes}");
        }
    }

    /// Steps whose state vectors go back to the workers (some with room for more states
    /// than the dataflow has) equal steps whose vectors are dropped.
    #[test]
    fn recycled_state_vectors_change_no_step() {
        let kinds = vec![AggKind::Count, AggKind::MaxInt];
        let run = |recycle: bool, panes: bool| {
            let mut config = Config::new(kinds.clone()).with_workers(2);
            if panes {
                config = config.with_panes(Panes::new(20, 10, 0).expect("panes"));
            }
            let mut df = WindowedAggregate::spawn(config).expect("spawn");
            let mut steps = Vec::new();
            for step in 0..30i64 {
                df.insert(step_updates(&kinds, step, if panes { 10 } else { 20 }))
                    .expect("insert");
                let s = df.advance_to(step * 4).expect("advance");
                steps.push((s.closed.clone(), s.changed.clone(), s.changed_panes.clone()));
                if recycle {
                    df.recycle(vec![AggState::EMPTY; 5]);
                    df.recycle_step(s);
                }
            }
            steps.push({
                let s = df.advance_to(EventTime::MAX).expect("finish");
                (s.closed, s.changed, s.changed_panes)
            });
            steps
        };
        for panes in [false, true] {
            let kept = run(false, panes);
            assert!(kept.iter().map(|s| s.1.len()).sum::<usize>() > 20);
            assert_eq!(run(true, panes), kept, "panes {panes}");
        }
    }

    /// Without a trace (nothing checkpoints it), changed panes are not reported;
    /// the windows that change and close are the same as with one.
    #[test]
    fn without_a_trace_no_pane_changes_are_reported() {
        let kinds = vec![AggKind::Count, AggKind::SumInt];
        let run = |trace: bool| {
            let mut config = Config::new(kinds.clone())
                .with_workers(2)
                .with_panes(Panes::new(20, 10, 0).expect("panes"));
            if !trace {
                config = config.without_trace();
            }
            let mut df = WindowedAggregate::spawn(config).expect("spawn");
            let (mut closed, mut changed, mut panes) = (Vec::new(), Vec::new(), 0);
            for step in 0..30i64 {
                df.insert(step_updates(&kinds, step, 10)).expect("insert");
                let s = df.advance_to(step * 4).expect("advance");
                panes += s.changed_panes.len();
                changed.extend(s.changed);
                closed.extend(s.closed);
            }
            closed.extend(df.advance_to(EventTime::MAX).expect("finish").closed);
            (closed, changed, panes)
        };
        let (closed, changed, panes) = run(true);
        let (closed_bare, changed_bare, panes_bare) = run(false);
        assert!(panes > 0 && !changed.is_empty() && closed.len() > 20);
        assert_eq!(panes_bare, 0);
        assert_eq!(changed_bare, changed);
        assert_eq!(closed_bare, closed);
    }

    #[test]
    fn a_dead_worker_is_an_error_not_a_hang() {
        let config = Config::new(vec![AggKind::Count]).with_workers(2);
        let mut df = WindowedAggregate::spawn(config).expect("spawn");
        let update = |key: u8| Update {
            window: Window::new(0, 10),
            key: u64::from(key),
            aggs: vec![AggState::from_value(AggKind::Count, Value::Int(1))],
        };
        df.insert((0..16).map(update).collect()).expect("insert");
        df.advance_to(1).expect("advance");
        df.insert((0..16).map(update).collect()).expect("insert");
        let id = df.id;
        let e = df.round_with(vec![(1, Command::Panic)], |_| {
            Command::Advance(id, start_of(2), true, Vec::new())
        });
        assert!(
            matches!(e, Err(Error::WorkerPanicked { worker: 1 })),
            "{e:?}"
        );
        assert!(matches!(df.advance_to(3), Err(Error::Poisoned { .. })));
        assert!(matches!(df.snapshot(), Err(Error::Poisoned { .. })));
        drop(df); // must not hang
    }

    /// A panic of an inline worker (stepped on the caller's thread) is caught: the caller
    /// gets the same error as for a worker thread's, the dataflow is poisoned, the cluster
    /// takes no new dataflow, and dropping them does not touch the dead worker.
    #[test]
    fn a_dead_inline_worker_is_an_error_not_a_panic() {
        let cluster = Cluster::inline();
        let config = Config::new(vec![AggKind::Count]);
        let mut df = WindowedAggregate::spawn_on(&cluster, config.clone()).expect("spawn");
        let update = Update {
            window: Window::new(0, 10),
            key: 7,
            aggs: vec![AggState::from_value(AggKind::Count, Value::Int(1))],
        };
        df.insert(vec![update.clone()]).expect("insert");
        assert_eq!(df.advance_to(1).expect("advance").changed.len(), 1);
        let id = df.id;
        let e = df.round_with(vec![(0, Command::Panic)], |_| {
            Command::Advance(id, start_of(2), true, Vec::new())
        });
        assert!(
            matches!(e, Err(Error::WorkerPanicked { worker: 0 })),
            "{e:?}"
        );
        assert!(matches!(df.advance_to(3), Err(Error::Poisoned { .. })));
        assert!(matches!(
            WindowedAggregate::spawn_on(&cluster, config),
            Err(Error::WorkerPanicked { worker: 0 })
        ));
        drop(df);
        drop(cluster);
    }

    /// An inline cluster's dataflow moves between threads between calls, and steps from
    /// several threads take turns: the results equal those of the same stream on one
    /// worker thread.
    #[test]
    fn an_inline_dataflow_steps_on_any_thread() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Cluster>();
        const KINDS: [AggKind; 3] = [AggKind::Count, AggKind::SumInt, AggKind::MaxInt];
        fn go(
            mut df: WindowedAggregate,
            step: i64,
        ) -> impl FnOnce() -> (WindowedAggregate, Step) + Send {
            move || {
                df.insert(step_updates(&KINDS, step + (df.id as i64 % 2), 5))
                    .expect("insert");
                let s = df.advance_to(step * 4).expect("advance");
                (df, s)
            }
        }
        let run = |cluster: Cluster, hop: bool| {
            let config = Config::new(KINDS.to_vec());
            let mut a = WindowedAggregate::spawn_on(&cluster, config.clone()).expect("spawn");
            let mut b = WindowedAggregate::spawn_on(&cluster, config).expect("spawn");
            let mut out = Vec::new();
            for step in 0..20i64 {
                let ((a2, sa), (b2, sb)) = if hop {
                    // each dataflow steps on a thread of its own, at once
                    std::thread::scope(|s| {
                        let ta = s.spawn(go(a, step));
                        let tb = s.spawn(go(b, step));
                        (ta.join().expect("no panic"), tb.join().expect("no panic"))
                    })
                } else {
                    (go(a, step)(), go(b, step)())
                };
                (a, b) = (a2, b2);
                out.push((sa.closed, sa.changed, sb.closed, sb.changed));
            }
            out
        };
        let threaded = run(Cluster::start(1).expect("cluster"), false);
        let inline = run(Cluster::inline(), true);
        assert!(threaded.iter().any(|(closed, ..)| !closed.is_empty()));
        assert_eq!(inline, threaded);
    }
}
