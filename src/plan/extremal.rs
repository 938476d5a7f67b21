//! A query over an aggregate's groups whose result depends only on the
//! groups holding the window's extremum of one column: the groups joined
//! with the column's `MAX` over all of them and kept where they reach it
//! (`… JOIN (SELECT MAX(num) AS maxn FROM …) ON num >= maxn`, Nexmark q5 as
//! written), or filtered by it (`WHERE num = (SELECT MAX(num) FROM …)`);
//! `MIN` with `<=` alike.
//!
//! Over the groups `T` of a window, let `T'` be those whose column equals
//! the extremum. The extremum over `T'` is the one over `T`, and a group that
//! reaches it is in `T'`; so the query over `T'` gives what it gives over
//! `T`, and the post stage hands DataFusion `T'` (a few groups) instead of
//! every group of the window. That holds when the two scans of the groups
//! are the query's only ones: one under the side that keeps groups (through
//! aliases, renaming projections and filters), the other under the
//! extremum, an aggregate of nothing but that `MAX` (or `MIN`) without
//! `GROUP BY`, over aliases and renaming projections only. Float columns are
//! left out (`-0.0` and `0.0` compare equal, and one of them would be kept
//! without the other), as are types other than integers, decimals,
//! strings, booleans, dates and timestamps, and so are queries with a `LIMIT` or a window
//! function anywhere (which rows they keep can depend on the order rows come
//! in).

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, NullEquality};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Aggregate, BinaryExpr, Expr, JoinType, LogicalPlan, Operator};
use std::sync::Arc;

/// The extremum a query depends on: a column of the groups' table and
/// whether it is the maximum (else the minimum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extremal {
    /// The column's index in the groups' table.
    pub column: usize,
    /// `MAX` (true) or `MIN`.
    pub max: bool,
}

/// The extremum `rest` (a query over the groups' table) depends on, if it
/// has the form above, with the column as the query names it.
pub(crate) fn extremal(rest: &LogicalPlan) -> Option<(Extremal, String)> {
    let (mut scans, mut ordered) = (0usize, false);
    rest.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::TableScan(_) => scans += 1,
            LogicalPlan::Limit(_) | LogicalPlan::Window(_) => ordered = true,
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    if scans != 2 || ordered {
        return None;
    }
    let mut hit = None;
    rest.apply(|p| {
        if let Some(e) = condition(p) {
            hit = Some(e.found);
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    let (e, name) = hit?;
    let float = rest.apply(|p| {
        let LogicalPlan::TableScan(t) = p else {
            return Ok(TreeNodeRecursion::Continue);
        };
        let schema = t.source.schema();
        Ok(match schema.fields().get(e.column) {
            Some(f) if comparable(f.data_type()) => TreeNodeRecursion::Continue,
            _ => TreeNodeRecursion::Stop,
        })
    });
    match float {
        Ok(TreeNodeRecursion::Continue) => Some((e, name)),
        _ => None,
    }
}

/// Whether the host finds the extremum of a column of type `t` exactly as
/// DataFusion compares it (not floats: see the module's doc).
fn comparable(t: &DataType) -> bool {
    t.is_integer()
        || matches!(
            t,
            DataType::Decimal128(..)
                | DataType::Decimal256(..)
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Timestamp(..)
        )
}

/// `kept op extremum`, the extremum found: what `extremal` returns.
fn found(column: usize, max: bool, kept: &Column) -> (Extremal, String) {
    (Extremal { column, max }, kept.flat_name())
}

/// The node of a plan that keeps the groups reaching the extremum, and how.
struct Condition {
    found: (Extremal, String),
    /// The groups' column compared with the extremum, as the node names it.
    kept: Column,
    at: At,
}

/// Where the condition is.
enum At {
    /// In a join: which side keeps the groups, and the other conditions.
    Join { keep_left: bool, others: Vec<Expr> },
    /// In a filter: the other conjuncts of its predicate.
    Filter { others: Vec<Expr> },
}

/// The condition node `p` is, if any (a join's first, then a filter's).
fn condition(p: &LogicalPlan) -> Option<Condition> {
    joined(p).or_else(|| filtered(p))
}

/// `rest` (which [`extremal`] found to depend on the groups holding an
/// extremum) as it runs over those groups alone: each of them meets the
/// condition that keeps the groups reaching the extremum, so it is dropped,
/// and a joined extremum (one row, one column) is the kept column itself,
/// which equals it on every such group. `None` where the extremum's side of
/// a join has more than that column.
///
/// Over the groups `T'` holding the extremum of a window's groups `T`, this
/// gives what `rest` gives over `T` (see the module's doc: `rest` gives the
/// same over `T'`, where the condition holds on every row).
pub(crate) fn over_holders(rest: &LogicalPlan) -> Option<LogicalPlan> {
    use datafusion::common::tree_node::Transformed;
    use datafusion::logical_expr::utils::conjunction;
    use datafusion::logical_expr::{Filter, Projection};
    let mut failed = false;
    let t = rest
        .clone()
        .transform_down(|p| {
            let Some(c) = condition(&p) else {
                return Ok(Transformed::no(p));
            };
            let stop = |q: LogicalPlan| Transformed::new(q, true, TreeNodeRecursion::Stop);
            let (input, others) = match (&p, c.at) {
                (LogicalPlan::Filter(f), At::Filter { others }) => ((*f.input).clone(), others),
                (LogicalPlan::Join(j), At::Join { keep_left, others }) => {
                    let (keep, ext) = match keep_left {
                        true => (&j.left, &j.right),
                        false => (&j.right, &j.left),
                    };
                    // (`on` pairs that match NULLs are not the filter's equalities)
                    let nulls_match = j.null_equality != NullEquality::NullEqualsNothing;
                    if ext.schema().fields().len() != 1 || nulls_match || j.null_aware {
                        failed = true;
                        return Ok(stop(p));
                    }
                    let (q, f) = ext.schema().qualified_field(0);
                    let extremum = Expr::Column(c.kept).alias_qualified(q.cloned(), f.name());
                    let kept = keep.schema().columns().into_iter().map(Expr::Column);
                    let exprs: Vec<Expr> = match keep_left {
                        true => kept.chain([extremum]).collect(),
                        false => std::iter::once(extremum).chain(kept).collect(),
                    };
                    let pr = Projection::try_new(exprs, keep.clone())?;
                    (LogicalPlan::Projection(pr), others)
                }
                _ => {
                    failed = true;
                    return Ok(stop(p));
                }
            };
            Ok(stop(match conjunction(others) {
                Some(pred) => LogicalPlan::Filter(Filter::try_new(pred, Arc::new(input))?),
                None => input,
            }))
        })
        .ok()?;
    (!failed && t.transformed).then_some(t.data)
}

/// `Join(keep, extremum)` (either order), inner, with a condition
/// `keep.c >= extremum.m` (`=`, or `<=` for `MIN`).
fn joined(p: &LogicalPlan) -> Option<Condition> {
    let LogicalPlan::Join(j) = p else {
        return None;
    };
    if j.join_type != JoinType::Inner {
        return None;
    }
    // every condition, the pairs of `on` as equalities
    let mut conds: Vec<Expr> = j.on.iter().map(|(l, r)| l.clone().eq(r.clone())).collect();
    if let Some(f) = &j.filter {
        conds.extend(split_conjunction(f).into_iter().cloned());
    }
    let sides = [(&j.left, &j.right, true), (&j.right, &j.left, false)];
    let (at, found, kept, keep_left) = conds.iter().enumerate().find_map(|(at, e)| {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
            return None;
        };
        let (Expr::Column(a), Expr::Column(b)) = (left.as_ref(), right.as_ref()) else {
            return None;
        };
        sides.iter().find_map(|(keep, ext, keep_left)| {
            // `a op b` or `b op' a`, with `a` on the side that keeps groups
            let (kc, ec, op) = if keep.schema().has_column(a) && ext.schema().has_column(b) {
                (a, b, *op)
            } else if keep.schema().has_column(b) && ext.schema().has_column(a) {
                (b, a, op.swap()?)
            } else {
                return None;
            };
            let (column, max) = extremum_of(ext, ec)?;
            reaches(op, max).then_some(())?;
            (kept_column(keep, kc)? == column)
                .then(|| (at, found(column, max, kc), kc.clone(), *keep_left))
        })
    })?;
    let others = conds
        .into_iter()
        .enumerate()
        .filter_map(|(i, e)| (i != at).then_some(e))
        .collect();
    Some(Condition {
        found,
        kept,
        at: At::Join { keep_left, others },
    })
}

/// `Filter(c = (SELECT MAX(c) FROM …))` (or `>=`; `<=` for `MIN`).
fn filtered(p: &LogicalPlan) -> Option<Condition> {
    let LogicalPlan::Filter(f) = p else {
        return None;
    };
    let conjuncts = split_conjunction(&f.predicate);
    let (at, found, kept) = conjuncts.iter().enumerate().find_map(|(at, e)| {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
            return None;
        };
        let (c, sq, op) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::ScalarSubquery(s)) => (c, s, *op),
            (Expr::ScalarSubquery(s), Expr::Column(c)) => (c, s, op.swap()?),
            _ => return None,
        };
        if !sq.outer_ref_columns.is_empty() {
            return None;
        }
        let sub = sq.subquery.as_ref();
        let out = sub.schema().columns();
        let [m] = out.as_slice() else {
            return None;
        };
        let (column, max) = extremum_of(sub, m)?;
        reaches(op, max).then_some(())?;
        (kept_column(&f.input, c)? == column).then(|| (at, found(column, max, c), c.clone()))
    })?;
    let others = conjuncts
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != at)
        .map(|(_, e)| e.clone())
        .collect();
    Some(Condition {
        found,
        kept,
        at: At::Filter { others },
    })
}

/// Whether `kept op extremum` keeps exactly the groups that reach it.
fn reaches(op: Operator, max: bool) -> bool {
    matches!(
        (op, max),
        (Operator::Eq, _) | (Operator::GtEq, true) | (Operator::LtEq, false)
    )
}

/// Column `c` of `p`'s output as the column of `p`'s input it renames, and
/// that input (through an alias or a renaming projection).
fn renamed<'a>(p: &'a LogicalPlan, c: &Column) -> Option<(&'a LogicalPlan, Column)> {
    let i = p.schema().index_of_column(c).ok()?;
    match p {
        LogicalPlan::SubqueryAlias(a) => {
            let (q, f) = a.input.schema().qualified_field(i);
            Some((a.input.as_ref(), Column::new(q.cloned(), f.name())))
        }
        LogicalPlan::Projection(pr) => match pr.expr.get(i)?.clone().unalias_nested().data {
            Expr::Column(col) => Some((pr.input.as_ref(), col)),
            _ => None,
        },
        _ => None,
    }
}

/// The table column `c` of `p` is, through aliases, renaming projections
/// and (with `filters`) filters, down to the scan of the groups' table.
fn table_column(p: &LogicalPlan, c: &Column, filters: bool) -> Option<usize> {
    match p {
        LogicalPlan::TableScan(t) => {
            let i = p.schema().index_of_column(c).ok()?;
            Some(
                t.projection
                    .as_ref()
                    .map_or(Some(i), |pr| pr.get(i).copied())?,
            )
        }
        LogicalPlan::Filter(f) if filters => table_column(&f.input, c, filters),
        _ => {
            let (input, col) = renamed(p, c)?;
            table_column(input, &col, filters)
        }
    }
}

/// The table column the keeping side's column `c` is (filters allowed).
fn kept_column(p: &LogicalPlan, c: &Column) -> Option<usize> {
    table_column(p, c, true)
}

/// Column `m` of `p` as an extremum: through aliases and renaming
/// projections, the one aggregate (`MAX` or `MIN` of a table column, without
/// `GROUP BY`, `DISTINCT`, `FILTER` or `ORDER BY`) of an aggregate node whose
/// input is the groups' table, unfiltered.
fn extremum_of(p: &LogicalPlan, m: &Column) -> Option<(usize, bool)> {
    let LogicalPlan::Aggregate(agg) = p else {
        let (input, col) = renamed(p, m)?;
        return extremum_of(input, &col);
    };
    let (max, arg) = lone_min_max(agg)?;
    p.schema().index_of_column(m).ok().filter(|&i| i == 0)?;
    Some((table_column(&agg.input, &arg, false)?, max))
}

/// `agg` as one `MAX` (true) or `MIN` of a column, without `GROUP BY`,
/// `DISTINCT`, `FILTER` or `ORDER BY`: a window's extremum.
pub(super) fn lone_min_max(agg: &Aggregate) -> Option<(bool, Column)> {
    if !agg.group_expr.is_empty() || agg.aggr_expr.len() != 1 {
        return None;
    }
    let Expr::AggregateFunction(af) = agg.aggr_expr[0].clone().unalias_nested().data else {
        return None;
    };
    let max = match af.func.name() {
        "max" => true,
        "min" => false,
        _ => return None,
    };
    let prm = af.params;
    if prm.distinct || prm.filter.is_some() || !prm.order_by.is_empty() {
        return None;
    }
    match <[Expr; 1]>::try_from(prm.args) {
        Ok([Expr::Column(arg)]) => Some((max, arg)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    /// `sql`'s logical plan over a table `g (k BIGINT, c BIGINT, s BIGINT, f DOUBLE)`.
    fn plan(sql: &str) -> LogicalPlan {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("c", DataType::Int64, true),
            Field::new("s", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
        ]));
        let ctx = SessionContext::new();
        let t = MemTable::try_new(schema, vec![vec![]]).expect("table");
        ctx.register_table("g", Arc::new(t)).expect("register");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(ctx.state().create_logical_plan(sql))
            .expect("plan")
    }

    #[test]
    fn the_forms_that_depend_only_on_the_extremum_are_found() {
        let max_c = Some(Extremal {
            column: 1,
            max: true,
        });
        for sql in [
            "SELECT a.k, a.c FROM g AS a JOIN (SELECT MAX(c) AS m FROM g) AS b ON a.c >= b.m",
            "SELECT a.k FROM (SELECT k, c AS n FROM g) AS a JOIN (SELECT MAX(x.c) AS m FROM g AS x) AS b \
             ON b.m <= a.n",
            "SELECT a.k, b.m FROM (SELECT MAX(c) AS m FROM g) AS b JOIN g AS a ON a.c = b.m AND a.k > 2",
            "SELECT k FROM g WHERE k > 0 AND c = (SELECT MAX(c) FROM g)",
            "SELECT COUNT(*) FROM (SELECT k FROM g WHERE c >= (SELECT MAX(c) FROM g)) AS x",
        ] {
            assert_eq!(extremal(&plan(sql)).map(|e| e.0), max_c, "{sql}");
        }
        let min_s = "SELECT k FROM g WHERE s <= (SELECT MIN(s) FROM g)";
        assert_eq!(
            extremal(&plan(min_s)),
            Some((
                Extremal {
                    column: 2,
                    max: false
                },
                "g.s".to_string()
            ))
        );
    }

    /// A group's `k`, `c` and `s`.
    type Row = (Option<i64>, Option<i64>, Option<i64>);

    /// `sql`'s result over `rows` of `g`, its lines sorted (`holders`: the
    /// query as it runs over the groups holding the extremum).
    fn run(sql: &str, rows: &[Row], holders: bool) -> Vec<String> {
        use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch};
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("c", DataType::Int64, true),
            Field::new("s", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
        ]));
        let col = |f: fn(&Row) -> Option<i64>| {
            Arc::new(Int64Array::from(rows.iter().map(f).collect::<Vec<_>>()))
        };
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                col(|r| r.0),
                col(|r| r.1),
                col(|r| r.2),
                Arc::new(Float64Array::from(vec![0.5; rows.len()])),
            ],
        )
        .expect("batch");
        let ctx = SessionContext::new();
        let t = MemTable::try_new(schema, vec![vec![batch]]).expect("table");
        ctx.register_table("g", Arc::new(t)).expect("register");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let mut p = rt
            .block_on(ctx.state().create_logical_plan(sql))
            .expect("plan");
        if holders {
            p = over_holders(&p).expect("rewritten");
        }
        let out = rt
            .block_on(async { ctx.execute_logical_plan(p).await?.collect().await })
            .expect("run");
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&out)
            .expect("format")
            .to_string();
        let mut lines: Vec<String> = text.lines().skip(3).map(str::to_string).collect();
        lines.sort();
        lines
    }

    /// The law `over_holders` rests on: the query over all groups equals the
    /// query without its condition over the groups holding the extremum, for
    /// each form (filtered, joined on either side, with other conditions,
    /// selecting the extremum), over groups with ties and NULLs.
    #[test]
    fn over_the_holders_the_condition_dropped_gives_the_same_rows() {
        let tables: Vec<Vec<Row>> = vec![
            vec![
                (Some(1), Some(3), Some(7)),
                (Some(2), Some(5), None),
                (Some(3), Some(5), Some(-2)),
            ],
            vec![
                (None, Some(4), Some(1)),
                (Some(9), Some(4), Some(1)),
                (Some(2), None, Some(1)),
            ],
            vec![(Some(1), None, None), (Some(2), None, Some(3))],
            vec![(Some(5), Some(-1), Some(0))],
            (0..30)
                .map(|i| {
                    (
                        Some(i % 7),
                        Some((i * 13) % 5),
                        (i % 4 != 0).then_some(i % 3),
                    )
                })
                .collect(),
        ];
        let cases: [(&str, usize, bool); 7] = [
            ("SELECT a.k, a.c FROM g AS a JOIN (SELECT MAX(c) AS m FROM g) AS b ON a.c >= b.m", 1, true),
            (
                "SELECT a.k, b.m, a.s FROM (SELECT MAX(c) AS m FROM g) AS b JOIN g AS a \
                 ON a.c = b.m AND a.k > 1",
                1,
                true,
            ),
            ("SELECT * FROM g AS a JOIN (SELECT MAX(x.c) AS m FROM g AS x) AS b ON b.m <= a.c", 1, true),
            ("SELECT k FROM g WHERE k > 0 AND c = (SELECT MAX(c) FROM g)", 1, true),
            ("SELECT k, s * 2 AS d FROM g WHERE s <= (SELECT MIN(s) FROM g) OR k IS NULL", 2, false),
            ("SELECT k, s FROM g WHERE s <= (SELECT MIN(s) FROM g) AND k IS NOT NULL", 2, false),
            ("SELECT COUNT(*) AS n FROM (SELECT k FROM g WHERE c >= (SELECT MAX(c) FROM g)) AS x", 1, true),
        ];
        for (sql, col, max) in cases {
            for t in &tables {
                let value = |r: &Row| [r.0, r.1, r.2][col];
                let best = t.iter().filter_map(value).reduce(|a, b| match max {
                    true => a.max(b),
                    false => a.min(b),
                });
                let holding: Vec<_> = t
                    .iter()
                    .filter(|r| best.is_some() && value(r) == best)
                    .copied()
                    .collect();
                if extremal(&plan(sql)).is_none() {
                    // (an OR around the condition: not the form, nothing to rewrite)
                    assert!(sql.contains(" OR "), "{sql}");
                    continue;
                }
                assert_eq!(
                    run(sql, t, false),
                    run(sql, &holding, true),
                    "{sql} over {t:?}"
                );
            }
        }
    }

    #[test]
    fn forms_that_read_other_groups_are_not() {
        for sql in [
            // the wrong direction, or strictly above
            "SELECT k FROM g WHERE c <= (SELECT MAX(c) FROM g)",
            "SELECT k FROM g WHERE c > (SELECT MAX(c) FROM g)",
            // another column than the extremum's
            "SELECT k FROM g WHERE s = (SELECT MAX(c) FROM g)",
            // the extremum over filtered groups, or beside another aggregate
            "SELECT k FROM g WHERE c = (SELECT MAX(c) FROM g WHERE k > 1)",
            "SELECT a.k FROM g AS a JOIN (SELECT MAX(c) AS m, COUNT(*) AS n FROM g) AS b ON a.c >= b.m",
            // per group, not over the window
            "SELECT a.k FROM g AS a JOIN (SELECT k, MAX(c) AS m FROM g GROUP BY k) AS b ON a.c >= b.m",
            // an outer join keeps the groups that do not reach it
            "SELECT a.k FROM g AS a LEFT JOIN (SELECT MAX(c) AS m FROM g) AS b ON a.c >= b.m",
            // a third read of the groups
            "SELECT k, (SELECT COUNT(*) FROM g) AS n FROM g WHERE c = (SELECT MAX(c) FROM g)",
            // a computed column, a float, a limit
            "SELECT k FROM g WHERE c + 1 = (SELECT MAX(c) FROM g)",
            "SELECT k FROM g WHERE f = (SELECT MAX(f) FROM g)",
            "SELECT k FROM g WHERE c = (SELECT MAX(c) FROM g) LIMIT 1",
        ] {
            assert_eq!(extremal(&plan(sql)).map(|e| e.0), None, "{sql}");
        }
    }
}
