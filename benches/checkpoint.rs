//! Checkpoint cost per epoch against state size, full against incremental.
//!
//! A grouped aggregate over 60 s tumbling windows holds one group per key;
//! each trigger pushes 10 000 rows over 1 000 random keys, so the change per
//! epoch is fixed while the state grows with the key space. Prints bytes
//! written, sidecar time, capture time (the `checkpoint` call on the trigger
//! thread) and the time of the next trigger (which runs while the sidecar
//! still reads and writes the epoch) per epoch (medians), for full
//! checkpoints (`checkpoint_compaction(1)`) and incremental ones (compaction
//! every 10).

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../tests/suite/common/rng.rs"]
mod rng;

use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use rng::SplitMix;
use thund::{Engine, ViewSpec, WindowSpec};

fn median<T: Ord + Copy>(mut v: Vec<T>) -> T {
    v.sort();
    v[v.len() / 2]
}

/// Median bytes written, sidecar time, capture time (the checkpoint call on the
/// trigger thread) and trigger time (each trigger runs while the sidecar still
/// handles the previous epoch), and the state rows.
fn run(keys: u64, compact_every: usize) -> (u64, Duration, Duration, Duration, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let mut e = Engine::builder()
        .with_state_root(&format!("file://{}", dir.path().display()))
        .checkpoint_compaction(compact_every)
        .build()
        .expect("engine");
    e.create_view(
        ViewSpec::builder(
            "v",
            "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(v) AS m FROM t GROUP BY k",
        )
        .source("t", "ts", schema.clone())
        .window(WindowSpec::tumbling(Duration::from_secs(3600)))
        .build()
        .expect("spec"),
    )
    .expect("view");
    let mut r = SplitMix::new(keys);
    let batch = |r: &mut SplitMix, keyspace: u64, ts0: i64, n: usize| {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(
                    (0..n).map(|_| r.below(keyspace) as i64),
                )),
                Arc::new(Int64Array::from_iter_values(
                    (0..n).map(|_| r.below(100) as i64),
                )),
                Arc::new(TimestampMillisecondArray::from_iter_values(
                    (0..n).map(|i| ts0 + i as i64),
                )),
            ],
        )
        .expect("batch")
    };
    // fill the state: every key once
    let fill: Vec<i64> = (0..keys as i64).collect();
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(fill.clone())),
            Arc::new(Int64Array::from(vec![1; fill.len()])),
            Arc::new(TimestampMillisecondArray::from(vec![0; fill.len()])),
        ],
    )
    .expect("fill");
    e.push("t", b).expect("push");
    e.trigger().expect("trigger");
    e.checkpoint(serde_json::Value::Null).expect("checkpoint");
    e.sync_checkpoints().expect("sync");
    let (mut bytes, mut write, mut capture, mut trig, mut rows) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0);
    // outcomes come back with a trigger's report or from a sync
    let mut record = |outcomes: Vec<thund::CheckpointOutcome>,
                      bytes: &mut Vec<u64>,
                      write: &mut Vec<Duration>| {
        for o in outcomes {
            let s = o.result.expect("committed");
            bytes.push(s.bytes_written);
            write.push(s.write_time);
            rows = s.state_rows;
        }
    };
    for i in 0..20 {
        // 10 000 rows over 1 000 keys of the key space
        let base = r.below(keys.saturating_sub(1000).max(1));
        let mut b = batch(&mut r, 1000, 1 + i * 10_000, 10_000);
        let k: Int64Array = b
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("k")
            .iter()
            .map(|x| x.map(|x| x + base as i64))
            .collect();
        let mut cols = b.columns().to_vec();
        cols[0] = Arc::new(k);
        b = RecordBatch::try_new(schema.clone(), cols).expect("batch");
        e.push("t", b).expect("push");
        let t = Instant::now();
        let report = e.trigger().expect("trigger");
        trig.push(t.elapsed());
        record(report.checkpoints, &mut bytes, &mut write);
        record(e.sync_checkpoints().expect("sync"), &mut bytes, &mut write);
        let t = Instant::now();
        e.checkpoint(serde_json::Value::Null).expect("checkpoint");
        capture.push(t.elapsed());
    }
    record(e.sync_checkpoints().expect("sync"), &mut bytes, &mut write);
    assert_eq!(bytes.len(), 20, "every epoch committed");
    (
        median(bytes),
        median(write),
        median(capture),
        median(trig),
        rows,
    )
}

fn main() {
    let sizes: Vec<u64> = match std::env::var("THUND_BENCH_KEYS") {
        Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => vec![10_000, 100_000, 1_000_000],
    };
    println!(
        "checkpoint cost per epoch (median of 20 epochs; 10 000 rows over 1 000 keys per epoch)"
    );
    for keys in sizes {
        let (fb, fw, fc, ft, _) = run(keys, 1);
        let (ib, iw, ic, it, state_rows) = run(keys, 10);
        println!(
            "state {keys:>8} groups: full {fb:>9} B, {fw:>9.2?} in sidecar, {fc:>8.2?} capture, {ft:>8.2?} trigger | incremental {ib:>8} B, {iw:>9.2?} in sidecar, {ic:>8.2?} capture, {it:>8.2?} trigger | bytes ratio {:.1}x (state rows referenced: {state_rows})",
            fb as f64 / ib.max(1) as f64
        );
    }
}
