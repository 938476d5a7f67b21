//! The one logical-plan shape the incremental path takes today:
//! `(Limit? → Sort)? → Projection? → Filter(HAVING)? → Aggregate → (Filter | SubqueryAlias)* → TableScan`
//! (`SELECT DISTINCT` is first rewritten as the `GROUP BY` it means; `ORDER
//! BY … LIMIT` applies to each window's rows, as the per-window contract says).

use datafusion::common::tree_node::TreeNode;
use std::sync::Arc;

use datafusion::common::DFSchema;
use datafusion::logical_expr::{
    Aggregate, Distinct, Expr, FetchType, LogicalPlan, Projection, SkipType, SortExpr,
};

use super::{Construct, FallbackReason};

/// `ORDER BY … [LIMIT n [OFFSET m]]` over the query's output, applied to
/// each window's rows.
pub(crate) struct Order<'a> {
    /// The sort keys, over the top projection's output.
    pub sort: &'a [SortExpr],
    /// The schema they are over.
    pub schema: &'a DFSchema,
    /// Rows skipped, then at most `fetch` kept (`None`: all).
    pub skip: usize,
    pub fetch: Option<usize>,
}

/// The parts of a supported logical plan.
pub(crate) struct Shape<'a> {
    /// `ORDER BY` (and `LIMIT`) per window, if any.
    pub order: Option<Order<'a>>,
    /// The top projection (the select list), if any.
    pub projection: Option<&'a [Expr]>,
    /// The HAVING predicate, if any.
    pub having: Option<&'a Expr>,
    /// The aggregate.
    pub aggregate: &'a Aggregate,
    /// WHERE predicates below the aggregate.
    pub filters: Vec<&'a Expr>,
}

pub(crate) fn has_subquery(e: &Expr) -> bool {
    e.exists(|x| {
        Ok(matches!(
            x,
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
        ))
    })
    .unwrap_or(true)
}

/// Whether `pr` only renames its input's columns, all of them, in order: its
/// output's column `i` is its input's column `i` (as a join's output is read
/// back under its qualified names), so an expression over its output reads
/// the input's batch as it is.
pub(crate) fn renames(pr: &Projection) -> bool {
    let input = pr.input.schema().columns();
    pr.expr.len() == input.len()
        && pr
            .expr
            .iter()
            .zip(&input)
            .all(|(e, c)| match e.clone().unalias() {
                Expr::Column(col) => col == *c,
                _ => false,
            })
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

/// `SELECT DISTINCT e1, e2 … FROM …` as the plan of `SELECT e1, e2 … FROM …
/// GROUP BY e1, e2 …` (an aggregate without aggregate functions, whose select
/// list shows its keys under their names); `None` for any other plan, or if
/// DataFusion refuses the grouping (it is then judged as written).
pub(crate) fn distinct_as_grouping(plan: &LogicalPlan) -> Option<LogicalPlan> {
    let LogicalPlan::Distinct(Distinct::All(input)) = plan else {
        return None;
    };
    let LogicalPlan::Projection(pr) = input.as_ref() else {
        return None;
    };
    let keys: Vec<Expr> = pr.expr.iter().map(|e| e.clone().unalias()).collect();
    let aggregate = Aggregate::try_new(pr.input.clone(), keys, Vec::new()).ok()?;
    // the select list over the aggregate: each key, under its output name
    let select = pr
        .expr
        .iter()
        .zip(aggregate.schema.columns())
        .zip(pr.schema.fields())
        .map(|((_, c), f)| Expr::Column(c).alias(f.name()))
        .collect();
    Projection::try_new(select, Arc::new(LogicalPlan::Aggregate(aggregate)))
        .ok()
        .map(LogicalPlan::Projection)
}

/// Split a logical plan into the supported shape, or say why not.
pub(crate) fn shape(plan: &LogicalPlan) -> Result<Shape<'_>, FallbackReason> {
    let mut p = plan;
    let (mut skip, mut fetch, mut limited) = (0, None, false);
    if let LogicalPlan::Limit(l) = p {
        match (l.get_skip_type(), l.get_fetch_type()) {
            (Ok(SkipType::Literal(s)), Ok(FetchType::Literal(f))) => (skip, fetch) = (s, f),
            _ => return Err(FallbackReason::Uses(Construct::Limit)),
        }
        limited = true;
        p = l.input.as_ref();
    }
    let mut order = None;
    if let LogicalPlan::Sort(sort) = p {
        // over the select list's output (ORDER BY of a column not selected
        // adds a projection above this one, which is not this shape)
        if !matches!(sort.input.as_ref(), LogicalPlan::Projection(_)) {
            return Err(FallbackReason::Uses(Construct::OrderBy));
        }
        if let Some(f) = sort.fetch {
            fetch = Some(fetch.map_or(f, |x: usize| x.min(f)));
        }
        order = Some(Order {
            sort: &sort.expr,
            schema: sort.input.schema().as_ref(),
            skip,
            fetch,
        });
        p = sort.input.as_ref();
    } else if limited {
        // LIMIT without ORDER BY: which rows it keeps is not defined
        return Err(FallbackReason::Uses(Construct::Limit));
    }
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
    one_column_each(aggregate)?;
    let mut filters = Vec::new();
    let mut q = aggregate.input.as_ref();
    loop {
        match q {
            LogicalPlan::Filter(f) => {
                filters.push(&f.predicate);
                q = f.input.as_ref();
            }
            LogicalPlan::SubqueryAlias(a) => q = a.input.as_ref(),
            LogicalPlan::Projection(pr) if renames(pr) => q = pr.input.as_ref(),
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
    if order
        .as_ref()
        .is_some_and(|o| o.sort.iter().any(|e| has_subquery(&e.expr)))
    {
        return Err(FallbackReason::SubqueryInSelect);
    }
    Ok(Shape {
        order,
        projection,
        having,
        aggregate,
        filters,
    })
}

/// That `a` has one output column per group key and aggregate, as the
/// incremental plan reads them by position: a key given twice (`GROUP BY
/// s, 1`, the ordinal naming `s` again) is one column of DataFusion's
/// aggregate.
fn one_column_each(a: &Aggregate) -> Result<(), FallbackReason> {
    let (groups, aggregates) = (a.group_expr.len(), a.aggr_expr.len());
    let columns = a.schema.fields().len();
    if columns == groups + aggregates {
        return Ok(());
    }
    Err(FallbackReason::CannotCompile {
        detail: format!(
            "a group key is given twice: {groups} group keys and {aggregates} aggregates \
             make {columns} columns of the aggregate"
        ),
    })
}
