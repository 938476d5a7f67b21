//! Pre-aggregation (Flink's "local aggregation"): fold many per-row updates into one per
//! `(window, key)` before they enter the dataflow.

use rustc_hash::FxHashMap as HashMap;

use crate::error::{Error, Result};
use crate::state::agg::{combine_all, AggKind, AggState, Update};
use crate::window::{Key, Window};

/// Folds per-row states into one state vector per `(window, key)`.
///
/// Feeding the dataflow one [`Update`] per `(window, key)` and batch instead of one per row
/// is what makes the differential path fast: its cost is per update, not per row.
///
/// ```
/// use thund_dataflows::{AggKind, AggState, PreAggregator, Value, Window};
/// let kinds = vec![AggKind::Count, AggKind::MaxInt];
/// let mut pre = PreAggregator::new(kinds.clone());
/// let w = Window::new(0, 10);
/// for x in [3, 9, 4] {
///     let states = kinds.iter().map(|&k| AggState::from_value(k, Value::Int(x))).collect();
///     pre.add(w, 7, states)?;
/// }
/// let out = pre.drain();
/// assert_eq!(out.len(), 1);
/// assert_eq!(out[0].aggs[0].count, 3);
/// assert_eq!(out[0].aggs[1].value, Value::Int(9));
/// assert!(pre.is_empty());
/// # Ok::<(), thund_dataflows::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PreAggregator {
    kinds: Vec<AggKind>,
    groups: HashMap<(Window, Key), Vec<AggState>>,
}

impl PreAggregator {
    /// An empty pre-aggregator for the aggregates `aggs` (in [`crate::Config::aggs`] order).
    pub fn new(aggs: Vec<AggKind>) -> Self {
        PreAggregator {
            kinds: aggs,
            groups: HashMap::default(),
        }
    }

    /// The aggregate kinds, in order.
    pub fn kinds(&self) -> &[AggKind] {
        &self.kinds
    }

    /// Folds `states` (one per aggregate) into the group `(window, key)`.
    ///
    /// Errors: [`Error::Arity`] if `states` has the wrong length, [`Error::Overflow`] or
    /// [`Error::TypeMismatch`] from [`AggState::combine`], or [`Error::InvalidState`] for a
    /// state `AggState::from_value` could not have made. After an error the group's state is
    /// unspecified (slots before the failing one may be folded): give up on the batch.
    pub fn add(&mut self, window: Window, key: Key, states: Vec<AggState>) -> Result<()> {
        if states.len() != self.kinds.len() {
            return Err(Error::Arity {
                window,
                expected: self.kinds.len(),
                found: states.len(),
            });
        }
        match self.groups.entry((window, key)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                for (kind, s) in self.kinds.iter().zip(&states) {
                    s.validate(*kind)?;
                }
                v.insert(states);
                Ok(())
            }
            std::collections::hash_map::Entry::Occupied(mut o) => {
                combine_all(&self.kinds, o.get_mut(), &states).map_err(|e| e.placed(window, None))
            }
        }
    }

    /// Number of distinct `(window, key)` groups held.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    /// True if no group is held.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Takes every group out as an [`Update`], in unspecified order, leaving `self` empty.
    pub fn drain(&mut self) -> Vec<Update> {
        self.groups
            .drain()
            .map(|((window, key), aggs)| Update { window, key, aggs })
            .collect()
    }
}
