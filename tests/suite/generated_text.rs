//! Generated queries over strings beside integers: string expressions
//! (`UPPER`, `LOWER`, `||`, `SUBSTR`, `COALESCE`, `CASE`, integers cast to
//! text) as group keys, alone or beside an integer key, as the argument of
//! `MIN`, `MAX` and `COUNT` (also `DISTINCT`), in `WHERE` and `FILTER`
//! (comparisons, `LIKE`, `IS NULL`) and in `ORDER BY … LIMIT`, over rows
//! whose strings are empty, NULL, short, cased, accented and longer than the
//! incremental path's inline keys. Whatever path a query takes, it gives the
//! same rows at every trigger as the recompute path, or both paths fail.
//!
//! `generated.rs` draws integer queries; this file keeps its own strategy
//! (and its own regression seeds), so widening one does not re-draw the
//! other's shrunk cases. More cases: `THUND_PROPTEST_CASES=2000`.

use crate::common;
use crate::generated::{agree, condition as int_condition, int_expr, run_over};

use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{triggers, Triggers};
use proptest::prelude::*;
use thund::{ExecMode, PathKind};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, true),
        Field::new("w", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

type Row = (i64, Option<i64>, Option<i64>, Option<&'static str>, i64);

fn batch(rows: &[Row]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.3))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.4),
            )),
        ],
    )
    .expect("batch")
}

/// The strings a row holds: short ones most of the time, and the empty
/// string, case and accents (which `UPPER`/`LOWER` change), a string that is
/// a prefix of another, and strings of 39 and 64 bytes (past the key
/// dictionary's inline keys).
const STRINGS: [&str; 10] = [
    "a",
    "b",
    "ab",
    "",
    "A",
    "é",
    "Ärger",
    "x7",
    "abcdefghijklmnopqrstuvwxyz0123456789abc",
    "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba987654321000",
];

fn text() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        5 => prop::sample::select(STRINGS.to_vec()).prop_map(Some),
        1 => Just(None),
    ]
}

fn value() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        6 => (-9i64..10).prop_map(Some),
        1 => Just(None),
        1 => prop::sample::select(vec![i64::MAX, i64::MIN, 7, 0]).prop_map(Some),
    ]
}

fn case() -> impl Strategy<Value = Triggers<Vec<Row>>> {
    let row = (0i64..3, value(), value(), text(), 0i64..9_000);
    triggers(prop::collection::vec(row, 0..14))
}

/// A string expression over `s` and the integer columns.
fn text_expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        6 => Just("s".to_string()),
        2 => prop::sample::select(vec!["'a'", "''", "'b'", "'Ä'"]).prop_map(String::from),
        1 => int_expr().prop_map(|a| format!("CAST({a} AS VARCHAR)")),
    ];
    leaf.prop_recursive(2, 8, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|a| format!("UPPER({a})")),
            inner.clone().prop_map(|a| format!("LOWER({a})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} || {b})")),
            (inner.clone(), 0i64..3, 0i64..4)
                .prop_map(|(a, from, n)| format!("SUBSTR({a}, {from}, {n})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("COALESCE({a}, {b})")),
            (int_condition(), inner.clone(), inner)
                .prop_map(|(c, a, b)| format!("CASE WHEN {c} THEN {a} ELSE {b} END")),
        ]
    })
}

/// A condition over strings and integers.
fn condition() -> impl Strategy<Value = String> {
    let text_cmp = (
        text_expr(),
        text_expr(),
        prop::sample::select(vec!["=", "<>", "<", ">="]),
    )
        .prop_map(|(a, b, op)| format!("{a} {op} {b}"));
    let leaf = prop_oneof![
        3 => text_cmp,
        1 => (text_expr(), prop::sample::select(vec!["'a%'", "'%b'", "'_'", "''"]))
            .prop_map(|(a, p)| format!("{a} LIKE {p}")),
        1 => text_expr().prop_map(|a| format!("{a} IS NULL")),
        1 => (text_expr(), int_expr()).prop_map(|(a, b)| format!("LENGTH({a}) > {b}")),
        2 => int_condition(),
    ];
    leaf.prop_recursive(1, 4, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            inner.prop_map(|a| format!("(NOT {a})")),
        ]
    })
}

/// An aggregate of a string (or, less often, an integer) expression.
fn aggregate() -> impl Strategy<Value = String> {
    let of_text = (
        prop::sample::select(vec!["MIN", "MAX", "COUNT"]),
        prop::bool::weighted(0.3),
        text_expr(),
    )
        .prop_map(|(f, d, a)| format!("{f}({}{a})", if d { "DISTINCT " } else { "" }));
    let of_int = (
        prop::sample::select(vec!["SUM", "MIN", "MAX", "COUNT"]),
        int_expr(),
    )
        .prop_map(|(f, a)| format!("{f}({a})"));
    (
        prop_oneof![3 => of_text, 1 => of_int],
        prop::option::weighted(0.3, condition()),
    )
        .prop_map(|(a, filter)| match filter {
            Some(c) => format!("{a} FILTER (WHERE {c})"),
            None => a,
        })
}

/// A grouped (or global) aggregate query: a string key, perhaps beside an
/// integer one, a `WHERE`, a `HAVING` over counts, and (grouped) the first
/// groups by an aggregate.
fn query() -> impl Strategy<Value = String> {
    (
        prop::option::weighted(0.85, text_expr()),
        prop::option::weighted(0.3, int_expr()),
        prop::collection::vec(aggregate(), 1..3),
        prop::option::weighted(0.4, condition()),
        prop::option::weighted(0.2, 0i64..3),
        prop::option::weighted(0.25, (0usize..2, prop::bool::ANY, 1usize..4)),
    )
        .prop_map(|(key, other, aggs, filter, having, order)| {
            let keys: Vec<(String, &str)> = key
                .iter()
                .map(|k| (k.clone(), "g"))
                .chain(other.iter().map(|k| (k.clone(), "h")))
                .collect();
            let mut select: Vec<String> = keys.iter().map(|(k, n)| format!("{k} AS {n}")).collect();
            for (i, a) in aggs.iter().enumerate() {
                select.push(format!("{a} AS a{i}"));
            }
            select.push("COUNT(*) AS n".to_string());
            let mut sql = format!("SELECT {} FROM t", select.join(", "));
            if let Some(c) = filter {
                sql += &format!(" WHERE {c}");
            }
            if !keys.is_empty() {
                let by: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
                sql += &format!(" GROUP BY {}", by.join(", "));
            }
            if let Some(n) = having {
                sql += &format!(" HAVING COUNT(*) > {n}");
            }
            // the first rows of a total order (the group keys break ties)
            if let (Some((by, desc, n)), false) = (order, keys.is_empty()) {
                let dir = if desc { "DESC" } else { "ASC" };
                let ties: Vec<&str> = keys.iter().map(|(_, n)| *n).collect();
                sql += &format!(
                    " ORDER BY a{} {dir} NULLS FIRST, {} LIMIT {n}",
                    by.min(aggs.len() - 1),
                    ties.join(", ")
                );
            }
            sql
        })
}

fn run(
    c: &Triggers<Vec<Row>>,
    sql: &str,
    exec: ExecMode,
) -> thund::Result<(PathKind, Vec<Vec<String>>)> {
    run_over(c, sql, exec, schema(), batch)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(64)))]

    /// A generated query over strings gives the same rows on the path it
    /// takes as on the recompute path, or fails on both.
    #[test]
    fn a_generated_query_over_strings_agrees_with_the_recompute_path(
        c in case(),
        sql in query(),
    ) {
        agree(&c, &sql, run)?;
    }
}

/// The first rows of each partition of a window's rows: `ROW_NUMBER()`
/// (ordered totally: the drawn keys, then every column), `RANK()` or
/// `DENSE_RANK()` (by the drawn keys alone; ties share a rank), partitioned
/// by string and integer expressions, under a rank bound and perhaps a
/// condition on the inner and the outer rows.
fn ranked_query() -> impl Strategy<Value = String> {
    let key = prop_oneof![text_expr(), int_expr()];
    (
        prop::sample::select(vec!["ROW_NUMBER", "RANK", "DENSE_RANK"]),
        prop::collection::vec(key.clone(), 0..3),
        prop::collection::vec((key, prop::bool::ANY), 1..3),
        1i64..4,
        prop::option::weighted(0.3, condition()),
        prop::option::weighted(0.2, condition()),
    )
        .prop_map(|(f, partition, order, n, inner, outer)| {
            let mut by: Vec<String> = order
                .iter()
                .map(|(e, desc)| format!("{e}{}", if *desc { " DESC" } else { "" }))
                .collect();
            if f == "ROW_NUMBER" {
                by.extend(["v", "w", "k", "s", "ts"].map(String::from));
            }
            let over = match partition.is_empty() {
                true => format!("ORDER BY {}", by.join(", ")),
                false => format!(
                    "PARTITION BY {} ORDER BY {}",
                    partition.join(", "),
                    by.join(", ")
                ),
            };
            let inner = inner.map_or(String::new(), |c| format!(" WHERE {c}"));
            let outer = outer.map_or(String::new(), |c| format!(" AND {c}"));
            format!(
                "SELECT k, v, s, r FROM (SELECT k, v, w, s, ts, {f}() OVER ({over}) AS r \
                 FROM t{inner}) AS b WHERE r <= {n}{outer}"
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(48)))]

    /// A generated top-rows query gives the same rows on the path it takes
    /// as on the recompute path, or fails on both.
    #[test]
    fn a_generated_top_rows_query_agrees_with_the_recompute_path(
        c in case(),
        sql in ranked_query(),
    ) {
        agree(&c, &sql, run)?;
    }
}

/// `sql` over `c` takes `path` and gives the recompute path's rows (which
/// it returns).
fn same_rows_on(c: &Triggers<Vec<Row>>, sql: &str, path: PathKind) -> Vec<Vec<String>> {
    let (took, auto) = run(c, sql, ExecMode::Auto).expect(sql);
    let (_, rec) = run(c, sql, ExecMode::Recompute).expect(sql);
    assert_eq!(took, path, "{sql}");
    assert_eq!(auto, rec, "{sql}");
    auto
}

/// DataFusion types `s || CASE WHEN … THEN s ELSE CAST(k AS VARCHAR) END` as
/// `Utf8` and computes it as `Utf8View`: as a value counted once, the
/// argument of `MIN` and a group key the query does not show, it is
/// kept as its declared type on the incremental path, which runs such a
/// query and gives the recompute path's rows. (A shown column so typed
/// takes the recompute path, whose output type it is.)
#[test]
fn strings_computed_in_another_encoding_are_kept_as_declared() {
    let rows: Vec<Row> = vec![
        (1, Some(1), None, Some("a"), 10),
        (2, None, None, Some("a"), 20),
        (1, Some(2), None, None, 30),
        (1, Some(2), None, Some("é"), 3_500),
    ];
    let c = Triggers {
        triggers: vec![rows.clone(), rows],
        mode: thund::OutputMode::Update,
        workers: 1,
    };
    for sql in [
        "SELECT COUNT(DISTINCT (s || CASE WHEN k > 1 THEN s ELSE CAST(k AS VARCHAR) END)) AS a, COUNT(*) AS n FROM t",
        "SELECT COUNT(*) AS n, MAX(v) AS m FROM t GROUP BY (s || CASE WHEN k > 1 THEN s ELSE CAST(k AS VARCHAR) END)",
        "SELECT k, COUNT(*) AS n FROM t GROUP BY k HAVING MIN(s || CASE WHEN v > 1 THEN s ELSE CAST(v AS VARCHAR) END) > 'a1'",
    ] {
        same_rows_on(&c, sql, PathKind::Incremental);
    }
}

/// `GROUP BY s, 1` names `s` twice (the ordinal is the first output
/// column), which DataFusion's aggregate keeps as one column: the view is
/// made (it recomputes, saying why) and gives the recompute path's rows,
/// where planning it panicked.
#[test]
fn a_group_key_given_twice_is_planned_without_a_panic() {
    let rows: Vec<Row> = vec![
        (1, Some(1), None, Some("a"), 10),
        (2, None, None, Some("b"), 20),
        (1, Some(2), None, Some("a"), 3_500),
    ];
    let c = Triggers {
        triggers: vec![rows],
        mode: thund::OutputMode::Append,
        workers: 1,
    };
    for sql in [
        "SELECT s AS g, 1 AS h, COUNT(*) AS n FROM t GROUP BY s, 1",
        "SELECT s AS g, MIN(k) AS m FROM t GROUP BY s, 1 ORDER BY m, g LIMIT 1",
    ] {
        let auto = same_rows_on(&c, sql, PathKind::Recompute);
        assert!(auto.iter().flatten().count() >= 2, "{sql}: {auto:?}");
    }
}

/// A window function's `PARTITION BY` and `ORDER BY` are evaluated where
/// DataFusion's window evaluates them (its arithmetic wrapping, on both
/// paths), also where they hold a subexpression twice:
/// `COALESCE(w * w, k)` is simplified to a `CASE` reading `w * w` twice,
/// which DataFusion's common subexpression elimination moved into a
/// projection below the window, evaluated there with Þund's checked
/// arithmetic: the recompute path failed on `w = i64::MIN` where the
/// incremental path gave the rows.
#[test]
fn window_keys_are_evaluated_where_the_window_evaluates_them() {
    let rows: Vec<Row> = vec![
        (0, Some(0), Some(i64::MIN), Some("a"), 0),
        (1, Some(1), Some(3), Some("b"), 10),
        (2, Some(2), None, Some("a"), 20),
    ];
    let c = Triggers {
        triggers: vec![rows],
        mode: thund::OutputMode::Append,
        workers: 1,
    };
    for sql in [
        "SELECT k, v, s, r FROM (SELECT k, v, w, s, ts, ROW_NUMBER() OVER \
         (ORDER BY COALESCE(w * w, k), v, w, k, s, ts) AS r FROM t) AS b WHERE r <= 2",
        "SELECT k, v, s, r FROM (SELECT k, v, w, s, ts, ROW_NUMBER() OVER \
         (PARTITION BY COALESCE(w * w, k) ORDER BY v, w, k, s, ts) AS r FROM t) AS b WHERE r <= 1",
        // typed Utf8, computed Utf8View (see above)
        "SELECT k, v, s, r FROM (SELECT k, v, w, s, ts, ROW_NUMBER() OVER (ORDER BY \
         UPPER(CASE WHEN k > 1 THEN s ELSE CAST(k AS VARCHAR) END) DESC, v, w, k, s, ts) AS r \
         FROM t) AS b WHERE r <= 2",
    ] {
        same_rows_on(&c, sql, PathKind::Incremental);
    }
}

/// In Update mode a row WHERE refuses still makes its window exist on the
/// incremental path (a group whose rows WHERE let through are none), but is
/// in no partition: its `PARTITION BY ABS(v)` is never evaluated, as
/// recomputing never evaluates it. It was, and `ABS(i64::MIN)` failed the
/// trigger.
#[test]
fn a_row_where_refuses_is_in_no_partition() {
    let rows: Vec<Row> = vec![
        (0, Some(i64::MIN), Some(0), Some("a"), 0),
        (9, Some(1), Some(0), Some("a"), 10),
    ];
    for mode in [thund::OutputMode::Update, thund::OutputMode::Append] {
        let c = Triggers {
            triggers: vec![rows.clone(), vec![(8, Some(2), None, None, 20)]],
            mode,
            workers: 1,
        };
        let sql = "SELECT k, v, s, r FROM (SELECT k, v, w, s, ts, ROW_NUMBER() OVER \
                   (PARTITION BY ABS(v) ORDER BY s, v, w, k, ts) AS r FROM t WHERE k > 5) AS b \
                   WHERE r <= 1";
        let auto = same_rows_on(&c, sql, PathKind::Incremental);
        assert!(!auto.concat().is_empty(), "{auto:?}");
    }
}
