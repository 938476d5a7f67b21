//! The worker's table of open windows: the current state of every `(window, key)` whose
//! window has not closed, fed by the arrangement's output and drained as windows close.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::error::Error;
use crate::state::agg::{AggKind, AggState, Update};
use crate::state::diff::Acc;
use crate::time::{start_of, Time};
use crate::typedefs::WindowKey;
use crate::window::{EventTime, Key, Window};

/// Current states of a worker's open `(window, key)`s, ordered by window end.
#[derive(Debug)]
pub(crate) struct OpenWindows {
    kinds: Vec<AggKind>,
    /// `(end, start) -> key -> states`.
    by_end: BTreeMap<(EventTime, EventTime), HashMap<Key, Vec<AggState>>>,
    /// `(window, key)`s whose state changed since the last [`OpenWindows::take_step`].
    changed: HashSet<WindowKey>,
    /// The first error met while folding, if any.
    error: Option<Error>,
}

/// What a step produced on one worker.
#[derive(Debug, Default)]
pub(crate) struct StepOutput {
    /// Final states of the windows that closed.
    pub(crate) closed: Vec<Update>,
    /// Current states of open `(window, key)`s that changed.
    pub(crate) changed: Vec<Update>,
}

impl OpenWindows {
    /// An empty table for the aggregates `kinds`.
    pub(crate) fn new(kinds: Vec<AggKind>) -> Self {
        OpenWindows {
            kinds,
            by_end: BTreeMap::new(),
            changed: HashSet::default(),
            error: None,
        }
    }

    /// Folds one output update of the arrangement.
    ///
    /// Updates at or after the window's end are its eviction and are ignored: a window's
    /// final state is its accumulation strictly before its end.
    pub(crate) fn apply(&mut self, data: &WindowKey, time: Time, diff: &Acc) {
        let (window, key) = data;
        if time >= start_of(window.end) {
            return;
        }
        if self.error.is_some() {
            return;
        }
        if diff.overflow || diff.n < 0 || diff.parts.len() != self.kinds.len() {
            self.fail(*window, diff);
            return;
        }
        let groups = self.by_end.entry((window.end, window.start)).or_default();
        let changed = match groups.get_mut(key) {
            Some(states) => {
                let mut changed = false;
                for (i, (state, (kind, part))) in states.iter_mut().zip(&diff.parts).enumerate() {
                    match state.combined(*kind, part) {
                        Ok(new) => {
                            changed |= new != *state;
                            *state = new;
                        }
                        Err(e) => {
                            self.error = Some(with_context(e, *window, i));
                            return;
                        }
                    }
                }
                changed
            }
            None => {
                groups.insert(*key, diff.parts.iter().map(|p| p.1).collect());
                true
            }
        };
        if changed {
            self.changed.insert((*window, *key));
        }
    }

    fn fail(&mut self, window: Window, diff: &Acc) {
        let kind = diff
            .parts
            .first()
            .map(|p| p.0)
            .or_else(|| self.kinds.first().copied())
            .unwrap_or(AggKind::SumInt);
        self.error = Some(Error::Overflow {
            kind,
            window: Some(window),
            detail: if diff.overflow {
                "in the dataflow's accumulation".to_string()
            } else {
                format!("malformed accumulation (n = {})", diff.n)
            },
        });
    }

    /// Takes the error met while folding, if any.
    pub(crate) fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    /// Closes every window with `end <= frontier` (all of them if `frontier` is
    /// `EventTime::MAX`) and returns the closed windows' final states and the changed
    /// still-open states since the last call.
    pub(crate) fn take_step(&mut self, frontier: EventTime) -> StepOutput {
        let closed_groups = if frontier == EventTime::MAX {
            std::mem::take(&mut self.by_end)
        } else {
            let open = self.by_end.split_off(&(frontier + 1, EventTime::MIN));
            std::mem::replace(&mut self.by_end, open)
        };
        let mut out = StepOutput::default();
        for ((end, start), groups) in closed_groups {
            let window = Window { start, end };
            for (key, aggs) in groups {
                out.closed.push(Update { window, key, aggs });
            }
        }
        for (window, key) in self.changed.drain() {
            if window.end <= frontier {
                continue;
            }
            if let Some(aggs) = self
                .by_end
                .get(&(window.end, window.start))
                .and_then(|g| g.get(&key))
            {
                out.changed.push(Update {
                    window,
                    key,
                    aggs: aggs.clone(),
                });
            }
        }
        out
    }

    /// Number of open `(window, key)`s.
    pub(crate) fn len(&self) -> usize {
        self.by_end.values().map(HashMap::len).sum()
    }
}

fn with_context(e: Error, window: Window, slot: usize) -> Error {
    match e {
        Error::Overflow { kind, .. } => Error::Overflow {
            kind,
            window: Some(window),
            detail: format!("aggregate #{slot}"),
        },
        other => other,
    }
}
