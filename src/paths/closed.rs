//! Complete mode's closed windows (both paths): their final rows, kept to be
//! re-emitted at every trigger, and how many a checkpoint already holds.

use arrow::array::RecordBatch;

use crate::state::{operator, StateFile};
use crate::time::EventTime;

/// Complete mode's emitted closed windows, kept to re-emit them every
/// trigger, and how many of them a checkpoint already holds.
#[derive(Default)]
pub(crate) struct ClosedResults {
    batches: Vec<RecordBatch>,
    saved: usize,
}

impl ClosedResults {
    /// As restored from a checkpoint (all saved).
    pub fn restored(batches: Vec<RecordBatch>) -> Self {
        let saved = batches.len();
        ClosedResults { batches, saved }
    }

    /// Keep a closed window's final rows.
    pub fn push(&mut self, b: RecordBatch) {
        self.batches.push(b);
    }

    /// Every closed window's rows, oldest first.
    pub fn all(&self) -> impl Iterator<Item = RecordBatch> + '_ {
        self.batches.iter().cloned()
    }

    /// The `complete-closed` checkpoint file: all results, or those added
    /// since the last checkpoint.
    pub fn export(&mut self, full: bool) -> Option<StateFile> {
        let from = if full { 0 } else { self.saved };
        self.saved = self.batches.len();
        (self.batches.len() > from).then(|| {
            StateFile::new(
                operator::COMPLETE_CLOSED,
                0,
                self.batches[from..].to_vec(),
                EventTime::MAX,
            )
        })
    }
}
