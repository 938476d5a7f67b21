//! The law at this level: for random updates and any split into inserts and `advance_to`
//! calls, with one or two workers, the union of `closed` equals an oracle fold, each
//! `(window, key)` closes exactly once, `changed` reports exactly the open states that
//! changed, snapshots hold exactly the open states, and `frontier()` is the watermark.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use thund_dataflows::{AggState, Config, Error, EventTime, Key, Update, Window, WindowedAggregate};

use crate::common::{as_map, proptest_cases, row_states, Oracle, ALL_KINDS};

/// An update relative to the watermark at the time it is inserted.
#[derive(Clone, Debug)]
struct RawUpdate {
    /// Window start is `max(W, 0) + offset - 10`.
    offset: u8,
    len: u8,
    key: u8,
    x: Option<i8>,
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<RawUpdate>),
    /// Advance the watermark by this much (0: a step that does not move time).
    Advance(u8),
    Snapshot,
}

/// Updates with window offsets, lengths and keys drawn from these ranges.
fn raw_update_in(
    offsets: std::ops::Range<u8>,
    lens: std::ops::Range<u8>,
    keys: std::ops::Range<u8>,
) -> impl Strategy<Value = RawUpdate> {
    (
        offsets,
        lens,
        keys,
        prop_oneof![1 => Just(None), 4 => any::<i8>().prop_map(Some)],
    )
        .prop_map(|(offset, len, key, x)| RawUpdate {
            offset,
            len,
            key,
            x,
        })
}

/// Inserts of `raw` updates, steps and snapshots.
fn ops_of(raw: impl Strategy<Value = RawUpdate>) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop::collection::vec(raw, 0..8).prop_map(Op::Insert),
        4 => (0u8..12).prop_map(Op::Advance),
        1 => Just(Op::Snapshot),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    ops_of(raw_update_in(0..40, 1..25, 0..4))
}

/// Ops over few keys and short windows near the watermark: the same `(window, key)`
/// often comes several times between steps, and most windows close at the next step
/// (then folded on the host, none of their rows having reached a worker).
fn dense_op() -> impl Strategy<Value = Op> {
    ops_of(raw_update_in(8..14, 4..8, 0..2))
}

fn key_of(k: u8) -> Key {
    if k == 0 {
        0
    } else {
        u64::from(k) << 8 | u64::from(0xff - k)
    }
}

type Groups = BTreeMap<(Window, Key), Vec<AggState>>;

fn check_step(
    df: &mut WindowedAggregate,
    w: EventTime,
    prev_w: EventTime,
    oracle: &Oracle,
    closed_all: &mut Groups,
    reported: &mut HashMap<(Window, Key), Vec<AggState>>,
) -> Result<(), TestCaseError> {
    let step = df
        .advance_to(w)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(step.frontier, w);
    prop_assert_eq!(df.frontier(), w);
    for u in &step.closed {
        prop_assert!(
            u.window.end <= w,
            "closed too early: {:?} at {}",
            u.window,
            w
        );
        prop_assert!(
            prev_w == EventTime::MIN || u.window.end > prev_w,
            "closed late: {:?}",
            u.window
        );
        let k = (u.window, u.key);
        prop_assert!(!closed_all.contains_key(&k), "closed twice: {:?}", k);
        closed_all.insert(k, u.aggs.clone());
        reported.remove(&k);
    }
    // `changed`: exactly the open groups whose state differs from the last report.
    let open = oracle.select(true, w);
    let expected: Groups = open
        .iter()
        .filter(|(k, v)| reported.get(*k) != Some(*v))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let changed = as_map(step.changed);
    prop_assert_eq!(&changed, &expected, "changed at {}", w);
    reported.extend(changed);
    Ok(())
}

/// One case; with `trace` off the dataflow keeps no trace
/// ([`Config::without_trace`]): it must give the same steps, and refuse snapshots.
fn run_case(workers: usize, trace: bool, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let kinds = ALL_KINDS.to_vec();
    let mut config = Config::new(kinds.clone()).with_workers(workers);
    if !trace {
        config = config.without_trace();
    }
    let mut df =
        WindowedAggregate::spawn(config).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut oracle = Oracle::new(&kinds);
    let mut closed_all = Groups::new();
    let mut reported = HashMap::new();
    let mut w = EventTime::MIN;
    for op in ops {
        match op {
            Op::Insert(raw) => {
                let base = w.max(0);
                let updates: Vec<Update> = raw
                    .iter()
                    .map(|r| {
                        let start = base + i64::from(r.offset) - 10;
                        Update {
                            window: Window::new(start, start + i64::from(r.len)),
                            key: key_of(r.key),
                            aggs: row_states(&kinds, r.x.map(i64::from)),
                        }
                    })
                    .collect();
                let (on_time, late): (Vec<_>, Vec<_>) =
                    updates.into_iter().partition(|u| u.window.end > w);
                if let Some(l) = late.first() {
                    // A call with a late update is refused whole.
                    let mut all = on_time.clone();
                    all.push(l.clone());
                    let e = df.insert(all);
                    prop_assert!(matches!(e, Err(Error::Late { .. })), "{:?}", e);
                }
                for u in &on_time {
                    oracle.add(u);
                }
                df.insert(on_time)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            Op::Advance(d) => {
                let prev = w;
                w = if w == EventTime::MIN {
                    i64::from(d)
                } else {
                    w + i64::from(d)
                };
                check_step(&mut df, w, prev, &oracle, &mut closed_all, &mut reported)?;
            }
            Op::Snapshot if !trace => {
                let e = df.snapshot();
                prop_assert!(matches!(e, Err(Error::InvalidConfig { .. })), "{:?}", e);
            }
            Op::Snapshot => {
                let snap = df
                    .snapshot()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(snap.len(), workers);
                let held = as_map(snap.into_iter().flat_map(|(_, us)| us));
                prop_assert_eq!(held, oracle.select(true, w), "snapshot at {}", w);
            }
        }
    }
    let prev = w;
    check_step(
        &mut df,
        EventTime::MAX,
        prev,
        &oracle,
        &mut closed_all,
        &mut reported,
    )?;
    prop_assert_eq!(df.frontier(), EventTime::MAX);
    prop_assert_eq!(&closed_all, &oracle.select(false, EventTime::MAX));
    // After the end of stream: nothing is open, nothing is held, further ends are empty.
    let again = df
        .advance_to(EventTime::MAX)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(again.closed.is_empty() && again.changed.is_empty());
    prop_assert_eq!(df.state_size(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(12), ..ProptestConfig::default() })]

    #[test]
    fn closed_windows_equal_the_oracle(workers in 1usize..=2, trace: bool, ops in prop::collection::vec(op(), 0..40)) {
        run_case(workers, trace, ops)?;
    }

    #[test]
    fn repeated_groups_between_steps_equal_the_oracle(workers in 1usize..=2, trace: bool, ops in prop::collection::vec(dense_op(), 0..40)) {
        run_case(workers, trace, ops)?;
    }
}

#[test]
fn a_fixed_case_with_two_workers() {
    let ops = vec![
        Op::Insert(vec![
            RawUpdate {
                offset: 10,
                len: 5,
                key: 1,
                x: Some(3),
            },
            RawUpdate {
                offset: 10,
                len: 5,
                key: 1,
                x: None,
            },
            RawUpdate {
                offset: 12,
                len: 20,
                key: 0,
                x: Some(-7),
            },
        ]),
        Op::Advance(0),
        Op::Snapshot,
        Op::Insert(vec![RawUpdate {
            offset: 10,
            len: 5,
            key: 1,
            x: Some(-3),
        }]),
        Op::Advance(5),
        Op::Advance(0),
        Op::Insert(vec![RawUpdate {
            offset: 0,
            len: 1,
            key: 2,
            x: Some(1),
        }]),
        Op::Snapshot,
        Op::Advance(11),
    ];
    for trace in [true, false] {
        run_case(2, trace, ops.clone()).expect("law");
    }
}
