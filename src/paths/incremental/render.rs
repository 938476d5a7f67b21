//! Results out of the dataflow: keys decoded, accumulators turned into Arrow
//! columns of the Aggregate node's types (integers exact, an overflow an
//! error), HAVING and the select list applied, window bounds prefixed.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatchOptions;
use arrow::array::{
    new_empty_array, Array, ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array,
    RecordBatch, UInt32Array, UInt64Array,
};
use arrow::compute::{cast, filter_record_batch, lexsort_to_indices, SortColumn};
use arrow::datatypes::{DataType, Field, Schema};
use thund_dataflows::{AggState, Update, Value};

use super::keys::KeyBytes;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::plan::{ordered_as_integer, AggFunc, CompiledAgg, PerValue, TopN};
use crate::time::{bound_array, EventTime};
use crate::window::Window;

/// A group as rendering reads it: its window, key id and states (a
/// dataflow update, or an open group borrowed where the host keeps it).
pub(super) trait GroupStates: Copy {
    fn window(&self) -> Window;
    fn key(&self) -> u64;
    fn states(&self) -> &[AggState];
}

impl GroupStates for &Update {
    fn window(&self) -> Window {
        self.window
    }
    fn key(&self) -> u64 {
        self.key
    }
    fn states(&self) -> &[AggState] {
        &self.aggs
    }
}

impl GroupStates for (&(Window, u64), &Vec<AggState>) {
    fn window(&self) -> Window {
        self.0 .0
    }
    fn key(&self) -> u64 {
        self.0 .1
    }
    fn states(&self) -> &[AggState] {
        self.1
    }
}

impl IncrementalView {
    /// The Aggregate node's rows of `updates`: keys decoded, accumulators
    /// as columns of the types it declares (before HAVING and the select list).
    pub(super) fn agg_rows<G: GroupStates>(&self, updates: &[G]) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = Vec::new();
        if let Some(conv) = &self.converter {
            let parser = conv.parser();
            let rows: Vec<_> = updates
                .iter()
                .map(|u| parser.parse(self.keys.bytes(u.key())))
                .collect();
            // the group keys (a DISTINCT argument, the last key, is not shown)
            let keys = conv.convert_rows(rows)?;
            cols.extend(keys.into_iter().take(self.plan.group_keys));
        }
        for (j, a) in self.plan.aggs.iter().enumerate() {
            cols.push(self.column(a, updates, j)?);
        }
        Ok(RecordBatch::try_new_with_options(
            self.plan.agg_schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(updates.len())),
        )?)
    }

    /// Turn dataflow results into output rows: keys decoded, accumulators to
    /// columns, HAVING and the projection applied, window bounds prefixed.
    pub(super) fn render(&self, updates: &[&Update], fin: Option<bool>) -> Result<RecordBatch> {
        Ok(self.render_indexed(updates, fin)?.0)
    }

    /// [`Self::render`], and for each output row the index in `updates` of
    /// the group it shows (HAVING may drop groups).
    pub(super) fn render_indexed<G: GroupStates>(
        &self,
        updates: &[G],
        fin: Option<bool>,
    ) -> Result<(RecordBatch, Vec<usize>)> {
        let view = &self.view;
        let mut from: Vec<usize> = (0..updates.len()).collect();
        let mut agg_batch = self.agg_rows(updates)?;
        let mut starts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            updates.iter().map(|u| u.window().start),
        ));
        let mut ends: ArrayRef = Arc::new(Int64Array::from_iter_values(
            updates.iter().map(|u| self.shown_window(u.window()).end),
        ));
        // (no group, nothing evaluated: a constant that fails, `ABS` of
        // `i64::MIN`, fails only where a group reaches it, as on the
        // recompute path)
        if let Some(h) = self.plan.having.as_ref().filter(|_| !updates.is_empty()) {
            let m = h
                .evaluate(&agg_batch)
                .and_then(|c| c.into_array(agg_batch.num_rows()))
                .map_err(|e| Error::eval(view, e))?;
            let m = m.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
                Error::internal(view, "HAVING did not evaluate to a boolean array")
            })?;
            from.retain(|&i| m.is_valid(i) && m.value(i));
            agg_batch = filter_record_batch(&agg_batch, m)?;
            starts = arrow::compute::filter(&starts, m)?;
            ends = arrow::compute::filter(&ends, m)?;
        }
        let n = agg_batch.num_rows();
        let query: Vec<ArrayRef> = match &self.plan.projection {
            Some(p) if n == 0 => p
                .iter()
                .map(|e| {
                    e.data_type(&agg_batch.schema())
                        .map(|t| new_empty_array(&t))
                })
                .collect::<datafusion::error::Result<Vec<_>>>()
                .map_err(|e| Error::eval(view, e))?,
            Some(p) => p
                .iter()
                .map(|e| e.evaluate(&agg_batch).and_then(|c| c.into_array(n)))
                .collect::<datafusion::error::Result<Vec<_>>>()
                .map_err(|e| Error::eval(view, e))?,
            None => agg_batch.columns().to_vec(),
        };
        let ms = |a: &ArrayRef| -> Vec<EventTime> {
            a.as_any()
                .downcast_ref::<Int64Array>()
                .map(|x| x.values().to_vec())
                .unwrap_or_default()
        };
        let mut out: Vec<ArrayRef> = vec![
            bound_array(&ms(&starts), &self.plan.bound),
            bound_array(&ms(&ends), &self.plan.bound),
        ];
        let keys = match &self.plan.order {
            Some(o) => Some(self.sort_keys(o, &query)?),
            None => None,
        };
        out.extend(query);
        if let Some(f) = fin {
            out.push(Arc::new(BooleanArray::from(vec![f; n])));
        }
        let batch = RecordBatch::try_new(self.out.clone(), out)?;
        match (&self.plan.order, keys) {
            (Some(o), Some(keys)) => {
                let windows: Vec<_> = from.iter().map(|&i| updates[i].window()).collect();
                let kept = top_n(o, &keys, &windows)?;
                let idx = UInt32Array::from(kept.clone());
                let cols = batch
                    .columns()
                    .iter()
                    .map(|c| arrow::compute::take(c.as_ref(), &idx, None))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let from = kept.iter().map(|&k| from[k as usize]).collect();
                Ok((RecordBatch::try_new(self.out.clone(), cols)?, from))
            }
            _ => Ok((batch, from)),
        }
    }

    /// The `ORDER BY` keys of the output rows (`query`: the select list's columns).
    fn sort_keys(&self, o: &TopN, query: &[ArrayRef]) -> Result<Vec<SortColumn>> {
        let n = query.first().map_or(0, |c| c.len());
        let fields: Vec<Field> = self
            .plan
            .query_schema
            .fields()
            .iter()
            .zip(query)
            .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), true))
            .collect();
        let batch = RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            query.to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        o.sort
            .iter()
            .map(|(e, options)| {
                let values = match n {
                    0 => e.data_type(&batch.schema()).map(|t| new_empty_array(&t)),
                    _ => e.evaluate(&batch).and_then(|c| c.into_array(n)),
                }
                .map_err(|err| Error::eval(&self.view, err))?;
                Ok(SortColumn {
                    values,
                    options: Some(*options),
                })
            })
            .collect()
    }

    /// One aggregate's output column, in the type the Aggregate node declares.
    pub(super) fn column<G: GroupStates>(
        &self,
        a: &CompiledAgg,
        updates: &[G],
        j: usize,
    ) -> Result<ArrayRef> {
        let st = |u: &G| u.states()[j];
        let int = |v: &Value| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        };
        let float = |v: &Value| match v {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::Null => None,
        };
        let overflow = |u: &G, value: String| Error::Overflow {
            view: self.view.clone(),
            aggregate: a.name.clone(),
            data_type: a.output_type.to_string(),
            window_start: u.window().start,
            window_end: u.window().end,
            value,
        };
        // the integer values, exact, and an error for one outside `lo..=hi`
        let within = |lo: i128, hi: i128| -> Result<Vec<Option<i128>>> {
            let mut v: Vec<Option<i128>> = Vec::with_capacity(updates.len());
            for u in updates {
                let x = int(&st(u).value);
                if let Some(i) = x.filter(|i| *i < lo || *i > hi) {
                    return Err(overflow(u, i.to_string()));
                }
                v.push(x);
            }
            Ok(v)
        };
        if matches!(a.per_value, Some(PerValue::Min | PerValue::Max)) {
            return self.value_column(updates, j);
        }
        let arr: ArrayRef = match (a.func, &a.output_type) {
            (AggFunc::Count, _) => Arc::new(Int64Array::from_iter_values(
                updates.iter().map(|u| st(u).count),
            )),
            (AggFunc::Avg, DataType::Decimal128(p, s)) => {
                let DataType::Decimal128(_, s_in) = a.input_type else {
                    return Err(Error::internal(
                        &self.view,
                        "AVG to a decimal from a non-decimal argument",
                    ));
                };
                let mul = 10i128.pow((*s - s_in).max(0) as u32);
                let vals = updates.iter().map(|u| {
                    let x = st(u);
                    (x.count > 0)
                        .then(|| int(&x.value))
                        .flatten()
                        .map(|sum| {
                            let n = i128::from(x.count);
                            crate::paths::sql::checked::decimal_average(sum, n, mul, *p)
                                .ok_or_else(|| overflow(u, format!("{sum} × {mul} / {n}")))
                        })
                        .transpose()
                });
                let vals = vals.collect::<Result<Vec<_>>>()?;
                Arc::new(Decimal128Array::from_iter(vals).with_precision_and_scale(*p, *s)?)
            }
            (AggFunc::Avg, _) => Arc::new(Float64Array::from_iter(updates.iter().map(|u| {
                let x = st(u);
                (x.count > 0)
                    .then(|| float(&x.value))
                    .flatten()
                    .map(|sum| sum / x.count as f64)
            }))),
            (_, DataType::Float32 | DataType::Float64) => {
                let f: ArrayRef = Arc::new(Float64Array::from_iter(
                    updates.iter().map(|u| float(&st(u).value)),
                ));
                cast(&f, &a.output_type)?
            }
            (_, DataType::Decimal128(p, s)) => {
                // a sum past the type's precision is an error, as on the recompute path
                let most = 10i128.pow(u32::from(*p)) - 1;
                let v = within(-most, most)?;
                Arc::new(Decimal128Array::from_iter(v).with_precision_and_scale(*p, *s)?)
            }
            (_, dt) if ordered_as_integer(dt) => {
                // MIN/MAX of a type kept as its integer representation: every
                // state is one of the inputs, so it fits its type again
                let v: ArrayRef = Arc::new(Int64Array::from_iter(
                    updates
                        .iter()
                        .map(|u| int(&st(u).value).and_then(|i| i64::try_from(i).ok())),
                ));
                let v = match dt {
                    // 32-bit types: arrow casts them from Int32 only
                    DataType::Date32 | DataType::Time32(_) => cast(&v, &DataType::Int32)?,
                    _ => v,
                };
                cast(&v, dt)?
            }
            (_, dt) => {
                // integers: exact, and an error instead of a wrap when the result type cannot hold it
                let (lo, hi) = integer_range(dt)
                    .ok_or_else(|| Error::internal(&self.view, format!("{} to {dt}", a.name)))?;
                let v = within(lo, hi)?;
                // every value fits `dt`, so these conversions and the cast are exact
                let exact: ArrayRef = if dt == &DataType::UInt64 {
                    Arc::new(UInt64Array::from_iter(
                        v.iter().map(|x| x.and_then(|i| u64::try_from(i).ok())),
                    ))
                } else {
                    Arc::new(Int64Array::from_iter(
                        v.iter().map(|x| x.and_then(|i| i64::try_from(i).ok())),
                    ))
                };
                cast(&exact, dt)?
            }
        };
        Ok(arr)
    }
}

impl IncrementalView {
    /// A `MIN`/`MAX` kept per value: each state holds the key id of the
    /// entry whose value it is (see `distinct`); the column is those
    /// entries' last key column, NULL where a group has none.
    fn value_column<G: GroupStates>(&self, updates: &[G], j: usize) -> Result<ArrayRef> {
        let Some(conv) = &self.converter else {
            return Err(Error::internal(&self.view, "a value kept without keys"));
        };
        let ids: Vec<Option<u64>> = updates
            .iter()
            .map(|u| match u.states()[j].value {
                Value::Int(i) if u.states()[j].count > 0 => u64::try_from(i).ok(),
                _ => None,
            })
            .collect();
        let parser = conv.parser();
        let rows = ids
            .iter()
            .flatten()
            .map(|&id| parser.parse(self.keys.bytes(id)));
        let cols = conv.convert_rows(rows)?;
        let values = cols
            .last()
            .ok_or_else(|| Error::internal(&self.view, "no value column"))?;
        // row i of the output is value number `at` among the present ones
        let mut at = 0u32;
        let idx = UInt32Array::from_iter(ids.iter().map(|id| {
            id.map(|_| {
                at += 1;
                at - 1
            })
        }));
        Ok(arrow::compute::take(values.as_ref(), &idx, None)?)
    }
}

/// `ORDER BY … LIMIT` per window: the indices of the rows kept, window by
/// window (in window order), each window's in its sort order.
fn top_n(o: &TopN, keys: &[SortColumn], windows: &[Window]) -> Result<Vec<u32>> {
    let mut by_window: BTreeMap<Window, Vec<u32>> = BTreeMap::new();
    for (i, w) in windows.iter().enumerate() {
        by_window.entry(*w).or_default().push(i as u32);
    }
    let limit = o.fetch.map(|f| f.saturating_add(o.skip));
    let mut kept = Vec::new();
    for rows in by_window.into_values() {
        let idx = UInt32Array::from(rows.clone());
        let cols = keys
            .iter()
            .map(|k| {
                Ok(SortColumn {
                    values: arrow::compute::take(k.values.as_ref(), &idx, None)?,
                    options: k.options,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let order = lexsort_to_indices(&cols, limit.map(|l| l.min(rows.len())))?;
        let take = o.fetch.unwrap_or(usize::MAX);
        kept.extend(
            order
                .values()
                .iter()
                .skip(o.skip)
                .take(take)
                .map(|&p| rows[p as usize]),
        );
    }
    Ok(kept)
}

/// The values an integer type holds, as `i128` bounds.
fn integer_range(dt: &DataType) -> Option<(i128, i128)> {
    Some(match dt {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => (i64::MIN.into(), i64::MAX.into()),
        DataType::UInt8 => (0, u8::MAX.into()),
        DataType::UInt16 => (0, u16::MAX.into()),
        DataType::UInt32 => (0, u32::MAX.into()),
        DataType::UInt64 => (0, u64::MAX.into()),
        _ => return None,
    })
}
