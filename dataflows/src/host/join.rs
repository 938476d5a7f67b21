//! The host-side handle on a running windowed-join dataflow: [`WindowedJoin`].

use std::collections::BTreeSet;

use differential_dataflow::hashable::Hashable;

use super::cluster::Cluster;
use super::worker::{lower, next_time, out_of_turn, Command, DataflowId, Reply};
use crate::error::{Error, Result};
use crate::state::join::{JoinRecord, Pair};
use crate::time::{event_time, start_of, Time};
use crate::window::{EventTime, Key, Window};

/// Which input of a join a row enters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Side {
    /// The join's left input.
    Left,
    /// The join's right input.
    Right,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::Left => 0,
            Side::Right => 1,
        }
    }
}

/// A row of one side of a join in one window: `count` copies of row `row` (an id the
/// caller gives its rows), whose join key has id `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JoinRow {
    /// The input it enters.
    pub side: Side,
    /// Its window: rows meet only rows of the same window.
    pub window: Window,
    /// Its join key's id: rows meet only rows of the same key.
    pub key: Key,
    /// The row's id.
    pub row: Key,
    /// Its multiplicity (positive).
    pub count: i64,
}

/// The outcome of one [`WindowedJoin::advance_to`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JoinStep {
    /// The output frontier after the step.
    pub frontier: EventTime,
    /// The join's output changes in windows still open before the step, since the previous
    /// step: for each window, the pairs of rows that met, with their multiplicities, in no
    /// particular order. Each meeting of two inserted rows gives its pair once (a row id
    /// inserted twice meets again, so its pairs may repeat: sum their counts). Rows only
    /// enter, so every count is positive.
    pub pairs: Vec<Pair>,
}

/// Handle to a running windowed inner equi-join on timely worker threads: two inputs of
/// rows by `(window, join key)`, each worker holding its keys' rows in a hash table (a
/// symmetric hash join: a row's pairs are made as it comes), and the join's output
/// changes, per window, at every step. The frontier is event time.
///
/// Rows enter at the current input time; [`advance_to`](Self::advance_to) moves every
/// worker's inputs to the watermark `w`, returns the pairs the step's rows made, and
/// evicts every window with `end <= w` (its rows are dropped from both sides, so
/// state stays bounded by the open windows).
///
/// ```
/// use thund_dataflows::{Cluster, JoinRow, Side, Window, WindowedJoin};
///
/// let cluster = Cluster::start(2)?;
/// let mut join = WindowedJoin::spawn_on(&cluster)?;
/// let w = Window::new(0, 10);
/// let row = |side, key, row| JoinRow { side, window: w, key, row, count: 1 };
/// join.insert([row(Side::Left, 7, 100), row(Side::Right, 7, 200), row(Side::Right, 8, 201)])?;
/// let step = join.advance_to(5)?;
/// assert_eq!(step.pairs.len(), 1);
/// assert_eq!((step.pairs[0].left, step.pairs[0].right), (100, 200));
/// join.advance_to(10)?; // [0, 10) closes: its rows are dropped
/// assert_eq!(join.snapshot()?, vec![]);
/// # Ok::<(), thund_dataflows::Error>(())
/// ```
pub struct WindowedJoin {
    cluster: Cluster,
    id: DataflowId,
    /// The current input time of every worker.
    time: Time,
    /// The output frontier after the last step (`None`: the stream ended).
    frontier: Option<Time>,
    /// Rows inserted since the last step, by owner and side.
    pending: Vec<[Vec<(JoinRecord, i64)>; 2]>,
    /// Windows that took rows and have not been evicted.
    open: BTreeSet<Window>,
    /// Pairs observed by internal steps (snapshots), owed to the next `advance_to`.
    owed: Vec<Pair>,
    /// Each worker's state sizes after the last step.
    sizes: Vec<Vec<(&'static str, usize)>>,
    /// The error that made the dataflow unusable.
    poisoned: Option<Error>,
}

impl std::fmt::Debug for WindowedJoin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowedJoin")
            .field("frontier", &self.frontier())
            .field("state_size", &self.state_size())
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl WindowedJoin {
    /// Renders the join on the worker threads of `cluster`. The input time (and the
    /// frontier) starts at `EventTime::MIN`.
    pub fn spawn_on(cluster: &Cluster) -> Result<Self> {
        if cluster.aborted() {
            return Err(Error::WorkerPanicked { worker: 0 });
        }
        let n = cluster.workers();
        let id = cluster.next_id();
        let mut join = WindowedJoin {
            cluster: cluster.clone(),
            id,
            time: Time::MIN,
            frontier: Some(Time::MIN),
            pending: (0..n).map(|_| [Vec::new(), Vec::new()]).collect(),
            open: BTreeSet::new(),
            owed: Vec::new(),
            sizes: vec![Vec::new(); n],
            poisoned: None,
        };
        let replies = join.round(|_| Command::BuildJoin(id))?;
        for (worker, reply) in replies.into_iter().enumerate() {
            if !matches!(reply, Reply::Built) {
                return Err(join.unexpected(worker, reply));
            }
        }
        Ok(join)
    }

    /// Starts a join whose input (and frontier) is at `at`, holding `rows` (what
    /// [`snapshot`](Self::snapshot) returned, from any number of workers), and returns it
    /// with the pairs those rows make, sorted and consolidated: the join's current output of
    /// every open window.
    /// A row whose window ended at or before `at` is [`Error::Late`].
    pub fn restore_on(
        cluster: &Cluster,
        at: EventTime,
        rows: Vec<JoinRow>,
    ) -> Result<(Self, Vec<Pair>)> {
        let mut join = Self::spawn_on(cluster)?;
        if at == EventTime::MAX {
            // a join that had ended: every window closed, so no row is open
            if let Some(r) = rows.first() {
                return Err(Error::Late {
                    window: r.window,
                    frontier: at,
                });
            }
            join.advance_to(at)?;
            return Ok((join, Vec::new()));
        }
        if at > EventTime::MIN {
            join.advance_to(at)?;
        }
        join.insert(rows)?;
        let step = join.step(Some(join.next_time()?), Vec::new())?;
        Ok((join, consolidate(step)))
    }

    /// Inserts rows at the current input time. A row whose `window.end <= frontier()` is
    /// [`Error::Late`], a window with `start >= end` [`Error::InvalidWindow`]; on these
    /// errors nothing of the call is applied. A count of zero is ignored.
    pub fn insert(&mut self, rows: impl IntoIterator<Item = JoinRow>) -> Result<()> {
        self.check_usable()?;
        let rows: Vec<JoinRow> = rows.into_iter().filter(|r| r.count != 0).collect();
        let frontier = self.frontier();
        for r in &rows {
            if r.window.start >= r.window.end {
                return Err(Error::InvalidWindow { window: r.window });
            }
            if r.window.end <= frontier {
                return Err(Error::Late {
                    window: r.window,
                    frontier,
                });
            }
        }
        let n = self.pending.len() as u64;
        let share = rows.len() / self.pending.len().max(1) + rows.len() / 8 + 16;
        for p in self.pending.iter_mut().flatten() {
            p.reserve(share);
        }
        // the window of the row before (rows come in runs of one window):
        // the set of open windows is searched once per run, not per row
        let mut last: Option<Window> = None;
        for r in rows {
            let key = (r.window, r.key);
            // each worker holds the keys of its hash: send each row to its owner
            let owner = if n == 1 {
                0
            } else {
                (key.hashed() % n) as usize
            };
            self.pending[owner][r.side.index()].push(((key, r.row), r.count));
            if last != Some(r.window) {
                self.open.insert(r.window);
                last = Some(r.window);
            }
        }
        Ok(())
    }

    /// Advances every worker's inputs to the watermark `w`, runs until the output frontier
    /// has passed it, and returns the pairs made since the last step; then evicts every
    /// window with `end <= w`. `w` below [`frontier`](Self::frontier) is
    /// [`Error::WatermarkRegressed`]; `w` equal to it is a step that does not move time;
    /// `EventTime::MAX` is the end of stream.
    pub fn advance_to(&mut self, w: EventTime) -> Result<JoinStep> {
        self.check_usable()?;
        let frontier = self.frontier();
        if w < frontier {
            return Err(Error::WatermarkRegressed {
                requested: w,
                frontier,
            });
        }
        if self.frontier.is_none() {
            return Ok(JoinStep {
                frontier,
                pairs: Vec::new(),
            });
        }
        let target = if w == EventTime::MAX {
            None
        } else if w > frontier {
            Some(start_of(w))
        } else {
            Some(self.next_time()?)
        };
        let closing: Vec<Window> = match target {
            Some(_) => self.open.iter().copied().filter(|x| x.end <= w).collect(),
            None => Vec::new(),
        };
        let mut pairs = self.step(target, closing.clone())?;
        for x in &closing {
            self.open.remove(x);
        }
        if target.is_none() {
            self.open.clear();
        }
        pairs.append(&mut self.owed);
        Ok(JoinStep {
            frontier: self.frontier(),
            pairs,
        })
    }

    /// The open windows' rows, as the workers hold them (rows inserted since the
    /// last step are sealed in first, by a step that does not move the watermark; the
    /// pairs it makes are reported by the next [`advance_to`](Self::advance_to)). Feed
    /// them to [`restore_on`](Self::restore_on).
    pub fn snapshot(&mut self) -> Result<Vec<JoinRow>> {
        self.check_usable()?;
        if self.frontier.is_none() {
            return Ok(Vec::new());
        }
        if self.pending.iter().flatten().any(|p| !p.is_empty()) {
            let mut pairs = self.step(Some(self.next_time()?), Vec::new())?;
            self.owed.append(&mut pairs);
        }
        let (id, frontier) = (self.id, self.frontier());
        let replies = self.round(|_| Command::SnapshotJoin { id, frontier })?;
        let mut out = Vec::new();
        for (worker, reply) in replies.into_iter().enumerate() {
            match reply {
                Reply::JoinRows(sides) => {
                    for (side, rows) in [Side::Left, Side::Right].into_iter().zip(sides) {
                        out.extend(
                            rows.into_iter()
                                .map(|(((window, key), row), count)| JoinRow {
                                    side,
                                    window,
                                    key,
                                    row,
                                    count,
                                }),
                        );
                    }
                }
                other => return Err(self.unexpected(worker, other)),
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The output frontier as event time: the last `w` passed to
    /// [`advance_to`](Self::advance_to) (`EventTime::MIN` before the first,
    /// `EventTime::MAX` after the end of stream).
    pub fn frontier(&self) -> EventTime {
        match self.frontier {
            Some(t) => event_time(t),
            None => EventTime::MAX,
        }
    }

    /// Rows held on both sides over all workers, as of the last step:
    /// bounded by the open windows' rows (closed windows are evicted).
    pub fn state_size(&self) -> usize {
        self.sizes.iter().flatten().map(|(_, n)| n).sum()
    }

    /// Windows that took rows and are not closed yet.
    pub fn open_windows(&self) -> usize {
        self.open.len()
    }

    /// The time of a step that does not move the watermark.
    fn next_time(&self) -> Result<Time> {
        next_time(self.time)
    }

    /// One step to `target` (`None`: end of stream), evicting `evict` after it; returns
    /// the pairs made since the last step (as [`JoinStep::pairs`]).
    fn step(&mut self, target: Option<Time>, evict: Vec<Window>) -> Result<Vec<Pair>> {
        let id = self.id;
        let replies = self.round(|_| match target {
            Some(time) => Command::AdvanceJoin {
                id,
                time,
                evict: evict.clone(),
            },
            None => Command::FinishJoin(id),
        })?;
        let mut pairs = Vec::new();
        let mut frontier: Option<Time> = None;
        for (w, reply) in replies.into_iter().enumerate() {
            match reply {
                Reply::Joined {
                    pairs: p,
                    frontier: f,
                    sizes,
                } => {
                    // (one worker's pairs moved, not copied)
                    match pairs.is_empty() {
                        true => pairs = p,
                        false => pairs.extend(p),
                    }
                    self.sizes[w] = sizes;
                    frontier = lower(frontier, f);
                }
                other => return Err(self.unexpected(w, other)),
            }
        }
        match target {
            Some(t) => {
                self.time = t;
                self.frontier = Some(frontier.unwrap_or(t).min(t));
            }
            None => {
                self.time = Time::MAX;
                self.frontier = None;
            }
        }
        Ok(pairs)
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(e) => Err(Error::Poisoned {
                cause: Box::new(e.clone()),
            }),
            None => Ok(()),
        }
    }

    fn poison(&mut self, e: Error) -> Error {
        if self.poisoned.is_none() {
            self.poisoned = Some(e.clone());
        }
        e
    }

    /// One round with the workers, under the cluster's lock: the pending rows to their
    /// owners, then `command(worker)` to each, and every worker's reply.
    fn round(&mut self, mut command: impl FnMut(usize) -> Command) -> Result<Vec<Reply>> {
        let cluster = self.cluster.clone();
        let mut links = cluster.links();
        let id = self.id;
        let pending = std::mem::replace(
            &mut self.pending,
            (0..cluster.workers())
                .map(|_| [Vec::new(), Vec::new()])
                .collect(),
        );
        let sent = (|| {
            for (w, part) in pending.into_iter().enumerate() {
                if part.iter().any(|p| !p.is_empty()) {
                    links.send(w, Command::InsertJoin(id, part))?;
                }
            }
            let mut w = 0;
            links.broadcast(|| {
                w += 1;
                command(w - 1)
            })
        })();
        match sent.and_then(|()| links.gather()) {
            Ok(replies) => Ok(replies),
            Err(worker) => Err(self.poison(Error::WorkerPanicked { worker })),
        }
    }

    fn unexpected(&mut self, worker: usize, reply: Reply) -> Error {
        self.poison(out_of_turn(worker, reply))
    }
}

/// `pairs` sorted, with the counts of equal pairs summed and zeros dropped.
fn consolidate(mut pairs: Vec<Pair>) -> Vec<Pair> {
    pairs.sort_unstable();
    let mut out: Vec<Pair> = Vec::with_capacity(pairs.len());
    for p in pairs {
        match out.last_mut() {
            Some(q) if (q.window, q.left, q.right) == (p.window, p.left, p.right) => {
                q.count += p.count
            }
            _ => out.push(p),
        }
    }
    out.retain(|p| p.count != 0);
    out
}

impl Drop for WindowedJoin {
    /// Retires the join on every worker.
    fn drop(&mut self) {
        self.cluster.retire(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A random stream of rows on both sides, joined per window by the dataflow (1 and 2
    /// workers, restored from a snapshot half way) and by a nested loop: the same pairs,
    /// and the state drains to nothing once every window closed.
    #[test]
    fn pairs_equal_a_nested_loop_per_window_and_eviction_drains_the_state() {
        let mut next = crate::numbers_below(7);
        let mut steps: Vec<Vec<JoinRow>> = Vec::new();
        for s in 0..40i64 {
            let rows = (0..30)
                .map(|_| {
                    let t = s * 5 + next(20) as i64;
                    let start = t / 10 * 10;
                    JoinRow {
                        side: if next(2) == 0 {
                            Side::Left
                        } else {
                            Side::Right
                        },
                        window: Window::new(start, start + 10),
                        key: next(4),
                        row: next(6),
                        count: 1 + next(2) as i64,
                    }
                })
                .filter(|r| r.window.end > s * 5 - 5)
                .collect();
            steps.push(rows);
        }
        // the nested loop: every left row with every right row of its window and key
        let mut expected: BTreeMap<(Window, Key, Key), i64> = BTreeMap::new();
        let all: Vec<JoinRow> = steps.iter().flatten().copied().collect();
        for l in all.iter().filter(|r| r.side == Side::Left) {
            for r in all.iter().filter(|r| r.side == Side::Right) {
                if (l.window, l.key) == (r.window, r.key) {
                    *expected.entry((l.window, l.row, r.row)).or_default() += l.count * r.count;
                }
            }
        }
        for workers in [1, 2] {
            let cluster = Cluster::start(workers).expect("cluster");
            let mut join = WindowedJoin::spawn_on(&cluster).expect("spawn");
            let mut got: BTreeMap<(Window, Key, Key), i64> = BTreeMap::new();
            for (s, rows) in steps.iter().enumerate() {
                join.insert(rows.iter().copied()).expect("insert");
                if s == 20 {
                    // a checkpoint and a resume on another number of workers
                    let rows = join.snapshot().expect("snapshot");
                    let at = join.frontier();
                    let other = Cluster::start(3 - workers).expect("cluster");
                    let owed = join.advance_to(at).expect("owed").pairs;
                    for p in owed {
                        *got.entry((p.window, p.left, p.right)).or_default() += p.count;
                    }
                    drop(join);
                    let (restored, pairs) =
                        WindowedJoin::restore_on(&other, at, rows).expect("restore");
                    // the restored pairs are the open windows' whole output so far
                    for p in &pairs {
                        assert_eq!(
                            got.get(&(p.window, p.left, p.right)),
                            Some(&p.count),
                            "{p:?}"
                        );
                    }
                    join = restored;
                }
                let w = s as i64 * 5 - 5;
                let step = join.advance_to(w.max(join.frontier())).expect("advance");
                for p in step.pairs {
                    assert!(p.count > 0 && p.window.end > w - 5, "{p:?}");
                    *got.entry((p.window, p.left, p.right)).or_default() += p.count;
                }
            }
            let last = join.advance_to(EventTime::MAX).expect("finish");
            for p in last.pairs {
                *got.entry((p.window, p.left, p.right)).or_default() += p.count;
            }
            assert_eq!(got, expected, "{workers} workers");
            assert!(got.len() > 50, "{}", got.len());
        }
    }

    /// A join checkpointed after its end (the last checkpoint of a finished
    /// run) restores as ended, and refuses rows of an open window.
    #[test]
    fn a_join_restored_after_its_end_is_ended() {
        let cluster = Cluster::start(1).expect("cluster");
        let (mut join, pairs) =
            WindowedJoin::restore_on(&cluster, EventTime::MAX, Vec::new()).expect("restored");
        assert!(pairs.is_empty());
        assert_eq!(join.frontier(), EventTime::MAX);
        assert!(join
            .advance_to(EventTime::MAX)
            .expect("ended")
            .pairs
            .is_empty());
        let row = JoinRow {
            side: Side::Left,
            window: Window::new(0, 10),
            key: 1,
            row: 1,
            count: 1,
        };
        let late = WindowedJoin::restore_on(&cluster, EventTime::MAX, vec![row]);
        assert!(matches!(late, Err(Error::Late { .. })));
    }

    #[test]
    fn closed_windows_leave_the_state() {
        let cluster = Cluster::start(1).expect("cluster");
        let mut join = WindowedJoin::spawn_on(&cluster).expect("spawn");
        let mut peak = 0;
        for s in 0..200i64 {
            let w = Window::new(s * 10, s * 10 + 10);
            let rows = (0..20u64).map(|i| JoinRow {
                side: if i % 2 == 0 { Side::Left } else { Side::Right },
                window: w,
                key: i % 5,
                row: i,
                count: 1,
            });
            join.insert(rows).expect("insert");
            join.advance_to(s * 10 + 5).expect("step");
            peak = peak.max(join.state_size());
        }
        // 200 windows of 20 rows went through; a few windows' worth is held at any time
        assert!(peak < 200, "{peak}");
        assert!(join.state_size() > 0);
        join.advance_to(EventTime::MAX).expect("finish");
        assert!(matches!(
            join.insert([JoinRow {
                side: Side::Left,
                window: Window::new(0, 10),
                key: 0,
                row: 0,
                count: 1
            }]),
            Err(Error::Late { .. })
        ));
    }
}
