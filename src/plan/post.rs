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
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DataFusionError};
use datafusion::datasource::provider_as_source;

use crate::paths::sql::live::LiveTable;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, SubqueryAlias};

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
    // (the same aggregate also where it names the source otherwise)
    let key = unaliased(&first)?;
    let same = |a: &LogicalPlan| {
        *a == first
            || matches!(a, LogicalPlan::Aggregate(_)) && unaliased(a).is_some_and(|u| u == key)
    };
    if scans != aggregates.len() || !aggregates.iter().all(same) || *plan == first {
        return None;
    }
    let (table, rest) = read_each_from_table(plan, &first, same, GROUPS)?;
    Some(Split {
        aggregate: first,
        rest,
        table,
    })
}

/// The columns of the group table that `rest`, optimized in `ctx`, reads
/// (by index); `None` where that is not known (all are read).
pub(super) fn columns_read(
    rest: &LogicalPlan,
    ctx: &datafusion::prelude::SessionContext,
) -> Option<Vec<usize>> {
    let optimized = ctx.state().optimize(rest).ok()?;
    let mut read = Vec::new();
    let mut whole = false;
    optimized
        .apply_with_subqueries(|p| {
            if let LogicalPlan::TableScan(t) = p {
                if t.table_name.table() == GROUPS {
                    match &t.projection {
                        Some(cols) => read.extend(cols.iter().copied()),
                        None => whole = true,
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .ok()?;
    (!whole).then_some(read)
}

/// The alias an aggregate's input gives the source (`FROM bid AS b1`): the
/// name of the `SubqueryAlias` under its filters, if any.
fn source_alias(p: &LogicalPlan) -> Option<String> {
    match p {
        LogicalPlan::Aggregate(a) => source_alias(&a.input),
        LogicalPlan::Filter(f) => source_alias(&f.input),
        LogicalPlan::Projection(pr) => source_alias(&pr.input),
        LogicalPlan::SubqueryAlias(s) => Some(s.alias.table().to_string()),
        _ => None,
    }
}

/// `p` with the alias it gives the source (see [`source_alias`]) renamed to
/// one name, and so every column that alias qualifies: aggregates that differ
/// only in the name they give the source (`FROM bid B1` … `FROM bid B2`, as
/// Flink's own Nexmark q5 writes) are then equal. `p` itself without an
/// alias; `None` if DataFusion refuses the renamed plan.
fn unaliased(p: &LogicalPlan) -> Option<LogicalPlan> {
    const TO: &str = "__thund_source";
    let Some(from) = source_alias(p) else {
        return Some(p.clone());
    };
    let renamed = |e: Expr| {
        e.transform_up(|x| match x {
            Expr::Column(c) if c.relation.as_ref().is_some_and(|r| r.table() == from) => Ok(
                Transformed::yes(Expr::Column(Column::new(Some(TO), c.name))),
            ),
            other => Ok(Transformed::no(other)),
        })
    };
    p.clone()
        .transform_up(|node| {
            let node = match node {
                LogicalPlan::SubqueryAlias(s) if s.alias.table() == from => {
                    LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(s.input, TO)?)
                }
                other => other,
            };
            let node = node.map_expressions(renamed)?.data;
            Ok(Transformed::yes(node.recompute_schema()?))
        })
        .ok()
        .map(|t| t.data)
}

/// An empty table for `node`'s rows (`c0`, `c1`, … of its columns' types).
fn table_for(node: &LogicalPlan) -> Arc<LiveTable> {
    let fields: Vec<Field> = node
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), f.is_nullable()))
        .collect();
    Arc::new(LiveTable::new(Arc::new(Schema::new(fields))))
}

/// A scan of an empty table `name` of `node`'s columns, each under `node`'s
/// qualified name, so a plan above `node` reads it as before: the table (to
/// fill per window) and the scan under its projection.
pub(super) fn replacement_for(
    node: &LogicalPlan,
    name: &str,
) -> Option<(Arc<LiveTable>, LogicalPlan)> {
    let table = table_for(node);
    let replacement = scan_as(&table, node, name)?;
    Some((table, replacement))
}

/// A scan of `table` (named `name`) with each column under `node`'s
/// qualified name of it.
fn scan_as(table: &Arc<LiveTable>, node: &LogicalPlan, name: &str) -> Option<LogicalPlan> {
    let df_schema = node.schema().clone();
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
    Some(replacement)
}

/// `plan` with every node `same` takes (`node`, and nodes equal to it but
/// for their names) replaced by a scan of one table of `node`'s rows, each
/// under its own qualified names: the table (to fill per window) and the
/// plan over it.
fn read_each_from_table(
    plan: &LogicalPlan,
    node: &LogicalPlan,
    same: impl Fn(&LogicalPlan) -> bool,
    name: &str,
) -> Option<(Arc<LiveTable>, LogicalPlan)> {
    let table = table_for(node);
    let rest = plan
        .clone()
        .transform_up_with_subqueries(|p| {
            if !same(&p) {
                return Ok(Transformed::no(p));
            }
            scan_as(&table, &p, name)
                .map(Transformed::yes)
                .ok_or_else(|| DataFusionError::Plan(format!("{name} does not scan as {p}")))
        })
        .ok()?
        .data;
    Some((table, rest))
}

/// `plan` with every occurrence of `node` replaced by a scan of one table of
/// its rows ([`read_each_from_table`] with plain equality): the table (to
/// fill per window) and the plan over it.
pub(super) fn read_from_table(
    plan: &LogicalPlan,
    node: &LogicalPlan,
    name: &str,
) -> Option<(Arc<LiveTable>, LogicalPlan)> {
    read_each_from_table(plan, node, |p| p == node, name)
}

/// `plan` with each conjunct of a filter over the aggregate's rows that
/// reads only the aggregate's group keys (through aliases and projections:
/// an outer `WHERE x.k IS NOT NULL`, a `HAVING k > 0`) also applied below
/// the aggregate, to the rows that form its groups — as DataFusion's
/// optimizer does on the recompute path. A group such a filter refuses is
/// then formed on neither path: its sums cannot overflow on one path and
/// not on the other, and it costs no state. The filter itself stays where
/// it is (it refuses nothing more). `None` when nothing moves, or when the
/// plan reads the source through more than one aggregate.
pub(crate) fn key_filters_below(plan: &LogicalPlan) -> Option<LogicalPlan> {
    use datafusion::logical_expr::utils::{conjunction, split_conjunction};
    use datafusion::logical_expr::{Aggregate, Filter};
    let mut aggregates = 0;
    plan.apply_with_subqueries(|p| {
        aggregates += usize::from(matches!(p, LogicalPlan::Aggregate(a) if reads_scan(&a.input)));
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    if aggregates != 1 {
        return None;
    }
    // `e`, over `p`'s columns, over the aggregate's input rows, if it reads
    // only group keys of the aggregate found under `p`
    fn below(e: Expr, p: &LogicalPlan) -> Option<Expr> {
        let replaced = |e: Expr, by: &dyn Fn(usize) -> Option<Expr>| -> Option<Expr> {
            let schema = p.schema();
            e.transform_up(|x| match x {
                Expr::Column(c) => match schema.index_of_column(&c).ok().and_then(by) {
                    Some(r) => Ok(Transformed::yes(r)),
                    None => Err(DataFusionError::Plan(String::new())),
                },
                other => Ok(Transformed::no(other)),
            })
            .ok()
            .map(|t| t.data)
        };
        match p {
            LogicalPlan::SubqueryAlias(s) => {
                let input = s.input.schema();
                let e = replaced(e, &|i| {
                    let (q, f) = input.qualified_field(i);
                    Some(Expr::Column(Column::new(q.cloned(), f.name())))
                })?;
                below(e, &s.input)
            }
            LogicalPlan::Projection(pr) => {
                let e = replaced(e, &|i| pr.expr.get(i).map(|x| x.clone().unalias()))?;
                below(e, &pr.input)
            }
            LogicalPlan::Aggregate(a) if reads_scan(&a.input) => {
                let keys = &a.group_expr;
                if keys.iter().any(|k| matches!(k, Expr::GroupingSet(_))) {
                    return None;
                }
                replaced(e, &|i| keys.get(i).map(|k| k.clone().unalias()))
            }
            _ => None,
        }
    }
    // the aggregate under `p` (through aliases and projections), its input
    // filtered by `pushed` as well
    fn filtered(p: &LogicalPlan, pushed: &Expr) -> Option<LogicalPlan> {
        let node = match p {
            LogicalPlan::SubqueryAlias(_) | LogicalPlan::Projection(_) => {
                let input = filtered(p.inputs()[0], pushed)?;
                p.with_new_exprs(p.expressions(), vec![input]).ok()?
            }
            LogicalPlan::Aggregate(a) => {
                let input = Filter::try_new(pushed.clone(), Arc::clone(&a.input)).ok()?;
                LogicalPlan::Aggregate(
                    Aggregate::try_new(
                        Arc::new(LogicalPlan::Filter(input)),
                        a.group_expr.clone(),
                        a.aggr_expr.clone(),
                    )
                    .ok()?,
                )
            }
            _ => return None,
        };
        Some(node)
    }
    let moved = plan
        .clone()
        .transform_up(|node| {
            let LogicalPlan::Filter(f) = &node else {
                return Ok(Transformed::no(node));
            };
            let pushed: Vec<Expr> = split_conjunction(&f.predicate)
                .into_iter()
                .filter(|c| !c.is_volatile() && !super::shape::has_subquery(c))
                .filter_map(|c| below((*c).clone(), &f.input))
                .collect();
            let input = conjunction(pushed).and_then(|p| filtered(&f.input, &p));
            match input {
                Some(input) => {
                    let f = Filter::try_new(f.predicate.clone(), Arc::new(input))?;
                    Ok(Transformed::yes(LogicalPlan::Filter(f)))
                }
                None => Ok(Transformed::no(node)),
            }
        })
        .ok()?;
    moved.transformed.then_some(moved.data)
}
