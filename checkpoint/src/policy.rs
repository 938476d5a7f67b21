//! Pure checkpoint policy: whether the next epoch is full or a delta, which
//! older files it still references, and when they expire. No I/O here: the
//! engine asks these types, writes with [`Writer::write_epoch`], and tells
//! them what was committed.
//!
//! * [`CheckpointSchedule`] — full or delta. A full epoch (no references to
//!   older files) is due after every start, because a fresh process knows no
//!   older files, and every `compact_every` epochs, which folds the chain of
//!   deltas; the epochs in between are deltas. A runtime may write a full
//!   state when a delta was asked for (e.g. session windows always write
//!   everything); recording that resets the count.
//! * [`LiveFiles`] — the files of the last committed epoch, each with its
//!   *expiry* (see [`LiveFile::expiry`]). A delta epoch references
//!   ([`LiveFiles::carried`]) the live files that still hold something at
//!   the epoch's watermark; a full epoch references none. After the commit,
//!   [`LiveFiles::record_commit`] makes the committed manifest's files the
//!   new live set.
//!
//! # Example
//!
//! One checkpoint, the way the engine's sidecar drives it:
//!
//! ```
//! use thund_checkpoint::policy::{CheckpointSchedule, LiveFiles};
//! use thund_checkpoint::{FileEntry, DEFAULT_COMPACT_EVERY};
//!
//! let mut schedule = CheckpointSchedule::new(DEFAULT_COMPACT_EVERY);
//! let mut live = LiveFiles::new();
//!
//! // Epoch 1: a fresh process writes a full epoch.
//! let full = schedule.want_full();
//! assert!(full);
//! let reused = live.carried(Some(0), full);
//! assert!(reused.is_empty());
//! // ... the runtime exports its state; `Writer::write_epoch(1, new, reused, meta)`
//! // commits a manifest listing one file whose rows all belong to windows
//! // ending at or before 60 000 ms:
//! # let manifest = |epoch, files| thund_checkpoint::Manifest::committed("v", "fp", epoch, files);
//! let m1 = manifest(1, vec![FileEntry::new(1, "count", 0, 120, 2210)]);
//! live.record_commit(&m1, &[("count".to_string(), 0, 60_000)]);
//! schedule.record(full);
//!
//! // Epoch 2: a delta that still references epoch 1's file while W < 60 000 …
//! assert!(!schedule.want_full());
//! let reused = live.carried(Some(30_000), false);
//! assert_eq!(reused, m1.files);
//! // … but not once W has reached its expiry: it holds nothing live any more.
//! assert!(live.carried(Some(60_000), false).is_empty());
//! ```
//!
//! [`Writer::write_epoch`]: crate::Writer::write_epoch

use crate::manifest::{FileEntry, Manifest};

/// The default for [`CheckpointSchedule::new`]: a full epoch every 10 epochs.
pub const DEFAULT_COMPACT_EVERY: usize = 10;

/// Decides whether the next checkpoint epoch of a view is full or a delta.
///
/// A fresh schedule wants a full epoch; after a full epoch, the next
/// `compact_every − 1` epochs are deltas and then a full one is due again.
/// With `compact_every = 1` every epoch is full.
///
/// ```
/// use thund_checkpoint::policy::CheckpointSchedule;
///
/// let mut s = CheckpointSchedule::new(3);
/// let mut written = Vec::new();
/// for epoch in 1..=7 {
///     // epoch 5: the runtime writes everything although a delta was asked for
///     let full = s.want_full() || epoch == 5;
///     written.push(full);
///     s.record(full);
/// }
/// assert_eq!(written, [true, false, false, true, true, false, false]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSchedule {
    compact_every: usize,
    /// Epochs recorded since (and including) the last full one; 0 when this
    /// schedule has recorded no full epoch.
    since_full: usize,
}

impl CheckpointSchedule {
    /// A schedule with a full epoch every `compact_every` epochs (0 is taken
    /// as 1: every epoch full). It wants a full epoch first.
    pub fn new(compact_every: usize) -> Self {
        Self {
            compact_every: compact_every.max(1),
            since_full: 0,
        }
    }

    /// The full-epoch period (at least 1).
    pub fn compact_every(&self) -> usize {
        self.compact_every
    }

    /// Epochs recorded since the last full one, counting that full one (1
    /// right after a full epoch); 0 before any full epoch was recorded.
    pub fn since_full(&self) -> usize {
        self.since_full
    }

    /// Whether the next epoch should be full: no full epoch recorded yet (this
    /// process knows no older files), or `compact_every` epochs since the
    /// last one.
    pub fn want_full(&self) -> bool {
        self.since_full == 0 || self.since_full >= self.compact_every
    }

    /// Records the epoch just written: `full` is what the runtime actually
    /// wrote, which may be full when a delta was asked for.
    pub fn record(&mut self, full: bool) {
        self.since_full = if full {
            1
        } else {
            self.since_full.saturating_add(1)
        };
    }
}

impl Default for CheckpointSchedule {
    /// `CheckpointSchedule::new(DEFAULT_COMPACT_EVERY)`.
    fn default() -> Self {
        Self::new(DEFAULT_COMPACT_EVERY)
    }
}

/// A state file of the last committed epoch and when it expires.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LiveFile {
    /// The file, as the committed manifest lists it.
    pub entry: FileEntry,
    /// The event-time watermark (ms) from which the file holds nothing live:
    /// once the view's watermark W reaches it (`W ≥ expiry`), every window
    /// the file has state of has closed and been evicted, so no later epoch
    /// needs it. Typically the largest window end in the file. `i64::MAX`
    /// means "never expires by watermark" (kept until the next full epoch).
    pub expiry: i64,
}

/// The files of the last committed epoch of a view, each with its expiry:
/// what a delta epoch may still reference.
///
/// Empty when new (a fresh process knows no older files). It only ever
/// changes through [`Self::record_commit`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveFiles {
    files: Vec<LiveFile>,
}

impl LiveFiles {
    /// No live files.
    pub fn new() -> Self {
        Self::default()
    }

    /// The live files, in the order of the last committed manifest.
    pub fn files(&self) -> &[LiveFile] {
        &self.files
    }

    /// Number of live files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there are no live files.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The older files the next epoch's manifest references (the `reused`
    /// argument of [`Writer::write_epoch`](crate::Writer::write_epoch)):
    /// none for a `full` epoch; for a delta, every live file whose expiry is
    /// above `watermark` (the new epoch's W; `None` is −∞, so only files with
    /// expiry `i64::MIN` are dropped), and every file whose expiry is
    /// `i64::MAX` ("never"), even at the end of stream when W is `i64::MAX`.
    pub fn carried(&self, watermark: Option<i64>, full: bool) -> Vec<FileEntry> {
        if full {
            return Vec::new();
        }
        let w = watermark.unwrap_or(i64::MIN);
        self.files
            .iter()
            .filter(|f| f.expiry == i64::MAX || f.expiry > w)
            .map(|f| f.entry.clone())
            .collect()
    }

    /// Becomes the live set of the just-committed `manifest`: every file it
    /// lists. A file it wrote itself (`entry.epoch == manifest.epoch`) gets
    /// the expiry given for its `(operator, worker)` in `new_expiries` (the
    /// first one if given twice; `i64::MAX` if not given). A file it
    /// references from an earlier epoch keeps the expiry it had here
    /// (`i64::MAX` if it was not live, which a manifest built from
    /// [`Self::carried`] never lists).
    ///
    /// `new_expiries` may name files the manifest does not list (an empty
    /// state is not written): they are ignored.
    pub fn record_commit(&mut self, manifest: &Manifest, new_expiries: &[(String, usize, i64)]) {
        let files = manifest
            .files
            .iter()
            .map(|f| {
                let expiry = if f.epoch == manifest.epoch {
                    new_expiries
                        .iter()
                        .find(|(op, worker, _)| *op == f.operator && *worker == f.worker)
                        .map(|(_, _, expiry)| *expiry)
                } else {
                    self.files
                        .iter()
                        .find(|l| l.entry.path == f.path)
                        .map(|l| l.expiry)
                };
                LiveFile {
                    entry: f.clone(),
                    expiry: expiry.unwrap_or(i64::MAX),
                }
            })
            .collect();
        self.files = files;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(epoch: u64, files: Vec<FileEntry>) -> Manifest {
        Manifest::committed("v", "fp", epoch, files)
    }

    fn exp(op: &str, worker: usize, expiry: i64) -> (String, usize, i64) {
        (op.to_string(), worker, expiry)
    }

    #[test]
    fn schedule_is_full_first_then_every_n() {
        let mut s = CheckpointSchedule::new(3);
        let mut got = Vec::new();
        for _ in 0..7 {
            let full = s.want_full();
            got.push(full);
            s.record(full);
        }
        assert_eq!(got, [true, false, false, true, false, false, true]);
    }

    #[test]
    fn schedule_of_one_or_zero_is_always_full() {
        for n in [0, 1] {
            let mut s = CheckpointSchedule::new(n);
            assert_eq!(s.compact_every(), 1);
            for _ in 0..4 {
                assert!(s.want_full());
                s.record(true);
            }
        }
    }

    #[test]
    fn forced_full_resets_the_count() {
        let mut s = CheckpointSchedule::new(3);
        s.record(true); // epoch 1: full
        s.record(false); // epoch 2: delta
        s.record(true); // epoch 3: forced full
        assert_eq!(s.since_full(), 1);
        assert!(!s.want_full()); // epoch 4: delta
        s.record(false);
        assert!(!s.want_full()); // epoch 5: delta
        s.record(false);
        assert!(s.want_full()); // epoch 6: full
    }

    #[test]
    fn default_schedule_uses_the_default_period() {
        let s = CheckpointSchedule::default();
        assert_eq!(s.compact_every(), DEFAULT_COMPACT_EVERY);
        assert!(s.want_full());
        assert_eq!(s.since_full(), 0);
    }

    #[test]
    fn carried_filters_by_expiry_and_full_carries_nothing() {
        let a = FileEntry::new(1, "count", 0, 10, 100);
        let b = FileEntry::new(1, "count", 1, 10, 100);
        let c = FileEntry::new(1, "sum", 0, 10, 100);
        let mut live = LiveFiles::new();
        live.record_commit(
            &manifest(1, vec![a.clone(), b.clone(), c.clone()]),
            &[exp("count", 0, 1_000), exp("count", 1, i64::MIN)],
        );
        // `c` had no expiry given: never expires by watermark
        assert_eq!(live.files()[2].expiry, i64::MAX);
        assert_eq!(live.carried(None, false), vec![a.clone(), c.clone()]);
        assert_eq!(live.carried(Some(999), false), vec![a, c.clone()]);
        assert_eq!(live.carried(Some(1_000), false), vec![c.clone()]);
        // at the end of stream (W = +∞) a file that never expires is still carried
        assert_eq!(live.carried(Some(i64::MAX), false), vec![c.clone()]);
        assert!(live.carried(None, true).is_empty());
    }

    #[test]
    fn record_commit_keeps_expiries_of_carried_files_and_drops_the_rest() {
        let old_a = FileEntry::new(1, "count", 0, 10, 100);
        let old_b = FileEntry::new(1, "count", 1, 10, 100);
        let mut live = LiveFiles::new();
        live.record_commit(
            &manifest(1, vec![old_a.clone(), old_b.clone()]),
            &[exp("count", 0, 5_000), exp("count", 1, 2_000)],
        );
        let carried = live.carried(Some(3_000), false);
        assert_eq!(carried, vec![old_a.clone()]);

        let new = FileEntry::new(2, "count", 0, 3, 30);
        let mut files = vec![new.clone()];
        files.extend(carried);
        live.record_commit(
            &manifest(2, files),
            // (count, 1) wrote nothing this epoch: not in the manifest, ignored;
            // the first expiry given for (count, 0) wins
            &[
                exp("count", 0, 9_000),
                exp("count", 1, 1),
                exp("count", 0, 1),
            ],
        );
        assert_eq!(
            live.files(),
            [
                LiveFile {
                    entry: new,
                    expiry: 9_000
                },
                LiveFile {
                    entry: old_a,
                    expiry: 5_000
                },
            ]
        );
        assert_eq!(live.len(), 2);
        assert!(!live.files().iter().any(|f| f.entry == old_b));
    }

    #[test]
    fn full_epoch_replaces_the_live_set() {
        let mut live = LiveFiles::new();
        assert!(live.is_empty());
        live.record_commit(
            &manifest(1, vec![FileEntry::new(1, "count", 0, 10, 100)]),
            &[exp("count", 0, i64::MAX)],
        );
        let full = FileEntry::new(2, "count", 0, 12, 120);
        assert!(live.carried(Some(0), true).is_empty());
        live.record_commit(&manifest(2, vec![full.clone()]), &[exp("count", 0, 7)]);
        assert_eq!(
            live.files(),
            [LiveFile {
                entry: full,
                expiry: 7
            }]
        );
    }

    #[test]
    fn unknown_older_file_is_kept_conservatively() {
        let mut live = LiveFiles::new();
        let stranger = FileEntry::new(1, "count", 0, 10, 100);
        live.record_commit(&manifest(2, vec![stranger]), &[]);
        assert_eq!(live.files()[0].expiry, i64::MAX);
    }
}
