//! The manifest (`_thund_checkpoint.json`), the latest pointer
//! (`_thund_latest.json`) and the caller-supplied part of a manifest.
//!
//! All are JSON documents; unknown fields are ignored when reading so that
//! older readers keep working when fields are added (bump
//! [`FORMAT_VERSION`] for changes old readers must not misread).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::paths::{parse_relative_state_path, relative_state_path};

/// The manifest format this build writes; manifests with a larger version are
/// treated as unreadable.
pub const FORMAT_VERSION: u32 = 1;

/// The commit record of one epoch of one view.
///
/// Example (`{state_root}/clicks/epoch=000008/_thund_checkpoint.json`):
///
/// ```json
/// {
///   "format_version": 1,
///   "view": "clicks",
///   "fingerprint": "sha256:9f2c…",
///   "epoch": 8,
///   "status": "COMMITTED",
///   "committed_at_ms": 1764493200123,
///   "watermark": 1700000060000,
///   "sources": [
///     { "name": "events", "max_event_time": 1700000065000, "idle": false,
///       "last_active_ms": 1764493200000, "offset": 48211 }
///   ],
///   "counters": { "late_rows_dropped": 3, "windows_closed": 17 },
///   "emitted_frontier": 1700000060000,
///   "files": [
///     { "path": "epoch=000007/operator-count-w0.parquet", "operator": "count",
///       "worker": 0, "rows": 120, "bytes": 2210, "epoch": 7 },
///     { "path": "epoch=000008/operator-count-w0.parquet", "operator": "count",
///       "worker": 0, "rows": 14, "bytes": 1391, "epoch": 8 }
///   ],
///   "extra": { "sink_committed_len": 5120 }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest format version ([`FORMAT_VERSION`] when written by this build).
    pub format_version: u32,
    /// The view's name (also its directory name).
    pub view: String,
    /// Opaque fingerprint of the view's definition (SQL, schemas, window,
    /// watermark, plan), computed by the caller; resuming with a different
    /// one is an error.
    pub fingerprint: String,
    /// The parts the fingerprint was computed from, by name (for example
    /// `sql`, `window`): a mismatch can then say what changed. Empty in
    /// manifests written before it existed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub fingerprint_parts: std::collections::BTreeMap<String, String>,
    /// The epoch this manifest commits.
    pub epoch: u64,
    /// The caller's own number for this state (a trigger count, say), when
    /// it keeps one. It can be below [`Self::epoch`]: the store never reuses
    /// an epoch number a crashed, uncommitted write left behind, so its
    /// numbers skip where the caller's do not. A caller resumes its own
    /// count from this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_epoch: Option<u64>,
    /// Always [`EpochStatus::Committed`]: a manifest only exists once its
    /// epoch's files are written.
    pub status: EpochStatus,
    /// Wall-clock time of the commit, Unix milliseconds (informational).
    pub committed_at_ms: i64,
    /// The view's watermark W at this epoch, event-time milliseconds.
    pub watermark: Option<i64>,
    /// While every source is idle and W advances with processing time (the
    /// clock-assisted watermark): the processing time (ms) the last source
    /// went idle at and W then. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_clock: Option<(i64, i64)>,
    /// Per-source watermark state and replay offsets.
    pub sources: Vec<SourceState>,
    /// The view's counters at this epoch.
    pub counters: Counters,
    /// The emitted frontier: windows ending at or before it have been emitted
    /// (so no window is emitted twice across a restart), event-time ms.
    pub emitted_frontier: Option<i64>,
    /// Every state file of this epoch, including files written by earlier
    /// epochs that this (incremental) epoch still references.
    pub files: Vec<FileEntry>,
    /// Caller data the protocol does not interpret (e.g. the output sink's
    /// committed length). `null` when unused.
    #[serde(default)]
    pub extra: serde_json::Value,
}

/// Commit status of a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EpochStatus {
    /// The epoch's files are all written; the epoch can be resumed from.
    #[serde(rename = "COMMITTED")]
    Committed,
}

/// Watermark state of one source of a view.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SourceState {
    /// Source name.
    pub name: String,
    /// Largest event time seen from this source, ms.
    pub max_event_time: Option<i64>,
    /// Whether the source was idle (not holding the watermark back).
    pub idle: bool,
    /// Processing time (ms, the engine's clock) of the source's last row.
    pub last_active_ms: Option<i64>,
    /// Replay offset to resume a replayable source from.
    pub offset: Option<u64>,
}

/// A view's counters. The two the design names are fields; anything else goes
/// in `other`, flattened into the same JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counters {
    /// Rows dropped as late (kept in the late-row relation).
    #[serde(default)]
    pub late_rows_dropped: u64,
    /// Windows closed so far.
    #[serde(default)]
    pub windows_closed: u64,
    /// Further named counters.
    #[serde(flatten, default)]
    pub other: BTreeMap<String, u64>,
}

/// One state file referenced by a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileEntry {
    /// Path relative to the view directory:
    /// `epoch=NNNNNN/operator-{op}-w{worker}.parquet`.
    pub path: String,
    /// Operator whose state this is.
    pub operator: String,
    /// Worker that wrote it.
    pub worker: usize,
    /// Number of rows in the file.
    pub rows: u64,
    /// Size of the file in bytes.
    pub bytes: u64,
    /// The epoch that wrote the file (≤ the manifest's epoch; smaller for a
    /// file an incremental checkpoint reuses).
    pub epoch: u64,
}

/// The caller-supplied fields of a manifest (everything the protocol does not
/// fill in itself).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EpochMeta {
    /// See [`Manifest::fingerprint`].
    pub fingerprint: String,
    /// See [`Manifest::fingerprint_parts`].
    pub fingerprint_parts: std::collections::BTreeMap<String, String>,
    /// See [`Manifest::watermark`].
    pub watermark: Option<i64>,
    /// See [`Manifest::watermark_clock`].
    pub watermark_clock: Option<(i64, i64)>,
    /// See [`Manifest::trigger_epoch`].
    pub trigger_epoch: Option<u64>,
    /// See [`Manifest::sources`].
    pub sources: Vec<SourceState>,
    /// See [`Manifest::counters`].
    pub counters: Counters,
    /// See [`Manifest::emitted_frontier`].
    pub emitted_frontier: Option<i64>,
    /// See [`Manifest::extra`].
    pub extra: serde_json::Value,
}

impl EpochMeta {
    /// Metadata with just a fingerprint; other fields empty.
    pub fn new(fingerprint: impl Into<String>) -> Self {
        Self {
            fingerprint: fingerprint.into(),
            ..Self::default()
        }
    }
}

/// The content of `_thund_latest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatestPointer {
    /// Format version.
    pub format_version: u32,
    /// The view.
    pub view: String,
    /// The newest committed epoch.
    pub epoch: u64,
    /// Its manifest, relative to the view directory.
    pub manifest: String,
}

impl Manifest {
    /// A committed manifest of `view` at `epoch` listing `files`, with
    /// fingerprint `fingerprint` and every other field empty: for tests,
    /// examples and tools that reason about which files an epoch lists.
    ///
    /// ```
    /// let m = thund_checkpoint::Manifest::committed("clicks", "fp", 3, vec![]);
    /// assert_eq!((m.epoch, m.status), (3, thund_checkpoint::EpochStatus::Committed));
    /// ```
    pub fn committed(view: &str, fingerprint: &str, epoch: u64, files: Vec<FileEntry>) -> Self {
        Manifest {
            format_version: FORMAT_VERSION,
            view: view.to_string(),
            fingerprint: fingerprint.to_string(),
            fingerprint_parts: Default::default(),
            epoch,
            status: EpochStatus::Committed,
            committed_at_ms: 0,
            watermark: None,
            watermark_clock: None,
            trigger_epoch: None,
            sources: Vec::new(),
            counters: Counters::default(),
            emitted_frontier: None,
            files,
            extra: serde_json::Value::Null,
        }
    }

    /// Checks a parsed manifest against where it was found and against the
    /// layout rules. `Err` carries a human-readable reason; the epoch is then
    /// treated as unreadable.
    pub fn validate(&self, view: &str, epoch: u64) -> Result<(), String> {
        if self.format_version > FORMAT_VERSION {
            return Err(format!(
                "format_version {} is newer than this build reads ({FORMAT_VERSION})",
                self.format_version
            ));
        }
        if self.view != view {
            return Err(format!(
                "manifest names view `{}`, found under view `{view}`",
                self.view
            ));
        }
        if self.epoch != epoch {
            return Err(format!(
                "manifest names epoch {}, found in the directory of epoch {epoch}",
                self.epoch
            ));
        }
        let mut seen = BTreeSet::new();
        for f in &self.files {
            let Some(p) = parse_relative_state_path(&f.path) else {
                return Err(format!("file path `{}` is not a state file path", f.path));
            };
            if p.epoch != f.epoch || p.operator != f.operator || p.worker != f.worker {
                return Err(format!(
                    "file entry `{}` disagrees with its path (epoch {}, operator `{}`, worker {})",
                    f.path, f.epoch, f.operator, f.worker
                ));
            }
            if f.epoch > self.epoch {
                return Err(format!(
                    "file `{}` was written by epoch {}, after this epoch {}",
                    f.path, f.epoch, self.epoch
                ));
            }
            if !seen.insert(f.path.as_str()) {
                return Err(format!("file `{}` is listed twice", f.path));
            }
        }
        Ok(())
    }

    /// Parses and validates manifest bytes found at `view`/`epoch`.
    pub fn parse(bytes: &[u8], view: &str, epoch: u64) -> Result<Self, String> {
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| format!("manifest is not valid: {e}"))?;
        m.validate(view, epoch)?;
        Ok(m)
    }

    /// The files of one operator, in manifest order.
    pub fn files_of<'a>(&'a self, operator: &'a str) -> impl Iterator<Item = &'a FileEntry> + 'a {
        self.files.iter().filter(move |f| f.operator == operator)
    }

    /// Checks the stored fingerprint against the caller's.
    pub fn check_fingerprint(&self, expected: &str) -> crate::Result<()> {
        if self.fingerprint == expected {
            Ok(())
        } else {
            Err(crate::Error::FingerprintMismatch {
                view: self.view.clone(),
                epoch: self.epoch,
                expected: expected.to_string(),
                found: self.fingerprint.clone(),
            })
        }
    }
}

impl FileEntry {
    /// The entry for a file written by `epoch` (path computed by the layout).
    pub fn new(epoch: u64, operator: &str, worker: usize, rows: u64, bytes: u64) -> Self {
        Self {
            path: relative_state_path(epoch, operator, worker),
            operator: operator.to_string(),
            worker,
            rows,
            bytes,
            epoch,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest() -> Manifest {
        Manifest {
            format_version: FORMAT_VERSION,
            view: "v".into(),
            fingerprint: "fp".into(),
            fingerprint_parts: Default::default(),
            epoch: 8,
            status: EpochStatus::Committed,
            committed_at_ms: 1,
            watermark: Some(60_000),
            watermark_clock: None,
            trigger_epoch: None,
            sources: vec![SourceState {
                name: "s".into(),
                max_event_time: Some(65_000),
                idle: false,
                last_active_ms: Some(5),
                offset: Some(42),
            }],
            counters: Counters {
                late_rows_dropped: 3,
                windows_closed: 17,
                other: [("null_event_time_rows".to_string(), 2)].into(),
            },
            emitted_frontier: Some(60_000),
            files: vec![FileEntry::new(7, "count", 0, 120, 2210)],
            extra: serde_json::json!({"sink_committed_len": 5120}),
        }
    }

    #[test]
    fn json_shape_and_round_trip() {
        let m = manifest();
        let v = serde_json::to_value(&m).expect("encode");
        assert_eq!(v["status"], "COMMITTED");
        assert_eq!(v["counters"]["late_rows_dropped"], 3);
        assert_eq!(v["counters"]["null_event_time_rows"], 2);
        assert_eq!(
            v["files"][0]["path"],
            "epoch=000007/operator-count-w0.parquet"
        );
        let back = Manifest::parse(v.to_string().as_bytes(), "v", 8).expect("parse");
        assert_eq!(back, m);
    }

    #[test]
    fn validation_rejects_inconsistent_manifests() {
        let m = manifest();
        assert!(m.validate("other", 8).is_err());
        assert!(m.validate("v", 9).is_err());
        let mut newer = m.clone();
        newer.format_version = FORMAT_VERSION + 1;
        assert!(newer.validate("v", 8).is_err());
        let mut bad_path = m.clone();
        bad_path.files[0].path = "../../etc/passwd".into();
        assert!(bad_path.validate("v", 8).is_err());
        let mut future = m.clone();
        future.files = vec![FileEntry::new(9, "count", 0, 1, 1)];
        assert!(future.validate("v", 8).is_err());
        let mut dup = m.clone();
        dup.files.push(dup.files[0].clone());
        assert!(dup.validate("v", 8).is_err());
        let mut lying = m;
        lying.files[0].worker = 3;
        assert!(lying.validate("v", 8).is_err());
        assert!(Manifest::parse(b"{not json", "v", 8).is_err());
    }

    #[test]
    fn fingerprint_mismatch_names_both() {
        let err = manifest().check_fingerprint("other").expect_err("mismatch");
        let msg = err.to_string();
        assert!(msg.contains("`other`") && msg.contains("`fp`"), "{msg}");
    }
}
