//! The late rule for tumbling and hopping windows (design §1), shared by
//! both paths: a row is late iff every window it belongs to had closed at
//! the watermark in force when its trigger started (`W_prev`).

use arrow::array::{Array, Int64Array};

use super::{TimeWindows, Window};
use crate::time::EventTime;

/// Why a row is not taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every window of the row had closed; the latest of them.
    Late(Option<Window>),
    /// The event time is NULL.
    NullTime,
    /// A window of the row (or its session span) would end past `i64::MAX`
    /// or start before `i64::MIN` milliseconds.
    Unrepresentable,
}

/// The refused rows of a batch, by row index in increasing order, with why
/// (most batches refuse none: the list is then empty, not one entry per row).
pub(crate) type Refusals = Vec<(usize, Refusal)>;

impl Refusal {
    /// The reason the rejected-row relation shows.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Late(_) => "late",
            Refusal::NullTime => "null event time",
            Refusal::Unrepresentable => super::EventTimeDomain::REASON,
        }
    }
}

/// The late rule row by row: NULL event times, times whose windows cannot
/// be represented, and rows whose last window closed at `w_prev` are refused.
pub(crate) fn classify_time(
    windows: &TimeWindows,
    times: &Int64Array,
    w_prev: Option<EventTime>,
) -> Refusals {
    // Rows come mostly in time order: a window is looked up once per run of
    // times that share it, with its verdict. The times that hold form one
    // interval, so a run whose two ends hold holds throughout.
    let mut run: Option<(EventTime, EventTime, Option<Refusal>)> = None;
    let mut out = Refusals::new();
    let nulls = times.nulls().filter(|n| n.null_count() > 0);
    let values = times.values();
    let mut i = 0;
    while i < values.len() {
        // without NULLs, the rows that follow in a run that refuses nothing
        // are skipped in a tight loop
        if let (None, Some((lo, hi, None))) = (nulls, run) {
            while values.get(i).is_some_and(|&t| lo <= t && t < hi) {
                i += 1;
            }
            if i == values.len() {
                break;
            }
        }
        let (row, t) = (i, values[i]);
        i += 1;
        if nulls.is_some_and(|n| n.is_null(row)) {
            out.push((row, Refusal::NullTime));
            continue;
        }
        let verdict = match run {
            Some((lo, hi, verdict)) if lo <= t && t < hi => verdict,
            _ if !windows.holds(t) => Some(Refusal::Unrepresentable),
            _ => {
                let (last, lo, hi) = windows.last_window_run(t);
                let verdict = w_prev
                    .filter(|&wp| last.end <= wp)
                    .map(|_| Refusal::Late(Some(last)));
                run = (windows.holds(lo) && windows.holds(hi - 1)).then_some((lo, hi, verdict));
                verdict
            }
        };
        if let Some(r) = verdict {
            out.push((row, r));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule asked row by row, with no run cached.
    fn reference(
        w: &TimeWindows,
        t: Option<EventTime>,
        w_prev: Option<EventTime>,
    ) -> Option<Refusal> {
        let t = match t {
            None => return Some(Refusal::NullTime),
            Some(t) => t,
        };
        if !w.holds(t) {
            return Some(Refusal::Unrepresentable);
        }
        let last = w.last_window(t);
        w_prev
            .filter(|&wp| last.end <= wp)
            .map(|_| Refusal::Late(Some(last)))
    }

    #[test]
    fn runs_give_what_each_row_alone_gives() {
        let near = |base: i64| (0..40).map(move |d| Some(base.saturating_add(d)));
        let times: Vec<Option<EventTime>> = near(i64::MIN)
            .chain(near(i64::MAX - 39))
            .chain(near(-20))
            .chain([
                None,
                Some(5),
                Some(i64::MAX),
                Some(3),
                Some(i64::MIN),
                Some(12),
                None,
            ])
            .chain(near(i64::MAX - 39).rev())
            .chain(near(i64::MIN).rev())
            .collect();
        // with NULLs, and without (where runs are skipped in a tight loop)
        let no_nulls: Vec<Option<EventTime>> =
            times.iter().copied().filter(Option::is_some).collect();
        for times in [times, no_nulls] {
            let arr = Int64Array::from(times.clone());
            for (size, slide, offset) in [(10, 10, 0), (10, 10, 3), (10, 4, 1), (7, 3, 0)] {
                let w = TimeWindows::new(size, slide, offset).expect("valid");
                for w_prev in [None, Some(i64::MIN), Some(0), Some(8), Some(i64::MAX)] {
                    let got = classify_time(&w, &arr, w_prev);
                    let want: Refusals = times
                        .iter()
                        .enumerate()
                        .filter_map(|(i, &t)| Some((i, reference(&w, t, w_prev)?)))
                        .collect();
                    assert_eq!(got, want, "size {size}, slide {slide}, W_prev {w_prev:?}");
                }
            }
        }
    }
}
