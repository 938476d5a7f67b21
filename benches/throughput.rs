//! Throughput of the incremental path against a hand-written
//! `HashMap<(window, key), accumulator>` aggregator over the same batches,
//! measured side by side in one run.

#![allow(missing_docs)] // criterion_group! generates undocumented items

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arrow::array::{Array, Float64Array, Int64Array, TimestampMillisecondArray};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const BATCHES: usize = 100; // 1 M rows

#[derive(Default, Clone, Copy)]
struct Acc {
    count: i64,
    sum: f64,
    max: f64,
}

/// The baseline: tumbling 10 s windows, per (window, key) count/sum/max (AVG = sum/count),
/// closing windows whose end the watermark (max − 500 ms) passed.
fn hand_written(batches: &[arrow::array::RecordBatch]) -> usize {
    let mut state: HashMap<(i64, i64), Acc> = HashMap::new();
    let mut max_t = i64::MIN;
    let mut emitted = 0;
    for b in batches {
        let k = b
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("k");
        let v = b
            .column(1)
            .as_any()
            .downcast_ref::<Float64Array>()
            .expect("v");
        let t = b
            .column(2)
            .as_any()
            .downcast_ref::<TimestampMillisecondArray>()
            .expect("t");
        let w = max_t.saturating_sub(500);
        for i in 0..b.num_rows() {
            let ts = t.value(i);
            let start = ts.div_euclid(10_000) * 10_000;
            if start + 10_000 <= w {
                continue; // late
            }
            max_t = max_t.max(ts);
            let a = state.entry((start, k.value(i))).or_default();
            a.count += 1;
            a.sum += v.value(i);
            a.max = if a.count == 1 {
                v.value(i)
            } else {
                a.max.max(v.value(i))
            };
        }
        let w = max_t.saturating_sub(500);
        let before = state.len();
        state.retain(|(s, _), a| {
            let keep = s + 10_000 > w;
            if !keep {
                std::hint::black_box(a.sum / a.count as f64);
            }
            keep
        });
        emitted += before - state.len();
    }
    emitted + state.len()
}

fn engine_run(batches: &[arrow::array::RecordBatch]) -> usize {
    common::engine_run_on(batches, 1)
}

fn bench(c: &mut Criterion) {
    let batches: Vec<_> = (0..BATCHES).map(common::batch).collect();
    let rows = (BATCHES * common::ROWS_PER_TRIGGER) as u64;
    let mut group = c.benchmark_group("throughput");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(rows));
    group.bench_function("incremental", |b| b.iter(|| engine_run(&batches)));
    group.bench_function("hand_written_hashmap", |b| {
        b.iter(|| hand_written(&batches))
    });
    group.finish();

    // side by side, same run: best of 5 each, interleaved
    let (mut inc, mut hand) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(
            engine_run(&batches),
            hand_written(&batches),
            "both close the same groups"
        );
        let _ = t;
        let t = Instant::now();
        std::hint::black_box(engine_run(&batches));
        inc = inc.min(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(hand_written(&batches));
        hand = hand.min(t.elapsed());
    }
    let rate = |d: Duration| rows as f64 / d.as_secs_f64() / 1e6;
    println!(
        "throughput over {rows} rows: incremental {:.2} M rows/s, hand-written {:.2} M rows/s, ratio {:.2}",
        rate(inc),
        rate(hand),
        hand.as_secs_f64() / inc.as_secs_f64()
    );

    // 2 workers against 1, same run: best of 5 each, interleaved
    let (mut one, mut two) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        let t = Instant::now();
        std::hint::black_box(common::engine_run_on(&batches, 1));
        one = one.min(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(common::engine_run_on(&batches, 2));
        two = two.min(t.elapsed());
    }
    println!(
        "workers: 1 worker {:.2} M rows/s, 2 workers {:.2} M rows/s, 2 / 1 = {:.2}",
        rate(one),
        rate(two),
        one.as_secs_f64() / two.as_secs_f64()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
