//! The crate's one error type: every I/O error says which path and which epoch.

use crate::decision::SkippedEpoch;

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while opening, writing, reading or collecting
/// checkpoints.
///
/// Variants are grouped by phase: opening a store, naming, writing an epoch,
/// reading/resuming, fencing. Every variant that comes from I/O carries the
/// object path (relative to the store) and, where there is one, the epoch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- opening a store -------------------------------------------------
    /// The state-root URL could not be parsed or does not name a usable place.
    #[error("invalid checkpoint URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL's scheme is not one this build supports.
    #[error(
        "unsupported checkpoint URL scheme `{scheme}` in `{url}`: supported are file:// and memory://{hint}"
    )]
    UnsupportedScheme {
        /// The URL as given.
        url: String,
        /// Its scheme.
        scheme: String,
        /// Extra advice (e.g. the cargo feature that enables the scheme).
        hint: &'static str,
    },
    /// A local directory for a `file://` store could not be created.
    #[error("cannot create checkpoint directory `{path}`: {source}")]
    CreateDir {
        /// The directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The tokio runtime of a blocking wrapper could not be built.
    #[error("cannot start the checkpoint I/O runtime: {source}")]
    Runtime {
        /// The OS error.
        source: std::io::Error,
    },

    // ---- names and input ---------------------------------------------------
    /// A view or operator name cannot be used as a path component.
    #[error("invalid {kind} name `{name}`: {reason}")]
    InvalidName {
        /// `"view"` or `"operator"`.
        kind: &'static str,
        /// The offending name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The caller's input to a write is inconsistent (names the epoch).
    #[error("invalid checkpoint input for view `{view}` epoch {epoch}: {reason}")]
    InvalidInput {
        /// View.
        view: String,
        /// Epoch being written.
        epoch: u64,
        /// What is inconsistent.
        reason: String,
    },

    /// The caller could not produce the state an epoch was to hold (say a
    /// worker that read it died); nothing of the epoch was written.
    #[error("view `{view}` epoch {epoch}: the state could not be captured: {reason}")]
    Capture {
        /// The view.
        view: String,
        /// The epoch.
        epoch: u64,
        /// What went wrong.
        reason: String,
    },

    // ---- I/O -------------------------------------------------------------
    /// An object-store operation failed.
    #[error("checkpoint store: {op} `{path}`{} failed: {source}", epoch_suffix(*.epoch))]
    Store {
        /// The operation (`put`, `get`, `list`, `delete`, `head`).
        op: &'static str,
        /// The object path.
        path: String,
        /// The epoch concerned, if any.
        epoch: Option<u64>,
        /// The backend's error.
        #[source]
        source: Box<object_store::Error>,
    },
    /// A conditional create found an object already there: checkpoint objects
    /// are immutable and never overwritten.
    #[error("refusing to overwrite existing checkpoint object `{path}`{}", epoch_suffix(*.epoch))]
    AlreadyExists {
        /// The object path.
        path: String,
        /// The epoch concerned, if any.
        epoch: Option<u64>,
    },
    /// Encoding a state file as Parquet failed.
    #[error("cannot encode Parquet state file `{path}` (epoch {epoch}): {source}")]
    ParquetEncode {
        /// The object path it was meant for.
        path: String,
        /// The epoch being written.
        epoch: u64,
        /// The Parquet/Arrow error.
        #[source]
        source: Box<parquet::errors::ParquetError>,
    },
    /// A JSON document (manifest, pointer, lease) could not be encoded.
    #[error("cannot encode JSON `{path}`: {source}")]
    JsonEncode {
        /// The object path.
        path: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },

    // ---- reading / resuming ------------------------------------------------
    /// Epoch directories exist but none holds a readable committed epoch:
    /// refusing a silent cold start.
    #[error("view `{view}`: {reason}; skipped: {}", skipped_list(skipped))]
    NoCommittedEpoch {
        /// View.
        view: String,
        /// Why nothing can be resumed.
        reason: String,
        /// Every epoch that was considered and rejected, with its reason.
        skipped: Vec<SkippedEpoch>,
    },
    /// The stored fingerprint is not the one the caller expects: the view's
    /// definition changed, and its state must not be mixed with the new one.
    #[error(
        "view `{view}` epoch {epoch}: checkpoint fingerprint mismatch: expected `{expected}`, stored `{found}`"
    )]
    FingerprintMismatch {
        /// View.
        view: String,
        /// Epoch whose manifest was read.
        epoch: u64,
        /// The fingerprint the caller computed.
        expected: String,
        /// The fingerprint in the manifest.
        found: String,
    },
    /// A specific epoch was asked for and is not a readable committed epoch.
    #[error("view `{view}` epoch {epoch} cannot be read: {reason}")]
    EpochUnreadable {
        /// View.
        view: String,
        /// Epoch.
        epoch: u64,
        /// Why.
        reason: String,
    },

    // ---- writing ---------------------------------------------------------
    /// The epoch to write is not above the last committed one.
    #[error(
        "view `{view}`: epoch {epoch} is not above the last committed epoch {last_committed} (use Writer::next_epoch)"
    )]
    EpochNotIncreasing {
        /// View.
        view: String,
        /// Epoch asked for.
        epoch: u64,
        /// Newest committed epoch known to the writer.
        last_committed: u64,
    },
    /// A file an incremental epoch wants to reference is gone or changed.
    #[error("view `{view}` epoch {epoch}: reused file `{path}` is not usable: {reason}")]
    ReusedFileMissing {
        /// View.
        view: String,
        /// Epoch being written.
        epoch: u64,
        /// The referenced file.
        path: String,
        /// Why.
        reason: String,
    },

    // ---- fencing -----------------------------------------------------------
    /// Another writer holds the view's lease.
    #[error(
        "view `{view}` is fenced: lease `{path}` is held by {holder}; if that process is gone, \
         acquire with Takeover::IfStale (same host, dead pid) or Takeover::Force"
    )]
    Fenced {
        /// View.
        view: String,
        /// The lease object.
        path: String,
        /// Who holds it (pid, host, since when), or why it could not be read.
        holder: String,
    },
    /// This writer's lease was taken over (or deleted) by someone else: it must
    /// stop writing.
    #[error("view `{view}`: lease `{path}` is no longer ours (now: {holder}); stop writing")]
    LeaseLost {
        /// View.
        view: String,
        /// The lease object.
        path: String,
        /// The current holder, or `none`.
        holder: String,
    },
}

fn epoch_suffix(epoch: Option<u64>) -> String {
    match epoch {
        Some(e) => format!(" (epoch {e})"),
        None => String::new(),
    }
}

fn skipped_list(skipped: &[SkippedEpoch]) -> String {
    if skipped.is_empty() {
        return "none".to_string();
    }
    skipped
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// Wraps an object-store error with its operation, path and epoch; a
    /// refused conditional create becomes [`Error::AlreadyExists`].
    pub(crate) fn store(
        op: &'static str,
        path: &object_store::path::Path,
        epoch: Option<u64>,
        source: object_store::Error,
    ) -> Self {
        match source {
            object_store::Error::AlreadyExists { .. } => Error::AlreadyExists {
                path: path.to_string(),
                epoch,
            },
            source => Error::Store {
                op,
                path: path.to_string(),
                epoch,
                source: Box::new(source),
            },
        }
    }
}
