//! What a trigger reports, per view and in all; what a resume restored.

use std::time::Duration;

use arrow::array::RecordBatch;
use serde::Serialize;

use crate::plan::PathKind;
use crate::state::sidecar::CheckpointOutcome;
use crate::time::{display, EventTime};

/// Cumulative counters of one view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ViewCounters {
    /// Rows pushed to the view's sources and taken in at a trigger.
    pub rows: u64,
    /// Rows dropped as late.
    pub late_rows_dropped: u64,
    /// Rows refused as invalid: a NULL event time, or refused by an input reader.
    pub invalid_rows: u64,
    /// Windows closed.
    pub windows_closed: u64,
    /// Entries dropped from the rejected-row relation for its retention
    /// (see [`crate::EngineBuilder::rejected_row_retention`]).
    pub rejected_rows_evicted: u64,
}

/// What one trigger did for one view.
#[derive(Clone, Debug)]
pub struct ViewReport {
    /// The view.
    pub view: String,
    /// W before this trigger (`None` = −∞): rows were classified against it.
    pub previous_watermark: Option<EventTime>,
    /// W after this trigger: every window ending at or before it is final.
    pub watermark: Option<EventTime>,
    /// The dataflow's output frontier after this trigger (incremental path;
    /// `None` on the recompute path or while it is −∞). It equals `watermark`.
    pub frontier: Option<EventTime>,
    /// Rows taken in by this trigger (on time, late and invalid).
    pub rows: u64,
    /// Rows dropped as late by this trigger.
    pub late_rows_dropped: u64,
    /// Rows refused as invalid by this trigger: a NULL event time, or a row
    /// an input reader refused ([`crate::Engine::push_invalid`]).
    pub invalid_rows: u64,
    /// Windows closed by this trigger.
    pub windows_closed: u64,
    /// The emitted rows (see the view's output schema).
    pub output: Vec<RecordBatch>,
    /// Set on the first trigger after a resume: what was restored.
    pub recovery: Option<Recovery>,
    /// Set on the first trigger: what opening the state root noticed besides
    /// a resume (see [`crate::Engine::warnings`]).
    pub warnings: Vec<crate::StateWarning>,
    /// Which path ran.
    pub path: PathKind,
    /// Why that path.
    pub reason: String,
    /// Time this view's part of the trigger took.
    pub latency: Duration,
}

impl ViewReport {
    /// Number of emitted rows.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build()?)?;
    /// # engine.push("bids", RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(vec![1, 2, 2])),
    /// #     Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_000, 11_000]))]).unwrap())?;
    /// let report = engine.trigger()?; // W = 11s: [0s, 10s) closes with auctions 1 and 2
    /// assert_eq!(report.view("counts").unwrap().output_rows(), 2);
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn output_rows(&self) -> usize {
        self.output.iter().map(|b| b.num_rows()).sum()
    }
}

/// What one trigger (one epoch) did.
#[derive(Clone, Debug)]
pub struct TriggerReport {
    /// The epoch this trigger was (1 for the first).
    pub epoch: u64,
    /// Per view, in creation order.
    pub views: Vec<ViewReport>,
    /// Time the whole trigger took.
    pub latency: Duration,
    /// Checkpoints the sidecar committed (or failed) since the last report.
    pub checkpoints: Vec<CheckpointOutcome>,
}

impl TriggerReport {
    /// The report of one view.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build()?)?;
    /// # engine.push("bids", RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(vec![1, 2, 2])),
    /// #     Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_000, 11_000]))]).unwrap())?;
    /// let report = engine.trigger()?;
    /// assert_eq!(report.view("counts").map(|v| v.watermark), Some(Some(11_000)));
    /// assert!(report.view("nope").is_none());
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn view(&self, name: &str) -> Option<&ViewReport> {
        self.views.iter().find(|v| v.view == name)
    }

    /// One JSON object per view, in the shape of `thund run --report`.
    ///
    /// ```
    /// # use std::{sync::Arc, time::Duration};
    /// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
    /// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    /// # use thund::{Engine, ViewSpec, WindowSpec};
    /// # let schema = Arc::new(Schema::new(vec![
    /// #     Field::new("auction", DataType::Int64, false),
    /// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    /// # ]));
    /// # let mut engine = Engine::builder().build()?;
    /// # engine.create_view(ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
    /// #     .source("bids", "ts", schema.clone())
    /// #     .window(WindowSpec::tumbling(Duration::from_secs(10)))
    /// #     .build()?)?;
    /// # engine.push("bids", RecordBatch::try_new(schema.clone(), vec![
    /// #     Arc::new(Int64Array::from(vec![1, 2, 2])),
    /// #     Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_000, 11_000]))]).unwrap())?;
    /// let lines = engine.trigger()?.to_json_lines();
    /// assert_eq!(lines[0]["view"], "counts");
    /// assert_eq!(lines[0]["output_rows"], 2);
    /// assert_eq!(lines[0]["path"], "incremental");
    /// # Ok::<(), thund::Error>(())
    /// ```
    pub fn to_json_lines(&self) -> Vec<serde_json::Value> {
        self.views
            .iter()
            .map(|v| {
                serde_json::json!({
                    "epoch": self.epoch,
                    "view": v.view,
                    "watermark": v.watermark,
                    "watermark_text": display(v.watermark),
                    "frontier": v.frontier,
                    "previous_watermark": v.previous_watermark,
                    "rows": v.rows,
                    "late_rows_dropped": v.late_rows_dropped,
                    "invalid_rows": v.invalid_rows,
                    "windows_closed": v.windows_closed,
                    "output_rows": v.output_rows(),
                    "path": v.path,
                    "reason": v.reason,
                    "latency_us": v.latency.as_micros() as u64,
                })
            })
            .collect()
    }
}

/// What a view resumed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Recovery {
    /// The epoch resumed, in the engine's count of triggers (the epoch the
    /// next trigger follows; the store's own epoch number can be higher, as
    /// it skips numbers that crashed writes left: `store_epoch`).
    pub epoch: u64,
    /// The store's epoch number of the checkpoint resumed.
    pub store_epoch: u64,
    /// W restored.
    pub watermark: Option<EventTime>,
    /// Newer epochs passed over, with why (non-empty = a loud fall-back).
    pub fell_back_from: Vec<thund_checkpoint::SkippedEpoch>,
    /// Oddities the store noticed (ignored uncommitted epochs, …).
    pub warnings: Vec<String>,
    /// The caller's data stored with the epoch (see [`crate::Engine::checkpoint`]).
    pub extra: serde_json::Value,
}
