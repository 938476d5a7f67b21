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
use datafusion::common::Column;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Aggregate, BinaryExpr, Expr, JoinType, LogicalPlan, Operator};

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
        if let Some(e) = joined(p).or_else(|| filtered(p)) {
            hit = Some(e);
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

/// `Join(keep, extremum)` (either order), inner, with a condition
/// `keep.c >= extremum.m` (`=`, or `<=` for `MIN`).
fn joined(p: &LogicalPlan) -> Option<(Extremal, String)> {
    let LogicalPlan::Join(j) = p else {
        return None;
    };
    if j.join_type != JoinType::Inner {
        return None;
    }
    let mut conds: Vec<(Expr, Operator, Expr)> =
        j.on.iter()
            .map(|(l, r)| (l.clone(), Operator::Eq, r.clone()))
            .collect();
    if let Some(f) = &j.filter {
        conds.extend(split_conjunction(f).into_iter().filter_map(|e| match e {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                Some((left.as_ref().clone(), *op, right.as_ref().clone()))
            }
            _ => None,
        }));
    }
    let sides = [(&j.left, &j.right), (&j.right, &j.left)];
    conds.iter().find_map(|(l, op, r)| {
        let (Expr::Column(a), Expr::Column(b)) = (l, r) else {
            return None;
        };
        sides.iter().find_map(|(keep, ext)| {
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
            (kept_column(keep, kc)? == column).then(|| found(column, max, kc))
        })
    })
}

/// `Filter(c = (SELECT MAX(c) FROM …))` (or `>=`; `<=` for `MIN`).
fn filtered(p: &LogicalPlan) -> Option<(Extremal, String)> {
    let LogicalPlan::Filter(f) = p else {
        return None;
    };
    split_conjunction(&f.predicate).into_iter().find_map(|e| {
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
        (kept_column(&f.input, c)? == column).then(|| found(column, max, c))
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
