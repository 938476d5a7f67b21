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
//! query's order must reach the plan: [`rule`] wraps every cheap conjunct
//! after the first expensive one in a marker (a function call, so expensive
//! too) before the pushdown sees the filter, and unwraps them in what it
//! returns (see [`super::marked`]). Nothing else of the pushdown changes.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Result;
use datafusion::logical_expr::utils::{conjunction, split_conjunction_owned};
use datafusion::logical_expr::{BinaryExpr, Expr, Filter, LogicalPlan, Operator, Volatility};
use datafusion::optimizer::push_down_filter::PushDownFilter;

use super::marked::{Marked, Marker};

/// The marker's name.
const MARKER: &str = "thund_in_order";

/// The name the pushdown takes in Þund's sessions (DataFusion's own).
pub(crate) const NAME: &str = "push_down_filter";

/// DataFusion's [`PushDownFilter`] that leaves a filter's conjuncts in
/// their order (see the module's doc).
pub(crate) fn rule() -> Marked<PushDownFilter> {
    Marked {
        rule: PushDownFilter::new(),
        marker: MARKER,
        mark,
    }
}

/// A filter with every cheap conjunct after its first expensive one in the
/// marker (a function call, so expensive too), transformed if any was.
fn mark(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let LogicalPlan::Filter(filter) = plan else {
        return Ok(Transformed::no(plan));
    };
    let conjuncts = split_conjunction_owned(filter.predicate.clone());
    let first = conjuncts.iter().position(|c| !is_cheap(c));
    let Some(first) = first.filter(|&f| conjuncts[f..].iter().any(is_cheap)) else {
        return Ok(Transformed::no(LogicalPlan::Filter(filter)));
    };
    // immutable: the pushdown keeps a volatile conjunct in place
    let udf = Marker::udf(MARKER, Volatility::Immutable, false);
    let marked = conjuncts.into_iter().enumerate().map(|(i, c)| {
        if i > first && is_cheap(&c) {
            Marker::wrap(&udf, c)
        } else {
            c
        }
    });
    let predicate = conjunction(marked).unwrap_or(filter.predicate.clone());
    Ok(Transformed::yes(LogicalPlan::Filter(Filter::try_new(
        predicate,
        filter.input,
    )?)))
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
