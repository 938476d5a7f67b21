//! Update latency per trigger, incremental against recompute, as history grows.
//!
//! The same windowed grouped aggregate (COUNT, SUM, AVG, MAX by key, 10 s
//! tumbling windows, 10 000 rows per trigger, Update mode) on both paths,
//! after 100 k, 1 M and 5 M rows of history. Each iteration is one trigger
//! (push 10 000 rows, then `trigger()`); criterion's median is the p50 per
//! trigger. A summary line per setting prints p50s measured side by side.

#![allow(missing_docs)] // criterion_group! generates undocumented items

mod common;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use thund::{ExecMode, OutputMode};

fn histories() -> Vec<usize> {
    match std::env::var("THUND_BENCH_HISTORY") {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![100_000, 1_000_000, 5_000_000],
    }
}

/// The median (`None` when criterion's filter skipped the setting).
fn p50(mut v: Vec<Duration>) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("update_latency_per_trigger");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    for history in histories() {
        let warm = history / common::ROWS_PER_TRIGGER;
        let mut p50s = Vec::new();
        for (name, mode) in [
            ("incremental", ExecMode::Auto),
            ("recompute", ExecMode::Recompute),
        ] {
            let mut e = common::engine(mode, OutputMode::Update);
            for i in 0..warm {
                e.push("t", common::batch(i)).expect("push");
                e.trigger().expect("trigger");
            }
            let mut next = warm;
            let mut times = Vec::new();
            group.bench_with_input(BenchmarkId::new(name, history), &history, |b, _| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let batch = common::batch(next);
                        next += 1;
                        let t = Instant::now();
                        e.push("t", batch).expect("push");
                        e.trigger().expect("trigger");
                        let d = t.elapsed();
                        times.push(d);
                        total += d;
                    }
                    total
                })
            });
            p50s.push((name, p50(times)));
        }
        let (Some(inc), Some(rec)) = (p50s[0].1, p50s[1].1) else {
            continue;
        };
        println!(
            "history {history}: p50 per trigger incremental {inc:.2?}, recompute {rec:.2?}, recompute/incremental {:.1}x",
            rec.as_secs_f64() / inc.as_secs_f64()
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
