//! A view without a window: one result over all its rows (Update and
//! Complete; Append is refused at `create_view`).

use arrow::array::{Int64Array, RecordBatch};

use super::{Emitter, OnTime, StepOutput};
use crate::error::Result;
use crate::spec::OutputMode;
use crate::time::EventTime;
use crate::window::late::{Refusal, Refusals};

/// The late rule without windows: a row is late iff `event_time < W_prev`.
pub(super) fn classify(times: &Int64Array, w_prev: Option<EventTime>) -> Refusals {
    times
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match (t, w_prev) {
            (None, _) => Some((i, Refusal::NullTime)),
            (Some(t), Some(wp)) if t < wp => Some((i, Refusal::Late(None))),
            _ => None,
        })
        .collect()
}

/// Every on-time row per source, and the last result.
pub(super) struct Unwindowed {
    pub(super) rows: Vec<Vec<RecordBatch>>,
    result: Option<RecordBatch>,
    dirty: bool,
}

impl Unwindowed {
    pub fn new(n_sources: usize) -> Self {
        Unwindowed {
            rows: vec![Vec::new(); n_sources],
            result: None,
            dirty: true,
        }
    }

    pub fn insert(&mut self, on_time: Vec<OnTime>) -> Result<()> {
        for o in on_time {
            if o.batch.num_rows() > 0 {
                self.rows[o.source].push(o.batch);
                self.dirty = true;
            }
        }
        Ok(())
    }

    /// Re-evaluate if rows arrived; emit the changed rows (Update; all rows,
    /// final, at the end of the stream) or the whole result (Complete).
    pub fn step(&mut self, emit: &mut Emitter<'_>, finishing: bool) -> Result<StepOutput> {
        let mut out = StepOutput::default();
        let old = self.result.take();
        let new = match &old {
            Some(r) if !self.dirty => r.clone(),
            _ => {
                self.dirty = false;
                emit.eval.eval(self.rows.clone(), None)?
            }
        };
        match emit.mode {
            OutputMode::Complete => out.batches.push(new.clone()),
            OutputMode::Update => {
                let changed = if finishing {
                    new.clone()
                } else {
                    crate::paths::changes::changed_rows(old.as_ref(), &new)?
                };
                if changed.num_rows() > 0 {
                    out.batches
                        .push(emit.rows(None, &changed, Some(finishing))?);
                }
            }
            OutputMode::Append => {} // refused at create_view
        }
        self.result = Some(new);
        Ok(out)
    }

    /// Evaluate without emitting (after a restore).
    pub fn refresh(&mut self, emit: &Emitter<'_>) -> Result<()> {
        self.result = Some(emit.eval.eval(self.rows.clone(), None)?);
        self.dirty = false;
        Ok(())
    }

    pub fn buffered_rows(&self) -> usize {
        self.rows.iter().flatten().map(|b| b.num_rows()).sum()
    }
}
