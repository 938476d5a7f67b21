//! Session windows per group key: a row's span is `[t, t + gap)`; spans that
//! overlap merge; a session closes when `W ≥ last_event + gap`. A row is late
//! iff its span ended at `W_prev` or it would merge into a closed session.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::row::{RowConverter, SortField};

use super::{take_rows, Emitter, OnTime, SourceInfo, StepOutput};
use crate::error::{Error, Result};
use crate::spec::{ms, OutputMode};
use crate::time::EventTime;
use crate::window::late::{Refusal, Refusals};
use crate::window::Window;

pub(super) struct Session {
    pub start: EventTime,
    pub last: EventTime,
    pub rows: Vec<RecordBatch>,
    result: Option<RecordBatch>,
}

/// Row `i`'s session key bytes (empty for the global session stream).
fn key_bytes(keys: &Option<arrow::row::Rows>, i: usize) -> &[u8] {
    keys.as_ref().map_or(&[], |r| r.row(i).data())
}

/// The open sessions of every key.
pub(super) struct Sessions {
    gap: i64,
    key_cols: Vec<usize>,
    converter: RowConverter,
    pub(super) open: HashMap<Vec<u8>, Vec<Session>>,
    /// Per key, the end of its latest closed session (kept while it can still make a row late).
    pub(super) closed_end: HashMap<Vec<u8>, EventTime>,
    /// (key, start) of the sessions the rows inserted since the last step changed.
    dirty: HashSet<(Vec<u8>, EventTime)>,
}

impl Sessions {
    pub fn new(view: &str, source: &SourceInfo, gap: Duration, key: &[String]) -> Result<Self> {
        let schema = &source.schema;
        let mut key_cols = Vec::new();
        for k in key {
            let i = schema.index_of(k).map_err(|_| {
                Error::spec(
                    view,
                    format!("window.key column `{k}` is not in source `{}`", source.name),
                )
            })?;
            key_cols.push(i);
        }
        let fields = key_cols
            .iter()
            .map(|i| SortField::new(schema.field(*i).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(|e| {
            Error::spec(
                view,
                format!("window.key cannot be used as a session key: {e}"),
            )
        })?;
        Ok(Sessions {
            gap: ms(gap),
            key_cols,
            converter,
            open: HashMap::new(),
            closed_end: HashMap::new(),
            dirty: HashSet::new(),
        })
    }

    /// The rows' session keys (`None` without key columns: one global
    /// session stream, every row's key empty).
    fn keys(&self, batch: &RecordBatch) -> Result<Option<arrow::row::Rows>> {
        if self.key_cols.is_empty() {
            return Ok(None);
        }
        let cols: Vec<ArrayRef> = self
            .key_cols
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        Ok(Some(self.converter.convert_columns(&cols)?))
    }

    fn end(&self, s: &Session) -> EventTime {
        s.last.saturating_add(self.gap)
    }

    /// The session late rule, row by row.
    pub fn classify(
        &self,
        batch: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
    ) -> Result<Refusals> {
        let keys = self.keys(batch)?;
        Ok(times
            .iter()
            .enumerate()
            .filter_map(|(i, t)| match t {
                None => Some((i, Refusal::NullTime)),
                Some(t) if t.checked_add(self.gap).is_none() => Some((i, Refusal::Unrepresentable)),
                Some(t) => {
                    let span = Window {
                        start: t,
                        end: t + self.gap,
                    };
                    let behind = w_prev.is_some_and(|wp| span.end <= wp);
                    let merges_closed = self
                        .closed_end
                        .get(key_bytes(&keys, i))
                        .is_some_and(|e| t < *e);
                    (behind || merges_closed).then_some((i, Refusal::Late(Some(span))))
                }
            })
            .collect())
    }

    /// Merge rows into the open sessions; the sessions that change become dirty.
    pub fn insert(&mut self, on_time: Vec<OnTime>) -> Result<()> {
        for o in on_time {
            if o.batch.num_rows() == 0 {
                continue;
            }
            let keys = self.keys(&o.batch)?;
            let mut by_key: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
            for i in 0..o.batch.num_rows() {
                by_key
                    .entry(key_bytes(&keys, i).to_vec())
                    .or_default()
                    .push(i as u32);
            }
            for (key, idx) in by_key {
                let mut times: Vec<(EventTime, u32)> = idx
                    .iter()
                    .map(|i| (o.times.value(*i as usize), *i))
                    .collect();
                times.sort_unstable();
                let existing = self.open.remove(&key).unwrap_or_default();
                // sweep: existing sessions and the new rows' spans, by start; merge on strict overlap
                let mut items: Vec<(Session, bool)> =
                    existing.into_iter().map(|s| (s, false)).collect();
                items.extend(times.iter().map(|(t, _)| {
                    (
                        Session {
                            start: *t,
                            last: *t,
                            rows: Vec::new(),
                            result: None,
                        },
                        true,
                    )
                }));
                items.sort_by_key(|(s, _)| s.start);
                // an old session that absorbs nothing keeps its cached result
                let mut merged: Vec<(Session, bool)> = Vec::new();
                for (item, is_new) in items {
                    match merged.last_mut() {
                        Some((cur, d)) if item.start < cur.last.saturating_add(self.gap) => {
                            cur.last = cur.last.max(item.last);
                            cur.rows.extend(item.rows);
                            *d |= is_new;
                            cur.result = None;
                        }
                        _ => merged.push((item, is_new)),
                    }
                }
                let starts: Vec<EventTime> = merged.iter().map(|(s, _)| s.start).collect();
                let mut assign: Vec<Vec<u32>> = vec![Vec::new(); merged.len()];
                for (t, i) in &times {
                    let pos = starts.partition_point(|s| s <= t).saturating_sub(1);
                    assign[pos].push(*i);
                }
                let mut list = Vec::with_capacity(merged.len());
                for ((mut s, is_dirty), idx) in merged.into_iter().zip(assign) {
                    if !idx.is_empty() {
                        s.rows.push(take_rows(&o.batch, &idx)?);
                    }
                    if is_dirty {
                        self.dirty.insert((key.clone(), s.start));
                    }
                    list.push(s);
                }
                self.open.insert(key, list);
            }
        }
        Ok(())
    }

    /// Re-evaluate dirty open sessions (Update, Complete), close the sessions `w` closes.
    pub fn step(&mut self, emit: &mut Emitter<'_>, w: Option<EventTime>) -> Result<StepOutput> {
        let mut out = StepOutput::default();
        let dirty = std::mem::take(&mut self.dirty);
        let mode = emit.mode;
        let gap = self.gap;
        let mut closing = Vec::new();
        for (key, list) in self.open.iter_mut() {
            let mut keep = Vec::new();
            for mut sess in list.drain(..) {
                let win = Window {
                    start: sess.start,
                    end: sess.last.saturating_add(gap),
                };
                if w.is_some_and(|w| win.end <= w) {
                    closing.push((key.clone(), win, sess));
                    continue;
                }
                let is_dirty = dirty.contains(&(key.clone(), sess.start));
                if mode != OutputMode::Append && (is_dirty || sess.result.is_none()) {
                    let new = emit.eval.eval(vec![sess.rows.clone()], Some(win))?;
                    if mode == OutputMode::Update {
                        out.batches.push(emit.rows(Some(win), &new, Some(false))?);
                    }
                    sess.result = Some(new);
                }
                keep.push(sess);
            }
            *list = keep;
        }
        self.open.retain(|_, l| !l.is_empty());
        closing.sort_by_key(|(_, w, _)| (w.end, w.start));
        for (key, win, sess) in closing {
            let res = match sess.result {
                Some(r) if !dirty.contains(&(key.clone(), sess.start)) => r,
                _ => emit.eval.eval(vec![sess.rows], Some(win))?,
            };
            let e = self.closed_end.entry(key).or_insert(win.end);
            *e = (*e).max(win.end);
            emit.close(&mut out, win, &res)?;
        }
        if let Some(w) = w {
            self.closed_end.retain(|_, e| e.saturating_add(gap) > w);
        }
        if mode == OutputMode::Complete {
            out.batches.extend(emit.closed.all());
            for sess in self.open.values().flatten() {
                if let Some(r) = &sess.result {
                    let win = Window {
                        start: sess.start,
                        end: self.end(sess),
                    };
                    out.batches.push(emit.rows(Some(win), r, None)?);
                }
            }
        }
        Ok(out)
    }

    /// Evaluate every open session without emitting (after a restore).
    pub fn refresh(&mut self, emit: &Emitter<'_>) -> Result<()> {
        self.dirty.clear();
        let gap = self.gap;
        for sess in self.open.values_mut().flatten() {
            let win = Window {
                start: sess.start,
                end: sess.last.saturating_add(gap),
            };
            sess.result = Some(emit.eval.eval(vec![sess.rows.clone()], Some(win))?);
        }
        Ok(())
    }

    /// Forget what restored rows dirtied.
    pub fn forget_dirty(&mut self) {
        self.dirty.clear();
    }

    pub fn buffered_rows(&self) -> usize {
        self.open
            .values()
            .flatten()
            .flat_map(|x| x.rows.iter())
            .map(|b| b.num_rows())
            .sum()
    }
}
