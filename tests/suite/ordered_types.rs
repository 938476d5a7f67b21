//! `MIN`/`MAX` over every type the incremental path keeps as its integer
//! representation — booleans, dates, times, timestamps with and without a
//! time zone, durations — at the ends of their ranges, with NULLs, duplicates
//! and `FILTER (WHERE …)`: on random disordered streams split into random
//! triggers, the incremental path emits what the recompute path emits, row
//! for row at every trigger, in every output mode and on 1 or 2 workers; and
//! the final answer equals a plain fold over each window's rows.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Date32Array, Date64Array, DurationSecondArray, Int64Array,
    RecordBatch, Time32MillisecondArray, Time64NanosecondArray, TimestampMicrosecondArray,
    TimestampMillisecondArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{cases, SplitMix};
use proptest::prelude::*;
use thund::{Engine, ExecMode, OutputMode, PathKind, ViewSpec, WindowSpec};

/// The ordered columns, by name and type; each row holds one raw value (or
/// NULL) per column.
fn columns() -> Vec<Field> {
    vec![
        Field::new("b", DataType::Boolean, true),
        Field::new("d32", DataType::Date32, true),
        Field::new("d64", DataType::Date64, true),
        Field::new("t32", DataType::Time32(TimeUnit::Millisecond), true),
        Field::new("t64", DataType::Time64(TimeUnit::Nanosecond), true),
        Field::new(
            "tz",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+02:00".into())),
            true,
        ),
        Field::new("dur", DataType::Duration(TimeUnit::Second), true),
    ]
}

fn schema() -> SchemaRef {
    let mut f = vec![
        Field::new("k", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ];
    f.extend(columns());
    Arc::new(Schema::new(f))
}

/// One row: event time, key, and a raw value per ordered column.
#[derive(Clone, Debug)]
struct Row {
    t: i64,
    k: i64,
    vals: Vec<Option<i64>>,
}

/// A raw value of column `c`: often an end of its range (as far as the type
/// holds it), otherwise small, with duplicates.
fn value(r: &mut SplitMix, c: usize) -> Option<i64> {
    let (lo, hi): (i64, i64) = match c {
        0 => (0, 1),
        1 => (i32::MIN.into(), i32::MAX.into()),
        // Time32(ms) and Time64(ns): within a day, as their types require
        3 => (0, 86_399_999),
        4 => (0, 86_399_999_999_999),
        _ => (i64::MIN, i64::MAX),
    };
    match r.below(8) {
        0 => None,
        1 => Some(lo),
        2 => Some(hi),
        3 => Some(lo.saturating_add(1)),
        4 => Some(hi.saturating_sub(1)),
        _ => Some((r.below(7) as i64).clamp(lo, hi)),
    }
}

fn batch(rows: &[Row]) -> RecordBatch {
    let col = |c: usize| rows.iter().map(move |r| r.vals[c]);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.k))),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter().map(|r| r.t),
        )),
        Arc::new(BooleanArray::from_iter(col(0).map(|v| v.map(|x| x != 0)))),
        Arc::new(Date32Array::from_iter(col(1).map(|v| v.map(|x| x as i32)))),
        Arc::new(Date64Array::from_iter(col(2))),
        Arc::new(Time32MillisecondArray::from_iter(
            col(3).map(|v| v.map(|x| x as i32)),
        )),
        Arc::new(Time64NanosecondArray::from_iter(col(4))),
        Arc::new(TimestampMicrosecondArray::from_iter(col(5)).with_timezone("+02:00")),
        Arc::new(DurationSecondArray::from_iter(col(6))),
    ];
    RecordBatch::try_new(schema(), cols).expect("test batch")
}

/// Every column's MIN and MAX, and MAX of `tz` over rows whose `b` is true.
fn query() -> String {
    let mut aggs: Vec<String> = columns()
        .iter()
        .flat_map(|f| {
            let n = f.name();
            [
                format!("MIN({n}) AS min_{n}"),
                format!("MAX({n}) AS max_{n}"),
            ]
        })
        .collect();
    aggs.push("MAX(tz) FILTER (WHERE b) AS max_tz_b".to_string());
    format!("SELECT k, {} FROM t GROUP BY k", aggs.join(", "))
}

/// A row as text, every temporal cell as its raw integer (formatting an
/// instant at the end of i64 would fail, and raw values are exact).
fn rows_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let cols: Vec<ArrayRef> = b
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                DataType::Boolean => c.clone(),
                DataType::Date32 | DataType::Time32(_) => {
                    let i = cast(c, &DataType::Int32).expect("to int32");
                    cast(&i, &DataType::Int64).expect("to int64")
                }
                _ => cast(c, &DataType::Int64).expect("to int64"),
            })
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = cols
                .iter()
                .map(|c| {
                    if c.is_null(r) {
                        "NULL".to_string()
                    } else if let Some(x) = c.as_any().downcast_ref::<BooleanArray>() {
                        x.value(r).to_string()
                    } else {
                        let x = c.as_any().downcast_ref::<Int64Array>().expect("int64");
                        x.value(r).to_string()
                    }
                })
                .collect();
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}

#[derive(Clone, Debug)]
struct Case {
    triggers: Vec<Vec<Row>>,
    mode: OutputMode,
    workers: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        1usize..6,
        prop_oneof![
            Just(OutputMode::Append),
            Just(OutputMode::Update),
            Just(OutputMode::Complete)
        ],
        1usize..=2,
    )
        .prop_map(|(seed, n, mode, workers)| {
            let mut r = SplitMix::new(seed);
            let mut t = 10_000i64;
            let triggers = (0..n)
                .map(|_| {
                    (0..r.below(30))
                        .map(|_| {
                            t += r.below(300) as i64;
                            Row {
                                t: t - r.below(1_000) as i64,
                                k: r.below(3) as i64,
                                vals: (0..columns().len()).map(|c| value(&mut r, c)).collect(),
                            }
                        })
                        .collect()
                })
                .collect();
            Case {
                triggers,
                mode,
                workers,
            }
        })
}

/// Every trigger's rows (and finish's), and the final answer in the mode.
/// With the window in the spec, or (`in_sql`) written in the SQL.
fn run(
    c: &Case,
    exec: ExecMode,
    in_sql: bool,
) -> Result<(Vec<Vec<String>>, Vec<String>), TestCaseError> {
    let spec = ViewSpec::builder("v", &query())
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(2)))
        .allowed_lateness(Duration::from_millis(500))
        .output(c.mode)
        .mode(exec)
        .build()
        .expect("spec");
    let spec = match in_sql {
        true => common::in_sql(&spec).expect("a SQL spelling"),
        false => spec,
    };
    let mut e = Engine::builder()
        .workers(c.workers)
        .build()
        .expect("engine");
    e.create_view(spec).expect("view");
    let want = match exec {
        ExecMode::Auto => PathKind::Incremental,
        _ => PathKind::Recompute,
    };
    prop_assert_eq!(e.plan("v").expect("plan").path(), want);
    let mut outs = Vec::new();
    for trig in &c.triggers {
        e.push("t", batch(trig)).expect("push");
        outs.push(e.trigger().expect("trigger").views[0].output.clone());
    }
    outs.push(e.finish().expect("finish").views[0].output.clone());
    let per_trigger = outs.iter().map(|o| rows_of(o)).collect();
    // the final answer: Append all rows, Complete the last trigger's, Update
    // the rows flagged final (the flag column dropped)
    let fin = match c.mode {
        OutputMode::Append => rows_of(&outs.concat()),
        OutputMode::Complete => rows_of(outs.last().map(|o| o.as_slice()).unwrap_or(&[])),
        _ => rows_of(&outs.concat())
            .into_iter()
            .filter_map(|r| r.strip_suffix("|true").map(str::to_string))
            .collect(),
    };
    Ok((per_trigger, fin))
}

/// The fold: each closed window's non-late rows, MIN/MAX of raw values per
/// key (raw order is each type's order), NULL when a column has none.
fn oracle(c: &Case) -> Vec<String> {
    // the late rule with a 2 s tumbling window and 500 ms lateness, as the engine applies it
    let triggers: Vec<Vec<(usize, Row)>> = c
        .triggers
        .iter()
        .map(|t| t.iter().map(|r| (0, r.clone())).collect())
        .collect();
    let win = common::Win {
        size: 2000,
        slide: 2000,
    };
    let (windows, _late) = common::assign(&triggers, 1, 500, win, |r: &Row| r.t);
    let mut out = Vec::new();
    for ((s, e), rows) in windows {
        let mut by_key: BTreeMap<i64, Vec<&Row>> = BTreeMap::new();
        for r in &rows[0] {
            by_key.entry(r.k).or_default().push(r);
        }
        for (k, rs) in by_key {
            let mut cells = vec![s.to_string(), e.to_string(), k.to_string()];
            let show = |c: usize, x: Option<i64>| match x {
                None => "NULL".to_string(),
                Some(v) if c == 0 => (v != 0).to_string(),
                Some(v) => v.to_string(),
            };
            for c in 0..columns().len() {
                let vals = rs.iter().filter_map(|r| r.vals[c]);
                cells.push(show(c, vals.clone().min()));
                cells.push(show(c, vals.max()));
            }
            let tz_b = rs
                .iter()
                .filter(|r| r.vals[0] == Some(1))
                .filter_map(|r| r.vals[5])
                .max();
            cells.push(show(5, tz_b));
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn min_max_of_ordered_types_agree_on_both_paths_and_with_the_fold(c in case()) {
        let (inc_rows, inc) = run(&c, ExecMode::Auto, false)?;
        let (rec_rows, rec) = run(&c, ExecMode::Recompute, false)?;
        prop_assert_eq!(&inc_rows, &rec_rows, "incremental vs recompute, per trigger");
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let (sql_rows, _) = run(&c, exec, true)?;
            prop_assert_eq!(&sql_rows, &inc_rows, "window in SQL ({:?}) vs in the spec", exec);
        }
        let expected = oracle(&c);
        prop_assert_eq!(&inc, &expected, "incremental vs the fold");
        prop_assert_eq!(&rec, &expected, "recompute vs the fold");
    }
}
