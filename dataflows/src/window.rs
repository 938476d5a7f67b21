//! Event time, windows and group keys: where every aggregate state belongs.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Event time in milliseconds since the Unix epoch.
pub type EventTime = i64;

/// Group key: an integer the caller assigns (for example the id of the key's encoded
/// bytes in a dictionary, or a fixed-width value; any constant for a query without
/// `GROUP BY`). Opaque here, compared as an integer, so records stay `Copy`.
pub type Key = u64;

/// A half-open event-time window `[start, end)`.
///
/// The window closes (its result becomes final) once the frontier reaches `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Window {
    /// First instant inside the window.
    pub start: EventTime,
    /// First instant after the window.
    pub end: EventTime,
}

impl Window {
    /// The window `[start, end)`.
    pub fn new(start: EventTime, end: EventTime) -> Self {
        Window { start, end }
    }

    /// True if `t` lies in `[start, end)`.
    pub fn contains(&self, t: EventTime) -> bool {
        self.start <= t && t < self.end
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {})", self.start, self.end)
    }
}
