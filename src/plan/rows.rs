//! Queries that keep each window's top rows, read from the source row by
//! row (no aggregate in between):
//!
//! * the rows holding a window's extremum, `WHERE x = (SELECT MAX(x) FROM
//!   src)` (or `MIN`) over the same rows (Nexmark q7);
//! * the first rows per partition, `WHERE rn <= n` over `ROW_NUMBER()` or
//!   `RANK() OVER (PARTITION BY … ORDER BY …)` (Nexmark q19);
//! * `ORDER BY … LIMIT n [OFFSET m]` over the rows.
//!
//! A row with at least `n` rows strictly before it in the same window and
//! partition is in none of these results, and leaving it out changes no
//! other row's rank, the extremum or which rows the limit keeps. So the
//! dataflow needs only the candidates: an aggregate of the window's rows by
//! the columns the query reads, with their multiplicity (`COUNT(*)`), fed
//! only the rows the host cannot rule out yet (see
//! `paths::incremental::prune`). Per window, the query itself then runs on
//! DataFusion over the candidates, each repeated as often as it came.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, ScalarValue};
use datafusion::functions_aggregate::count::count_all;
use datafusion::logical_expr::expr::{Sort, WindowFunctionDefinition};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{
    BinaryExpr, Expr, FetchType, LogicalPlan, LogicalPlanBuilder, Operator, SkipType,
};

use super::post::{read_from_table, reads_scan, sorted};
use super::FallbackReason;

/// The name of the table that holds a window's candidate rows.
const ROWS: &str = "__thund_rows";

/// The multiplicity column of the candidates' aggregate.
pub(crate) const COUNT: &str = "__thund_n";

/// A top-rows query, split: the candidates' aggregate, the query over them,
/// and the rule that rules rows out.
pub(crate) struct TopRows {
    /// `GROUP BY` the columns read, `COUNT(*)`, over the source's rows.
    pub aggregate: LogicalPlan,
    /// The query, reading the rows from `table`.
    pub rest: LogicalPlan,
    /// The table of a window's candidates (the source rows' schema).
    pub table: Arc<crate::paths::sql::live::LiveTable>,
    /// For each column of `table`, the aggregate's group key that holds it
    /// (`None`: a column the query never reads, filled with a default).
    pub columns: Vec<Option<usize>>,
    /// Rows are ranked within these (over the source's rows)…
    pub partition: Vec<Expr>,
    /// …in this order…
    pub order: Vec<Sort>,
    /// …and only the first `n` ranks (and ties with them) are candidates.
    pub n: usize,
    /// Whether the query's result is the union of its partitions' results:
    /// it ranks within partitions and only projects and filters the ranked
    /// rows, so a changed window need re-evaluate only its changed partitions.
    pub by_partition: bool,
    /// How `explain` names the rule.
    pub describe: String,
    /// Whether a window function ranks the rows (its keys are evaluated as
    /// DataFusion evaluates them), not `ORDER BY … LIMIT` or an extremum.
    pub window: bool,
}

/// The base a top-rows query ranks: the source's rows, under its WHERE.
struct Ranked<'a> {
    base: &'a LogicalPlan,
    partition: Vec<Expr>,
    order: Vec<Sort>,
    n: usize,
    what: &'static str,
    /// Ranked by a window function.
    window: bool,
}

/// `c <= n`, `c < n`, `c = n` (or mirrored) over column `c`: the ranks kept.
fn rank_bound(e: &Expr, c: &Column) -> Option<usize> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else {
        return None;
    };
    let (col, op, lit) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(x), Expr::Literal(v, _)) => (x, *op, v),
        (Expr::Literal(v, _), Expr::Column(x)) => (x, op.swap()?, v),
        _ => return None,
    };
    if col != c {
        return None;
    }
    let n = match lit.data_type() {
        // a fractional bound keeps the whole ranks on its side of it: `rn <
        // 2.5` keeps ranks 1 and 2 (the number is compared as a float, not
        // cut to an integer first)
        DataType::Float16 | DataType::Float32 | DataType::Float64 => {
            let ScalarValue::Float64(Some(x)) = lit.cast_to(&DataType::Float64).ok()? else {
                return None;
            };
            let n = match op {
                Operator::LtEq => x.floor(),
                Operator::Lt => x.ceil() - 1.0,
                Operator::Eq if x.fract() == 0.0 => x,
                _ => return None,
            };
            // (NaN, infinities and bounds past i64 rank nothing out: not a
            // top-rows query)
            match n >= 1.0 && n < i64::MAX as f64 {
                true => n as i64,
                false => return None,
            }
        }
        // (a decimal bound is not one: its value is not exact as a float)
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => return None,
        _ => {
            let v = match lit.cast_to(&DataType::Int64).ok()? {
                ScalarValue::Int64(Some(v)) => v,
                _ => return None,
            };
            match op {
                Operator::LtEq | Operator::Eq => v,
                Operator::Lt => v.checked_sub(1)?,
                _ => return None,
            }
        }
    };
    usize::try_from(n).ok().filter(|n| *n >= 1)
}

/// `Filter(rn <= n)` over `[alias] Projection` over a `WindowAggr` of one
/// `ROW_NUMBER()` or `RANK()` over the source's rows.
fn numbered(p: &LogicalPlan) -> Option<Ranked<'_>> {
    let LogicalPlan::Filter(f) = p else {
        return None;
    };
    let mut below = f.input.as_ref();
    if let LogicalPlan::SubqueryAlias(a) = below {
        below = a.input.as_ref();
    }
    let LogicalPlan::Projection(proj) = below else {
        return None;
    };
    let LogicalPlan::Window(win) = proj.input.as_ref() else {
        return None;
    };
    if win.window_expr.len() != 1 || !reads_scan(&win.input) {
        return None;
    }
    let Expr::WindowFunction(wf) = win.window_expr[0].clone().unalias() else {
        return None;
    };
    let what = match &wf.fun {
        WindowFunctionDefinition::WindowUDF(u) if u.name() == "row_number" => "ROW_NUMBER()",
        WindowFunctionDefinition::WindowUDF(u) if u.name() == "rank" => "RANK()",
        _ => return None,
    };
    let params = &wf.params;
    if !params.args.is_empty() || params.filter.is_some() || params.order_by.is_empty() {
        return None;
    }
    // the window function's output column, and where the projection puts it
    let out = win.schema.fields().len() - 1;
    let (q, field) = win.schema.qualified_field(out);
    let numbered = Expr::Column(Column::new(q.cloned(), field.name()));
    let at = proj
        .expr
        .iter()
        .position(|e| e.clone().unalias() == numbered)?;
    let (q, field) = f.input.schema().qualified_field(at);
    let c = Column::new(q.cloned(), field.name());
    let n = split_conjunction(&f.predicate)
        .into_iter()
        .filter_map(|e| rank_bound(e, &c))
        .min()?;
    Some(Ranked {
        base: &win.input,
        partition: params.partition_by.clone(),
        order: params.order_by.clone(),
        n,
        what,
        window: true,
    })
}

/// `Filter(x = (SELECT MAX(x) FROM <the same rows>))`.
fn extremum(p: &LogicalPlan) -> Option<Ranked<'_>> {
    let LogicalPlan::Filter(f) = p else {
        return None;
    };
    if !reads_scan(&f.input) {
        return None;
    }
    split_conjunction(&f.predicate).into_iter().find_map(|e| {
        let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) = e
        else {
            return None;
        };
        let (col, sq) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::ScalarSubquery(s))
            | (Expr::ScalarSubquery(s), Expr::Column(c)) => (c, s),
            _ => return None,
        };
        let mut inner = sq.subquery.as_ref();
        if let LogicalPlan::Projection(pr) = inner {
            inner = pr.input.as_ref();
        }
        let LogicalPlan::Aggregate(agg) = inner else {
            return None;
        };
        if agg.input != f.input {
            return None;
        }
        let (max, arg) = super::extremal::lone_min_max(agg)?;
        if &arg != col {
            return None;
        }
        let asc = !max;
        Some(Ranked {
            base: f.input.as_ref(),
            partition: Vec::new(),
            // NULLs are never the extremum: last
            order: vec![Sort::new(Expr::Column(col.clone()), asc, false)],
            n: 1,
            what: if asc { "MIN" } else { "MAX" },
            window: false,
        })
    })
}

/// `Limit` over `Sort` over `[Projection]` over the source's rows.
fn limited(p: &LogicalPlan) -> Option<Ranked<'_>> {
    let LogicalPlan::Limit(l) = p else {
        return None;
    };
    let (Ok(SkipType::Literal(skip)), Ok(FetchType::Literal(Some(fetch)))) =
        (l.get_skip_type(), l.get_fetch_type())
    else {
        return None;
    };
    let LogicalPlan::Sort(s) = l.input.as_ref() else {
        return None;
    };
    let (base, order) = match s.input.as_ref() {
        LogicalPlan::Projection(pr) if reads_scan(&pr.input) => {
            // the sort keys over the source's columns
            let outs: Vec<(Column, Expr)> = pr
                .expr
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let (q, f) = pr.schema.qualified_field(i);
                    (Column::new(q.cloned(), f.name()), e.clone().unalias())
                })
                .collect();
            let order = s
                .expr
                .iter()
                .map(|o| {
                    let e = o
                        .expr
                        .clone()
                        .transform_up(|x| {
                            Ok(match &x {
                                Expr::Column(c) => match outs.iter().find(|(k, _)| k == c) {
                                    Some((_, e)) => Transformed::yes(e.clone()),
                                    None => Transformed::no(x),
                                },
                                _ => Transformed::no(x),
                            })
                        })
                        .ok()?
                        .data;
                    Some(Sort::new(e, o.asc, o.nulls_first))
                })
                .collect::<Option<Vec<_>>>()?;
            (pr.input.as_ref(), order)
        }
        other if reads_scan(other) => (other, s.expr.clone()),
        _ => return None,
    };
    let n = skip.checked_add(fetch).filter(|n| *n >= 1)?;
    Some(Ranked {
        base,
        partition: Vec::new(),
        order,
        n,
        what: "ORDER BY … LIMIT",
        window: false,
    })
}

/// Split `plan` if it keeps each window's top rows (see the module):
/// `Ok(None)` if it does not, an error if it does over a float column.
pub(crate) fn top_rows(plan: &LogicalPlan) -> Result<Option<TopRows>, FallbackReason> {
    match ranked(plan) {
        Some(r) => build(plan, r),
        None => Ok(None),
    }
}

/// Whether an expression of `plan` holds a subquery.
fn has_subquery(plan: &LogicalPlan) -> bool {
    plan.expressions().iter().any(|e| {
        e.exists(|x| {
            Ok(matches!(
                x,
                Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
            ))
        })
        .unwrap_or(true)
    })
}

/// Whether `plan` is only row-wise steps (projections, filters, aliases,
/// without subqueries) down to the node that ranks within partitions, and
/// that node's projection down to its window function: each output row then
/// comes from one partition's rows, and a partition's output rows from its
/// rows alone.
fn row_wise_to_ranks(plan: &LogicalPlan) -> bool {
    fn to_window(p: &LogicalPlan) -> bool {
        match p {
            LogicalPlan::Window(_) => true,
            LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
                !has_subquery(p) && p.inputs().iter().all(|i| to_window(i))
            }
            _ => false,
        }
    }
    if has_subquery(plan) {
        return false;
    }
    if let Some(r) = numbered(plan) {
        return !r.partition.is_empty() && plan.inputs().iter().all(|i| to_window(i));
    }
    match plan {
        LogicalPlan::Projection(_) | LogicalPlan::Filter(_) | LogicalPlan::SubqueryAlias(_) => {
            plan.inputs().iter().all(|i| row_wise_to_ranks(i))
        }
        _ => false,
    }
}

/// The one node of `plan` that ranks the source's rows, if `plan` reads the
/// source only there (and in the extremum's subquery).
fn ranked(plan: &LogicalPlan) -> Option<Ranked<'_>> {
    let mut found: Vec<Ranked<'_>> = Vec::new();
    let (mut scans, mut unordered_limit) = (0usize, false);
    plan.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::TableScan(_) => scans += 1,
            LogicalPlan::Limit(l) => unordered_limit |= !sorted(&l.input),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    // the node that ranks: found walking down from the top
    let mut walk = Vec::new();
    plan.apply(|p| {
        walk.push(p);
        Ok(TreeNodeRecursion::Continue)
    })
    .ok()?;
    for p in walk {
        if let Some(r) = numbered(p).or_else(|| extremum(p)).or_else(|| limited(p)) {
            found.push(r);
        }
    }
    if unordered_limit || found.len() != 1 {
        return None;
    }
    let r = found.pop()?;
    let reads = match r.what {
        "MAX" | "MIN" => 2,
        _ => 1,
    };
    if scans != reads {
        return None;
    }
    Some(r)
}

/// The candidates' aggregate and the query over them, for `r` in `plan`:
/// `Err` if the query reads a float column (the candidates are grouped by
/// value, and a float's group would not give back -0.0 and NaN as they came).
fn build(plan: &LogicalPlan, r: Ranked<'_>) -> Result<Option<TopRows>, FallbackReason> {
    let schema = r.base.schema().clone();
    // the columns of the source the query reads, anywhere
    let mut read = vec![false; schema.fields().len()];
    let walked = plan.apply_with_subqueries(|p| {
        for e in p.expressions() {
            for c in e.column_refs() {
                if let Ok(i) = schema.index_of_column(c) {
                    read[i] = true;
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    if walked.is_err() {
        return Ok(None);
    }
    for o in r.order.iter().map(|s| &s.expr).chain(&r.partition) {
        for c in o.column_refs() {
            let Ok(i) = schema.index_of_column(c) else {
                return Ok(None);
            };
            read[i] = true;
        }
    }
    if let Some((_, f)) = schema
        .iter()
        .zip(&read)
        .find(|((_, f), r)| **r && f.data_type().is_floating())
        .map(|(qf, _)| qf)
    {
        return Err(FallbackReason::FloatRows {
            column: f.name().clone(),
        });
    }
    Ok(assemble(plan, r, &read))
}

fn assemble(plan: &LogicalPlan, r: Ranked<'_>, read: &[bool]) -> Option<TopRows> {
    let base = r.base.clone();
    let schema = base.schema().clone();
    let mut groups = Vec::new();
    let mut columns = Vec::new();
    for (i, (q, f)) in schema.iter().enumerate() {
        if !read[i] {
            columns.push(None);
            continue;
        }
        columns.push(Some(groups.len()));
        groups.push(Expr::Column(Column::new(q.cloned(), f.name())));
    }
    let aggregate = LogicalPlanBuilder::from(base.clone())
        .aggregate(groups, vec![count_all().unalias().alias(COUNT)])
        .and_then(|b| b.build())
        .ok()?;
    let (table, rest) = read_from_table(plan, &base, ROWS)?;
    let o: Vec<String> = r.order.iter().map(|s| s.to_string()).collect();
    let p: Vec<String> = r.partition.iter().map(|e| e.to_string()).collect();
    let within = match p.is_empty() {
        true => String::new(),
        false => format!(" within {}", p.join(", ")),
    };
    let by_partition = row_wise_to_ranks(plan);
    let describe = format!(
        "rows by {}{within}: the first {} and their ties ({}){}",
        o.join(", "),
        r.n,
        r.what,
        match by_partition {
            true => "; a changed window re-evaluates only its changed partitions",
            false => "",
        }
    );
    Some(TopRows {
        aggregate,
        rest,
        table,
        columns,
        partition: r.partition,
        order: r.order,
        n: r.n,
        by_partition,
        describe,
        window: r.window,
    })
}
