//! Queries the incremental path must read as the recompute path (and SQL)
//! does, on random streams: each query takes the incremental path and emits
//! what the recompute path emits at every trigger.
//!
//! * WHERE comes first: an expression of the select list, the GROUP BY, an
//!   aggregate's argument or its FILTER that would fail on a row WHERE
//!   refuses (a cast of an infinity to an integer, a division by zero) is
//!   not evaluated on that row; without the WHERE both paths fail alike.
//!   Nor is an aggregate's argument on a row its FILTER refuses.
//! * AND and OR evaluate left to right, row by row: the right operand only
//!   on the rows the left does not decide, whatever rows share a batch. So
//!   `v <> 0 AND 100 / v > 1` (also as a boolean CASE, which DataFusion
//!   rewrites into AND/OR) guards the division on both paths, and
//!   `100 / v > 1 AND v <> 0` fails on both.
//! * Functions DataFusion only runs once its optimizer simplified them
//!   (`COALESCE`, `NVL`) run, and so do the datetime, string, unicode and
//!   regular-expression functions (`EXTRACT`, `SUBSTR`, `~`, …).
//! * A result whose NaN comes from arithmetic (`inf + -inf`, with the
//!   processor's sign) is the one NaN the contract has: Update mode does
//!   not see a change where only its sign changed.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{triggers, Triggers};
use proptest::prelude::*;
use thund::{ExecMode, ViewSpec, WindowSpec};

/// Queries whose WHERE refuses every row another part cannot evaluate.
const GUARDED: &[&str] = &[
    "SELECT CAST(f AS BIGINT) AS fi, COUNT(*) AS n FROM t WHERE ABS(f) < 10 GROUP BY CAST(f AS BIGINT)",
    "SELECT k, SUM(CAST(f AS BIGINT)) AS sf, MIN(CAST(f AS BIGINT)) AS lo FROM t WHERE ABS(f) < 10 GROUP BY k",
    "SELECT k, SUM(100 / v) AS q FROM t WHERE v <> 0 GROUP BY k",
    "SELECT k, COUNT(*) FILTER (WHERE 100 / v > 1) AS c FROM t WHERE v <> 0 GROUP BY k",
    "SELECT COUNT(DISTINCT CAST(f AS BIGINT)) AS d FROM t WHERE ABS(f) < 10",
    // an aggregate's FILTER guards its argument
    "SELECT k, SUM(-v) FILTER (WHERE v > -5) AS s, COUNT(100 / v) FILTER (WHERE v <> 0) AS c \
     FROM t GROUP BY k",
    // also an argument kept per value, alone or beside another
    "SELECT k, COUNT(DISTINCT 100 / v) FILTER (WHERE v <> 0) AS d FROM t GROUP BY k",
    "SELECT k, COUNT(DISTINCT 100 / v) FILTER (WHERE v <> 0) AS d, COUNT(DISTINCT s) AS ds \
     FROM t GROUP BY k",
    // a subexpression only filtered arguments hold is not shared with a
    // projection that evaluates it on every row
    "SELECT k, SUM(ABS(-v)) FILTER (WHERE v > -5) AS a, MAX(-v) FILTER (WHERE v > -5) AS b \
     FROM t GROUP BY k",
    "SELECT SUM(ABS(-v)) FILTER (WHERE NOT k <> COALESCE(v, -v)) AS a, COUNT(*) AS n FROM t",
    // an aggregate the simplified rest of the query no longer reads is not
    // evaluated (the recompute path's optimizer drops it)
    "SELECT k, COUNT(v) AS c FROM t GROUP BY k \
     HAVING CASE WHEN 2 > 0 THEN COUNT(v) ELSE SUM(100 / v) END > 0",
    "SELECT k, COUNT(v) AS c FROM t GROUP BY k \
     ORDER BY CASE WHEN 2 > 0 THEN COUNT(v) ELSE SUM(100 / v) END, k LIMIT 2",
    // nor shares a subexpression with a filtered argument on every row
    "SELECT SUM(CASE WHEN 100 / v > 1 THEN 1 ELSE 0 END) FILTER (WHERE v <> 0) AS s, \
     0 * COUNT(100 / v) AS z, COUNT(*) AS n FROM t",
    // a window whose rows all fail the FILTER evaluates the argument on no
    // rows, not its CASE's constant
    "SELECT SUM(ABS(CASE WHEN v <> v THEN -9223372036854775807 - 1 ELSE v END)) \
     FILTER (WHERE v > 6) AS s, COUNT(*) AS n FROM t",
];

/// The same queries' failing parts, unguarded.
const UNGUARDED: &[&str] = &[
    "SELECT CAST(f AS BIGINT) AS fi, COUNT(*) AS n FROM t GROUP BY CAST(f AS BIGINT)",
    "SELECT k, SUM(100 / v) AS q FROM t GROUP BY k",
];

/// Guards written with AND, OR and a boolean CASE, in WHERE, FILTER, an
/// aggregate's argument and a sort.
const GUARDED_LOGIC: &[&str] = &[
    "SELECT k, COUNT(*) AS n FROM t WHERE v <> 0 AND 100 / v > 1 GROUP BY k",
    "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM t WHERE v = 0 OR 100 / v > 1 GROUP BY k",
    "SELECT k, COUNT(*) FILTER (WHERE v <> 0 AND 100 / v > 1) AS c FROM t GROUP BY k",
    "SELECT k, COUNT(*) AS n FROM t WHERE CASE WHEN v <> 0 THEN 100 / v > 1 ELSE false END GROUP BY k",
    "SELECT k, SUM(CASE WHEN v <> 0 AND 100 / v > 1 THEN 1 ELSE 0 END) AS s FROM t GROUP BY k",
    // in the sort of a query over the aggregate (the rest of the query)
    "SELECT k, SUM(v) AS s FROM t WHERE v > -1000 GROUP BY k \
     ORDER BY CASE WHEN SUM(v) <> 0 AND 1000 / SUM(v) > 1 THEN 0 ELSE 1 END, k LIMIT 2",
];

/// The same guard the other way round, which guards nothing: also where
/// the failing conjunct calls a function, which DataFusion's filter
/// pushdown moved after the comparison (so the recompute path passed).
const UNGUARDED_LOGIC: &[&str] = &[
    "SELECT k, COUNT(*) AS n FROM t WHERE 100 / v > 1 AND v <> 0 GROUP BY k",
    "SELECT k, COUNT(*) AS n FROM t WHERE ABS(100 / v) > 1 AND v <> 0 GROUP BY k",
];

/// Functions of DataFusion's datetime, string, unicode and regular
/// expression families (enabled as features of the `datafusion` crate).
const FUNCTIONS: &[&str] = &[
    "SELECT SUBSTR(s, 1, 1) AS c, LEFT(s, 2) AS l, COUNT(*) AS n FROM t GROUP BY SUBSTR(s, 1, 1), LEFT(s, 2)",
    "SELECT EXTRACT(SECOND FROM ts) AS sec, date_part('minute', ts) AS m, COUNT(*) AS n \
     FROM t GROUP BY EXTRACT(SECOND FROM ts), date_part('minute', ts)",
    "SELECT k, CHARACTER_LENGTH(s) AS cl, MAX(REVERSE(s)) AS r FROM t GROUP BY k, CHARACTER_LENGTH(s)",
    "SELECT REGEXP_REPLACE(s, '[^a-z]', '_') AS r, COUNT(*) FILTER (WHERE s ~ '^[a-z]') AS az \
     FROM t GROUP BY REGEXP_REPLACE(s, '[^a-z]', '_')",
    "SELECT date_trunc('second', ts) AS sec, STRPOS(s, 'n') AS p, COUNT(*) AS n \
     FROM t GROUP BY date_trunc('second', ts), STRPOS(s, 'n')",
];

/// Simplified functions, and float sums that are NaN.
const SIMPLIFIED_AND_NAN: &[&str] = &[
    "SELECT s, SUM(f) AS sf FROM t GROUP BY s",
    "SELECT s, AVG(f) AS af, MAX(f) AS mf FROM t GROUP BY s",
    "SELECT k, SUM(f) FILTER (WHERE NOT isnan(f)) AS sf FROM t GROUP BY k",
    "SELECT COALESCE(s, 'none') AS s2, COUNT(*) AS n FROM t GROUP BY COALESCE(s, 'none')",
    "SELECT NVL(s, 'x') AS s2, MIN(f) AS lo, SUM(COALESCE(f, 0.25)) AS sf FROM t GROUP BY NVL(s, 'x')",
];

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

type Row = (i64, Option<&'static str>, Option<i64>, Option<f64>, i64);

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.3))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.4),
            )),
        ],
    )
    .expect("batch")
}

type Case = Triggers<Vec<Row>>;

/// Rows whose float column takes the values `f`.
fn case(f: Vec<Option<f64>>) -> impl Strategy<Value = Case> {
    let s = prop::sample::select(vec![Some("a"), Some(""), Some("none"), Some("ä€ n"), None]);
    let v = prop::sample::select(vec![
        Some(0),
        Some(1),
        Some(-3),
        Some(7),
        Some(i64::MIN),
        None,
    ]);
    let row = (0i64..3, s, v, prop::sample::select(f), 0i64..9_000);
    triggers(prop::collection::vec(row, 0..12))
}

/// Every trigger's rows and the end of the stream's, or the first error.
fn run(c: &Case, sql: &str, exec: ExecMode) -> thund::Result<Vec<Vec<String>>> {
    let spec = ViewSpec::builder("v", sql)
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(3)))
        .allowed_lateness(Duration::from_millis(500))
        .output(c.mode)
        .mode(exec)
        .build()?;
    common::outputs(spec, c, |rows| batch(rows))
}

/// Each query runs on both paths and they agree at every trigger.
fn agree(c: &Case, queries: &[&str]) -> Result<(), TestCaseError> {
    for sql in queries {
        let want = run(c, sql, ExecMode::Recompute);
        prop_assert!(want.is_ok(), "{sql}: {want:?}");
        let got = run(c, sql, ExecMode::Auto);
        prop_assert!(got.is_ok(), "{sql}: {got:?}");
        prop_assert_eq!(got.ok(), want.ok(), "{}", sql);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(12)))]

    #[test]
    fn what_where_refuses_is_never_evaluated_on_either_path(
        c in case(vec![
            Some(f64::INFINITY), Some(f64::NEG_INFINITY), Some(f64::NAN), Some(1e300),
            Some(1.5), Some(-0.0), Some(-7.0), None,
        ]).prop_map(|mut c| {
            // every case holds a row no query can evaluate unguarded
            c.triggers[0].push((0, None, Some(0), Some(f64::INFINITY), 100));
            c
        })
    ) {
        agree(&c, GUARDED)?;
        for sql in UNGUARDED {
            for exec in [ExecMode::Auto, ExecMode::Recompute] {
                let r = run(&c, sql, exec);
                prop_assert!(
                    matches!(r, Err(thund::Error::Evaluation { .. })),
                    "{sql} ({exec:?}): {r:?}"
                );
            }
        }
    }

    #[test]
    fn and_or_guard_left_to_right_on_both_paths_in_any_batch(
        c in case(vec![Some(1.5), None]).prop_map(|mut c| {
            c.triggers[0].push((0, None, Some(0), None, 100));
            c
        })
    ) {
        agree(&c, GUARDED_LOGIC)?;
        for (sql, exec) in UNGUARDED_LOGIC
            .iter()
            .flat_map(|q| [(q, ExecMode::Auto), (q, ExecMode::Recompute)])
        {
            let r = run(&c, sql, exec);
            prop_assert!(
                matches!(&r, Err(thund::Error::Evaluation { .. })),
                "{sql} ({exec:?}): {r:?}"
            );
        }
    }

    #[test]
    fn functions_and_nan_results_agree_on_both_paths(
        // sums of these are exact in any order: only infinities make a NaN
        c in case(vec![
            Some(f64::INFINITY), Some(f64::NEG_INFINITY), Some(f64::NAN), Some(1.5),
            Some(-1.5), Some(0.25), Some(-0.0), None,
        ])
    ) {
        agree(&c, SIMPLIFIED_AND_NAN)?;
        agree(&c, FUNCTIONS)?;
    }
}

/// A sum that is NaN (from `inf + -inf`: the processor's negative NaN) and
/// then takes a NaN row (the positive one pushed batches hold) still shows
/// NaN: Update mode emits nothing for it, on either path.
#[test]
fn a_nan_that_changes_sign_is_no_change() {
    let row = |f: f64, t: i64| (1, Some("a"), None, Some(f), t);
    let c = Triggers {
        triggers: vec![
            vec![row(f64::INFINITY, 1)],
            vec![row(f64::NEG_INFINITY, 2)],
            vec![row(f64::NAN, 3)],
            vec![row(2.5, 4), row(f64::NAN, 5)],
        ],
        mode: thund::OutputMode::Update,
        workers: 1,
    };
    let sql = "SELECT s, SUM(f) AS sf FROM t GROUP BY s";
    let want = run(&c, sql, ExecMode::Recompute).expect("recompute");
    let shown: Vec<usize> = want.iter().map(Vec::len).collect();
    // inf, NaN, nothing, nothing, and the final row at the end
    assert_eq!(shown, [1, 1, 0, 0, 1], "{want:?}");
    assert_eq!(run(&c, sql, ExecMode::Auto).expect("incremental"), want);
}

/// A guard that DataFusion's `AND` kept on a batch with few rows it lets
/// through (the right operand evaluated on those alone) and broke on a
/// window's rows (evaluated on all): the incremental path emitted rows, the
/// recompute path failed dividing by zero. Both now emit the same rows.
#[test]
fn a_guard_holds_however_its_rows_are_batched() {
    let row = |v: i64, t: i64| (1, None, Some(v), None, t);
    // one trigger: a tenth of its rows pass the guard; in the first window, half
    let mut rows = vec![row(5, 1_000), row(0, 2_000)];
    rows.extend((0..8).map(|i| row(0, 3_000 + i)));
    rows.push(row(5, 9_000));
    for mode in [thund::OutputMode::Append, thund::OutputMode::Update] {
        let c = Triggers {
            triggers: vec![rows.clone()],
            mode,
            workers: 1,
        };
        for sql in GUARDED_LOGIC {
            let want = run(&c, sql, ExecMode::Recompute);
            let got = run(&c, sql, ExecMode::Auto);
            assert!(want.is_ok(), "{sql} ({mode:?}): {want:?}");
            assert_eq!(got.ok(), want.ok(), "{sql} ({mode:?})");
        }
    }
}

/// View `v` of `sql` over `t` (tumbling 3 s windows) made on `exec`'s path.
fn create(sql: &str, exec: ExecMode) -> Result<(), thund::Error> {
    let spec = ViewSpec::builder("v", sql)
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(3)))
        .mode(exec)
        .build()?;
    thund::Engine::builder().build()?.create_view(spec)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(12)))]

    /// A query whose condition, simplified, is always false reads no row on
    /// the recompute path (DataFusion's optimizer drops what lies below it,
    /// as PostgreSQL evaluates nothing below a false one-time filter), so a
    /// group key that divides by zero is never evaluated; `Auto` takes that
    /// path too, saying why, and the two agree.
    #[test]
    fn a_query_that_reads_no_row_evaluates_nothing_on_either_path(
        c in case(vec![Some(1.5), None]).prop_map(|mut c| {
            c.triggers[0].push((0, None, Some(0), None, 100));
            c
        })
    ) {
        let sql = "SELECT 100 / v AS q, COUNT(*) AS n FROM t GROUP BY 100 / v \
                   HAVING 0 * COUNT(*) > 0";
        let spec = |exec| {
            ViewSpec::builder("v", sql)
                .source("t", "ts", schema())
                .window(WindowSpec::tumbling(Duration::from_secs(3)))
                .allowed_lateness(Duration::from_millis(500))
                .output(c.mode)
                .mode(exec)
                .build()
                .expect("spec")
        };
        let auto = common::outputs_on_any_path(spec(ExecMode::Auto), &c, |rows| batch(rows));
        let rec = common::outputs_on_any_path(spec(ExecMode::Recompute), &c, |rows| batch(rows));
        prop_assert!(auto.is_ok() && rec.is_ok(), "auto {auto:?}, recompute {rec:?}");
        prop_assert_eq!(auto.ok(), rec.ok());
        let mut e = thund::Engine::builder().build().expect("engine");
        e.create_view(spec(ExecMode::Auto)).expect("view");
        let reason = e.plan("v").expect("plan").reason().map(|r| r.to_string());
        prop_assert!(
            reason.as_deref().is_some_and(|r| r.contains("reads no row")),
            "{reason:?}"
        );
    }
}

/// A query DataFusion cannot plan whatever the rows are is refused when the
/// view is made, on both paths, as an error of its SQL — not at its first
/// trigger with rows. (Here DataFusion's own check refuses the sort it
/// planned for a window function ordered by a `CASE` that holds an `AND`
/// that can fail.)
#[test]
fn a_query_datafusion_cannot_plan_is_refused_when_the_view_is_made() {
    let sql = "SELECT k, v FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k \
               ORDER BY CASE WHEN v <> 0 AND 100 / v > 1 THEN 1 ELSE 0 END DESC, ts) AS rn \
               FROM t) WHERE rn <= 2";
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let err = create(sql, exec).expect_err("refused when made");
        assert!(matches!(&err, thund::Error::Sql { .. }), "{exec:?}: {err}");
        assert!(err.to_string().contains("ROW_NUMBER()"), "{err}");
    }
}

/// A constant that cannot be evaluated refuses the view when it is made, on
/// both paths, wherever it stands: DataFusion's optimizer leaves it in place
/// (evaluated on a window's batch, empty or not) or drops it with the `CASE`
/// it conditions, so such a view failed or not by path. A constant that
/// evaluates is taken.
#[test]
fn a_constant_that_cannot_be_evaluated_is_refused_when_the_view_is_made() {
    for sql in [
        "SELECT k, SUM(CASE WHEN -(-9223372036854775807 - 1) = k THEN k ELSE k END) AS s \
         FROM t GROUP BY k",
        "SELECT SUM(k) AS s FROM t HAVING COUNT(*) > CASE WHEN ABS(-9223372036854775807 - 1) = 1 \
         THEN 1 ELSE 1 END",
        "SELECT k, COUNT(*) AS n FROM t WHERE v > 0 OR 1 / 0 > 1 GROUP BY k",
    ] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let err = create(sql, exec).expect_err("refused when made");
            assert!(matches!(&err, thund::Error::Sql { .. }), "{exec:?}: {err}");
            assert!(err.to_string().contains("cannot be evaluated"), "{err}");
        }
    }
    // a constant that evaluates is taken, also one of the functions
    // DataFusion only runs once simplified (they were refused as failing)
    for sql in [
        "SELECT k, SUM(CASE WHEN -(-9223372036854775807) = k THEN k ELSE 2 * 3 END) AS s \
         FROM t GROUP BY k",
        "SELECT k, SUM(v - COALESCE(-3, 7)) AS s FROM t WHERE k > NVL(1, 2) GROUP BY k",
    ] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            create(sql, exec).unwrap_or_else(|e| panic!("{sql} ({exec:?}): {e}"));
        }
    }
}

/// A function whose value is not a function of its arguments (`random()`,
/// `uuid()`, the clock's `now()`, `CURRENT_DATE`, `current_time()`) is
/// refused when the view is made, wherever the query calls it, on both paths:
/// the paths evaluate a window at different times (and a resumed run again),
/// so they would disagree with each other and with themselves. The DDL points
/// at the call. Functions of their arguments alone (`date_trunc`, `abs`,
/// `to_timestamp`) are taken.
#[test]
fn functions_that_are_not_of_the_rows_are_refused_when_the_view_is_made() {
    for (sql, name) in [
        (
            "SELECT k, COUNT(*) AS c FROM t WHERE random() < 0.5 GROUP BY k",
            "random",
        ),
        (
            "SELECT k, uuid() AS u, COUNT(*) AS c FROM t GROUP BY k",
            "uuid",
        ),
        (
            "SELECT k, MAX(ts) AS m FROM t GROUP BY k HAVING MAX(ts) < now()",
            "now",
        ),
        ("SELECT k, CURRENT_DATE AS d FROM t", "current_date"),
        (
            "SELECT k, COUNT(*) AS c FROM t WHERE k IN \
             (SELECT k FROM t WHERE current_time() IS NOT NULL) GROUP BY k",
            "current_time",
        ),
    ] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let err = create(sql, exec).expect_err("refused when made");
            assert!(matches!(&err, thund::Error::Sql { .. }), "{sql}: {err}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("Nondeterministic function '{name}'")),
                "{sql} on {exec:?}: {msg}"
            );
        }
    }
    for sql in [
        "SELECT k, date_trunc('second', ts) AS sec, abs(v) AS a FROM t",
        "SELECT k, COUNT(*) AS c FROM t WHERE to_timestamp(s) IS NULL GROUP BY k",
    ] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            create(sql, exec).unwrap_or_else(|e| panic!("{sql} on {exec:?}: {e}"));
        }
    }
    // the DDL points at the call
    let mut e = thund::Engine::builder().build().expect("engine");
    let msg = e
        .execute_sql(
            "CREATE SOURCE t (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);\n\
             CREATE VIEW v AS SELECT k, COUNT(*) AS c\n  FROM TUMBLE(t, ts, INTERVAL '1' SECOND)\n  \
             WHERE RANDOM() < 0.5 GROUP BY k, window_start, window_end;",
        )
        .expect_err("refused")
        .to_string();
    assert!(msg.contains("line 4, column 9"), "{msg}");
}
