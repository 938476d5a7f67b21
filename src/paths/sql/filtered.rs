//! DataFusion's common subexpression elimination, with an aggregate's
//! argument evaluated only where the aggregate's `FILTER` holds.
//!
//! DataFusion 55's `common_sub_expression_eliminate` moves a subexpression
//! an aggregate node holds more than once into a projection below it, which
//! evaluates it on every row. It counts an aggregate's argument as
//! evaluated on every row, not only where the aggregate's `FILTER` holds.
//! So `SUM(ABS(-w)) FILTER (WHERE NOT k <> COALESCE(w, -w))` negated `w` on
//! every row on the recompute path and failed on a row with `w = i64::MIN`
//! that the `FILTER` refuses, where the incremental path evaluates the
//! argument only where the `FILTER` holds (see [`super::logic`]).
//! [`rule`] wraps every argument of an aggregate with a `FILTER` in a
//! marker before the elimination sees the plan, and unwraps them in what it
//! returns (see [`super::marked`]): a function whose argument the
//! elimination counts as evaluated conditionally (as the branches of a
//! `CASE` are), and which it never moves itself (it is volatile). A
//! subexpression that is also evaluated on every row elsewhere (a group
//! key, an argument without `FILTER`, the `FILTER` itself) is still shared:
//! it is evaluated on every row on both paths anyway.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan, Volatility};
use datafusion::optimizer::common_subexpr_eliminate::CommonSubexprEliminate;

use super::marked::{Marked, Marker};

/// The marker's name.
const MARKER: &str = "thund_where_filtered";

/// The name the elimination takes in Þund's sessions (DataFusion's own).
pub(crate) const NAME: &str = "common_sub_expression_eliminate";

/// DataFusion's [`CommonSubexprEliminate`] that leaves an aggregate's
/// argument below its `FILTER` (see the module's doc).
pub(crate) fn rule() -> Marked<CommonSubexprEliminate> {
    Marked {
        rule: CommonSubexprEliminate::new(),
        marker: MARKER,
        mark,
    }
}

/// `plan` with every argument of an aggregate with a `FILTER` (but a column
/// or a literal, which cannot be shared) in the marker, the aggregate
/// keeping its name.
fn mark(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // volatile: the elimination never shares a volatile node
    let udf = Marker::udf(MARKER, Volatility::Volatile, true);
    plan.transform_up_with_subqueries(|p| {
        if !matches!(p, LogicalPlan::Aggregate(_)) {
            return Ok(Transformed::no(p));
        }
        let names = NamePreserver::new(&p);
        p.map_expressions(|e| {
            let name = names.save(&e);
            let marked = e.transform_up(|x| match x {
                Expr::AggregateFunction(mut f) if f.params.filter.is_some() => {
                    let mut any = false;
                    for arg in &mut f.params.args {
                        if matches!(arg, Expr::Column(_) | Expr::Literal(..)) {
                            continue;
                        }
                        any = true;
                        let inner = std::mem::replace(arg, Expr::Literal(ScalarValue::Null, None));
                        *arg = Marker::wrap(&udf, inner);
                    }
                    Ok(Transformed::new_transformed(
                        Expr::AggregateFunction(f),
                        any,
                    ))
                }
                x => Ok(Transformed::no(x)),
            })?;
            match marked.transformed {
                true => Ok(Transformed::yes(name.restore(marked.data))),
                false => Ok(marked),
            }
        })
    })
}
