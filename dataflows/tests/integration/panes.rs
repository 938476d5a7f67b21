//! Panes: a hopping view fed one update per pane gives, step by step, exactly what the same
//! view fed one update per window gives; a snapshot of pane states restores it.

use proptest::prelude::*;
use thund_dataflows::{AggKind, Config, EventTime, Panes, Update, Window, WindowedAggregate};

use crate::common::row_states;

const KINDS: [AggKind; 5] = [
    AggKind::Count,
    AggKind::SumInt,
    AggKind::MinFloat,
    AggKind::MaxInt,
    AggKind::SumFloat,
];

/// Every window of `(size, slide)` at `offset` holding `t` (the test's own arithmetic).
fn windows_of(size: i64, slide: i64, offset: i64, t: i64) -> Vec<Window> {
    let mut out = Vec::new();
    let mut s = (t - offset).div_euclid(slide) * slide + offset;
    while s + size > t {
        out.push(Window::new(s, s + size));
        s -= slide;
    }
    out
}

type Trigger = (Vec<(i64, u64, Option<i64>)>, i64);

/// `(size, slide, offset)` in ms.
type Geometry = (i64, i64, i64);

fn triggers() -> impl Strategy<Value = (Geometry, Vec<Trigger>)> {
    let geometry = (
        prop_oneof![
            Just((30, 10)),
            Just((40, 15)),
            Just((20, 20)),
            Just((50, 20))
        ],
        -7i64..7,
    )
        .prop_map(|((size, slide), offset)| (size, slide, offset));
    let trigger = (
        prop::collection::vec((0i64..40, 0u64..4, prop::option::of(-20i64..20)), 0..20),
        0i64..25,
    );
    (geometry, prop::collection::vec(trigger, 1..12))
}

/// Each step's (closed, changed), and with panes the snapshot taken after one trigger.
type Outcome = (
    Vec<(Vec<Update>, Vec<Update>)>,
    Option<(EventTime, Vec<Update>)>,
);

/// Runs the triggers on a dataflow; returns each step's (closed, changed) sorted, and
/// with panes the snapshot taken after trigger `snap_at`.
fn run(
    (size, slide, offset): Geometry,
    triggers: &[Trigger],
    panes: bool,
    workers: usize,
    snap_at: usize,
    track: &[bool],
) -> Outcome {
    let mut config = Config::new(KINDS.to_vec()).with_workers(workers);
    let geometry = Panes::new(size, slide, offset).expect("geometry");
    if panes {
        config = config.with_panes(geometry);
    }
    let mut df = WindowedAggregate::spawn(config).expect("spawn");
    let (mut w, mut base) = (EventTime::MIN, 0i64);
    let mut steps = Vec::new();
    let mut snap = None;
    for (i, (rows, advance)) in triggers.iter().enumerate() {
        let mut updates = Vec::new();
        for &(dt, key, x) in rows {
            let t = base + dt;
            if panes {
                let pane = geometry.pane_of(t);
                if geometry.expiry(pane) > w {
                    updates.push(Update {
                        window: pane,
                        key,
                        aggs: row_states(&KINDS, x),
                    });
                }
            } else {
                for window in windows_of(size, slide, offset, t) {
                    if window.end > w {
                        updates.push(Update {
                            window,
                            key,
                            aggs: row_states(&KINDS, x),
                        });
                    }
                }
            }
        }
        df.insert(updates).expect("insert");
        base += advance;
        w = w.max(base);
        // untracked, a pane view keeps no windows and assembles them as they close
        df.report_changes(track[i % track.len()]);
        let mut step = df.advance_to(w).expect("advance");
        step.closed.sort();
        step.changed.sort();
        steps.push((step.closed, step.changed));
        if panes && i == snap_at {
            let all: Vec<Update> = df
                .snapshot()
                .expect("snapshot")
                .into_iter()
                .flat_map(|(_, u)| u)
                .collect();
            snap = Some((w, all));
        }
    }
    let mut last = df.advance_to(EventTime::MAX).expect("finish");
    last.closed.sort();
    steps.push((last.closed, last.changed));
    (steps, snap)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn panes_give_what_windows_give_and_restore(
        (geometry, trigs) in triggers(),
        workers in 1usize..=2,
        snap_at in 0usize..12,
        track in prop::collection::vec(any::<bool>(), 1..5),
    ) {
        let (by_window, _) = run(geometry, &trigs, false, 1, usize::MAX, &[true]);
        let (by_pane, snap) = run(geometry, &trigs, true, workers, snap_at, &track);
        // the same windows close at every step; changes are reported while tracked
        prop_assert_eq!(by_pane.len(), by_window.len());
        for (i, (pane, window)) in by_pane.iter().zip(&by_window).enumerate() {
            prop_assert_eq!(&pane.0, &window.0, "closed at step {}", i);
            if i < trigs.len() && track[i % track.len()] {
                prop_assert_eq!(&pane.1, &window.1, "changed at step {}", i);
            } else {
                prop_assert!(pane.1.is_empty() || i == trigs.len(), "changed at step {}", i);
            }
        }
        // a dataflow restored from the pane snapshot finishes like the original
        if let Some((w, state)) = snap {
            let config = Config::new(KINDS.to_vec())
                .with_workers(3 - workers)
                .with_panes(Panes::new(geometry.0, geometry.1, geometry.2).expect("geometry"));
            let mut restored = WindowedAggregate::restore(config, w, state).expect("restore");
            // untracked after the restore: the windows are assembled from restored panes
            let untracked = !track[0];
            restored.report_changes(!untracked);
            let mut rest = Vec::new();
            let mut base: i64 = trigs.iter().take(snap_at + 1).map(|t| t.1).sum();
            let mut now = w;
            for (rows, advance) in trigs.iter().skip(snap_at + 1) {
                let g = Panes::new(geometry.0, geometry.1, geometry.2).expect("geometry");
                let updates = rows
                    .iter()
                    .filter_map(|&(dt, key, x)| {
                        let pane = g.pane_of(base + dt);
                        (g.expiry(pane) > now).then(|| Update { window: pane, key, aggs: row_states(&KINDS, x) })
                    })
                    .collect();
                restored.insert(updates).expect("insert");
                base += advance;
                now = now.max(base);
                let mut step = restored.advance_to(now).expect("advance");
                step.closed.sort();
                step.changed.sort();
                rest.push((step.closed, step.changed));
            }
            let mut last = restored.advance_to(EventTime::MAX).expect("finish");
            last.closed.sort();
            rest.push((last.closed, last.changed));
            let mut want = by_window[snap_at + 1..].to_vec();
            if untracked {
                want.iter_mut().for_each(|s| s.1.clear());
            }
            prop_assert_eq!(&rest[..], &want[..]);
        }
    }
}
