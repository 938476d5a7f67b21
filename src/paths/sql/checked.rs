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
//! * `AVG` over decimals is exact and an overflow of its result is the same
//!   error (DataFusion's is an untyped execution error).
//! * `MIN`/`MAX` over floats use the total order in which `-0.0 = 0.0` and
//!   NaN sorts above every number (PostgreSQL's), independent of row order.
//!
//! The replacements keep DataFusion's names (`sum`, `min`, `max`), so the
//! plan's columns are unchanged. `SUM(DISTINCT …)` is left to DataFusion.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Decimal128Array, Float64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, Aggregate, AggregateUDF, AggregateUDFImpl, Expr, ExprSchemable, LogicalPlan,
    Signature, Volatility,
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
    plan.transform_up_with_subqueries(|p| {
        let LogicalPlan::Aggregate(agg) = p else {
            return Ok(Transformed::no(p));
        };
        let schema = agg.input.schema().clone();
        let mut changed = false;
        let mut exprs = Vec::with_capacity(agg.aggr_expr.len());
        for e in &agg.aggr_expr {
            let t = e.clone().transform_up(|x| replace(x, &schema))?;
            changed |= t.transformed;
            exprs.push(t.data);
        }
        if !changed {
            return Ok(Transformed::no(LogicalPlan::Aggregate(agg)));
        }
        let new = Aggregate::try_new(agg.input.clone(), agg.group_expr.clone(), exprs)?;
        Ok(Transformed::yes(LogicalPlan::Aggregate(new)))
    })
    .map(|t| t.data)
}

fn replace(e: Expr, input: &DFSchema) -> datafusion::error::Result<Transformed<Expr>> {
    let Expr::AggregateFunction(af) = &e else {
        return Ok(Transformed::no(e));
    };
    let p = &af.params;
    let name = af.func.name().to_ascii_lowercase();
    let [arg] = p.args.as_slice() else {
        return Ok(Transformed::no(e));
    };
    let dt = arg.get_type(input)?;
    // (named as the incremental path names it: `SUM(DISTINCT t.v) FILTER (WHERE …)`)
    let label = |f: &str| {
        let filter = p.filter.as_deref().map(|w| w as &dyn std::fmt::Display);
        crate::plan::call_name(f, p.distinct, arg, filter)
    };
    // of DISTINCT aggregates only the integer SUM is replaced (it wraps otherwise)
    let integer = dt.is_signed_integer() || dt.is_unsigned_integer();
    if p.distinct && !(name == "sum" && integer) {
        return Ok(Transformed::no(e));
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
        "sum" if matches!(dt, DataType::Decimal128(_, _)) && !p.distinct => Arc::new(CheckedSum {
            label: label("SUM"),
            out: af.func.return_type(std::slice::from_ref(&dt))?,
            signature: Signature::any(1, Volatility::Immutable),
        }),
        "avg" if matches!(dt, DataType::Decimal128(_, _)) => Arc::new(CheckedAvg {
            label: label("AVG"),
            input: dt.clone(),
            out: af.func.return_type(std::slice::from_ref(&dt))?,
            signature: Signature::any(1, Volatility::Immutable),
        }),
        "min" | "max" if matches!(dt, DataType::Float32 | DataType::Float64) => {
            Arc::new(TotalOrder {
                max: name == "max",
                signature: Signature::any(1, Volatility::Immutable),
            })
        }
        _ => return Ok(Transformed::no(e)),
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
        let item = DataType::Decimal128(38, 0);
        Ok(vec![Arc::new(match args.is_distinct {
            // the distinct values seen
            true => Field::new(
                format_state_name(args.name, "sum distinct"),
                DataType::List(Arc::new(Field::new_list_field(item, true))),
                true,
            ),
            false => Field::new(format_state_name(args.name, "sum"), item, true),
        })])
    }
    fn accumulator(
        &self,
        args: AccumulatorArgs,
    ) -> datafusion::error::Result<Box<dyn Accumulator>> {
        if args.is_distinct {
            return Ok(Box::new(DistinctSumAcc {
                label: self.label.clone(),
                out: self.out.clone(),
                values: Default::default(),
            }));
        }
        Ok(Box::new(SumAcc {
            label: self.label.clone(),
            out: self.out.clone(),
            // a decimal sum has its inputs' scale
            scale: match self.out {
                DataType::Decimal128(_, s) => s,
                _ => 0,
            },
            sum: None,
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
        }
        Ok(())
    }
}

impl Accumulator for SumAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> datafusion::error::Result<()> {
        self.add(&values[0])
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

/// Exact integer `SUM(DISTINCT …)`: the distinct values, summed exactly
/// when the aggregate is evaluated; an error instead of a wrap.
#[derive(Debug)]
struct DistinctSumAcc {
    label: String,
    out: DataType,
    values: std::collections::BTreeSet<i128>,
}

impl DistinctSumAcc {
    fn add(&mut self, d: &ArrayRef) -> datafusion::error::Result<()> {
        let d = cast(d, &DataType::Decimal128(38, 0))?;
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
            self.add(&l)?;
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
            scale: 0,
            sum: None,
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
        Ok(vec![
            Arc::new(Field::new(
                format_state_name(args.name, "sum"),
                DataType::Decimal128(38, 0),
                true,
            )),
            Arc::new(Field::new(
                format_state_name(args.name, "count"),
                DataType::Int64,
                true,
            )),
        ])
    }
    fn accumulator(&self, _: AccumulatorArgs) -> datafusion::error::Result<Box<dyn Accumulator>> {
        let (DataType::Decimal128(_, s_in), DataType::Decimal128(_, s_out)) =
            (&self.input, &self.out)
        else {
            return Err(DataFusionError::Internal("AVG over a non-decimal".into()));
        };
        Ok(Box::new(AvgAcc {
            sum: SumAcc {
                label: self.label.clone(),
                out: self.out.clone(),
                scale: *s_in,
                sum: None,
            },
            count: 0,
            mul: 10i128.pow((*s_out - *s_in).max(0) as u32),
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
        let avg = sum
            .checked_mul(self.mul)
            .map(|m| m / i128::from(self.count));
        match avg {
            Some(v) => Ok(ScalarValue::Decimal128(Some(v), p, s)),
            None => Err(DataFusionError::External(Box::new(Overflow {
                aggregate: self.sum.label.clone(),
                data_type: self.sum.out.clone(),
                value: format!("{sum} × {}", self.mul),
            }))),
        }
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.sum.label.capacity()
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
        };
        let big: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![i64::MAX, 1]));
        acc.update_batch(&[big]).expect("the i128 state holds it");
        let err = acc.evaluate().expect_err("does not fit Int64");
        let o = overflow(&err).expect("typed");
        assert_eq!(o.value, (i64::MAX as i128 + 1).to_string());
        assert_eq!(o.aggregate, "SUM(t.v)");
    }
}
