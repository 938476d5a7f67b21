//! Errors: overflow is an error (not a wrap or a panic), late and malformed input is refused
//! whole, the watermark does not regress, and the handle shuts down cleanly in every state.

use thund_dataflows::{
    AggKind, AggState, Config, Error, EventTime, PreAggregator, Update, Value, Window,
    WindowedAggregate,
};

fn sum_update(window: Window, x: i128) -> Update {
    Update {
        window,
        key: 7,
        aggs: vec![AggState::from_value(AggKind::SumInt, Value::Int(x))],
    }
}

/// A window whose rows all come before the step that closes it is folded on the host:
/// an overflow there is the same error, and poisons the dataflow the same way.
#[test]
fn i128_sum_overflow_in_a_window_closed_by_its_first_step_is_an_error() {
    let w = Window::new(0, 10);
    for (workers, batches) in [
        (1, vec![vec![i128::MAX], vec![1]]),
        (2, vec![vec![i128::MIN, -1]]),
        (2, vec![vec![i128::MAX - 5], vec![3], vec![3]]),
    ] {
        let mut df =
            WindowedAggregate::spawn(Config::new(vec![AggKind::SumInt]).with_workers(workers))
                .expect("spawn");
        for xs in &batches {
            df.insert(xs.iter().map(|&x| sum_update(w, x)).collect())
                .expect("insert");
        }
        match df.advance_to(10) {
            Err(Error::Overflow { kind, window, .. }) => {
                assert_eq!(kind, AggKind::SumInt);
                assert_eq!(window, Some(w));
            }
            other => panic!("expected overflow, got {other:?}"),
        }
        assert!(matches!(df.advance_to(20), Err(Error::Poisoned { .. })));
    }
}

#[test]
fn i128_sum_overflow_is_an_error() {
    let w = Window::new(0, 10);
    // Across steps, across inserts in one step, and within one insert call.
    for (workers, batches) in [
        (1, vec![vec![i128::MAX], vec![1]]),
        (2, vec![vec![i128::MIN, -1]]),
        (1, vec![vec![i128::MAX - 5], vec![3], vec![3]]),
        (2, vec![vec![i128::MAX], vec![0, 0], vec![1]]),
    ] {
        let mut df =
            WindowedAggregate::spawn(Config::new(vec![AggKind::SumInt]).with_workers(workers))
                .expect("spawn");
        // Found by the host's fold of one step's inserts, or by the dataflow across steps.
        let mut result = Ok(Default::default());
        for xs in &batches {
            result = df
                .insert(xs.iter().map(|&x| sum_update(w, x)).collect())
                .and_then(|()| df.advance_to(EventTime::from(0)));
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = df.advance_to(10);
        }
        match result {
            Err(Error::Overflow { kind, window, .. }) => {
                assert_eq!(kind, AggKind::SumInt);
                assert_eq!(window, Some(w));
            }
            other => panic!("expected overflow, got {other:?}"),
        }
        // The dataflow is poisoned from then on, and drops cleanly.
        assert!(matches!(df.advance_to(20), Err(Error::Poisoned { .. })));
        assert!(matches!(df.insert(vec![]), Err(Error::Poisoned { .. })));
    }
    // Overflow in pre-aggregation.
    let mut pre = PreAggregator::new(vec![AggKind::SumInt]);
    pre.add(
        w,
        0,
        vec![AggState::from_value(AggKind::SumInt, Value::Int(i128::MAX))],
    )
    .expect("add");
    let e = pre.add(
        w,
        0,
        vec![AggState::from_value(AggKind::SumInt, Value::Int(1))],
    );
    assert!(
        matches!(
            e,
            Err(Error::Overflow {
                window: Some(_),
                ..
            })
        ),
        "{e:?}"
    );
}

#[test]
fn large_sums_near_the_limit_are_exact() {
    let w = Window::new(0, 10);
    let mut df = WindowedAggregate::spawn(Config::new(vec![AggKind::SumInt])).expect("spawn");
    df.insert(vec![
        sum_update(w, i128::MAX - 1),
        sum_update(w, 1),
        sum_update(w, i128::MIN),
    ])
    .expect("insert");
    let step = df.advance_to(10).expect("advance");
    assert_eq!(step.closed[0].aggs[0].value, Value::Int(-1));
}

#[test]
fn bad_input_is_refused_whole() {
    let kinds = vec![AggKind::Count, AggKind::MinInt];
    let mut df = WindowedAggregate::spawn(Config::new(kinds.clone())).expect("spawn");
    df.advance_to(100).expect("advance");
    let ok = Update {
        window: Window::new(90, 110),
        key: 1,
        aggs: vec![AggState::from_value(AggKind::Count, Value::Int(1)); 1]
            .into_iter()
            .chain([AggState::from_value(AggKind::MinInt, Value::Int(5))])
            .collect(),
    };
    let late = Update {
        window: Window::new(90, 100),
        ..ok.clone()
    };
    let short = Update {
        aggs: vec![AggState::EMPTY],
        ..ok.clone()
    };
    let empty_window = Update {
        window: Window::new(120, 120),
        ..ok.clone()
    };
    let wrong_type = Update {
        aggs: vec![
            AggState::EMPTY,
            AggState::from_value(AggKind::MinInt, Value::Float(1.0)),
        ],
        ..ok.clone()
    };
    let bad_state = Update {
        aggs: vec![
            AggState {
                count: 2,
                value: Value::Int(5),
            },
            AggState::EMPTY,
        ],
        ..ok.clone()
    };
    assert!(matches!(
        df.insert(vec![ok.clone(), late.clone()]),
        Err(Error::Late { frontier: 100, .. })
    ));
    assert!(matches!(
        df.insert(vec![ok.clone(), short.clone()]),
        Err(Error::Arity {
            expected: 2,
            found: 1,
            ..
        })
    ));
    assert!(matches!(
        df.insert(vec![ok.clone(), empty_window.clone()]),
        Err(Error::InvalidWindow { .. })
    ));
    assert!(matches!(
        df.insert(vec![ok.clone(), wrong_type.clone()]),
        Err(Error::InvalidState { .. })
    ));
    assert!(matches!(
        df.insert(vec![ok.clone(), bad_state.clone()]),
        Err(Error::InvalidState { .. })
    ));
    // The flat form refuses the same calls whole.
    let flat = |us: &[Update]| {
        let groups: Vec<(Window, u64)> = us.iter().map(|u| (u.window, u.key)).collect();
        let states: Vec<AggState> = us.iter().flat_map(|u| u.aggs.clone()).collect();
        (groups, states)
    };
    for (bad, is_expected) in [
        (
            late,
            (|e| matches!(e, Error::Late { frontier: 100, .. })) as fn(&Error) -> bool,
        ),
        (short, |e| {
            matches!(
                e,
                Error::Arity {
                    expected: 4,
                    found: 3,
                    ..
                }
            )
        }),
        (empty_window, |e| matches!(e, Error::InvalidWindow { .. })),
        (wrong_type, |e| matches!(e, Error::InvalidState { .. })),
        (bad_state, |e| matches!(e, Error::InvalidState { .. })),
    ] {
        let (groups, states) = flat(&[ok.clone(), bad.clone()]);
        let got = df.insert_states(&groups, &states);
        assert!(got.as_ref().is_err_and(is_expected), "{bad:?}: {got:?}");
    }
    // None of the refused calls was applied: only this one counts (flat).
    let (groups, states) = flat(std::slice::from_ref(&ok));
    df.insert_states(&groups, &states).expect("insert");
    assert!(matches!(
        df.advance_to(99),
        Err(Error::WatermarkRegressed {
            requested: 99,
            frontier: 100
        })
    ));
    let step = df.advance_to(110).expect("advance");
    assert_eq!(step.closed.len(), 1);
    assert_eq!(step.closed[0].aggs[0].count, 1);
    assert_eq!(step.closed[0].aggs[1].value, Value::Int(5));
    // After the end of stream, everything is late and ends are empty.
    assert!(df
        .advance_to(EventTime::MAX)
        .expect("finish")
        .closed
        .is_empty());
    assert!(matches!(df.insert(vec![ok]), Err(Error::Late { .. })));
    let end = df.advance_to(EventTime::MAX).expect("finish");
    assert_eq!(
        (end.frontier, end.closed.len(), end.changed.len()),
        (EventTime::MAX, 0, 0)
    );
    assert!(matches!(
        WindowedAggregate::spawn(Config::new(kinds).with_workers(0)),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn drops_cleanly_in_every_state() {
    let config = Config::new(vec![AggKind::Count]).with_workers(2);
    // Never stepped.
    drop(WindowedAggregate::spawn(config.clone()).expect("spawn"));
    // With inserts pending and open windows.
    let mut df = WindowedAggregate::spawn(config.clone()).expect("spawn");
    let u = Update {
        window: Window::new(0, 1000),
        key: 0,
        aggs: vec![AggState::from_value(AggKind::Count, Value::Int(1))],
    };
    df.insert(vec![u.clone()]).expect("insert");
    df.advance_to(5).expect("advance");
    df.insert(vec![u]).expect("insert");
    drop(df);
    // After the end of stream.
    let mut df = WindowedAggregate::spawn(config).expect("spawn");
    df.advance_to(EventTime::MAX).expect("finish");
    drop(df);
}

/// A cluster of no workers, or of more than `MAX_WORKERS` (timely links every pair of
/// them), is refused with an error that names the bounds, without starting a thread.
#[test]
fn a_worker_count_outside_its_bounds_is_refused() {
    for n in [0, thund_dataflows::MAX_WORKERS + 1, usize::MAX] {
        let e = match thund_dataflows::Cluster::start(n) {
            Ok(_) => panic!("{n} workers were started"),
            Err(e) => e,
        };
        assert!(
            matches!(e, Error::InvalidConfig { .. })
                && e.to_string()
                    .contains(&format!("between 1 and {}", thund_dataflows::MAX_WORKERS)),
            "{n}: {e}"
        );
    }
}
