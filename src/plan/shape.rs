//! The one logical-plan shape the incremental path takes today:
//! `Projection? → Filter(HAVING)? → Aggregate → (Filter | SubqueryAlias)* → TableScan`.

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::{Aggregate, Expr, LogicalPlan};

use super::{Construct, FallbackReason};

/// The parts of a supported logical plan.
pub(crate) struct Shape<'a> {
    /// The top projection (the select list), if any.
    pub projection: Option<&'a [Expr]>,
    /// The HAVING predicate, if any.
    pub having: Option<&'a Expr>,
    /// The aggregate.
    pub aggregate: &'a Aggregate,
    /// WHERE predicates below the aggregate.
    pub filters: Vec<&'a Expr>,
}

fn has_subquery(e: &Expr) -> bool {
    e.exists(|x| {
        Ok(matches!(
            x,
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
        ))
    })
    .unwrap_or(true)
}

/// What a plan node is, for a reason.
fn construct(p: &LogicalPlan) -> Construct {
    match p {
        LogicalPlan::Sort(_) => Construct::OrderBy,
        LogicalPlan::Limit(_) => Construct::Limit,
        LogicalPlan::Join(_) => Construct::Join,
        LogicalPlan::Window(_) => Construct::WindowFunction,
        LogicalPlan::Distinct(_) => Construct::Distinct,
        LogicalPlan::Union(_) => Construct::Union,
        LogicalPlan::Subquery(_) => Construct::Subquery,
        other => Construct::Other(other.display().to_string()),
    }
}

/// Split a logical plan into the supported shape, or say why not.
pub(crate) fn shape(plan: &LogicalPlan) -> Result<Shape<'_>, FallbackReason> {
    let mut p = plan;
    let mut projection = None;
    let mut having = None;
    if let LogicalPlan::Projection(pr) = p {
        projection = Some(pr.expr.as_slice());
        p = pr.input.as_ref();
    }
    if let LogicalPlan::Filter(f) = p {
        having = Some(&f.predicate);
        p = f.input.as_ref();
    }
    let aggregate = match p {
        LogicalPlan::Aggregate(a) => a,
        LogicalPlan::TableScan(_) | LogicalPlan::Filter(_) | LogicalPlan::Projection(_) => {
            return Err(FallbackReason::NoAggregate)
        }
        other => return Err(FallbackReason::Uses(construct(other))),
    };
    let mut filters = Vec::new();
    let mut q = aggregate.input.as_ref();
    loop {
        match q {
            LogicalPlan::Filter(f) => {
                filters.push(&f.predicate);
                q = f.input.as_ref();
            }
            LogicalPlan::SubqueryAlias(a) => q = a.input.as_ref(),
            LogicalPlan::TableScan(t) if t.filters.is_empty() && t.fetch.is_none() => break,
            other => return Err(FallbackReason::AggregateReads(construct(other))),
        }
    }
    if filters.iter().copied().chain(having).any(has_subquery) {
        return Err(FallbackReason::SubqueryInPredicate);
    }
    if projection.into_iter().flatten().any(has_subquery) {
        return Err(FallbackReason::SubqueryInSelect);
    }
    Ok(Shape {
        projection,
        having,
        aggregate,
        filters,
    })
}
