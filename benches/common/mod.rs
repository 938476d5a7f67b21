//! Shared data for the benches: a seeded bid stream and the benchmarked view.
#![allow(dead_code, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
#[path = "../../tests/suite/common/rng.rs"]
mod rng;
pub use rng::SplitMix;
use thund::{Engine, ExecMode, OutputMode, ViewSpec, WindowSpec};

pub const SQL: &str =
    "SELECT k, COUNT(*) AS c, SUM(v) AS s, AVG(v) AS a, MAX(v) AS m FROM t GROUP BY k";
pub const KEYS: u64 = 1000;
pub const ROWS_PER_TRIGGER: usize = 10_000;

/// A bench parameter from the environment, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Float64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

/// Batch `i` of the stream: 10 000 rows, 0.1 ms of event time per row (one
/// trigger = 1 s, a 10 s window spans ten triggers), up to 500 ms of disorder.
pub fn batch(i: usize) -> RecordBatch {
    batch_spanning(i, 1000)
}

/// Batch `i` of a stream whose batches each span `ms` milliseconds of event
/// time (10 000 rows, 1 000 keys, up to 500 ms of disorder).
pub fn batch_spanning(i: usize, ms: i64) -> RecordBatch {
    let mut r = SplitMix::new(i as u64 + 7);
    let base = i as i64 * ms;
    let n = ROWS_PER_TRIGGER;
    let k: Vec<i64> = (0..n).map(|_| r.below(KEYS) as i64).collect();
    let v: Vec<f64> = (0..n).map(|_| r.below(10_000) as f64 / 10.0).collect();
    let ts: Vec<i64> = (0..n)
        .map(|j| base + (j as i64 * ms) / n as i64 - r.below(500) as i64)
        .collect();
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(k)),
            Arc::new(Float64Array::from(v)),
            Arc::new(TimestampMillisecondArray::from(ts)),
        ],
    )
    .expect("bench batch")
}

pub fn engine(mode: ExecMode, output: OutputMode) -> Engine {
    engine_with(mode, output, 1)
}

pub fn engine_with(mode: ExecMode, output: OutputMode, workers: usize) -> Engine {
    engine_windowed(
        WindowSpec::tumbling(Duration::from_secs(10)),
        mode,
        output,
        workers,
    )
}

pub fn engine_windowed(
    window: WindowSpec,
    mode: ExecMode,
    output: OutputMode,
    workers: usize,
) -> Engine {
    let mut e = Engine::builder().workers(workers).build().expect("engine");
    e.create_view(
        ViewSpec::builder("v", SQL)
            .source("t", "ts", schema())
            .window(window)
            .allowed_lateness(Duration::from_millis(500))
            .output(output)
            .mode(mode)
            .build()
            .expect("spec"),
    )
    .expect("view");
    e
}

/// The throughput benches' engine loop: push each batch, trigger, then finish
/// (Append mode, `workers` workers); the number of output rows.
pub fn engine_run_on(batches: &[RecordBatch], workers: usize) -> usize {
    engine_run_windowed(
        batches,
        WindowSpec::tumbling(Duration::from_secs(10)),
        workers,
    )
}

/// [`engine_run_on`] with another window.
pub fn engine_run_windowed(batches: &[RecordBatch], window: WindowSpec, workers: usize) -> usize {
    let mut e = engine_windowed(window, ExecMode::Auto, OutputMode::Append, workers);
    let mut rows = 0;
    for b in batches {
        e.push("t", b.clone()).expect("push");
        rows += e.trigger().expect("trigger").views[0].output_rows();
    }
    rows + e.finish().expect("finish").views[0].output_rows()
}
