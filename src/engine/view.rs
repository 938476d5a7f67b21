//! One view inside the engine: its spec and plan, its sources' watermark,
//! the rows pushed since the last trigger, its runtime (either path), its
//! late-row relation and counters; one trigger of it; restoring it.

use std::time::Instant;

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch};
use arrow::compute::filter_record_batch;
use datafusion::logical_expr::LogicalPlan;

use super::rejected::{InvalidRow, Rejected, RejectedRows};
use super::report::{Recovery, ViewCounters, ViewReport};
use crate::error::{Error, Result};
use crate::paths::{OnTime, SourceInfo, ViewRuntime};
use crate::plan::ViewPlan;
use crate::spec::ViewSpec;
use crate::state::StateWarning;
use crate::time::to_millis;
use crate::watermark::{SourceWatermark, WatermarkSnapshot, WatermarkTracker};
use crate::window::late::Refusal;

pub(super) struct View {
    pub spec: ViewSpec,
    pub plan: ViewPlan,
    /// DataFusion's logical plan of the SQL (for `explain`).
    pub logical: LogicalPlan,
    pub sources: Vec<SourceInfo>,
    pub tracker: WatermarkTracker,
    pub runtime: Box<dyn ViewRuntime>,
    /// Per source, the batches pushed since the last trigger.
    pub pending: Vec<Vec<RecordBatch>>,
    /// Rows not taken in: late, without event time, refused by a reader.
    pub rejected: RejectedRows,
    /// Rows input readers refused since the last trigger (per source index).
    pub pending_invalid: Vec<(usize, InvalidRow)>,
    pub counters: ViewCounters,
    pub fingerprint: String,
    /// What the fingerprint hashes, by part (stored in each epoch).
    pub fingerprint_parts: std::collections::BTreeMap<String, String>,
    pub recovery: Option<Recovery>,
    pub recovery_reported: bool,
    /// Full or delta for the next checkpoint.
    pub schedule: thund_checkpoint::policy::CheckpointSchedule,
    /// What the state root said at start besides a resume (see [`super::Engine::warnings`]).
    pub warnings: Vec<StateWarning>,
    /// A window declared in the SQL: the query as written, and the
    /// runtime's output columns the view shows, in the query's order.
    pub written: Option<Written>,
    /// What its emissions leave standing: the view as a table.
    pub contents: crate::table::contents::Contents,
    /// Where each trigger's emitted rows go to its subscribers.
    pub changes: tokio::sync::broadcast::Sender<std::sync::Arc<crate::table::subscribe::Emitted>>,
}

/// A view whose SQL declares its window (`TUMBLE(…)`, `date_bin`, …).
pub(super) struct Written {
    /// The query as written (the spec holds the per-window query).
    pub sql: String,
    /// The runtime's output columns shown, and their schema.
    pub columns: Vec<usize>,
    pub schema: arrow::datatypes::SchemaRef,
}

impl Written {
    /// A runtime batch in the query's layout.
    pub fn lay_out(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let cols = self
            .columns
            .iter()
            .map(|&i| match i {
                crate::spec::window_sql::WINDOW_TIME => {
                    crate::spec::window_sql::window_time(b.column(1))
                }
                i => Ok(b.column(i).clone()),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}

impl View {
    /// Restore a loaded checkpoint: W and per-source state, counters, operator state.
    pub fn restore(&mut self, l: &thund_checkpoint::Loaded, now: i64) -> Result<()> {
        let m = &l.manifest;
        let snap = WatermarkSnapshot {
            watermark: m.watermark,
            sources: m
                .sources
                .iter()
                .map(|s| SourceWatermark {
                    name: s.name.clone(),
                    max_event_time: s.max_event_time,
                    last_active_ms: s.last_active_ms.unwrap_or(now),
                    idle: s.idle,
                })
                .collect(),
            clock_base: m.watermark_clock,
        };
        self.tracker.restore(&snap);
        self.counters = ViewCounters {
            rows: m.counters.other.get("rows").copied().unwrap_or(0),
            late_rows_dropped: m.counters.late_rows_dropped,
            invalid_rows: m.counters.other.get("invalid_rows").copied().unwrap_or(0),
            windows_closed: m.counters.windows_closed,
            rejected_rows_evicted: 0,
        };
        self.runtime.import(m.watermark, l)?;
        self.contents
            .import(l.batches(crate::state::operator::TABLE))?;
        self.recovery = Some(Recovery {
            epoch: m.trigger_epoch.unwrap_or(m.epoch),
            store_epoch: m.epoch,
            watermark: m.watermark,
            fell_back_from: l.fell_back_from.clone(),
            warnings: l.warnings.clone(),
            extra: m.extra.clone(),
        });
        Ok(())
    }

    /// One trigger of this view (design §1): classify the pending rows
    /// against `W_prev`, advance W, step the runtime.
    pub fn trigger(&mut self, epoch: u64, now: i64, finishing: bool) -> Result<ViewReport> {
        let started = Instant::now();
        let w_prev = self.tracker.watermark();
        let mut on_time = Vec::new();
        let (mut rows, mut late, mut invalid) = (0u64, 0u64, 0u64);
        for (si, bad) in std::mem::take(&mut self.pending_invalid) {
            rows += 1;
            invalid += 1;
            self.rejected.push(Rejected {
                source: self.sources[si].name.clone(),
                event_time: bad.event_time,
                window: None,
                watermark: w_prev,
                reason: bad.reason,
                epoch,
                location: bad.location,
                column: bad.column,
                value: bad.value,
            });
        }
        let pending = std::mem::replace(&mut self.pending, vec![Vec::new(); self.sources.len()]);
        for (si, batches) in pending.into_iter().enumerate() {
            let src = &self.sources[si];
            for batch in batches {
                rows += batch.num_rows() as u64;
                let times = to_millis(batch.column(src.event_time).as_ref())?;
                let refused = self.runtime.classify(si, &batch, &times, w_prev)?;
                let mut invalid_here = false;
                for &(i, r) in &refused {
                    let window = match r {
                        Refusal::Late(w) => {
                            late += 1;
                            w
                        }
                        Refusal::NullTime | Refusal::Unrepresentable => {
                            invalid += 1;
                            invalid_here = true;
                            None
                        }
                    };
                    self.rejected.push(Rejected {
                        source: src.name.clone(),
                        event_time: times.is_valid(i).then(|| times.value(i)),
                        window,
                        watermark: w_prev,
                        reason: r.reason().to_string(),
                        epoch,
                        location: None,
                        column: None,
                        value: None,
                    });
                }
                // an invalid row's event time never moves W (a time past
                // i64's windows would close every window at once)
                let max = if invalid_here {
                    let mut valid = vec![true; times.len()];
                    for &(i, r) in &refused {
                        valid[i] = matches!(r, Refusal::Late(_));
                    }
                    times
                        .iter()
                        .zip(valid)
                        .filter_map(|(t, ok)| t.filter(|_| ok))
                        .max()
                } else {
                    arrow::compute::max(&times)
                };
                if batch.num_rows() > 0 {
                    self.tracker.observe(si, max, now);
                }
                // the common case refuses nothing: the batch goes on as it is
                let (kept, kept_times) = if refused.is_empty() {
                    (batch, times)
                } else {
                    let mut keep = vec![true; times.len()];
                    for &(i, _) in &refused {
                        keep[i] = false;
                    }
                    let mask = BooleanArray::from(keep);
                    let kept = filter_record_batch(&batch, &mask)?;
                    let kept_times = arrow::compute::filter(&times, &mask)?;
                    let kept_times = kept_times
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .cloned()
                        .ok_or_else(|| {
                            Error::internal(&self.spec.name, "filtered event times are not Int64")
                        })?;
                    (kept, kept_times)
                };
                if kept.num_rows() > 0 {
                    on_time.push(OnTime {
                        source: si,
                        batch: kept,
                        times: kept_times,
                    });
                }
            }
        }
        let w = if finishing {
            Some(self.tracker.finish())
        } else {
            self.tracker.advance(now)
        };
        let out = self.runtime.step(on_time, w_prev, w)?;
        let shown: Vec<RecordBatch> = match &self.written {
            None => out.batches.clone(),
            Some(l) => out
                .batches
                .iter()
                .map(|b| l.lay_out(b))
                .collect::<Result<_>>()?,
        };
        self.contents.apply(&out.batches, &shown, w)?;
        self.counters.rows += rows;
        self.counters.late_rows_dropped += late;
        self.counters.invalid_rows += invalid;
        self.counters.windows_closed += out.windows_closed;
        self.counters.rejected_rows_evicted = self.rejected.evicted();
        Ok(ViewReport {
            view: self.spec.name.clone(),
            previous_watermark: w_prev,
            watermark: w,
            frontier: self.runtime.stats().frontier,
            warnings: if self.recovery_reported {
                Vec::new()
            } else {
                self.warnings.clone()
            },
            recovery: if self.recovery_reported {
                None
            } else {
                self.recovery_reported = true;
                self.recovery.clone()
            },
            rows,
            late_rows_dropped: late,
            invalid_rows: invalid,
            windows_closed: out.windows_closed,
            output: shown,
            path: self.plan.path(),
            reason: self
                .plan
                .reason()
                .map(|r| r.to_string())
                .unwrap_or_default(),
            latency: started.elapsed(),
        })
    }
}
