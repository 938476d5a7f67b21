//! A view run live: bids come from an async task, triggers fire every 200 ms
//! of processing time, every trigger is checkpointed, and when the bids stop
//! the clock-assisted watermark (`advance_when_idle`) closes the last window.
//! Ctrl-C stops it early, with a final checkpoint.
//!
//! ```text
//! cargo run --example live [STATE_DIR]
//! ```
//!
//! Run it twice with one state directory: the second run resumes from the
//! first one's checkpoint, starts its source at the offset the checkpoint
//! holds, and emits nothing the first run emitted. It checks both.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use futures::StreamExt;
use thund::live::{Live, TokioClock};
use thund::{Engine, OutputMode, ViewSpec, WindowSpec};

const BIDS: u64 = 120;
/// The end of the last window of the bids (1 s windows, 10 ms apart).
const LAST_END: i64 = 2_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("price", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let root = match std::env::args_os().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::env::temp_dir().join("thund-live-example"),
    };
    std::fs::create_dir_all(&root)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;

    // The engine is a blocking API: build it outside the runtime, on the
    // runtime's clock.
    let clock = {
        let _in = rt.enter();
        TokioClock::new()
    };
    let mut engine = Engine::builder()
        .with_clock(Arc::new(clock))
        .with_state_root(&format!("file://{}", root.display()))
        .build()?;
    engine.create_view(
        ViewSpec::builder(
            "bids_per_auction",
            "SELECT auction, COUNT(*) AS bids, MAX(price) AS top FROM bids GROUP BY auction",
        )
        .source("bids", "ts", schema.clone())
        .window(WindowSpec::tumbling(Duration::from_secs(1)))
        // a source quiet for 300 ms is idle; when all are, W moves with the clock
        .idle_timeout(Duration::from_millis(300))
        .advance_when_idle(true)
        .output(OutputMode::Append)
        .build()?,
    )?;
    // resume where the last checkpoint left the source (0 on the first run)
    let from = engine.source_offset("bids").unwrap_or(0);
    println!("bids from offset {from} of {BIDS}");

    // the source: 10 bids every 50 ms (100 ms of event time each), then quiet
    let bids = futures::stream::iter((from..BIDS).step_by(10)).then(move |first| {
        let schema = schema.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let n = (BIDS - first).min(10);
            let ids: Vec<u64> = (first..first + n).collect();
            RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(Int64Array::from_iter_values(
                        ids.iter().map(|i| (i % 3) as i64),
                    )),
                    Arc::new(Int64Array::from_iter_values(
                        ids.iter().map(|i| (i * 7 % 100) as i64),
                    )),
                    Arc::new(TimestampMillisecondArray::from_iter_values(
                        ids.iter().map(|i| *i as i64 * 10),
                    )),
                ],
            )
            .expect("a batch of the declared schema")
        }
    });

    // stop once the last window closed (or on Ctrl-C, or after 30 s)
    let closed = Arc::new(tokio::sync::Notify::new());
    let on_close = closed.clone();
    let outcome = rt.block_on(
        Live::new(engine)
            .source("bids", bids.chain(futures::stream::pending()))
            .trigger_interval(Duration::from_millis(200))
            .finish_at_end(false)
            .on_trigger(move |report| {
                let v = &report.views[0];
                if v.watermark >= Some(LAST_END) {
                    on_close.notify_one();
                }
                for batch in &v.output {
                    if batch.num_rows() > 0 {
                        println!(
                            "epoch {} (W = {:?} ms) closed:\n{}",
                            report.epoch,
                            v.watermark,
                            arrow::util::pretty::pretty_format_batches(std::slice::from_ref(
                                batch
                            ))?
                        );
                    }
                }
                Ok(())
            })
            .run(async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => println!("Ctrl-C: a last checkpoint"),
                    _ = closed.notified() => {}
                    _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
            }),
    )?;
    println!(
        "stopped ({:?}): {} triggers, {} checkpoints, {} rows in, {} rows out; \
         checkpoints in {}",
        outcome.stopped,
        outcome.triggers,
        outcome.checkpoints,
        outcome.rows_in,
        outcome.rows_out,
        root.display()
    );
    // every bid arrived once over the runs; the quiet stream's last window closed
    let w = outcome.engine.watermark("bids_per_auction")?;
    assert_eq!(outcome.rows_in, BIDS - from);
    assert!(
        w >= Some(LAST_END),
        "W = {w:?}: the last window did not close"
    );
    let expected = if from == 0 { 6 } else { 0 }; // 3 auctions in 2 windows
    assert_eq!(outcome.rows_out, expected, "rows emitted by this run");
    Ok(())
}
