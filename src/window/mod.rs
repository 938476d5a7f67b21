//! Windows: tumbling and hopping window arithmetic, aligned to the Unix
//! epoch plus an offset, and the late rule both paths share (`window/late.rs`).
//!
//! Rows are stored by *pane*: slices of width `gcd(size, slide)`, so a window
//! is a run of whole panes and a hopping window never copies a row.

pub(crate) mod late;

use crate::time::EventTime;

/// A half-open event-time window `[start, end)` (the dataflow crate's type, shared).
pub use thund_dataflows::{Panes, Window};

/// Tumbling (`slide == size`) or hopping windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeWindows {
    size: i64,
    slide: i64,
    offset: i64,
    /// The pane arithmetic, shared with the dataflow (one definition).
    panes: Panes,
}

/// The largest `offset + k * unit` at or before `t`, exactly (in `i128`).
fn align(t: EventTime, unit: i64, offset: i64) -> i128 {
    // in i64 when nothing overflows (every time but those within a unit of the ends)
    let fast = t
        .checked_sub(offset)
        .and_then(|x| x.div_euclid(unit).checked_mul(unit))
        .and_then(|s| s.checked_add(offset));
    if let Some(start) = fast {
        return i128::from(start);
    }
    let unit = i128::from(unit);
    (i128::from(t) - i128::from(offset)).div_euclid(unit) * unit + i128::from(offset)
}

/// `x` in `i64`, saturated (exact for every time that [`TimeWindows::holds`]).
fn clamp(x: i128) -> EventTime {
    i64::try_from(x).unwrap_or(if x < 0 {
        EventTime::MIN
    } else {
        EventTime::MAX
    })
}

impl TimeWindows {
    /// Windows of `size` every `slide` ms, shifted by `offset` ms; `None`
    /// unless `0 < slide <= size`.
    ///
    /// ```
    /// use thund::window::TimeWindows;
    /// let hop = TimeWindows::new(10_000, 2_000, 0).expect("valid");
    /// assert_eq!(hop.windows_of(9_500).count(), 5);
    /// assert!(TimeWindows::new(10_000, 0, 0).is_none()); // a zero slide
    /// assert!(TimeWindows::new(1_000, 2_000, 0).is_none()); // gaps between windows
    /// ```
    pub fn new(size: i64, slide: i64, offset: i64) -> Option<Self> {
        if slide <= 0 || slide > size {
            return None;
        }
        Some(TimeWindows {
            size,
            slide,
            offset: offset.rem_euclid(slide),
            panes: Panes::new(size, slide, offset)?,
        })
    }

    /// The windows of a tumbling or hopping spec (`None` for sessions, or
    /// for durations that give no windows).
    pub fn from_spec(w: &crate::spec::WindowSpec) -> Option<Self> {
        use crate::spec::{ms, WindowKind};
        match &w.kind {
            WindowKind::Tumbling { size } => Self::new(ms(*size), ms(*size), ms(w.offset)),
            WindowKind::Hopping { size, slide } => Self::new(ms(*size), ms(*slide), ms(w.offset)),
            WindowKind::Session { .. } => None,
        }
    }

    /// Whether every window holding `t` has bounds that fit in `i64`
    /// milliseconds. A row whose windows do not fit is invalid (design §1:
    /// refused, counted and kept, never silently lost or mis-windowed); the
    /// other methods are only called for times for which this holds.
    ///
    /// ```
    /// use thund::window::TimeWindows;
    /// let w = TimeWindows::new(10_000, 10_000, 0).expect("valid");
    /// assert!(w.holds(0));
    /// assert!(!w.holds(i64::MAX - 1)); // its window would end past i64::MAX
    /// assert!(w.holds(i64::MIN / 2));
    /// ```
    pub fn holds(&self, t: EventTime) -> bool {
        // far from the ends of i64, every window fits
        const QUARTER: i64 = 1 << 61;
        if (EventTime::MIN / 2..EventTime::MAX / 2).contains(&t)
            && self.size < QUARTER
            && self.slide < QUARTER
        {
            return true;
        }
        let (t, size, slide, offset) = (
            i128::from(t),
            i128::from(self.size),
            i128::from(self.slide),
            i128::from(self.offset),
        );
        let last_start = (t - offset).div_euclid(slide) * slide + offset;
        // the earliest window still holding t: start > t - size
        let first_start = last_start - (last_start + size - t - 1).div_euclid(slide) * slide;
        let range = i128::from(i64::MIN)..=i128::from(i64::MAX);
        range.contains(&first_start) && range.contains(&(last_start + size))
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
        self.panes.pane_of(t).start
    }

    /// Pane width in ms.
    pub fn pane_width(&self) -> i64 {
        self.panes.width()
    }

    /// The panes of these windows, as the dataflow takes them.
    pub fn panes(&self) -> Panes {
        self.panes
    }

    /// The latest-starting window that holds `t` (the last of its windows to close).
    pub fn last_window(&self, t: EventTime) -> Window {
        let start = align(t, self.slide, self.offset);
        Window {
            start: clamp(start),
            end: clamp(start + i128::from(self.size)),
        }
    }

    /// [`Self::last_window`] of `t`, and the times `[lo, hi)` around `t` that
    /// share it (rows in time order ask for a window once per run).
    pub(crate) fn last_window_run(&self, t: EventTime) -> (Window, EventTime, EventTime) {
        let start = align(t, self.slide, self.offset);
        let window = Window {
            start: clamp(start),
            end: clamp(start + i128::from(self.size)),
        };
        (window, clamp(start), clamp(start + i128::from(self.slide)))
    }

    /// The times `[lo, hi)` around `t` that are in exactly `t`'s windows
    /// (rows in time order ask for their windows once per run). A run ends
    /// where a window starts or where one ends: with a size that is no
    /// multiple of the slide, times sharing their last window can differ in
    /// their first.
    pub(crate) fn windows_run(&self, t: EventTime) -> (EventTime, EventTime) {
        let (slide, size, offset) = (
            i128::from(self.slide),
            i128::from(self.size),
            i128::from(self.offset),
        );
        let align = |x: i128| (x - offset).div_euclid(slide) * slide + offset;
        let t = i128::from(t);
        // the newest window's start, and the oldest's start minus a slide
        let (newest, before_oldest) = (align(t), align(t - size));
        (
            clamp(newest.max(before_oldest + size)),
            clamp((newest + slide).min(before_oldest + slide + size)),
        )
    }

    /// Every window that holds `t` (or the pane starting at `t`), earliest first.
    pub fn windows_of(&self, t: EventTime) -> impl Iterator<Item = Window> + '_ {
        let last = align(t, self.slide, self.offset);
        let n = (self.size + self.slide - 1) / self.slide; // windows per instant, at most
        (0..n).rev().filter_map(move |k| {
            let start = last - i128::from(k) * i128::from(self.slide);
            let end = start + i128::from(self.size);
            let w = Window {
                start: i64::try_from(start).ok()?,
                end: i64::try_from(end).ok()?,
            };
            (w.start <= t && t < w.end).then_some(w)
        })
    }

    /// The end of the last window that holds the pane starting at `pane`:
    /// once W reaches it, the pane's rows can be evicted.
    pub fn pane_expiry(&self, pane: EventTime) -> EventTime {
        self.panes.expiry(self.panes.pane_of(pane))
    }
}

/// The event times a set of window specs can place (README, "Arithmetic"):
/// a time is in the domain when, for every spec, its windows (or its
/// session's span) fit in `i64` milliseconds. A reader uses it to refuse a
/// row at its line before the engine sees it; the engine refuses the same
/// rows itself (as `its windows do not fit in i64 milliseconds`).
///
/// ```
/// use std::time::Duration;
/// use thund::window::EventTimeDomain;
/// use thund::WindowSpec;
///
/// let d = EventTimeDomain::of([&WindowSpec::tumbling(Duration::from_secs(10))]);
/// assert!(d.holds(0));
/// assert!(!d.holds(i64::MAX - 1));
/// assert_eq!(EventTimeDomain::REASON, "its windows do not fit in i64 milliseconds");
/// ```
#[derive(Clone, Debug, Default)]
pub struct EventTimeDomain {
    windows: Vec<TimeWindows>,
    /// Session gaps in ms: `t + gap` must fit.
    gaps: Vec<i64>,
}

impl EventTimeDomain {
    /// Why a time outside the domain is refused, in words.
    pub const REASON: &'static str = "its windows do not fit in i64 milliseconds";

    /// The domain of every spec in `specs` (all of `i64` for none).
    pub fn of<'a>(specs: impl IntoIterator<Item = &'a crate::spec::WindowSpec>) -> Self {
        let mut d = Self::default();
        for w in specs {
            match &w.kind {
                crate::spec::WindowKind::Session { gap, .. } => d.gaps.push(crate::spec::ms(*gap)),
                _ => d.windows.extend(TimeWindows::from_spec(w)),
            }
        }
        d
    }

    /// Whether every spec can place `t`.
    pub fn holds(&self, t: EventTime) -> bool {
        self.windows.iter().all(|w| w.holds(t))
            && self.gaps.iter().all(|g| t.checked_add(*g).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopping_windows_of_an_instant() {
        let w = TimeWindows::new(10, 4, 0).expect("valid");
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
        let w = TimeWindows::new(10, 10, 3).expect("valid");
        let got: Vec<_> = w.windows_of(2).collect();
        assert_eq!(got, vec![Window { start: -7, end: 3 }]);
        assert_eq!(w.last_window(3), Window { start: 3, end: 13 });
    }

    #[test]
    fn a_windows_run_is_the_times_that_share_all_their_windows() {
        let of = |w: &TimeWindows, t: i64| w.windows_of(t).collect::<Vec<_>>();
        for (size, slide, offset) in [(10, 10, 0), (10, 10, 3), (10, 4, 1), (7, 3, 0), (15, 10, 0)]
        {
            let w = TimeWindows::new(size, slide, offset).expect("valid");
            for t in [
                i64::MIN + 40,
                -11,
                -1,
                0,
                5,
                9,
                10,
                14,
                1 << 40,
                i64::MAX - 40,
            ] {
                let (lo, hi) = w.windows_run(t);
                assert!(lo <= t && t < hi, "t = {t} outside its run [{lo}, {hi})");
                for u in lo..hi {
                    assert_eq!(of(&w, u), of(&w, t), "t = {t}, u = {u}");
                }
                assert_ne!(of(&w, lo - 1), of(&w, t), "t = {t}: the run starts later");
                assert_ne!(of(&w, hi), of(&w, t), "t = {t}: the run ends later");
            }
        }
    }

    #[test]
    fn a_run_is_the_times_that_share_a_last_window() {
        for (size, slide, offset) in [(10, 10, 0), (10, 10, 3), (10, 4, 1), (7, 3, 0)] {
            let w = TimeWindows::new(size, slide, offset).expect("valid");
            for t in [i64::MIN + 40, -11, -1, 0, 5, 9, 10, 1 << 40, i64::MAX - 40] {
                let (last, lo, hi) = w.last_window_run(t);
                assert_eq!(last, w.last_window(t), "t = {t}");
                assert!(lo <= t && t < hi, "t = {t} outside its run [{lo}, {hi})");
                assert_eq!(hi - lo, slide);
                for u in [lo, hi - 1] {
                    assert_eq!(w.last_window(u), last, "t = {t}, u = {u}");
                }
                assert_ne!(w.last_window(lo - 1), last);
                assert_ne!(w.last_window(hi), last);
            }
        }
    }

    #[test]
    fn times_near_the_limits_hold_only_when_all_their_windows_fit() {
        let w = TimeWindows::new(10, 4, 0).expect("valid");
        for t in [
            i64::MIN,
            i64::MIN + 1,
            i64::MIN + 9,
            -1,
            0,
            i64::MAX - 20,
            i64::MAX - 1,
            i64::MAX,
        ] {
            let fits = w.holds(t);
            // the same question asked by brute force, in i128
            let brute = (-20i128..20).all(|k| {
                let s = (i128::from(t)).div_euclid(4) * 4 - k * 4;
                let holds_t = s <= i128::from(t) && i128::from(t) < s + 10;
                !holds_t || (s >= i128::from(i64::MIN) && s + 10 <= i128::from(i64::MAX))
            });
            assert_eq!(fits, brute, "t = {t}");
            if fits {
                for win in w.windows_of(t) {
                    assert!(win.start <= t && t < win.end, "t = {t}: {win:?}");
                }
            }
        }
        assert!(TimeWindows::new(10, 0, 0).is_none());
    }
}
