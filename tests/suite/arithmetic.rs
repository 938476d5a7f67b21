//! One arithmetic on both paths (README, "Arithmetic"): integer sums are
//! exact and an overflow is the same typed error on both paths; floats
//! follow PostgreSQL's rule (`-0.0 = 0.0`, NaN above every number) whatever
//! the row order; event times whose windows do not fit in `i64` are invalid
//! rows on both paths. The expected values here come from rules written in
//! the test, not from either path.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{
    Array, Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::cases;
use proptest::prelude::*;
use thund::{Engine, Error, ExecMode, OutputMode, ViewSpec, WindowSpec};

fn schema(value: DataType) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("x", value, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

/// Both paths over the same batches, all pushed before one trigger (so no
/// row is late): each path's emitted batches, or its error.
fn both(
    sql: &str,
    schema: &SchemaRef,
    window: WindowSpec,
    batches: &[RecordBatch],
) -> [Result<Vec<RecordBatch>, Error>; 2] {
    let spelled = [false, true].map(|in_sql| run_both(sql, schema, &window, batches, in_sql));
    let [in_spec, in_sql] = spelled;
    // the same view with its window written in SQL: the same rows, or the same error
    for (a, b) in in_spec.iter().zip(&in_sql) {
        match (a, b) {
            (Ok(a), Ok(b)) => assert_eq!(common::canon(a), common::canon(b), "{sql} in SQL"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{sql} in SQL"),
            _ => panic!("{sql}: the spec and SQL spellings disagree: {a:?} / {b:?}"),
        }
    }
    in_spec
}

/// [`both`] with the window in the spec, or (`in_sql`) written in the SQL.
fn run_both(
    sql: &str,
    schema: &SchemaRef,
    window: &WindowSpec,
    batches: &[RecordBatch],
    in_sql: bool,
) -> [Result<Vec<RecordBatch>, Error>; 2] {
    [ExecMode::Auto, ExecMode::Recompute].map(|mode| {
        let mut e = Engine::builder().build()?;
        let call = common::window_call("t", window).filter(|_| in_sql);
        let builder = match &call {
            Some(call) => ViewSpec::builder("v", &common::window_in_sql(sql, call)),
            None => ViewSpec::builder("v", sql).window(window.clone()),
        };
        e.create_view(
            builder
                .source("t", "ts", schema.clone())
                .output(OutputMode::Append)
                .mode(mode)
                .build()?,
        )?;
        if mode == ExecMode::Auto {
            assert_eq!(e.plan("v")?.path(), thund::PathKind::Incremental, "{sql}");
        }
        for b in batches {
            e.push("t", b.clone())?;
        }
        let mut out = e.trigger()?.views[0].output.clone();
        out.extend(e.finish()?.views[0].output.clone());
        Ok(out)
    })
}

fn ints(k: &[i64], x: &[Option<i64>], ts: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        schema(DataType::Int64),
        vec![
            Arc::new(Int64Array::from(k.to_vec())),
            Arc::new(Int64Array::from(x.to_vec())),
            Arc::new(TimestampMillisecondArray::from(ts.to_vec())),
        ],
    )
    .expect("batch")
}

/// `rows` of `(k, x, ts)` as batches of `ints`, `cut` rows each.
fn int_batches(rows: &[(i64, Option<i64>, i64)], cut: usize) -> Vec<RecordBatch> {
    rows.chunks(cut)
        .map(|c| {
            let k: Vec<i64> = c.iter().map(|r| r.0).collect();
            let x: Vec<Option<i64>> = c.iter().map(|r| r.1).collect();
            let ts: Vec<i64> = c.iter().map(|r| r.2).collect();
            ints(&k, &x, &ts)
        })
        .collect()
}

/// Rows of key 1 with decimal `x` of precision `p` and scale `scale`
/// (raw values) at times `ts`.
fn decimals(p: u8, scale: i8, x: &[i128], ts: &[i64]) -> RecordBatch {
    RecordBatch::try_new(
        schema(DataType::Decimal128(p, scale)),
        vec![
            Arc::new(Int64Array::from(vec![1; x.len()])),
            Arc::new(
                arrow::array::Decimal128Array::from(x.to_vec())
                    .with_precision_and_scale(p, scale)
                    .expect("decimal"),
            ),
            Arc::new(TimestampMillisecondArray::from(ts.to_vec())),
        ],
    )
    .expect("batch")
}

fn overflow_fields(r: &Result<Vec<RecordBatch>, Error>) -> (String, String, String, i64, i64) {
    match r {
        Err(Error::Overflow {
            view,
            aggregate,
            data_type,
            window_start,
            window_end,
            ..
        }) => (
            view.clone(),
            aggregate.clone(),
            data_type.clone(),
            *window_start,
            *window_end,
        ),
        other => panic!("expected an overflow error, got {other:?}"),
    }
}

#[test]
fn an_integer_sum_overflow_is_the_same_error_on_both_paths() {
    let big = i64::MAX / 2 + 1;
    // Int64: two halves of i64::MAX in window [0, 1000) of key 1
    let b = ints(&[1, 1, 2], &[Some(big), Some(big), Some(5)], &[10, 20, 30]);
    let [inc, rec] = both(
        "SELECT k, SUM(x) AS s FROM t GROUP BY k",
        &b.schema(),
        WindowSpec::tumbling(Duration::from_secs(1)),
        std::slice::from_ref(&b),
    );
    let want = (
        "v".to_string(),
        "SUM(t.x)".to_string(),
        "Int64".to_string(),
        0,
        1000,
    );
    assert_eq!(overflow_fields(&inc), want);
    assert_eq!(overflow_fields(&rec), want);
    // the aggregate named as written, with its DISTINCT and FILTER
    let b = ints(
        &[1, 1, 2],
        &[Some(big), Some(big + 1), Some(5)],
        &[10, 20, 30],
    );
    for (agg, named) in [
        ("SUM(DISTINCT x)", "SUM(DISTINCT t.x)"),
        (
            "SUM(x) FILTER (WHERE k > 0)",
            "SUM(t.x) FILTER (WHERE t.k > Int64(0))",
        ),
    ] {
        let [inc, rec] = both(
            &format!("SELECT k, {agg} AS s FROM t GROUP BY k"),
            &b.schema(),
            WindowSpec::tumbling(Duration::from_secs(1)),
            std::slice::from_ref(&b),
        );
        let want = (
            "v".to_string(),
            named.to_string(),
            "Int64".to_string(),
            0,
            1000,
        );
        assert_eq!(overflow_fields(&inc), want, "{agg}");
        assert_eq!(overflow_fields(&rec), want, "{agg}");
    }
    // UInt64: the sum of two values above u64::MAX / 2
    let s = schema(DataType::UInt64);
    let u = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from(vec![1, 1])),
            Arc::new(UInt64Array::from(vec![u64::MAX / 2 + 1, u64::MAX / 2 + 1])),
            Arc::new(TimestampMillisecondArray::from(vec![10, 20])),
        ],
    )
    .expect("batch");
    let [inc, rec] = both(
        "SELECT SUM(x) AS s FROM t",
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[u],
    );
    let want = (
        "v".to_string(),
        "SUM(t.x)".to_string(),
        "UInt64".to_string(),
        0,
        1000,
    );
    assert_eq!(overflow_fields(&inc), want);
    assert_eq!(overflow_fields(&rec), want);
}

/// Where a trigger closes one window whose sum overflows and changes an open
/// one whose sum overflows too, both paths name the first by start (the
/// closing one) in every output mode: in Update mode both named the open
/// window (changed windows were evaluated before closing ones), and in
/// Complete mode the recompute path did.
#[test]
fn an_overflow_names_the_first_window_by_start_in_every_mode() {
    let big = i64::MAX / 2 + 1;
    // one trigger, W = 3 500 - 2 000 = 1 500: [0, 1000) closes, [2000, 3000)
    // stays open, both hold two halves of i64::MAX (a key and the other source
    // for the join)
    let t = ints(
        &[1, 1, 1, 1, 1],
        &[Some(big), Some(big), Some(big), Some(big), Some(0)],
        &[500, 600, 2_500, 2_600, 3_500],
    );
    let u = ints(&[1, 1, 1], &[None, None, None], &[700, 2_700, 3_400]);
    let queries = [
        ("SELECT k, SUM(x) AS s FROM t GROUP BY k", "SUM(t.x)"),
        ("SELECT SUM(x) AS s FROM t", "SUM(t.x)"),
        (
            "SELECT k, SUM(x) AS s FROM t GROUP BY k ORDER BY s DESC LIMIT 1",
            "SUM(t.x)",
        ),
        (
            "SELECT t.k, SUM(t.x) AS s FROM t JOIN u ON t.k = u.k GROUP BY t.k",
            "SUM(t.x)",
        ),
        (
            "SELECT SUM(t.x) AS s FROM t JOIN u ON t.k = u.k",
            "SUM(t.x)",
        ),
        // an aggregate of the window's groups (Nexmark q4's outer AVG)
        (
            "SELECT COUNT(*) AS n, MAX(q.s) AS m FROM (SELECT k, SUM(x) AS s FROM t GROUP BY k) AS q",
            "SUM(t.x)",
        ),
    ];
    let windows = [
        WindowSpec::tumbling(Duration::from_secs(1)),
        WindowSpec::hopping(Duration::from_secs(1), Duration::from_millis(500)),
    ];
    for (sql, named) in queries {
        for window in &windows {
            for out in [OutputMode::Append, OutputMode::Update, OutputMode::Complete] {
                let run = |mode: ExecMode| -> Result<(), Error> {
                    let mut e = Engine::builder().build()?;
                    let mut spec = ViewSpec::builder("v", sql)
                        .window(window.clone())
                        .allowed_lateness(Duration::from_secs(2))
                        .source("t", "ts", t.schema())
                        .output(out)
                        .mode(mode);
                    if sql.contains("JOIN") {
                        spec = spec.source("u", "ts", u.schema());
                    }
                    e.create_view(spec.build()?)?;
                    if mode == ExecMode::Auto {
                        assert_eq!(e.plan("v")?.path(), thund::PathKind::Incremental, "{sql}");
                    }
                    e.push("t", t.clone())?;
                    if sql.contains("JOIN") {
                        e.push("u", u.clone())?;
                    }
                    e.trigger()?;
                    e.finish()?;
                    Ok(())
                };
                // of the windows holding rows, [0, 1000) is the first (by
                // start) whose sum does not fit, and it closes at this trigger
                let want = (
                    "v".to_string(),
                    named.to_string(),
                    "Int64".to_string(),
                    0,
                    1000,
                );
                for mode in [ExecMode::Auto, ExecMode::Recompute] {
                    let got = run(mode).map(|()| Vec::new());
                    assert_eq!(
                        overflow_fields(&got),
                        want,
                        "{sql}, {window:?}, {out:?}, {mode:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn extremes_of_uint64_and_int64_are_values_not_overflows() {
    let s = schema(DataType::UInt64);
    let u = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from(vec![1, 1, 2])),
            Arc::new(UInt64Array::from(vec![u64::MAX - 1, u64::MAX, 0])),
            Arc::new(TimestampMillisecondArray::from(vec![10, 20, 30])),
        ],
    )
    .expect("batch");
    let [inc, rec] = both(
        "SELECT k, MAX(x) AS mx, MIN(x) AS mn FROM t GROUP BY k",
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[u],
    );
    let (inc, rec) = (inc.expect("incremental"), rec.expect("recompute"));
    assert_eq!(common::canon(&inc), common::canon(&rec));
    let mx: Vec<u64> = inc
        .iter()
        .flat_map(|b| {
            let a = b
                .column_by_name("mx")
                .expect("mx")
                .as_any()
                .downcast_ref::<UInt64Array>()
                .expect("UInt64")
                .clone();
            a.values().to_vec()
        })
        .collect();
    assert!(mx.contains(&u64::MAX), "{mx:?}");
    // Int64 extremes in one group: SUM of MIN and MAX is -1, exact
    let b = ints(&[1, 1], &[Some(i64::MIN), Some(i64::MAX)], &[10, 20]);
    let [inc, rec] = both(
        "SELECT SUM(x) AS s, MIN(x) AS mn, MAX(x) AS mx FROM t",
        &b.schema(),
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[b],
    );
    let (inc, rec) = (inc.expect("incremental"), rec.expect("recompute"));
    assert_eq!(common::canon(&inc), common::canon(&rec));
    let s = inc[0]
        .column_by_name("s")
        .expect("s")
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("Int64")
        .value(0);
    assert_eq!(s, -1);
}

/// PostgreSQL's float order: -0.0 = 0.0, NaN above every number.
fn pg_cmp(a: f64, b: f64) -> std::cmp::Ordering {
    let c = |x: f64| if x == 0.0 { 0.0 } else { x };
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => c(a).partial_cmp(&c(b)).expect("numbers compare"),
    }
}

fn special() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(-f64::NAN),
        Just(0.0),
        Just(-0.0),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        (-4i32..4).prop_map(|x| x as f64 / 2.0),
    ]
}

/// Column `name` of `b` as a `T` (`None`: the first column, the window's
/// start).
fn column<'a, T: 'static>(b: &'a RecordBatch, name: Option<&str>) -> &'a T {
    let c = match name {
        Some(n) => b
            .column_by_name(n)
            .unwrap_or_else(|| panic!("no column {n}")),
        None => b.column(0),
    };
    c.as_any().downcast_ref::<T>().expect("the column's type")
}

/// (key, value) per row, rendered as the test expects each path to show it.
fn float_rows(batches: &[RecordBatch]) -> Vec<(i64, i64, String, String)> {
    let mut out = Vec::new();
    for b in batches {
        let ws = column::<TimestampMillisecondArray>(b, None);
        let k = column::<Float64Array>(b, Some("x_key"));
        let mn = column::<Float64Array>(b, Some("mn"));
        let mx = column::<Float64Array>(b, Some("mx"));
        for r in 0..b.num_rows() {
            let show = |a: &Float64Array| {
                let x = a.value(r);
                if a.is_null(r) {
                    "NULL".to_string()
                } else if x.is_nan() {
                    "NaN".to_string()
                } else {
                    format!("{x:?}")
                }
            };
            let key = k.value(r);
            let key = if key.is_nan() { f64::NAN } else { key };
            out.push((ws.value(r), key.to_bits() as i64, show(mn), show(mx)));
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// NaN, ±0.0 and ±∞ in MIN/MAX and as a group key: both paths give the
    /// rule's answer, whatever the row order and the split into batches.
    #[test]
    fn special_floats_follow_one_rule_on_both_paths(
        rows in prop::collection::vec((special(), special(), 0i64..3_000), 1..40),
        cut in 1usize..10,
    ) {
        let s = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Float64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        ]));
        let batches: Vec<RecordBatch> = rows
            .chunks(cut)
            .map(|c| {
                RecordBatch::try_new(
                    s.clone(),
                    vec![
                        Arc::new(Float64Array::from(c.iter().map(|r| r.0).collect::<Vec<_>>())),
                        Arc::new(Float64Array::from(c.iter().map(|r| r.1).collect::<Vec<_>>())),
                        Arc::new(TimestampMillisecondArray::from(c.iter().map(|r| r.2).collect::<Vec<_>>())),
                    ],
                )
                .expect("batch")
            })
            .collect();
        let sql = "SELECT key AS x_key, MIN(x) AS mn, MAX(x) AS mx FROM t GROUP BY key";
        let [inc, rec] = both(sql, &s, WindowSpec::tumbling(Duration::from_secs(1)), &batches);
        let (inc, rec) = (inc.expect("incremental"), rec.expect("recompute"));
        // the rule, computed here: one group for -0.0 and 0.0, one for every NaN
        let mut want: std::collections::BTreeMap<(i64, i64), (f64, f64)> = Default::default();
        for (key, x, t) in &rows {
            let key = if key.is_nan() { f64::NAN } else if *key == 0.0 { 0.0 } else { *key };
            let e = want.entry((t / 1000 * 1000, key.to_bits() as i64)).or_insert((*x, *x));
            if pg_cmp(*x, e.0).is_lt() { e.0 = *x; }
            if pg_cmp(*x, e.1).is_gt() { e.1 = *x; }
        }
        let show = |x: f64| if x.is_nan() { "NaN".to_string() } else if x == 0.0 { "0.0".to_string() } else { format!("{x:?}") };
        let mut want: Vec<(i64, i64, String, String)> = want
            .into_iter()
            .map(|((w, k), (mn, mx))| (w, k, show(mn), show(mx)))
            .collect();
        want.sort();
        prop_assert_eq!(float_rows(&inc), want.clone());
        prop_assert_eq!(float_rows(&rec), want);
    }
}

#[test]
fn event_times_whose_windows_do_not_fit_are_invalid_on_both_paths() {
    // tumbling 10 ms: MAX - 20 fits ([…780, …790)), MAX - 1 does not (its window would end past MAX)
    let ts = [
        i64::MIN,
        i64::MIN + 5,
        -1,
        0,
        i64::MAX - 20,
        i64::MAX - 1,
        i64::MAX,
    ];
    let b = ints(&[1; 7], &[Some(1); 7], &ts);
    let mut results = Vec::new();
    for mode in [ExecMode::Auto, ExecMode::Recompute] {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(
            ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM t")
                .source("t", "ts", b.schema())
                .window(WindowSpec::tumbling(Duration::from_millis(10)))
                .mode(mode)
                .build()
                .expect("spec"),
        )
        .expect("view");
        e.push("t", b.clone()).expect("push");
        let mut out = e.trigger().expect("trigger").views[0].output.clone();
        out.extend(e.finish().expect("finish").views[0].output.clone());
        let c = e.counters("v").expect("counters");
        let rejected = e.late_rows("v").expect("rejected");
        results.push((
            common::canon(&out),
            c.invalid_rows,
            c.late_rows_dropped,
            rejected.num_rows(),
        ));
    }
    // MIN and MIN+5: their window would start at …810, below i64::MIN;
    // MAX-1 and MAX: it would end past i64::MAX. -1, 0 and MAX-20 fit.
    assert_eq!(results[0].1, 4, "{results:?}");
    assert_eq!(
        results[0].3, 4,
        "kept in the rejected-row relation: {results:?}"
    );
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].0.len(), 3, "{results:?}");
}

/// Sessions at the ends of time: a span `[t, t + gap)` past `i64::MAX` is
/// invalid; `i64::MIN` and a session ending exactly at `i64::MAX` are not.
/// Both paths refuse the same rows and emit the same sessions.
#[test]
fn session_spans_that_do_not_fit_are_invalid_on_both_paths() {
    let ts = [
        i64::MIN,
        i64::MIN + 5,
        -1,
        0,
        i64::MAX - 30,
        i64::MAX - 10,
        i64::MAX - 1,
        i64::MAX,
    ];
    let b = ints(&[1, 1, 2, 2, 1, 1, 2, 1], &[Some(1); 8], &ts);
    let mut results = Vec::new();
    for mode in [ExecMode::Auto, ExecMode::Recompute] {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(
            ViewSpec::builder(
                "v",
                "SELECT k, COUNT(*) AS c, MIN(ts) AS first FROM t GROUP BY k",
            )
            .source("t", "ts", b.schema())
            .window(WindowSpec::session(Duration::from_millis(10), &["k"]))
            .mode(mode)
            .build()
            .expect("spec"),
        )
        .expect("view");
        let want = match mode {
            ExecMode::Auto => thund::PathKind::Incremental,
            _ => thund::PathKind::Recompute,
        };
        assert_eq!(e.plan("v").expect("plan").path(), want);
        e.push("t", b.slice(0, 4)).expect("push");
        let mut out = e.trigger().expect("trigger").views[0].output.clone();
        e.push("t", b.slice(4, 4)).expect("push");
        out.extend(e.trigger().expect("trigger").views[0].output.clone());
        out.extend(e.finish().expect("finish").views[0].output.clone());
        let c = e.counters("v").expect("counters");
        results.push((common::canon(&out), c.invalid_rows, c.late_rows_dropped));
    }
    // MAX-1 and MAX: their span would end past i64::MAX
    assert_eq!(results[0].1, 2, "{results:?}");
    assert_eq!(results[0], results[1]);
    // sessions (MIN, MIN+5), (-1, 0), (MAX-30) and (MAX-10, ending at MAX)
    assert_eq!(results[0].0.len(), 4, "{results:?}");
}

#[test]
fn an_event_time_that_does_not_fit_does_not_move_the_watermark() {
    for mode in [ExecMode::Auto, ExecMode::Recompute] {
        let first = ints(&[1, 1], &[Some(1), Some(1)], &[1_000, i64::MAX - 1]);
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(
            ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM t")
                .source("t", "ts", first.schema())
                .window(WindowSpec::tumbling(Duration::from_millis(10)))
                .mode(mode)
                .build()
                .expect("spec"),
        )
        .expect("view");
        e.push("t", first).expect("push");
        let r = e.trigger().expect("trigger");
        assert_eq!(r.views[0].watermark, Some(1_000), "{mode:?}");
        e.push("t", ints(&[1], &[Some(1)], &[1_005])).expect("push");
        e.trigger().expect("trigger");
        e.finish().expect("finish");
        let c = e.counters("v").expect("counters");
        assert_eq!((c.invalid_rows, c.late_rows_dropped), (1, 0), "{mode:?}");
    }
}

#[test]
fn a_zero_slide_is_refused_not_a_panic() {
    assert!(thund::window::TimeWindows::new(1_000, 0, 0).is_none());
    let err = ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM t")
        .source("t", "ts", schema(DataType::Int64))
        .window(WindowSpec::hopping(Duration::from_secs(1), Duration::ZERO))
        .build()
        .expect_err("refused");
    assert!(matches!(err, Error::Spec { .. }), "{err}");
}

#[test]
fn a_decimal_average_that_does_not_fit_is_an_error_on_both_paths() {
    let s = schema(DataType::Decimal128(38, 0));
    let huge = 10i128.pow(37);
    let b = decimals(38, 0, &[huge, huge], &[10, 20]);
    let [inc, rec] = both(
        "SELECT AVG(x) AS a FROM t",
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[b],
    );
    let want = (
        "v".to_string(),
        "AVG(t.x)".to_string(),
        "Decimal128(38, 4)".to_string(),
        0,
        1000,
    );
    assert_eq!(overflow_fields(&inc), want);
    assert_eq!(overflow_fields(&rec), want);
}

/// A decimal `SUM` past its type's precision (or past the 128 bits it is
/// kept in) is an overflow on both paths, as an integer one is: grouped,
/// and in an aggregate over the groups (whose outer groups Update mode
/// keeps), and `SUM(DISTINCT …)`. DataFusion's own decimal `SUM` wraps.
#[test]
fn a_decimal_sum_past_its_type_is_an_overflow_on_both_paths() {
    let s = schema(DataType::Decimal128(38, 0));
    let inner = "SELECT k % 2 AS p, SUM(x) AS s FROM t GROUP BY k % 2";
    let outer = "SELECT k % 2 AS p, COUNT(*) AS n, SUM(s) AS ss FROM \
                 (SELECT k, SUM(x) AS s FROM t GROUP BY k) AS a GROUP BY k % 2";
    // (DataFusion's own gave a tenth of the sum, past the precision)
    let distinct = "SELECT k % 2 AS p, SUM(DISTINCT x) AS s FROM t GROUP BY k % 2";
    for (sql, keeps) in [(inner, false), (outer, true), (distinct, false)] {
        // past the precision (38 digits), then past 128 bits
        for big in [6 * 10i128.pow(37), 9 * 10i128.pow(37)] {
            let b = RecordBatch::try_new(
                s.clone(),
                vec![
                    Arc::new(Int64Array::from(vec![1, 3, 2])),
                    Arc::new(
                        arrow::array::Decimal128Array::from(vec![big, big + 1, 5])
                            .with_precision_and_scale(38, 0)
                            .expect("decimal"),
                    ),
                    Arc::new(TimestampMillisecondArray::from(vec![10, 20, 30])),
                ],
            )
            .expect("batch");
            let [inc, rec] = [ExecMode::Auto, ExecMode::Recompute].map(|mode| {
                let mut e = Engine::builder().build()?;
                e.create_view(
                    ViewSpec::builder("v", sql)
                        .window(WindowSpec::tumbling(Duration::from_secs(1)))
                        .source("t", "ts", s.clone())
                        .output(OutputMode::Update)
                        .mode(mode)
                        .build()?,
                )?;
                if mode == ExecMode::Auto {
                    assert_eq!(e.plan("v")?.path(), thund::PathKind::Incremental, "{sql}");
                    let explain = e.explain("v")?;
                    assert_eq!(
                        explain.contains("outer groups are kept"),
                        keeps,
                        "{explain}"
                    );
                }
                e.push("t", b.clone())?;
                let mut out = e.trigger()?.views[0].output.clone();
                out.extend(e.finish()?.views[0].output.clone());
                Ok::<_, Error>(out)
            });
            for r in [&inc, &rec] {
                assert!(
                    matches!(r, Err(Error::Overflow { .. })),
                    "{sql}, {big}: {r:?}"
                );
            }
        }
    }
}

/// A decimal `SUM` past the 128 bits it is kept in names the same aggregate,
/// type and window on both paths, whether the rows that overflow come in one
/// trigger (the incremental path's ingest folds them) or one per trigger (its
/// dataflow folds them), in one pane of a hopping window or in two: the
/// first window (by start) that holds both rows, found here by walking the
/// windows. A session's rows come in one trigger: across triggers the
/// incremental path names the unit its dataflow keeps, not the session (see
/// the README's limits).
#[test]
fn a_decimal_sum_past_128_bits_names_the_same_window_on_both_paths() {
    let s = schema(DataType::Decimal128(38, 0));
    let big = 9 * 10i128.pow(37);
    let batch_of = |rows: &[(i128, i64)]| {
        RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1; rows.len()])),
                Arc::new(
                    arrow::array::Decimal128Array::from(
                        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
                    )
                    .with_precision_and_scale(38, 0)
                    .expect("decimal"),
                ),
                Arc::new(TimestampMillisecondArray::from(
                    rows.iter().map(|r| r.1).collect::<Vec<_>>(),
                )),
            ],
        )
        .expect("batch")
    };
    let (size, slide) = (10_000i64, 2_000i64);
    let windows = [
        WindowSpec::tumbling(Duration::from_millis(size as u64)),
        WindowSpec::hopping(
            Duration::from_millis(size as u64),
            Duration::from_millis(slide as u64),
        ),
        WindowSpec::session(Duration::from_millis(3_000), &["k"]),
    ];
    // the two big rows in one pane, and in two; a small row before them
    for times in [[5_000i64, 5_100], [1_000, 3_000]] {
        let rows = [(5, 100), (big, times[0]), (big, times[1])];
        for (w, window) in windows.iter().enumerate() {
            let (tumbling, session) = (w == 0, w == 2);
            // the first window by start that holds both big rows
            let want = if session {
                // the small row is in the session if less than a gap before
                let start = if times[0] - 100 < 3_000 {
                    100
                } else {
                    times[0]
                };
                (start, times[1] + 3_000)
            } else {
                let step = if tumbling { size } else { slide };
                let mut start = (times[0] - size).div_euclid(step) * step;
                while !(start <= times[0] && times[1] < start + size) {
                    start += step;
                }
                (start, start + size)
            };
            for one_per_trigger in [false, true] {
                if session && one_per_trigger {
                    continue;
                }
                for output in [OutputMode::Append, OutputMode::Update] {
                    let [inc, rec] = [ExecMode::Auto, ExecMode::Recompute].map(|mode| {
                        let mut e = Engine::builder().build()?;
                        e.create_view(
                            ViewSpec::builder("v", "SELECT k, SUM(x) AS s FROM t GROUP BY k")
                                .window(window.clone())
                                .source("t", "ts", s.clone())
                                .output(output)
                                .mode(mode)
                                .build()?,
                        )?;
                        let mut out = Vec::new();
                        match one_per_trigger {
                            true => {
                                for r in rows {
                                    e.push("t", batch_of(&[r]))?;
                                    out.extend(e.trigger()?.views[0].output.clone());
                                }
                            }
                            false => e.push("t", batch_of(&rows))?,
                        }
                        out.extend(e.finish()?.views[0].output.clone());
                        Ok::<_, Error>(out)
                    });
                    let at = format!("{window:?}, {times:?}, {one_per_trigger}, {output:?}");
                    let expected = (
                        "v".to_string(),
                        "SUM(t.x)".to_string(),
                        "Decimal128(38, 0)".to_string(),
                        want.0,
                        want.1,
                    );
                    assert_eq!(overflow_fields(&rec), expected, "recompute: {at}");
                    assert_eq!(overflow_fields(&inc), expected, "incremental: {at}");
                }
            }
        }
    }
}

/// A filter over an aggregate's rows that reads only its group keys (an
/// outer `WHERE x.k IS NOT NULL`, a `HAVING k IS NOT NULL`, through a
/// projection's `k + 1`) refuses the rows of the groups it refuses on both
/// paths, as DataFusion's optimizer does on the recompute path: a sum that
/// overflows only in such a group (the NULL key's here) is an error on
/// neither. A filter that reads an aggregate does not move: the NULL key's
/// sum is then the same overflow on both. Found by the differential fuzz
/// (the incremental path named the NULL key's window, the recompute path a
/// later one).
#[test]
fn a_filter_of_group_keys_refuses_its_groups_rows_on_both_paths() {
    let big = i64::MAX / 2 + 1;
    let s: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("x", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let b = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from(vec![
                None,
                None,
                Some(1),
                Some(2),
                Some(1),
            ])),
            Arc::new(Int64Array::from(vec![big, big, 5, 7, 3])),
            Arc::new(TimestampMillisecondArray::from(vec![10, 20, 30, 40, 1500])),
        ],
    )
    .expect("batch");
    // per window [0, 1000) and [1000, 2000), the rows of keys 1 and 2 alone
    let (w0, w1) = (
        "1970-01-01T00:00:00|1970-01-01T00:00:01|",
        "1970-01-01T00:00:01|1970-01-01T00:00:02|",
    );
    for (sql, want) in [
        (
            "SELECT COUNT(x.s) AS c, SUM(x.s) AS t FROM \
             (SELECT k, SUM(x) AS s FROM t GROUP BY k) AS x WHERE x.k IS NOT NULL",
            [(w0, "2|12"), (w1, "1|3")].as_slice(),
        ),
        (
            "SELECT k, SUM(x) AS s FROM t GROUP BY k HAVING k IS NOT NULL",
            &[(w0, "1|5"), (w0, "2|7"), (w1, "1|3")],
        ),
        (
            "SELECT k, SUM(x) AS s FROM t GROUP BY k HAVING k IS NOT NULL AND SUM(x) > 0",
            &[(w0, "1|5"), (w0, "2|7"), (w1, "1|3")],
        ),
        (
            "SELECT COUNT(*) AS c FROM \
             (SELECT k + 1 AS k1, SUM(x) AS s FROM t GROUP BY k) AS x WHERE x.k1 > 1",
            &[(w0, "2"), (w1, "1")],
        ),
    ] {
        let [inc, rec] = both(
            sql,
            &s,
            WindowSpec::tumbling(Duration::from_secs(1)),
            std::slice::from_ref(&b),
        );
        let rows = |r: &Result<Vec<RecordBatch>, Error>| {
            let mut rows = common::canon(r.as_ref().unwrap_or_else(|e| panic!("{sql}: {e}")));
            rows.sort();
            rows
        };
        let want: Vec<String> = want.iter().map(|(w, r)| format!("{w}{r}")).collect();
        assert_eq!(rows(&inc), want, "{sql}");
        assert_eq!(rows(&rec), want, "{sql}");
    }
    let [inc, rec] = both(
        "SELECT k, SUM(x) AS s FROM t GROUP BY k HAVING SUM(x) > 0",
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        std::slice::from_ref(&b),
    );
    let want = ("v".into(), "SUM(t.x)".into(), "Int64".into(), 0, 1000);
    assert_eq!(overflow_fields(&inc), want);
    assert_eq!(overflow_fields(&rec), want);
}

/// An integer near the `i64` limits, a small one, or NULL.
fn extreme_int() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        Just(Some(i64::MIN)),
        Just(Some(i64::MAX)),
        Just(Some(i64::MAX / 2 + 1)),
        Just(Some(-(i64::MAX / 2))),
        (-500i64..500).prop_map(Some),
        Just(None),
    ]
}

/// Each row's window start, key and average, in the order of the rows.
fn averages(batches: &[RecordBatch], key: &str) -> Vec<(i64, i64, Option<u64>)> {
    let mut out = Vec::new();
    for b in batches {
        let ws = column::<TimestampMillisecondArray>(b, None);
        let k = column::<Int64Array>(b, Some(key));
        let a = column::<Float64Array>(b, Some("a"));
        for r in 0..b.num_rows() {
            // (compared by bits: the same double, not a close one)
            let avg = a.is_valid(r).then(|| a.value(r).to_bits());
            out.push((ws.value(r), k.value(r), avg));
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// `AVG` of integers is the exact sum, rounded to a double once, over the
    /// count, on both paths, grouped and over the groups (Nexmark q4's
    /// shape). DataFusion's own sums doubles: near the `i64` limits its sum
    /// cancels to another value altogether (in a fuzzed window, `0.0` for
    /// `-33.07…`).
    #[test]
    fn integer_averages_are_exact_on_both_paths(
        rows in prop::collection::vec((0i64..4, extreme_int(), 0i64..3_000), 1..40),
        cut in 1usize..10,
    ) {
        let batches = int_batches(&rows, cut);
        let s = schema(DataType::Int64);
        let mean = |xs: &[i64]| {
            (!xs.is_empty()).then(|| {
                let sum: i128 = xs.iter().map(|x| i128::from(*x)).sum();
                (sum as f64 / xs.len() as f64).to_bits()
            })
        };
        // grouped: each window's groups' averages
        let mut groups: std::collections::BTreeMap<(i64, i64), Vec<i64>> = Default::default();
        for (k, x, t) in &rows {
            let g = groups.entry((t / 1000 * 1000, *k)).or_default();
            g.extend(x);
        }
        let want: Vec<(i64, i64, Option<u64>)> =
            groups.iter().map(|(&(w, k), xs)| (w, k, mean(xs))).collect();
        let sql = "SELECT k, AVG(x) AS a FROM t GROUP BY k";
        let [inc, rec] = both(sql, &s, WindowSpec::tumbling(Duration::from_secs(1)), &batches);
        prop_assert_eq!(averages(&inc.expect("incremental"), "k"), want.clone());
        prop_assert_eq!(averages(&rec.expect("recompute"), "k"), want);
        // over the groups: the average of each window's per-key maxima by parity
        let mut outer: std::collections::BTreeMap<(i64, i64), Vec<i64>> = Default::default();
        for (&(w, k), xs) in &groups {
            let e = outer.entry((w, k % 2)).or_default();
            e.extend(xs.iter().max());
        }
        let want: Vec<(i64, i64, Option<u64>)> =
            outer.iter().map(|(&(w, p), xs)| (w, p, mean(xs))).collect();
        let sql = "SELECT q.k % 2 AS p, AVG(q.m) AS a FROM \
                   (SELECT k, MAX(x) AS m FROM t GROUP BY k) AS q GROUP BY q.k % 2";
        let [inc, rec] = both(sql, &s, WindowSpec::tumbling(Duration::from_secs(1)), &batches);
        prop_assert_eq!(averages(&inc.expect("incremental"), "p"), want.clone());
        prop_assert_eq!(averages(&rec.expect("recompute"), "p"), want);
    }
}

/// `AVG(DISTINCT …)` (on the recompute path only) follows the rule of
/// `AVG`: of integers, the exact sum of the distinct values, rounded once to
/// a double, over their count (DataFusion's adds doubles); of decimals, a
/// result that does not fit is `Error::Overflow` naming it (DataFusion's
/// error is untyped). Both modes take the recompute path and agree.
#[test]
fn distinct_averages_are_exact_and_their_overflow_is_typed() {
    let run = |sql: &str, b: &RecordBatch, mode: ExecMode| {
        run_mode(sql, &b.schema(), std::slice::from_ref(b), mode).map(|(_, out)| out)
    };
    // integers near the limits, repeated: the distinct ones are averaged
    let xs = [i64::MIN, -463, 1 << 62, (1 << 62) + 1, -463, 7];
    let b = ints(&[1; 6], &xs.map(Some), &[10, 20, 30, 40, 50, 60]);
    let mut distinct: Vec<i64> = xs.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let sum: i128 = distinct.iter().map(|x| i128::from(*x)).sum();
    let want = (sum as f64 / distinct.len() as f64).to_bits();
    for mode in [ExecMode::Auto, ExecMode::Recompute] {
        let out = run("SELECT AVG(DISTINCT x) AS a FROM t", &b, mode).expect("runs");
        let got: Vec<u64> = out
            .iter()
            .flat_map(|b| column::<Float64Array>(b, Some("a")).values().to_vec())
            .map(f64::to_bits)
            .collect();
        assert_eq!(got, vec![want], "{mode:?}");
    }
    // a decimal average past its type's 38 digits
    let huge = 10i128.pow(37);
    let b = decimals(38, 0, &[huge, huge, huge + 1], &[10, 20, 30]);
    for mode in [ExecMode::Auto, ExecMode::Recompute] {
        let got = run("SELECT AVG(DISTINCT x) AS a FROM t", &b, mode);
        assert_eq!(
            overflow_fields(&got),
            (
                "v".to_string(),
                "AVG(DISTINCT t.x)".to_string(),
                "Decimal128(38, 4)".to_string(),
                0,
                1000
            ),
            "{mode:?}"
        );
    }
}

/// A decimal average that fits its type is a value on both paths even where
/// its sum, scaled to the result's scale, passes 128 bits (two of the
/// largest `DECIMAL(34, 2)` values: their sum times 10^4 is about 2·10^38):
/// the scaled sum is taken in 256 bits. It was refused as an overflow.
#[test]
fn a_decimal_average_whose_scaled_sum_passes_128_bits_is_a_value() {
    let s = schema(DataType::Decimal128(34, 2));
    let top = 10i128.pow(34) - 1; // 99999999999999999999999999999999.99
    let b = decimals(34, 2, &[top, top], &[10, 20]);
    let [inc, rec] = both(
        "SELECT k, AVG(x) AS a FROM t GROUP BY k",
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[b],
    );
    for out in [inc, rec] {
        let out = out.expect("a value, not an overflow");
        let a = column::<arrow::array::Decimal128Array>(&out[0], Some("a"));
        assert_eq!(a.data_type(), &DataType::Decimal128(38, 6));
        // the mean of two equal values is the value, at scale 6
        assert_eq!(a.value(0), top * 10_000);
    }
}

/// Each row's window start, key and `a`, in order (an integer column).
fn int_rows(batches: &[RecordBatch], key: &str) -> Vec<(i64, i64, Option<i64>)> {
    let mut out = Vec::new();
    for b in batches {
        let ws = column::<TimestampMillisecondArray>(b, None);
        let k = column::<Int64Array>(b, Some(key));
        let a = column::<Int64Array>(b, Some("a"));
        for r in 0..b.num_rows() {
            out.push((ws.value(r), k.value(r), a.is_valid(r).then(|| a.value(r))));
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// Integer `+`, `-`, `*` and unary minus fail on overflow, on both paths
    /// and in the same words, in an aggregate's argument (`SUM(x * c)`) and
    /// over an aggregate (`MAX(x) * c`); where nothing overflows, the values
    /// are the exact ones. DataFusion's own wrap: `i64::MAX + 1` was
    /// `i64::MIN` on both paths, exit 0.
    #[test]
    fn integer_arithmetic_that_overflows_is_an_error_on_both_paths(
        // (one window: a row's overflow and another window's overflowing
        // sum are both errors, but which comes first differs by path)
        rows in prop::collection::vec((0i64..3, extreme_int(), 0i64..1_000), 1..30),
        op in 0usize..4,
        c in prop_oneof![Just(1i64), Just(2), Just(-1), Just(-3), Just(i64::MAX)],
    ) {
        let batches = int_batches(&rows, 7);
        let s = schema(DataType::Int64);
        // the operation, as SQL writes it and as exact arithmetic computes it
        let (text, exact): (String, Box<dyn Fn(i128) -> i128>) = match op {
            0 => (format!("x + {c}"), Box::new(move |x| x + i128::from(c))),
            1 => (format!("x - {c}"), Box::new(move |x| x - i128::from(c))),
            2 => (format!("x * {c}"), Box::new(move |x| x * i128::from(c))),
            _ => ("-x".to_string(), Box::new(|x: i128| -x)),
        };
        let fits = |v: i128| i64::try_from(v).ok();
        let window = WindowSpec::tumbling(Duration::from_secs(1));
        let mut groups: std::collections::BTreeMap<(i64, i64), Vec<i128>> = Default::default();
        for (k, x, t) in &rows {
            let g = groups.entry((t / 1000 * 1000, *k)).or_default();
            g.extend(x.map(i128::from));
        }
        let same_error = |inc: &Result<Vec<RecordBatch>, Error>, rec: &Result<Vec<RecordBatch>, Error>| {
            match (inc, rec) {
                // the same error; the operands it names are of a row that
                // overflows, which need not be the same row on both paths
                (Err(a), Err(b)) => {
                    let what = |e: &Error| {
                        let s = e.to_string();
                        s.find("Overflow happened on: ").map(|at| s[..at].to_string())
                    };
                    let prefix = "evaluating view `v` failed: Arrow error: Arithmetic overflow: ";
                    assert_eq!(what(a).as_deref(), Some(prefix), "{a}");
                    assert_eq!(what(b).as_deref(), Some(prefix), "{b}");
                }
                other => panic!("expected an overflow on both paths, got {other:?}"),
            }
        };
        // in the argument: a row whose value does not fit fails the view;
        // else each group's exact sum, or the sum's own overflow
        let sql = format!("SELECT k, SUM({text}) AS a FROM t GROUP BY k");
        let [inc, rec] = both(&sql, &s, window.clone(), &batches);
        let every_row_fits = groups.values().flatten().all(|&x| fits(exact(x)).is_some());
        // (a group of NULLs sums to NULL; `Err` where the sum does not fit)
        let sums: Vec<(i64, i64, Result<Option<i64>, ()>)> = groups
            .iter()
            .map(|(&(w, k), xs)| {
                let sum = (!xs.is_empty()).then(|| xs.iter().try_fold(0i128, |s, &x| s.checked_add(exact(x))));
                (w, k, sum.map(|s| s.and_then(fits).ok_or(())).transpose())
            })
            .collect();
        if !every_row_fits {
            same_error(&inc, &rec);
        } else if sums.iter().any(|s| s.2.is_err()) {
            prop_assert!(matches!(inc, Err(Error::Overflow { .. })), "{:?}", inc);
            prop_assert!(matches!(rec, Err(Error::Overflow { .. })), "{:?}", rec);
        } else {
            let want: Vec<(i64, i64, Option<i64>)> =
                sums.iter().map(|&(w, k, s)| (w, k, s.unwrap_or_default())).collect();
            prop_assert_eq!(int_rows(&inc.expect("incremental"), "k"), want.clone());
            prop_assert_eq!(int_rows(&rec.expect("recompute"), "k"), want);
        }
        // over the aggregate: each group's maximum through the operation
        let sql = format!("SELECT k, {} AS a FROM t GROUP BY k", text.replace('x', "MAX(x)"));
        let [inc, rec] = both(&sql, &s, window, &batches);
        // (NULL over a group of NULLs; `Err` where the value does not fit)
        let maxima: Vec<(i64, i64, Result<Option<i64>, ()>)> = groups
            .iter()
            .map(|(&(w, k), xs)| (w, k, xs.iter().max().map(|&m| fits(exact(m)).ok_or(())).transpose()))
            .collect();
        if maxima.iter().any(|m| m.2.is_err()) {
            same_error(&inc, &rec);
        } else {
            let want: Vec<(i64, i64, Option<i64>)> =
                maxima.iter().map(|&(w, k, m)| (w, k, m.unwrap_or_default())).collect();
            prop_assert_eq!(int_rows(&inc.expect("incremental"), "k"), want.clone());
            prop_assert_eq!(int_rows(&rec.expect("recompute"), "k"), want);
        }
    }
}

/// Arithmetic that mixes an unsigned and a signed integer (`x - 1` of a
/// `UInt64` `x`): DataFusion's planner types it `Decimal128(20, 0)` and
/// computes it as `Decimal128(21, 0)`, so every batch of such a column
/// failed with a schema mismatch at the first trigger (and a group key the
/// query does not show failed on the incremental path alone). Such a view
/// now runs on the recompute path, its columns of the type computed, with
/// the exact values; one type for both operands stays incremental, and its
/// `UInt64` result fails on overflow like any integer.
#[test]
fn unsigned_and_signed_arithmetic_datafusion_mistypes_runs_on_the_recompute_path() {
    let s = schema(DataType::UInt64);
    let batch = |x: u64| {
        RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1])),
                Arc::new(UInt64Array::from(vec![x])),
                Arc::new(TimestampMillisecondArray::from(vec![10])),
            ],
        )
        .expect("batch")
    };
    let top = i128::from(u64::MAX);
    for (sql, want) in [
        ("SELECT k, x - 1 AS d FROM t", top - 1),
        ("SELECT k, MIN(x * 2) AS d FROM t GROUP BY k", 2 * top),
        (
            "SELECT x + 1 AS d, COUNT(*) AS c FROM t GROUP BY x + 1",
            top + 1,
        ),
    ] {
        for mode in [ExecMode::Auto, ExecMode::Recompute] {
            let (path, out) = run_mode(sql, &s, &[batch(u64::MAX)], mode).expect(sql);
            assert_eq!(path, thund::PathKind::Recompute);
            let d: Vec<i128> = out
                .iter()
                .flat_map(|b| {
                    column::<arrow::array::Decimal128Array>(b, Some("d"))
                        .values()
                        .to_vec()
                })
                .collect();
            assert_eq!(d, vec![want], "{sql} ({mode:?})");
        }
    }
    // a group key the query does not show: not refused, and not kept by the
    // incremental path (whose keys are of the type declared), so the view
    // recomputes; it failed incrementally with a mismatch of row encodings
    let sql = "SELECT k, COUNT(*) AS c FROM t GROUP BY k, x - 1";
    let counts = [ExecMode::Auto, ExecMode::Recompute].map(|mode| {
        let batches = [5, 5, 6].map(batch);
        let (path, out) = run_mode(sql, &s, &batches, mode).expect("runs");
        assert_eq!(path, thund::PathKind::Recompute);
        let mut c: Vec<i64> = out
            .iter()
            .flat_map(|b| column::<Int64Array>(b, Some("c")).values().to_vec())
            .collect();
        c.sort();
        c
    });
    // one group of two (x = 5) and one of one (x = 6)
    assert_eq!(counts, [vec![1, 2], vec![1, 2]]);
    // one type for both operands: a value, and an overflow where it does not fit
    let sql = "SELECT k, MAX(x - CAST(1 AS BIGINT UNSIGNED)) AS d FROM t GROUP BY k";
    let [inc, rec] = both(
        sql,
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[batch(u64::MAX)],
    );
    for out in [inc, rec] {
        let out = out.expect("a value");
        let d = column::<UInt64Array>(&out[0], Some("d"));
        assert_eq!(d.value(0), u64::MAX - 1);
    }
    let [inc, rec] = both(
        sql,
        &s,
        WindowSpec::tumbling(Duration::from_secs(1)),
        &[batch(0)],
    );
    for out in [inc, rec] {
        let err = out.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("Arithmetic overflow: Overflow happened on: 0 - 1"),
            "{err}"
        );
    }
}

/// Both modes (Auto falls back: window functions other than a top-rows rank
/// recompute) over `batches`, all pushed before one trigger: each mode's
/// output, or its error.
fn both_modes(
    sql: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> [Result<Vec<RecordBatch>, Error>; 2] {
    [ExecMode::Auto, ExecMode::Recompute]
        .map(|mode| run_mode(sql, schema, batches, mode).map(|(_, out)| out))
}

/// `sql` over 1 s tumbling windows in `mode`, Append, over `batches` all
/// pushed before one trigger: the path it took and its output, or its error.
fn run_mode(
    sql: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    mode: ExecMode,
) -> Result<(thund::PathKind, Vec<RecordBatch>), Error> {
    let mut e = Engine::builder().build()?;
    e.create_view(
        ViewSpec::builder("v", sql)
            .window(WindowSpec::tumbling(Duration::from_secs(1)))
            .source("t", "ts", schema.clone())
            .output(OutputMode::Append)
            .mode(mode)
            .build()?,
    )?;
    for b in batches {
        e.push("t", b.clone())?;
    }
    let mut out = e.trigger()?.views[0].output.clone();
    out.extend(e.finish()?.views[0].output.clone());
    Ok((e.plan("v")?.path(), out))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// `SUM` and `AVG` used as window functions follow the aggregates' rule:
    /// over the whole partition and over a sliding frame (whose rows leave
    /// it again), a sum that does not fit `BIGINT` is `Error::Overflow`,
    /// else the exact value; an average is the exact sum over the count.
    /// DataFusion's own wrapped: `i64::MAX` and `1` in one partition summed
    /// to `i64::MIN`, exit 0.
    #[test]
    fn sums_and_averages_over_windows_are_exact_or_an_overflow(
        rows in prop::collection::vec((0i64..3, extreme_int()), 1..25),
    ) {
        // one row per millisecond, in order: the frames' order has no ties
        let ts: Vec<i64> = (0..rows.len() as i64).map(|i| i * 7).collect();
        let k: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let x: Vec<Option<i64>> = rows.iter().map(|r| r.1).collect();
        let b = ints(&k, &x, &ts);
        let sql = "SELECT k, ts, \
                   SUM(x) OVER (PARTITION BY k) AS whole, \
                   SUM(x) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS pair, \
                   AVG(x) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS mean \
                   FROM t";
        // the rule, row by row: (ts, k, whole, pair, mean bits)
        let sum = |xs: &[Option<i64>]| -> Option<i128> {
            let v: Vec<i128> = xs.iter().flatten().map(|&x| i128::from(x)).collect();
            (!v.is_empty()).then(|| v.iter().sum())
        };
        let mut want = Vec::new();
        let mut overflows = false;
        for (i, (&ki, &t)) in k.iter().zip(&ts).enumerate() {
            let part: Vec<Option<i64>> = (0..rows.len()).filter(|&j| k[j] == ki).map(|j| x[j]).collect();
            let before = (0..i).rev().find(|&j| k[j] == ki).map(|j| x[j]);
            let pair: Vec<Option<i64>> = before.into_iter().chain([x[i]]).collect();
            let (whole, two) = (sum(&part), sum(&pair));
            let fits = |s: Option<i128>| s.map_or(Some(None), |s| i64::try_from(s).ok().map(Some));
            let count = pair.iter().flatten().count() as f64;
            match (fits(whole), fits(two)) {
                (Some(w), Some(p)) => want.push((t, ki, w, p, two.map(|s| (s as f64 / count).to_bits()))),
                _ => overflows = true,
            }
        }
        want.sort();
        let [auto, rec] = both_modes(sql, &b.schema(), &[b]);
        for out in [auto, rec] {
            if overflows {
                prop_assert!(matches!(out, Err(Error::Overflow { .. })), "{:?}", out);
                continue;
            }
            let mut got = Vec::new();
            for b in out.expect("the exact values") {
                let t = column::<TimestampMillisecondArray>(&b, Some("ts"));
                let kk = column::<Int64Array>(&b, Some("k"));
                let whole = column::<Int64Array>(&b, Some("whole"));
                let pair = column::<Int64Array>(&b, Some("pair"));
                let mean = column::<Float64Array>(&b, Some("mean"));
                for r in 0..b.num_rows() {
                    got.push((
                        t.value(r),
                        kk.value(r),
                        whole.is_valid(r).then(|| whole.value(r)),
                        pair.is_valid(r).then(|| pair.value(r)),
                        mean.is_valid(r).then(|| mean.value(r).to_bits()),
                    ));
                }
            }
            got.sort();
            prop_assert_eq!(got, want.clone());
        }
    }
}

/// A `CASE` whose branches differ in type (`INT` and `BIGINT`): DataFusion's
/// planner types it as its first branch, `Int32`, and computes `Int64`, so
/// every batch of such a column failed at the first trigger (the paths with
/// different errors where it was a group key). It now runs on the recompute
/// path, an `Int64` column with the branches' values; an aggregate over it
/// whose own type does not move (`SUM`) stays incremental.
#[test]
fn a_case_datafusion_mistypes_runs_on_the_recompute_path() {
    let s: SchemaRef = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("x", DataType::Int32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let b = RecordBatch::try_new(
        s.clone(),
        vec![
            Arc::new(Int64Array::from(vec![7, 8])),
            Arc::new(arrow::array::Int32Array::from(vec![3, -1])),
            Arc::new(TimestampMillisecondArray::from(vec![10, 20])),
        ],
    )
    .expect("batch");
    let case = "CASE WHEN x > 0 THEN x ELSE k END";
    for (sql, auto, col, want) in [
        (
            format!("SELECT {case} AS c FROM t"),
            thund::PathKind::Recompute,
            "c",
            vec![3, 8],
        ),
        (
            format!("SELECT {case} AS c, COUNT(*) AS n FROM t GROUP BY {case}"),
            thund::PathKind::Recompute,
            "c",
            vec![3, 8],
        ),
        // a key the query does not show is kept by its type: recomputed
        (
            format!("SELECT k, COUNT(*) AS n FROM t GROUP BY k, {case}"),
            thund::PathKind::Recompute,
            "n",
            vec![1, 1],
        ),
        // an aggregate's argument is cast to the aggregate's type anyway
        (
            format!("SELECT k, SUM({case}) AS c FROM t GROUP BY k"),
            thund::PathKind::Incremental,
            "c",
            vec![3, 8],
        ),
    ] {
        for mode in [ExecMode::Auto, ExecMode::Recompute] {
            let (path, out) = run_mode(&sql, &s, std::slice::from_ref(&b), mode).expect(&sql);
            if mode == ExecMode::Auto {
                assert_eq!(path, auto, "{sql}");
            }
            let mut got: Vec<i64> = out
                .iter()
                .flat_map(|b| column::<Int64Array>(b, Some(col)).values().to_vec())
                .collect();
            got.sort();
            assert_eq!(got, want, "{sql} ({mode:?})");
        }
    }
}

/// A window function's `PARTITION BY` and `ORDER BY` are evaluated as
/// DataFusion evaluates them, on both paths: the sort that orders the
/// window's input must equal them (DataFusion cannot rebuild the window
/// with Þund's expressions), so arithmetic there wraps as DataFusion's does
/// (README, "Arithmetic"), and both paths agree. With the checked arithmetic
/// of the sort alone, `SUM(x) OVER (PARTITION BY k - 1)` failed with an
/// internal error of DataFusion's, and a rank ordered by `x * 2` failed on
/// the incremental path alone.
#[test]
fn window_function_keys_are_evaluated_alike_on_both_paths() {
    let b = ints(
        &[1, 1, 2],
        &[Some(i64::MAX), Some(3), Some(-4)],
        &[10, 20, 30],
    );
    let s = b.schema();
    let sql = "SELECT k, x, rn FROM (SELECT k, x, ROW_NUMBER() OVER \
               (PARTITION BY k ORDER BY x * 2 DESC) AS rn FROM t) AS b WHERE rn <= 1";
    let [auto, rec] = both_modes(sql, &s, std::slice::from_ref(&b));
    let (auto, rec) = (auto.expect("auto"), rec.expect("recompute"));
    assert_eq!(common::canon(&auto), common::canon(&rec));
    let sql = "SELECT k, x, SUM(x) OVER (PARTITION BY k - 1) AS s FROM t";
    let b = ints(&[1, 1, 2], &[Some(5), Some(3), Some(-4)], &[10, 20, 30]);
    let [auto, rec] = both_modes(sql, &s, &[b]);
    for out in [auto, rec] {
        let mut got: Vec<(i64, i64)> = Vec::new();
        for b in out.expect("a value") {
            let k = column::<Int64Array>(&b, Some("k"));
            let sum = column::<Int64Array>(&b, Some("s"));
            got.extend((0..b.num_rows()).map(|r| (k.value(r), sum.value(r))));
        }
        got.sort();
        // each row with its partition's sum
        assert_eq!(got, vec![(1, 8), (1, 8), (2, -4)]);
    }
}

/// Decimal arithmetic whose result has more digits than its type's
/// precision fails, on both paths: arrow's kernels checked only that it fit
/// 128 bits, so `DECIMAL(38, 2)` values `2e17` and `5e16` multiplied gave a
/// `DECIMAL(38, 4)` of 39 digits, written as `1e33`, exit 0. A product that
/// fits is the exact value.
#[test]
fn decimal_arithmetic_past_its_precision_is_an_error_on_both_paths() {
    let s = schema(DataType::Decimal128(38, 2));
    let sql =
        "SELECT k, SUM(x * CAST(50000000000000000.00 AS DECIMAL(38, 2))) AS a FROM t GROUP BY k";
    let window = WindowSpec::tumbling(Duration::from_secs(1));
    // 2e17, raw at scale 2
    let big = decimals(38, 2, &[2 * 10i128.pow(19)], &[10]);
    let [inc, rec] = both(sql, &s, window.clone(), &[big]);
    for out in [inc, rec] {
        let err = out.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            err.contains("is too large to store in a Decimal128 of precision 38"),
            "{err}"
        );
    }
    // 5.00: 5 × 5e16 = 2.5e17, exact at scale 4
    let small = decimals(38, 2, &[500], &[10]);
    let [inc, rec] = both(sql, &s, window, &[small]);
    for out in [inc, rec] {
        let out = out.expect("a value");
        let a = column::<arrow::array::Decimal128Array>(&out[0], Some("a"));
        assert_eq!(a.value(0), 25 * 10i128.pow(16) * 10_000);
    }
}
