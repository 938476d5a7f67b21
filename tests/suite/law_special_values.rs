//! The law over hostile values: random disordered streams whose integers
//! reach `i64::MIN`/`i64::MAX` and whose floats include NaN (both signs),
//! ±0.0, ±∞ and NULL, split into random triggers, for every output mode and
//! 1 or 2 workers. The incremental and the recompute path give the same
//! answer, and that answer is the README's arithmetic contract computed here
//! by a plain fold (`i128` sums, PostgreSQL's float order): not DataFusion,
//! whose grouped `MIN`/`MAX` over NaN depend on row order and whose integer
//! `SUM` wraps.
//!
//! Integer sums decide the outcome: when no subset of a group's rows can
//! overflow, both paths must emit the fold's rows; when a group's final sum
//! does not fit, both must fail with `Error::Overflow`; in between (only a
//! partial sum seen at some trigger does not fit) both must agree.

use crate::common;

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{answer, assign, cases, ts, Win};
use proptest::prelude::*;
use thund::{Engine, Error, ExecMode, OutputMode, PathKind, ViewSpec, WindowSpec};

/// One row: group `k`, integer `v`, float `f`.
#[derive(Clone, Debug)]
struct Row {
    k: i64,
    v: Option<i64>,
    f: Option<f64>,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

fn batch(rows: &[(i64, Row)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1.k))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1.v))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.1.f))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.0),
            )),
        ],
    )
    .expect("test batch")
}

/// What the queries group by.
#[derive(Clone, Copy, Debug)]
enum Key {
    K,
    F,
    None,
}

/// The queries, what they group by, and whether `f > 0` filters them.
const QUERIES: &[(&str, Key, bool)] = &[
    (
        "SELECT k, COUNT(*) AS c, COUNT(v) AS cv, SUM(v) AS s, MIN(v) AS mn, MAX(v) AS mx, \
         MIN(f) AS mnf, MAX(f) AS mxf, SUM(f) AS sf, AVG(f) AS af FROM t GROUP BY k",
        Key::K,
        false,
    ),
    (
        "SELECT f, COUNT(*) AS c, SUM(v) AS s, MIN(v) AS mn, MAX(v) AS mx FROM t GROUP BY f",
        Key::F,
        false,
    ),
    (
        "SELECT COUNT(*) AS c, MIN(f) AS mnf, MAX(f) AS mxf, SUM(v) AS s FROM t",
        Key::None,
        false,
    ),
    (
        "SELECT k, COUNT(*) AS c, MAX(v) AS mx, MIN(f) AS mnf, SUM(v) AS s FROM t \
         WHERE f > 0 GROUP BY k",
        Key::K,
        true,
    ),
];

/// The contract's float canon: `-0.0` is `0.0`, every NaN the positive one.
fn canon_f(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

/// PostgreSQL's order: NaN above every number and equal to itself.
fn pg_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).expect("numbers compare"),
    }
}

/// A float cell as `common::canon` prints it.
fn show_f(x: Option<f64>) -> String {
    x.map_or("NULL".into(), |x| format!("{x:.9e}"))
}

fn show_i<T: ToString>(x: Option<T>) -> String {
    x.map_or("NULL".into(), |x| x.to_string())
}

/// The fold over one group's rows.
#[derive(Default)]
struct Fold {
    count: i64,
    count_v: i64,
    /// Sum of the positive and of the negative `v`s, apart: every partial
    /// sum lies between them.
    pos: i128,
    neg: i128,
    min_v: Option<i64>,
    max_v: Option<i64>,
    count_f: i64,
    sum_f: f64,
    min_f: Option<f64>,
    max_f: Option<f64>,
}

impl Fold {
    fn add(&mut self, r: &Row) {
        self.count += 1;
        if let Some(v) = r.v {
            self.count_v += 1;
            if v >= 0 {
                self.pos += i128::from(v);
            } else {
                self.neg += i128::from(v);
            }
            self.min_v = Some(self.min_v.map_or(v, |m| m.min(v)));
            self.max_v = Some(self.max_v.map_or(v, |m| m.max(v)));
        }
        if let Some(f) = r.f.map(canon_f) {
            self.count_f += 1;
            self.sum_f += f;
            let lower = |m: f64| if pg_cmp(f, m).is_lt() { f } else { m };
            let higher = |m: f64| if pg_cmp(f, m).is_gt() { f } else { m };
            self.min_f = Some(self.min_f.map_or(f, lower));
            self.max_f = Some(self.max_f.map_or(f, higher));
        }
    }

    fn sum_v(&self) -> Option<i128> {
        (self.count_v > 0).then_some(self.pos + self.neg)
    }
}

fn fits(x: i128) -> bool {
    i64::try_from(x).is_ok()
}

/// What the contract says a run must end in.
#[derive(Debug, PartialEq)]
enum Expect {
    /// No partial sum of any group can overflow: exactly these rows.
    Rows(Vec<String>),
    /// Some group's final sum does not fit: both paths fail.
    Overflow,
    /// Only partial sums may overflow: the paths must agree.
    Agree,
}

/// The fold oracle: assign rows to windows by the late rule, group, fold.
fn oracle(c: &Case) -> (Expect, u64) {
    let (_, key, filtered) = QUERIES[c.query];
    let triggers: Vec<Vec<(usize, (i64, Row))>> = c
        .triggers
        .iter()
        .map(|t| t.iter().map(|r| (0, r.clone())).collect())
        .collect();
    let (windows, late) = assign(&triggers, 1, c.lateness, c.win, |r: &(i64, Row)| r.0);
    let (mut lines, mut all_safe, mut any_final) = (Vec::new(), true, false);
    for ((start, end), rows) in windows {
        let mut groups: BTreeMap<Option<u64>, (String, Fold)> = BTreeMap::new();
        for (_, r) in &rows[0] {
            if filtered && !r.f.is_some_and(|f| pg_cmp(canon_f(f), 0.0).is_gt()) {
                continue;
            }
            let (id, shown) = match key {
                Key::K => (Some(r.k as u64), r.k.to_string()),
                Key::F => (r.f.map(|f| canon_f(f).to_bits()), show_f(r.f.map(canon_f))),
                Key::None => (None, String::new()),
            };
            groups
                .entry(id)
                .or_insert_with(|| (shown, Fold::default()))
                .1
                .add(r);
        }
        if groups.is_empty() && matches!(key, Key::None) {
            groups.insert(None, (String::new(), Fold::default()));
        }
        for (shown, g) in groups.values() {
            all_safe &= fits(g.pos) && fits(g.neg);
            any_final |= g.sum_v().is_some_and(|s| !fits(s));
            let cells = match c.query {
                0 => vec![
                    shown.clone(),
                    g.count.to_string(),
                    g.count_v.to_string(),
                    show_i(g.sum_v()),
                    show_i(g.min_v),
                    show_i(g.max_v),
                    show_f(g.min_f),
                    show_f(g.max_f),
                    show_f((g.count_f > 0).then_some(g.sum_f)),
                    show_f((g.count_f > 0).then(|| g.sum_f / g.count_f as f64)),
                ],
                1 => vec![
                    shown.clone(),
                    g.count.to_string(),
                    show_i(g.sum_v()),
                    show_i(g.min_v),
                    show_i(g.max_v),
                ],
                2 => vec![
                    g.count.to_string(),
                    show_f(g.min_f),
                    show_f(g.max_f),
                    show_i(g.sum_v()),
                ],
                _ => vec![
                    shown.clone(),
                    g.count.to_string(),
                    show_i(g.max_v),
                    show_f(g.min_f),
                    show_i(g.sum_v()),
                ],
            };
            lines.push(format!("{}|{}|{}", ts(start), ts(end), cells.join("|")));
        }
    }
    lines.sort();
    let expect = if any_final {
        Expect::Overflow
    } else if all_safe {
        Expect::Rows(lines)
    } else {
        Expect::Agree
    };
    (expect, late)
}

#[derive(Clone, Debug)]
struct Case {
    triggers: Vec<Vec<(i64, Row)>>,
    lateness: i64,
    win: Win,
    query: usize,
    mode: OutputMode,
    workers: usize,
    /// Whether the window is written in the SQL (`FROM HOP(t, ts, …)`) instead of the spec.
    in_sql: bool,
}

/// Floats: mostly exact eighths (so sums do not depend on their order), and
/// often a NaN of either sign, ±0.0, ±∞ or NULL.
fn float() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        6 => (-80i64..80).prop_map(|x| Some(x as f64 / 8.0)),
        1 => prop_oneof![
            Just(Some(f64::NAN)),
            Just(Some(-f64::NAN)),
            Just(Some(0.0)),
            Just(Some(-0.0)),
            Just(Some(f64::INFINITY)),
            Just(Some(f64::NEG_INFINITY)),
            Just(None),
        ],
    ]
}

/// Integers: small, NULL, or at the limits of `i64`, with a per-case weight
/// for the limits so that some runs overflow and most do not.
fn integer(limits: u32) -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        40 => (-50i64..50).prop_map(Some),
        4 => Just(None),
        limits => prop_oneof![
            Just(i64::MAX),
            Just(i64::MIN),
            (i64::MAX - 3..=i64::MAX),
            (i64::MIN..i64::MIN + 3),
        ]
        .prop_map(Some),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let stream = (0u32..3).prop_flat_map(|limits| {
        common::stream_of(
            (0i64..3, integer(limits), float()).prop_map(|(k, v, f)| Row { k, v, f }),
            0..80,
        )
    });
    (
        stream,
        0..QUERIES.len(),
        prop_oneof![
            Just(OutputMode::Append),
            Just(OutputMode::Update),
            Just(OutputMode::Complete)
        ],
        1usize..=2,
        any::<bool>(),
    )
        .prop_map(
            |((triggers, lateness, win), query, mode, workers, in_sql)| Case {
                triggers,
                lateness,
                win,
                query,
                mode,
                workers,
                in_sql,
            },
        )
}

/// A view over `t` in 10 s tumbling windows: declared in the spec, or (`in_sql`) written
/// in the SQL as `FROM TUMBLE(t, ts, INTERVAL '10' SECOND)`.
fn tumbling_10s(name: &str, sql: &str, in_sql: bool) -> thund::spec::ViewSpecBuilder {
    if in_sql {
        let sql = common::window_in_sql(sql, "TUMBLE(t, ts, INTERVAL '10' SECOND)");
        ViewSpec::builder(name, &sql).source("t", "ts", schema())
    } else {
        ViewSpec::builder(name, sql)
            .source("t", "ts", schema())
            .window(WindowSpec::tumbling(Duration::from_secs(10)))
    }
}

/// How one run ended.
#[derive(Debug, PartialEq)]
enum Outcome {
    Rows(Vec<String>, u64),
    Overflow,
}

fn run(c: &Case, exec: ExecMode) -> Result<Outcome, TestCaseError> {
    let query = QUERIES[c.query].0;
    let sql = if c.in_sql {
        common::window_in_sql(query, &common::hop_call(c.win))
    } else {
        query.to_string()
    };
    let mut spec = ViewSpec::builder("v", &sql).source("t", "ts", schema());
    if !c.in_sql {
        spec = spec.window(WindowSpec::hopping(
            Duration::from_millis(c.win.size as u64),
            Duration::from_millis(c.win.slide as u64),
        ));
    }
    let spec = spec
        .allowed_lateness(Duration::from_millis(c.lateness as u64))
        .output(c.mode)
        .mode(exec)
        .build()
        .expect("spec");
    let mut e = Engine::builder()
        .workers(c.workers)
        .build()
        .expect("engine");
    e.create_view(spec).expect("view");
    if exec == ExecMode::Auto {
        prop_assert_eq!(e.plan("v").expect("plan").path(), PathKind::Incremental);
    }
    let mut outs: Vec<Vec<RecordBatch>> = Vec::new();
    for trig in &c.triggers {
        e.push("t", batch(trig)).expect("push");
        match e.trigger() {
            Ok(r) => outs.push(r.views[0].output.clone()),
            Err(Error::Overflow { .. }) => return Ok(Outcome::Overflow),
            Err(other) => return Err(TestCaseError::fail(format!("trigger: {other}"))),
        }
    }
    match e.finish() {
        Ok(r) => outs.push(r.views[0].output.clone()),
        Err(Error::Overflow { .. }) => return Ok(Outcome::Overflow),
        Err(other) => return Err(TestCaseError::fail(format!("finish: {other}"))),
    }
    let late = e.counters("v").expect("counters").late_rows_dropped;
    Ok(Outcome::Rows(answer(c.mode, &outs), late))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]

    #[test]
    fn both_paths_follow_the_arithmetic_contract_on_hostile_values(c in case()) {
        let (expect, late) = oracle(&c);
        let inc = run(&c, ExecMode::Auto)?;
        let rec = run(&c, ExecMode::Recompute)?;
        match expect {
            Expect::Rows(rows) => {
                let want = Outcome::Rows(rows, late);
                prop_assert_eq!(&inc, &want, "incremental vs fold");
                prop_assert_eq!(&rec, &want, "recompute vs fold");
            }
            Expect::Overflow => {
                prop_assert_eq!(&inc, &Outcome::Overflow, "incremental");
                prop_assert_eq!(&rec, &Outcome::Overflow, "recompute");
            }
            Expect::Agree => prop_assert_eq!(&inc, &rec, "the paths disagree"),
        }
    }
}

/// `COUNT(DISTINCT f)` over NaN of both signs, ±0.0, ±∞ and NULL counts the
/// contract's values (floats are canonical: one NaN, one zero; NULL is not
/// a value), the same on both paths and with `FILTER`; `SELECT DISTINCT`
/// shows one row per such value.
#[test]
fn distinct_floats_follow_the_canonical_values_on_both_paths() {
    let fs = [
        Some(f64::NAN),
        Some(-f64::NAN),
        Some(-0.0),
        Some(0.0),
        Some(1.0),
        Some(f64::INFINITY),
        Some(f64::NEG_INFINITY),
        None,
        Some(1.0),
    ];
    let rows: Vec<(i64, Row)> = fs
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let row = Row {
                k: 0,
                v: Some(i as i64),
                f: *f,
            };
            (1_000 + i as i64, row)
        })
        .collect();
    // NaN, 0, 1, +inf, -inf; with v > 2 (rows 3..): 0, 1, +inf, -inf
    let expected = vec!["0|5|4".to_string()];
    let distinct_rows = 5;
    for (workers, in_sql) in [(1, false), (2, false), (1, true), (2, true)] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let run = |sql: &str| {
                let mut e = Engine::builder().workers(workers).build().expect("engine");
                e.create_view(
                    tumbling_10s("v", sql, in_sql)
                        .mode(exec)
                        .build()
                        .expect("spec"),
                )
                .expect("view");
                let want = match exec {
                    ExecMode::Auto => PathKind::Incremental,
                    _ => PathKind::Recompute,
                };
                assert_eq!(e.plan("v").expect("plan").path(), want, "{sql}");
                e.push("t", batch(&rows)).expect("push");
                e.trigger().expect("trigger");
                let out = e.finish().expect("finish").views[0].output.clone();
                common::canon(&out)
                    .into_iter()
                    .map(|r| r.splitn(3, '|').nth(2).unwrap_or_default().to_string())
                    .collect::<Vec<_>>()
            };
            let got = run(
                "SELECT k, COUNT(DISTINCT f) AS df, COUNT(DISTINCT f) FILTER (WHERE v > 2) AS dfp \
                 FROM t GROUP BY k",
            );
            assert_eq!(
                got, expected,
                "{exec:?}, {workers} workers, in SQL: {in_sql}"
            );
            // beside a second argument kept per value, of another type (its
            // entries hold row-format bytes, encoded after the canonical float)
            let got = run(
                "SELECT k, COUNT(DISTINCT f) AS df, COUNT(DISTINCT v) FILTER (WHERE v > 2) AS dvp \
                 FROM t GROUP BY k",
            );
            assert_eq!(
                got,
                vec!["0|5|6".to_string()],
                "{exec:?}, {workers} workers, in SQL: {in_sql}"
            );
            let got = run("SELECT DISTINCT f FROM t WHERE f IS NOT NULL");
            assert_eq!(
                got.len(),
                distinct_rows,
                "{exec:?}, {workers} workers: {got:?}"
            );
        }
    }
}

/// A view kept per value (`COUNT(DISTINCT …)`) merges each group's float sum
/// change by change in Update mode: an infinity that stays, then meets its
/// opposite, shows as on the recompute path at every trigger (∞, ∞, NaN),
/// and so do sums of exact values.
#[test]
fn per_value_float_sums_follow_each_trigger_on_both_paths() {
    let row = |t: i64, v: i64, f: f64| {
        (
            t,
            Row {
                k: 0,
                v: Some(v),
                f: Some(f),
            },
        )
    };
    let triggers = [
        vec![row(1_000, 0, f64::INFINITY), row(1_001, 1, 0.5)],
        vec![row(1_002, 0, f64::INFINITY), row(1_003, 1, 0.25)],
        vec![row(1_004, 2, 1.0)],
        vec![row(1_005, 3, f64::NEG_INFINITY)],
    ];
    let run = |exec: ExecMode, in_sql: bool| {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(
            tumbling_10s(
                "v",
                "SELECT k, COUNT(DISTINCT v % 2) AS dv, SUM(f) AS sf, \
                 SUM(f) FILTER (WHERE v > 0) AS sfp FROM t GROUP BY k",
                in_sql,
            )
            .output(OutputMode::Update)
            .mode(exec)
            .build()
            .expect("spec"),
        )
        .expect("view");
        let mut out = Vec::new();
        for t in &triggers {
            e.push("t", batch(t)).expect("push");
            out.push(common::canon(
                &e.trigger().expect("trigger").views[0].output,
            ));
        }
        out.push(common::canon(&e.finish().expect("finish").views[0].output));
        out
    };
    let inc = run(ExecMode::Auto, false);
    assert_eq!(inc, run(ExecMode::Recompute, false));
    assert_eq!(inc, run(ExecMode::Auto, true), "the window in SQL");
    assert_eq!(inc, run(ExecMode::Recompute, true), "the window in SQL");
    // the sums the contract gives, trigger by trigger
    let sums: Vec<String> = inc
        .iter()
        .flatten()
        .map(|r| r.split('|').skip(4).take(2).collect::<Vec<_>>().join("|"))
        .collect();
    assert_eq!(
        sums,
        [
            "inf|5.000000000e-1",
            "inf|7.500000000e-1",
            "inf|1.750000000e0",
            "NaN|-inf",
            "NaN|-inf"
        ]
    );
}

/// `SUM(DISTINCT v)` at the integer limits: a value seen twice is summed
/// once (`i64::MAX` twice fits), and a distinct set whose sum does not fit
/// is `Error::Overflow` on both paths, never a wrapped value.
#[test]
fn sum_of_distinct_values_at_the_limits_is_the_same_on_both_paths() {
    let ev = |t: i64, v: i64| common::Ev {
        t,
        k: 1,
        g: "a".into(),
        v: Some(v),
        f: 0.0,
    };
    // the values, and the (sum, distinct count) expected, or an overflow
    type Case = (Vec<i64>, Option<(i64, i64)>);
    let cases: Vec<Case> = vec![
        (vec![i64::MAX, i64::MAX, i64::MAX], Some((i64::MAX, 1))),
        (vec![i64::MIN, i64::MAX, i64::MIN], Some((-1, 2))),
        (vec![i64::MAX, 1, i64::MAX], None),
        (vec![i64::MIN, -1, -1], None),
    ];
    for (values, want) in cases {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let mut e = Engine::builder().build().expect("engine");
            e.create_view(
                ViewSpec::builder(
                    "v",
                    "SELECT k, SUM(DISTINCT v) AS s, COUNT(DISTINCT v) AS n FROM t GROUP BY k",
                )
                .source("t", "ts", common::schema())
                .window(WindowSpec::tumbling(Duration::from_secs(10)))
                .output(OutputMode::Append)
                .mode(exec)
                .build()
                .expect("spec"),
            )
            .expect("view");
            let expected_path = match exec {
                ExecMode::Auto => PathKind::Incremental,
                _ => PathKind::Recompute,
            };
            let rows: Vec<common::Ev> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| ev(i as i64, v))
                .collect();
            e.push("t", common::batch(&rows)).expect("push");
            let got = e.trigger().and_then(|_| e.finish());
            match (want, got) {
                (Some((s, a)), Ok(r)) => {
                    let v = &r.views[0];
                    assert_eq!(v.path, expected_path);
                    let b = &v.output[0];
                    let sum = b
                        .column(3)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .expect("sum");
                    let n = b
                        .column(4)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .expect("count");
                    assert_eq!((sum.value(0), n.value(0)), (s, a), "{values:?} {exec:?}");
                }
                (None, Err(Error::Overflow { .. })) => {}
                (w, g) => panic!("{values:?} {exec:?}: want {w:?}, got {g:?}"),
            }
        }
    }
}
