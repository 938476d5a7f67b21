//! The late rule and idle sources, on hand-built streams whose expected
//! results follow from the contract (design §1), not from the engine.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, Int64Array, StringArray};
use common::{batch, canon, schema, ts, Ev};
use thund::{Engine, ManualClock, OutputMode, ViewSpec, WindowSpec};

fn ev(t: i64, k: i64) -> Ev {
    Ev {
        t,
        k,
        g: "a".into(),
        v: Some(1),
        f: 1.0,
    }
}

fn engine_with(spec: ViewSpec) -> Engine {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec).expect("view");
    e
}

#[test]
fn rows_behind_w_are_late_only_when_all_their_windows_closed() {
    let spec = ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM t")
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .build()
        .expect("spec");
    for spec in common::spellings(spec) {
        late_only_when_all_windows_closed(spec);
    }
}

fn late_only_when_all_windows_closed(spec: ViewSpec) {
    let mut e = engine_with(spec);
    e.push("t", batch(&[ev(1_000, 1), ev(12_000, 1)]))
        .expect("push");
    let r1 = e.trigger().expect("trigger");
    assert_eq!(r1.views[0].watermark, Some(12_000));
    assert_eq!(
        canon(&r1.views[0].output),
        vec![format!("{}|{}|1", ts(0), ts(10_000))]
    );

    // 5s: its only window [0s,10s) closed at W_prev = 12s -> late.
    // 11s: behind W_prev, but [10s,20s) is open -> kept.
    e.push("t", batch(&[ev(5_000, 1), ev(11_000, 1), ev(25_000, 1)]))
        .expect("push");
    let r2 = e.trigger().expect("trigger");
    assert_eq!(r2.views[0].late_rows_dropped, 1);
    assert_eq!(r2.views[0].windows_closed, 1);
    assert_eq!(
        canon(&r2.views[0].output),
        vec![format!("{}|{}|2", ts(10_000), ts(20_000))]
    );

    let late = e.late_rows("v").expect("late rows");
    assert_eq!(late.num_rows(), 1);
    let col = |n: &str| late.column_by_name(n).expect(n).clone();
    assert_eq!(
        col("event_time")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("i64")
            .value(0),
        5_000
    );
    assert_eq!(
        col("window_end")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("i64")
            .value(0),
        10_000
    );
    assert_eq!(
        col("watermark")
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("i64")
            .value(0),
        12_000
    );
    assert_eq!(
        col("reason")
            .as_any()
            .downcast_ref::<StringArray>()
            .expect("str")
            .value(0),
        "late"
    );

    let fin = e.finish().expect("finish");
    assert_eq!(
        canon(&fin.views[0].output),
        vec![format!("{}|{}|1", ts(20_000), ts(30_000))]
    );
    assert_eq!(e.counters("v").expect("counters").late_rows_dropped, 1);
}

#[test]
fn a_hopping_row_counts_only_in_its_open_windows() {
    let spec = ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM t")
        .source("t", "ts", schema())
        .window(WindowSpec::hopping(
            Duration::from_secs(10),
            Duration::from_secs(5),
        ))
        .build()
        .expect("spec");
    for spec in common::spellings(spec) {
        hopping_row_in_open_windows(spec);
    }
}

fn hopping_row_in_open_windows(spec: ViewSpec) {
    let mut e = engine_with(spec);
    e.push("t", batch(&[ev(6_000, 1), ev(10_000, 1)]))
        .expect("push");
    let r1 = e.trigger().expect("trigger"); // W = 10s: [0,10) closes with the 6s row
    assert_eq!(
        canon(&r1.views[0].output),
        vec![format!("{}|{}|1", ts(0), ts(10_000))]
    );
    // 7s is behind W = 10s: [0,10) closed, [5,15) open -> not late, counted in [5,15) only
    e.push("t", batch(&[ev(7_000, 1)])).expect("push");
    let r2 = e.trigger().expect("trigger");
    assert_eq!(r2.views[0].late_rows_dropped, 0);
    assert!(r2.views[0].output.iter().all(|b| b.num_rows() == 0));
    let fin = e.finish().expect("finish");
    assert_eq!(
        canon(&fin.views[0].output),
        vec![
            format!("{}|{}|3", ts(5_000), ts(15_000)),
            format!("{}|{}|1", ts(10_000), ts(20_000))
        ]
    );
}

/// Append-mode hopping views assemble each window from its panes when it
/// closes; Update-mode ones close the windows they folded pane by pane:
/// near both ends of `i64`, with disorder, the two paths close the same
/// windows with the same counts at every trigger.
#[test]
fn hopping_windows_near_the_ends_of_time_agree_on_both_paths() {
    for output in [OutputMode::Append, OutputMode::Update] {
        hopping_near_the_ends_of_time(output);
    }
}

fn hopping_near_the_ends_of_time(output: OutputMode) {
    let run = |mode: thund::ExecMode, in_sql: bool| {
        let spec = ViewSpec::builder(
            "v",
            "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
        )
        .source("t", "ts", schema())
        .window(WindowSpec::hopping(
            Duration::from_secs(10),
            Duration::from_secs(4),
        ))
        .output(output)
        .mode(mode)
        .build()
        .expect("spec");
        let spec = match in_sql {
            true => common::in_sql(&spec).expect("a SQL spelling"),
            false => spec,
        };
        let mut e = engine_with(spec);
        let mut out = Vec::new();
        for base in [i64::MIN, -30_000, i64::MAX - 60_000] {
            for step in 0..6i64 {
                // rows a little out of order, some within the last pane of time
                let rows: Vec<Ev> = (0..5i64)
                    .map(|j| {
                        ev(
                            base.saturating_add(step * 9_000 + (j * 3_700) % 11_000),
                            j % 2,
                        )
                    })
                    .collect();
                e.push("t", batch(&rows)).expect("push");
                let r = e.trigger().expect("trigger");
                out.push((canon(&r.views[0].output), r.views[0].late_rows_dropped));
            }
        }
        let fin = e.finish().expect("finish");
        out.push((canon(&fin.views[0].output), fin.views[0].late_rows_dropped));
        out
    };
    let incremental = run(thund::ExecMode::Auto, false);
    assert_eq!(incremental, run(thund::ExecMode::Recompute, false));
    assert_eq!(incremental, run(thund::ExecMode::Auto, true), "in SQL");
    assert_eq!(incremental, run(thund::ExecMode::Recompute, true), "in SQL");
    // some windows closed before the end of the stream, and at the end
    assert!(incremental[..incremental.len() - 1]
        .iter()
        .any(|(rows, _)| !rows.is_empty()));
    assert!(!incremental[incremental.len() - 1].0.is_empty());
}

#[test]
fn without_a_window_rows_behind_w_are_late() {
    let spec = ViewSpec::builder("v", "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
        .source("t", "ts", schema())
        .output(OutputMode::Complete)
        .build()
        .expect("spec");
    let mut e = engine_with(spec);
    e.push("t", batch(&[ev(10_000, 1)])).expect("push");
    e.trigger().expect("trigger");
    e.push("t", batch(&[ev(9_999, 1), ev(10_000, 1)]))
        .expect("push");
    let r = e.trigger().expect("trigger");
    assert_eq!(r.views[0].late_rows_dropped, 1);
    assert_eq!(canon(&r.views[0].output), vec!["1|2".to_string()]);
}

/// A view over `a` that `b` holds W back for, with the window in the spec or
/// (`in_sql`) in the SQL.
fn two_sources(idle: Duration, clock: &ManualClock, in_sql: bool) -> Engine {
    let spec = ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM a")
        .source("a", "ts", schema())
        .source("b", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .idle_timeout(idle)
        .build()
        .expect("spec");
    let spec = match in_sql {
        true => common::in_sql(&spec).expect("a SQL spelling"),
        false => spec,
    };
    let mut e = Engine::builder()
        .with_clock(Arc::new(clock.clone()))
        .build()
        .expect("engine");
    e.create_view(spec).expect("view");
    e
}

#[test]
fn a_quiet_source_stops_holding_w_after_idle_timeout() {
    for in_sql in [false, true] {
        quiet_source_stops_holding_w(in_sql);
    }
}

fn quiet_source_stops_holding_w(in_sql: bool) {
    let clock = ManualClock::new(0);
    let mut e = two_sources(Duration::from_secs(5), &clock, in_sql);
    e.push("a", batch(&[ev(1_000, 1)])).expect("push");
    e.push("b", batch(&[ev(1_000, 1)])).expect("push");
    assert_eq!(e.trigger().expect("t").views[0].watermark, Some(1_000));

    clock.advance(Duration::from_secs(3));
    e.push("a", batch(&[ev(30_000, 1)])).expect("push");
    let r = e.trigger().expect("t");
    assert_eq!(
        r.views[0].watermark,
        Some(1_000),
        "b silent for 3s < 5s: still holds W"
    );
    assert_eq!(r.views[0].windows_closed, 0);

    clock.advance(Duration::from_secs(3));
    e.push("a", batch(&[ev(31_000, 1)])).expect("push");
    let r = e.trigger().expect("t");
    assert_eq!(
        r.views[0].watermark,
        Some(31_000),
        "b silent for 6s >= 5s: idle"
    );
    // a's rows sit in [0s,10s) and [30s,40s): only the first ends at or before W
    assert_eq!(r.views[0].windows_closed, 1);
    assert_eq!(
        canon(&r.views[0].output),
        vec![format!("{}|{}|1", ts(0), ts(10_000))]
    );

    // b comes back with an old row: W does not go back, and the row is late
    e.push("b", batch(&[ev(2_000, 1)])).expect("push");
    let r = e.trigger().expect("t");
    assert_eq!(r.views[0].watermark, Some(31_000));
    assert_eq!(r.views[0].late_rows_dropped, 1);
}

#[test]
fn idle_timeout_zero_holds_w_forever() {
    for in_sql in [false, true] {
        idle_zero_holds_w(in_sql);
    }
}

fn idle_zero_holds_w(in_sql: bool) {
    let clock = ManualClock::new(0);
    let mut e = two_sources(Duration::ZERO, &clock, in_sql);
    e.push("a", batch(&[ev(1_000, 1)])).expect("push");
    e.push("b", batch(&[ev(1_000, 1)])).expect("push");
    e.trigger().expect("t");
    for _ in 0..3 {
        clock.advance(Duration::from_secs(3600));
        e.push("a", batch(&[ev(100_000, 1)])).expect("push");
        let r = e.trigger().expect("t");
        assert_eq!(r.views[0].watermark, Some(1_000));
        assert_eq!(r.views[0].windows_closed, 0);
    }
}
