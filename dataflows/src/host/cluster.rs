//! The timely instance an engine runs: [`Cluster`], one set of worker threads that hosts
//! every dataflow built on it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::worker::{poll, run, Command, DataflowId, Link, Reply, WorkerEnd};
use crate::error::{Error, Result};

/// One timely instance: `workers` worker threads that host any number of dataflows.
///
/// Cloning a `Cluster` clones a handle on the same threads. Every
/// [`WindowedAggregate`](crate::WindowedAggregate) built with
/// [`spawn_on`](crate::WindowedAggregate::spawn_on) runs on these threads, so an engine with
/// ten views and two workers runs two worker threads, not twenty. The threads stop once the
/// last handle (cluster or dataflow) is dropped.
///
/// The host talks to the workers one round at a time (commands out, replies back), under a
/// lock: dataflows on one cluster may be driven from several threads, and their rounds take
/// turns. Stepping the workers for one dataflow also runs any other dataflow that has work.
///
/// ```
/// use thund_dataflows::{AggKind, Cluster, Config, WindowedAggregate};
///
/// let cluster = Cluster::start(2)?;
/// let config = Config::new(vec![AggKind::Count]).with_workers(2);
/// let mut views: Vec<WindowedAggregate> = (0..10)
///     .map(|_| WindowedAggregate::spawn_on(&cluster, config.clone()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(cluster.workers(), 2);
/// views[3].advance_to(10)?;
/// assert_eq!((views[3].frontier(), views[4].frontier()), (10, i64::MIN));
/// # Ok::<(), thund_dataflows::Error>(())
/// ```
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("workers", &self.shared.workers)
            .finish_non_exhaustive()
    }
}

struct Shared {
    workers: usize,
    links: Mutex<Links>,
    /// Raised once a worker died: the others stop waiting for frontiers it would move.
    abort: Arc<AtomicBool>,
    next_id: AtomicU64,
    guards: Mutex<Option<timely::communication::initialize::WorkerGuards<()>>>,
}

/// The host's ends of every worker's channels.
pub(crate) struct Links {
    links: Vec<Link>,
    abort: Arc<AtomicBool>,
}

impl Cluster {
    /// Starts `workers` timely worker threads (`timely::Config::process(workers)`), each
    /// waiting for commands.
    pub fn start(workers: usize) -> Result<Self> {
        if workers == 0 {
            return Err(Error::InvalidConfig {
                reason: "workers must be at least 1".to_string(),
            });
        }
        let mut links = Vec::with_capacity(workers);
        let mut ends = Vec::with_capacity(workers);
        for _ in 0..workers {
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
        let worker_abort = Arc::clone(&abort);
        let guards = timely::execute(timely::Config::process(workers), move |worker| {
            let end = match ends.lock() {
                Ok(mut ends) => ends.get_mut(worker.index()).and_then(Option::take),
                Err(_) => None,
            };
            if let Some(end) = end {
                run(worker, end, Arc::clone(&worker_abort));
            }
        })
        .map_err(|reason| Error::Spawn { reason })?;
        Ok(Cluster {
            shared: Arc::new(Shared {
                workers,
                links: Mutex::new(Links {
                    links,
                    abort: Arc::clone(&abort),
                }),
                abort,
                next_id: AtomicU64::new(0),
                guards: Mutex::new(Some(guards)),
            }),
        })
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.shared.workers
    }

    /// A fresh dataflow identifier.
    pub(crate) fn next_id(&self) -> DataflowId {
        self.shared.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The channels, for one round of commands and replies.
    pub(crate) fn links(&self) -> MutexGuard<'_, Links> {
        // A panic while the lock was held left no half-sent round behind that matters:
        // the next round's replies still come in order.
        self.shared
            .links
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a worker died.
    pub(crate) fn aborted(&self) -> bool {
        self.shared.abort.load(Ordering::Relaxed)
    }

    /// Retires dataflow `id` on every worker (a handle's `Drop`): its inputs close and it
    /// runs until done, or is dropped if a worker died. A worker that is gone has nothing
    /// to retire; the others' replies are drained.
    pub(crate) fn retire(&self, id: DataflowId) {
        let links = self.links();
        if links.broadcast(|| Command::Drop(id)).is_ok() {
            let _ = links.gather();
        }
    }
}

impl Links {
    /// Sends a command to one worker (`Err(worker)`: it is gone).
    pub(crate) fn send(&self, worker: usize, command: Command) -> std::result::Result<(), usize> {
        match self.links[worker].commands.send(command) {
            Ok(()) => Ok(()),
            Err(_) => {
                self.abort.store(true, Ordering::Relaxed);
                Err(worker)
            }
        }
    }

    /// Sends each worker its command.
    pub(crate) fn broadcast(
        &self,
        mut command: impl FnMut() -> Command,
    ) -> std::result::Result<(), usize> {
        (0..self.links.len()).try_for_each(|w| self.send(w, command()))
    }

    /// Waits for one reply from every worker. If a worker is gone (it panicked), the others
    /// are told to stop waiting for it (`abort`), their replies are drained, and the result is
    /// `Err(worker)` of the first dead one.
    pub(crate) fn gather(&self) -> std::result::Result<Vec<Reply>, usize> {
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
        match dead.first() {
            Some(&worker) => Err(worker),
            None => Ok(replies.into_iter().flatten().collect()),
        }
    }
}

impl Drop for Shared {
    /// Stops the workers: each retires the dataflows it still hosts and returns; the
    /// threads are joined.
    fn drop(&mut self) {
        let links = self
            .links
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for link in &links.links {
            // A worker that is gone already has nothing to stop.
            let _ = link.commands.send(Command::Shutdown);
        }
        let guards = self
            .guards
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(guards) = guards {
            // A panicked worker's result is an `Err` here; it was reported when observed.
            let _ = guards.join();
        }
    }
}
