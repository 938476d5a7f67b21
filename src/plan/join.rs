//! Windowed inner equi-joins of two sources (Nexmark q8's shape): `FROM a
//! JOIN b ON a.k = b.k [AND …]`, each side a chain of filters, projections
//! and aliases over one source, and anything above the join that reads only
//! its rows (a projection, a filter, an aggregate, `ORDER BY … LIMIT`).
//!
//! Per window, the view's SQL over the window's rows is the rest of the
//! query over that window's join output. The join itself is maintained by
//! the dataflow (`thund_dataflows::WindowedJoin`): each side's rows are
//! held by (window, join key), and a step costs the pairs the new rows
//! make, not the window. The rest reads the join's output from an in-memory
//! table, under a projection that gives each column back its qualified
//! name; the join's non-equi conditions filter its pairs. Where the rest is
//! an aggregate over that table, it is compiled as one (`plan::joined`) and
//! folds each step's new pairs; otherwise it runs per window on DataFusion
//! over the window's pairs.

use std::sync::Arc;

use arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, JoinType, LogicalPlan, Operator};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};

use super::post::{replacement_for, sorted};
use super::FallbackReason;
use crate::paths::sql::live::LiveTable;
use crate::window::TimeWindows;

/// The name of the table that holds a window's join output.
const JOINED: &str = "__thund_joined";

/// The printable plan of an incremental windowed join.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinPlan {
    /// The sources of the left and the right side.
    pub sources: [String; 2],
    /// Each side's steps from its source, bottom up, as DataFusion prints them.
    pub sides: [Vec<String>; 2],
    /// The equi-join keys, left and right, with their type.
    pub keys: Vec<(String, String, String)>,
    /// The columns of each side the query reads (the only ones kept).
    pub keeps: [Vec<String>; 2],
    /// The conditions each new pair must meet to be kept.
    pub pair_filter: Option<String>,
    /// Window size, slide and offset (ms).
    pub windows: (i64, i64, i64),
    /// The rest of the query over a window's join output.
    pub rest: String,
    /// The rest of the query as an incremental aggregate over the join's
    /// output, where it is one (then `rest` is not evaluated per window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<Box<super::AggregatePlan>>,
    /// Over hopping windows, how much later than the aggregate's units (one
    /// slide at each window's start) the windows end (size − slide, ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub then_shift: i64,
}

fn is_zero(x: &i64) -> bool {
    *x == 0
}

impl std::fmt::Display for JoinPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (size, slide, offset) = self.windows;
        writeln!(
            f,
            "Incremental join of `{}` and `{}`",
            self.sources[0], self.sources[1]
        )?;
        writeln!(
            f,
            "  windows: size {size} ms, slide {slide} ms, offset {offset} ms"
        )?;
        for (side, steps) in ["left", "right"].iter().zip(&self.sides) {
            for s in steps {
                writeln!(f, "  {side}: {s}")?;
            }
        }
        for (l, r, t) in &self.keys {
            writeln!(f, "  on:   {l} = {r} : {t}")?;
        }
        for (side, keeps) in ["left", "right"].iter().zip(&self.keeps) {
            writeln!(f, "  {side} keeps: {}", keeps.join(", "))?;
        }
        if let Some(cond) = &self.pair_filter {
            writeln!(f, "  pairs kept where: {cond}")?;
        }
        let kept = match self.then {
            Some(_) => "the aggregate's groups",
            None => "pairs",
        };
        writeln!(
            f,
            "  state: each side's rows by (window, join key), in the workers' hash tables; \
             {kept} per open window"
        )?;
        if let Some(then) = &self.then {
            writeln!(f, "  the join's new pairs feed, per window:")?;
            if self.then_shift > 0 {
                writeln!(
                    f,
                    "    (each window's pairs in the unit of one slide at its start, \
                     closed {} ms later, when the window ends)",
                    self.then_shift
                )?;
            }
            for line in then.to_string().lines() {
                writeln!(f, "    {line}")?;
            }
            return Ok(());
        }
        writeln!(f, "  per window, over the join's output:")?;
        for line in self.rest.lines() {
            writeln!(f, "    {line}")?;
        }
        Ok(())
    }
}

/// One step of a side, bottom up: what the host evaluates on a source's batch.
pub(crate) enum SideStep {
    /// Keep the rows where the predicate holds.
    Filter(Arc<dyn PhysicalExpr>),
    /// Compute these columns (the step's output, in order).
    Project(Vec<Arc<dyn PhysicalExpr>>),
}

/// What the host evaluates for one side of the join.
pub(crate) struct CompiledSide {
    /// The source's name.
    pub source: String,
    /// From the source's batch to the side's rows.
    pub steps: Vec<SideStep>,
    /// The join keys over the side's rows.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The side's row type (the join input's columns).
    pub fields: Vec<DataType>,
    /// The columns the query reads (above the join, in its conditions):
    /// only these are kept; the others read as NULL (or their type's
    /// default where not nullable) and nothing reads them.
    pub keep: Vec<usize>,
}

/// What the incremental join runs.
pub(crate) struct CompiledJoin {
    pub sides: [CompiledSide; 2],
    /// The join keys' types (equal on both sides).
    pub key_types: Vec<DataType>,
    /// Whether NULL keys meet (`IS NOT DISTINCT FROM`).
    pub nulls_meet: bool,
    pub windows: TimeWindows,
    /// The type of the window bounds.
    pub bound: DataType,
    /// The rest of the query, reading the join's output from `table`.
    pub rest: LogicalPlan,
    /// The table of a window's join output (left columns, then right).
    pub table: Arc<LiveTable>,
    /// The join's other conditions and the filters right above it, over the
    /// table's columns: a pair that fails them is not kept.
    pub pair_filter: Option<Arc<dyn PhysicalExpr>>,
    /// Whether the rest maps each pair to rows on its own (projections and
    /// filters only): then a window's new rows are the rest over its new
    /// pairs, which Update mode emits without evaluating the window.
    pub row_wise: bool,
    /// The rest of the query as an incremental aggregate over the table's
    /// rows, each pair at its window's start, in units of one slide (see
    /// `plan::joined`), where it compiles as one.
    pub then: Option<Box<super::CompiledAggregate>>,
    /// See [`JoinPlan::then_shift`].
    pub then_shift: i64,
}

/// Whether `rest` only projects and filters rows (no aggregate, sort,
/// limit, distinct, window function or subquery).
fn row_wise(rest: &LogicalPlan) -> bool {
    let mut ok = true;
    let _ = rest.apply_with_subqueries(|p| {
        ok &= matches!(
            p,
            LogicalPlan::Projection(_)
                | LogicalPlan::Filter(_)
                | LogicalPlan::SubqueryAlias(_)
                | LogicalPlan::TableScan(_)
        );
        ok &= !p.expressions().iter().any(has_subquery);
        Ok(TreeNodeRecursion::Continue)
    });
    ok
}

/// The reason a query that holds a join stays on recompute.
fn shape(what: impl Into<String>) -> FallbackReason {
    FallbackReason::JoinShape { what: what.into() }
}

/// The one join of `plan`, if it holds exactly one.
fn the_join(plan: &LogicalPlan) -> Result<Option<LogicalPlan>, FallbackReason> {
    let (mut joins, mut scans, mut unordered_limit) = (Vec::new(), 0usize, false);
    plan.apply_with_subqueries(|p| {
        match p {
            LogicalPlan::Join(_) => joins.push(p.clone()),
            LogicalPlan::TableScan(_) => scans += 1,
            LogicalPlan::Limit(l) => unordered_limit |= !sorted(&l.input),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    })
    .map_err(|e| shape(e.to_string()))?;
    match joins.len() {
        0 => Ok(None),
        1 if scans == 2 && !unordered_limit => Ok(joins.pop()),
        1 if unordered_limit => Err(shape("a LIMIT without ORDER BY reads the join")),
        1 => Err(shape(
            "the query reads a source outside the join (each side must be one source)",
        )),
        _ => Err(shape("the query holds more than one join")),
    }
}

/// A side: filters, projections and aliases over one scan; its steps
/// compiled bottom up, and its source.
fn side(
    p: &LogicalPlan,
    ctx: &SessionContext,
    steps: &mut Vec<SideStep>,
    shown: &mut Vec<String>,
) -> Result<String, FallbackReason> {
    let compile = |e: &Expr, input: &LogicalPlan| {
        super::physical_as_declared(ctx, e, input.schema()).map_err(|err| {
            FallbackReason::CannotCompile {
                detail: format!("`{e}`: {err}"),
            }
        })
    };
    match p {
        LogicalPlan::TableScan(t) => {
            if !t.filters.is_empty() || t.fetch.is_some() {
                return Err(shape("a side's scan is filtered or limited"));
            }
            if let Some(cols) = &t.projection {
                let schema = t.source.schema();
                let exprs = cols
                    .iter()
                    .map(|&i| {
                        datafusion::physical_expr::expressions::col(schema.field(i).name(), &schema)
                            .map_err(|err| FallbackReason::CannotCompile {
                                detail: err.to_string(),
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                steps.push(SideStep::Project(exprs));
            }
            Ok(t.table_name.table().to_string())
        }
        LogicalPlan::SubqueryAlias(a) => side(&a.input, ctx, steps, shown),
        LogicalPlan::Filter(f) => {
            let source = side(&f.input, ctx, steps, shown)?;
            if has_subquery(&f.predicate) {
                return Err(FallbackReason::SubqueryInPredicate);
            }
            steps.push(SideStep::Filter(compile(&f.predicate, &f.input)?));
            shown.push(format!("WHERE {}", f.predicate));
            Ok(source)
        }
        LogicalPlan::Projection(pr) => {
            let source = side(&pr.input, ctx, steps, shown)?;
            if pr.expr.iter().any(has_subquery) {
                return Err(FallbackReason::SubqueryInSelect);
            }
            let exprs = pr
                .expr
                .iter()
                .map(|e| compile(e, &pr.input))
                .collect::<Result<Vec<_>, _>>()?;
            steps.push(SideStep::Project(exprs));
            let list: Vec<String> = pr.expr.iter().map(|e| e.to_string()).collect();
            shown.push(format!("SELECT {}", list.join(", ")));
            Ok(source)
        }
        other => {
            let node = other.display().to_string();
            let name = node.split(':').next().unwrap_or_default().to_string();
            Err(shape(format!(
                "a side reads more than filters and projections of one source ({name})"
            )))
        }
    }
}

/// The join's sides as DataFusion's filter pushdown leaves them, which the
/// recompute path runs: the conditions of the query (`WHERE`, `ON`) that
/// read one side only, and those it infers for the other side through the
/// equi-join keys (`WHERE a.k > 1` with `a.k = b.k` also filters `b`), move
/// into that side, below its projections and after its own filters. Each
/// side's rows then meet a condition that can fail (`100 / b.v > 1`) on
/// both paths alike: a row without a partner in its window too. The pairs
/// are still filtered by all of them (which the rows they come from pass).
fn pushed_sides(
    plan: &LogicalPlan,
    join: &datafusion::logical_expr::Join,
) -> Result<[LogicalPlan; 2], FallbackReason> {
    use datafusion::optimizer::extract_equijoin_predicate::ExtractEquijoinPredicate;
    use datafusion::optimizer::{Optimizer, OptimizerContext};
    let optimizer = Optimizer::with_rules(vec![
        Arc::new(ExtractEquijoinPredicate::new()),
        Arc::new(crate::paths::sql::order::rule()),
    ]);
    let pushed = optimizer
        .optimize(plan.clone(), &OptimizerContext::new(), |_, _| {})
        .map_err(|e| shape(format!("pushing its conditions into the sides: {e}")))?;
    let mut sides = None;
    pushed
        .apply_with_subqueries(|p| {
            if let LogicalPlan::Join(j) = p {
                sides = Some([j.left.as_ref().clone(), j.right.as_ref().clone()]);
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
        .map_err(|e| shape(e.to_string()))?;
    match sides {
        Some([l, r]) if l.schema() == join.left.schema() && r.schema() == join.right.schema() => {
            Ok([l, r])
        }
        _ => Err(shape(
            "its sides change shape when its conditions are pushed into them",
        )),
    }
}

/// Whether `e` holds a subquery.
fn has_subquery(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|x| {
        found |= matches!(
            x,
            Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)
        );
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// The conjuncts of `e`.
fn conjuncts(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::And,
            right,
        }) => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        other => out.push(other.clone()),
    }
}

/// Whether every column `e` reads is in `p`'s schema (and it reads one).
fn reads_only(e: &Expr, p: &LogicalPlan) -> bool {
    let cols = e.column_refs();
    !cols.is_empty() && cols.iter().all(|c| p.schema().has_column(c))
}

/// The columns `plan` reads above the join `node` and in its conditions `on`
/// and filter (not inside its sides).
fn columns_read(
    plan: &LogicalPlan,
    node: &LogicalPlan,
    on: &[(Expr, Expr)],
) -> Vec<datafusion::common::Column> {
    let mut out = Vec::new();
    let mut add = |e: &Expr| out.extend(e.column_refs().into_iter().cloned());
    let _ = plan.apply_with_subqueries(|p| {
        if p == node {
            if let LogicalPlan::Join(j) = p {
                j.filter.iter().for_each(&mut add);
            }
            return Ok(TreeNodeRecursion::Jump);
        }
        p.expressions().iter().for_each(&mut add);
        Ok(TreeNodeRecursion::Continue)
    });
    for (l, r) in on {
        add(l);
        add(r);
    }
    out
}

/// Compile a query with one join of two sources, or say why not (`Ok(None)`:
/// the query holds no join).
pub(crate) fn compile(
    plan: &LogicalPlan,
    ctx: &SessionContext,
    windows: TimeWindows,
    bound: &DataType,
) -> Result<Option<(JoinPlan, CompiledJoin)>, FallbackReason> {
    let Some(node) = the_join(plan)? else {
        return Ok(None);
    };
    let LogicalPlan::Join(join) = &node else {
        return Ok(None);
    };
    if join.join_type != JoinType::Inner {
        return Err(shape(format!(
            "a {} join keeps rows without a match",
            join.join_type
        )));
    }
    // equi-conditions, from `on` and from the filter's conjuncts
    let mut on: Vec<(Expr, Expr)> = join.on.clone();
    let mut residual: Vec<Expr> = Vec::new();
    let mut parts = Vec::new();
    if let Some(f) = &join.filter {
        conjuncts(f, &mut parts);
    }
    for c in parts {
        match &c {
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) if reads_only(left, &join.left) && reads_only(right, &join.right) => {
                on.push((left.as_ref().clone(), right.as_ref().clone()))
            }
            Expr::BinaryExpr(BinaryExpr {
                left,
                op: Operator::Eq,
                right,
            }) if reads_only(right, &join.left) && reads_only(left, &join.right) => {
                on.push((right.as_ref().clone(), left.as_ref().clone()))
            }
            _ => residual.push(c),
        }
    }
    if on.is_empty() {
        return Err(shape("the join has no equality between its sides"));
    }
    let read = columns_read(plan, &node, &on);
    let pushed = pushed_sides(plan, join)?;
    let nulls_meet = matches!(
        join.null_equality,
        datafusion::common::NullEquality::NullEqualsNull
    );
    let mut compiled_sides = Vec::new();
    let mut sources = Vec::new();
    let mut shown_sides = Vec::new();
    let mut keeps: Vec<Vec<String>> = Vec::new();
    let mut key_types: Vec<DataType> = Vec::new();
    let mut keys_shown = Vec::new();
    for (i, input) in [&join.left, &join.right].into_iter().enumerate() {
        let (mut steps, mut shown) = (Vec::new(), Vec::new());
        let source = side(&pushed[i], ctx, &mut steps, &mut shown)?;
        let schema = input.schema();
        let mut keys = Vec::new();
        for (j, pair) in on.iter().enumerate() {
            let e = if i == 0 { &pair.0 } else { &pair.1 };
            let dt = e
                .get_type(schema)
                .map_err(|err| FallbackReason::CannotCompile {
                    detail: format!("`{e}`: {err}"),
                })?;
            if dt.is_floating() {
                return Err(shape(format!(
                    "join key `{e}` is a float (-0.0 = 0.0 in SQL, not in a key's bytes)"
                )));
            }
            if i == 0 {
                key_types.push(dt);
            } else if key_types[j] != dt {
                return Err(shape(format!(
                    "join keys `{}` and `{e}` differ in type ({} and {dt})",
                    pair.0, key_types[j]
                )));
            }
            keys.push(super::physical_as_declared(ctx, e, schema).map_err(|err| {
                FallbackReason::CannotCompile {
                    detail: format!("`{e}`: {err}"),
                }
            })?);
        }
        let fields: Vec<DataType> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let keep: Vec<usize> = schema
            .iter()
            .enumerate()
            .filter(|(_, (q, f))| {
                read.iter().any(|c| {
                    c.name == *f.name()
                        && match (&c.relation, q) {
                            (Some(r), Some(q)) => r == *q,
                            _ => true,
                        }
                })
            })
            .map(|(j, _)| j)
            .collect();
        let kept: Vec<DataType> = keep.iter().map(|&j| fields[j].clone()).collect();
        let encodable = |types: &[DataType]| {
            arrow::row::RowConverter::new(
                types
                    .iter()
                    .map(|t| arrow::row::SortField::new(t.clone()))
                    .collect(),
            )
            .is_ok()
        };
        if !encodable(&kept) {
            return Err(shape(format!(
                "the rows of side `{source}` cannot be encoded"
            )));
        }
        keeps.push(
            keep.iter()
                .map(|&j| {
                    let (q, f) = schema.qualified_field(j);
                    match q {
                        Some(q) => format!("{q}.{}", f.name()),
                        None => f.name().to_string(),
                    }
                })
                .collect::<Vec<_>>(),
        );
        shown_sides.push(shown);
        sources.push(source.clone());
        compiled_sides.push(CompiledSide {
            source,
            steps,
            keys,
            fields,
            keep,
        });
    }
    for ((l, r), t) in on.iter().zip(&key_types) {
        keys_shown.push((l.to_string(), r.to_string(), t.to_string()));
    }
    // the join's other conditions and the filters right above it hold per
    // pair: the host applies them to each new pair and keeps those that pass;
    // the rest reads the join's output's table of kept pairs
    let mut pair_filters: Vec<Expr> = residual;
    let unfiltered = plan
        .clone()
        .transform_up(|p| match &p {
            LogicalPlan::Filter(f) if *f.input == node && !has_subquery(&f.predicate) => {
                pair_filters.push(f.predicate.clone());
                Ok(Transformed::yes(f.input.as_ref().clone()))
            }
            _ => Ok(Transformed::no(p)),
        })
        .map_err(|e| shape(e.to_string()))?
        .data;
    let (table, replacement) = replacement_for(&node, JOINED)
        .ok_or_else(|| shape("the join's output cannot be read back under its qualified names"))?;
    let pair_filter =
        match pair_filters.iter().cloned().reduce(|a, b| a.and(b)) {
            Some(cond) => Some(super::physical(ctx, &cond, replacement.schema()).map_err(
                |err| FallbackReason::CannotCompile {
                    detail: format!("`{cond}`: {err}"),
                },
            )?),
            None => None,
        };
    let rest = unfiltered
        .transform_up_with_subqueries(|p| {
            Ok(if p == node {
                Transformed::yes(replacement.clone())
            } else {
                Transformed::no(p)
            })
        })
        .map_err(|e| shape(e.to_string()))?
        .data;
    let [left, right]: [CompiledSide; 2] = compiled_sides
        .try_into()
        .map_err(|_| shape("a join of other than two sides"))?;
    let [ls, rs]: [Vec<String>; 2] = shown_sides
        .try_into()
        .map_err(|_| shape("a join of other than two sides"))?;
    let printable = JoinPlan {
        sources: [sources[0].clone(), sources[1].clone()],
        sides: [ls, rs],
        keys: keys_shown,
        keeps: [keeps[0].clone(), keeps[1].clone()],
        pair_filter: pair_filters
            .iter()
            .cloned()
            .reduce(|a, b| a.and(b))
            .map(|e| e.to_string()),
        windows: (windows.size(), windows.slide(), windows.offset()),
        rest: rest.display_indent().to_string(),
        then: None,
        then_shift: 0,
    };
    Ok(Some((
        printable,
        CompiledJoin {
            sides: [left, right],
            key_types,
            nulls_meet,
            windows,
            bound: bound.clone(),
            row_wise: row_wise(&rest),
            then: None,
            then_shift: 0,
            pair_filter,
            rest,
            table,
        },
    )))
}
