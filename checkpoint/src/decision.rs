//! Pure protocol decisions: which epoch to resume from, and what garbage
//! collection may delete. No I/O here: the store lists objects into a
//! [`Listing`], these functions decide, and the store acts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::manifest::Manifest;
use crate::paths::{parse_epoch_dir, MANIFEST_FILE};

/// What a listing found where an epoch's manifest should be.
#[derive(Debug, Clone, PartialEq)]
pub enum ManifestState {
    /// No manifest object: the epoch was never committed (a crash mid-write,
    /// or a write in progress).
    Missing,
    /// A manifest object exists but cannot be used (not JSON, wrong view or
    /// epoch, unsafe paths, newer format): the reason.
    Unreadable(String),
    /// A parsed and validated manifest.
    Valid(Box<Manifest>),
}

/// What a listing found for the latest pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointerState {
    /// No `_thund_latest.json`.
    Missing,
    /// It exists but cannot be parsed: the reason.
    Unreadable(String),
    /// It names this epoch.
    Points(u64),
}

/// One epoch directory in a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochListing {
    /// Its manifest.
    pub manifest: ManifestState,
    /// Set by the loader when reading this epoch's files failed (truncated
    /// Parquet, row count mismatch, …): the reason. The decision then skips it.
    pub rejected: Option<String>,
}

/// Everything the decisions need to know about one view's directory.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// The view.
    pub view: String,
    /// Every epoch directory present, by epoch.
    pub epochs: BTreeMap<u64, EpochListing>,
    /// Every object inside epoch directories (manifests included), by path
    /// relative to the view directory, with its size in bytes.
    pub objects: BTreeMap<String, u64>,
    /// The latest pointer.
    pub latest: PointerState,
}

impl Listing {
    /// An empty listing (no epochs, no pointer).
    pub fn new(view: impl Into<String>) -> Self {
        Self {
            view: view.into(),
            epochs: BTreeMap::new(),
            objects: BTreeMap::new(),
            latest: PointerState::Missing,
        }
    }

    /// The smallest epoch number above every epoch directory present,
    /// committed or not (1 when there are none). Writing this epoch never
    /// collides with leftovers of a crashed write.
    pub fn next_epoch(&self) -> u64 {
        let dirs = self.epochs.keys().next_back().copied().unwrap_or(0);
        let pointer = match self.latest {
            PointerState::Points(p) => p,
            _ => 0,
        };
        dirs.max(pointer).saturating_add(1)
    }

    /// The newest epoch with a valid manifest (not checking its files).
    pub fn newest_committed(&self) -> Option<u64> {
        self.committed().next_back().map(|(e, _)| e)
    }

    /// Epochs with a valid manifest, oldest first.
    pub fn committed(&self) -> impl DoubleEndedIterator<Item = (u64, &Manifest)> + '_ {
        self.epochs.iter().filter_map(|(e, l)| match &l.manifest {
            ManifestState::Valid(m) => Some((*e, m.as_ref())),
            _ => None,
        })
    }

    /// Records that an epoch's files failed verification, so the next
    /// [`decide_resume`] skips it.
    pub fn reject(&mut self, epoch: u64, reason: impl Into<String>) {
        if let Some(l) = self.epochs.get_mut(&epoch) {
            l.rejected = Some(reason.into());
        }
    }

    /// Checks (without reading them) that every file of `manifest` is listed
    /// with the size the manifest records.
    pub fn check_files(&self, manifest: &Manifest) -> Result<(), SkipReason> {
        for f in &manifest.files {
            match self.objects.get(&f.path) {
                None => {
                    return Err(SkipReason::FileMissing {
                        path: f.path.clone(),
                    })
                }
                Some(&size) if size != f.bytes => {
                    return Err(SkipReason::FileSizeMismatch {
                        path: f.path.clone(),
                        expected: f.bytes,
                        found: size,
                    })
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// Why an epoch was passed over while deciding where to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// The latest pointer names this epoch but it has no directory at all.
    PointerTargetMissing,
    /// The latest pointer names this epoch but it has no manifest.
    PointerTargetUncommitted,
    /// The manifest exists but cannot be used.
    ManifestUnreadable(String),
    /// A file the manifest references is not in the store.
    FileMissing {
        /// Relative path.
        path: String,
    },
    /// A referenced file's size differs from the manifest's record.
    FileSizeMismatch {
        /// Relative path.
        path: String,
        /// Size in the manifest.
        expected: u64,
        /// Size in the store.
        found: u64,
    },
    /// Reading the epoch's files failed (corrupt/truncated Parquet, row
    /// count mismatch): the reason.
    FilesUnreadable(String),
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::PointerTargetMissing => {
                write!(
                    f,
                    "the latest pointer names it but its directory is missing"
                )
            }
            SkipReason::PointerTargetUncommitted => {
                write!(f, "the latest pointer names it but it has no manifest")
            }
            SkipReason::ManifestUnreadable(r) => write!(f, "unreadable manifest: {r}"),
            SkipReason::FileMissing { path } => write!(f, "file `{path}` is missing"),
            SkipReason::FileSizeMismatch {
                path,
                expected,
                found,
            } => write!(
                f,
                "file `{path}` has {found} bytes, the manifest says {expected}"
            ),
            SkipReason::FilesUnreadable(r) => write!(f, "files unreadable: {r}"),
        }
    }
}

/// An epoch passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedEpoch {
    /// The epoch.
    pub epoch: u64,
    /// Why it cannot be resumed from.
    pub reason: SkipReason,
}

impl fmt::Display for SkippedEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "epoch {}: {}", self.epoch, self.reason)
    }
}

/// Where to resume from, when there is somewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumePlan {
    /// The epoch to restore.
    pub epoch: u64,
    /// Newer epochs that should have been usable but were not, newest first.
    /// Non-empty means the resume *fell back*: report it loudly.
    pub fell_back_from: Vec<SkippedEpoch>,
    /// Newer epoch directories without a manifest: writes that never
    /// committed (a crash mid-checkpoint). Ignored, as the protocol requires.
    pub ignored_uncommitted: Vec<u64>,
    /// Other oddities worth logging (unreadable pointer, pointer behind the
    /// newest committed epoch).
    pub warnings: Vec<String>,
}

impl ResumePlan {
    /// Whether a newer committed epoch had to be passed over.
    pub fn fell_back(&self) -> bool {
        !self.fell_back_from.is_empty()
    }
}

/// The outcome of [`decide_resume`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeDecision {
    /// Nothing was ever committed: start from scratch.
    /// `ignored_uncommitted` lists epoch directories of a first checkpoint
    /// that crashed before its manifest was written (no manifest and no
    /// pointer exist anywhere, so no state was ever committed).
    ColdStart {
        /// Manifest-less epoch directories (crashed first writes).
        ignored_uncommitted: Vec<u64>,
    },
    /// Resume from a committed epoch.
    Resume(ResumePlan),
    /// Something was committed (a manifest or a latest pointer exists) but no
    /// epoch can be resumed from. Never a silent cold start: the caller must
    /// surface this as an error.
    Refuse {
        /// Human-readable summary.
        reason: String,
        /// Every epoch considered, with why it was rejected.
        skipped: Vec<SkippedEpoch>,
    },
}

/// Decides which epoch to resume from. Pure: reads only the listing.
///
/// Rules, newest epoch first:
/// * an epoch with a valid manifest whose files are all listed with the
///   recorded sizes (and not [rejected](Listing::reject) by reading) is the
///   answer. The manifest is the commit point, so an epoch committed after the
///   latest pointer (crash between manifest and pointer) is still resumed
///   from, with a warning;
/// * an epoch without a manifest is an uncommitted write and is ignored —
///   unless the latest pointer names it, which makes it a loud fall-back;
/// * an unreadable manifest, a missing/resized/unreadable file, or a pointer to
///   a missing epoch is a loud fall-back to the previous committed epoch;
/// * no usable epoch: cold start if nothing was ever committed (no manifest,
///   no pointer), otherwise [`ResumeDecision::Refuse`].
pub fn decide_resume(listing: &Listing) -> ResumeDecision {
    let mut skipped = Vec::new();
    let mut ignored_uncommitted = Vec::new();
    let mut warnings = Vec::new();

    let pointer = match &listing.latest {
        PointerState::Points(p) => Some(*p),
        PointerState::Unreadable(r) => {
            warnings.push(format!(
                "latest pointer unreadable ({r}); using the listing"
            ));
            None
        }
        PointerState::Missing => None,
    };

    let mut candidates: BTreeSet<u64> = listing.epochs.keys().copied().collect();
    candidates.extend(pointer);

    let mut chosen = None;
    for epoch in candidates.into_iter().rev() {
        let Some(l) = listing.epochs.get(&epoch) else {
            skipped.push(SkippedEpoch {
                epoch,
                reason: SkipReason::PointerTargetMissing,
            });
            continue;
        };
        let outcome = match &l.manifest {
            ManifestState::Missing if pointer == Some(epoch) => {
                Err(SkipReason::PointerTargetUncommitted)
            }
            ManifestState::Missing => {
                ignored_uncommitted.push(epoch);
                continue;
            }
            ManifestState::Unreadable(r) => Err(SkipReason::ManifestUnreadable(r.clone())),
            ManifestState::Valid(m) => match &l.rejected {
                Some(r) => Err(SkipReason::FilesUnreadable(r.clone())),
                None => listing.check_files(m),
            },
        };
        match outcome {
            Ok(()) => {
                chosen = Some(epoch);
                break;
            }
            Err(reason) => skipped.push(SkippedEpoch { epoch, reason }),
        }
    }

    match chosen {
        Some(epoch) => {
            if let Some(p) = pointer.filter(|p| *p < epoch) {
                warnings.push(format!(
                    "epoch {epoch} is committed but the latest pointer names epoch {p} \
                     (crash between manifest and pointer write?)"
                ));
            }
            ResumeDecision::Resume(ResumePlan {
                epoch,
                fell_back_from: skipped,
                ignored_uncommitted,
                warnings,
            })
        }
        None if skipped.is_empty() && listing.latest == PointerState::Missing => {
            ResumeDecision::ColdStart {
                ignored_uncommitted,
            }
        }
        None => {
            let reason = if listing.epochs.is_empty() {
                "the latest pointer exists but no epoch directory does".to_string()
            } else {
                format!(
                    "{} epoch director{} exist but none holds a readable committed epoch; \
                     refusing a silent cold start (delete the view's directory to start over)",
                    listing.epochs.len(),
                    if listing.epochs.len() == 1 {
                        "y"
                    } else {
                        "ies"
                    }
                )
            };
            ResumeDecision::Refuse { reason, skipped }
        }
    }
}

/// What [`plan_gc`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GcPlan {
    /// Committed epochs kept, oldest first.
    pub retained: Vec<u64>,
    /// Objects to delete, relative to the view directory: manifests first (so
    /// a crash mid-collection leaves uncommitted epochs, never a committed
    /// epoch with missing files), then the rest.
    pub delete: Vec<String>,
}

/// Decides what garbage collection deletes. Pure.
///
/// Keeps the `retain` newest *usable* committed epochs (at least 1), every
/// committed epoch newer than the oldest of them, and the epoch the latest
/// pointer names. Deletes, among objects in epoch directories no newer than
/// the newest committed epoch, everything that is neither a kept manifest nor
/// a file a kept manifest references (incremental epochs reference older
/// files: those stay). Epoch directories newer than the newest committed
/// epoch (a write in progress) are never touched. With no committed epoch,
/// nothing is deleted.
pub fn plan_gc(listing: &Listing, retain: usize) -> GcPlan {
    let retain = retain.max(1);
    let Some(newest) = listing.newest_committed() else {
        return GcPlan::default();
    };
    let usable: Vec<u64> = listing
        .committed()
        .rev()
        .filter(|(e, m)| {
            listing.epochs.get(e).is_some_and(|l| l.rejected.is_none())
                && listing.check_files(m).is_ok()
        })
        .map(|(e, _)| e)
        .collect();
    let oldest_committed = listing.committed().next().map_or(newest, |(e, _)| e);
    let mut cutoff = usable.get(retain - 1).copied().unwrap_or(oldest_committed);
    if let PointerState::Points(p) = listing.latest {
        if listing
            .epochs
            .get(&p)
            .is_some_and(|l| matches!(l.manifest, ManifestState::Valid(_)))
        {
            cutoff = cutoff.min(p);
        }
    }

    let retained: Vec<u64> = listing
        .committed()
        .map(|(e, _)| e)
        .filter(|e| *e >= cutoff)
        .collect();
    let mut keep: BTreeSet<String> = BTreeSet::new();
    for (e, m) in listing.committed().filter(|(e, _)| *e >= cutoff) {
        keep.insert(format!(
            "{}/{MANIFEST_FILE}",
            crate::paths::epoch_dir_name(e)
        ));
        keep.extend(m.files.iter().map(|f| f.path.clone()));
    }

    let (mut manifests, mut others) = (Vec::new(), Vec::new());
    for path in listing.objects.keys() {
        let Some(epoch) = path.split('/').next().and_then(parse_epoch_dir) else {
            continue;
        };
        if epoch > newest || keep.contains(path) {
            continue;
        }
        if path.ends_with(&format!("/{MANIFEST_FILE}")) {
            manifests.push(path.clone());
        } else {
            others.push(path.clone());
        }
    }
    manifests.extend(others);
    GcPlan {
        retained,
        delete: manifests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::FileEntry;
    use crate::paths::epoch_dir_name;

    /// Builds listings by hand: the decision is pure, so no store is needed.
    struct L(Listing);

    impl L {
        fn new() -> Self {
            L(Listing::new("v"))
        }
        /// A committed epoch with one new file (plus `reuse` files of older epochs).
        fn committed(mut self, epoch: u64, reuse: &[u64]) -> Self {
            let mut files = vec![FileEntry::new(epoch, "op", 0, 10, 100 + epoch)];
            files.extend(
                reuse
                    .iter()
                    .map(|e| FileEntry::new(*e, "op", 0, 10, 100 + e)),
            );
            for f in &files {
                self.0.objects.insert(f.path.clone(), f.bytes);
            }
            self.0
                .objects
                .insert(format!("{}/{MANIFEST_FILE}", epoch_dir_name(epoch)), 50);
            let m = Manifest::committed("v", "fp", epoch, files);
            self.0.epochs.insert(
                epoch,
                EpochListing {
                    manifest: ManifestState::Valid(Box::new(m)),
                    rejected: None,
                },
            );
            self
        }
        fn uncommitted(mut self, epoch: u64) -> Self {
            let f = FileEntry::new(epoch, "op", 0, 10, 7);
            self.0.objects.insert(f.path, 7);
            self.0.epochs.insert(
                epoch,
                EpochListing {
                    manifest: ManifestState::Missing,
                    rejected: None,
                },
            );
            self
        }
        fn garbage(mut self, epoch: u64) -> Self {
            self.0
                .objects
                .insert(format!("{}/{MANIFEST_FILE}", epoch_dir_name(epoch)), 3);
            self.0.epochs.insert(
                epoch,
                EpochListing {
                    manifest: ManifestState::Unreadable("not json".into()),
                    rejected: None,
                },
            );
            self
        }
        fn pointer(mut self, epoch: u64) -> Self {
            self.0.latest = PointerState::Points(epoch);
            self
        }
        fn drop_object(mut self, path: &str) -> Self {
            self.0.objects.remove(path);
            self
        }
    }

    fn resume(d: ResumeDecision) -> ResumePlan {
        match d {
            ResumeDecision::Resume(p) => p,
            other => panic!("expected Resume, got {other:?}"),
        }
    }

    #[test]
    fn no_epochs_is_cold_start() {
        assert_eq!(
            decide_resume(&L::new().0),
            ResumeDecision::ColdStart {
                ignored_uncommitted: vec![]
            }
        );
    }

    #[test]
    fn pointer_and_manifest_agree() {
        let p = resume(decide_resume(
            &L::new().committed(1, &[]).committed(2, &[1]).pointer(2).0,
        ));
        assert_eq!(p.epoch, 2);
        assert!(!p.fell_back() && p.warnings.is_empty());
    }

    #[test]
    fn pointer_to_missing_epoch_falls_back_loudly() {
        let p = resume(decide_resume(
            &L::new().committed(5, &[]).committed(6, &[]).pointer(7).0,
        ));
        assert_eq!(p.epoch, 6);
        assert_eq!(
            p.fell_back_from,
            vec![SkippedEpoch {
                epoch: 7,
                reason: SkipReason::PointerTargetMissing
            }]
        );
    }

    #[test]
    fn pointer_to_manifestless_epoch_falls_back_loudly() {
        let p = resume(decide_resume(
            &L::new().committed(6, &[]).uncommitted(7).pointer(7).0,
        ));
        assert_eq!(p.epoch, 6);
        assert_eq!(
            p.fell_back_from[0].reason,
            SkipReason::PointerTargetUncommitted
        );
    }

    #[test]
    fn garbage_manifest_in_newest_falls_back_to_previous() {
        let p = resume(decide_resume(
            &L::new().committed(6, &[]).garbage(7).pointer(7).0,
        ));
        assert_eq!(p.epoch, 6);
        assert_eq!(p.fell_back_from.len(), 1);
        assert_eq!(p.fell_back_from[0].epoch, 7);
        assert!(matches!(
            p.fell_back_from[0].reason,
            SkipReason::ManifestUnreadable(_)
        ));
    }

    #[test]
    fn epoch_dirs_without_readable_manifest_refuse() {
        match decide_resume(&L::new().garbage(3).uncommitted(4).0) {
            ResumeDecision::Refuse { skipped, reason } => {
                assert_eq!(skipped.len(), 1);
                assert_eq!(skipped[0].epoch, 3);
                assert!(reason.contains("refusing a silent cold start"), "{reason}");
            }
            other => panic!("expected Refuse, got {other:?}"),
        }
        // A pointer but no epoch at all: something was committed and is gone.
        assert!(matches!(
            decide_resume(&L::new().pointer(3).0),
            ResumeDecision::Refuse { .. }
        ));
        // Only the pointer's epoch, without manifest.
        assert!(matches!(
            decide_resume(&L::new().uncommitted(3).pointer(3).0),
            ResumeDecision::Refuse { .. }
        ));
    }

    #[test]
    fn crash_during_first_checkpoint_is_a_reported_cold_start() {
        assert_eq!(
            decide_resume(&L::new().uncommitted(1).0),
            ResumeDecision::ColdStart {
                ignored_uncommitted: vec![1]
            }
        );
    }

    #[test]
    fn missing_pointer_resumes_newest_committed() {
        let p = resume(decide_resume(
            &L::new().committed(3, &[]).committed(4, &[3]).0,
        ));
        assert_eq!(p.epoch, 4);
        assert!(!p.fell_back());
    }

    #[test]
    fn manifestless_newer_epoch_is_ignored_quietly() {
        let p = resume(decide_resume(
            &L::new().committed(3, &[]).uncommitted(4).pointer(3).0,
        ));
        assert_eq!(p.epoch, 3);
        assert!(!p.fell_back());
        assert_eq!(p.ignored_uncommitted, vec![4]);
    }

    #[test]
    fn committed_after_pointer_wins_with_warning() {
        let p = resume(decide_resume(
            &L::new().committed(3, &[]).committed(4, &[]).pointer(3).0,
        ));
        assert_eq!(p.epoch, 4);
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn missing_or_resized_file_falls_back() {
        let l = L::new()
            .committed(3, &[])
            .committed(4, &[3])
            .pointer(4)
            .drop_object("epoch=000004/operator-op-w0.parquet");
        let p = resume(decide_resume(&l.0));
        assert_eq!(p.epoch, 3);
        assert!(matches!(
            p.fell_back_from[0].reason,
            SkipReason::FileMissing { .. }
        ));

        let mut l = L::new().committed(3, &[]).committed(4, &[3]).pointer(4);
        l.0.objects
            .insert("epoch=000003/operator-op-w0.parquet".into(), 1);
        // Epoch 4 reuses epoch 3's file, which is now the wrong size: both fail.
        match decide_resume(&l.0) {
            ResumeDecision::Refuse { skipped, .. } => {
                assert_eq!(skipped.len(), 2);
                assert!(matches!(
                    skipped[0].reason,
                    SkipReason::FileSizeMismatch {
                        expected: 103,
                        found: 1,
                        ..
                    }
                ));
            }
            other => panic!("expected Refuse, got {other:?}"),
        }
    }

    #[test]
    fn rejected_by_reading_falls_back() {
        let mut l = L::new().committed(3, &[]).committed(4, &[]).pointer(4).0;
        l.reject(4, "truncated parquet");
        let p = resume(decide_resume(&l));
        assert_eq!(p.epoch, 3);
        assert_eq!(
            p.fell_back_from[0].reason,
            SkipReason::FilesUnreadable("truncated parquet".into())
        );
    }

    #[test]
    fn unreadable_pointer_warns_and_uses_listing() {
        let mut l = L::new().committed(3, &[]).0;
        l.latest = PointerState::Unreadable("bad".into());
        let p = resume(decide_resume(&l));
        assert_eq!(p.epoch, 3);
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn next_epoch_skips_leftovers() {
        assert_eq!(L::new().0.next_epoch(), 1);
        assert_eq!(L::new().committed(3, &[]).uncommitted(5).0.next_epoch(), 6);
        assert_eq!(L::new().committed(3, &[]).pointer(9).0.next_epoch(), 10);
    }

    #[test]
    fn gc_keeps_retained_epochs_and_referenced_files() {
        // 1, 2 full; 3 reuses 1; 4 reuses 1 and 3; 5 uncommitted (older than newest? no)
        let l = L::new()
            .committed(1, &[])
            .committed(2, &[])
            .uncommitted(3)
            .committed(4, &[1])
            .committed(5, &[1, 4])
            .uncommitted(6)
            .pointer(5)
            .0;
        let plan = plan_gc(&l, 2);
        assert_eq!(plan.retained, vec![4, 5]);
        assert_eq!(
            plan.delete,
            vec![
                "epoch=000001/_thund_checkpoint.json".to_string(),
                "epoch=000002/_thund_checkpoint.json".to_string(),
                "epoch=000002/operator-op-w0.parquet".to_string(),
                "epoch=000003/operator-op-w0.parquet".to_string(),
            ]
        );
        // Retaining 3 keeps epoch 2 too (and its file); 6 is never touched.
        let plan = plan_gc(&l, 3);
        assert_eq!(plan.retained, vec![2, 4, 5]);
        assert!(!plan.delete.iter().any(|p| p.starts_with("epoch=000002")));
        assert!(!plan.delete.iter().any(|p| p.starts_with("epoch=000006")));
    }

    #[test]
    fn gc_counts_only_usable_epochs_and_keeps_pointer_target() {
        // Newest epoch 3 is broken: keeping 2 usable epochs means keeping 1 and 2 too.
        let l = L::new()
            .committed(1, &[])
            .committed(2, &[])
            .committed(3, &[])
            .drop_object("epoch=000003/operator-op-w0.parquet")
            .0;
        assert_eq!(plan_gc(&l, 2).retained, vec![1, 2, 3]);
        // Pointer lagging behind (crash between manifest and pointer).
        let l = L::new()
            .committed(1, &[])
            .committed(2, &[])
            .committed(3, &[])
            .pointer(1)
            .0;
        assert_eq!(plan_gc(&l, 1).retained, vec![1, 2, 3]);
        // Nothing committed: nothing deleted.
        assert_eq!(plan_gc(&L::new().uncommitted(1).0, 1), GcPlan::default());
    }
}
