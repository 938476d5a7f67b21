//! Integer arithmetic that fails on overflow, on both paths. DataFusion's
//! `+`, `-` and `*` wrap (`i64::MAX + 1` is `i64::MIN`, a `UInt64`
//! `1 - 2` is `u64::MAX`) and its unary minus wraps (`-i64::MIN` is
//! `i64::MIN`): a wrong value, given as if it were right. Here they are
//! checked, as PostgreSQL and Materialize check them ("bigint out of
//! range") and Spark in ANSI mode: a row whose arithmetic overflows is an
//! error naming the operation and its operands. [`checked`] rewrites a
//! physical expression so; `logic::rules` applies it wherever Þund applies
//! its order of `AND`/`OR`: the incremental path's expressions and the
//! plans the recompute path runs. A window function's arguments,
//! `PARTITION BY` and `ORDER BY` keep DataFusion's arithmetic on both paths
//! (`logic::apply`, `plan::physical_as_datafusion`).
//!
//! Floats do not overflow (a result past `f64::MAX` is an infinity, as
//! before); `timestamp ± interval` keeps DataFusion's own kernel.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::compute::kernels::numeric::neg;
use arrow::datatypes::{DataType, Decimal128Type, DecimalType, FieldRef, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, NegativeExpr};
use datafusion::physical_expr::PhysicalExpr;

type Result<T> = datafusion::error::Result<T>;

/// `e` with every `+`, `-` and `*` failing on overflow instead of wrapping,
/// every unary minus likewise, and every decimal result of `+`, `-`, `*`
/// and `/` failing where it has more digits than its type's precision
/// ([`Checked`]).
pub(crate) fn checked(e: Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    e.transform_up(|x| {
        if let Some(n) = x.downcast_ref::<NegativeExpr>() {
            let c = Checked {
                inner: Arc::clone(n.arg()),
                negate: true,
            };
            return Ok(Transformed::yes(Arc::new(c) as Arc<dyn PhysicalExpr>));
        }
        // (applied again: one check of an operation is enough)
        if let Some(c) = x.downcast_ref::<Checked>() {
            return Ok(match c.inner.downcast_ref::<Checked>() {
                Some(inner) if !c.negate && !inner.negate => Transformed::yes(Arc::clone(&c.inner)),
                _ => Transformed::no(x),
            });
        }
        let Some(b) = x.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(x));
        };
        let wraps = matches!(
            b.op(),
            Operator::Plus | Operator::Minus | Operator::Multiply
        );
        if !wraps && *b.op() != Operator::Divide {
            return Ok(Transformed::no(x));
        }
        let c = BinaryExpr::new(Arc::clone(b.left()), *b.op(), Arc::clone(b.right()))
            .with_fail_on_overflow(wraps);
        let c = Checked {
            inner: Arc::new(c) as Arc<dyn PhysicalExpr>,
            negate: false,
        };
        Ok(Transformed::yes(Arc::new(c) as Arc<dyn PhysicalExpr>))
    })
    .map(|t| t.data)
}

/// `inner` (an arithmetic operation), or with `negate` its negation
/// (`NegativeExpr`'s, which wraps: `-i64::MIN` was `i64::MIN`) checked;
/// failing too where a decimal result has more digits than its type's
/// precision. Arrow's decimal kernels check only that the result fits 128
/// bits: `DECIMAL(38, 2)` values `2e17` and `5e16` multiplied gave a
/// `DECIMAL(38, 4)` of 39 digits, written as `1e33` (a tenth of the
/// product), exit 0.
#[derive(Debug, Eq)]
pub(crate) struct Checked {
    inner: Arc<dyn PhysicalExpr>,
    negate: bool,
}

// (by hand, as DataFusion's own expressions do: rust-lang/rust#78808)
impl PartialEq for Checked {
    fn eq(&self, other: &Self) -> bool {
        self.negate == other.negate && self.inner.eq(&other.inner)
    }
}

impl Hash for Checked {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.negate.hash(state);
        self.inner.hash(state);
    }
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.negate {
            true => write!(f, "(- {})", self.inner),
            false => write!(f, "{}", self.inner),
        }
    }
}

impl PhysicalExpr for Checked {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.inner.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.inner.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.inner.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let v = match (self.inner.evaluate(batch)?, self.negate) {
            (v, false) => v,
            (ColumnarValue::Array(a), true) => ColumnarValue::Array(neg(a.as_ref())?),
            // (a scalar's negation is checked already)
            (ColumnarValue::Scalar(s), true) => ColumnarValue::Scalar(s.arithmetic_negate()?),
        };
        match &v {
            ColumnarValue::Array(a) => {
                if let (Some(d), DataType::Decimal128(p, _)) =
                    (a.as_primitive_opt::<Decimal128Type>(), a.data_type())
                {
                    d.validate_decimal_precision(*p)?;
                }
            }
            ColumnarValue::Scalar(ScalarValue::Decimal128(Some(x), p, _)) => {
                Decimal128Type::validate_decimal_precision(*x, *p, 0)?;
            }
            ColumnarValue::Scalar(_) => {}
        }
        Ok(v)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [inner]: [Arc<dyn PhysicalExpr>; 1] = children.try_into().map_err(|_| {
            DataFusionError::Internal("a checked operation takes one operand".to_string())
        })?;
        Ok(Arc::new(Checked {
            inner,
            negate: self.negate,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.negate {
            true => {
                write!(f, "(- ")?;
                self.inner.fmt_sql(f)?;
                write!(f, ")")
            }
            false => self.inner.fmt_sql(f),
        }
    }
}
