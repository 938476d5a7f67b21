//! The dataflow's timestamp: event time with a sub-step counter, packed into an `i128`.
//!
//! A dataflow time is `(w << 64) | seq`: `w` is the event-time watermark ([`EventTime`]) and
//! `seq` counts host steps taken without moving `w` (a trigger whose watermark did not
//! advance, or a snapshot that must see the rows inserted since the last step). The order is
//! lexicographic, so the frontier's event-time part is exactly the watermark the host
//! advanced to, and a window `[s, e)` closes when the frontier reaches `e << 64`.

use crate::window::EventTime;

/// The timestamp of every dataflow in this crate.
pub(crate) type Time = i128;

/// The dataflow time of watermark `w` at sub-step `seq`.
pub(crate) fn at(w: EventTime, seq: u64) -> Time {
    (Time::from(w) << 64) | Time::from(seq)
}

/// The first dataflow time at or after event time `w` (where windows ending at `w` close).
pub(crate) fn start_of(w: EventTime) -> Time {
    at(w, 0)
}

/// The event-time part of a dataflow time.
pub(crate) fn event_time(t: Time) -> EventTime {
    // `t >> 64` is in the `i64` range for every time built by `at`; saturate otherwise.
    let w = t >> 64;
    EventTime::try_from(w).unwrap_or(if w < 0 {
        EventTime::MIN
    } else {
        EventTime::MAX
    })
}

/// The sub-step part of a dataflow time.
pub(crate) fn seq(t: Time) -> u64 {
    // The low 64 bits, reinterpreted: always in range.
    (t & Time::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_is_lexicographic() {
        let ws = [EventTime::MIN, -5, -1, 0, 1, 7, EventTime::MAX];
        let seqs = [0, 1, u64::MAX];
        let mut all = Vec::new();
        for &w in &ws {
            for &s in &seqs {
                let t = at(w, s);
                assert_eq!((event_time(t), seq(t)), (w, s));
                all.push(t);
            }
        }
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        assert_eq!(at(EventTime::MIN, 0), i128::MIN);
    }
}
