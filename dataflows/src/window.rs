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

    /// The ends of the windows holding the pane that starts at `pane_start`
    /// which end after `after` and at or before `through` (each one if
    /// `through` is `EventTime::MAX`, where ends saturate): the first and the
    /// last, `slide` apart, unsaturated ([`Self::window_ending`] gives each
    /// window); `None` if there is none. Those [`Self::windows_of`] gives,
    /// found without listing the others.
    pub(crate) fn ends_between(
        &self,
        pane_start: EventTime,
        after: EventTime,
        through: EventTime,
    ) -> Option<(i128, i128)> {
        // (a window's end saturates: none ends after `EventTime::MAX`)
        if after == EventTime::MAX {
            return None;
        }
        let (size, slide) = (i128::from(self.size), i128::from(self.slide));
        let last = self.last_start(pane_start) + size;
        let hi = match through {
            EventTime::MAX => last,
            t => last.min(i128::from(t)),
        };
        // the ends one grid apart below `last`, after the pane's start and `after`
        let floor = i128::from(pane_start).max(i128::from(after));
        if last <= floor {
            return None;
        }
        let lo = last - (last - floor - 1).div_euclid(slide) * slide;
        (lo <= hi).then_some((lo, hi))
    }

    /// The window that ends at `end` (saturating at the ends of `i64`).
    pub(crate) fn window_ending(&self, end: i128) -> Window {
        Window::new(sat(end - i128::from(self.size)), sat(end))
    }

    /// The distance between two windows' starts.
    pub(crate) fn slide(&self) -> EventTime {
        self.slide
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A time near zero or near either end of `i64`.
    fn time() -> impl Strategy<Value = EventTime> {
        prop_oneof![
            -1_000i64..1_000,
            (0i64..1_000).prop_map(|d| EventTime::MIN + d),
            (0i64..1_000).prop_map(|d| EventTime::MAX - d),
            Just(EventTime::MIN),
            Just(EventTime::MAX),
        ]
    }

    proptest::proptest! {
        /// The windows `ends_between` finds for a pane are those of `windows_of`
        /// that end after `after` and at or before `through`, saturated alike.
        #[test]
        fn ends_between_finds_what_windows_of_lists(
            size in 1i64..40,
            slide in 1i64..8,
            offset in -100i64..100,
            t in time(),
            after in time(),
            through in time(),
        ) {
            let Some(p) = Panes::new(size.max(slide), slide, offset) else {
                return Ok(());
            };
            let pane = p.pane_of(t);
            let mut want: Vec<Window> = p
                .windows_of(pane)
                .filter(|w| w.end > after && w.end <= through)
                .collect();
            want.dedup();
            let mut got: Vec<Window> = Vec::new();
            if let Some((lo, hi)) = p.ends_between(pane.start, after, through) {
                let mut end = lo;
                while end <= hi {
                    got.push(p.window_ending(end));
                    end += i128::from(p.slide());
                }
            }
            got.dedup();
            prop_assert_eq!(got, want);
        }
    }
}
