//! The view's SQL planned once over in-memory tables whose contents are
//! swapped per evaluation: the recompute path evaluates windows with it, and
//! every path gets its logical plan and output schema from it. The plan it
//! executes follows Þund's arithmetic ([`checked`]), not DataFusion's.

pub(crate) mod checked;
pub(crate) mod filtered;
pub(crate) mod live;
pub(crate) mod logic;
pub(crate) mod marked;
pub(crate) mod order;
pub(crate) mod overflow;

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{Schema, SchemaRef};
use datafusion::common::TableReference;
use datafusion::datasource::MemTable;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::execution_plan::reset_plan_states;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

use super::SourceInfo;
use crate::error::{Error, Result};
use crate::time::EventTime;
use crate::window::Window;

/// A DataFusion session with `config` in which SQL runs as Þund runs it:
/// integer arithmetic that fails on overflow (see [`overflow`]), `AND` and
/// `OR` evaluated left to right, row by row (see [`logic`]), a filter's
/// conjuncts kept in the query's order (see [`order`]), and an aggregate's
/// argument evaluated only where its `FILTER` holds (see [`filtered`]).
pub(crate) fn session(config: SessionConfig) -> SessionContext {
    let rules = datafusion::optimizer::Optimizer::new()
        .rules
        .into_iter()
        .flat_map(|r| match r.name() {
            order::NAME => vec![Arc::new(order::rule()) as Arc<_>],
            // the aggregates the simplified query no longer reads dropped
            // first, as the incremental path never evaluates them: a
            // subexpression only they evaluate on every row is not shared
            filtered::NAME => vec![
                Arc::new(datafusion::optimizer::optimize_projections::OptimizeProjections::new())
                    as Arc<_>,
                Arc::new(filtered::rule()) as Arc<_>,
            ],
            _ => vec![r],
        })
        .collect();
    let state = SessionStateBuilder::new()
        .with_config(config)
        .with_default_features()
        .with_optimizer_rules(rules)
        .with_physical_optimizer_rule(Arc::new(logic::ExpressionRules))
        .build();
    SessionContext::new_with_state(state)
}

/// How the error refusing a nondeterministic function begins, the function's
/// name following in quotes (the DDL finds the call by it).
pub(crate) const NONDETERMINISTIC: &str = "Nondeterministic function '";

/// The first function in `plan` (its subqueries included) whose value is not
/// a function of its arguments: DataFusion's volatile and stable ones
/// (`random()`, `uuid()`, `now()`, `current_date`, …).
fn nondeterministic(plan: &LogicalPlan) -> Option<String> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Expr, Volatility};
    let mut found = None;
    let mut look = |e: &Expr| {
        e.apply(|x| {
            let (name, volatility) = match x {
                Expr::ScalarFunction(f) => (f.func.name(), f.func.signature().volatility),
                Expr::AggregateFunction(f) => (f.func.name(), f.func.signature().volatility),
                _ => return Ok(TreeNodeRecursion::Continue),
            };
            if volatility == Volatility::Immutable {
                return Ok(TreeNodeRecursion::Continue);
            }
            found = Some(name.to_string());
            Ok(TreeNodeRecursion::Stop)
        })
    };
    // (the closures never fail: a walk's error is none of ours to report)
    let _ = plan.apply_with_subqueries(|node| node.apply_expressions(&mut look));
    found
}

/// The error refusing a view for a constant that cannot be evaluated.
fn refused_constant(constant: &str, why: &str) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Plan(format!(
        "the constant `{constant}` cannot be evaluated ({why}); a view's constants are \
         evaluated when it is made, as PostgreSQL folds them when it plans a query, \
         whatever rows would reach them"
    ))
}

/// The first constant subexpression of `plan` (no column, no aggregate, no
/// subquery; not a lone literal) whose evaluation fails with Þund's
/// arithmetic, and why: `-(-9223372036854775807 - 1)`, `ABS(i64::MIN)`,
/// `1 / 0`.
///
/// DataFusion's optimizer leaves such a constant in place, and drops it
/// where it simplifies what holds it (`CASE WHEN 1 / 0 = 1 THEN k ELSE k
/// END` is `k`); it is evaluated on an empty batch as on a full one. So a
/// view failed or not by which path ran it and whether a window had rows.
/// Refusing it when the view is made is PostgreSQL's answer: it folds
/// constants when it plans a query.
fn failing_constant(ctx: &SessionContext, plan: &LogicalPlan) -> Option<(String, String)> {
    use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
    use datafusion::common::DFSchema;
    use datafusion::logical_expr::simplify::ExprSimplifyResult;
    use datafusion::logical_expr::Expr;
    let constant = |e: &Expr| {
        let mut yes = true;
        let _ = e.apply(|x| {
            yes &= !matches!(
                x,
                Expr::Column(_)
                    | Expr::OuterReferenceColumn(..)
                    | Expr::ScalarVariable(..)
                    | Expr::Placeholder(_)
                    | Expr::AggregateFunction(_)
                    | Expr::WindowFunction(_)
                    | Expr::ScalarSubquery(_)
                    | Expr::Exists(_)
                    | Expr::InSubquery(_)
                    | Expr::SetComparison(_)
                    | Expr::GroupingSet(_)
            );
            Ok(match yes {
                true => TreeNodeRecursion::Continue,
                false => TreeNodeRecursion::Stop,
            })
        });
        yes
    };
    let empty = DFSchema::empty();
    let one_row = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &arrow::array::RecordBatchOptions::new().with_row_count(Some(1)),
    )
    .ok()?;
    let simplify = datafusion::optimizer::simplify_expressions::SimplifyContext::builder()
        .with_schema(Arc::new(DFSchema::empty()))
        .with_config_options(Arc::clone(ctx.state().config_options()))
        .build();
    let fails = |e: &Expr| -> Option<String> {
        // the functions that only run once simplified (`coalesce`, `nvl`) as
        // the optimizer leaves them, and nothing else folded: its constant
        // folding does not follow Þund's arithmetic
        let e = e
            .clone()
            .transform_up(|x| match x {
                Expr::ScalarFunction(f) => match f.func.simplify(f.args.clone(), &simplify)? {
                    ExprSimplifyResult::Simplified(s) => Ok(Transformed::yes(s)),
                    ExprSimplifyResult::Original(_) => Ok(Transformed::no(Expr::ScalarFunction(f))),
                },
                x => Ok(Transformed::no(x)),
            })
            .ok()?
            .data;
        // (what cannot be planned alone is not judged here)
        let p = ctx.create_physical_expr(e, &empty).ok()?;
        let p = logic::rules(p).ok()?;
        p.evaluate(&one_row).err().map(|err| err.to_string())
    };
    let mut found = None;
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|x| {
                if matches!(x, Expr::Literal(..) | Expr::Alias(_)) || !constant(x) {
                    return Ok(TreeNodeRecursion::Continue);
                }
                if let Some(why) = fails(x) {
                    found = Some((x.to_string(), why));
                    return Ok(TreeNodeRecursion::Stop);
                }
                // (a constant that evaluates: what it holds does too)
                Ok(TreeNodeRecursion::Jump)
            })
        })?;
        Ok(match found.is_some() {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    found
}

/// The sides of `plan`'s joins (each a source's rows through filters and
/// projections only) whose expressions can fail (`100 / (b.v - 7) > 5`).
///
/// The incremental join evaluates what DataFusion pushes into a side on
/// every row of that side, a row without a partner too. DataFusion's hash
/// join does not read its probe side when its build side has no row (the
/// window holds rows of one side only, or the other side's rows all fail
/// its conditions or have NULL keys), so the recompute path runs these
/// sides over every row of their source before the query: both paths then
/// fail on the same rows, or neither does. A side that cannot fail is not
/// run again.
fn side_checks(plan: &LogicalPlan) -> Vec<LogicalPlan> {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut checks = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Join(j) = node {
            for side in [j.left.as_ref(), j.right.as_ref()] {
                if row_wise_over_a_scan(side) && can_fail(side) {
                    checks.push(side.clone());
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    checks
}

/// Whether `side` is one source's rows through filters, projections and
/// aliases only.
fn row_wise_over_a_scan(side: &LogicalPlan) -> bool {
    match side {
        LogicalPlan::TableScan(_) => true,
        LogicalPlan::Filter(_) | LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
            side.inputs().len() == 1 && row_wise_over_a_scan(side.inputs()[0])
        }
        _ => false,
    }
}

/// Whether an expression of `side`'s nodes can fail on some row: anything
/// but columns, literals, comparisons, `AND`, `OR`, `NOT`, `IS [NOT] NULL`,
/// `BETWEEN` and `IN` of literals (a cast or any arithmetic can).
fn can_fail(side: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Expr, Operator};
    let fails = std::cell::Cell::new(false);
    let look = |e: &Expr| {
        e.apply(|x| {
            let safe = match x {
                Expr::Column(_)
                | Expr::Literal(..)
                | Expr::Alias(_)
                | Expr::Not(_)
                | Expr::IsNull(_)
                | Expr::IsNotNull(_)
                | Expr::IsTrue(_)
                | Expr::IsFalse(_)
                | Expr::IsNotTrue(_)
                | Expr::IsNotFalse(_)
                | Expr::Between(_)
                | Expr::InList(_) => true,
                Expr::BinaryExpr(b) => matches!(
                    b.op,
                    Operator::Eq
                        | Operator::NotEq
                        | Operator::Lt
                        | Operator::LtEq
                        | Operator::Gt
                        | Operator::GtEq
                        | Operator::And
                        | Operator::Or
                        | Operator::IsDistinctFrom
                        | Operator::IsNotDistinctFrom
                ),
                _ => false,
            };
            fails.set(fails.get() || !safe);
            Ok(match safe {
                true => TreeNodeRecursion::Continue,
                false => TreeNodeRecursion::Stop,
            })
        })
    };
    let _ = side.apply(|node| {
        node.apply_expressions(look)?;
        Ok(match fails.get() {
            true => TreeNodeRecursion::Stop,
            false => TreeNodeRecursion::Continue,
        })
    });
    fails.get()
}

/// The view's SQL planned once over in-memory tables whose contents are swapped per evaluation.
#[derive(Clone)]
pub(crate) struct SqlEvaluator {
    view: String,
    ctx: SessionContext,
    /// The plan as DataFusion made it (what the planner and `explain` see).
    plan: LogicalPlan,
    /// The plan executed: `plan` with Þund's checked aggregates ([`checked::rewrite`]).
    exec: LogicalPlan,
    tables: Vec<Arc<MemTable>>,
    /// The sides of the plan's joins whose filters or projections can fail,
    /// as the optimizer leaves them: run over every row of their source
    /// before the query (see [`side_checks`]).
    side_checks: Vec<LogicalPlan>,
    /// The query's output schema: the names as written, the types as
    /// computed (after type coercion), all fields nullable.
    pub out_schema: SchemaRef,
    rt: Arc<tokio::runtime::Runtime>,
}

impl SqlEvaluator {
    /// Plan `sql` over `sources`; errors name the SQL and DataFusion's reason.
    pub fn new(
        view: &str,
        sql: &str,
        sources: &[SourceInfo],
        rt: Arc<tokio::runtime::Runtime>,
    ) -> Result<Self> {
        let config = SessionConfig::new()
            .with_target_partitions(1)
            .with_information_schema(false);
        let ctx = session(config);
        let mut tables = Vec::new();
        for s in sources {
            let t = Arc::new(
                MemTable::try_new(s.schema.clone(), vec![vec![]])
                    .map_err(|e| Error::eval(view, e))?,
            );
            // by its exact name (`FROM "Bids"`, `FROM "my source"`), and in
            // lower case as an unquoted name reads (`FROM Bids` is `bids`),
            // unless another source has that name
            let lower = s.name.to_ascii_lowercase();
            let alias = (lower != s.name && sources.iter().all(|o| o.name != lower))
                .then_some(lower.as_str());
            for name in std::iter::once(s.name.as_str()).chain(alias) {
                ctx.register_table(TableReference::bare(name), t.clone())
                    .map_err(|e| Error::spec(view, format!("source `{}`: {e}", s.name)))?;
            }
            tables.push(t);
        }
        let sql_err = |e: datafusion::error::DataFusionError| Error::Sql {
            view: view.to_string(),
            sql: sql.to_string(),
            source: Box::new(e),
        };
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let df = rt
            .block_on(ctx.sql_with_options(sql, options))
            .map_err(sql_err)?;
        let plan = df.logical_plan().clone();
        if let Some(name) = nondeterministic(&plan) {
            return Err(sql_err(datafusion::error::DataFusionError::Plan(format!(
                "{NONDETERMINISTIC}{name}': a view's rows may depend only on its \
                 input rows (the two paths evaluate a window at different times, and a \
                 resumed run again), so `{name}` is refused; compute with the event time \
                 (its column, or window_start and window_end) instead"
            ))));
        }
        if let Some((constant, why)) = failing_constant(&ctx, &plan) {
            return Err(sql_err(refused_constant(&constant, &why)));
        }
        let exec = checked::rewrite(plan.clone()).map_err(sql_err)?;
        // what DataFusion's optimizer or physical planner refuses whatever
        // the rows are (a literal that does not cast to the type it is
        // compared with: `WHERE k <> 'x'` of a BIGINT `k`; a window
        // function's order its own check says the sort does not give) is a
        // fault of the SQL, said when the view is made, not at its first
        // trigger with rows (each evaluation plans the query again)
        let state = ctx.state();
        let optimized = state.optimize(&exec).map_err(sql_err)?;
        // (and one the optimizer's simplification leaves: `ABS(CASE WHEN k = k
        // THEN i64::MIN ELSE k END)` of a `k` that is never NULL)
        if let Some((constant, why)) = failing_constant(&ctx, &optimized) {
            return Err(sql_err(refused_constant(&constant, &why)));
        }
        rt.block_on(
            state
                .query_planner()
                .create_physical_plan(&optimized, &state),
        )
        .map_err(sql_err)?;
        // the columns' types as the plan runs them, after type coercion (the
        // optimized plan's: the optimizer keeps the analyzed schema): the
        // planner types some values otherwise (a `CASE` of `INT` and
        // `BIGINT` branches as `INT`, computed `BIGINT`; `v - 1` of a
        // `BIGINT UNSIGNED` `v` as `DECIMAL(20, 0)`, computed
        // `DECIMAL(21, 0)`), and every batch of such a column failed at the
        // first trigger; such a view runs on the recompute path (see
        // `plan::retyped`)
        let out_schema = Arc::new(Schema::new(
            (plan.schema().fields().iter())
                .zip(optimized.schema().fields().iter())
                .map(|(f, g)| {
                    (f.as_ref().clone())
                        .with_data_type(g.data_type().clone())
                        .with_nullable(true)
                })
                .collect::<Vec<_>>(),
        ));
        let side_checks = side_checks(&optimized);
        Ok(SqlEvaluator {
            view: view.to_string(),
            ctx,
            plan,
            exec,
            tables,
            side_checks,
            out_schema,
            rt,
        })
    }

    /// The view's name.
    pub fn view(&self) -> &str {
        &self.view
    }

    /// The session the plan was made in (to compile physical expressions).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The DataFusion logical plan (for `explain`).
    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// Run the query with `rows[i]` as the contents of source `i`, for
    /// `window` (which an overflow error names).
    pub fn eval(&self, rows: Vec<Vec<RecordBatch>>, window: Option<Window>) -> Result<RecordBatch> {
        let tables: Vec<&MemTable> = self.tables.iter().map(|t| t.as_ref()).collect();
        self.run(&self.exec, &self.side_checks, &tables, rows, window)
    }

    /// `plan` (made in this evaluator's session, with Þund's arithmetic: see
    /// [`checked::rewrite`]) through DataFusion's analyzer and optimizer, once,
    /// for [`Self::prepare`].
    pub fn optimize(&self, plan: &LogicalPlan) -> Result<LogicalPlan> {
        self.ctx
            .state()
            .optimize(plan)
            .map_err(|e| Error::eval(&self.view, e))
    }

    /// An [`Self::optimize`]d `plan` over [`live::LiveTable`]s, physically
    /// planned once for [`Self::run_prepared`]. Planned without dynamic
    /// filters: they are state a run would leave behind for the next one.
    pub fn prepare(&self, plan: &LogicalPlan) -> Result<Arc<dyn ExecutionPlan>> {
        let mut state = self.ctx.state();
        let o = &mut state.config_mut().options_mut().optimizer;
        o.enable_dynamic_filter_pushdown = false;
        o.enable_topk_dynamic_filter_pushdown = false;
        o.enable_join_dynamic_filter_pushdown = false;
        o.enable_aggregate_dynamic_filter_pushdown = false;
        self.rt
            .block_on(state.query_planner().create_physical_plan(plan, &state))
            .map_err(|e| Error::eval(&self.view, e))
    }

    /// Run a [`Self::prepare`]d plan with `rows[i]` as the contents of
    /// `tables[i]` (its operators' state reset first); its output has the
    /// query's schema.
    pub fn run_prepared(
        &self,
        exec: &Arc<dyn ExecutionPlan>,
        tables: &[&live::LiveTable],
        rows: Vec<Vec<RecordBatch>>,
        window: Option<Window>,
    ) -> Result<RecordBatch> {
        for (t, r) in tables.iter().zip(rows) {
            t.set(r);
        }
        let out = reset_plan_states(exec.clone()).and_then(|exec| {
            self.rt.block_on(datafusion::physical_plan::collect(
                exec,
                self.ctx.task_ctx(),
            ))
        });
        for t in tables {
            t.set(Vec::new());
        }
        self.collected(out, window)
    }

    /// Run `plan` with `rows[i]` as the contents of `tables[i]`, after
    /// running each of `checks` (its rows dropped as they come: only its
    /// error counts).
    fn run(
        &self,
        plan: &LogicalPlan,
        checks: &[LogicalPlan],
        tables: &[&MemTable],
        rows: Vec<Vec<RecordBatch>>,
        window: Option<Window>,
    ) -> Result<RecordBatch> {
        use futures::TryStreamExt;
        let batches = self.rt.block_on(async {
            for (t, r) in tables.iter().zip(rows) {
                *t.batches[0].write().await = r;
            }
            let out = async {
                for check in checks {
                    let df = self.ctx.execute_logical_plan(check.clone()).await?;
                    let mut stream = df.execute_stream().await?;
                    while stream.try_next().await?.is_some() {}
                }
                let df = self.ctx.execute_logical_plan(plan.clone()).await?;
                df.collect().await
            }
            .await;
            for t in tables {
                t.batches[0].write().await.clear();
            }
            out
        });
        self.collected(batches, window)
    }

    /// A run's batches as one batch of the query's schema, or its error
    /// (an overflow names the window).
    /// `rows` (a result computed without DataFusion) as the view's output
    /// schema names them.
    pub fn as_output(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        Ok(RecordBatch::try_new_with_options(
            self.out_schema.clone(),
            rows.columns().to_vec(),
            &arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.num_rows())),
        )?)
    }

    fn collected(
        &self,
        batches: datafusion::error::Result<Vec<RecordBatch>>,
        window: Option<Window>,
    ) -> Result<RecordBatch> {
        let view = &self.view;
        let batches = batches.map_err(|e| match checked::overflow(&e) {
            Some(o) => Error::Overflow {
                view: view.clone(),
                aggregate: o.aggregate.clone(),
                data_type: o.data_type.to_string(),
                window_start: window.map_or(EventTime::MIN, |w| w.start),
                window_end: window.map_or(EventTime::MAX, |w| w.end),
                value: o.value.clone(),
            },
            None => Error::eval(view, e),
        })?;
        let mut columns: Vec<ArrayRef> = Vec::new();
        if batches.is_empty() {
            return Ok(RecordBatch::new_empty(self.out_schema.clone()));
        }
        let all = concat_batches(&batches[0].schema(), &batches)?;
        columns.extend(all.columns().iter().cloned());
        Ok(RecordBatch::try_new(self.out_schema.clone(), columns)?)
    }
}
