//! Windows: tumbling and hopping window arithmetic, aligned to the Unix
//! epoch plus an offset, and the late rule both paths share (`window/late.rs`).
//!
//! Rows are stored by *pane*: slices of width `gcd(size, slide)`, so a window
//! is a run of whole panes and a hopping window never copies a row.

pub(crate) mod late;

use crate::time::EventTime;

/// A half-open event-time window `[start, end)` (the dataflow crate's type, shared).
pub use thund_dataflows::Window;

/// Tumbling (`slide == size`) or hopping windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindows {
    size: i64,
    slide: i64,
    offset: i64,
    pane: i64,
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl TimeWindows {
    /// Windows of `size` every `slide` ms, shifted by `offset` ms (all validated positive).
    pub fn new(size: i64, slide: i64, offset: i64) -> Self {
        TimeWindows {
            size,
            slide,
            offset: offset.rem_euclid(slide),
            pane: gcd(size, slide),
        }
    }

    /// The windows of a tumbling or hopping spec (`None` for sessions).
    pub fn from_spec(w: &crate::spec::WindowSpec) -> Option<Self> {
        use crate::spec::{ms, WindowKind};
        match &w.kind {
            WindowKind::Tumbling { size } => Some(Self::new(ms(*size), ms(*size), ms(w.offset))),
            WindowKind::Hopping { size, slide } => {
                Some(Self::new(ms(*size), ms(*slide), ms(w.offset)))
            }
            WindowKind::Session { .. } => None,
        }
    }

    /// Window length in ms.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// Distance between window starts in ms (`size` for tumbling windows).
    pub fn slide(&self) -> i64 {
        self.slide
    }

    /// Offset of window starts from the Unix epoch in ms, in `0..slide`.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// Start of the pane holding `t`.
    pub fn pane_of(&self, t: EventTime) -> EventTime {
        (t - self.offset).div_euclid(self.pane) * self.pane + self.offset
    }

    /// Pane width in ms.
    pub fn pane_width(&self) -> i64 {
        self.pane
    }

    /// The latest-starting window that holds `t` (the last of its windows to close).
    pub fn last_window(&self, t: EventTime) -> Window {
        let start = (t - self.offset).div_euclid(self.slide) * self.slide + self.offset;
        Window {
            start,
            end: start.saturating_add(self.size),
        }
    }

    /// Every window that holds `t` (or the pane starting at `t`), earliest first.
    pub fn windows_of(&self, t: EventTime) -> impl Iterator<Item = Window> + '_ {
        let last = self.last_window(t).start;
        let n = (self.size + self.slide - 1) / self.slide; // windows per instant, at most
        (0..n).rev().filter_map(move |k| {
            let start = last - k * self.slide;
            let end = start.saturating_add(self.size);
            (start <= t && t < end).then_some(Window { start, end })
        })
    }

    /// The end of the last window that holds the pane starting at `pane`:
    /// once W reaches it, the pane's rows can be evicted.
    pub fn pane_expiry(&self, pane: EventTime) -> EventTime {
        self.last_window(pane).end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopping_windows_of_an_instant() {
        let w = TimeWindows::new(10, 4, 0);
        let got: Vec<_> = w.windows_of(9).map(|w| (w.start, w.end)).collect();
        assert_eq!(got, vec![(0, 10), (4, 14), (8, 18)]);
        let got: Vec<_> = w.windows_of(-1).map(|w| (w.start, w.end)).collect();
        assert_eq!(got, vec![(-8, 2), (-4, 6)]);
        assert_eq!(w.pane_width(), 2);
        assert_eq!(w.pane_of(9), 8);
        assert_eq!(w.pane_expiry(8), 18);
    }

    #[test]
    fn tumbling_with_offset() {
        let w = TimeWindows::new(10, 10, 3);
        let got: Vec<_> = w.windows_of(2).collect();
        assert_eq!(got, vec![Window { start: -7, end: 3 }]);
        assert_eq!(w.last_window(3), Window { start: 3, end: 13 });
    }
}
