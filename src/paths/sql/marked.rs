//! DataFusion optimizer rules run on a plan with markers that steer them:
//! [`Marked`] wraps some expressions of the plan in a [`Marker`] (the
//! identity, under a name) before the rule sees it, and removes the markers
//! from what the rule returns. [`super::order`] keeps a filter's conjuncts
//! in place this way, and [`super::filtered`] an aggregate's arguments
//! below its `FILTER`.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::expr::{AggregateFunction, Alias, ScalarFunction};
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::optimizer::ApplyOrder;
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The identity on one argument, under a name: it never reaches a
/// physical plan.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Marker {
    name: &'static str,
    signature: Signature,
    /// Whether its argument counts as evaluated conditionally (as a `CASE`
    /// branch is), to the rules that ask.
    lazy: bool,
}

impl Marker {
    /// A marker named `name`, of `volatility`, its argument `lazy` or not.
    pub(crate) fn udf(name: &'static str, volatility: Volatility, lazy: bool) -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(Marker {
            name,
            signature: Signature::any(1, volatility),
            lazy,
        }))
    }

    /// `e` in the marker `udf`.
    pub(crate) fn wrap(udf: &Arc<ScalarUDF>, e: Expr) -> Expr {
        Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(udf), vec![e]))
    }
}

impl ScalarUDFImpl for Marker {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match args {
            [t] => Ok(t.clone()),
            _ => plan_err!("{} takes one argument", self.name),
        }
    }

    fn short_circuits(&self) -> bool {
        self.lazy
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match args.args.into_iter().next() {
            Some(v) => Ok(v),
            None => plan_err!("{} takes one argument", self.name),
        }
    }
}

/// DataFusion's `rule`, run on the plan `mark` returns, with the markers
/// named `marker` removed from what it returns.
#[derive(Debug)]
pub(crate) struct Marked<R> {
    pub(crate) rule: R,
    pub(crate) marker: &'static str,
    /// The plan with markers, transformed if it has any.
    pub(crate) mark: fn(LogicalPlan) -> Result<Transformed<LogicalPlan>>,
}

impl<R: OptimizerRule> OptimizerRule for Marked<R> {
    fn name(&self) -> &str {
        self.rule.name()
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        self.rule.apply_order()
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let marked = (self.mark)(plan)?;
        if !marked.transformed {
            return self.rule.rewrite(marked.data, config);
        }
        let out = self.rule.rewrite(marked.data, config)?;
        let transformed = out.transformed;
        Ok(Transformed::new_transformed(
            unmark(out.data, self.marker)?,
            transformed,
        ))
    }
}

/// `plan` (and what lies below it) without markers named `marker`, and
/// without an alias of an aggregate that names it as it is named anyway
/// (a rule that marks an aggregate's arguments keeps its name by one).
fn unmark(plan: LogicalPlan, marker: &str) -> Result<LogicalPlan> {
    plan.transform_up_with_subqueries(|p| {
        let aggregate = matches!(p, LogicalPlan::Aggregate(_) | LogicalPlan::Window(_));
        p.map_expressions(|e| {
            let e = e.transform_up(|x| match x {
                Expr::ScalarFunction(mut f) if f.func.name() == marker && f.args.len() == 1 => {
                    Ok(Transformed::yes(f.args.remove(0)))
                }
                x => Ok(Transformed::no(x)),
            })?;
            match e.data {
                Expr::Alias(Alias {
                    expr,
                    relation: None,
                    name,
                    ..
                }) if aggregate
                    && matches!(
                        *expr,
                        Expr::AggregateFunction(AggregateFunction { .. }) | Expr::WindowFunction(_)
                    )
                    && expr.schema_name().to_string() == name =>
                {
                    Ok(Transformed::yes(*expr))
                }
                d => Ok(Transformed::new_transformed(d, e.transformed)),
            }
        })
    })
    .map(|t| t.data)
}
