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

/// The bench batch's key, value and time columns.
fn columns(
    b: &arrow::array::RecordBatch,
) -> (&Int64Array, &Float64Array, &TimestampMillisecondArray) {
    let col = |i: usize| b.column(i).as_any();
    (
        col(0).downcast_ref().expect("k"),
        col(1).downcast_ref().expect("v"),
        col(2).downcast_ref().expect("t"),
    )
}

/// The baseline: tumbling 10 s windows, per (window, key) count/sum/max (AVG = sum/count),
/// closing windows whose end the watermark (max − 500 ms) passed.
fn hand_written(batches: &[arrow::array::RecordBatch]) -> usize {
    let mut state: HashMap<(i64, i64), Acc> = HashMap::new();
    let mut max_t = i64::MIN;
    let mut emitted = 0;
    for b in batches {
        let (k, v, t) = columns(b);
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

/// Panes of the hopping bench: windows of 1 h every minute, built from 1 min panes.
const PANE: i64 = 60_000;
const HOUR: i64 = 3_600_000;

/// Milliseconds of event time per batch in the hopping bench: 100 batches span
/// one hour, so windows close during the run (about one every 1.7 triggers).
const HOPPING_MS: i64 = 36_000;

/// The hopping baseline, as Flink's sliced windows: per (pane, key)
/// count/sum/max; a window closing merges its 60 panes per key; a pane is
/// dropped once the last window holding it closed. Same late rule (a row is
/// late if its last window closed at the previous watermark).
fn hand_written_panes(batches: &[arrow::array::RecordBatch]) -> usize {
    use std::collections::BTreeMap;
    let mut panes: BTreeMap<i64, HashMap<i64, Acc>> = BTreeMap::new();
    let mut max_t = i64::MIN;
    // the end of the last window closed
    let mut closed = i64::MIN;
    let mut emitted = 0;
    // closes the windows ending at or before `w`: from the first one after
    // `closed` that holds an open pane
    let close_until = |panes: &mut BTreeMap<i64, HashMap<i64, Acc>>, closed: &mut i64, w: i64| {
        let mut n = 0;
        while let Some((&first, _)) = panes.first_key_value() {
            let end = (first + PANE).max(closed.saturating_add(PANE));
            if end > w {
                break;
            }
            let mut window: HashMap<i64, Acc> = HashMap::new();
            for (_, keys) in panes.range(end - HOUR..end) {
                for (&k, a) in keys {
                    let m = window.entry(k).or_default();
                    m.max = if m.count == 0 {
                        a.max
                    } else {
                        m.max.max(a.max)
                    };
                    m.count += a.count;
                    m.sum += a.sum;
                }
            }
            for a in window.values() {
                std::hint::black_box(a.sum / a.count as f64);
            }
            n += window.len();
            *closed = end;
            // the panes whose last window (ending at pane + 1 h) closed
            while panes
                .first_key_value()
                .is_some_and(|(&p, _)| p + HOUR <= end)
            {
                panes.pop_first();
            }
        }
        n
    };
    for b in batches {
        let (k, v, t) = columns(b);
        let w = max_t.saturating_sub(500);
        for i in 0..b.num_rows() {
            let ts = t.value(i);
            let pane = ts.div_euclid(PANE) * PANE;
            if pane + HOUR <= w {
                continue; // late: its last window closed
            }
            max_t = max_t.max(ts);
            let a = panes
                .entry(pane)
                .or_default()
                .entry(k.value(i))
                .or_default();
            a.count += 1;
            a.sum += v.value(i);
            a.max = if a.count == 1 {
                v.value(i)
            } else {
                a.max.max(v.value(i))
            };
        }
        emitted += close_until(&mut panes, &mut closed, max_t.saturating_sub(500));
    }
    emitted + close_until(&mut panes, &mut closed, i64::MAX)
}

fn engine_run_hopping(batches: &[arrow::array::RecordBatch]) -> usize {
    common::engine_run_windowed(
        batches,
        thund::WindowSpec::hopping(Duration::from_secs(3600), Duration::from_secs(60)),
        1,
    )
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

    // hopping 1 h / 1 min against the hand-written pane aggregator, same run
    let hopping: Vec<_> = (0..BATCHES)
        .map(|i| common::batch_spanning(i, HOPPING_MS))
        .collect();
    let (mut inc, mut hand) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        assert_eq!(
            engine_run_hopping(&hopping),
            hand_written_panes(&hopping),
            "both close the same (window, key)s"
        );
        let t = Instant::now();
        std::hint::black_box(engine_run_hopping(&hopping));
        inc = inc.min(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(hand_written_panes(&hopping));
        hand = hand.min(t.elapsed());
    }
    println!(
        "hopping 1 h / 1 min over {rows} rows: incremental {:.2} M rows/s, hand-written panes {:.2} M rows/s, ratio {:.2}",
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
