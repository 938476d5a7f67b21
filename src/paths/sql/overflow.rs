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

use arrow::array::RecordBatch;
use arrow::compute::kernels::numeric::neg;
use arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, NegativeExpr};
use datafusion::physical_expr::PhysicalExpr;

type Result<T> = datafusion::error::Result<T>;

/// `e` with every `+`, `-` and `*` failing on overflow instead of wrapping,
/// and every unary minus likewise ([`CheckedNegative`]).
pub(crate) fn checked(e: Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    e.transform_up(|x| {
        if let Some(n) = x.downcast_ref::<NegativeExpr>() {
            let c = CheckedNegative {
                arg: Arc::clone(n.arg()),
            };
            return Ok(Transformed::yes(Arc::new(c) as Arc<dyn PhysicalExpr>));
        }
        let Some(b) = x.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(x));
        };
        if !matches!(
            b.op(),
            Operator::Plus | Operator::Minus | Operator::Multiply
        ) {
            return Ok(Transformed::no(x));
        }
        let c = BinaryExpr::new(Arc::clone(b.left()), *b.op(), Arc::clone(b.right()))
            .with_fail_on_overflow(true);
        if c == *b {
            return Ok(Transformed::no(x));
        }
        Ok(Transformed::yes(Arc::new(c) as Arc<dyn PhysicalExpr>))
    })
    .map(|t| t.data)
}

/// `-arg`, failing where the negation does not fit the type
/// (`-i64::MIN`); otherwise DataFusion's `NegativeExpr`.
#[derive(Debug, Eq)]
pub(crate) struct CheckedNegative {
    arg: Arc<dyn PhysicalExpr>,
}

// (by hand, as DataFusion's own expressions do: rust-lang/rust#78808)
impl PartialEq for CheckedNegative {
    fn eq(&self, other: &Self) -> bool {
        self.arg.eq(&other.arg)
    }
}

impl Hash for CheckedNegative {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.arg.hash(state);
    }
}

impl fmt::Display for CheckedNegative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(- {})", self.arg)
    }
}

impl PhysicalExpr for CheckedNegative {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.arg.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.arg.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        self.arg.return_field(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        match self.arg.evaluate(batch)? {
            ColumnarValue::Array(a) => Ok(ColumnarValue::Array(neg(a.as_ref())?)),
            // (a scalar's negation is checked already)
            ColumnarValue::Scalar(s) => Ok(ColumnarValue::Scalar(s.arithmetic_negate()?)),
        }
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.arg]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [arg]: [Arc<dyn PhysicalExpr>; 1] = children
            .try_into()
            .map_err(|_| DataFusionError::Internal("a negation takes one operand".to_string()))?;
        Ok(Arc::new(CheckedNegative { arg }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(- ")?;
        self.arg.fmt_sql(f)?;
        write!(f, ")")
    }
}
