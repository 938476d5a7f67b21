//! The crate's error type, with variants by phase: input, aggregation, runtime.

use crate::state::agg::{AggKind, AggState, Value};
use crate::window::{EventTime, Window};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in this crate.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    // --- aggregation ---
    /// An `i128` sum (or an `i64` count) overflowed. The dataflow that reports it is
    /// poisoned: later calls return [`Error::Poisoned`].
    #[error("integer overflow in {kind:?} aggregate{}{}{}",
        window.map(|w| format!(" of window {w}")).unwrap_or_default(),
        if detail.is_empty() { "" } else { ": " }, detail)]
    Overflow {
        /// The aggregate kind that overflowed.
        kind: AggKind,
        /// The window whose state overflowed, when known.
        window: Option<Window>,
        /// Which aggregate, where known.
        detail: String,
        /// The aggregate's index in the configuration (its state's slot),
        /// where known.
        aggregate: Option<u32>,
    },
    /// A value of the wrong type for an aggregate kind (e.g. a `Float` into `SumInt`).
    #[error("value {value} does not suit a {kind:?} aggregate")]
    TypeMismatch {
        /// The aggregate kind.
        kind: AggKind,
        /// The offending value.
        value: Value,
    },

    // --- input ---
    /// An update for a window that is already closed (`window.end <= frontier`).
    /// Nothing of the call that carried it was applied.
    #[error("late update: window {window} ended at or before the frontier {frontier}")]
    Late {
        /// The closed window.
        window: Window,
        /// The input frontier (watermark) at the time of the call.
        frontier: EventTime,
    },
    /// A window with `start >= end`.
    #[error("invalid window {window}: start must be before end")]
    InvalidWindow {
        /// The offending window.
        window: Window,
    },
    /// An update whose number of aggregate states differs from the configuration's.
    #[error(
        "update for window {window} has {found} aggregate states, the configuration has {expected}"
    )]
    Arity {
        /// The update's window.
        window: Window,
        /// Number of aggregates configured.
        expected: usize,
        /// Number of states in the update.
        found: usize,
    },
    /// An aggregate state that `AggState::from_value`/`combine` could not have produced for its kind.
    #[error("invalid {kind:?} state {state:?}")]
    InvalidState {
        /// The aggregate kind.
        kind: AggKind,
        /// The offending state.
        state: AggState,
    },
    /// `advance_to` with a watermark below the current frontier.
    #[error("watermark regressed: advance_to({requested}) below the frontier {frontier}")]
    WatermarkRegressed {
        /// The requested watermark.
        requested: EventTime,
        /// The current frontier.
        frontier: EventTime,
    },
    /// A configuration the dataflow cannot run (e.g. zero workers).
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },

    // --- runtime ---
    /// Timely could not start the worker threads.
    #[error("could not start the dataflow workers: {reason}")]
    Spawn {
        /// Timely's message.
        reason: String,
    },
    /// A worker thread died (panicked) or stopped answering.
    #[error("dataflow worker {worker} panicked or disconnected")]
    WorkerPanicked {
        /// Index of the worker.
        worker: usize,
    },
    /// A previous error left the dataflow in an unknown state; it must be rebuilt
    /// (for example restored from a checkpoint).
    #[error("dataflow unusable after an earlier error: {cause}")]
    Poisoned {
        /// The earlier error.
        cause: Box<Error>,
    },
}

impl Error {
    /// This error placed: an overflow of the state of `window` (and, where
    /// `slot` says, of that aggregate of the configuration) names them; any
    /// other error is as it was.
    pub fn placed(self, window: Window, slot: Option<usize>) -> Self {
        match self {
            Error::Overflow {
                kind,
                detail,
                aggregate,
                ..
            } => Error::Overflow {
                kind,
                window: Some(window),
                detail: slot.map_or(detail, |s| format!("aggregate #{s}")),
                aggregate: slot.and_then(|s| u32::try_from(s).ok()).or(aggregate),
            },
            other => other,
        }
    }
}
