//! What a view's runtime exports to, and imports from, a checkpoint; the
//! sidecar that writes it in the background; the view fingerprint.
//!
//! Each path owns both directions of its own format (`export`/`import` of
//! `ViewRuntime` in `paths/`); the operator file names of every format
//! are the constants of [`operator`], so a name is spelled in one place.

pub mod sidecar;

use crate::time::EventTime;

/// Operator file names (`operator-{name}-w{worker}.parquet` in an epoch).
pub mod operator {
    /// Incremental path: open `(window, key)` accumulators — `window_start`,
    /// `window_end` (ms), the group keys decoded to their Arrow types, then per
    /// aggregate `j`: `agg{j}_count`, `agg{j}_int` (Decimal128(38, 0)) and
    /// `agg{j}_float`.
    pub const AGGREGATE: &str = "aggregate";
    /// Complete mode (both paths): closed windows' final output rows, in the
    /// view's output schema.
    pub const COMPLETE_CLOSED: &str = "complete-closed";
    /// Both paths: the view's table ([`crate::Tables`]) — its rows in the
    /// view's output columns after `_thund_window_start` and
    /// `_thund_window_end` (Int64 ms) — whole in every epoch.
    pub const TABLE: &str = "table";
    /// Recompute path, session windows: per encoded key, the end of its latest
    /// closed session (`key` Binary, `end` Int64 ms).
    pub const SESSION_CLOSED: &str = "session-closed";
    /// Recompute path: the buffered on-time rows of one source, in its schema.
    pub fn rows(source: &str) -> String {
        format!("rows-{source}")
    }
}

/// Something a state root showed at start that is not a resume, said
/// instead of passed over in silence (see [`crate::Engine::warnings`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateWarning {
    /// A cold start passed over epochs that a first checkpoint wrote but
    /// never committed (it crashed before its manifest).
    IgnoredUncommitted {
        /// The epochs passed over.
        epochs: Vec<u64>,
    },
    /// `_thund_latest.json` cannot be read; the newest committed epoch was
    /// found by listing the epochs instead.
    UnreadablePointer {
        /// Why it cannot be read.
        reason: String,
    },
}

impl std::fmt::Display for StateWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateWarning::IgnoredUncommitted { epochs } => write!(
                f,
                "cold start: ignored epochs {epochs:?}, written by a first checkpoint that crashed before its commit"
            ),
            StateWarning::UnreadablePointer { reason } => write!(
                f,
                "the latest-epoch pointer _thund_latest.json cannot be read ({reason}); the newest committed epoch was found by listing the epochs, and the next checkpoint rewrites the pointer"
            ),
        }
    }
}

/// A state file and the watermark from which it holds nothing live.
pub(crate) struct StateFile {
    pub file: thund_checkpoint::NewFile,
    pub expiry: EventTime,
}

impl StateFile {
    /// A file of `operator` on `worker` holding `batches`, live until W reaches `expiry`.
    pub fn new(
        operator: impl Into<String>,
        worker: usize,
        batches: Vec<arrow::array::RecordBatch>,
        expiry: EventTime,
    ) -> Self {
        StateFile {
            file: thund_checkpoint::NewFile {
                operator: operator.into(),
                worker,
                batches,
            },
            expiry,
        }
    }
}

/// Work an export leaves for the sidecar's thread: it yields more files of
/// the same epoch (a full capture's trace reading and encoding).
pub(crate) type Deferred = Box<dyn FnOnce() -> crate::error::Result<Vec<StateFile>> + Send>;

/// What a runtime's export produced.
pub(crate) struct Export {
    /// The files to write.
    pub files: Vec<StateFile>,
    /// Whether they are the whole state (no older file is needed).
    pub full: bool,
    /// More files, made on the sidecar's thread before the epoch is written.
    pub deferred: Option<Deferred>,
}

/// A stable fingerprint (FNV-1a, 64 bits, hex) of a view's defining text.
pub(crate) fn fingerprint(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}
