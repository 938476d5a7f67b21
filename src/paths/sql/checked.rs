//! One arithmetic on both paths: the recompute path runs DataFusion, whose
//! `SUM` over integers wraps on overflow and whose grouped `MIN`/`MAX` over
//! floats depend on row order when a NaN is present. The plan it executes
//! has those aggregates replaced by the ones here, which follow the rules
//! the incremental path follows (README, "Arithmetic"):
//!
//! * `SUM` over integers is exact (an `i128` accumulator) and an overflow of
//!   the SQL result type (`Int64`, or `UInt64` for unsigned inputs) is an
//!   error, [`Overflow`], which the recompute path reports as
//!   [`crate::Error::Overflow`] naming the view, the window and the aggregate.
//! * `SUM` over decimals is exact, and a sum past the result type's
//!   precision (or past 128 bits) is the same error (DataFusion's wraps).
//! * `SUM(DISTINCT …)` and `AVG(DISTINCT …)` over integers and decimals
//!   likewise, over the distinct values (DataFusion's gave a tenth of a
//!   decimal sum past its precision, added integers as doubles, and failed
//!   a decimal average that does not fit untyped).
//! * `AVG` over decimals is exact and an overflow of its result is the same
//!   error (DataFusion's is an untyped execution error).
//! * `AVG` over integers sums exactly (an `i128`) and divides once: the sum
//!   rounded to `f64`, over the count. DataFusion's adds the values as
//!   `f64`s, which near the `i64` limits cancels to another value entirely
//!   (`i64::MIN`, `-463`, `2^62`, `2^62`, in that order, average to `0.0`,
//!   not `-115.75`).
//! * `MIN`/`MAX` over floats use the total order in which `-0.0 = 0.0` and
//!   NaN sorts above every number (PostgreSQL's), independent of row order.
//! * `SUM` and `AVG` used as window functions (`SUM(v) OVER (…)`) are the
//!   same exact ones, a sliding frame's rows taken out again exactly
//!   (DataFusion's wrapped: `i64::MAX` and `1` in a partition summed to
//!   `i64::MIN`). Their `DISTINCT` forms and float `MIN`/`MAX` over windows
//!   are DataFusion's.
//!
//! The replacements keep DataFusion's names (`sum`, `avg`, `min`, `max`), so the
//! plan's columns are unchanged. Other `DISTINCT` aggregates are
//! DataFusion's.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, Aggregate, AggregateUDF, AggregateUDFImpl, EmitTo, Expr, ExprSchemable,
    GroupsAccumulator, LogicalPlan, Signature, Volatility, Window, WindowFunctionDefinition,
};

/// An aggregate whose value does not fit its SQL type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overflow {
    /// The aggregate, as `SUM(t.v)`.
    pub aggregate: String,
    /// The SQL result type.
    pub data_type: DataType,
    /// The exact value that does not fit.
    pub value: String,
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} overflows {} (value {})",
            self.aggregate, self.data_type, self.value
        )
    }
}

impl std::error::Error for Overflow {}

/// The [`Overflow`] somewhere in a DataFusion error's chain.
pub(crate) fn overflow(e: &DataFusionError) -> Option<&Overflow> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(x) = cur {
        if let Some(o) = x.downcast_ref::<Overflow>() {
            return Some(o);
        }
        cur = x.source();
    }
    None
}

/// `plan` with integer `SUM` and float `MIN`/`MAX` replaced, in every
/// aggregate and subquery.
pub(crate) fn rewrite(plan: LogicalPlan) -> datafusion::error::Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|p| match p {
        LogicalPlan::Aggregate(agg) => {
            let schema = agg.input.schema().clone();
            let Some(exprs) = replaced(&agg.aggr_expr, |x| replace(x, &schema))? else {
                return Ok(Transformed::no(LogicalPlan::Aggregate(agg)));
            };
            let new = Aggregate::try_new(agg.input.clone(), agg.group_expr.clone(), exprs)?;
            Ok(Transformed::yes(LogicalPlan::Aggregate(new)))
        }
        // `SUM(…) OVER (…)` and `AVG(…) OVER (…)` likewise
        LogicalPlan::Window(w) => {
            let schema = w.input.schema().clone();
            let Some(exprs) = replaced(&w.window_expr, |x| replace_window(x, &schema))? else {
                return Ok(Transformed::no(LogicalPlan::Window(w)));
            };
            let new = Window::try_new(exprs, w.input.clone())?;
            Ok(Transformed::yes(LogicalPlan::Window(new)))
        }
        p => Ok(Transformed::no(p)),
    })
    .map(|t| t.data)
}

/// `exprs` with `f` applied throughout, if that changed any.
fn replaced(
    exprs: &[Expr],
    f: impl Fn(Expr) -> datafusion::error::Result<Transformed<Expr>>,
) -> datafusion::error::Result<Option<Vec<Expr>>> {
    let mut changed = false;
    let mut out = Vec::with_capacity(exprs.len());
    for e in exprs {
        let t = e.clone().transform_up(&f)?;
        changed |= t.transformed;
        out.push(t.data);
    }
    Ok(changed.then_some(out))
}

fn replace(e: Expr, input: &DFSchema) -> datafusion::error::Result<Transformed<Expr>> {
    let Expr::AggregateFunction(af) = &e else {
        return Ok(Transformed::no(e));
    };
    let p = &af.params;
    let [arg] = p.args.as_slice() else {
        return Ok(Transformed::no(e));
    };
    let filter = p.filter.as_deref();
    let Some(udaf) = checked_udaf(&af.func, p.distinct, arg, filter, input)? else {
        return Ok(Transformed::no(e));
    };
    let func = Arc::new(AggregateUDF::new_from_shared_impl(udaf));
    Ok(Transformed::yes(Expr::AggregateFunction(
        AggregateFunction::new_udf(
            func,
            p.args.clone(),
            p.distinct,
            p.filter.clone(),
            p.order_by.clone(),
            p.null_treatment,
        ),
    )))
}

/// An aggregate used as a window function: `SUM` and `AVG` over integers
/// and decimals replaced as in an aggregate (DataFusion's window `SUM`
/// wrapped: `i64::MAX` and `1` in one partition summed to `i64::MIN`).
/// Float `MIN`/`MAX` and `DISTINCT` keep DataFusion's.
fn replace_window(e: Expr, input: &DFSchema) -> datafusion::error::Result<Transformed<Expr>> {
    let Expr::WindowFunction(wf) = &e else {
        return Ok(Transformed::no(e));
    };
    let (WindowFunctionDefinition::AggregateUDF(f), [arg]) = (&wf.fun, wf.params.args.as_slice())
    else {
        return Ok(Transformed::no(e));
    };
    let name = f.name().to_ascii_lowercase();
    if wf.params.distinct || !matches!(name.as_str(), "sum" | "avg") {
        return Ok(Transformed::no(e));
    }
    let filter = wf.params.filter.as_deref();
    let Some(udaf) = checked_udaf(f, false, arg, filter, input)? else {
        return Ok(Transformed::no(e));
    };
    let mut new = wf.as_ref().clone();
    new.fun =
        WindowFunctionDefinition::AggregateUDF(Arc::new(AggregateUDF::new_from_shared_impl(udaf)));
    Ok(Transformed::yes(Expr::WindowFunction(Box::new(new))))
}

/// Þund's aggregate in place of DataFusion's `func` over `arg` (its input's
/// schema `input`), if it replaces it.
fn checked_udaf(
    func: &AggregateUDF,
    distinct: bool,
    arg: &Expr,
    filter: Option<&Expr>,
    input: &DFSchema,
) -> datafusion::error::Result<Option<Arc<dyn AggregateUDFImpl>>> {
    let name = func.name().to_ascii_lowercase();
    let dt = arg.get_type(input)?;
    // (named as the incremental path names it: `SUM(DISTINCT t.v) FILTER (WHERE …)`)
    let label = |f: &str| {
        let filter = filter.map(|w| w as &dyn std::fmt::Display);
        crate::plan::call_name(f, distinct, arg, filter)
    };
    // of DISTINCT aggregates SUM and AVG over integers and decimals are
    // replaced (DataFusion's wrap, give a decimal past its precision, add
    // doubles, or fail untyped)
    let integer = dt.is_signed_integer() || dt.is_unsigned_integer();
    let decimal = matches!(dt, DataType::Decimal128(_, _));
    if distinct && !(matches!(name.as_str(), "sum" | "avg") && (integer || decimal)) {
        return Ok(None);
    }
    let udaf: Arc<dyn AggregateUDFImpl> = match name.as_str() {
        "sum" if dt.is_signed_integer() || dt.is_unsigned_integer() => Arc::new(CheckedSum {
            label: label("SUM"),
            out: if dt.is_unsigned_integer() {
                DataType::UInt64
            } else {
                DataType::Int64
            },
            signature: Signature::any(1, Volatility::Immutable),
        }),
        "sum" if decimal => Arc::new(CheckedSum {
            label: label("SUM"),
            out: func.return_type(std::slice::from_ref(&dt))?,
            signature: Signature::any(1, Volatility::Immutable),
        }),
        "avg" if integer => Arc::new(ExactAvg {
            label: label("AVG"),
            signature: Signature::any(1, Volatility::Immutable),
        }),
        "avg" if decimal => Arc::new(CheckedAvg {
            label: label("AVG"),
            input: dt.clone(),
            out: func.return_type(std::slice::from_ref(&dt))?,
            signature: Signature::any(1, Volatility::Immutable),
        }),
        "min" | "max" if matches!(dt, DataType::Float32 | DataType::Float64) => {
            Arc::new(TotalOrder {
                max: name == "max",
                signature: Signature::any(1, Volatility::Immutable),
            })
        }
        _ => return Ok(None),
    };
    Ok(Some(udaf))
}

/// The rule for floats: `-0.0` is `0.0` and every NaN is the one NaN.
pub(crate) fn canonical(x: f64) -> f64 {
    if x.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x
    }
}

/// `a` with every float canonical ([`canonical`]); `a` itself when it is
/// not a float array or holds no `-0.0` and no NaN.
pub(crate) fn canonical_array(a: &ArrayRef) -> ArrayRef {
    fn needs<T: arrow::datatypes::ArrowPrimitiveType>(
        a: &arrow::array::PrimitiveArray<T>,
        bits: impl Fn(T::Native) -> bool,
    ) -> bool {
        // the values first (one pass over a slice), validity only for a hit
        a.values()
            .iter()
            .enumerate()
            .any(|(i, &x)| bits(x) && a.is_valid(i))
    }
    match a.data_type() {
        DataType::Float64 => {
            let f = a.as_any().downcast_ref::<Float64Array>();
            match f {
                Some(f) if needs(f, |x| x.is_nan() || (x == 0.0 && x.is_sign_negative())) => {
                    Arc::new(f.unary::<_, arrow::datatypes::Float64Type>(canonical))
                }
                _ => a.clone(),
            }
        }
        DataType::Float32 => {
            let f = a.as_any().downcast_ref::<arrow::array::Float32Array>();
            match f {
                Some(f) if needs(f, |x| x.is_nan() || (x == 0.0 && x.is_sign_negative())) => {
                    Arc::new(f.unary::<_, arrow::datatypes::Float32Type>(|x| {
                        canonical(f64::from(x)) as f32
                    }))
                }
                _ => a.clone(),
            }
        }
        _ => a.clone(),
    }
}

/// Exact integer `SUM`; an error instead of a wrap.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedSum {
    label: String,
    out: DataType,
    signature: Signature,
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        "sum"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(self.out.clone())
    }
    fn state_fields(&self, args: StateFieldsArgs) -> datafusion::error::Result<Vec<FieldRef>> {
        Ok(vec![match args.is_distinct {
            true => distinct_state_field(args.name),
            false => Arc::new(Field::new(
                format_state_name(args.name, "sum"),
                DataType::Decimal128(38, 0),
                true,
            )),
        }])
    }
    fn accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> datafusion::error::Result<Box<dyn Accumulator>> {
        // a decimal sum has its inputs' scale
        let scale = match self.out {
            DataType::Decimal128(_, s) => s,
            _ => 0,
        };
        if args.is_distinct {
            return Ok(Box::new(DistinctSumAcc {
                label: self.label.clone(),
                out: self.out.clone(),
                scale,
                values: Default::default(),
            }));
        }
        Ok(Box::new(SumAcc {
            label: self.label.clone(),
            out: self.out.clone(),
            scale,
            sum: None,
            count: 0,
        }))
    }
}

#[derive(Debug)]
struct SumAcc {
    label: String,
    out: DataType,
    /// The scale of the inputs (0 for integers): values are summed raw.
    scale: i8,
    sum: Option<i128>,
    /// The non-null inputs (or states) in `sum`: a window frame that
    /// retracts them all sums to NULL again.
    count: i64,
}

impl SumAcc {
    /// Add input values (`update_batch`), summed raw at their own scale.
    fn add(&mut self, values: &ArrayRef) -> datafusion::error::Result<()> {
        self.add_raw(&cast(values, &DataType::Decimal128(38, self.scale))?)
    }

    /// Add raw sums (`merge_batch`: a state column of [`Self::state`]).
    fn add_raw(&mut self, d: &ArrayRef) -> datafusion::error::Result<()> {
        let d = d
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .ok_or_else(|| DataFusionError::Internal("SUM state is not Decimal128".into()))?;
        for v in d.iter().flatten() {
            let s = self.sum.unwrap_or(0).checked_add(v).ok_or_else(|| {
                DataFusionError::External(Box::new(Overflow {
                    aggregate: self.label.clone(),
                    data_type: self.out.clone(),
                    value: format!("{} + {v}", self.sum.unwrap_or(0)),
                }))
            })?;
            self.sum = Some(s);
            self.count += 1;
        }
        Ok(())
    }

    /// Take input values out again (`retract_batch`: a window frame's rows
    /// that left it).
    fn retract(&mut self, values: &ArrayRef) -> datafusion::error::Result<()> {
        let d = cast(values, &DataType::Decimal128(38, self.scale))?;
        let d = d.as_primitive::<arrow::datatypes::Decimal128Type>();
        for v in d.iter().flatten() {
            // (the difference of values that were summed: within i128)
            self.sum = Some(self.sum.unwrap_or(0).wrapping_sub(v));
            self.count -= 1;
        }
        if self.count == 0 {
            self.sum = None;
        }
        Ok(())
    }
}

impl Accumulator for SumAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.add(&values[0])
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.retract(&values[0])
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.add_raw(&states[0])
    }
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Decimal128(self.sum, 38, 0)])
    }
    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        let Some(s) = self.sum else {
            return ScalarValue::try_from(&self.out);
        };
        let overflow = || {
            DataFusionError::External(Box::new(Overflow {
                aggregate: self.label.clone(),
                data_type: self.out.clone(),
                value: s.to_string(),
            }))
        };
        Ok(if let DataType::Decimal128(p, scale) = self.out {
            // exact, and within the type's precision
            if s.unsigned_abs() >= 10u128.pow(u32::from(p)) {
                return Err(overflow());
            }
            ScalarValue::Decimal128(Some(s), p, scale)
        } else if self.out == DataType::UInt64 {
            ScalarValue::UInt64(Some(u64::try_from(s).map_err(|_| overflow())?))
        } else {
            ScalarValue::Int64(Some(i64::try_from(s).map_err(|_| overflow())?))
        })
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.label.capacity()
    }
}

/// Exact integer and decimal `SUM(DISTINCT …)`: the distinct values (raw,
/// at the inputs' scale), summed exactly when the aggregate is evaluated;
/// an error instead of a wrap, or of a decimal past its type's precision.
#[derive(Debug)]
struct DistinctSumAcc {
    label: String,
    out: DataType,
    /// The scale of the inputs (0 for integers).
    scale: i8,
    values: std::collections::BTreeSet<i128>,
}

impl DistinctSumAcc {
    /// Adds input values (`update_batch`), raw at their own scale.
    fn add(&mut self, values: &ArrayRef) -> datafusion::error::Result<()> {
        self.add_raw(&cast(values, &DataType::Decimal128(38, self.scale))?)
    }

    /// Adds raw values (`merge_batch`: a list of [`Self::state`]).
    fn add_raw(&mut self, d: &ArrayRef) -> datafusion::error::Result<()> {
        let d = d
            .as_any()
            .downcast_ref::<Decimal128Array>()
            .ok_or_else(|| {
                DataFusionError::Internal("SUM(DISTINCT) input is not Decimal128".into())
            })?;
        self.values.extend(d.iter().flatten());
        Ok(())
    }
}

impl Accumulator for DistinctSumAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.add(&values[0])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        let lists = states[0]
            .as_any()
            .downcast_ref::<arrow::array::ListArray>()
            .ok_or_else(|| DataFusionError::Internal("SUM(DISTINCT) state is not a list".into()))?;
        for l in lists.iter().flatten() {
            self.add_raw(&l)?;
        }
        Ok(())
    }
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        let values: Vec<ScalarValue> = self
            .values
            .iter()
            .map(|v| ScalarValue::Decimal128(Some(*v), 38, 0))
            .collect();
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
            &values,
            &DataType::Decimal128(38, 0),
        ))])
    }
    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        let mut sum = SumAcc {
            label: self.label.clone(),
            out: self.out.clone(),
            scale: self.scale,
            sum: None,
            count: 0,
        };
        let values: ArrayRef = Arc::new(Decimal128Array::from_iter_values(
            self.values.iter().copied(),
        ));
        if !self.values.is_empty() {
            sum.add_raw(&values)?;
        }
        sum.evaluate()
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.label.capacity() + self.values.len() * 48
    }
}

/// The state of an exact `SUM(DISTINCT …)` or `AVG(DISTINCT …)`: the
/// distinct values seen, raw (at the inputs' scale).
fn distinct_state_field(name: &str) -> FieldRef {
    let item = DataType::Decimal128(38, 0);
    Arc::new(Field::new(
        format_state_name(name, "distinct values"),
        DataType::List(Arc::new(Field::new_list_field(item, true))),
        true,
    ))
}

/// How [`DistinctAvgAcc`] divides the exact sum of its values by their count.
#[derive(Debug)]
enum AvgOf {
    /// Integers: the sum rounded to `f64`, over the count (as [`ExactAvg`]).
    Float,
    /// Decimals: the sum scaled by `mul` to the result's scale, over the
    /// count, truncated (as [`CheckedAvg`]).
    Decimal { mul: i128 },
}

/// Exact integer and decimal `AVG(DISTINCT …)`: the distinct values of a
/// [`DistinctSumAcc`], their exact sum divided once. DataFusion's adds
/// integers as doubles and fails a decimal that does not fit untyped.
#[derive(Debug)]
struct DistinctAvgAcc {
    values: DistinctSumAcc,
    of: AvgOf,
}

impl DistinctAvgAcc {
    /// An empty accumulator of `label`'s values (at `scale`) into `out`.
    fn boxed(label: &str, out: &DataType, scale: i8, of: AvgOf) -> Box<dyn Accumulator> {
        Box::new(DistinctAvgAcc {
            values: DistinctSumAcc {
                label: label.to_string(),
                out: out.clone(),
                scale,
                values: Default::default(),
            },
            of,
        })
    }
}

impl Accumulator for DistinctAvgAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.values.update_batch(values)
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.values.merge_batch(states)
    }
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        self.values.state()
    }
    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        let v = &self.values;
        let n = v.values.len() as i128;
        let overflow = |value: String| {
            DataFusionError::External(Box::new(Overflow {
                aggregate: v.label.clone(),
                data_type: v.out.clone(),
                value,
            }))
        };
        let mut sum: i128 = 0;
        for x in &v.values {
            sum = sum
                .checked_add(*x)
                .ok_or_else(|| overflow(format!("{sum} + {x}")))?;
        }
        match (&self.of, &v.out) {
            (AvgOf::Float, _) => Ok(ScalarValue::Float64((n > 0).then(|| sum as f64 / n as f64))),
            (AvgOf::Decimal { mul }, DataType::Decimal128(p, s)) => {
                if n == 0 {
                    return Ok(ScalarValue::Decimal128(None, *p, *s));
                }
                match decimal_average(sum, n, *mul, *p) {
                    Some(v) => Ok(ScalarValue::Decimal128(Some(v), *p, *s)),
                    None => Err(overflow(format!("{sum} × {mul} / {n}"))),
                }
            }
            (AvgOf::Decimal { .. }, _) => Err(DataFusionError::Internal(
                "AVG(DISTINCT) result is not a decimal".into(),
            )),
        }
    }
    fn size(&self) -> usize {
        self.values.size()
    }
}

/// Exact decimal `AVG` (DataFusion's result type and rounding); an error
/// instead of DataFusion's untyped one when it does not fit.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CheckedAvg {
    label: String,
    input: DataType,
    out: DataType,
    signature: Signature,
}

impl AggregateUDFImpl for CheckedAvg {
    fn name(&self) -> &str {
        "avg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(self.out.clone())
    }
    fn state_fields(&self, args: StateFieldsArgs) -> datafusion::error::Result<Vec<FieldRef>> {
        Ok(avg_state_fields(args.name, args.is_distinct))
    }
    fn accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> datafusion::error::Result<Box<dyn Accumulator>> {
        let (DataType::Decimal128(_, s_in), DataType::Decimal128(_, s_out)) =
            (&self.input, &self.out)
        else {
            return Err(DataFusionError::Internal("AVG over a non-decimal".into()));
        };
        let mul = 10i128.pow((*s_out - *s_in).max(0) as u32);
        if args.is_distinct {
            let of = AvgOf::Decimal { mul };
            return Ok(DistinctAvgAcc::boxed(&self.label, &self.out, *s_in, of));
        }
        Ok(Box::new(AvgAcc {
            sum: SumAcc {
                label: self.label.clone(),
                out: self.out.clone(),
                scale: *s_in,
                sum: None,
                count: 0,
            },
            count: 0,
            mul,
        }))
    }
}

#[derive(Debug)]
struct AvgAcc {
    /// The exact sum of the raw decimal values.
    sum: SumAcc,
    count: i64,
    /// Scales the sum from the input's scale to the result's.
    mul: i128,
}

impl Accumulator for AvgAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.count += (values[0].len() - values[0].null_count()) as i64;
        self.sum.add(&values[0])
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.count -= (values[0].len() - values[0].null_count()) as i64;
        self.sum.retract(&values[0])
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        let counts = states[1]
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .ok_or_else(|| DataFusionError::Internal("AVG count is not Int64".into()))?;
        self.count += counts.iter().flatten().sum::<i64>();
        self.sum.add_raw(&states[0])
    }
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        Ok(vec![
            ScalarValue::Decimal128(self.sum.sum, 38, 0),
            ScalarValue::Int64(Some(self.count)),
        ])
    }
    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        let DataType::Decimal128(p, s) = self.sum.out else {
            return Err(DataFusionError::Internal(
                "AVG result is not a decimal".into(),
            ));
        };
        let (Some(sum), true) = (self.sum.sum, self.count > 0) else {
            return Ok(ScalarValue::Decimal128(None, p, s));
        };
        match decimal_average(sum, i128::from(self.count), self.mul, p) {
            Some(v) => Ok(ScalarValue::Decimal128(Some(v), p, s)),
            None => Err(DataFusionError::External(Box::new(Overflow {
                aggregate: self.sum.label.clone(),
                data_type: self.sum.out.clone(),
                value: format!("{sum} × {} / {}", self.mul, self.count),
            }))),
        }
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.sum.label.capacity()
    }
}

/// A decimal average as both paths compute it: the raw `sum` (at the
/// inputs' scale) times `mul` (to the result's scale), over `count`,
/// truncated toward zero; `None` when the result has more than `precision`
/// digits. The product is taken in 256 bits: an average that fits its type
/// is not refused because its sum, scaled, passes 128 bits.
pub(crate) fn decimal_average(sum: i128, count: i128, mul: i128, precision: u8) -> Option<i128> {
    use arrow::datatypes::i256;
    let v = i256::from_i128(sum)
        .checked_mul(i256::from_i128(mul))?
        .checked_div(i256::from_i128(count))?
        .to_i128()?;
    // (a Decimal128 holds at most 38 digits; past that, any i128 fits)
    let bound = 10u128.checked_pow(u32::from(precision));
    bound.is_none_or(|b| v.unsigned_abs() < b).then_some(v)
}

/// The state of an exact `AVG`: the raw sum and the count (of a distinct
/// one, the distinct values).
fn avg_state_fields(name: &str, distinct: bool) -> Vec<FieldRef> {
    if distinct {
        return vec![distinct_state_field(name)];
    }
    vec![
        Arc::new(Field::new(
            format_state_name(name, "sum"),
            DataType::Decimal128(38, 0),
            true,
        )),
        Arc::new(Field::new(
            format_state_name(name, "count"),
            DataType::Int64,
            true,
        )),
    ]
}

/// Exact integer `AVG`, as the incremental path computes it: an `i128` sum
/// and a count, and the sum rounded to `f64` over the count.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ExactAvg {
    label: String,
    signature: Signature,
}

impl AggregateUDFImpl for ExactAvg {
    fn name(&self) -> &str {
        "avg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Float64)
    }
    fn state_fields(&self, args: StateFieldsArgs) -> datafusion::error::Result<Vec<FieldRef>> {
        Ok(avg_state_fields(args.name, args.is_distinct))
    }
    fn accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> datafusion::error::Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            let out = DataType::Float64;
            return Ok(DistinctAvgAcc::boxed(&self.label, &out, 0, AvgOf::Float));
        }
        Ok(Box::new(IntAvgAcc(IntAvgGroups::new(&self.label))))
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }
    fn create_groups_accumulator(
        &self,
        _: AccumulatorArgs,
    ) -> datafusion::error::Result<Box<dyn GroupsAccumulator>> {
        Ok(Box::new(IntAvgGroups::new(&self.label)))
    }
}

/// Every group's exact integer sum and count (DataFusion's grouped
/// aggregation calls it with a batch's group of each row).
#[derive(Debug)]
struct IntAvgGroups {
    label: String,
    sums: Vec<i128>,
    counts: Vec<i64>,
}

impl IntAvgGroups {
    fn new(label: &str) -> Self {
        IntAvgGroups {
            label: label.to_string(),
            sums: Vec::new(),
            counts: Vec::new(),
        }
    }

    /// Adds `sum` and `count` to group `g`.
    fn add(&mut self, g: usize, sum: i128, count: i64) -> datafusion::error::Result<()> {
        let (s, c) = (&mut self.sums[g], &mut self.counts[g]);
        match (s.checked_add(sum), c.checked_add(count)) {
            (Some(s2), Some(c2)) => {
                (*s, *c) = (s2, c2);
                Ok(())
            }
            // (past 2^64 rows of the largest values: no input here gets there)
            _ => Err(DataFusionError::External(Box::new(Overflow {
                aggregate: self.label.clone(),
                data_type: DataType::Float64,
                value: format!("{s} + {sum}"),
            }))),
        }
    }

    /// Folds `values` (an integer column) into the groups `group_of` gives
    /// each row, skipping NULLs and rows `filter` does not keep.
    fn fold(
        &mut self,
        values: &ArrayRef,
        filter: Option<&BooleanArray>,
        total: usize,
        group_of: impl Fn(usize) -> usize,
    ) -> datafusion::error::Result<()> {
        self.sums.resize(total, 0);
        self.counts.resize(total, 0);
        let keep = |row: usize| filter.is_none_or(|f| f.is_valid(row) && f.value(row));
        if let Some(v) = values.as_primitive_opt::<arrow::datatypes::Int64Type>() {
            for row in 0..v.len() {
                if v.is_valid(row) && keep(row) {
                    self.add(group_of(row), i128::from(v.value(row)), 1)?;
                }
            }
            return Ok(());
        }
        // every other integer type (`UInt64` included) as a 128-bit integer
        let d = cast(values, &DataType::Decimal128(38, 0))?;
        let d = d.as_primitive::<arrow::datatypes::Decimal128Type>();
        for row in 0..d.len() {
            if d.is_valid(row) && keep(row) {
                self.add(group_of(row), d.value(row), 1)?;
            }
        }
        Ok(())
    }

    /// Folds states ([`avg_state_fields`]) into the groups `group_of` gives.
    fn merge(
        &mut self,
        states: &[ArrayRef],
        total: usize,
        group_of: impl Fn(usize) -> usize,
    ) -> datafusion::error::Result<()> {
        self.sums.resize(total, 0);
        self.counts.resize(total, 0);
        let (Some(sums), Some(counts)) = (
            states[0].as_primitive_opt::<arrow::datatypes::Decimal128Type>(),
            states[1].as_primitive_opt::<arrow::datatypes::Int64Type>(),
        ) else {
            return Err(DataFusionError::Internal(
                "AVG state is not (Decimal128, Int64)".into(),
            ));
        };
        for row in 0..sums.len() {
            let sum = if sums.is_valid(row) {
                sums.value(row)
            } else {
                0
            };
            let count = if counts.is_valid(row) {
                counts.value(row)
            } else {
                0
            };
            self.add(group_of(row), sum, count)?;
        }
        Ok(())
    }

    /// The averages of the groups `emit_to` takes (NULL for no value).
    fn averages(&mut self, emit_to: EmitTo) -> ArrayRef {
        let sums = emit_to.take_needed(&mut self.sums);
        let counts = emit_to.take_needed(&mut self.counts);
        Arc::new(Float64Array::from_iter(
            sums.iter()
                .zip(&counts)
                .map(|(&s, &c)| (c > 0).then(|| s as f64 / c as f64)),
        ))
    }

    /// The states of the groups `emit_to` takes.
    fn states(&mut self, emit_to: EmitTo) -> datafusion::error::Result<Vec<ArrayRef>> {
        let sums = emit_to.take_needed(&mut self.sums);
        let counts = emit_to.take_needed(&mut self.counts);
        Ok(vec![
            Arc::new(Decimal128Array::from(sums).with_precision_and_scale(38, 0)?),
            Arc::new(Int64Array::from(counts)),
        ])
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self.label.capacity()
            + self.sums.capacity() * 16
            + self.counts.capacity() * 8
    }
}

impl GroupsAccumulator for IntAvgGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> datafusion::error::Result<()> {
        self.fold(&values[0], opt_filter, total_num_groups, |row| {
            group_indices[row]
        })
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> datafusion::error::Result<ArrayRef> {
        Ok(self.averages(emit_to))
    }
    fn state(&mut self, emit_to: EmitTo) -> datafusion::error::Result<Vec<ArrayRef>> {
        self.states(emit_to)
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> datafusion::error::Result<()> {
        self.merge(values, total_num_groups, |row| group_indices[row])
    }
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> datafusion::error::Result<Vec<ArrayRef>> {
        // each row its own state: its value and a count of one, or nothing
        let mut one = IntAvgGroups::new(&self.label);
        one.fold(&values[0], opt_filter, values[0].len(), |row| row)?;
        one.states(EmitTo::All)
    }
    fn size(&self) -> usize {
        IntAvgGroups::size(self)
    }
}

/// [`IntAvgGroups`] of one group, for DataFusion's ungrouped aggregation
/// (and window frames).
#[derive(Debug)]
struct IntAvgAcc(IntAvgGroups);

impl IntAvgAcc {
    /// The one group's sum and count.
    fn one(&mut self) -> (i128, i64) {
        self.0.sums.resize(1, 0);
        self.0.counts.resize(1, 0);
        (self.0.sums[0], self.0.counts[0])
    }
}

impl Accumulator for IntAvgAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.0.fold(&values[0], None, 1, |_| 0)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.one();
        let d = cast(&values[0], &DataType::Decimal128(38, 0))?;
        let d = d.as_primitive::<arrow::datatypes::Decimal128Type>();
        for v in d.iter().flatten() {
            // (the difference of values that were summed: within i128)
            self.0.sums[0] = self.0.sums[0].wrapping_sub(v);
            self.0.counts[0] -= 1;
        }
        Ok(())
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.0.merge(states, 1, |_| 0)
    }
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        let (s, c) = self.one();
        Ok(vec![
            ScalarValue::Decimal128(Some(s), 38, 0),
            ScalarValue::Int64(Some(c)),
        ])
    }
    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        let (s, c) = self.one();
        Ok(ScalarValue::Float64((c > 0).then(|| s as f64 / c as f64)))
    }
    fn size(&self) -> usize {
        self.0.size()
    }
}

/// Float `MIN`/`MAX` in the total order (`-0.0 = 0.0`, NaN above every number).
#[derive(Debug, PartialEq, Eq, Hash)]
struct TotalOrder {
    max: bool,
    signature: Signature,
}

impl AggregateUDFImpl for TotalOrder {
    fn name(&self) -> &str {
        if self.max {
            "max"
        } else {
            "min"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(args[0].clone())
    }
    fn accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> datafusion::error::Result<Box<dyn Accumulator>> {
        Ok(Box::new(ExtremumAcc {
            max: self.max,
            out: args.return_field.data_type().clone(),
            best: None,
        }))
    }
}

#[derive(Debug)]
struct ExtremumAcc {
    max: bool,
    out: DataType,
    best: Option<f64>,
}

impl Accumulator for ExtremumAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        let f = cast(&values[0], &DataType::Float64)?;
        let f = f
            .as_any()
            .downcast_ref::<Float64Array>()
            .ok_or_else(|| DataFusionError::Internal("MIN/MAX input is not Float64".into()))?;
        for v in f.iter().flatten().map(canonical) {
            self.best = Some(match self.best {
                None => v,
                Some(b) => {
                    let better = if self.max {
                        v.total_cmp(&b).is_gt()
                    } else {
                        v.total_cmp(&b).is_lt()
                    };
                    if better {
                        v
                    } else {
                        b
                    }
                }
            });
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.update_batch(states)
    }
    fn state(&mut self) -> datafusion::error::Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }
    fn evaluate(&mut self) -> datafusion::error::Result<ScalarValue> {
        ScalarValue::Float64(self.best).cast_to(&self.out)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_canonical() {
        assert_eq!(canonical(-0.0).to_bits(), 0.0f64.to_bits());
        assert!(canonical(-f64::NAN).is_nan());
        assert_eq!(canonical(-f64::NAN).to_bits(), f64::NAN.to_bits());
        assert_eq!(canonical(-1.5), -1.5);
    }

    #[test]
    fn arrays_are_canonical_value_by_value_and_clean_ones_are_kept() {
        let odd = [-0.0, f64::from_bits(0xfff8_0000_0000_0001), -f64::NAN];
        for (at, x) in odd.into_iter().enumerate() {
            // one odd value among clean ones, somewhere in a longer column
            let mut vals: Vec<Option<f64>> = (0..100).map(|i| Some(i as f64 - 50.5)).collect();
            vals[at * 40] = Some(x);
            vals[7] = None;
            let a: ArrayRef = Arc::new(Float64Array::from(vals.clone()));
            let c = canonical_array(&a);
            let c = c.as_any().downcast_ref::<Float64Array>().expect("f64");
            for (i, v) in vals.iter().enumerate() {
                assert_eq!(c.is_valid(i), v.is_some());
                if let Some(v) = v {
                    assert_eq!(c.value(i).to_bits(), canonical(*v).to_bits(), "row {i}");
                }
            }
        }
        // no NaN, no -0.0: the same array back, also at the edges of the bits
        let clean: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(1.0),
            None,
            Some(0.0),
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(f64::MAX),
            Some(f64::MIN),
            Some(-f64::MIN_POSITIVE),
            Some(-f64::from_bits(1)),
        ]));
        assert!(Arc::ptr_eq(&canonical_array(&clean), &clean));
        let clean32: ArrayRef = Arc::new(arrow::array::Float32Array::from(vec![
            f32::INFINITY,
            f32::NEG_INFINITY,
            -f32::from_bits(1),
            0.0,
        ]));
        assert!(Arc::ptr_eq(&canonical_array(&clean32), &clean32));
        let odd32: ArrayRef = Arc::new(arrow::array::Float32Array::from(vec![1.0, -0.0]));
        assert!(!Arc::ptr_eq(&canonical_array(&odd32), &odd32));
    }

    #[test]
    fn an_integer_sum_that_does_not_fit_is_an_error_naming_the_aggregate() {
        let mut acc = SumAcc {
            label: "SUM(t.v)".into(),
            out: DataType::Int64,
            scale: 0,
            sum: None,
            count: 0,
        };
        let big: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![i64::MAX, 1]));
        acc.update_batch(&[big]).expect("the i128 state holds it");
        let err = acc.evaluate().expect_err("does not fit Int64");
        let o = overflow(&err).expect("typed");
        assert_eq!(o.value, (i64::MAX as i128 + 1).to_string());
        assert_eq!(o.aggregate, "SUM(t.v)");
    }

    /// The grouped accumulator's pieces — filtered and NULL rows, other
    /// integer types, states merged elsewhere, groups taken a few at a time —
    /// give each group its exact sum over its count.
    #[test]
    fn integer_averages_fold_merge_and_emit_exactly() {
        let avg = |s: i128, c: i64| (s as f64 / c as f64).to_bits();
        let bits = |a: &ArrayRef| -> Vec<Option<u64>> {
            a.as_primitive::<arrow::datatypes::Float64Type>()
                .iter()
                .map(|x| x.map(f64::to_bits))
                .collect()
        };
        let mut g = IntAvgGroups::new("AVG(t.v)");
        let v: ArrayRef = Arc::new(Int64Array::from(vec![
            Some(i64::MIN),
            Some(-463),
            None,
            Some(1 << 62),
            Some(1 << 62),
            Some(7),
        ]));
        // the last row filtered out; group 2 gets nothing
        let keep = BooleanArray::from(vec![true, true, true, true, true, false]);
        let groups = [0, 0, 0, 0, 0, 1];
        GroupsAccumulator::update_batch(&mut g, std::slice::from_ref(&v), &groups, Some(&keep), 3)
            .expect("fold");
        // another accumulator's states (unsigned values), merged into group 1
        let mut other = IntAvgGroups::new("AVG(t.v)");
        let u: ArrayRef = Arc::new(arrow::array::UInt64Array::from(vec![u64::MAX, 1]));
        GroupsAccumulator::update_batch(&mut other, &[u], &[0, 0], None, 1).expect("fold");
        let states = GroupsAccumulator::state(&mut other, EmitTo::All).expect("state");
        GroupsAccumulator::merge_batch(&mut g, &states, &[1], 3).expect("merge");
        let first = GroupsAccumulator::evaluate(&mut g, EmitTo::First(1)).expect("first");
        assert_eq!(bits(&first), vec![Some(avg(-463, 4))]);
        let rest = GroupsAccumulator::evaluate(&mut g, EmitTo::All).expect("rest");
        assert_eq!(
            bits(&rest),
            vec![Some(avg(i128::from(u64::MAX) + 1, 2)), None]
        );
        // each row as its own state
        let own = GroupsAccumulator::convert_to_state(&g, &[v], Some(&keep)).expect("convert");
        let counts = own[1].as_primitive::<arrow::datatypes::Int64Type>();
        assert_eq!(counts.values().to_vec(), vec![1, 1, 0, 1, 1, 0]);
        // ungrouped, through the row accumulator
        let mut one = IntAvgAcc(IntAvgGroups::new("AVG(t.v)"));
        assert_eq!(one.evaluate().expect("empty"), ScalarValue::Float64(None));
        one.merge_batch(&own).expect("merge");
        assert_eq!(
            one.evaluate().expect("avg"),
            ScalarValue::Float64(Some(-463.0 / 4.0))
        );
    }
}
