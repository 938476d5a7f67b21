//! One order of evaluation for `AND` and `OR` on both paths: left to right,
//! row by row. The right operand is evaluated only on the rows whose value
//! the left one does not decide (for `AND` where it is not FALSE, for `OR`
//! where it is not TRUE), as Flink's and Spark's generated code and
//! PostgreSQL do. So `WHERE v <> 0 AND 100 / v > 1` never divides by zero,
//! and `WHERE 100 / v > 1 AND v <> 0` fails on a row with `v = 0` whatever
//! rows share its batch.
//!
//! DataFusion's own `AND` decides from each batch: the right operand is
//! evaluated on every row when more than a fifth of the left's values are
//! TRUE and on the TRUE rows alone otherwise. A guard then holds or fails by
//! how rows happen to be batched, which differs between the paths (a
//! trigger's rows, a window's) and with `--rows-per-trigger`; and its
//! optimizer turns a boolean `CASE` into `AND`/`OR`, so `CASE WHEN v <> 0
//! THEN 100 / v > 1 ELSE false END` was no guard either. Here a
//! [`LazyLogic`] takes the place of every `AND`/`OR` whose right operand
//! can fail ([`lazy`]): in the incremental path's expressions
//! (`plan::physical`) and, by [`ExpressionRules`], in the plans the recompute
//! path runs. An operand that cannot fail (columns, literals, comparisons,
//! `NOT`, `IS NULL`, and `AND`/`OR` of those) is left to DataFusion: its
//! result is the same in any order.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch};
use arrow::compute::kernels::boolean::{and_kleene, or_kleene};
use arrow::datatypes::{DataType, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::config::ConfigOptions;
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{
    BinaryExpr, Column, IsNotNullExpr, IsNullExpr, Literal, NotExpr,
};
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, PhysicalGroupBy};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{
    HashJoinExec, HashJoinExecBuilder, NestedLoopJoinExec, NestedLoopJoinExecBuilder,
};
use datafusion::physical_plan::projection::{ProjectionExec, ProjectionExpr};
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec};
use datafusion::physical_plan::ExecutionPlan;

use super::overflow::checked;

type Result<T> = datafusion::error::Result<T>;

/// `left AND right` or `left OR right`, the right operand evaluated only on
/// the rows the left does not decide (see the module's documentation).
#[derive(Debug, Eq)]
pub(crate) struct LazyLogic {
    and: bool,
    left: Arc<dyn PhysicalExpr>,
    right: Arc<dyn PhysicalExpr>,
}

// (by hand, as DataFusion's own expressions do: rust-lang/rust#78808)
impl PartialEq for LazyLogic {
    fn eq(&self, other: &Self) -> bool {
        self.and == other.and && self.left.eq(&other.left) && self.right.eq(&other.right)
    }
}

impl Hash for LazyLogic {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.and.hash(state);
        self.left.hash(state);
        self.right.hash(state);
    }
}

impl LazyLogic {
    /// The operator's name, as SQL writes it.
    fn op(&self) -> Operator {
        if self.and {
            Operator::And
        } else {
            Operator::Or
        }
    }
}

impl fmt::Display for LazyLogic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.left, self.op(), self.right)
    }
}

impl PhysicalExpr for LazyLogic {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        Ok(self.left.nullable(input_schema)? || self.right.nullable(input_schema)?)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let n = batch.num_rows();
        // the left value that decides a row alone: FALSE for AND, TRUE for OR
        let decides = !self.and;
        let left = match self.left.evaluate(batch)? {
            ColumnarValue::Scalar(ScalarValue::Boolean(Some(b))) if b == decides => {
                return Ok(ColumnarValue::Scalar(ScalarValue::Boolean(Some(b))));
            }
            // TRUE AND r, FALSE OR r: r
            ColumnarValue::Scalar(ScalarValue::Boolean(Some(_))) => {
                return self.right.evaluate(batch);
            }
            l => boolean(l.into_array(n)?)?,
        };
        // the rows whose value the right operand decides: a NULL, or the
        // left value that does not decide
        let open = match (left.nulls(), decides) {
            (None, false) => left.values().clone(),
            (None, true) => !left.values(),
            (Some(valid), false) => left.values() | &!valid.inner(),
            (Some(valid), true) => !&(left.values() & valid.inner()),
        };
        if open.count_set_bits() == 0 {
            return Ok(ColumnarValue::Array(Arc::new(left)));
        }
        // NULL on the other rows, which the left value decides
        let right = self
            .right
            .evaluate_selection(batch, &BooleanArray::new(open, None))?;
        let right = boolean(right.into_array(n)?)?;
        let out = match self.and {
            true => and_kleene(&left, &right)?,
            false => or_kleene(&left, &right)?,
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.left, &self.right]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [left, right]: [Arc<dyn PhysicalExpr>; 2] = children
            .try_into()
            .map_err(|_| DataFusionError::Internal("AND/OR takes two operands".to_string()))?;
        Ok(Arc::new(LazyLogic {
            and: self.and,
            left,
            right,
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.left.fmt_sql(f)?;
        write!(f, " {} ", self.op())?;
        self.right.fmt_sql(f)
    }
}

/// An aggregate's argument `arg` where its `FILTER` holds, NULL on the
/// other rows, as `CASE WHEN filter THEN arg END` reads; but `arg` is never
/// evaluated on no rows. DataFusion's global aggregate gives its arguments
/// the rows its `FILTER` keeps, which may be none, and its `CASE` on no rows
/// may return a branch's constant as a scalar: `ABS(CASE WHEN v <> v THEN
/// i64::MIN ELSE v END)` then failed on a window whose rows all fail the
/// `FILTER`, where the incremental path evaluates nothing.
#[derive(Debug, Eq)]
pub(crate) struct Guard {
    filter: Arc<dyn PhysicalExpr>,
    arg: Arc<dyn PhysicalExpr>,
}

// (by hand, as for [`LazyLogic`])
impl PartialEq for Guard {
    fn eq(&self, other: &Self) -> bool {
        self.filter.eq(&other.filter) && self.arg.eq(&other.arg)
    }
}

impl Hash for Guard {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.filter.hash(state);
        self.arg.hash(state);
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CASE WHEN {} THEN {} END", self.filter, self.arg)
    }
}

impl PhysicalExpr for Guard {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.arg.data_type(input_schema)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(true)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let n = batch.num_rows();
        let nulls = || -> Result<ColumnarValue> {
            let t = self.arg.data_type(batch.schema_ref())?;
            Ok(ColumnarValue::Array(arrow::array::new_null_array(&t, n)))
        };
        if n == 0 {
            return nulls();
        }
        let holds = boolean(self.filter.evaluate(batch)?.into_array(n)?)?;
        // NULL is not TRUE: such rows are refused as FALSE ones are
        let holds = match holds.nulls() {
            Some(valid) => BooleanArray::new(holds.values() & valid.inner(), None),
            None => holds,
        };
        if holds.true_count() == 0 {
            return nulls();
        }
        self.arg.evaluate_selection(batch, &holds)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.filter, &self.arg]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let [filter, arg]: [Arc<dyn PhysicalExpr>; 2] = children
            .try_into()
            .map_err(|_| DataFusionError::Internal("a guard takes two operands".to_string()))?;
        Ok(Arc::new(Guard { filter, arg }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CASE WHEN ")?;
        self.filter.fmt_sql(f)?;
        write!(f, " THEN ")?;
        self.arg.fmt_sql(f)?;
        write!(f, " END")
    }
}

/// An operand's values as booleans (a NULL literal's type is `Null`).
fn boolean(a: arrow::array::ArrayRef) -> Result<BooleanArray> {
    let a = match a.data_type() {
        DataType::Boolean => a,
        _ => arrow::compute::cast(&a, &DataType::Boolean)?,
    };
    // (a cast to Boolean gives a BooleanArray: anything else is a fault here,
    // said, not read as NULLs)
    a.as_any()
        .downcast_ref::<BooleanArray>()
        .cloned()
        .ok_or_else(|| DataFusionError::Internal(format!("AND/OR of a {}", a.data_type())))
}

/// Whether evaluating `e` can fail: anything but columns, literals,
/// comparisons, `NOT`, `IS [NOT] NULL` and `AND`/`OR` of those.
fn may_fail(e: &Arc<dyn PhysicalExpr>) -> bool {
    let operands_may_fail = || e.children().into_iter().any(may_fail);
    if e.downcast_ref::<Column>().is_some() || e.downcast_ref::<Literal>().is_some() {
        return false;
    }
    if e.downcast_ref::<NotExpr>().is_some()
        || e.downcast_ref::<IsNullExpr>().is_some()
        || e.downcast_ref::<IsNotNullExpr>().is_some()
        || e.downcast_ref::<LazyLogic>().is_some()
    {
        return operands_may_fail();
    }
    match e.downcast_ref::<BinaryExpr>() {
        Some(b) => {
            use Operator::*;
            let plain = matches!(
                b.op(),
                Eq | NotEq | Lt | LtEq | Gt | GtEq | And | Or | IsDistinctFrom | IsNotDistinctFrom
            );
            !plain || operands_may_fail()
        }
        None => true,
    }
}

/// `e` as Þund evaluates it on both paths: integer arithmetic that fails
/// on overflow ([`checked`]), and every `AND`/`OR` whose right operand can
/// fail evaluated left to right, row by row ([`lazy`]).
pub(crate) fn rules(e: Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    lazy(checked(e)?)
}

/// `e` with every `AND`/`OR` whose right operand can fail evaluated left to
/// right, row by row ([`LazyLogic`]).
fn lazy(e: Arc<dyn PhysicalExpr>) -> Result<Arc<dyn PhysicalExpr>> {
    e.transform_up(|x| {
        let Some(b) = x.downcast_ref::<BinaryExpr>() else {
            return Ok(Transformed::no(x));
        };
        let and = match b.op() {
            Operator::And => true,
            Operator::Or => false,
            _ => return Ok(Transformed::no(x)),
        };
        if !may_fail(b.right()) {
            return Ok(Transformed::no(x));
        }
        Ok(Transformed::yes(Arc::new(LazyLogic {
            and,
            left: Arc::clone(b.left()),
            right: Arc::clone(b.right()),
        }) as Arc<dyn PhysicalExpr>))
    })
    .map(|t| t.data)
}

/// [`rules`] over each of `exprs`, and whether any changed.
fn rules_all(
    exprs: impl IntoIterator<Item = Arc<dyn PhysicalExpr>>,
) -> Result<(Vec<Arc<dyn PhysicalExpr>>, bool)> {
    let mut changed = false;
    let out = exprs
        .into_iter()
        .map(|e| {
            let l = rules(Arc::clone(&e))?;
            changed |= !Arc::ptr_eq(&l, &e);
            Ok(l)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((out, changed))
}

/// A join's filter by [`rules`], if that changes it.
fn rules_filter(f: Option<&JoinFilter>) -> Result<Option<JoinFilter>> {
    let Some(f) = f else { return Ok(None) };
    let e = rules(Arc::clone(f.expression()))?;
    Ok((!Arc::ptr_eq(&e, f.expression()))
        .then(|| JoinFilter::new(e, f.column_indices().to_vec(), Arc::clone(f.schema()))))
}

/// The physical optimizer's last rule in the recompute path's session: the
/// expressions of filters, projections, aggregates (arguments, `FILTER`s,
/// group keys), sorts and join filters by [`rules`]: checked arithmetic
/// and lazy logic. Window functions' arguments and keys keep DataFusion's.
#[derive(Debug, Default)]
pub(crate) struct ExpressionRules;

impl PhysicalOptimizerRule for ExpressionRules {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        apply(plan, false)
    }

    fn name(&self) -> &str {
        "thund_expression_rules"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// `p` and its inputs with their expressions by [`rules`]; `under_window`:
/// a window function reads `p`'s order. The sort that orders a window
/// function's input keeps DataFusion's expressions: they must equal the
/// window function's own `PARTITION BY` and `ORDER BY`, which DataFusion
/// cannot rebuild (its window expressions of ranks have no
/// `with_new_expressions`), or the window finds its input unsorted and
/// fails (an internal error of DataFusion's at the first trigger, or its
/// check of the plan's order when the view is made).
fn apply(p: Arc<dyn ExecutionPlan>, under_window: bool) -> Result<Arc<dyn ExecutionPlan>> {
    let window = p.downcast_ref::<BoundedWindowAggExec>().is_some()
        || p.downcast_ref::<WindowAggExec>().is_some();
    let sort = p.downcast_ref::<SortExec>().is_some();
    // (past the sort a window reads, its input's order is the sort's own)
    let below = window || (under_window && !sort);
    let children = (p.children().into_iter())
        .map(|c| apply(Arc::clone(c), below))
        .collect::<Result<Vec<_>>>()?;
    let p = datafusion::physical_plan::execution_plan::replace_children_if_necessary(p, children)?;
    if sort && under_window {
        return Ok(p);
    }
    Ok(rewrite(&p)?.unwrap_or(p))
}

/// `p` with its expressions by [`rules`], `None` if unchanged.
fn rewrite(p: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if let Some(f) = p.downcast_ref::<FilterExec>() {
        let e = rules(Arc::clone(f.predicate()))?;
        if Arc::ptr_eq(&e, f.predicate()) {
            return Ok(None);
        }
        let new = FilterExecBuilder::from(f).with_predicate(e).build()?;
        return Ok(Some(Arc::new(new)));
    }
    if let Some(pr) = p.downcast_ref::<ProjectionExec>() {
        let (exprs, changed) = rules_all(pr.expr().iter().map(|e| Arc::clone(&e.expr)))?;
        if !changed {
            return Ok(None);
        }
        let named = exprs
            .into_iter()
            .zip(pr.expr())
            .map(|(expr, old)| ProjectionExpr {
                expr,
                alias: old.alias.clone(),
            });
        return Ok(Some(Arc::new(ProjectionExec::try_new(
            named,
            Arc::clone(pr.input()),
        )?)));
    }
    if let Some(a) = p.downcast_ref::<AggregateExec>() {
        return aggregate(a);
    }
    if let Some(so) = p.downcast_ref::<SortExec>() {
        let (exprs, changed) = rules_all(so.expr().iter().map(|e| Arc::clone(&e.expr)))?;
        if !changed {
            return Ok(None);
        }
        let keys = exprs
            .into_iter()
            .zip(so.expr().iter())
            .map(|(expr, old)| PhysicalSortExpr::new(expr, old.options));
        let ordering = LexOrdering::new(keys)
            .ok_or_else(|| DataFusionError::Internal("a sort without keys".to_string()))?;
        let new = SortExec::new(ordering, Arc::clone(so.input()))
            .with_fetch(so.fetch())
            .with_preserve_partitioning(so.preserve_partitioning());
        return Ok(Some(Arc::new(new)));
    }
    if let Some(j) = p.downcast_ref::<HashJoinExec>() {
        return Ok(match rules_filter(j.filter())? {
            Some(f) => Some(
                HashJoinExecBuilder::from(j)
                    .with_filter(Some(f))
                    .build_exec()?,
            ),
            None => None,
        });
    }
    if let Some(j) = p.downcast_ref::<NestedLoopJoinExec>() {
        return Ok(match rules_filter(j.filter())? {
            Some(f) => Some(Arc::new(
                NestedLoopJoinExecBuilder::from(j)
                    .with_filter(Some(f))
                    .build()?,
            )),
            None => None,
        });
    }
    Ok(None)
}

/// An aggregate with its group keys, arguments and `FILTER`s by [`rules`].
fn aggregate(a: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let g = a.group_expr();
    let (keys, keys_changed) = rules_all(g.expr().iter().map(|(e, _)| Arc::clone(e)))?;
    let mut changed = keys_changed;
    let mut filters = Vec::with_capacity(a.filter_expr().len());
    for f in a.filter_expr() {
        filters.push(match f {
            Some(f) => {
                let l = rules(Arc::clone(f))?;
                changed |= !Arc::ptr_eq(&l, f);
                Some(l)
            }
            None => None,
        });
    }
    let mut aggs = Vec::with_capacity(a.aggr_expr().len());
    for (af, filter) in a.aggr_expr().iter().zip(&filters) {
        let (args, mut args_changed) = rules_all(af.expressions())?;
        // an argument that can fail, evaluated only where the FILTER holds
        // (as PostgreSQL does, and DataFusion does for a global aggregate
        // but not a grouped one): `SUM(-v) FILTER (WHERE v > 0)` never
        // negates `i64::MIN`
        let args = match filter {
            Some(f) => args
                .into_iter()
                .map(|arg| match may_fail(&arg) {
                    true => {
                        args_changed = true;
                        Ok(Arc::new(Guard {
                            filter: Arc::clone(f),
                            arg,
                        }) as Arc<dyn PhysicalExpr>)
                    }
                    false => Ok(arg),
                })
                .collect::<Result<Vec<_>>>()?,
            None => args,
        };
        if !args_changed {
            aggs.push(Arc::clone(af));
            continue;
        }
        let order: Vec<_> = af.order_bys().iter().map(|s| Arc::clone(&s.expr)).collect();
        match af.with_new_expressions(args, order) {
            Some(new) => {
                changed = true;
                aggs.push(Arc::new(new));
            }
            // (an order-sensitive aggregate DataFusion does not rebuild)
            None => aggs.push(Arc::clone(af)),
        }
    }
    if !changed {
        return Ok(None);
    }
    let group_by = PhysicalGroupBy::new(
        keys.into_iter()
            .zip(g.expr())
            .map(|(e, (_, name))| (e, name.clone()))
            .collect(),
        g.null_expr().to_vec(),
        g.groups().to_vec(),
        g.has_grouping_set(),
    );
    let new = AggregateExec::try_new(
        *a.mode(),
        group_by,
        aggs,
        filters,
        Arc::clone(a.input()),
        a.input_schema(),
    )?
    .with_limit_options(a.limit_options());
    Ok(Some(Arc::new(new)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use arrow::array::Int64Array;
    use arrow::datatypes::Field;
    use datafusion::common::DFSchema;
    use datafusion::prelude::SessionContext;
    use proptest::prelude::*;

    /// A row's value of each expression below, as SQL evaluates it row by
    /// row and left to right: `Err` where that divides by zero.
    type Reference = fn(Option<i64>) -> std::result::Result<Option<bool>, ()>;

    fn over_100(v: Option<i64>) -> std::result::Result<Option<bool>, ()> {
        match v {
            None => Ok(None),
            Some(0) => Err(()),
            // (SQL's integer division truncates, as Rust's does)
            Some(v) => Ok(Some(100 / v > 1)),
        }
    }

    const CASES: &[(&str, Reference)] = &[
        ("v <> 0 AND 100 / v > 1", |v| match v {
            Some(0) => Ok(Some(false)),
            // NULL AND NULL
            _ => over_100(v),
        }),
        ("v = 0 OR 100 / v > 1", |v| match v {
            Some(0) => Ok(Some(true)),
            _ => over_100(v),
        }),
        (
            "CASE WHEN v <> 0 THEN 100 / v > 1 ELSE false END",
            |v| match v {
                None | Some(0) => Ok(Some(false)),
                _ => over_100(v),
            },
        ),
        ("NOT (v = 0 OR NOT (100 / v > 1))", |v| match v {
            Some(0) => Ok(Some(false)),
            _ => over_100(v),
        }),
        // the other order guards nothing: a zero fails
        ("100 / v > 1 AND v <> 0", |v| over_100(v)),
        ("100 / v > 1 OR v = 0", |v| over_100(v)),
    ];

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, true)]))
    }

    /// Each expression of `CASES`, as the incremental path compiles it.
    fn compiled() -> Vec<Arc<dyn PhysicalExpr>> {
        let ctx = SessionContext::new();
        let df = DFSchema::try_from(schema().as_ref().clone()).expect("schema");
        CASES
            .iter()
            .map(|(sql, _)| {
                let e = ctx.parse_sql_expr(sql, &df).expect(sql);
                crate::plan::physical(&ctx, &e, &df).expect(sql)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// However rows are split into batches, every row's value is the
        /// one evaluating it alone, left to right, gives, and a batch fails
        /// exactly when one of its rows does.
        #[test]
        fn and_or_evaluate_left_to_right_in_any_batch(
            values in prop::collection::vec(
                prop::sample::select(vec![
                    None, Some(0), Some(1), Some(-3), Some(7), Some(200), Some(i64::MIN),
                ]),
                0..40,
            ),
            cuts in prop::collection::vec(0usize..40, 0..4),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= values.len()).collect();
            cuts.extend([0, values.len()]);
            cuts.sort_unstable();
            cuts.dedup();
            for (e, (sql, reference)) in compiled().iter().zip(CASES) {
                for part in cuts.windows(2).map(|c| &values[c[0]..c[1]]) {
                    let batch = RecordBatch::try_new(
                        schema(),
                        vec![Arc::new(Int64Array::from(part.to_vec()))],
                    )
                    .expect("batch");
                    let want: std::result::Result<Vec<Option<bool>>, ()> =
                        part.iter().map(|&v| reference(v)).collect();
                    let got = e
                        .evaluate(&batch)
                        .and_then(|c| c.into_array(part.len()))
                        .map(|a| boolean(a).expect("boolean").iter().collect::<Vec<_>>());
                    match (&want, &got) {
                        (Ok(w), Ok(g)) => prop_assert_eq!(w, g, "{} on {:?}", sql, part),
                        (Err(()), Err(err)) => prop_assert!(
                            err.to_string().contains("Divide by zero"), "{}: {}", sql, err
                        ),
                        _ => prop_assert!(false, "{sql} on {part:?}: want {want:?}, got {got:?}"),
                    }
                }
            }
        }
    }

    /// An operand that cannot fail is left to DataFusion; one that can is
    /// evaluated lazily, also inside `NOT` and `CASE`.
    #[test]
    fn only_operands_that_can_fail_are_evaluated_lazily() {
        let lazy_at = |e: &Arc<dyn PhysicalExpr>| {
            let mut n = 0;
            e.apply(|x| {
                n += usize::from(x.downcast_ref::<LazyLogic>().is_some());
                Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
            })
            .expect("walk");
            n
        };
        let ctx = SessionContext::new();
        let df = DFSchema::try_from(schema().as_ref().clone()).expect("schema");
        for (sql, lazy) in [
            ("v <> 0 AND v < 5 OR v IS NULL", 0),
            ("NOT (v = 1 AND (v > 2 OR v IS NOT NULL))", 0),
            ("v <> 0 AND 100 / v > 1", 1),
            ("v <> 0 AND (v > 2 OR 100 / v > 1)", 2),
            ("CASE WHEN v > 0 AND 10 % v = 0 THEN 1 ELSE 0 END = 1", 1),
        ] {
            let e = ctx.parse_sql_expr(sql, &df).expect(sql);
            let p = crate::plan::physical(&ctx, &e, &df).expect(sql);
            assert_eq!(lazy_at(&p), lazy, "{sql}: {p}");
        }
    }
}
