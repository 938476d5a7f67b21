//! The incremental path: a supported aggregate shape maintained by a
//! timely/differential dataflow (`thund-dataflows`) whose timestamps are
//! event time.
//!
//! Before rows enter: WHERE, group keys and aggregate arguments are evaluated
//! on the Arrow batch with DataFusion physical expressions, keys are encoded
//! with `arrow::row::RowConverter`, and the batch is pre-aggregated by
//! (window, key). After results leave: keys are decoded, accumulators become
//! Arrow columns shaped like the Aggregate node's output, and HAVING and the
//! top projection run on that batch.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array, RecordBatch,
};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use thund_dataflows::{AggKind, AggState, Config, Update, Value, WindowedAggregate};

use crate::error::{Error, Result};
use crate::plan::{agg_func, shape, AggFunc};
use crate::recompute::{
    classify_time, output_schema, ClosedResults, OnTime, Refusal, SqlEvaluator, StepOutput,
};
use crate::sidecar::StateFile;
use crate::spec::OutputMode;
use crate::time::{bound_array, EventTime};
use crate::window::{TimeWindows, Window};

struct Agg {
    func: AggFunc,
    kind: AggKind,
    arg: Arc<dyn PhysicalExpr>,
    input_type: DataType,
    output_type: DataType,
}

/// The incremental runtime of one view.
pub(crate) struct IncrementalView {
    view: String,
    eval: SqlEvaluator,
    mode: OutputMode,
    out: SchemaRef,
    bound: DataType,
    windows: TimeWindows,
    filters: Vec<Arc<dyn PhysicalExpr>>,
    keys: Vec<Arc<dyn PhysicalExpr>>,
    converter: Option<RowConverter>,
    aggs: Vec<Agg>,
    agg_schema: SchemaRef,
    having: Option<Arc<dyn PhysicalExpr>>,
    projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
    dataflow: WindowedAggregate,
    config: Config,
    /// Complete mode: current states of open (window, key)s, and closed results.
    open: BTreeMap<(Window, Vec<u8>), Vec<AggState>>,
    closed_results: ClosedResults,
    /// Open groups changed since the last checkpoint (what a delta epoch writes).
    unsaved: BTreeMap<(Window, Vec<u8>), Vec<AggState>>,
    /// Whether a state root takes checkpoints (else nothing is tracked for them).
    checkpointing: bool,
}

/// Replace every sub-expression that the Aggregate node computes (a group
/// key or an aggregate) by a column of the Aggregate's output.
fn over_aggregate(e: &Expr, agg: &datafusion::logical_expr::Aggregate) -> Result<Expr, String> {
    let outs: Vec<(Expr, Column)> = agg
        .group_expr
        .iter()
        .chain(agg.aggr_expr.iter())
        .enumerate()
        .map(|(i, x)| {
            let (q, f) = agg.schema.qualified_field(i);
            (x.clone().unalias(), Column::new(q.cloned(), f.name()))
        })
        .collect();
    e.clone()
        .transform_down(|x| {
            Ok(match outs.iter().find(|(o, _)| *o == x) {
                Some((_, c)) => Transformed::yes(Expr::Column(c.clone())),
                None => Transformed::no(x),
            })
        })
        .map(|t| t.data)
        .map_err(|e| e.to_string())
}

fn kind_of(func: AggFunc, dt: &DataType) -> AggKind {
    let float = matches!(dt, DataType::Float32 | DataType::Float64);
    match (func, float) {
        (AggFunc::Count, _) => AggKind::Count,
        (AggFunc::Sum | AggFunc::Avg, false) => AggKind::SumInt,
        (AggFunc::Sum | AggFunc::Avg, true) => AggKind::SumFloat,
        (AggFunc::Min, false) => AggKind::MinInt,
        (AggFunc::Min, true) => AggKind::MinFloat,
        (AggFunc::Max, false) => AggKind::MaxInt,
        (AggFunc::Max, true) => AggKind::MaxFloat,
    }
}

impl IncrementalView {
    /// Compile the shape `ViewPlan::decide` accepted.
    pub fn new(
        view: &str,
        eval: SqlEvaluator,
        windows: TimeWindows,
        mode: OutputMode,
        bound: DataType,
        workers: usize,
    ) -> Result<Self> {
        let plan: LogicalPlan = eval.logical_plan().clone();
        let fail = |m: String| Error::exec(view, format!("compiling the incremental plan: {m}"));
        let s = shape(&plan).map_err(fail)?;
        let ctx = eval.context();
        let input: &DFSchema = s.aggregate.input.schema();
        let phys = |e: &Expr, schema: &DFSchema| {
            ctx.create_physical_expr(e.clone(), schema)
                .map_err(|err| Error::exec(view, format!("`{e}`: {err}")))
        };
        let filters = s
            .filters
            .iter()
            .map(|f| phys(f, input))
            .collect::<Result<Vec<_>>>()?;
        let keys = s
            .aggregate
            .group_expr
            .iter()
            .map(|g| phys(g, input))
            .collect::<Result<Vec<_>>>()?;
        let n_keys = keys.len();
        let agg_schema: SchemaRef = Arc::new(Schema::new(
            s.aggregate
                .schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<Field>>(),
        ));
        let converter = if n_keys == 0 {
            None
        } else {
            let fields = (0..n_keys)
                .map(|i| SortField::new(agg_schema.field(i).data_type().clone()))
                .collect();
            Some(RowConverter::new(fields)?)
        };
        let mut aggs = Vec::new();
        for (i, e) in s.aggregate.aggr_expr.iter().enumerate() {
            let (func, arg, input_type) = agg_func(e, input).map_err(fail)?;
            aggs.push(Agg {
                func,
                kind: kind_of(func, &input_type),
                arg: phys(&arg, input)?,
                input_type,
                output_type: agg_schema.field(n_keys + i).data_type().clone(),
            });
        }
        let agg_df = s.aggregate.schema.as_ref();
        let having = match s.having {
            Some(h) => Some(phys(
                &over_aggregate(h, s.aggregate).map_err(fail)?,
                agg_df,
            )?),
            None => None,
        };
        let projection = match s.projection {
            Some(p) => Some(
                p.iter()
                    .map(|e| phys(&over_aggregate(e, s.aggregate).map_err(fail)?, agg_df))
                    .collect::<Result<Vec<_>>>()?,
            ),
            None => None,
        };
        let config =
            Config::new(aggs.iter().map(|a| a.kind).collect()).with_workers(workers.max(1));
        let dataflow =
            WindowedAggregate::spawn(config.clone()).map_err(|e| Error::exec(view, e))?;
        let out = output_schema(&eval.out_schema, Some(&bound), mode);
        Ok(IncrementalView {
            view: view.to_string(),
            eval,
            mode,
            out,
            bound,
            windows,
            filters,
            keys,
            converter,
            aggs,
            agg_schema,
            having,
            projection,
            dataflow,
            config,
            open: BTreeMap::new(),
            closed_results: ClosedResults::default(),
            unsaved: BTreeMap::new(),
            checkpointing: false,
        })
    }

    pub fn schema(&self) -> SchemaRef {
        self.out.clone()
    }

    pub fn evaluator(&self) -> &SqlEvaluator {
        &self.eval
    }

    /// Track what changes between checkpoints (a state root is configured).
    pub fn enable_checkpoints(&mut self) {
        self.checkpointing = true;
    }

    /// The dataflow's output frontier (`None` = −∞).
    pub fn frontier(&self) -> Option<EventTime> {
        let f = self.dataflow.frontier();
        (f != EventTime::MIN).then_some(f)
    }

    /// Records held by the dataflow's arrangements.
    pub fn state_size(&self) -> usize {
        self.dataflow.state_size()
    }

    pub fn classify(&self, times: &Int64Array, w_prev: Option<EventTime>) -> Vec<Option<Refusal>> {
        classify_time(&self.windows, times, w_prev)
    }

    /// Schema of the exported state: `window_start`, `window_end` (ms), the
    /// group keys decoded to their Arrow types, then per aggregate `j`:
    /// `agg{j}_count` (non-NULL inputs), `agg{j}_int` (integer or scaled
    /// decimal accumulator) and `agg{j}_float` (float accumulator).
    fn state_schema(&self) -> SchemaRef {
        let n_keys = self.keys.len();
        let mut fields = vec![
            Field::new("window_start", DataType::Int64, false),
            Field::new("window_end", DataType::Int64, false),
        ];
        fields.extend((0..n_keys).map(|i| self.agg_schema.field(i).clone()));
        for j in 0..self.aggs.len() {
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

    fn state_batch(&self, updates: &[Update]) -> Result<RecordBatch> {
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
            cols.extend(conv.convert_rows(updates.iter().map(|u| parser.parse(&u.key)))?);
        }
        for j in 0..self.aggs.len() {
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
        Ok(RecordBatch::try_new(self.state_schema(), cols)?)
    }

    /// State as checkpoint files: the open (window, key) states (`aggregate`;
    /// all of them per worker when `full`, else only those changed since the
    /// last checkpoint) and Complete mode's closed results (`complete-closed`).
    pub fn export(&mut self, full: bool) -> Result<Vec<StateFile>> {
        let max_end = |us: &[Update]| {
            us.iter()
                .map(|u| u.window.end)
                .max()
                .unwrap_or(EventTime::MIN)
        };
        let mut files = Vec::new();
        if full {
            let snap = self
                .dataflow
                .snapshot()
                .map_err(|e| Error::exec(&self.view, e))?;
            for (worker, updates) in snap {
                if !updates.is_empty() {
                    files.push(StateFile {
                        expiry: max_end(&updates),
                        file: thund_checkpoint::NewFile {
                            operator: "aggregate".into(),
                            worker,
                            batches: vec![self.state_batch(&updates)?],
                        },
                    });
                }
            }
        } else {
            let updates: Vec<Update> = self
                .unsaved
                .iter()
                .map(|((w, k), a)| Update {
                    window: *w,
                    key: k.clone(),
                    aggs: a.clone(),
                })
                .collect();
            if !updates.is_empty() {
                files.push(StateFile {
                    expiry: max_end(&updates),
                    file: thund_checkpoint::NewFile {
                        operator: "aggregate".into(),
                        worker: 0,
                        batches: vec![self.state_batch(&updates)?],
                    },
                });
            }
        }
        self.unsaved.clear();
        files.extend(self.closed_results.export(full));
        Ok(files)
    }

    /// Restart the dataflow at `w` holding exported state (any worker
    /// count); `state` holds (epoch, batch) pairs, and a newer epoch's state
    /// of a (window, key) replaces an older one.
    pub fn import(
        &mut self,
        w: Option<EventTime>,
        mut state: Vec<(u64, RecordBatch)>,
        closed: Vec<RecordBatch>,
    ) -> Result<()> {
        let bad =
            |m: &str| Error::Checkpoint(format!("view `{}`: aggregate state: {m}", self.view));
        let n_keys = self.keys.len();
        state.sort_by_key(|(e, _)| *e);
        let mut merged: BTreeMap<(Window, Vec<u8>), Vec<AggState>> = BTreeMap::new();
        for (_, b) in &state {
            if b.num_columns() != 2 + n_keys + 3 * self.aggs.len() {
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
            for j in 0..self.aggs.len() {
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
                if w.is_some_and(|w| window.end <= w) {
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
                let key = keys
                    .as_ref()
                    .map_or_else(Vec::new, |k| k.row(i).data().to_vec());
                merged.insert((window, key), aggs);
            }
        }
        let updates: Vec<Update> = merged
            .into_iter()
            .map(|((window, key), aggs)| Update { window, key, aggs })
            .collect();
        if self.mode == OutputMode::Complete {
            self.open = updates
                .iter()
                .map(|u| ((u.window, u.key.clone()), u.aggs.clone()))
                .collect();
            self.closed_results = ClosedResults::restored(closed);
        }
        self.dataflow =
            WindowedAggregate::restore(self.config.clone(), w.unwrap_or(EventTime::MIN), updates)
                .map_err(|e| {
                Error::Checkpoint(format!("view `{}`: restoring the dataflow: {e}", self.view))
            })?;
        self.unsaved.clear();
        Ok(())
    }

    /// Per-row aggregate inputs as dataflow values.
    fn values(&self, a: &Agg, arr: &ArrayRef) -> Result<Vec<Value>> {
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
                let f = c
                    .as_any()
                    .downcast_ref::<Float64Array>()
                    .ok_or_else(|| Error::exec(&self.view, "float cast"))?;
                f.iter()
                    .map(|v| v.map_or(Value::Null, Value::Float))
                    .collect()
            }
            DataType::Decimal128(_, _) => {
                let d = arr
                    .as_any()
                    .downcast_ref::<Decimal128Array>()
                    .ok_or_else(|| Error::exec(&self.view, "decimal"))?;
                d.iter()
                    .map(|v| v.map_or(Value::Null, Value::Int))
                    .collect()
            }
            DataType::UInt64 => {
                let u = arr
                    .as_any()
                    .downcast_ref::<arrow::array::UInt64Array>()
                    .ok_or_else(|| Error::exec(&self.view, "u64"))?;
                u.iter()
                    .map(|v| v.map_or(Value::Null, |v| Value::Int(v as i128)))
                    .collect()
            }
            _ => {
                let c = cast(arr, &DataType::Int64)?;
                let i = c
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or_else(|| Error::exec(&self.view, "int cast"))?;
                i.iter()
                    .map(|v| v.map_or(Value::Null, |v| Value::Int(v as i128)))
                    .collect()
            }
        })
    }

    /// Pre-aggregate this trigger's rows by (window, key) and insert them.
    fn ingest(&mut self, on_time: Vec<OnTime>, w_prev: Option<EventTime>) -> Result<()> {
        let view = self.view.clone();
        let kinds: Vec<AggKind> = self.aggs.iter().map(|a| a.kind).collect();
        let mut updates: Vec<Update> = Vec::new();
        for o in on_time {
            let batch = &o.batch;
            let n = batch.num_rows();
            let mut pass = vec![true; n];
            for f in &self.filters {
                let m = f
                    .evaluate(batch)
                    .and_then(|c| c.into_array(n))
                    .map_err(|e| Error::exec(&view, e))?;
                let m = m
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::exec(&view, "WHERE is not boolean"))?;
                for (i, p) in pass.iter_mut().enumerate() {
                    *p &= m.is_valid(i) && m.value(i);
                }
            }
            let global = self.keys.is_empty();
            let key_rows = match &self.converter {
                None => None,
                Some(conv) => {
                    let cols = self
                        .keys
                        .iter()
                        .map(|k| k.evaluate(batch).and_then(|c| c.into_array(n)))
                        .collect::<datafusion::error::Result<Vec<_>>>()
                        .map_err(|e| Error::exec(&view, e))?;
                    Some(conv.convert_columns(&cols)?)
                }
            };
            let mut vals = Vec::with_capacity(self.aggs.len());
            for a in &self.aggs {
                let arr = a
                    .arg
                    .evaluate(batch)
                    .and_then(|c| c.into_array(n))
                    .map_err(|e| Error::exec(&view, e))?;
                vals.push(self.values(a, &arr)?);
            }
            // pre-aggregate the batch by (window, key); keys are borrowed from the
            // encoded rows, so only a new group allocates
            let mut slots: FxHashMap<(Window, &[u8]), usize> = FxHashMap::default();
            for i in 0..n {
                if !pass[i] && !global {
                    continue; // a filtered row makes no group; a global aggregate still has its window
                }
                let key: &[u8] = key_rows.as_ref().map_or(&[], |r| r.row(i).data());
                let t = o.times.value(i);
                for w in self.windows.windows_of(t) {
                    if w_prev.is_some_and(|wp| w.end <= wp) {
                        continue;
                    }
                    let slot = *slots.entry((w, key)).or_insert_with(|| {
                        updates.push(Update {
                            window: w,
                            key: key.to_vec(),
                            aggs: vec![AggState::EMPTY; kinds.len()],
                        });
                        updates.len() - 1
                    });
                    if pass[i] {
                        let acc = &mut updates[slot].aggs;
                        for (j, k) in kinds.iter().enumerate() {
                            let s = AggState::from_value(*k, vals[j][i]);
                            acc[j].combine(*k, &s).map_err(|e| Error::exec(&view, e))?;
                        }
                    }
                }
            }
        }
        if !updates.is_empty() {
            self.dataflow
                .insert(updates)
                .map_err(|e| Error::exec(&view, e))?;
        }
        Ok(())
    }

    /// Turn dataflow results into output rows: keys decoded, accumulators to
    /// columns, HAVING and the projection applied, window bounds prefixed.
    fn render(&self, updates: &[&Update], fin: Option<bool>) -> Result<RecordBatch> {
        let view = &self.view;
        let mut cols: Vec<ArrayRef> = Vec::new();
        if let Some(conv) = &self.converter {
            let parser = conv.parser();
            let rows: Vec<_> = updates.iter().map(|u| parser.parse(&u.key)).collect();
            cols.extend(conv.convert_rows(rows)?);
        }
        for (j, a) in self.aggs.iter().enumerate() {
            cols.push(self.column(a, updates, j)?);
        }
        let mut agg_batch = RecordBatch::try_new(self.agg_schema.clone(), cols)?;
        let mut starts: ArrayRef = Arc::new(Int64Array::from_iter_values(
            updates.iter().map(|u| u.window.start),
        ));
        let mut ends: ArrayRef = Arc::new(Int64Array::from_iter_values(
            updates.iter().map(|u| u.window.end),
        ));
        if let Some(h) = &self.having {
            let m = h
                .evaluate(&agg_batch)
                .and_then(|c| c.into_array(agg_batch.num_rows()))
                .map_err(|e| Error::exec(view, e))?;
            let m = m
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| Error::exec(view, "HAVING is not boolean"))?;
            agg_batch = filter_record_batch(&agg_batch, m)?;
            starts = arrow::compute::filter(&starts, m)?;
            ends = arrow::compute::filter(&ends, m)?;
        }
        let n = agg_batch.num_rows();
        let query: Vec<ArrayRef> = match &self.projection {
            Some(p) => p
                .iter()
                .map(|e| e.evaluate(&agg_batch).and_then(|c| c.into_array(n)))
                .collect::<datafusion::error::Result<Vec<_>>>()
                .map_err(|e| Error::exec(view, e))?,
            None => agg_batch.columns().to_vec(),
        };
        let ms = |a: &ArrayRef| -> Vec<EventTime> {
            a.as_any()
                .downcast_ref::<Int64Array>()
                .map(|x| x.values().to_vec())
                .unwrap_or_default()
        };
        let mut out: Vec<ArrayRef> = vec![
            bound_array(&ms(&starts), &self.bound),
            bound_array(&ms(&ends), &self.bound),
        ];
        out.extend(query);
        if let Some(f) = fin {
            out.push(Arc::new(BooleanArray::from(vec![f; n])));
        }
        Ok(RecordBatch::try_new(self.out.clone(), out)?)
    }

    /// One aggregate's output column, in the type the Aggregate node declares.
    fn column(&self, a: &Agg, updates: &[&Update], j: usize) -> Result<ArrayRef> {
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
                    return Err(Error::exec(&self.view, "AVG to decimal from a non-decimal"));
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
                        Some(i) => Some(i64::try_from(i).map_err(|_| {
                            Error::exec(
                                &self.view,
                                format!(
                                    "{func:?} overflows {dt} in window [{}, {}): {i}",
                                    u.window.start, u.window.end
                                ),
                            )
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
                        Error::exec(&self.view, format!("{func:?} does not fit {dt}: {e}"))
                    })?;
                    c
                }
            }
        };
        Ok(arr)
    }

    /// Take in this trigger's rows, advance the dataflow to `w`, emit per the output mode.
    pub fn step(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput> {
        self.ingest(on_time, w_prev)?;
        let mut out = StepOutput::default();
        let Some(w) = w else { return Ok(out) };
        let step = self
            .dataflow
            .advance_to(w)
            .map_err(|e| Error::exec(&self.view, e))?;
        if self.checkpointing {
            for u in &step.changed {
                self.unsaved
                    .insert((u.window, u.key.clone()), u.aggs.clone());
            }
            for u in &step.closed {
                self.unsaved.remove(&(u.window, u.key.clone()));
            }
        }
        out.windows_closed = {
            let mut ws: Vec<_> = step.closed.iter().map(|u| u.window).collect();
            ws.dedup();
            ws.len() as u64
        };
        let closed: Vec<&Update> = step.closed.iter().collect();
        match self.mode {
            OutputMode::Append => out.batches.push(self.render(&closed, None)?),
            OutputMode::Update => {
                let changed: Vec<&Update> = step.changed.iter().collect();
                out.batches.push(self.render(&changed, Some(false))?);
                out.batches.push(self.render(&closed, Some(true))?);
            }
            OutputMode::Complete => {
                for u in &step.changed {
                    self.open.insert(
                        (
                            Window {
                                start: u.window.start,
                                end: u.window.end,
                            },
                            u.key.clone(),
                        ),
                        u.aggs.clone(),
                    );
                }
                for u in &step.closed {
                    self.open.remove(&(
                        Window {
                            start: u.window.start,
                            end: u.window.end,
                        },
                        u.key.clone(),
                    ));
                }
                let done = self.render(&closed, None)?;
                self.closed_results.push(done);
                out.batches.extend(self.closed_results.all());
                let open: Vec<Update> = self
                    .open
                    .iter()
                    .map(|((w, k), a)| Update {
                        window: thund_dataflows::Window::new(w.start, w.end),
                        key: k.clone(),
                        aggs: a.clone(),
                    })
                    .collect();
                let refs: Vec<&Update> = open.iter().collect();
                out.batches.push(self.render(&refs, None)?);
            }
        }
        out.batches.retain(|b| b.num_rows() > 0);
        Ok(out)
    }
}
