//! DataFusion's filter pushdown, keeping a filter's conjuncts in the order
//! the query wrote them.
//!
//! DataFusion 55's `push_down_filter` puts a filter's "cheap" conjuncts
//! (comparisons, arithmetic, `CASE`, casts) before its "expensive" ones
//! (function calls, `LIKE`), so that `WHERE ABS(100 / v) > 1 AND v <> 0`
//! ran as `v <> 0 AND ABS(100 / v) > 1` on the recompute path: the second
//! conjunct guarded the first, and a row with `v = 0` passed there while
//! the incremental path, which evaluates the `WHERE` as written, failed on
//! it. Þund evaluates `AND` left to right (see [`super::logic`]), so the
//! query's order must reach the plan: [`InOrderPushDown`] wraps every cheap
//! conjunct after the first expensive one in [`InOrder`] (a function call,
//! so expensive too) before the pushdown sees the filter, and unwraps them
//! in what it returns. Nothing else of the pushdown changes.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, Filter, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::push_down_filter::PushDownFilter;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The marker's name.
const MARKER: &str = "thund_in_order";

/// The name the pushdown takes in Þund's sessions (DataFusion's own).
const NAME: &str = "push_down_filter";

/// The identity on booleans, under a name: a marker that keeps a
/// conjunct in its place (it never reaches a physical plan).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct InOrder {
    signature: Signature,
}

impl InOrder {
    fn udf() -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(InOrder {
            signature: Signature::exact(vec![DataType::Boolean], Volatility::Immutable),
        }))
    }
}

impl ScalarUDFImpl for InOrder {
    fn name(&self) -> &str {
        MARKER
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(args
            .args
            .into_iter()
            .next()
            .unwrap_or(ColumnarValue::Scalar(
                datafusion::common::ScalarValue::Boolean(None),
            )))
    }
}

/// DataFusion's [`PushDownFilter`] that leaves a filter's conjuncts in
/// their order (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct InOrderPushDown(PushDownFilter);

impl OptimizerRule for InOrderPushDown {
    fn name(&self) -> &str {
        NAME
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.0.apply_order()
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Filter(filter) = plan else {
            return self.0.rewrite(plan, config);
        };
        let (filter, marked) = mark(filter)?;
        let out = self.0.rewrite(LogicalPlan::Filter(filter), config)?;
        if !marked {
            return Ok(out);
        }
        let transformed = out.transformed;
        let plan = unmark(out.data)?;
        Ok(Transformed::new_transformed(plan, transformed))
    }
}

/// Replaces DataFusion's pushdown in `rules` by [`InOrderPushDown`].
pub(crate) fn in_order(
    rules: Vec<Arc<dyn OptimizerRule + Send + Sync>>,
) -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    rules
        .into_iter()
        .map(|r| match r.name() == NAME {
            true => Arc::new(InOrderPushDown::default()) as Arc<dyn OptimizerRule + Send + Sync>,
            false => r,
        })
        .collect()
}

/// `filter` with every cheap conjunct after its first expensive one in
/// [`InOrder`], and whether any was.
fn mark(filter: Filter) -> Result<(Filter, bool)> {
    let conjuncts = split_conjunction_owned(filter.predicate.clone());
    let Some(first) = conjuncts.iter().position(|c| !is_cheap(c)) else {
        return Ok((filter, false));
    };
    if conjuncts[first..].iter().all(|c| !is_cheap(c)) {
        return Ok((filter, false));
    }
    let udf = InOrder::udf();
    let marked = conjuncts.into_iter().enumerate().map(|(i, c)| {
        if i > first && is_cheap(&c) {
            Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&udf), vec![c]))
        } else {
            c
        }
    });
    let predicate = conjunction(marked).unwrap_or(filter.predicate.clone());
    Ok((Filter::try_new(predicate, filter.input)?, true))
}

/// `plan` (and what lies below it) without [`InOrder`] markers.
fn unmark(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|p| {
        p.map_expressions(|e| {
            e.transform_up(|x| match x {
                Expr::ScalarFunction(f) if f.func.name() == MARKER => {
                    let mut args = f.args;
                    Ok(Transformed::yes(args.remove(0)))
                }
                x => Ok(Transformed::no(x)),
            })
        })
    })
    .map(|t| t.data)
}

/// Whether DataFusion 55's pushdown counts `e` as cheap (its
/// `reorder_predicates`: every node of `e` is one of these).
fn is_cheap(e: &Expr) -> bool {
    !e.exists(|x| {
        Ok(!matches!(
            x,
            Expr::Column(_)
                | Expr::Literal(..)
                | Expr::ScalarVariable(..)
                | Expr::Placeholder(_)
                | Expr::OuterReferenceColumn(..)
                | Expr::Alias(_)
                | Expr::Not(_)
                | Expr::Negative(_)
                | Expr::IsNull(_)
                | Expr::IsNotNull(_)
                | Expr::IsTrue(_)
                | Expr::IsFalse(_)
                | Expr::IsUnknown(_)
                | Expr::IsNotTrue(_)
                | Expr::IsNotFalse(_)
                | Expr::IsNotUnknown(_)
                | Expr::Between(_)
                | Expr::Case(_)
                | Expr::Cast(_)
                | Expr::TryCast(_)
                | Expr::InList(_)
        ) && !matches!(x, Expr::BinaryExpr(BinaryExpr { op, .. }) if !matches!(
            op,
            Operator::LikeMatch
                | Operator::ILikeMatch
                | Operator::NotLikeMatch
                | Operator::NotILikeMatch
                | Operator::RegexMatch
                | Operator::RegexIMatch
                | Operator::RegexNotMatch
                | Operator::RegexNotIMatch
        )))
    })
    .unwrap_or(false)
}
