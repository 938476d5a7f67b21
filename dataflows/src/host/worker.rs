//! The worker threads: each runs a loop that applies the host's commands to its rendered dataflow.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::Arc;

use differential_dataflow::difference::{Monoid, Semigroup};
use differential_dataflow::trace::cursor::cursor_list;
use differential_dataflow::trace::Cursor;
use timely::dataflow::ProbeHandle;
use timely::worker::Worker;

use crate::error::{Error, Result};
use crate::render::aggregate::{render, Rendered};
use crate::state::agg::{AggKind, Update};
use crate::state::diff::Acc;
use crate::state::open::{OpenWindows, StepOutput};
use crate::time::{event_time, start_of, Time};
use crate::typedefs::NamedTrace;
use crate::window::{expiry, EventTime, Panes};

/// A command from the host to one worker.
#[derive(Debug)]
pub(crate) enum Command {
    /// Add contributions at the current input time (no reply).
    Insert(Vec<Update>),
    /// Advance the input to the time, run until the output frontier passes it, compact, and
    /// reply [`Reply::Stepped`].
    Advance(Time),
    /// Close the input (end of stream), run until the dataflow is done, reply [`Reply::Stepped`].
    Finish,
    /// Reply [`Reply::Snapshot`] with the trace's open windows (`window.end > frontier`).
    Snapshot(EventTime),
    /// Stop: close the input and return from the worker closure.
    Shutdown,
    /// Panic (tests of the host's handling of a dead worker).
    #[cfg(test)]
    Panic,
}

/// A worker's answer to [`Command::Advance`], [`Command::Finish`] or [`Command::Snapshot`].
#[derive(Debug)]
pub(crate) enum Reply {
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
    /// The worker's open windows as read from its trace.
    Snapshot(Result<Vec<Update>>),
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

/// Runs the command loop of one worker until `Shutdown` or until the host goes away.
///
/// `abort` is raised by the host when a peer died: step loops then stop waiting for a
/// frontier that will never move, and the dataflow is dropped instead of drained.
pub(crate) fn run(
    worker: &mut Worker,
    kinds: Vec<AggKind>,
    panes: Option<Panes>,
    end: WorkerEnd,
    abort: Arc<AtomicBool>,
) {
    let Rendered {
        index,
        input,
        trace,
        probe,
        open,
    } = render(worker, kinds.clone(), panes);
    let mut input = Some(input);
    let mut trace = Some(trace);
    while let Some(command) = receive(&end.commands) {
        let reply = match command {
            Command::Insert(updates) => {
                if let Some(input) = input.as_mut() {
                    for u in updates {
                        input.update((u.window, u.key), Acc::insert(&kinds, &u.aggs));
                    }
                }
                continue;
            }
            Command::Advance(time) => {
                if let Some(input) = input.as_mut() {
                    input.advance_to(time);
                    input.flush();
                }
                worker.step_while(|| probe.less_than(&time) && !abort.load(Ordering::Relaxed));
                if let Some(trace) = trace.as_mut() {
                    trace.compact_to(&[time]);
                }
                step_reply(&probe, trace.as_ref(), &open, event_time(time))
            }
            Command::Finish => {
                drop(input.take());
                worker.step_while(|| !probe.done() && !abort.load(Ordering::Relaxed));
                // Every window is closed: nothing is left to snapshot, so release the trace.
                drop(trace.take());
                step_reply(&probe, None, &open, EventTime::MAX)
            }
            Command::Snapshot(frontier) => Reply::Snapshot(match trace.as_ref() {
                Some(trace) => snapshot(trace, frontier, panes),
                None => Ok(Vec::new()),
            }),
            Command::Shutdown => break,
            #[cfg(test)]
            Command::Panic => panic!("worker panic induced by a test"),
        };
        if end.replies.send(reply).is_err() {
            break;
        }
    }
    drop(input);
    drop(trace);
    if abort.load(Ordering::Relaxed) {
        // A peer is gone: the dataflow can never drain, so drop it instead.
        worker.drop_dataflow(index);
    }
}

/// How long a thread polls a channel before it sleeps on it: a trigger's round trip to
/// the workers then costs no wake-up when commands and replies follow each other closely
/// (as they do at one trigger per few rows), and little CPU otherwise.
const POLL: std::time::Duration = std::time::Duration::from_micros(50);

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

fn step_reply(
    probe: &ProbeHandle<Time>,
    trace: Option<&NamedTrace>,
    open: &RefCell<OpenWindows>,
    frontier: EventTime,
) -> Reply {
    let mut open = open.borrow_mut();
    let error = open.take_error();
    let out = open.take_step(frontier);
    Reply::Stepped {
        out,
        frontier: probe.with_frontier(|f| f.iter().min().copied()),
        sizes: trace.map(|t| (t.name(), t.size())).into_iter().collect(),
        open_groups: open.len(),
        error,
    }
}

/// Reads the open windows (`window.end > frontier`) from the trace: for each `(window, key)`
/// the accumulation of its contributions before the window's end.
fn snapshot(trace: &NamedTrace, frontier: EventTime, panes: Option<Panes>) -> Result<Vec<Update>> {
    let (mut cursor, storage) = cursor_list(trace.batches());
    let mut out = Vec::new();
    while let Some((window, key)) = cursor.get_key(&storage) {
        let expires = expiry(panes, *window);
        if expires > frontier {
            let end = start_of(expires);
            let mut acc = Acc::zero();
            while cursor.get_val(&storage).is_some() {
                cursor.map_times(&storage, |time, diff| {
                    if *time < end {
                        acc.plus_equals(diff);
                    }
                });
                cursor.step_val(&storage);
            }
            if acc.overflow {
                return Err(Error::Overflow {
                    kind: acc.first_kind().unwrap_or(AggKind::SumInt),
                    window: Some(*window),
                    detail: "in the dataflow's accumulation".to_string(),
                });
            }
            if acc.n > 0 {
                out.push(Update {
                    window: *window,
                    key: *key,
                    aggs: acc.states().collect(),
                });
            }
        }
        cursor.step_key(&storage);
    }
    Ok(out)
}
