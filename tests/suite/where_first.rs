//! WHERE comes first: an expression of the select list, the GROUP BY, an
//! aggregate's argument or its FILTER that would fail on a row WHERE
//! refuses (a cast of an infinity to an integer, a division by zero) is not
//! evaluated on that row, as SQL reads the query: on random streams holding
//! such rows, the incremental path runs and emits what the recompute path
//! emits at every trigger, and without the WHERE both fail alike.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{canon, triggers, Triggers};
use proptest::prelude::*;
use thund::{Engine, ExecMode, PathKind, ViewSpec, WindowSpec};

/// Queries whose WHERE refuses every row another part cannot evaluate.
const GUARDED: &[&str] = &[
    "SELECT CAST(f AS BIGINT) AS fi, COUNT(*) AS n FROM t WHERE ABS(f) < 10 GROUP BY CAST(f AS BIGINT)",
    "SELECT k, SUM(CAST(f AS BIGINT)) AS sf, MIN(CAST(f AS BIGINT)) AS lo FROM t WHERE ABS(f) < 10 GROUP BY k",
    "SELECT k, SUM(100 / v) AS q FROM t WHERE v <> 0 GROUP BY k",
    "SELECT k, COUNT(*) FILTER (WHERE 100 / v > 1) AS c FROM t WHERE v <> 0 GROUP BY k",
    "SELECT COUNT(DISTINCT CAST(f AS BIGINT)) AS d FROM t WHERE ABS(f) < 10",
];

/// The same queries' failing parts, unguarded.
const UNGUARDED: &[&str] = &[
    "SELECT CAST(f AS BIGINT) AS fi, COUNT(*) AS n FROM t GROUP BY CAST(f AS BIGINT)",
    "SELECT k, SUM(100 / v) AS q FROM t GROUP BY k",
];

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("f", DataType::Float64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

type Row = (i64, Option<i64>, Option<f64>, i64);

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .expect("batch")
}

type Case = Triggers<Vec<Row>>;

fn case() -> impl Strategy<Value = Case> {
    let v = prop::sample::select(vec![
        Some(0),
        Some(1),
        Some(-3),
        Some(7),
        Some(i64::MIN),
        None,
    ]);
    let f = prop::sample::select(vec![
        Some(f64::INFINITY),
        Some(f64::NEG_INFINITY),
        Some(f64::NAN),
        Some(1e300),
        Some(1.5),
        Some(-0.0),
        Some(-7.0),
        None,
    ]);
    let row = (0i64..3, v, f, 0i64..9_000);
    triggers(prop::collection::vec(row, 0..10)).prop_map(|mut c| {
        // every case holds a row no query can evaluate unguarded
        c.triggers[0].push((0, Some(0), Some(f64::INFINITY), 100));
        c
    })
}

/// Every trigger's rows and the end of the stream's, or the first error.
fn run(c: &Case, sql: &str, exec: ExecMode) -> thund::Result<Vec<Vec<String>>> {
    let spec = ViewSpec::builder("v", sql)
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(2)))
        .allowed_lateness(Duration::from_millis(500))
        .output(c.mode)
        .mode(exec)
        .build()?;
    let mut e = Engine::builder().workers(c.workers).build()?;
    e.create_view(spec)?;
    let want = match exec {
        ExecMode::Auto => PathKind::Incremental,
        _ => PathKind::Recompute,
    };
    assert_eq!(e.plan("v")?.path(), want, "{sql}");
    let mut outs = Vec::new();
    for rows in &c.triggers {
        e.push("t", batch(rows))?;
        outs.push(canon(&e.trigger()?.views[0].output));
    }
    outs.push(canon(&e.finish()?.views[0].output));
    Ok(outs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(12)))]

    #[test]
    fn what_where_refuses_is_never_evaluated_on_either_path(c in case()) {
        for sql in GUARDED {
            let want = run(&c, sql, ExecMode::Recompute);
            prop_assert!(want.is_ok(), "{sql}: {want:?}");
            let got = run(&c, sql, ExecMode::Auto);
            prop_assert!(got.is_ok(), "{sql}: {got:?}");
            prop_assert_eq!(got.ok(), want.ok(), "{}", sql);
        }
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
}
