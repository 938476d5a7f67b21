//! The watermark contract (design §1): per-source maxima, lateness, idleness.
//!
//! `W = min over non-idle sources of (max_event_time − allowed_lateness)`,
//! never decreasing. A source that produced no rows for `idle_timeout` of
//! processing time (an injectable [`Clock`]) stops holding W back; with
//! `idle_timeout = 0` it never goes idle. When every source is idle, W holds.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::time::EventTime;

/// Processing time in milliseconds, injectable for tests.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch, processing time.
    fn now_ms(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to (for tests and replays).
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now: Arc<std::sync::atomic::AtomicI64>,
}

impl ManualClock {
    /// A clock at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        let c = ManualClock::default();
        c.set(start_ms);
        c
    }
    /// Move the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now
            .fetch_add(d.as_millis() as i64, std::sync::atomic::Ordering::SeqCst);
    }
    /// Set the clock.
    pub fn set(&self, ms: i64) {
        self.now.store(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// What the tracker knows of one source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceWatermark {
    /// Source name.
    pub name: String,
    /// Largest event time seen, if any.
    pub max_event_time: Option<EventTime>,
    /// Processing time of the last row seen (or of tracker creation).
    pub last_active_ms: i64,
    /// Whether the source was idle at the last [`WatermarkTracker::advance`].
    pub idle: bool,
}

/// The whole state of a tracker, for checkpoints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkSnapshot {
    /// Current W (`None` = −∞, no promise yet).
    pub watermark: Option<EventTime>,
    /// Per source.
    pub sources: Vec<SourceWatermark>,
    /// While every source is idle and W advances with processing time: the
    /// processing time the last source went idle at and W then.
    #[serde(default)]
    pub clock_base: Option<(i64, EventTime)>,
}

/// Tracks W for one view.
#[derive(Clone, Debug)]
pub struct WatermarkTracker {
    lateness_ms: i64,
    idle_timeout_ms: i64,
    advance_when_idle: bool,
    clock_base: Option<(i64, EventTime)>,
    watermark: Option<EventTime>,
    sources: Vec<SourceWatermark>,
}

impl WatermarkTracker {
    /// A tracker over `sources`, created at processing time `now_ms`.
    pub fn new(
        sources: &[&str],
        allowed_lateness: Duration,
        idle_timeout: Duration,
        now_ms: i64,
    ) -> Self {
        WatermarkTracker {
            lateness_ms: allowed_lateness.as_millis() as i64,
            idle_timeout_ms: idle_timeout.as_millis() as i64,
            advance_when_idle: false,
            clock_base: None,
            watermark: None,
            sources: sources
                .iter()
                .map(|s| SourceWatermark {
                    name: s.to_string(),
                    max_event_time: None,
                    last_active_ms: now_ms,
                    idle: false,
                })
                .collect(),
        }
    }

    /// Opt into the clock-assisted watermark: once every source has been
    /// idle for the idle timeout, W advances by the processing time that
    /// passes, from the W it held when the last source went idle (a source
    /// that produces rows again stops it; W never goes back, so its rows
    /// behind W are late). Without an idle timeout nothing is ever idle and
    /// this does nothing.
    pub fn advancing_when_idle(mut self, on: bool) -> Self {
        self.advance_when_idle = on;
        self
    }

    /// The current W; `None` is −∞ (nothing is final yet); `Some(i64::MAX)` after end of stream.
    pub fn watermark(&self) -> Option<EventTime> {
        self.watermark
    }

    /// Record that source `idx` produced rows at processing time `now_ms`
    /// whose largest event time is `max` (`None` if all had NULL event times).
    pub fn observe(&mut self, idx: usize, max: Option<EventTime>, now_ms: i64) {
        if let Some(s) = self.sources.get_mut(idx) {
            s.last_active_ms = s.last_active_ms.max(now_ms);
            s.idle = false;
            if let Some(m) = max {
                s.max_event_time = Some(s.max_event_time.map_or(m, |old| old.max(m)));
            }
        }
    }

    /// Recompute W at processing time `now_ms` and return it.
    pub fn advance(&mut self, now_ms: i64) -> Option<EventTime> {
        let mut candidate: Option<Option<EventTime>> = None; // None = no active source
        for s in &mut self.sources {
            s.idle = self.idle_timeout_ms > 0
                && now_ms.saturating_sub(s.last_active_ms) >= self.idle_timeout_ms;
            if s.idle {
                continue;
            }
            let w = s.max_event_time.map(|m| m.saturating_sub(self.lateness_ms));
            candidate = Some(match candidate {
                None => w,
                Some(c) => match (c, w) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    _ => None, // an active source with no rows holds W at −∞
                },
            });
        }
        if let Some(Some(w)) = candidate {
            if self.watermark.is_none_or(|old| w > old) {
                self.watermark = Some(w);
            }
        }
        if candidate.is_none() && self.advance_when_idle && !self.sources.is_empty() {
            // every source idle: W moves with the clock from when the last went idle
            if self.clock_base.is_none() {
                let since = self
                    .sources
                    .iter()
                    .map(|s| s.last_active_ms)
                    .max()
                    .unwrap_or(now_ms)
                    .saturating_add(self.idle_timeout_ms);
                self.clock_base = self.watermark.map(|w| (since, w));
            }
            if let Some((since, base)) = self.clock_base {
                // below +inf, which only the end of the stream reaches
                let w = base
                    .saturating_add(now_ms.saturating_sub(since).max(0))
                    .min(EventTime::MAX - 1);
                if self.watermark.is_none_or(|old| w > old) {
                    self.watermark = Some(w);
                }
            }
        } else {
            self.clock_base = None;
        }
        self.watermark
    }

    /// End of stream: W becomes +∞.
    pub fn finish(&mut self) -> EventTime {
        self.watermark = Some(EventTime::MAX);
        EventTime::MAX
    }

    /// The tracker's whole state.
    pub fn snapshot(&self) -> WatermarkSnapshot {
        WatermarkSnapshot {
            watermark: self.watermark,
            sources: self.sources.clone(),
            clock_base: self.clock_base,
        }
    }

    /// Restore a state taken by [`Self::snapshot`] (sources matched by name;
    /// sources unknown to the snapshot keep their fresh state).
    pub fn restore(&mut self, snap: &WatermarkSnapshot) {
        self.watermark = snap.watermark;
        self.clock_base = snap.clock_base;
        for s in &mut self.sources {
            if let Some(saved) = snap.sources.iter().find(|x| x.name == s.name) {
                *s = saved.clone();
            }
        }
    }

    /// Per-source state.
    pub fn sources(&self) -> &[SourceWatermark] {
        &self.sources
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn min_over_sources_minus_lateness_and_monotone() {
        let mut t = WatermarkTracker::new(&["a", "b"], secs(2), secs(0), 0);
        t.observe(0, Some(10_000), 0);
        assert_eq!(
            t.advance(0),
            None,
            "b has produced nothing: W stays at -inf"
        );
        t.observe(1, Some(7_000), 0);
        assert_eq!(t.advance(0), Some(5_000));
        t.observe(1, Some(20_000), 0);
        assert_eq!(t.advance(0), Some(8_000));
        t.observe(0, Some(1_000), 0); // an older row lowers no maximum
        assert_eq!(t.advance(0), Some(8_000));
    }

    #[test]
    fn idle_source_stops_holding_w_and_zero_means_never() {
        let mut t = WatermarkTracker::new(&["a", "b"], secs(0), secs(5), 0);
        t.observe(0, Some(1_000), 0);
        t.observe(1, Some(1_000), 0);
        assert_eq!(t.advance(0), Some(1_000));
        t.observe(0, Some(9_000), 4_000);
        assert_eq!(t.advance(4_000), Some(1_000), "b not idle yet");
        t.observe(0, Some(9_500), 5_000);
        assert_eq!(t.advance(5_000), Some(9_500), "b idle after 5s");
        assert!(t.sources()[1].idle);
        // all idle: W holds
        assert_eq!(t.advance(60_000), Some(9_500));
        // b comes back behind W: W does not decrease
        t.observe(1, Some(2_000), 61_000);
        assert_eq!(t.advance(61_000), Some(9_500));

        let mut never = WatermarkTracker::new(&["a", "b"], secs(0), secs(0), 0);
        never.observe(0, Some(1_000), 0);
        never.observe(1, Some(1_000), 0);
        never.advance(0);
        never.observe(0, Some(9_000), 1_000_000);
        assert_eq!(never.advance(1_000_000), Some(1_000));
    }

    #[test]
    fn clock_assisted_w_moves_with_processing_time_only_when_all_idle() {
        let mut t =
            WatermarkTracker::new(&["a", "b"], secs(1), secs(5), 0).advancing_when_idle(true);
        t.observe(0, Some(10_000), 1_000);
        t.observe(1, Some(8_000), 2_000);
        assert_eq!(t.advance(2_000), Some(7_000));
        // a idle at 6 s, b still active: the ordinary rule (b alone holds W)
        assert_eq!(t.advance(6_500), Some(7_000));
        // both idle from 7 s: W advances with the clock from there
        assert_eq!(t.advance(7_000), Some(7_000));
        assert_eq!(t.advance(9_500), Some(9_500));
        assert_eq!(t.advance(9_000), Some(9_500), "never back");
        let snap = t.snapshot();
        // b speaks again: the clock stops, W holds (a is still idle, b behind W)
        t.observe(1, Some(8_500), 10_000);
        assert_eq!(t.advance(10_000), Some(9_500));
        assert_eq!(t.advance(12_000), Some(9_500));
        // quiet again from 15 s: the clock resumes from the W then
        assert_eq!(t.advance(17_000), Some(11_500));
        // a restored tracker goes on where the snapshot was
        let mut u =
            WatermarkTracker::new(&["a", "b"], secs(1), secs(5), 0).advancing_when_idle(true);
        u.restore(&snap);
        assert_eq!(u.advance(10_500), Some(10_500));
        // off: W holds; never idle: nothing moves; no rows ever: stays -inf
        let mut off = WatermarkTracker::new(&["a"], secs(0), secs(5), 0);
        off.observe(0, Some(1_000), 0);
        assert_eq!(off.advance(0), Some(1_000));
        assert_eq!(off.advance(60_000), Some(1_000));
        let mut never =
            WatermarkTracker::new(&["a"], secs(0), secs(0), 0).advancing_when_idle(true);
        never.observe(0, Some(1_000), 0);
        assert_eq!(never.advance(60_000), Some(1_000));
        let mut empty =
            WatermarkTracker::new(&["a"], secs(0), secs(5), 0).advancing_when_idle(true);
        assert_eq!(empty.advance(60_000), None);
        // near the limit: saturates below +inf
        let mut top = WatermarkTracker::new(&["a"], secs(0), secs(1), 0).advancing_when_idle(true);
        top.observe(0, Some(i64::MAX - 10), 0);
        assert_eq!(top.advance(0), Some(i64::MAX - 10));
        assert_eq!(top.advance(i64::MAX), Some(i64::MAX - 1));
    }

    #[test]
    fn snapshot_restores_everything() {
        let mut t = WatermarkTracker::new(&["a"], secs(1), secs(3), 0);
        t.observe(0, Some(5_000), 10);
        t.advance(10);
        let snap = t.snapshot();
        let mut u = WatermarkTracker::new(&["a"], secs(1), secs(3), 999);
        u.restore(&snap);
        assert_eq!(u.snapshot(), snap);
        assert_eq!(u.watermark(), Some(4_000));
    }
}
