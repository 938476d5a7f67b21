//! DataFusion's common subexpression elimination, with an aggregate's
//! argument evaluated only where the aggregate's `FILTER` holds, and a
//! window function's keys where the window evaluates them.
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
//!
//! A window function's arguments, `PARTITION BY` and `ORDER BY` are marked
//! the same way: DataFusion's window evaluates them with its own (wrapping)
//! arithmetic, as the incremental path does (`plan::physical_as_datafusion`),
//! but a subexpression they hold twice (`COALESCE(w * w, k)`, simplified to
//! a `CASE` reading `w * w` twice) was moved into a projection below the
//! window, which Þund's sessions evaluate with checked arithmetic: the
//! recompute path failed on `w = i64::MIN` where the other gave the rows.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{Expr, LogicalPlan, ScalarUDF, Volatility};
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
        if !matches!(p, LogicalPlan::Aggregate(_) | LogicalPlan::Window(_)) {
            return Ok(Transformed::no(p));
        }
        let names = NamePreserver::new(&p);
        p.map_expressions(|e| {
            let name = names.save(&e);
            let marked = e.transform_up(|x| match x {
                Expr::WindowFunction(mut w) => {
                    let p = &mut w.params;
                    let keys = (p.args.iter_mut())
                        .chain(p.partition_by.iter_mut())
                        .chain(p.order_by.iter_mut().map(|s| &mut s.expr));
                    let any = wrap_all(&udf, keys);
                    Ok(Transformed::new_transformed(Expr::WindowFunction(w), any))
                }
                Expr::AggregateFunction(mut f) if f.params.filter.is_some() => {
                    let any = wrap_all(&udf, f.params.args.iter_mut());
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

/// Each of `exprs` (but a column or a literal, which cannot be shared) in
/// the marker `udf`; whether any was.
fn wrap_all<'a>(udf: &Arc<ScalarUDF>, exprs: impl Iterator<Item = &'a mut Expr>) -> bool {
    let mut any = false;
    for e in exprs {
        if matches!(e, Expr::Column(_) | Expr::Literal(..)) {
            continue;
        }
        any = true;
        let inner = std::mem::replace(e, Expr::Literal(ScalarValue::Null, None));
        *e = Marker::wrap(udf, inner);
    }
    any
}
