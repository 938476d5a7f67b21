//! The timely instance an engine runs: [`Cluster`], one set of worker threads that hosts
//! every dataflow built on it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use timely::communication::allocator::thread::Thread;
use timely::communication::allocator::Allocator;
use timely::worker::Worker;

use super::worker::{poll, run, Command, DataflowId, Hosting, Link, Reply, WorkerEnd};
use crate::error::{Error, Result};

/// One timely instance: `workers` workers that host any number of dataflows, each on a
/// thread of its own ([`start`](Self::start)), or one worker stepped on the thread that
/// drives it ([`inline`](Self::inline)).
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
    /// Whether the one worker is stepped on the caller's thread.
    inline: bool,
    links: Mutex<Links>,
    /// Raised once a worker died: the others stop waiting for frontiers it would move.
    abort: Arc<AtomicBool>,
    next_id: AtomicU64,
    guards: Mutex<Option<timely::communication::initialize::WorkerGuards<()>>>,
}

/// How the host reaches its workers: the host's ends of every worker thread's channels,
/// or the one worker it steps itself.
pub(crate) struct Links {
    to: To,
    abort: Arc<AtomicBool>,
}

enum To {
    Threads(Vec<Link>),
    Inline(Box<Inline>),
}

/// The one worker of an inline cluster: a timely worker with a thread-local allocator, what
/// it hosts, and the replies to the commands applied since the last gather.
struct Inline {
    worker: Worker,
    hosting: Hosting,
    replies: Vec<Reply>,
    /// Set once a command panicked: the worker's state is then unusable.
    dead: bool,
}

// SAFETY: `Inline` is not `Send` only because timely's worker and the dataflows it hosts
// share state through `Rc`s (operators, input and probe handles, traces, the open-window
// tables, the snapshots' captured batches). Every clone of those `Rc`s is owned by this
// one value: `Hosting` keeps the handles, the worker keeps the operators, and nothing that
// leaves it (replies, snapshot chunks) holds an `Rc` (both cross threads on a worker
// thread's channels, so they are `Send`). Moving the whole value to another thread moves
// every owner of each `Rc` together, so no two threads ever touch one reference count.
// It is reached only through the cluster's `Mutex`, one thread at a time, and only between
// steps: the thread-local that timely sets while an operator is scheduled is restored
// before a step returns. Timely's unpark handles (`Buzzer`, `SyncActivations`) name the
// thread that made them; they serve parked workers, and this worker never parks.
#[allow(unsafe_code)]
unsafe impl Send for Inline {}

impl Inline {
    fn new() -> Self {
        let allocator = Allocator::Thread(Thread::default());
        Inline {
            worker: Worker::new(
                timely::WorkerConfig::default(),
                allocator,
                Some(std::time::Instant::now()),
            ),
            hosting: Hosting::default(),
            replies: Vec::new(),
            dead: false,
        }
    }

    /// Runs `f` on the worker and what it hosts, on the caller's thread; a panic marks
    /// the worker dead (`Err(())`), as a worker thread's panic ends its thread. After
    /// that nothing of the worker's state is read again: it is only dropped.
    fn guarded<R>(
        &mut self,
        f: impl FnOnce(&mut Worker, &mut Hosting) -> R,
    ) -> std::result::Result<R, ()> {
        if self.dead {
            return Err(());
        }
        let (worker, hosting) = (&mut self.worker, &mut self.hosting);
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(worker, hosting)));
        self.dead = ran.is_err();
        ran.map_err(|_| ())
    }

    /// Applies a command (see [`Self::guarded`]), keeping its reply for the gather.
    fn apply(&mut self, command: Command) -> std::result::Result<(), ()> {
        let reply = self.guarded(|worker, hosting| hosting.apply(worker, command, &|| false))?;
        self.replies.extend(reply);
        Ok(())
    }
}

/// The most workers a [`Cluster`] starts: each is a thread of the process, and timely's
/// process allocator gives every pair of them a channel, so their cost grows with the
/// square of their number.
pub const MAX_WORKERS: usize = 256;

impl Cluster {
    /// Starts `workers` timely worker threads (`timely::Config::process(workers)`), each
    /// waiting for commands.
    pub fn start(workers: usize) -> Result<Self> {
        if workers == 0 || workers > MAX_WORKERS {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "workers must be between 1 and {MAX_WORKERS} (each is a thread of this \
                     process, and timely links every pair of them), not {workers}"
                ),
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
                inline: false,
                links: Mutex::new(Links {
                    to: To::Threads(links),
                    abort: Arc::clone(&abort),
                }),
                abort,
                next_id: AtomicU64::new(0),
                guards: Mutex::new(Some(guards)),
            }),
        })
    }

    /// One timely worker, stepped on the thread that drives the cluster's dataflows (a
    /// push, a step, a snapshot's [`wait`](crate::PendingSnapshot::wait)), as
    /// `timely::execute_directly` steps it: no thread is started, and no command, reply or
    /// state crosses between threads. The cluster may move between threads (between
    /// calls); calls from several threads take turns.
    ///
    /// ```
    /// use thund_dataflows::{AggKind, Cluster, Config, WindowedAggregate};
    ///
    /// let cluster = Cluster::inline();
    /// let mut view = WindowedAggregate::spawn_on(&cluster, Config::new(vec![AggKind::Count]))?;
    /// view.advance_to(10)?;
    /// assert_eq!((cluster.workers(), view.frontier()), (1, 10));
    /// # Ok::<(), thund_dataflows::Error>(())
    /// ```
    pub fn inline() -> Self {
        let abort = Arc::new(AtomicBool::new(false));
        Cluster {
            shared: Arc::new(Shared {
                workers: 1,
                inline: true,
                links: Mutex::new(Links {
                    to: To::Inline(Box::new(Inline::new())),
                    abort: Arc::clone(&abort),
                }),
                abort,
                next_id: AtomicU64::new(0),
                guards: Mutex::new(None),
            }),
        }
    }

    /// One worker [`inline`](Self::inline), or `workers` threads ([`start`](Self::start)).
    pub fn for_workers(workers: usize) -> Result<Self> {
        if workers == 1 {
            Ok(Self::inline())
        } else {
            Self::start(workers)
        }
    }

    /// Whether the one worker is stepped on the caller's thread ([`inline`](Self::inline)).
    pub fn is_inline(&self) -> bool {
        self.shared.inline
    }

    /// Reads one chunk of a snapshot on an inline cluster's worker (the thread that waits
    /// for the snapshot reads it, a chunk per turn of the lock); whether there was one to
    /// read. Worker threads read their snapshots themselves: `false`.
    pub(crate) fn read_chunk(&self) -> bool {
        let mut links = self.links();
        match &mut links.to {
            To::Inline(inline) if !inline.dead && inline.hosting.reading() => {
                let read = inline.guarded(|worker, hosting| hosting.read_chunk(worker.index()));
                if read.is_err() {
                    links.abort.store(true, Ordering::Relaxed);
                }
                true
            }
            _ => false,
        }
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
        let mut links = self.links();
        if links.broadcast(|| Command::Drop(id)).is_ok() {
            let _ = links.gather();
        }
    }
}

impl Links {
    /// Sends a command to one worker (`Err(worker)`: it is gone). An inline worker applies
    /// it here.
    pub(crate) fn send(
        &mut self,
        worker: usize,
        command: Command,
    ) -> std::result::Result<(), usize> {
        let sent = match &mut self.to {
            To::Threads(links) => links[worker].commands.send(command).map_err(|_| ()),
            To::Inline(inline) => inline.apply(command),
        };
        sent.map_err(|()| {
            self.abort.store(true, Ordering::Relaxed);
            worker
        })
    }

    /// Sends each worker its command.
    pub(crate) fn broadcast(
        &mut self,
        mut command: impl FnMut() -> Command,
    ) -> std::result::Result<(), usize> {
        let n = match &self.to {
            To::Threads(links) => links.len(),
            To::Inline(_) => 1,
        };
        (0..n).try_for_each(|w| self.send(w, command()))
    }

    /// Waits for one reply from every worker. If a worker is gone (it panicked), the others
    /// are told to stop waiting for it (`abort`), their replies are drained, and the result is
    /// `Err(worker)` of the first dead one.
    pub(crate) fn gather(&mut self) -> std::result::Result<Vec<Reply>, usize> {
        let links = match &mut self.to {
            To::Threads(links) => links,
            To::Inline(inline) if inline.dead => return Err(0),
            To::Inline(inline) => return Ok(std::mem::take(&mut inline.replies)),
        };
        let n = links.len();
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
                if let Ok(reply) = poll(&links[w].replies) {
                    replies[w] = Some(reply);
                    continue;
                }
                let timeout = Duration::from_millis(if dead.is_empty() { 20 } else { 1 });
                match links[w].replies.recv_timeout(timeout) {
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
        match &mut links.to {
            To::Threads(threads) => {
                for link in threads.iter() {
                    // A worker that is gone already has nothing to stop.
                    let _ = link.commands.send(Command::Shutdown);
                }
            }
            // a dead worker's state is only dropped
            To::Inline(inline) => {
                let _ = inline.guarded(|worker, hosting| hosting.retire_all(worker, &|| false));
            }
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
