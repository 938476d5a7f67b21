//! Tumbling and hopping windows over rows stored by pane (`gcd(size,
//! slide)`): a window is a run of whole panes, so a hopping window never
//! copies a row, and a pane is evicted once the last window holding it closes.

use std::collections::BTreeMap;

use arrow::array::{Int64Array, RecordBatch};

use super::{group_by, take_rows, Emitter, OnTime, StepOutput};
use crate::error::Result;
use crate::spec::OutputMode;
use crate::time::EventTime;
use crate::window::{TimeWindows, Window};

/// Rows by pane start, per source.
pub(super) type Panes = BTreeMap<EventTime, Vec<Vec<RecordBatch>>>;

/// A window's key in [`PaneWindows::live`]: `(end, start)`, so windows order by end.
type Key = (EventTime, EventTime);

fn window(k: Key) -> Window {
    Window {
        start: k.1,
        end: k.0,
    }
}

/// The rows of window `[start, end)`, per source: the panes it spans.
pub(super) fn window_rows(panes: &Panes, k: Key, n: usize) -> Vec<Vec<RecordBatch>> {
    let mut per = vec![Vec::new(); n];
    for (_, p) in panes.range(k.1..k.0) {
        for (i, b) in p.iter().enumerate() {
            per[i].extend(b.iter().cloned());
        }
    }
    per
}

/// The buffered rows and open windows of a tumbling or hopping view.
pub(super) struct PaneWindows {
    windows: TimeWindows,
    pub(super) panes: Panes,
    /// Windows holding rows that have not closed, ordered by end; the last result if evaluated.
    live: BTreeMap<Key, Option<RecordBatch>>,
    /// Windows the rows inserted since the last step changed, sorted.
    dirty: Vec<Key>,
}

impl PaneWindows {
    pub fn new(windows: TimeWindows) -> Self {
        PaneWindows {
            windows,
            panes: BTreeMap::new(),
            live: BTreeMap::new(),
            dirty: Vec::new(),
        }
    }

    pub fn windows(&self) -> &TimeWindows {
        &self.windows
    }

    /// The watermark from which no open window needs any of these rows.
    pub fn expiry(&self, times: &Int64Array) -> EventTime {
        times
            .iter()
            .flatten()
            .map(|t| self.windows.pane_expiry(self.windows.pane_of(t)))
            .max()
            .unwrap_or(EventTime::MIN)
    }

    /// Take rows into their panes; the windows they reach that were open at `w_prev` become dirty.
    pub fn insert(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        n: usize,
    ) -> Result<()> {
        for o in on_time {
            for (pane, idx) in group_by(&o.times, |t| self.windows.pane_of(t)) {
                let part = take_rows(&o.batch, &idx)?;
                self.panes
                    .entry(pane)
                    .or_insert_with(|| vec![Vec::new(); n])[o.source]
                    .push(part);
                for win in self.windows.windows_of(pane) {
                    if w_prev.is_some_and(|wp| win.end <= wp) {
                        continue; // closed already; the row is on time for a later window
                    }
                    let k = (win.end, win.start);
                    self.live.entry(k).or_insert(None);
                    self.dirty.push(k);
                }
            }
        }
        self.dirty.sort_unstable();
        self.dirty.dedup();
        Ok(())
    }

    /// Re-evaluate dirty open windows (Update, Complete), close the windows
    /// `w` closes, evict panes no open window needs.
    pub fn step(
        &mut self,
        emit: &mut Emitter<'_>,
        w: Option<EventTime>,
        n: usize,
    ) -> Result<StepOutput> {
        let mut out = StepOutput::default();
        let dirty = std::mem::take(&mut self.dirty);
        let is_dirty = |k: &Key| dirty.binary_search(k).is_ok();
        let closes = |k: &Key| w.is_some_and(|w| k.0 <= w);
        // windows that close, evaluated first: each starts before every open
        // window, so an error names the first window by start that fails, as
        // on the incremental path (in Update and Complete modes a window this
        // trigger did not change keeps the result it has)
        let closing: Vec<Key> = self
            .live
            .keys()
            .take_while(|k| closes(k))
            .copied()
            .collect();
        let mut results = Vec::with_capacity(closing.len());
        for k in &closing {
            results.push(match self.live.get(k) {
                Some(Some(r)) if emit.mode != OutputMode::Append && !is_dirty(k) => r.clone(),
                _ => emit
                    .eval
                    .eval(window_rows(&self.panes, *k, n), Some(window(*k)))?,
            });
        }
        // open windows this trigger changed, or without a result yet (after a restore)
        if emit.mode != OutputMode::Append {
            let todo: Vec<Key> = self
                .live
                .iter()
                .filter(|(k, r)| !closes(k) && (r.is_none() || is_dirty(k)))
                .map(|(k, _)| *k)
                .collect();
            for k in todo {
                let new = emit
                    .eval
                    .eval(window_rows(&self.panes, k, n), Some(window(k)))?;
                let old = self.live.insert(k, Some(new.clone())).flatten();
                if emit.mode == OutputMode::Update {
                    emit.provisional(&mut out, window(k), old.as_ref(), &new)?;
                }
            }
        }
        // (emitted after the open windows' changes, as they always were)
        for (k, res) in closing.into_iter().zip(results) {
            self.live.remove(&k);
            emit.close(&mut out, window(k), &res)?;
        }
        if let Some(w) = w {
            let windows = self.windows;
            self.panes.retain(|p, _| windows.pane_expiry(*p) > w);
        }
        if emit.mode == OutputMode::Complete {
            out.batches.extend(emit.closed.all());
            for (k, r) in &self.live {
                if let Some(r) = r {
                    out.batches.push(emit.rows(Some(window(*k)), r, None)?);
                }
            }
        }
        Ok(out)
    }

    /// Evaluate every open window without emitting (after a restore).
    pub fn refresh(&mut self, emit: &Emitter<'_>, n: usize) -> Result<()> {
        self.dirty.clear();
        for (k, r) in self.live.iter_mut() {
            *r = Some(
                emit.eval
                    .eval(window_rows(&self.panes, *k, n), Some(window(*k)))?,
            );
        }
        Ok(())
    }

    /// Forget what restored rows dirtied (their windows' results are rebuilt or not needed).
    pub fn forget_dirty(&mut self) {
        self.dirty.clear();
    }

    pub fn buffered_rows(&self) -> usize {
        self.panes
            .values()
            .flat_map(|p| p.iter().flatten())
            .map(|b| b.num_rows())
            .sum()
    }
}
