//! The incremental path's state stays bounded by open windows × keys, an
//! integer sum that overflows its type is an error (never a wrap), and the
//! frontier follows W when a source goes idle.

use std::sync::Arc;
use std::time::Duration;

use crate::common::rng;
use arrow::array::{Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use rng::SplitMix;
use thund::{Engine, ManualClock, OutputMode, PathKind, ViewSpec, WindowSpec};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

fn batch(k: Vec<i64>, v: Vec<i64>, ts: Vec<i64>) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Int64Array::from(v)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .expect("batch")
}

fn view(sql: &str, window: WindowSpec, lateness_ms: u64) -> ViewSpec {
    ViewSpec::builder("v", sql)
        .source("t", "ts", schema())
        .window(window)
        .allowed_lateness(Duration::from_millis(lateness_ms))
        .build()
        .expect("spec")
}

/// With checkpoints the workers keep the arrangement's trace (what a
/// checkpoint reads), and closed windows are retracted from it.
#[test]
fn arrangement_size_is_bounded_by_open_windows_times_keys() {
    let e = Engine::builder()
        .with_state_root("memory://bounded-state")
        .build()
        .expect("engine");
    state_is_bounded_by_open_windows_times_keys(e, false);
}

/// Without checkpoints nothing reads a trace, so the workers keep none: the
/// state is their table of open windows, which closes windows as W passes.
/// (The window is written in the SQL here, in the spec above.)
#[test]
fn open_windows_without_checkpoints_are_bounded_by_open_windows_times_keys() {
    let e = Engine::builder().build().expect("engine");
    state_is_bounded_by_open_windows_times_keys(e, true);
}

/// `COUNT(DISTINCT …)` keeps one entry per group and value, in the dataflow
/// and (Update mode) in the host's table of open groups; `SELECT DISTINCT`
/// one per row value; a top-rows query its candidates: all are evicted
/// when their window closes. Update mode runs with the window written in
/// the SQL, Append with it in the spec.
#[test]
fn distinct_state_is_bounded_by_open_windows_times_keys_times_values() {
    for (sql, per_key) in [
        (
            "SELECT k, COUNT(DISTINCT v % 4) AS dv, COUNT(*) FILTER (WHERE v < 100) AS low FROM t GROUP BY k",
            4,
        ),
        // two arguments: one entry per group, argument and value
        (
            "SELECT k, COUNT(DISTINCT v % 4) AS dv, COUNT(DISTINCT v % 3) AS dv3 FROM t GROUP BY k",
            7,
        ),
        ("SELECT DISTINCT k, v % 4 AS r FROM t", 4),
        // over one aggregate: the rest runs over the groups, the state is the aggregate's
        (
            "SELECT k, c FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS x \
             WHERE c = (SELECT MAX(c) FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS y)",
            1,
        ),
        // each window's top rows: the candidates (the rows that led when they
        // came, and ties) and the pruning rule's keys, both evicted at close
        ("SELECT k, v FROM t WHERE v = (SELECT MAX(v) FROM t)", 1),
        (
            "SELECT k, v, rn FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn \
             FROM t) AS x WHERE rn <= 2",
            4,
        ),
    ] {
        for mode in [OutputMode::Update, OutputMode::Append] {
            let mut e = Engine::builder().build().expect("engine");
            bounded(&mut e, sql, mode, per_key, mode == OutputMode::Update);
        }
    }
}

fn state_is_bounded_by_open_windows_times_keys(mut e: Engine, in_sql: bool) {
    bounded(
        &mut e,
        "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(v) AS m FROM t GROUP BY k",
        OutputMode::Append,
        1,
        in_sql,
    );
}

/// `spec`, or (`in_sql`) the same view with its window written in the SQL.
fn spelled(spec: ViewSpec, in_sql: bool) -> ViewSpec {
    match in_sql {
        true => crate::common::in_sql(&spec).expect("a SQL spelling"),
        false => spec,
    }
}

/// Runs 2 M rows through 1 s windows; the state must stay within the open
/// windows × keys × `per_key` entries per group.
fn bounded(e: &mut Engine, sql: &str, mode: OutputMode, per_key: usize, in_sql: bool) {
    const KEYS: u64 = 100;
    const BATCHES: usize = 200; // x 10 000 rows = 2 M rows
    let mut spec = view(sql, WindowSpec::tumbling(Duration::from_secs(1)), 500);
    spec.output = mode;
    e.create_view(spelled(spec, in_sql)).expect("view");
    assert_eq!(e.plan("v").expect("plan").path(), PathKind::Incremental);
    // 0.1 ms of event time per row (a batch spans 1 s) and up to 500 ms of
    // disorder; W trails the maximum by 500 ms. Open windows (end > W) then
    // hold rows from at most [W − 500 ms, W + 1.5 s): at most 4 windows of 1 s.
    let bound = 4 * 4 * KEYS as usize * per_key; // 4 windows × keys × entries, × 4 for records per group
    let mut r = SplitMix::new(1);
    let (mut peak, mut closed) = (0, 0u64);
    for b in 0..BATCHES {
        let n = 10_000;
        let k = (0..n).map(|_| r.below(KEYS) as i64).collect();
        let v = (0..n).map(|_| r.below(1000) as i64).collect();
        let ts = (0..n)
            .map(|j| b as i64 * 1000 + j as i64 / 10 - r.below(500) as i64)
            .collect();
        e.push("t", batch(k, v, ts)).expect("push");
        closed += e.trigger().expect("trigger").views[0].windows_closed;
        let size = e.state_size("v").expect("size").expect("incremental");
        peak = peak.max(size);
        assert!(
            size <= bound,
            "after batch {b}: {size} records > bound {bound}"
        );
    }
    assert!(
        closed >= (BATCHES - 3) as u64,
        "windows closed as W advanced: {closed}"
    );
    assert!(peak > 0);
    // without eviction the arrangement would hold every (window, key) seen: ~200 × 100
    assert!(
        peak * 10 < BATCHES * KEYS as usize * per_key,
        "peak {peak} is not far below rows' groups"
    );
}

#[test]
fn integer_sum_overflow_is_an_error_not_a_wrap() {
    let spec = view(
        "SELECT k, SUM(v) AS s FROM t GROUP BY k",
        WindowSpec::tumbling(Duration::from_secs(1)),
        0,
    );
    for spec in crate::common::spellings(spec) {
        sum_overflow_is_an_error(spec);
    }
}

fn sum_overflow_is_an_error(spec: ViewSpec) {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec).expect("view");
    let big = i64::MAX / 2 + 1;
    e.push("t", batch(vec![1, 1], vec![big, big], vec![10, 20]))
        .expect("push");
    let err = e.finish().expect_err("overflow must be refused");
    assert!(
        matches!(&err, thund::Error::Overflow { view, data_type, window_start: 0, window_end: 1000, .. }
            if view == "v" && data_type == "Int64"),
        "names the view, the type and the window: {err}"
    );
}

#[test]
fn frontier_follows_w_when_the_source_goes_idle() {
    let spec = ViewSpec::builder("v", "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(1)))
        .idle_timeout(Duration::from_secs(5))
        .build()
        .expect("spec");
    for spec in crate::common::spellings(spec) {
        frontier_follows_w(spec);
    }
}

fn frontier_follows_w(spec: ViewSpec) {
    let clock = ManualClock::new(0);
    let mut e = Engine::builder()
        .with_clock(Arc::new(clock.clone()))
        .build()
        .expect("engine");
    e.create_view(spec).expect("view");
    e.push("t", batch(vec![1], vec![1], vec![2_500]))
        .expect("push");
    let r = e.trigger().expect("trigger");
    assert_eq!(
        (r.views[0].watermark, r.views[0].frontier),
        (Some(2_500), Some(2_500))
    );
    for _ in 0..3 {
        clock.advance(Duration::from_secs(10)); // idle: the only source, so W holds
        let r = e.trigger().expect("trigger");
        assert_eq!(
            (r.views[0].watermark, r.views[0].frontier),
            (Some(2_500), Some(2_500))
        );
    }
    e.push("t", batch(vec![1], vec![1], vec![7_000]))
        .expect("push");
    let r = e.trigger().expect("trigger");
    assert_eq!(
        (r.views[0].watermark, r.views[0].frontier),
        (Some(7_000), Some(7_000))
    );
    assert_eq!(r.views[0].windows_closed, 1);
    let r = e.finish().expect("finish");
    assert_eq!(
        (r.views[0].watermark, r.views[0].frontier),
        (Some(i64::MAX), Some(i64::MAX))
    );
}

#[test]
fn avg_of_an_all_null_group_is_null_and_count_is_zero() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let spec = ViewSpec::builder(
        "v",
        "SELECT k, AVG(v) AS a, COUNT(v) AS c, SUM(v) AS s FROM t GROUP BY k",
    )
    .source("t", "ts", schema.clone())
    .window(WindowSpec::tumbling(Duration::from_secs(1)))
    .build()
    .expect("spec");
    for spec in crate::common::spellings(spec) {
        all_null_group(spec, schema.clone());
    }
}

fn all_null_group(spec: ViewSpec, schema: SchemaRef) {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec).expect("view");
    assert_eq!(e.plan("v").expect("plan").path(), PathKind::Incremental);
    let b = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 1, 2])),
            Arc::new(Int64Array::from(vec![None, None, Some(4)])),
            Arc::new(TimestampMillisecondArray::from(vec![10, 20, 30])),
        ],
    )
    .expect("batch");
    e.push("t", b).expect("push");
    let out = e.finish().expect("finish").views[0].output.clone();
    let b = arrow::compute::concat_batches(&out[0].schema(), &out).expect("concat");
    let k = b
        .column(2)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("k");
    let a = b
        .column(3)
        .as_any()
        .downcast_ref::<arrow::array::Float64Array>()
        .expect("avg");
    let c = b
        .column(4)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("count");
    let s = b
        .column(5)
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("sum");
    for i in 0..b.num_rows() {
        if k.value(i) == 1 {
            assert!(
                a.is_null(i) && s.is_null(i),
                "AVG and SUM of all-NULL are NULL"
            );
            assert_eq!(c.value(i), 0);
        } else {
            assert_eq!((a.value(i), c.value(i), s.value(i)), (4.0, 1, 4));
        }
    }
    assert_eq!(b.num_rows(), 2);
}

/// Session windows over 2 M rows: each key pauses for a second every four,
/// so its sessions (300 ms gap) close, and between pauses runs on for many
/// gaps, its early units carried into later ones. The held units (in the
/// dataflow and on the host) stay within the few panes a key's open rows
/// span, far below every pane the stream touched.
#[test]
fn session_state_is_bounded_by_open_panes_times_keys() {
    const KEYS: u64 = 100;
    const BATCHES: usize = 200; // x 10 000 rows = 2 M rows
    for mode in [OutputMode::Append, OutputMode::Update] {
        let mut e = Engine::builder()
            .with_state_root("memory://bounded-sessions")
            .build()
            .expect("engine");
        let mut spec = view(
            "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(v) AS m FROM t WHERE v > 10 GROUP BY k",
            WindowSpec::session(Duration::from_millis(300), &["k"]),
            500,
        );
        spec.output = mode;
        // Update mode with the window written in the SQL
        e.create_view(spelled(spec, mode == OutputMode::Update))
            .expect("view");
        assert_eq!(e.plan("v").expect("plan").path(), PathKind::Incremental);
        // open rows span at most [W − 500 ms, W + 1 s + 500 ms): 2 s, about 7
        // panes of 300 ms, each kept 3 gaps (+3), one carried: 11 units per key,
        // each held on the host and (with a retraction pending, up to 2
        // records) in the dataflow (measured peak: 1 875)
        let bound = 11 * 3 * KEYS as usize;
        let mut r = SplitMix::new(2);
        let (mut peak, mut closed) = (0, 0u64);
        for b in 0..BATCHES {
            let (mut k, mut v, mut ts) = (Vec::new(), Vec::new(), Vec::new());
            for j in 0..10_000i64 {
                let key = r.below(KEYS) as i64;
                let (x, back) = (r.below(1000) as i64, r.below(500) as i64);
                if (b as i64 + key) % 4 == 0 {
                    continue; // this key's pause
                }
                k.push(key);
                v.push(x);
                ts.push(b as i64 * 1000 + j / 10 - back);
            }
            e.push("t", batch(k, v, ts)).expect("push");
            closed += e.trigger().expect("trigger").views[0].windows_closed;
            let size = e.state_size("v").expect("size").expect("incremental");
            peak = peak.max(size);
            assert!(
                size <= bound,
                "{mode:?}, after batch {b}: {size} records > bound {bound}"
            );
        }
        // about one session per key and pause
        assert!(
            closed >= (BATCHES as u64 / 4 - 2) * KEYS,
            "{mode:?}: sessions closed as W advanced: {closed}"
        );
        // without eviction every pane the stream touched stays: ~660 per key
        assert!(
            peak * 10 < BATCHES * 1000 / 300 * KEYS as usize,
            "{mode:?}: peak {peak} is not far below the panes touched"
        );
    }
}

/// A windowed join keeps each side's rows of the open windows (and the
/// pairs they made): 2 M rows through 1 s windows, two sources, state bounded
/// by the open windows' rows; without eviction it would hold every row.
/// Update mode runs with the window written in the SQL, and with an
/// aggregate over the join (which folds its new pairs: it holds the open
/// windows' groups).
#[test]
fn join_state_is_bounded_by_the_open_windows_rows() {
    const BATCHES: usize = 100; // x 2 sources x 10 000 rows = 2 M rows
    const ROWS: usize = 10_000;
    let runs = [
        (OutputMode::Append, false, false),
        (OutputMode::Update, true, false),
        (OutputMode::Update, false, true),
    ];
    for (mode, in_sql, aggregate) in runs {
        let mut e = Engine::builder().build().expect("engine");
        let sql = match in_sql {
            false if aggregate => {
                "SELECT a.k, COUNT(*) AS n, MAX(b.v) AS top FROM a JOIN b ON a.k = b.k \
                 WHERE a.v < b.v GROUP BY a.k"
            }
            false => "SELECT a.k, a.v, b.v AS bv FROM a JOIN b ON a.k = b.k WHERE a.v < b.v",
            true => {
                "SELECT a.window_start, a.window_end, a.k, a.v, b.v AS bv \
                 FROM TUMBLE(a, ts, INTERVAL '1' SECOND) AS a \
                 JOIN TUMBLE(b, ts, INTERVAL '1' SECOND) AS b \
                 ON a.k = b.k AND a.window_start = b.window_start AND a.window_end = b.window_end \
                 WHERE a.v < b.v"
            }
        };
        let mut spec = ViewSpec::builder("v", sql)
            .source("a", "ts", schema())
            .source("b", "ts", schema())
            .allowed_lateness(Duration::from_millis(500))
            .output(mode);
        if !in_sql {
            spec = spec.window(WindowSpec::tumbling(Duration::from_secs(1)));
        }
        let spec = spec.build().expect("spec");
        e.create_view(spec).expect("view");
        assert_eq!(e.plan("v").expect("plan").path(), PathKind::Incremental);
        // open windows hold at most 2 s of rows (as above): 2 x 10 000 per
        // source, plus their pairs (about one per two rows) and retractions
        // not yet merged away
        let bound = 4 * 2 * 2 * ROWS;
        let mut r = SplitMix::new(2);
        let (mut peak, mut closed, mut out) = (0, 0u64, 0usize);
        for b in 0..BATCHES {
            for source in ["a", "b"] {
                let k = (0..ROWS).map(|_| r.below(20_000) as i64).collect();
                let v = (0..ROWS).map(|_| r.below(1000) as i64).collect();
                let ts = (0..ROWS)
                    .map(|j| b as i64 * 1000 + j as i64 / 10 - r.below(500) as i64)
                    .collect();
                e.push(source, batch(k, v, ts)).expect("push");
            }
            let report = e.trigger().expect("trigger");
            closed += report.views[0].windows_closed;
            out += report.views[0].output_rows();
            let size = e.state_size("v").expect("size").expect("incremental");
            peak = peak.max(size);
            assert!(
                size <= bound,
                "{mode:?}, after batch {b}: {size} records > bound {bound}"
            );
        }
        assert!(closed >= (BATCHES - 3) as u64, "windows closed: {closed}");
        assert!(out > 0, "the join made pairs");
        assert!(
            peak * 10 < BATCHES * 2 * ROWS,
            "{mode:?}: peak {peak} is not far below the rows seen"
        );
    }
}
