//! Property tests of the checkpoint policy against from-scratch oracles:
//! random runs of epochs (random new files and expiries, a non-decreasing
//! watermark, full or delta, runtimes that force full) → `LiveFiles` carries
//! exactly what the oracle says, a full epoch carries nothing and a dropped
//! file never comes back; `CheckpointSchedule` is full at start and every
//! N-th epoch, and a forced full resets the count.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use thund_checkpoint::{CheckpointSchedule, FileEntry, LiveFiles, Manifest};

/// What one (operator, worker) exports in one epoch.
#[derive(Debug, Clone)]
struct Export {
    operator: &'static str,
    worker: usize,
    /// 0: empty state, not written (the writer skips it).
    rows: u64,
    /// `None`: the runtime gives no expiry (the policy then keeps the file).
    expiry: Option<i64>,
}

#[derive(Debug, Clone)]
struct Step {
    /// How far W advances (`None`: W stays unknown if it is still unknown).
    advance: Option<i64>,
    /// The runtime writes a full state even when a delta is asked for.
    force_full: bool,
    exports: Vec<Export>,
}

fn export() -> impl Strategy<Value = Export> {
    (
        prop_oneof![Just("count"), Just("sum")],
        0usize..2,
        prop_oneof![1 => Just(0u64), 4 => 1u64..50],
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(i64::MIN)),
            1 => Just(Some(i64::MAX)),
            6 => (0i64..200).prop_map(Some),
        ],
    )
        .prop_map(|(operator, worker, rows, expiry)| Export {
            operator,
            worker,
            rows,
            expiry,
        })
}

fn step() -> impl Strategy<Value = Step> {
    (
        proptest::option::weighted(0.8, 0i64..40),
        proptest::bool::weighted(0.15),
        proptest::collection::vec(export(), 0..4),
    )
        .prop_map(|(advance, force_full, exports)| Step {
            advance,
            force_full,
            exports,
        })
}

fn manifest(epoch: u64, files: Vec<FileEntry>) -> Manifest {
    Manifest::committed("v", "fp", epoch, files)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn live_files_follow_the_oracle(
        steps in proptest::collection::vec(step(), 1..12),
        compact_every in 1usize..5,
    ) {
        let mut schedule = CheckpointSchedule::new(compact_every);
        let mut live = LiveFiles::new();
        // The oracle: path → (entry, expiry) of the last committed epoch.
        let mut oracle: BTreeMap<String, (FileEntry, i64)> = BTreeMap::new();
        let mut dropped: BTreeSet<String> = BTreeSet::new();
        let mut watermark: Option<i64> = None;

        for (i, s) in steps.iter().enumerate() {
            let epoch = i as u64 + 1;
            if let Some(d) = s.advance {
                watermark = Some(watermark.unwrap_or(0) + d);
            }
            let full = schedule.want_full() || s.force_full;
            let carried = live.carried(watermark, full);
            let w = watermark.unwrap_or(i64::MIN);

            if full {
                prop_assert!(carried.is_empty(), "full epoch {} carries {:?}", epoch, carried);
            } else {
                let expected: Vec<&FileEntry> = oracle
                    .values()
                    .filter(|(_, exp)| *exp == i64::MAX || *exp > w)
                    .map(|(f, _)| f)
                    .collect();
                let got: BTreeSet<&String> = carried.iter().map(|f| &f.path).collect();
                prop_assert_eq!(got.len(), carried.len(), "carried twice: {:?}", carried);
                prop_assert_eq!(
                    got,
                    expected.iter().map(|f| &f.path).collect::<BTreeSet<_>>(),
                    "epoch {}: W {:?}", epoch, watermark
                );
                for f in &carried {
                    prop_assert_eq!(Some(f), oracle.get(&f.path).map(|(e, _)| e));
                }
            }
            for f in &carried {
                prop_assert!(!dropped.contains(&f.path), "{} came back", f.path);
            }

            // The writer: one file per distinct written (operator, worker),
            // the first export of a pair wins (a second one would be refused).
            let mut written = BTreeMap::new();
            for e in s.exports.iter().filter(|e| e.rows > 0) {
                written
                    .entry((e.operator, e.worker))
                    .or_insert_with(|| FileEntry::new(epoch, e.operator, e.worker, e.rows, 100 + e.rows));
            }
            let expiries: Vec<(String, usize, i64)> = s
                .exports
                .iter()
                .filter_map(|e| Some((e.operator.to_string(), e.worker, e.expiry?)))
                .collect();
            let mut files: Vec<FileEntry> = written.values().cloned().collect();
            files.extend(carried.iter().cloned());
            let m = manifest(epoch, files);
            live.record_commit(&m, &expiries);
            schedule.record(full);

            // Oracle update: carried keep their expiry; new files get the
            // first expiry given for their pair, else "never".
            let before: BTreeSet<String> = oracle.keys().cloned().collect();
            let mut next: BTreeMap<String, (FileEntry, i64)> = carried
                .iter()
                .map(|f| (f.path.clone(), oracle[&f.path].clone()))
                .collect();
            for ((op, worker), f) in &written {
                let exp = expiries
                    .iter()
                    .find(|(o, wk, _)| o == op && wk == worker)
                    .map_or(i64::MAX, |x| x.2);
                next.insert(f.path.clone(), (f.clone(), exp));
            }
            oracle = next;
            dropped.extend(before.into_iter().filter(|p| !oracle.contains_key(p)));

            let got: BTreeMap<String, (FileEntry, i64)> = live
                .files()
                .iter()
                .map(|l| (l.entry.path.clone(), (l.entry.clone(), l.expiry)))
                .collect();
            prop_assert_eq!(got.len(), live.len());
            prop_assert_eq!(&got, &oracle, "live set after epoch {}", epoch);
            for p in got.keys() {
                prop_assert!(!dropped.contains(p), "{} came back", p);
            }
        }
    }

    #[test]
    fn schedule_is_full_at_start_and_every_nth_epoch(
        compact_every in 0usize..6,
        forced in proptest::collection::vec(proptest::bool::weighted(0.2), 1..40),
    ) {
        let n = compact_every.max(1);
        let mut s = CheckpointSchedule::new(compact_every);
        prop_assert_eq!(s.compact_every(), n);
        // The oracle: the index of the last full epoch.
        let mut last_full: Option<usize> = None;
        for (i, force) in forced.iter().enumerate() {
            let want = s.want_full();
            let expected = match last_full {
                None => true,
                Some(j) => i - j >= n,
            };
            prop_assert_eq!(want, expected, "epoch index {}, last full {:?}", i, last_full);
            let full = want || *force;
            if full {
                last_full = Some(i);
            }
            s.record(full);
        }
    }

    #[test]
    fn unforced_schedule_is_full_exactly_every_nth_epoch(
        compact_every in 1usize..8,
        epochs in 1usize..50,
    ) {
        let mut s = CheckpointSchedule::new(compact_every);
        for i in 0..epochs {
            let full = s.want_full();
            prop_assert_eq!(full, i % compact_every == 0, "epoch index {}", i);
            s.record(full);
        }
    }
}
