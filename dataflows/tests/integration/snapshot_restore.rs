//! Snapshot and restore: run half a stream, snapshot, restore into a new dataflow with a
//! different worker count, run the rest; the closed output equals the uninterrupted run's.

use std::collections::BTreeMap;

use thund_dataflows::{AggState, Config, EventTime, Key, Update, Window, WindowedAggregate};

use crate::common::{as_map, row_states, Rng, ALL_KINDS};

type Groups = BTreeMap<(Window, Key), Vec<AggState>>;

/// A trigger: updates to insert, then the watermark to advance to.
type Trigger = (Vec<Update>, EventTime);

/// A deterministic stream of triggers: tumbling 10 ms and hopping (30, 10) windows, keys
/// including the empty one, NULLs, disorder, and triggers that do not move the watermark.
fn stream(seed: u64, triggers: usize) -> Vec<Trigger> {
    let kinds = ALL_KINDS;
    let mut rng = Rng::new(seed);
    let mut w: EventTime = 0;
    let mut out = Vec::new();
    for _ in 0..triggers {
        let mut updates = Vec::new();
        for _ in 0..rng.below(40) {
            let t = w + rng.below(25) as i64 - 5;
            let key = if rng.below(5) == 0 {
                0
            } else {
                1 + rng.below(6)
            };
            let x = if rng.below(6) == 0 {
                None
            } else {
                Some(rng.below(200) as i64 - 100)
            };
            let tumbling = Window::new(t.div_euclid(10) * 10, t.div_euclid(10) * 10 + 10);
            let hop = (0..3).map(|i| {
                let s = t.div_euclid(10) * 10 - 10 * i;
                Window::new(s, s + 30)
            });
            for window in std::iter::once(tumbling).chain(hop) {
                if window.end > w {
                    updates.push(Update {
                        window,
                        key,
                        aggs: row_states(&kinds, x),
                    });
                }
            }
        }
        w += rng.below(12) as i64; // sometimes 0
        out.push((updates, w));
    }
    out
}

fn run(df: &mut WindowedAggregate, triggers: &[Trigger], closed: &mut Vec<Update>) {
    for (updates, w) in triggers {
        df.insert(updates.clone()).expect("insert");
        let step = df.advance_to(*w).expect("advance");
        assert_eq!(df.frontier(), *w);
        closed.extend(step.closed);
    }
}

fn uninterrupted(triggers: &[Trigger]) -> Groups {
    let mut df = WindowedAggregate::spawn(Config::new(ALL_KINDS.to_vec())).expect("spawn");
    let mut closed = Vec::new();
    run(&mut df, triggers, &mut closed);
    closed.extend(df.advance_to(EventTime::MAX).expect("finish").closed);
    as_map(closed)
}

fn interrupted(
    triggers: &[Trigger],
    cut: usize,
    before: usize,
    after: usize,
    dirty: bool,
) -> Groups {
    let config = |n| Config::new(ALL_KINDS.to_vec()).with_workers(n);
    let mut df = WindowedAggregate::spawn(config(before)).expect("spawn");
    let mut closed = Vec::new();
    run(&mut df, &triggers[..cut], &mut closed);
    let mut rest = &triggers[cut..];
    if dirty && !rest.is_empty() {
        // Checkpoint between an insert and its step: the snapshot must include the insert.
        df.insert(rest[0].0.clone()).expect("insert");
    }
    let at = df.frontier();
    let snapshot = df.snapshot().expect("snapshot");
    assert_eq!(snapshot.len(), before);
    let state: Vec<Update> = snapshot.into_iter().flat_map(|(_, us)| us).collect();
    assert!(state.iter().all(|u| u.window.end > at));
    drop(df);
    let mut df = WindowedAggregate::restore(config(after), at, state.clone()).expect("restore");
    assert_eq!(df.frontier(), at);
    // A snapshot right after restore holds the same state.
    let again: Vec<Update> = df
        .snapshot()
        .expect("snapshot")
        .into_iter()
        .flat_map(|(_, us)| us)
        .collect();
    assert_eq!(as_map(again), as_map(state));
    if dirty && !rest.is_empty() {
        let step = df.advance_to(rest[0].1).expect("advance");
        closed.extend(step.closed);
        rest = &rest[1..];
    }
    run(&mut df, rest, &mut closed);
    closed.extend(df.advance_to(EventTime::MAX).expect("finish").closed);
    as_map(closed)
}

#[test]
fn resumed_runs_equal_the_uninterrupted_run() {
    for seed in 1..=3 {
        let triggers = stream(seed, 40);
        let expected = uninterrupted(&triggers);
        assert!(
            expected.len() > 100,
            "seed {seed}: only {} groups",
            expected.len()
        );
        for (cut, before, after, dirty) in [
            (20, 1, 2, false),
            (20, 2, 1, true),
            (7, 2, 3, false),
            (33, 3, 1, true),
            (0, 1, 2, true),
            (40, 2, 1, false),
        ] {
            let got = interrupted(&triggers, cut, before, after, dirty);
            assert!(
                got == expected,
                "seed {seed}, cut {cut}, {before} -> {after} workers, dirty {dirty}: {} vs {} groups",
                got.len(),
                expected.len()
            );
        }
    }
}

#[test]
fn restore_rejects_closed_windows() {
    let config = Config::new(ALL_KINDS.to_vec());
    let u = Update {
        window: Window::new(0, 10),
        key: 0,
        aggs: row_states(&ALL_KINDS, Some(1)),
    };
    let e = WindowedAggregate::restore(config, 10, vec![u]);
    assert!(
        matches!(e, Err(thund_dataflows::Error::Late { .. })),
        "{e:?}"
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: crate::common::proptest_cases(6),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Random streams, random crash points, random worker counts before and after.
    #[test]
    fn resumed_at_a_random_point_equals_uninterrupted(
        seed in 0u64..1_000,
        cut in 0usize..=25,
        before in 1usize..=3,
        after in 1usize..=3,
        dirty in proptest::bool::ANY,
    ) {
        let triggers = stream(seed, 25);
        let expected = uninterrupted(&triggers);
        let got = interrupted(&triggers, cut, before, after, dirty);
        proptest::prop_assert_eq!(got, expected);
    }
}

/// A snapshot read in the background while the dataflow keeps stepping holds the state at
/// the moment it began: the same as a snapshot of a twin dataflow stopped there. The state
/// spans several of a worker's chunks, so steps run between chunks. On worker threads.
#[test]
fn a_background_snapshot_is_the_state_when_it_began() {
    background_snapshot(thund_dataflows::Cluster::start(2).expect("cluster"));
}

/// The same with one worker stepped on the caller's thread: the snapshot is read by the
/// thread that waits for it, while another thread steps the dataflow.
#[test]
fn a_background_snapshot_on_an_inline_worker_is_the_state_when_it_began() {
    background_snapshot(thund_dataflows::Cluster::inline());
}

fn background_snapshot(cluster: thund_dataflows::Cluster) {
    let kinds = ALL_KINDS.to_vec();
    let workers = cluster.workers();
    let config = Config::new(kinds.clone()).with_workers(workers);
    let mut live = WindowedAggregate::spawn_on(&cluster, config.clone()).expect("spawn");
    let mut twin = WindowedAggregate::spawn_on(&cluster, config).expect("spawn");
    let mut rng = Rng::new(11);
    let mut batch = |w: EventTime, keys: u64| -> Vec<Update> {
        (0..keys)
            .map(|key| {
                let t = w + rng.below(40) as i64;
                let s = t.div_euclid(20) * 20;
                Update {
                    window: Window::new(s, s + 20),
                    key,
                    aggs: row_states(&kinds, Some(rng.below(1_000) as i64 - 500)),
                }
            })
            .collect()
    };
    for w in [0, 10, 20] {
        let b = batch(w, 60_000);
        live.insert(b.clone()).expect("insert");
        twin.insert(b).expect("insert");
        live.advance_to(w).expect("advance");
        twin.advance_to(w).expect("advance");
    }
    // inserted but not stepped: the snapshot seals them first
    let b = batch(25, 60_000);
    live.insert(b.clone()).expect("insert");
    twin.insert(b).expect("insert");
    let expected = twin.snapshot().expect("snapshot");
    let pending = live.begin_snapshot().expect("begin");
    let later: Vec<Vec<Update>> = [30, 40, 50, 60].iter().map(|&w| batch(w, 60_000)).collect();
    // one thread waits for the snapshot while this one keeps stepping
    let (got, closed_after) = std::thread::scope(|s| {
        let waiting = s.spawn(move || pending.wait());
        let mut closed_after = 0;
        for (w, b) in [30, 40, 50, 60].into_iter().zip(later) {
            live.insert(b).expect("insert");
            closed_after += live.advance_to(w).expect("advance").closed.len();
        }
        (waiting.join().expect("no panic"), closed_after)
    });
    let got = got.expect("wait");
    assert!(closed_after > 0, "later steps closed windows meanwhile");
    assert_eq!(got.len(), workers);
    assert!(got.iter().map(|(_, u)| u.len()).sum::<usize>() > 2 * (1 << 15));
    assert_eq!(got, expected);
}
