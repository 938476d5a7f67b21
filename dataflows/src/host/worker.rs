//! The worker threads: each runs a loop that applies the host's commands to the dataflows
//! it hosts (every view of an engine shares the same workers).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;

use differential_dataflow::difference::{Monoid, Semigroup};
use differential_dataflow::trace::cursor::{cursor_list, CursorList};
use differential_dataflow::trace::{Cursor, Navigable};
use rustc_hash::FxHashMap as HashMap;
use timely::worker::Worker;

use crate::error::{Error, Result};
use crate::render::aggregate::{render, Rendered};
use crate::state::agg::{AggKind, AggState, Update};
use crate::state::diff::Acc;
use crate::state::join::{JoinRecord, JoinState, Pair};
use crate::state::open::StepOutput;
use crate::time::{event_time, start_of, Time};
use crate::typedefs::{NamedTrace, WindowBatch, WindowInput, WindowKey};
use crate::window::{expiry, EventTime, Panes, Window};

/// Identifies one dataflow among those a cluster's workers host.
pub(crate) type DataflowId = u64;

/// A command from the host to one worker.
#[derive(Debug)]
pub(crate) enum Command {
    /// Render a windowed-aggregate dataflow under `id` and reply [`Reply::Built`].
    Build {
        /// The new dataflow's identifier (unused on this cluster so far).
        id: DataflowId,
        /// Its aggregates.
        kinds: Vec<AggKind>,
        /// Its pane geometry, if it takes panes.
        panes: Option<Panes>,
        /// Whether to keep the arrangement's trace (for snapshots).
        trace: bool,
    },
    /// Add contributions to a dataflow at its current input time (no reply).
    Insert(DataflowId, Vec<(WindowKey, Time, Acc)>),
    /// Advance a dataflow's input to the time, run until its output frontier passes it,
    /// compact, and reply [`Reply::Stepped`]; with `true`, the reply reports the open
    /// states that changed (else nothing tracks them). The vectors are state vectors the
    /// host is done with, for the reply to fill again.
    Advance(DataflowId, Time, bool, Vec<Vec<AggState>>),
    /// Close a dataflow's input (end of stream), run until it is done, reply
    /// [`Reply::Stepped`].
    Finish(DataflowId),
    /// Capture a dataflow's trace (its batches as of now, shared and immutable), reply
    /// [`Reply::SnapshotStarted`], then send its open windows (`window.end > frontier`) in
    /// chunks to `to`, between later commands (so later steps wait for at most one chunk).
    Snapshot {
        /// The dataflow.
        id: DataflowId,
        /// Windows ending at or before it are closed and left out.
        frontier: EventTime,
        /// Where the chunks go.
        to: Sender<Chunk>,
    },
    /// Start a windowed join's state under `id` and reply [`Reply::Built`].
    BuildJoin(DataflowId),
    /// Add rows to a join's left and right inputs, making their pairs (no reply).
    InsertJoin(DataflowId, [Vec<(JoinRecord, i64)>; 2]),
    /// Move a join to the time: reply [`Reply::Joined`] with the pairs made since the last
    /// step, and drop the rows of `evict` (windows that closed).
    AdvanceJoin {
        /// The join.
        id: DataflowId,
        /// The new input time.
        time: Time,
        /// Windows whose rows to retract, sorted.
        evict: Vec<Window>,
    },
    /// End a join's stream: reply [`Reply::Joined`] with its last pairs, drop its rows.
    FinishJoin(DataflowId),
    /// Reply [`Reply::JoinRows`] with the rows of a join's windows that end after
    /// `frontier`.
    SnapshotJoin {
        /// The join.
        id: DataflowId,
        /// Windows ending at or before it are closed and left out.
        frontier: EventTime,
    },
    /// Close a dataflow's input, run it until it is done (or drop it, after a peer died),
    /// forget it, and reply [`Reply::Dropped`].
    Drop(DataflowId),
    /// Stop: close every input and return from the worker closure.
    Shutdown,
    /// Panic (tests of the host's handling of a dead worker).
    #[cfg(test)]
    Panic,
}

/// A worker's answer to a command that has one.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The dataflow of a [`Command::Build`] is rendered.
    Built,
    /// The outcome of a step.
    Stepped {
        /// Closed and changed windows of this worker.
        out: StepOutput,
        /// The worker's output frontier after the step (`None`: empty, the stream ended).
        frontier: Option<Time>,
        /// `(name, records)` of the worker's arrangements (none once the stream ended).
        sizes: Vec<(&'static str, usize)>,
        /// Open `(window, key)`s held by the worker.
        open_groups: usize,
        /// An error met while folding results.
        error: Option<Error>,
    },
    /// The trace of a [`Command::Snapshot`] is captured; its chunks follow on their channel.
    SnapshotStarted,
    /// The outcome of a join's step.
    Joined {
        /// The join's output changes in open windows, since the previous step.
        pairs: Vec<Pair>,
        /// The worker's output frontier after the step (`None`: the stream ended).
        frontier: Option<Time>,
        /// `(name, rows)` of the worker's join state.
        sizes: Vec<(&'static str, usize)>,
    },
    /// A join's open rows, left then right, with their multiplicities.
    JoinRows([Vec<(JoinRecord, i64)>; 2]),
    /// The dataflow of a [`Command::Drop`] is gone.
    Dropped,
    /// The command named a dataflow this worker does not host.
    Unknown(DataflowId),
}

/// A piece of one worker's snapshot: open windows read from its trace, and whether it is
/// the worker's last piece.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// The worker that read it.
    pub(crate) worker: usize,
    /// The open `(window, key)`s read, in trace order, or the error that ended the walk.
    pub(crate) updates: Result<Vec<Update>>,
    /// Whether the walk is over (after an error too).
    pub(crate) last: bool,
}

/// `(window, key)`s a worker reads per chunk of a snapshot: a step waits at most this
/// many keys' reading (a few milliseconds).
const CHUNK_KEYS: usize = 1 << 15;

/// A snapshot being read from captured trace batches.
pub(crate) struct Walk {
    cursor: CursorList<<WindowBatch as Navigable>::Cursor>,
    storage: Vec<WindowBatch>,
    frontier: EventTime,
    panes: Option<Panes>,
}

impl Walk {
    /// A walk over the trace as it is now.
    fn new(trace: &NamedTrace, frontier: EventTime, panes: Option<Panes>) -> Self {
        let (cursor, storage) = cursor_list(trace.batches());
        Walk {
            cursor,
            storage,
            frontier,
            panes,
        }
    }

    /// Reads up to `max` more keys: the open windows among them, each with the
    /// accumulation of its contributions before its end; `None` once the walk is over.
    fn next_chunk(&mut self, max: usize) -> Option<Result<Vec<Update>>> {
        let (cursor, storage) = (&mut self.cursor, &self.storage);
        cursor.get_key(storage)?;
        let mut out = Vec::new();
        for _ in 0..max {
            let Some((window, key)) = cursor.get_key(storage) else {
                break;
            };
            let expires = expiry(self.panes, *window);
            if expires > self.frontier {
                let end = start_of(expires);
                let mut acc = Acc::zero();
                while cursor.get_val(storage).is_some() {
                    cursor.map_times(storage, |time, diff| {
                        if *time < end {
                            acc.plus_equals(diff);
                        }
                    });
                    cursor.step_val(storage);
                }
                if acc.overflow {
                    return Some(Err(Error::Overflow {
                        kind: acc.first_kind().unwrap_or(AggKind::SumInt),
                        window: Some(*window),
                        detail: "in the dataflow's accumulation".to_string(),
                        aggregate: None,
                    }));
                }
                if acc.n > 0 {
                    out.push(Update {
                        window: *window,
                        key: *key,
                        aggs: acc.states(),
                    });
                }
            }
            cursor.step_key(storage);
        }
        Some(Ok(out))
    }
}

/// A walk and where its chunks go.
struct Job {
    walk: Walk,
    to: Sender<Chunk>,
}

impl Job {
    /// Sends the next chunk; whether the job is over (done, failed, or nobody listens).
    fn step(&mut self, worker: usize) -> bool {
        let (updates, mut last) = match self.walk.next_chunk(CHUNK_KEYS) {
            None => (Ok(Vec::new()), true),
            Some(Err(e)) => (Err(e), true),
            Some(Ok(u)) => (Ok(u), false),
        };
        // the cursor knows whether keys remain: say so with this chunk
        if !last && self.walk.cursor.get_key(&self.walk.storage).is_none() {
            last = true;
        }
        let sent = self.to.send(Chunk {
            worker,
            updates,
            last,
        });
        last || sent.is_err()
    }
}

/// The error for a reply that does not answer the command sent: the worker lost track of
/// the dataflow (the handle that gets it poisons itself).
pub(crate) fn out_of_turn(worker: usize, reply: Reply) -> Error {
    let reason = match reply {
        Reply::Unknown(id) => format!("worker {worker} does not host dataflow {id}"),
        other => format!("worker {worker} answered out of turn: {other:?}"),
    };
    Error::InvalidConfig { reason }
}

/// The time of a step after `time` that does not move the watermark.
pub(crate) fn next_time(time: Time) -> Result<Time> {
    if crate::time::seq(time) == u64::MAX {
        return Err(Error::InvalidConfig {
            reason: "more than 2^64 steps at one watermark".to_string(),
        });
    }
    Ok(time + 1)
}

/// The lower of two workers' output frontiers (`None`: that worker's stream ended).
pub(crate) fn lower(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The host's end of one worker's channels.
pub(crate) struct Link {
    pub(crate) commands: Sender<Command>,
    pub(crate) replies: Receiver<Reply>,
}

/// The worker's end of its channels.
pub(crate) struct WorkerEnd {
    pub(crate) commands: Receiver<Command>,
    pub(crate) replies: Sender<Reply>,
}

/// One worker's handles on one hosted dataflow.
struct Hosted {
    rendered: Rendered,
    /// `None` once the input closed (end of stream).
    input: Option<WindowInput>,
    /// `None` once the stream ended (nothing is left to snapshot).
    trace: Option<NamedTrace>,
    panes: Option<Panes>,
}

/// What one worker hosts besides its timely `Worker`: the dataflows, the joins, and the
/// snapshots being read. A worker thread's loop ([`run`]) and an inline cluster both
/// apply the host's commands to it.
#[derive(Default)]
pub(crate) struct Hosting {
    hosted: HashMap<DataflowId, Hosted>,
    joins: HashMap<DataflowId, JoinState>,
    jobs: VecDeque<Job>,
}

impl Hosting {
    /// Applies one command (not `Shutdown`, which ends a thread's loop) and returns its
    /// reply, if it has one. `aborted`: whether a peer died (step loops stop waiting).
    pub(crate) fn apply(
        &mut self,
        worker: &mut Worker,
        command: Command,
        aborted: &dyn Fn() -> bool,
    ) -> Option<Reply> {
        let me = worker.index();
        let reply = match command {
            Command::Build {
                id,
                kinds,
                panes,
                trace: keep,
            } => {
                // Without a reader, there is no arrangement: contributions are folded into
                // the open-window table as they arrive.
                let (rendered, input, trace) = render(worker, kinds, panes, keep);
                rendered.open.borrow_mut().list_evictions(keep);
                rendered.open.borrow_mut().report_panes(keep);
                self.hosted.insert(
                    id,
                    Hosted {
                        rendered,
                        input: Some(input),
                        trace,
                        panes,
                    },
                );
                Reply::Built
            }
            Command::Insert(id, mut updates) => {
                if let Some(h) = self.hosted.get_mut(&id) {
                    if let Some(input) = h.input.as_mut() {
                        // stamped by the host with the input's time: handed on whole
                        input.send_batch(&mut updates);
                    }
                }
                return None;
            }
            Command::Advance(id, time, changes, spare) => match self.hosted.get_mut(&id) {
                None => Reply::Unknown(id),
                Some(h) => {
                    let mut open = h.rendered.open.borrow_mut();
                    open.track_changes(changes);
                    open.give_spare(spare);
                    drop(open);
                    if let Some(input) = h.input.as_mut() {
                        input.advance_to(time);
                    }
                    let probe = &h.rendered.probe;
                    worker.step_while(|| probe.less_than(&time) && !aborted());
                    if let Some(trace) = h.trace.as_mut() {
                        trace.compact_to(&[time]);
                    }
                    let reply = step_reply(h, event_time(time));
                    // Retract what closed, at `time` (at or after every closed unit's end):
                    // it enters with the next step, and the arrangement drops the units once
                    // compaction passes `time`. Nothing waits in the batcher for a future end.
                    let evicted = h.rendered.open.borrow_mut().take_evictions();
                    if let Some(input) = h.input.as_mut() {
                        let mut evictions: Vec<(WindowKey, Time, Acc)> = evicted
                            .into_iter()
                            .map(|(unit, n)| (unit, time, Acc::eviction(n)))
                            .collect();
                        input.send_batch(&mut evictions);
                    }
                    reply
                }
            },
            Command::Finish(id) => match self.hosted.get_mut(&id) {
                None => Reply::Unknown(id),
                Some(h) => {
                    drop(h.input.take());
                    let probe = &h.rendered.probe;
                    worker.step_while(|| !probe.done() && !aborted());
                    // Every window is closed: nothing is left to snapshot, so release the trace.
                    drop(h.trace.take());
                    step_reply(h, EventTime::MAX)
                }
            },
            Command::Snapshot { id, frontier, to } => match self.hosted.get(&id) {
                None => Reply::Unknown(id),
                Some(h) => {
                    match h.trace.as_ref() {
                        Some(trace) => self.jobs.push_back(Job {
                            walk: Walk::new(trace, frontier, h.panes),
                            to,
                        }),
                        // the stream ended: nothing is open
                        None => {
                            let _ = to.send(Chunk {
                                worker: me,
                                updates: Ok(Vec::new()),
                                last: true,
                            });
                        }
                    }
                    Reply::SnapshotStarted
                }
            },
            Command::BuildJoin(id) => {
                self.joins.insert(id, JoinState::default());
                Reply::Built
            }
            Command::InsertJoin(id, sides) => {
                if let Some(j) = self.joins.get_mut(&id) {
                    for (side, rows) in sides.into_iter().enumerate() {
                        for (record, n) in rows {
                            j.insert(side, record, n);
                        }
                    }
                }
                return None;
            }
            Command::AdvanceJoin { id, time, evict } => match self.joins.get_mut(&id) {
                None => Reply::Unknown(id),
                Some(j) => {
                    // the pairs are made as rows come: a step takes them, then drops
                    // the windows that closed
                    let pairs = j.take_pairs();
                    j.evict(&evict);
                    join_reply(j, pairs, Some(time))
                }
            },
            Command::FinishJoin(id) => match self.joins.get_mut(&id) {
                None => Reply::Unknown(id),
                Some(j) => {
                    let pairs = j.take_pairs();
                    j.clear();
                    join_reply(j, pairs, None)
                }
            },
            Command::SnapshotJoin { id, frontier } => match self.joins.get(&id) {
                None => Reply::Unknown(id),
                Some(j) => Reply::JoinRows(j.open_rows(frontier)),
            },
            Command::Drop(id) => {
                if let Some(h) = self.hosted.remove(&id) {
                    retire(worker, h, aborted);
                }
                self.joins.remove(&id);
                Reply::Dropped
            }
            // the thread's loop stops on it before handing it here
            Command::Shutdown => return None,
            #[cfg(test)]
            Command::Panic => panic!("worker panic induced by a test"),
        };
        Some(reply)
    }

    /// Whether a snapshot is being read.
    pub(crate) fn reading(&self) -> bool {
        !self.jobs.is_empty()
    }

    /// Reads and sends the next chunk of the oldest snapshot being read.
    pub(crate) fn read_chunk(&mut self, worker: usize) {
        if let Some(job) = self.jobs.front_mut() {
            if job.step(worker) {
                self.jobs.pop_front();
            }
        }
    }

    /// Retires every hosted dataflow (see [`retire`]).
    pub(crate) fn retire_all(&mut self, worker: &mut Worker, aborted: &dyn Fn() -> bool) {
        for (_, h) in self.hosted.drain() {
            retire(worker, h, aborted);
        }
    }
}

/// Runs the command loop of one worker until `Shutdown` or until the host goes away,
/// hosting every dataflow the host builds on it.
///
/// `abort` is raised by the host when a peer died: step loops then stop waiting for a
/// frontier that will never move, and dataflows are dropped instead of drained.
pub(crate) fn run(worker: &mut Worker, end: WorkerEnd, abort: Arc<AtomicBool>) {
    let mut hosting = Hosting::default();
    let aborted = || abort.load(Ordering::Relaxed);
    let me = worker.index();
    loop {
        // snapshots are read between commands, a chunk at a time
        let command = if hosting.reading() {
            match end.commands.try_recv() {
                Ok(c) => c,
                Err(TryRecvError::Empty) => {
                    hosting.read_chunk(me);
                    continue;
                }
                Err(TryRecvError::Disconnected) => break,
            }
        } else {
            match receive(&end.commands) {
                Some(c) => c,
                None => break,
            }
        };
        if matches!(command, Command::Shutdown) {
            break;
        }
        if let Some(reply) = hosting.apply(worker, command, &aborted) {
            if end.replies.send(reply).is_err() {
                break;
            }
        }
    }
    hosting.retire_all(worker, &aborted);
}

/// A join's step reply: its pairs, frontier and size.
fn join_reply(j: &JoinState, pairs: Vec<Pair>, frontier: Option<Time>) -> Reply {
    Reply::Joined {
        pairs,
        frontier,
        sizes: vec![(JOIN_STATE, j.len())],
    }
}

/// The name of a join's state in [`Reply::Joined`]'s sizes.
const JOIN_STATE: &str = "WindowedJoin";

/// Ends one hosted dataflow: its input closes and it runs until done, so its threads'
/// peers see the same end; if a peer died (`aborted`), it can never drain and is dropped.
fn retire(worker: &mut Worker, h: Hosted, aborted: &dyn Fn() -> bool) {
    let Hosted {
        rendered,
        input,
        trace,
        ..
    } = h;
    drop(input);
    drop(trace);
    let probe = &rendered.probe;
    worker.step_while(|| !probe.done() && !aborted());
    if aborted() {
        worker.drop_dataflow(rendered.index);
    }
}

/// How long a thread polls a channel (yielding between looks) before it sleeps on it: a
/// trigger's round trip to the workers then costs no wake-up when commands and replies
/// follow each other within it, as they do when the host folds a trigger's rows (about
/// 0.1 ms per 1 000 rows) while the workers wait for them. A wake-up costs more than
/// the trigger's work at that size (at 50 µs, the window sweep's triggers of 1 000 rows
/// took a sixth longer); a thread idle for longer costs at most this much CPU per command.
const POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// The next message on `rx` if one comes within [`POLL`] (`Empty` if none did,
/// `Disconnected` if the sender is gone).
pub(crate) fn poll<T>(rx: &Receiver<T>) -> std::result::Result<T, TryRecvError> {
    let start = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Err(TryRecvError::Empty) if start.elapsed() < POLL => std::thread::yield_now(),
            other => return other,
        }
    }
}

/// The next message on `rx`: polled for [`POLL`], then waited for (`None`: the sender is
/// gone).
fn receive<T>(rx: &Receiver<T>) -> Option<T> {
    match poll(rx) {
        Ok(m) => Some(m),
        Err(TryRecvError::Empty) => rx.recv().ok(),
        Err(TryRecvError::Disconnected) => None,
    }
}

/// The name under which a worker without a trace reports its open-window table's size.
const OPEN_WINDOWS: &str = "OpenWindows";

fn step_reply(h: &Hosted, frontier: EventTime) -> Reply {
    let mut open = h.rendered.open.borrow_mut();
    // (after the step: a closing window assembled from its panes may overflow)
    let out = open.take_step(frontier);
    let error = open.take_error();
    Reply::Stepped {
        out,
        frontier: h.rendered.probe.with_frontier(|f| f.iter().min().copied()),
        sizes: match (&h.trace, &h.input) {
            (Some(t), _) => vec![(t.name(), t.size())],
            // no trace: the open-window table is the state (until the stream ends)
            (None, Some(_)) => vec![(OPEN_WINDOWS, open.held())],
            (None, None) => Vec::new(),
        },
        open_groups: open.len(),
        error,
    }
}
