//! Rows into the dataflow: WHERE, keys and aggregate arguments evaluated on
//! the Arrow batch, keys encoded, and the batch pre-aggregated by
//! (window, key) so the dataflow gets one update per group, not per row.

use arrow::array::{Array, ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use rustc_hash::FxHashMap;
use thund_dataflows::{AggKind, AggState, Update, Value};

use super::keys::GLOBAL;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::paths::sql::checked::{canonical, canonical_array};
use crate::paths::OnTime;
use crate::plan::CompiledAgg;
use crate::time::EventTime;
use crate::window::Window;

impl IncrementalView {
    /// Per-row aggregate inputs as dataflow values.
    fn values(&self, a: &CompiledAgg, arr: &ArrayRef) -> Result<Vec<Value>> {
        let n = arr.len();
        if a.kind == AggKind::Count {
            return Ok((0..n)
                .map(|i| {
                    if arr.is_valid(i) {
                        Value::Int(1)
                    } else {
                        Value::Null
                    }
                })
                .collect());
        }
        Ok(match &a.input_type {
            DataType::Float32 | DataType::Float64 => {
                let c = cast(arr, &DataType::Float64)?;
                let f = c.as_any().downcast_ref::<Float64Array>().ok_or_else(|| {
                    Error::internal(
                        &self.view,
                        "a float aggregate argument did not cast to Float64",
                    )
                })?;
                f.iter()
                    .map(|v| v.map_or(Value::Null, |x| Value::Float(canonical(x))))
                    .collect()
            }
            DataType::Decimal128(_, _) => {
                let d = arr
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .ok_or_else(|| {
                        Error::internal(
                            &self.view,
                            "a Decimal128 aggregate argument is not a Decimal128 array",
                        )
                    })?;
                d.iter()
                    .map(|v| v.map_or(Value::Null, Value::Int))
                    .collect()
            }
            DataType::UInt64 => {
                let u = arr
                    .as_any()
                    .downcast_ref::<arrow::array::UInt64Array>()
                    .ok_or_else(|| {
                        Error::internal(
                            &self.view,
                            "a UInt64 aggregate argument is not a UInt64 array",
                        )
                    })?;
                u.iter()
                    .map(|v| v.map_or(Value::Null, |v| Value::Int(v as i128)))
                    .collect()
            }
            _ => {
                let c = cast(arr, &DataType::Int64)?;
                let i = c.as_any().downcast_ref::<Int64Array>().ok_or_else(|| {
                    Error::internal(
                        &self.view,
                        "an integer aggregate argument did not cast to Int64",
                    )
                })?;
                i.iter()
                    .map(|v| v.map_or(Value::Null, |v| Value::Int(v as i128)))
                    .collect()
            }
        })
    }

    /// Pre-aggregate this trigger's rows by (window, key) and insert them.
    pub(super) fn ingest(&mut self, on_time: Vec<OnTime>, w_prev: Option<EventTime>) -> Result<()> {
        let view = self.view.clone();
        let kinds: Vec<AggKind> = self.plan.aggs.iter().map(|a| a.kind).collect();
        let panes = self.config.panes;
        let mut updates: Vec<Update> = Vec::new();
        for o in on_time {
            let batch = &o.batch;
            let n = batch.num_rows();
            let mut pass = vec![true; n];
            for f in &self.plan.filters {
                let m = f
                    .evaluate(batch)
                    .and_then(|c| c.into_array(n))
                    .map_err(|e| Error::eval(&view, e))?;
                let m = m.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
                    Error::internal(&view, "WHERE did not evaluate to a boolean array")
                })?;
                for (i, p) in pass.iter_mut().enumerate() {
                    *p &= m.is_valid(i) && m.value(i);
                }
            }
            let global = self.plan.keys.is_empty();
            let key_rows = match &self.converter {
                None => None,
                Some(conv) => {
                    let cols = self
                        .plan
                        .keys
                        .iter()
                        .map(|k| {
                            k.evaluate(batch)
                                .and_then(|c| c.into_array(n))
                                .map(|a| canonical_array(&a))
                        })
                        .collect::<datafusion::error::Result<Vec<_>>>()
                        .map_err(|e| Error::eval(&view, e))?;
                    Some(conv.convert_columns(&cols)?)
                }
            };
            let mut vals = Vec::with_capacity(self.plan.aggs.len());
            for a in &self.plan.aggs {
                let arr = a
                    .arg
                    .evaluate(batch)
                    .and_then(|c| c.into_array(n))
                    .map_err(|e| Error::eval(&view, e))?;
                vals.push(self.values(a, &arr)?);
            }
            // pre-aggregate the batch by (window or pane, key id); a key is interned
            // once per row, with the end of the last window it feeds
            let mut slots: FxHashMap<(Window, u64), usize> = FxHashMap::default();
            let mut add = |unit: Window, key: u64, i: usize| -> Result<()> {
                let slot = *slots.entry((unit, key)).or_insert_with(|| {
                    updates.push(Update {
                        window: unit,
                        key,
                        aggs: vec![AggState::EMPTY; kinds.len()],
                    });
                    updates.len() - 1
                });
                if pass[i] {
                    let acc = &mut updates[slot].aggs;
                    for (j, k) in kinds.iter().enumerate() {
                        let s = AggState::from_value(*k, vals[j][i]);
                        acc[j]
                            .combine(*k, &s)
                            .map_err(|e| Error::dataflow(&view, e))?;
                    }
                }
                Ok(())
            };
            let mut units: Vec<Window> = Vec::new();
            for (i, &passes) in pass.iter().enumerate() {
                if !passes && !global {
                    continue; // a filtered row makes no group; a global aggregate still has its window
                }
                let t = o.times.value(i);
                // what the row feeds, computed once: its pane, or its windows
                units.clear();
                match panes {
                    Some(p) => units.push(p.pane_of(t)),
                    None => units.extend(self.plan.windows.windows_of(t)),
                }
                let expiry = |u: &Window| panes.map_or(u.end, |p| p.expiry(*u));
                let Some(expires) = units.last().map(expiry) else {
                    continue; // no window can place it (refused before ingest)
                };
                let key = match &key_rows {
                    Some(r) => self.keys.intern(r.row(i).data(), expires),
                    None => GLOBAL,
                };
                // only units that still feed an open window (the others closed before the row came)
                for u in &units {
                    if w_prev.is_none_or(|wp| expiry(u) > wp) {
                        add(*u, key, i)?;
                    }
                }
            }
        }
        if !updates.is_empty() {
            self.dataflow
                .insert(updates)
                .map_err(|e| Error::dataflow(&view, e))?;
        }
        Ok(())
    }
}
