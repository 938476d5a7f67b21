//! Window size sweep and fixed cost per trigger, incremental against
//! recompute, measured side by side in one run (issue 9's headline figures).
//!
//! The stream: bids with about 10 ms of event time per row (up to 500 ms of
//! disorder), 200 auctions; the view `COUNT/SUM/AVG/MAX GROUP BY auction` in
//! Update mode. For each window (tumbling 10 s, 1 min, 10 min, 1 h; hopping
//! 1 h / 1 min and 10 min / 10 s) and each trigger size (10 000 and 1 000
//! rows), both paths run the same stream; p50 and p99 of the time per trigger
//! (push + trigger) over the second half of the run are printed with the
//! ratio recompute / incremental. Then the fixed cost: p50 per trigger with 1
//! row per trigger.
//!
//! Then the other incremental shapes (issue 10) over the same stream, at
//! tumbling 10 s and 1 h: aggregates with `FILTER (WHERE …)`, `MIN`/`MAX`
//! of a timestamp and of a string, `COUNT(DISTINCT …)` of one argument and
//! of two (each with its `FILTER`, as Nexmark q15/q16), the top 3 per
//! window (`ORDER BY … LIMIT`), `SELECT DISTINCT` and the auctions with the
//! most bids per window (Nexmark q5's shape: an aggregate, then a query over
//! its groups), an average of maxima by band (q4's shape: an aggregate over
//! the groups, whose outer groups Update mode keeps), the bids holding each window's highest price (q7's shape) and
//! the two highest bids per auction (q19's, `ROW_NUMBER() … <= 2`): rows
//! ranked by the host, only candidates reaching the dataflow; and a windowed
//! self-join (each bid with the later bids of its auction at the same price),
//! aggregated per auction (also over 1 min windows hopping by 10 s). Then session windows
//! (gap 10 s), over at most 200 000 rows (the recompute path evaluates each
//! dirty session on its own): by auction (a bid every 2 s per auction: each
//! session runs on for the whole stream, its panes carried forward) and by
//! price (10 000 keys, a bid every 100 s per price: most sessions hold one
//! row, and thousands close per trigger).
//!
//! `THUND_SWEEP_ROWS` sets the rows per run (default 1 000 000);
//! `THUND_SWEEP_ONLY=<substring>` runs only the rows whose name (shape and
//! window, as printed) contains it;
//! `THUND_SWEEP_PER=1000` only that trigger size; `THUND_SWEEP_PATH=incremental`
//! (or `recompute`) only that path, for a profile of it.

#![allow(missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use thund::{Engine, ExecMode, OutputMode, ViewSpec, WindowSpec};

#[path = "../tests/suite/common/rng.rs"]
mod rng;
use rng::SplitMix;

const SQL: &str = "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume, AVG(price) AS mean, \
                   MAX(price) AS high FROM bids GROUP BY auction";

/// The other shapes, by name, run at tumbling 10 s and 1 h.
const SHAPES: &[(&str, &str)] = &[
    (
        "filtered counts",
        "SELECT auction, COUNT(*) AS bids, COUNT(*) FILTER (WHERE price < 1000) AS cheap, \
         SUM(price) FILTER (WHERE price >= 9000) AS dear FROM bids GROUP BY auction",
    ),
    (
        "min/max of a timestamp",
        "SELECT auction, MIN(ts) AS first, MAX(ts) AS last FROM bids GROUP BY auction",
    ),
    (
        "distinct counts",
        "SELECT auction, COUNT(*) AS bids, COUNT(DISTINCT price / 100) AS bands FROM bids \
         GROUP BY auction",
    ),
    (
        "distinct counts of two arguments (q15/q16)",
        "SELECT auction % 20 AS a20, COUNT(*) AS bids, COUNT(DISTINCT auction) AS auctions, \
         COUNT(DISTINCT price / 100) FILTER (WHERE price < 5000) AS cheap_bands FROM bids \
         GROUP BY auction % 20",
    ),
    (
        "min/max of a string",
        "SELECT auction % 20 AS a20, MIN(CAST(price AS VARCHAR)) AS lo, \
         MAX(CAST(price AS VARCHAR)) AS hi FROM bids GROUP BY auction % 20",
    ),
    (
        "top 3 per window",
        "SELECT auction, COUNT(*) AS bids, MAX(price) AS high FROM bids GROUP BY auction \
         ORDER BY bids DESC, auction LIMIT 3",
    ),
    (
        "select distinct",
        "SELECT DISTINCT auction, price / 1000 AS band FROM bids",
    ),
    (
        "hot items (q5)",
        "SELECT auction, bids FROM (SELECT auction, COUNT(*) AS bids FROM bids GROUP BY auction) AS c \
         WHERE bids = (SELECT MAX(bids) FROM \
         (SELECT auction, COUNT(*) AS bids FROM bids GROUP BY auction) AS m)",
    ),
    (
        "average of maxima by band (q4)",
        "SELECT band, COUNT(*) AS auctions, AVG(high) AS avg_high FROM \
         (SELECT auction, auction % 10 AS band, MAX(price) AS high FROM bids GROUP BY auction) AS a \
         GROUP BY band",
    ),
    (
        "highest bid (q7)",
        "SELECT auction, price, ts FROM bids WHERE price = (SELECT MAX(price) FROM bids)",
    ),
    (
        "top 2 bids per auction (q19)",
        "SELECT auction, price, ts, rn FROM (SELECT auction, price, ts, \
         ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, ts) AS rn FROM bids) AS x \
         WHERE rn <= 2",
    ),
    (
        "self-join, repeated prices",
        "SELECT x.auction, COUNT(*) AS repeats, MAX(y.ts) AS last FROM bids x JOIN bids y \
         ON x.auction = y.auction AND x.price = y.price WHERE x.ts < y.ts GROUP BY x.auction",
    ),
];
/// Session-window views, by name, with their key (gap 10 s).
const SESSIONS: &[(&str, &str, &str)] = &[
    (
        "sessions by auction",
        "SELECT auction, COUNT(*) AS bids, MAX(price) AS high FROM bids GROUP BY auction",
        "auction",
    ),
    (
        "sessions by price",
        "SELECT price, COUNT(*) AS bids, MAX(ts) AS last FROM bids GROUP BY price",
        "price",
    ),
];
/// Rows per run of a session view, at most.
const SESSION_ROWS: usize = 200_000;
const AUCTIONS: u64 = 200;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// Rows `[from, from + n)` of the stream.
fn batch(from: usize, n: usize) -> RecordBatch {
    let mut r = SplitMix::new(from as u64 * 31 + 5);
    let a: Vec<i64> = (0..n).map(|_| r.below(AUCTIONS) as i64).collect();
    let p: Vec<i64> = (0..n).map(|_| 1 + r.below(10_000) as i64).collect();
    let ts: Vec<i64> = (0..n)
        .map(|i| 1_000_000 + (from + i) as i64 * 10 - r.below(500) as i64)
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(a)),
            Arc::new(Int64Array::from(p)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .expect("bench batch")
}

fn engine(sql: &str, window: &WindowSpec, mode: ExecMode) -> Engine {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(
        ViewSpec::builder("v", sql)
            .source("bids", "ts", schema())
            .window(window.clone())
            .allowed_lateness(Duration::from_millis(500))
            .output(OutputMode::Update)
            .mode(mode)
            .build()
            .expect("spec"),
    )
    .expect("view");
    e
}

/// Times per trigger over the second half of a run of `rows` rows.
fn run(sql: &str, window: &WindowSpec, mode: ExecMode, rows: usize, per: usize) -> Vec<Duration> {
    let mut e = engine(sql, window, mode);
    let want = match mode {
        ExecMode::Auto => thund::PathKind::Incremental,
        _ => thund::PathKind::Recompute,
    };
    assert_eq!(e.plan("v").expect("plan").path(), want, "{sql}");
    let triggers = rows / per;
    let mut times = Vec::with_capacity(triggers / 2 + 1);
    for i in 0..triggers {
        let b = batch(i * per, per);
        let t = Instant::now();
        e.push("bids", b).expect("push");
        e.trigger().expect("trigger");
        if i >= triggers / 2 {
            times.push(t.elapsed());
        }
    }
    times
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // `cargo bench` passes --bench; nothing else to parse
    let rows: usize = std::env::var("THUND_SWEEP_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let only = std::env::var("THUND_SWEEP_ONLY").unwrap_or_default();
    let path = std::env::var("THUND_SWEEP_PATH").unwrap_or_default();
    let per_only: Option<usize> = std::env::var("THUND_SWEEP_PER")
        .ok()
        .and_then(|v| v.parse().ok());
    let s = Duration::from_secs;
    let windows = [
        ("tumbling 10 s", WindowSpec::tumbling(s(10))),
        ("tumbling 1 min", WindowSpec::tumbling(s(60))),
        ("tumbling 10 min", WindowSpec::tumbling(s(600))),
        ("tumbling 1 h", WindowSpec::tumbling(s(3600))),
        ("hopping 1 h / 1 min", WindowSpec::hopping(s(3600), s(60))),
        ("hopping 10 min / 10 s", WindowSpec::hopping(s(600), s(10))),
    ];
    println!("window sweep: {rows} rows per run, Update mode, p50 / p99 per trigger over the second half");
    println!(
        "| window | rows/trigger | incremental p50 | p99 | recompute p50 | p99 | recompute / incremental (p50) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let sessions: Vec<(String, &str, WindowSpec)> = SESSIONS
        .iter()
        .map(|(name, sql, key)| {
            (
                format!("{name}, session 10 s"),
                *sql,
                WindowSpec::session(s(10), &[key]),
            )
        })
        .collect();
    let mut rows_run: Vec<(String, &str, &WindowSpec)> = windows
        .iter()
        .map(|(name, w)| (name.to_string(), SQL, w))
        .collect();
    // the join over hopping windows too (each row in 6 windows)
    let join_hop = WindowSpec::hopping(s(60), s(10));
    for (shape, sql) in SHAPES {
        for (name, w) in windows
            .iter()
            .filter(|(n, _)| *n == "tumbling 10 s" || *n == "tumbling 1 h")
        {
            rows_run.push((format!("{shape}, {name}"), *sql, w));
        }
        if shape.starts_with("self-join") {
            rows_run.push((format!("{shape}, hopping 1 min / 10 s"), *sql, &join_hop));
        }
    }
    for (name, sql, w) in &sessions {
        rows_run.push((name.clone(), sql, w));
    }
    for (name, sql, w) in &rows_run {
        if !name.contains(only.as_str()) {
            continue;
        }
        let rows = match w.kind {
            thund::WindowKind::Session { .. } => rows.min(SESSION_ROWS),
            _ => rows,
        };
        for per in [10_000usize, 1_000] {
            if per_only.is_some_and(|p| p != per) {
                continue;
            }
            let runs = |mode, name| {
                if path.is_empty() || path == name {
                    run(sql, w, mode, rows, per)
                } else {
                    vec![Duration::from_nanos(1)]
                }
            };
            let mut inc = runs(ExecMode::Auto, "incremental");
            let mut rec = runs(ExecMode::Recompute, "recompute");
            let (i50, i99) = (pct(&mut inc, 0.5), pct(&mut inc, 0.99));
            let (r50, r99) = (pct(&mut rec, 0.5), pct(&mut rec, 0.99));
            println!(
                "| {name} | {per} | {i50:.2?} | {i99:.2?} | {r50:.2?} | {r99:.2?} | {:.2}x |",
                r50.as_secs_f64() / i50.as_secs_f64()
            );
        }
    }
    if !path.is_empty() {
        return;
    }
    // fixed cost: 1 row per trigger, tumbling 10 s, after 2 000 warm-up triggers
    let w = WindowSpec::tumbling(s(10));
    let mut fixed = Vec::new();
    for mode in [ExecMode::Auto, ExecMode::Recompute] {
        let mut t = run(SQL, &w, mode, 4_000, 1);
        fixed.push(pct(&mut t, 0.5));
    }
    println!(
        "fixed cost per trigger (1 row per trigger, p50): incremental {:.3?}, recompute {:.3?}",
        fixed[0], fixed[1]
    );
}
