//! Queries over one grouped aggregate: the source is read only through one
//! `GROUP BY` (the same one wherever the query names it), and the rest of the
//! query — subqueries over the groups (`WHERE num = (SELECT MAX(num) …)`),
//! window functions, joins of the aggregate with itself, `ORDER BY` and
//! `LIMIT` — reads only its rows.
//!
//! Per window, the view's SQL over the window's rows is then the rest of the
//! query over the aggregate's rows of that window. The aggregate is
//! maintained incrementally (one state per group, not per row); the rest is
//! evaluated by DataFusion over the window's groups, with the aggregate's
//! subtree replaced by a scan of an in-memory table that holds them, under a
//! projection that gives each column back its qualified name.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::Column;
use datafusion::datasource::provider_as_source;

use crate::paths::sql::live::LiveTable;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};

/// The name of the table that holds a window's groups.
const GROUPS: &str = "__thund_groups";

/// A query split into its aggregate and the rest over the aggregate's rows.
pub(crate) struct Split {
    /// The aggregate subtree (an `Aggregate` node over filters of the source).
    pub aggregate: LogicalPlan,
    /// The rest of the query, reading the groups from `table`.
    pub rest: LogicalPlan,
    /// The table of a window's groups (the aggregate's output schema).
    pub table: Arc<LiveTable>,
}

/// Whether `p` reads the source directly: filters and aliases over a scan.
pub(super) fn reads_scan(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::Filter(f) => reads_scan(&f.input),
        LogicalPlan::SubqueryAlias(a) => reads_scan(&a.input),
        LogicalPlan::Projection(pr) => super::shape::renames(pr) && reads_scan(&pr.input),
        LogicalPlan::TableScan(t) => t.filters.is_empty() && t.fetch.is_none(),
        _ => false,
    }
}

/// Whether `p`'s rows come in a defined order: a sort, under projections.
pub(super) fn sorted(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::Sort(_) => true,
        LogicalPlan::Projection(pr) => sorted(&pr.input),
        _ => false,
    }
}

/// Split `plan` if every scan of the source lies under one and the same
/// aggregate subtree, and something is left above it (`None` otherwise).
pub(crate) fn split(plan: &LogicalPlan) -> Option<Split> {
    let mut aggregates: Vec<LogicalPlan> = Vec::new();
    let (mut scans, mut unordered_limit) = (0usize, false);
    plan.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::Aggregate(a) if reads_scan(&a.input) => aggregates.push(p.clone()),
            LogicalPlan::TableScan(_) => scans += 1,
            // which groups it keeps would depend on their order
            LogicalPlan::Limit(l) => unordered_limit |= !sorted(&l.input),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    if unordered_limit {
        return None;
    }
    let first = aggregates.first()?.clone();
    if scans != aggregates.len() || aggregates.iter().any(|a| *a != first) || *plan == first {
        return None;
    }
    let (table, rest) = read_from_table(plan, &first, GROUPS)?;
    Some(Split {
        aggregate: first,
        rest,
        table,
    })
}

/// A scan of an empty table `name` of `node`'s columns, each under `node`'s
/// qualified name, so a plan above `node` reads it as before: the table (to
/// fill per window) and the scan under its projection.
pub(super) fn replacement_for(
    node: &LogicalPlan,
    name: &str,
) -> Option<(Arc<LiveTable>, LogicalPlan)> {
    let df_schema = node.schema().clone();
    let fields: Vec<Field> = df_schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), f.is_nullable()))
        .collect();
    let table = Arc::new(LiveTable::new(Arc::new(Schema::new(fields))));
    let exprs: Vec<Expr> = df_schema
        .iter()
        .enumerate()
        .map(|(i, (q, f))| {
            Expr::Column(Column::new(Some(name), format!("c{i}")))
                .alias_qualified(q.cloned(), f.name())
        })
        .collect();
    let replacement = LogicalPlanBuilder::scan(name, provider_as_source(table.clone()), None)
        .and_then(|b| b.project(exprs))
        .and_then(|b| b.build())
        .ok()?;
    if !replacement.schema().iter().eq(df_schema.iter()) {
        return None;
    }
    Some((table, replacement))
}

/// `plan` with every occurrence of `node` replaced by [`replacement_for`]
/// it: the table (to fill per window) and the plan over it.
pub(super) fn read_from_table(
    plan: &LogicalPlan,
    node: &LogicalPlan,
    name: &str,
) -> Option<(Arc<LiveTable>, LogicalPlan)> {
    let (table, replacement) = replacement_for(node, name)?;
    let rest = plan
        .clone()
        .transform_up_with_subqueries(|p| {
            Ok(if p == *node {
                Transformed::yes(replacement.clone())
            } else {
                Transformed::no(p)
            })
        })
        .ok()?
        .data;
    Some((table, rest))
}
