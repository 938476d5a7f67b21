//! The host-side handle on a running windowed-aggregate dataflow: [`WindowedAggregate`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::worker::{poll, run, Command, Link, Reply, WorkerEnd};
use crate::error::{Error, Result};
use crate::state::agg::{AggKind, AggState, Update};
use crate::time::{event_time, seq, start_of, Time};
use crate::typedefs::owner_hash;
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
}

impl Config {
    /// One worker, the given aggregates.
    pub fn new(aggs: Vec<AggKind>) -> Self {
        Config {
            workers: 1,
            aggs,
            panes: None,
        }
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
    /// Empty without panes, where `changed` is that.
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
    links: Vec<Link>,
    guards: Option<timely::communication::initialize::WorkerGuards<()>>,
    abort: Arc<AtomicBool>,
    /// The current input time of every worker.
    time: Time,
    /// The output frontier after the last step (`None`: the stream ended).
    frontier: Option<Time>,
    /// Each worker's arrangement sizes after the last step.
    sizes: Vec<Vec<(&'static str, usize)>>,
    /// Each worker's open `(window, key)`s after the last step.
    open_groups: Vec<usize>,
    /// Updates inserted since the last step, by the worker that owns them; sent at the
    /// next step.
    pending: Vec<Vec<Update>>,
    /// Changes observed by internal steps (snapshots), owed to the next `advance_to`.
    owed: BTreeMap<(Window, Key), Vec<AggState>>,
    /// The same for panes.
    owed_panes: BTreeMap<(Window, Key), Vec<AggState>>,
    /// The error that made the dataflow unusable.
    poisoned: Option<Error>,
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
    /// Starts `config.workers` timely worker threads, each running the dataflow and waiting
    /// for commands. The input time (and the frontier) starts at `EventTime::MIN`.
    pub fn spawn(config: Config) -> Result<Self> {
        if config.workers == 0 {
            return Err(Error::InvalidConfig {
                reason: "workers must be at least 1".to_string(),
            });
        }
        let n = config.workers;
        let mut links = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        for _ in 0..n {
            let (ctx, crx) = mpsc::channel();
            let (rtx, rrx) = mpsc::channel();
            links.push(Link {
                commands: ctx,
                replies: rrx,
            });
            ends.push(Some(WorkerEnd {
                commands: crx,
                replies: rtx,
            }));
        }
        let ends = Arc::new(Mutex::new(ends));
        let abort = Arc::new(AtomicBool::new(false));
        let kinds = config.aggs.clone();
        let panes = config.panes;
        let worker_abort = Arc::clone(&abort);
        let guards = timely::execute(timely::Config::process(n), move |worker| {
            let end = match ends.lock() {
                Ok(mut ends) => ends.get_mut(worker.index()).and_then(Option::take),
                Err(_) => None,
            };
            if let Some(end) = end {
                run(worker, kinds.clone(), panes, end, Arc::clone(&worker_abort));
            }
        })
        .map_err(|reason| Error::Spawn { reason })?;
        Ok(WindowedAggregate {
            pending: vec![Vec::new(); n],
            config,
            links,
            guards: Some(guards),
            abort,
            time: Time::MIN,
            frontier: Some(Time::MIN),
            sizes: vec![Vec::new(); n],
            open_groups: vec![0; n],
            owed: BTreeMap::new(),
            owed_panes: BTreeMap::new(),
            poisoned: None,
        })
    }

    /// Starts a dataflow whose input (and frontier) is at `at`, holding `state`: the
    /// updates returned by [`snapshot`](Self::snapshot), from any number of workers.
    ///
    /// The updates are re-inserted at `at` and re-partitioned by key, so `config.workers`
    /// may differ from the snapshotted dataflow's. Restored states are not reported as
    /// `changed` by the next step (they were reported before the snapshot). An update whose
    /// window ended at or before `at` is [`Error::Late`].
    pub fn restore(config: Config, at: EventTime, state: Vec<Update>) -> Result<Self> {
        let mut df = Self::spawn(config)?;
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
    /// arrangement's consolidation), so callers should pre-aggregate (see
    /// [`crate::PreAggregator`]): the dataflow's cost is per update. An `i128` overflow of such a
    /// sum is [`Error::Overflow`] from the next step, and poisons the dataflow.
    pub fn insert(&mut self, updates: Vec<Update>) -> Result<()> {
        self.check_usable()?;
        let frontier = self.frontier();
        for u in &updates {
            self.validate(u, frontier)?;
        }
        let n = self.pending.len() as u64;
        let by_key = self.config.panes.is_some();
        for u in updates {
            // The arrangement exchanges by this hash (`hash % peers`): sending each update
            // to its owner keeps the exchange local. Any other choice would also be correct.
            let owner = if n == 1 {
                0
            } else {
                (owner_hash(&(u.window, u.key), by_key) % n) as usize
            };
            self.pending[owner].push(u);
        }
        Ok(())
    }

    /// Sends the pending updates to their workers.
    fn flush_pending(&mut self) -> Result<()> {
        for w in 0..self.pending.len() {
            if !self.pending[w].is_empty() {
                let part = std::mem::take(&mut self.pending[w]);
                self.send(w, Command::Insert(part))?;
            }
        }
        Ok(())
    }

    /// Whether updates wait for the next step.
    fn has_pending(&self) -> bool {
        self.pending.iter().any(|p| !p.is_empty())
    }

    fn validate(&self, u: &Update, frontier: EventTime) -> Result<()> {
        if u.window.start >= u.window.end {
            return Err(Error::InvalidWindow { window: u.window });
        }
        if expiry(self.config.panes, u.window) <= frontier {
            return Err(Error::Late {
                window: u.window,
                frontier,
            });
        }
        if u.aggs.len() != self.config.aggs.len() {
            return Err(Error::Arity {
                window: u.window,
                expected: self.config.aggs.len(),
                found: u.aggs.len(),
            });
        }
        for (kind, state) in self.config.aggs.iter().zip(&u.aggs) {
            state.validate(*kind)?;
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
        let (mut closed, changed, changed_panes) = self.step(target)?;
        closed.sort_unstable();
        if !self.owed.is_empty() {
            for u in &closed {
                self.owed.remove(&(u.window, u.key));
            }
        }
        for u in changed {
            self.owed.insert((u.window, u.key), u.aggs);
        }
        let changed = std::mem::take(&mut self.owed)
            .into_iter()
            .map(|((window, key), aggs)| Update { window, key, aggs })
            .collect();
        let now = self.frontier();
        let panes = self.config.panes;
        self.owed_panes
            .retain(|(pane, _), _| expiry(panes, *pane) > now);
        for u in changed_panes {
            self.owed_panes.insert((u.window, u.key), u.aggs);
        }
        let changed_panes = std::mem::take(&mut self.owed_panes)
            .into_iter()
            .map(|((window, key), aggs)| Update { window, key, aggs })
            .collect();
        Ok(Step {
            frontier: now,
            closed,
            changed,
            changed_panes,
        })
    }

    /// The time of a step that does not move the watermark.
    fn next_time(&self) -> Result<Time> {
        if seq(self.time) == u64::MAX {
            return Err(Error::InvalidConfig {
                reason: "more than 2^64 steps at one watermark".to_string(),
            });
        }
        Ok(self.time + 1)
    }

    /// Runs one step to `target` (`None`: end of stream) on every worker; returns the closed
    /// and changed updates (unsorted) and records frontier and state sizes.
    #[allow(clippy::type_complexity)]
    fn step(&mut self, target: Option<Time>) -> Result<(Vec<Update>, Vec<Update>, Vec<Update>)> {
        self.flush_pending()?;
        for w in 0..self.links.len() {
            let command = match target {
                Some(t) => Command::Advance(t),
                None => Command::Finish,
            };
            self.send(w, command)?;
        }
        let mut closed = Vec::new();
        let mut changed = Vec::new();
        let mut changed_panes = Vec::new();
        let mut first_error = None;
        let mut frontier: Option<Time> = None;
        for (w, reply) in self.gather()?.into_iter().enumerate() {
            match reply {
                Reply::Stepped {
                    out,
                    frontier: f,
                    sizes,
                    open_groups,
                    error,
                } => {
                    closed.extend(out.closed);
                    changed.extend(out.changed);
                    changed_panes.extend(out.changed_panes);
                    self.sizes[w] = sizes;
                    self.open_groups[w] = open_groups;
                    if first_error.is_none() {
                        first_error = error;
                    }
                    frontier = match (frontier, f) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                Reply::Snapshot(_) => return Err(self.poison(Error::WorkerPanicked { worker: w })),
            }
        }
        match target {
            Some(t) => {
                self.time = t;
                // Every worker's probe passed `t` and the input holds `t`: the frontier is `t`.
                self.frontier = Some(frontier.unwrap_or(t).min(t));
            }
            None => {
                self.time = Time::MAX;
                self.frontier = None;
            }
        }
        if let Some(e) = first_error {
            return Err(self.poison(e));
        }
        Ok((closed, changed, changed_panes))
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

    /// Total records in the arrangements' traces over all workers, as of the last step.
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
    /// update), over all workers, as of the last step. `state_size()` stays within a small
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
    pub fn snapshot(&mut self) -> Result<Vec<(usize, Vec<Update>)>> {
        self.check_usable()?;
        if self.frontier.is_none() {
            return Ok((0..self.links.len()).map(|w| (w, Vec::new())).collect());
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
        let frontier = self.frontier();
        for w in 0..self.links.len() {
            self.send(w, Command::Snapshot(frontier))?;
        }
        let mut out = Vec::with_capacity(self.links.len());
        let mut first_error = None;
        for (w, reply) in self.gather()?.into_iter().enumerate() {
            match reply {
                Reply::Snapshot(Ok(mut updates)) => {
                    updates.sort_unstable();
                    out.push((w, updates));
                }
                Reply::Snapshot(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Reply::Stepped { .. } => {
                    return Err(self.poison(Error::WorkerPanicked { worker: w }))
                }
            }
        }
        match first_error {
            Some(e) => Err(self.poison(e)),
            None => Ok(out),
        }
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
        if matches!(e, Error::WorkerPanicked { .. }) {
            self.abort.store(true, Ordering::Relaxed);
        }
        if self.poisoned.is_none() {
            self.poisoned = Some(e.clone());
        }
        e
    }

    fn send(&mut self, worker: usize, command: Command) -> Result<()> {
        let sent = self.links[worker].commands.send(command);
        sent.map_err(|_| self.poison(Error::WorkerPanicked { worker }))
    }

    /// Waits for one reply from every worker. If a worker is gone (it panicked), the others
    /// are told to stop waiting for it (`abort`), their replies are drained, and the result is
    /// [`Error::WorkerPanicked`].
    fn gather(&mut self) -> Result<Vec<Reply>> {
        let n = self.links.len();
        let mut replies: Vec<Option<Reply>> = (0..n).map(|_| None).collect();
        let mut dead: Vec<usize> = Vec::new();
        loop {
            let pending: Vec<usize> = (0..n)
                .filter(|w| replies[*w].is_none() && !dead.contains(w))
                .collect();
            if pending.is_empty() {
                break;
            }
            for w in pending {
                // a reply that comes within the poll costs no wake-up
                if let Ok(reply) = poll(&self.links[w].replies) {
                    replies[w] = Some(reply);
                    continue;
                }
                let timeout = Duration::from_millis(if dead.is_empty() { 20 } else { 1 });
                match self.links[w].replies.recv_timeout(timeout) {
                    Ok(reply) => replies[w] = Some(reply),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        dead.push(w);
                        self.abort.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
        if let Some(&worker) = dead.first() {
            return Err(self.poison(Error::WorkerPanicked { worker }));
        }
        Ok(replies.into_iter().flatten().collect())
    }
}

impl Drop for WindowedAggregate {
    /// Stops the workers: each closes its input and returns; timely drains the dataflow
    /// (or drops it, if a worker died) and the threads are joined.
    fn drop(&mut self) {
        for link in &self.links {
            // A worker that is gone already has nothing to stop.
            let _ = link.commands.send(Command::Shutdown);
        }
        if let Some(guards) = self.guards.take() {
            // A panicked worker's result is an `Err` here; it was reported when observed.
            let _ = guards.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::agg::Value;

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
        df.send(1, Command::Panic).expect("send");
        df.insert((0..16).map(update).collect()).expect("insert");
        let e = df.advance_to(2);
        assert!(
            matches!(e, Err(Error::WorkerPanicked { worker: 1 })),
            "{e:?}"
        );
        assert!(matches!(df.advance_to(3), Err(Error::Poisoned { .. })));
        assert!(matches!(df.snapshot(), Err(Error::Poisoned { .. })));
        drop(df); // must not hang
    }
}
