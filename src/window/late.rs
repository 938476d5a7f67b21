//! The late rule for tumbling and hopping windows (design §1), shared by
//! both paths: a row is late iff every window it belongs to had closed at
//! the watermark in force when its trigger started (`W_prev`).

use arrow::array::Int64Array;

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
) -> Vec<Option<Refusal>> {
    // rows come mostly in time order: a window is looked up once per run of
    // times that share it
    let mut run: Option<(EventTime, EventTime, Window)> = None;
    let mut last_of = |t: EventTime| match run {
        Some((lo, hi, w)) if lo <= t && t < hi => w,
        _ => {
            let (w, lo, hi) = windows.last_window_run(t);
            run = Some((lo, hi, w));
            w
        }
    };
    times
        .iter()
        .map(|t| match t {
            None => Some(Refusal::NullTime),
            Some(t) if !windows.holds(t) => Some(Refusal::Unrepresentable),
            Some(t) => {
                let last = last_of(t);
                match w_prev {
                    Some(wp) if last.end <= wp => Some(Refusal::Late(Some(last))),
                    _ => None,
                }
            }
        })
        .collect()
}
