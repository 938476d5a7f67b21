//! The incremental path's checkpoint format, both directions: open
//! `(window, key)` accumulators ([`operator::AGGREGATE`]: window bounds, the
//! keys decoded to their Arrow types, per aggregate a count, an integer and
//! a float accumulator) and Complete mode's closed results
//! ([`operator::COMPLETE_CLOSED`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Decimal128Array, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::RowConverter;
use thund_dataflows::{AggState, Panes, Update, Value, WindowedAggregate};

use super::keys::{KeyBytes, Keys, GLOBAL};
use super::{updates_of, IncrementalView};
use crate::error::{Error, Result};
use crate::paths::closed::ClosedResults;
use crate::spec::OutputMode;
use crate::state::{operator, Deferred, Export, StateFile};
use crate::time::EventTime;
use crate::window::Window;

/// Encodes open states as the checkpoint's `aggregate` batches: owns what it
/// needs (`Send`), so a full epoch's encoding runs on the sidecar's thread.
struct StateEncoder {
    schema: SchemaRef,
    converter: Option<RowConverter>,
    aggs: usize,
    panes: Option<Panes>,
}

impl StateEncoder {
    fn batch(&self, updates: &[Update], keys: &impl KeyBytes) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(
                updates.iter().map(|u| u.window.start),
            )),
            Arc::new(Int64Array::from_iter_values(
                updates.iter().map(|u| u.window.end),
            )),
        ];
        if let Some(conv) = &self.converter {
            let parser = conv.parser();
            cols.extend(
                conv.convert_rows(updates.iter().map(|u| parser.parse(keys.bytes(u.key))))?,
            );
        }
        for j in 0..self.aggs {
            cols.push(Arc::new(Int64Array::from_iter_values(
                updates.iter().map(|u| u.aggs[j].count),
            )));
            cols.push(Arc::new(
                Decimal128Array::from_iter(updates.iter().map(|u| match u.aggs[j].value {
                    Value::Int(i) => Some(i),
                    _ => None,
                }))
                .with_precision_and_scale(38, 0)?,
            ));
            cols.push(Arc::new(Float64Array::from_iter(updates.iter().map(
                |u| match u.aggs[j].value {
                    Value::Float(f) => Some(f),
                    _ => None,
                },
            ))));
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }

    /// The file of `worker`'s `updates` (none if empty): needed until the last
    /// window its states feed closes.
    fn file(
        &self,
        worker: usize,
        updates: &[Update],
        keys: &impl KeyBytes,
    ) -> Result<Option<StateFile>> {
        if updates.is_empty() {
            return Ok(None);
        }
        let expiry = updates
            .iter()
            .map(|u| self.panes.map_or(u.window.end, |p| p.expiry(u.window)))
            .max()
            .unwrap_or(EventTime::MIN);
        Ok(Some(StateFile::new(
            operator::AGGREGATE,
            worker,
            vec![self.batch(updates, keys)?],
            expiry,
        )))
    }
}

impl IncrementalView {
    /// Schema of the exported state: `window_start`, `window_end` (ms), the
    /// dataflow's keys decoded to their Arrow types (the group keys, then a
    /// `COUNT(DISTINCT …)` argument), then per aggregate `j`:
    /// `agg{j}_count` (non-NULL inputs), `agg{j}_int` (integer or scaled
    /// decimal accumulator) and `agg{j}_float` (float accumulator). Session
    /// windows add three states after the aggregates (a unit's first and last
    /// time and rows through WHERE, see `session`); their windows are units.
    fn state_schema(&self) -> SchemaRef {
        let mut fields = vec![
            Field::new("window_start", DataType::Int64, false),
            Field::new("window_end", DataType::Int64, false),
        ];
        fields.extend(self.plan.key_fields.iter().cloned());
        for j in 0..self.config.aggs.len() {
            fields.push(Field::new(format!("agg{j}_count"), DataType::Int64, false));
            fields.push(Field::new(
                format!("agg{j}_int"),
                DataType::Decimal128(38, 0),
                true,
            ));
            fields.push(Field::new(format!("agg{j}_float"), DataType::Float64, true));
        }
        Arc::new(Schema::new(fields))
    }

    fn encoder(&self) -> Result<StateEncoder> {
        Ok(StateEncoder {
            schema: self.state_schema(),
            converter: super::key_converter(&self.plan)?,
            aggs: self.config.aggs.len(),
            panes: self.config.panes,
        })
    }

    /// State as checkpoint files: the open (window, key) states (`aggregate`;
    /// all of them per worker when `full`, else only those changed since the
    /// last checkpoint) and Complete mode's closed results (`complete-closed`).
    ///
    /// A full export only captures on this thread: the workers' traces (their
    /// batches as of now) and the key dictionary's ids. Reading the traces,
    /// decoding keys and encoding batches run later, in [`Export::deferred`],
    /// on the sidecar's thread, while triggers go on.
    pub(super) fn export_state(&mut self, full: bool) -> Result<Export> {
        let encoder = self.encoder()?;
        let mut files = Vec::new();
        let mut deferred: Option<Deferred> = None;
        if full {
            let pending = self
                .dataflow
                .begin_snapshot()
                .map_err(|e| Error::dataflow(&self.view, e))?;
            let keys = self.keys.snapshot();
            let view = self.view.clone();
            deferred = Some(Box::new(move || {
                let snap = pending.wait().map_err(|e| Error::dataflow(&view, e))?;
                let mut files = Vec::new();
                for (worker, updates) in snap {
                    files.extend(encoder.file(worker, &updates, &keys)?);
                }
                Ok(files)
            }));
        } else {
            let updates = super::updates_of(&self.unsaved);
            files.extend(encoder.file(0, &updates, &self.keys)?);
        }
        self.unsaved.clear();
        files.extend(self.closed_results.export(full));
        Ok(Export {
            files,
            full,
            deferred,
        })
    }

    /// Restart the dataflow at `w` holding exported state (any worker
    /// count); `state` holds (epoch, batch) pairs, and a newer epoch's state
    /// of a (window, key) replaces an older one.
    pub(super) fn import_state(
        &mut self,
        w: Option<EventTime>,
        loaded: &thund_checkpoint::Loaded,
    ) -> Result<()> {
        let mut state: Vec<(u64, &RecordBatch)> = loaded
            .operators
            .get(operator::AGGREGATE)
            .into_iter()
            .flatten()
            .flat_map(|f| f.batches.iter().map(|b| (f.entry.epoch, b)))
            .collect();
        let closed: Vec<RecordBatch> = loaded.batches(operator::COMPLETE_CLOSED).cloned().collect();
        let bad = |m: &str| Error::format(&self.view, format!("{}: {m}", operator::AGGREGATE));
        let n_keys = self.plan.key_fields.len();
        state.sort_by_key(|(e, _)| *e);
        self.keys = Keys::new(self.config.workers);
        // a top-rows query's rule starts over: it lets more rows through, never fewer
        if let Some(p) = &self.plan.prune {
            self.pruner = Some(super::prune::Pruner::new(&self.view, p)?);
        }
        let mut merged: BTreeMap<(Window, u64), Vec<AggState>> = BTreeMap::new();
        for (_, b) in state {
            if b.num_columns() != 2 + n_keys + 3 * self.config.aggs.len() {
                return Err(bad("unexpected columns"));
            }
            let i64col = |i: usize| {
                b.column(i)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .cloned()
                    .ok_or_else(|| bad("expected Int64"))
            };
            let starts = i64col(0)?;
            let ends = i64col(1)?;
            let keys = match &self.converter {
                Some(conv) => Some(conv.convert_columns(&b.columns()[2..2 + n_keys])?),
                None => None,
            };
            let mut per_agg = Vec::new();
            for j in 0..self.config.aggs.len() {
                let base = 2 + n_keys + 3 * j;
                let c = i64col(base)?;
                let int = b
                    .column(base + 1)
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .cloned()
                    .ok_or_else(|| bad("expected Decimal128"))?;
                let fl = b
                    .column(base + 2)
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .cloned()
                    .ok_or_else(|| bad("expected Float64"))?;
                per_agg.push((c, int, fl));
            }
            for i in 0..b.num_rows() {
                let window = Window::new(starts.value(i), ends.value(i));
                let expires = self.config.panes.map_or(window.end, |p| p.expiry(window));
                if w.is_some_and(|w| expires <= w) {
                    continue; // closed since that file was written
                }
                let aggs = per_agg
                    .iter()
                    .map(|(c, int, fl)| AggState {
                        count: c.value(i),
                        value: if int.is_valid(i) {
                            Value::Int(int.value(i))
                        } else if fl.is_valid(i) {
                            Value::Float(fl.value(i))
                        } else {
                            Value::Null
                        },
                    })
                    .collect();
                let key = match &keys {
                    Some(k) => self.keys.intern(k.row(i).data(), expires),
                    None => GLOBAL,
                };
                merged.insert((window, key), aggs);
            }
        }
        let updates: Vec<Update> = merged
            .into_iter()
            .map(|((window, key), aggs)| Update { window, key, aggs })
            .collect();
        if let Some(gap) = self.plan.session {
            self.sessions = Some(super::session::SessionStore::restored(
                gap,
                self.config.aggs.clone(),
                &updates,
                w,
                &self.keys,
            ));
            if self.mode == OutputMode::Complete {
                self.closed_results = ClosedResults::restored(closed.clone());
            }
        }
        let distinct = self.plan.keeps_per_value();
        self.distinct = None;
        let ranked = self.plan.order.is_some() || self.plan.post.is_some();
        self.shown.reset();
        if self.plan.session.is_none() && self.mode != OutputMode::Append {
            let open = match self.config.panes {
                None => updates
                    .iter()
                    .map(|u| ((u.window, u.key), u.aggs.clone()))
                    .collect(),
                // the states are panes: fold each into its windows still open
                Some(p) => {
                    let after = w.unwrap_or(EventTime::MIN);
                    // every state of a slot: the aggregates' and those after
                    // them (a post stage's event times and rows let through)
                    let kinds = self.config.aggs.clone();
                    let mut open = BTreeMap::new();
                    for u in &updates {
                        for win in p.windows_of(u.window).filter(|win| win.end > after) {
                            let states: &mut Vec<AggState> = open
                                .entry((win, u.key))
                                .or_insert_with(|| vec![AggState::EMPTY; kinds.len()]);
                            for ((s, k), x) in states.iter_mut().zip(&kinds).zip(&u.aggs) {
                                s.combine(*k, x)
                                    .map_err(|e| Error::dataflow(&self.view, e))?;
                            }
                        }
                    }
                    open
                }
            };
            // Update mode: what each open group shows is its state at the
            // checkpoint (a group's row changes only in a trigger that
            // reports it), so the next trigger emits what an uninterrupted
            // run would
            if distinct {
                let merged = self.restore_distinct(&open)?;
                if self.mode == OutputMode::Update {
                    let (groups, ids): (Vec<Update>, Vec<u64>) = merged.into_iter().unzip();
                    self.reshow(&groups, Some(&ids))?;
                }
            } else {
                // (a view with a post stage rebuilds what it showed per
                // window instead: `restore_shown`)
                if self.mode == OutputMode::Update && self.plan.post.is_none() {
                    self.reshow(&updates_of(&open), None)?;
                }
                if self.mode == OutputMode::Complete || ranked {
                    self.open = open;
                }
            }
            if self.mode == OutputMode::Complete {
                self.closed_results = ClosedResults::restored(closed);
            }
        }
        let at = w.unwrap_or(EventTime::MIN);
        self.dataflow =
            WindowedAggregate::restore_on(&self.cluster, self.config.clone(), at, updates)
                .map_err(|e| Error::dataflow(&self.view, e))?;
        self.dataflow.report_changes(
            self.mode != OutputMode::Append || self.checkpointing || self.sessions.is_some(),
        );
        self.unsaved.clear();
        self.restore_shown()
    }

    /// After a restore, Update mode: remember the rows the open groups
    /// (`ids`, else their key ids) show, without emitting them.
    fn reshow(&mut self, open: &[Update], ids: Option<&[u64]>) -> Result<()> {
        let refs: Vec<&Update> = open.iter().collect();
        let (rows, from) = self.render_indexed(&refs, Some(false))?;
        if self.plan.order.is_some() {
            let mut windows: Vec<Window> = open.iter().map(|u| u.window).collect();
            windows.dedup();
            let window_of: Vec<Window> = from.iter().map(|&i| open[i].window).collect();
            self.shown.replaced(&windows, &rows, &window_of)?;
        } else {
            let groups: Vec<(Window, u64)> = match ids {
                Some(ids) => open
                    .iter()
                    .zip(ids)
                    .map(|(u, id)| (u.window, *id))
                    .collect(),
                None => open.iter().map(|u| (u.window, u.key)).collect(),
            };
            self.shown.changed(&groups, &rows, &from)?;
        }
        Ok(())
    }
}
