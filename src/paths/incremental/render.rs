//! Results out of the dataflow: keys decoded, accumulators turned into Arrow
//! columns of the Aggregate node's types (integers exact, an overflow an
//! error), HAVING and the select list applied, window bounds prefixed.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array, RecordBatch,
};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::DataType;
use thund_dataflows::{Update, Value};

use super::IncrementalView;
use crate::error::{Error, Result};
use crate::plan::{AggFunc, CompiledAgg};
use crate::time::{bound_array, EventTime};

impl IncrementalView {
    /// Turn dataflow results into output rows: keys decoded, accumulators to
    /// columns, HAVING and the projection applied, window bounds prefixed.
    pub(super) fn render(&self, updates: &[&Update], fin: Option<bool>) -> Result<RecordBatch> {
        let view = &self.view;
        let mut cols: Vec<ArrayRef> = Vec::new();
        if let Some(conv) = &self.converter {
            let parser = conv.parser();
            let rows: Vec<_> = updates.iter().map(|u| parser.parse(&u.key)).collect();
            cols.extend(conv.convert_rows(rows)?);
        }
        for (j, a) in self.plan.aggs.iter().enumerate() {
            cols.push(self.column(a, updates, j)?);
        }
        let mut agg_batch = RecordBatch::try_new(self.plan.agg_schema.clone(), cols)?;
        let mut starts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            updates.iter().map(|u| u.window.start),
        ));
        let mut ends: ArrayRef = Arc::new(Int64Array::from_iter_values(
            updates.iter().map(|u| u.window.end),
        ));
        if let Some(h) = &self.plan.having {
            let m = h
                .evaluate(&agg_batch)
                .and_then(|c| c.into_array(agg_batch.num_rows()))
                .map_err(|e| Error::eval(view, e))?;
            let m = m.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
                Error::internal(view, "HAVING did not evaluate to a boolean array")
            })?;
            agg_batch = filter_record_batch(&agg_batch, m)?;
            starts = arrow::compute::filter(&starts, m)?;
            ends = arrow::compute::filter(&ends, m)?;
        }
        let n = agg_batch.num_rows();
        let query: Vec<ArrayRef> = match &self.plan.projection {
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
        out.extend(query);
        if let Some(f) = fin {
            out.push(Arc::new(BooleanArray::from(vec![f; n])));
        }
        Ok(RecordBatch::try_new(self.out.clone(), out)?)
    }

    /// One aggregate's output column, in the type the Aggregate node declares.
    fn column(&self, a: &CompiledAgg, updates: &[&Update], j: usize) -> Result<ArrayRef> {
        let st = |u: &&Update| u.aggs[j];
        let int = |v: &Value| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        };
        let float = |v: &Value| match v {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::Null => None,
        };
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
                        .map(|sum| sum.saturating_mul(mul) / x.count as i128)
                });
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
            (_, DataType::Decimal128(p, s)) => Arc::new(
                Decimal128Array::from_iter(updates.iter().map(|u| int(&st(u).value)))
                    .with_precision_and_scale(*p, *s)?,
            ),
            (func, dt) => {
                // integers: exact, and an error instead of a wrap when the result type cannot hold it
                let mut v = Vec::with_capacity(updates.len());
                for u in updates {
                    v.push(match int(&st(u).value) {
                        None => None,
                        Some(i) => Some(i64::try_from(i).map_err(|_| Error::Overflow {
                            view: self.view.clone(),
                            aggregate: format!("{func:?}"),
                            data_type: dt.to_string(),
                            window_start: u.window.start,
                            window_end: u.window.end,
                            value: i.to_string(),
                        })?),
                    });
                }
                let i: ArrayRef = Arc::new(Int64Array::from(v));
                if dt == &DataType::Int64 {
                    i
                } else {
                    let c = arrow::compute::cast_with_options(
                        &i,
                        dt,
                        &arrow::compute::CastOptions {
                            safe: false,
                            ..Default::default()
                        },
                    )
                    .map_err(|e| {
                        // name the first window whose value does not fit
                        let ints = i.as_any().downcast_ref::<Int64Array>();
                        let bad = updates.iter().enumerate().find(|(r, _)| {
                            ints.is_some_and(|a| {
                                a.is_valid(*r)
                                    && arrow::compute::cast_with_options(
                                        &a.slice(*r, 1),
                                        dt,
                                        &arrow::compute::CastOptions {
                                            safe: false,
                                            ..Default::default()
                                        },
                                    )
                                    .is_err()
                            })
                        });
                        Error::Overflow {
                            view: self.view.clone(),
                            aggregate: format!("{func:?}"),
                            data_type: dt.to_string(),
                            window_start: bad.map_or(0, |(_, u)| u.window.start),
                            window_end: bad.map_or(0, |(_, u)| u.window.end),
                            value: bad
                                .and_then(|(r, _)| ints.map(|a| a.value(r).to_string()))
                                .unwrap_or_else(|| e.to_string()),
                        }
                    })?;
                    c
                }
            }
        };
        Ok(arr)
    }
}
