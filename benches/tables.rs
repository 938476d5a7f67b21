//! The view as a table, measured (prints figures; `cargo bench --bench tables`):
//!
//! * `lookup` p50/p99 on a view of 1 M groups (one tumbling window holding
//!   them all, Update mode), random keys, one lookup at a time;
//! * `query` of one key through SQL (`SELECT * FROM v WHERE k = …`, the
//!   index serving the filter) and of the whole view, p50/p99;
//! * trigger latency with 8 subscribers reading every trigger on their own
//!   threads against none: p50 per trigger, the two interleaved run by run
//!   in one process, as a ratio; and the same stream with the engine keeping
//!   no tables (`tables(false)`) against keeping them: what maintaining the
//!   view's table costs a trigger.
//!
//! `THUND_TABLE_GROUPS` (default 1 000 000) and `THUND_TABLE_TRIGGERS`
//! (default 300) scale it down.

#![allow(missing_docs)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use datafusion::common::ScalarValue;
use futures::StreamExt;
use thund::{Engine, OutputMode, ViewSpec, WindowSpec};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn show(what: &str, v: &mut [Duration]) {
    let (p50, p99) = (pct(v, 0.5), pct(v, 0.99));
    println!(
        "{what}: p50 {:.1} µs, p99 {:.1} µs ({} samples)",
        p50.as_nanos() as f64 / 1e3,
        p99.as_nanos() as f64 / 1e3,
        v.len()
    );
}

fn view(window: WindowSpec) -> ViewSpec {
    ViewSpec::builder("v", common::SQL)
        .source("t", "ts", common::schema())
        .window(window)
        .output(OutputMode::Update)
        .build()
        .expect("spec")
}

/// `n` rows, keys `from..from + n`, all in the first hour.
fn keys_batch(from: i64, n: usize) -> RecordBatch {
    RecordBatch::try_new(
        common::schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(from..from + n as i64)),
            Arc::new(Float64Array::from_iter_values((0..n).map(|i| i as f64))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                (0..n).map(|i| (i % 1000) as i64),
            )),
        ],
    )
    .expect("batch")
}

fn lookups(groups: usize) {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(view(WindowSpec::tumbling(Duration::from_secs(3600))))
        .expect("view");
    let started = Instant::now();
    for from in (0..groups).step_by(100_000) {
        e.push("t", keys_batch(from as i64, 100_000.min(groups - from)))
            .expect("push");
        e.trigger().expect("trigger");
    }
    let tables = e.tables();
    assert_eq!(tables.held("v").expect("held").0, groups);
    println!(
        "{groups} groups in one open window, built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut r = common::SplitMix::new(3);
    let mut lat = Vec::new();
    for _ in 0..100_000 {
        let k = ScalarValue::Int64(Some(r.below(groups as u64) as i64));
        let t = Instant::now();
        let rows = tables
            .lookup("v", std::slice::from_ref(&k))
            .expect("lookup");
        lat.push(t.elapsed());
        assert_eq!(rows.num_rows(), 1);
    }
    show("lookup (one key, 1 row)", &mut lat);
    let mut lat = Vec::new();
    for _ in 0..300 {
        let sql = format!("SELECT * FROM v WHERE k = {}", r.below(groups as u64));
        let t = Instant::now();
        let out = tables.query(&sql).expect("query");
        lat.push(t.elapsed());
        assert_eq!(out.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
    }
    show("query of one key through SQL", &mut lat);
    let mut lat = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = tables.query("SELECT COUNT(*) FROM v").expect("query");
        lat.push(t.elapsed());
        assert_eq!(out.len(), 1);
    }
    show("query over the whole view (COUNT(*))", &mut lat);
}

/// p50 trigger latency of one run with `subscribers` reading every trigger.
fn fan_out_run(subscribers: usize, triggers: usize, tables: bool) -> Duration {
    let mut e = Engine::builder().tables(tables).build().expect("engine");
    e.create_view(view(WindowSpec::tumbling(Duration::from_secs(10))))
        .expect("view");
    let readers: Vec<_> = (0..subscribers)
        .map(|_| {
            let mut s = e.subscribe("v").expect("subscribe");
            std::thread::spawn(move || {
                let mut n = 0usize;
                while let Some(c) = futures::executor::block_on(s.next()) {
                    if let thund::Change::Trigger { rows, .. } = c {
                        n += rows.iter().map(|b| b.num_rows()).sum::<usize>();
                    }
                }
                n
            })
        })
        .collect();
    let batches: Vec<RecordBatch> = (0..triggers).map(common::batch).collect();
    let mut lat = Vec::with_capacity(triggers);
    for b in batches {
        e.push("t", b).expect("push");
        let t = Instant::now();
        e.trigger().expect("trigger");
        lat.push(t.elapsed());
    }
    drop(e);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
    pct(&mut lat, 0.5)
}

fn fan_out(triggers: usize) {
    let (mut none, mut eight, mut off) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        none.push(fan_out_run(0, triggers, true));
        eight.push(fan_out_run(8, triggers, true));
        off.push(fan_out_run(0, triggers, false));
    }
    let (a, b, c) = (
        pct(&mut none, 0.5),
        pct(&mut eight, 0.5),
        pct(&mut off, 0.5),
    );
    println!(
        "trigger p50 ({triggers} triggers of 10 000 rows, 1 000 groups, Update, median of 5 runs): \
         no subscriber {:.0} µs, 8 subscribers {:.0} µs: ratio {:.2}",
        a.as_nanos() as f64 / 1e3,
        b.as_nanos() as f64 / 1e3,
        b.as_secs_f64() / a.as_secs_f64()
    );
    println!(
        "trigger p50, same runs: tables kept {:.0} µs, no tables {:.0} µs: ratio {:.2}",
        a.as_nanos() as f64 / 1e3,
        c.as_nanos() as f64 / 1e3,
        a.as_secs_f64() / c.as_secs_f64()
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    lookups(common::env("THUND_TABLE_GROUPS", 1_000_000));
    fan_out(common::env("THUND_TABLE_TRIGGERS", 300));
}
