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

/// Window geometry for pane inputs (Flink's sliced windows): windows of `size`, starting
/// every `slide` at `offset` (mod `slide`), built from panes of `gcd(size, slide)`. With
/// panes, an update's window is a pane `[p, p + width)`, and the dataflow derives every
/// window holding it, so a row of a hopping view costs one update, not one per window.
///
/// ```
/// use thund_dataflows::{Panes, Window};
/// let p = Panes::new(30, 10, 0).expect("valid");
/// assert_eq!(p.width(), 10);
/// let pane = p.pane_of(25);
/// assert_eq!(pane, Window::new(20, 30));
/// let ws: Vec<Window> = p.windows_of(pane).collect();
/// assert_eq!(ws, vec![Window::new(0, 30), Window::new(10, 40), Window::new(20, 50)]);
/// assert_eq!(p.expiry(pane), 50); // the last window holding the pane ends at 50
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Panes {
    size: EventTime,
    slide: EventTime,
    offset: EventTime,
    width: EventTime,
}

impl Panes {
    /// Panes for windows of `size` every `slide` (both positive) at `offset`.
    pub fn new(size: EventTime, slide: EventTime, offset: EventTime) -> Option<Self> {
        if size <= 0 || slide <= 0 {
            return None;
        }
        let (mut a, mut b) = (size, slide);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        Some(Panes {
            size,
            slide,
            offset: offset.rem_euclid(slide),
            width: a,
        })
    }

    /// The pane width, `gcd(size, slide)`.
    pub fn width(&self) -> EventTime {
        self.width
    }

    /// The pane holding `t` (saturating at the ends of `i64`).
    pub fn pane_of(&self, t: EventTime) -> Window {
        // in i64 when nothing overflows (every time but those within a pane of the ends)
        let fast = t
            .checked_sub(self.offset)
            .and_then(|x| x.div_euclid(self.width).checked_mul(self.width))
            .and_then(|s| s.checked_add(self.offset))
            .and_then(|s| Some(Window::new(s, s.checked_add(self.width)?)));
        if let Some(pane) = fast {
            return pane;
        }
        let (t, w, o) = (
            i128::from(t),
            i128::from(self.width),
            i128::from(self.offset),
        );
        let start = (t - o).div_euclid(w) * w + o;
        Window::new(sat(start), sat(start + w))
    }

    /// Start of the last window holding the pane starting at `p`.
    fn last_start(&self, p: EventTime) -> i128 {
        let (p, s, o) = (
            i128::from(p),
            i128::from(self.slide),
            i128::from(self.offset),
        );
        (p - o).div_euclid(s) * s + o
    }

    /// End of the last window holding `pane`: when the pane's contribution expires.
    pub fn expiry(&self, pane: Window) -> EventTime {
        sat(self.last_start(pane.start) + i128::from(self.size))
    }

    /// Every window holding `pane`, by start.
    pub fn windows_of(&self, pane: Window) -> impl Iterator<Item = Window> + '_ {
        let last = self.last_start(pane.start);
        let (size, slide) = (i128::from(self.size), i128::from(self.slide));
        let n = (size + slide - 1) / slide;
        let p = i128::from(pane.start);
        (0..n).rev().filter_map(move |k| {
            let start = last - k * slide;
            let end = start + size;
            (start <= p && p < end).then(|| Window::new(sat(start), sat(end)))
        })
    }
}

/// When the contribution of an input `unit` (a window, or with `panes` a pane) expires:
/// the end of the last window it feeds.
pub(crate) fn expiry(panes: Option<Panes>, unit: Window) -> EventTime {
    panes.map_or(unit.end, |p| p.expiry(unit))
}

fn sat(x: i128) -> EventTime {
    EventTime::try_from(x).unwrap_or(if x < 0 {
        EventTime::MIN
    } else {
        EventTime::MAX
    })
}
