//! The view's plan: which path runs it and why.
//!
//! Planning decides, rendering obeys (conventions §2): at `create_view`,
//! `plan_view` looks at DataFusion's logical plan once and either compiles
//! a supported aggregate shape — the printable [`AggregatePlan`] and the
//! `CompiledAggregate` the incremental path runs, made in the same pass — or
//! returns [`ViewPlan::Recompute`] with a typed [`FallbackReason`]. A shape
//! that cannot be compiled is a fallback with its reason, never a
//! `create_view` error. Every trigger report and `explain` shows the decision.

mod aggregate;
mod extremal;
mod join;
mod outer;
mod post;
mod ranks;
mod rows;
mod shape;

use arrow::datatypes::{DataType, SchemaRef};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};

pub(crate) use aggregate::{
    call_name, ordered_as_integer, CompiledAgg, CompiledAggregate, PerValue, PostPlan, Prune,
    Tagged, TopN,
};
pub use aggregate::{AggFunc, AggregatePlan, AggregateSpec, OrderSpec};
pub(crate) use extremal::Extremal;
pub use join::JoinPlan;
pub(crate) use join::{CompiledJoin, CompiledSide, SideStep};
pub(crate) use outer::{OuterPlan, PerRow};
pub(crate) use ranks::RankedRest;

use crate::spec::{ExecMode, ViewSpec};
use crate::window::TimeWindows;

/// Which path evaluates a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// timely/differential-dataflow arrangements keyed by window.
    Incremental,
    /// DataFusion over the buffered rows of dirty or closing windows.
    Recompute,
}

impl std::fmt::Display for PathKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathKind::Incremental => "incremental",
            PathKind::Recompute => "recompute",
        })
    }
}

/// A query construct named in a [`FallbackReason`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Construct {
    /// `ORDER BY`.
    OrderBy,
    /// `LIMIT` / `OFFSET`.
    Limit,
    /// A join.
    Join,
    /// A window function (`… OVER (…)`).
    WindowFunction,
    /// `SELECT DISTINCT`.
    Distinct,
    /// `UNION`.
    Union,
    /// A subquery.
    Subquery,
    /// Another logical plan node, as DataFusion prints it.
    Other(String),
}

impl std::fmt::Display for Construct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Construct::OrderBy => f.write_str("ORDER BY"),
            Construct::Limit => f.write_str("LIMIT/OFFSET"),
            Construct::Join => f.write_str("a join"),
            Construct::WindowFunction => f.write_str("a window function (OVER …)"),
            Construct::Distinct => f.write_str("SELECT DISTINCT"),
            Construct::Union => f.write_str("UNION"),
            Construct::Subquery => f.write_str("a subquery"),
            Construct::Other(node) => write!(f, "a {node} node"),
        }
    }
}

/// Why a view runs on the recompute path; its `Display` is the sentence that
/// reports and `explain` show.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum FallbackReason {
    /// The spec asked for it (`mode = "recompute"`).
    Requested,
    /// The view has no window.
    NoWindow,
    /// Session windows of a shape the incremental path does not run
    /// (kept for compatibility: see [`FallbackReason::SessionShape`]).
    SessionWindow,
    /// Session windows over a query the incremental path does not run per
    /// session: `what` says which part.
    SessionShape {
        /// What the query does that sessions do not take incrementally.
        what: String,
    },
    /// More than one source.
    SeveralSources,
    /// No GROUP BY and no aggregate.
    NoAggregate,
    /// The query's top uses a construct the incremental path lacks.
    Uses(Construct),
    /// The aggregate reads something other than filters over one source.
    AggregateReads(Construct),
    /// WHERE or HAVING holds a subquery.
    SubqueryInPredicate,
    /// Simplified, the query reads no row (`HAVING 0 * COUNT(*) > 0`,
    /// `LIMIT 0`): the recompute path evaluates nothing of it, as PostgreSQL
    /// does not.
    ReadsNoRows,
    /// The select list holds a subquery.
    SubqueryInSelect,
    /// `f(DISTINCT …)`.
    DistinctAggregate {
        /// The function, upper-case.
        func: String,
    },
    /// `MIN`/`MAX` of strings or binaries (kept per value of their argument)
    /// beside an aggregate kept per value of another argument
    /// (`COUNT(DISTINCT …)`, or `MIN`/`MAX` of another string). Several
    /// `COUNT`/`SUM(DISTINCT …)` arguments are incremental.
    DistinctArguments {
        /// Two of the arguments.
        args: Vec<String>,
    },
    /// An aggregate with `ORDER BY` inside its call (`FILTER (WHERE …)` is
    /// incremental; the name is kept for compatibility).
    FilteredOrOrderedAggregate {
        /// The aggregate expression.
        expr: String,
    },
    /// An aggregate function the incremental path does not maintain.
    UnsupportedAggregate {
        /// The function, upper-case.
        func: String,
    },
    /// A maintained function over an argument type it does not take.
    UnsupportedArgumentType {
        /// The function, upper-case.
        func: String,
        /// The argument's type.
        data_type: String,
    },
    /// Not a plain one-argument aggregate call.
    NotAnAggregate {
        /// The expression.
        expr: String,
    },
    /// `GROUPING SETS`, `ROLLUP` or `CUBE`.
    GroupingSets,
    /// A group key whose type cannot be encoded as a dataflow key.
    KeyNotEncodable {
        /// The key expression.
        key: String,
        /// Its type.
        data_type: String,
    },
    /// A query that keeps each window's top rows (`WHERE x = (SELECT
    /// MAX(x) …)`, `ROW_NUMBER() … <= n`, `ORDER BY … LIMIT`) reads or ranks
    /// by a float: its candidates are kept by value, where -0.0 and 0.0 are
    /// one value and a rank would tell them apart.
    FloatRows {
        /// The float column or expression.
        column: String,
    },
    /// A query with a join the incremental join does not run: `what` says
    /// which part.
    JoinShape {
        /// What the query does that the incremental join does not take.
        what: String,
    },
    /// The shape is supported but an expression did not compile.
    CannotCompile {
        /// What failed, with DataFusion's words.
        detail: String,
    },
}

impl std::fmt::Display for FallbackReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use FallbackReason::*;
        match self {
            Requested => f.write_str("mode = \"recompute\" was requested"),
            NoWindow => f.write_str("the view has no window: it is recomputed over all its rows"),
            SessionWindow => f.write_str("session windows run on the recompute path"),
            SessionShape { what } => write!(f, "over session windows, {what}"),
            SeveralSources => f.write_str("the view reads several sources"),
            NoAggregate => f.write_str("the query has no GROUP BY or aggregate"),
            Uses(c) => write!(f, "the query uses {c}"),
            AggregateReads(c) => write!(f, "the aggregate reads {c}"),
            SubqueryInPredicate => f.write_str("a predicate holds a subquery"),
            ReadsNoRows => f.write_str(
                "simplified, the query reads no row (a condition that is always false, \
                 or LIMIT 0): nothing of it is evaluated",
            ),
            SubqueryInSelect => f.write_str("the select list holds a subquery"),
            DistinctAggregate { func } => write!(f, "{func}(DISTINCT …) is not incremental"),
            DistinctArguments { args } => write!(
                f,
                "MIN/MAX of strings or binaries beside an aggregate kept per value of another \
                 argument (COUNT(DISTINCT …), MIN/MAX of strings) is not incremental ({})",
                args.join(", ")
            ),
            FilteredOrOrderedAggregate { expr } => {
                write!(
                    f,
                    "`{expr}` orders its input (ORDER BY), which is not incremental"
                )
            }
            UnsupportedAggregate { func } => write!(f, "aggregate {func} is not incremental"),
            UnsupportedArgumentType { func, data_type } => {
                write!(f, "{func}({data_type}) is not incremental")
            }
            NotAnAggregate { expr } => write!(f, "`{expr}` is not a plain one-argument aggregate"),
            GroupingSets => f.write_str("GROUPING SETS / ROLLUP / CUBE are not incremental"),
            KeyNotEncodable { key, data_type } => {
                write!(f, "group key `{key}` of type {data_type} cannot be encoded")
            }
            FloatRows { column } => write!(
                f,
                "the query keeps each window's top rows and reads the float `{column}`: \
                 its rows are kept by value, where -0.0 and 0.0 are one"
            ),
            JoinShape { what } => write!(f, "in the join, {what}"),
            CannotCompile { detail } => {
                write!(f, "the incremental plan did not compile: {detail}")
            }
        }
    }
}

/// The plan of one view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ViewPlan {
    /// The differential-dataflow path.
    Incremental(AggregatePlan),
    /// The differential-dataflow path: a windowed join of two sources.
    Join(JoinPlan),
    /// Evaluate the SQL with DataFusion per window; `reason` says why this path.
    Recompute {
        /// Why the view is not incremental.
        reason: FallbackReason,
    },
}

impl ViewPlan {
    /// The path this plan takes.
    pub fn path(&self) -> PathKind {
        match self {
            ViewPlan::Incremental(_) | ViewPlan::Join(_) => PathKind::Incremental,
            ViewPlan::Recompute { .. } => PathKind::Recompute,
        }
    }

    /// Why the recompute path (`None` for an incremental plan).
    pub fn reason(&self) -> Option<&FallbackReason> {
        match self {
            ViewPlan::Incremental(_) | ViewPlan::Join(_) => None,
            ViewPlan::Recompute { reason } => Some(reason),
        }
    }
}

impl std::fmt::Display for ViewPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewPlan::Recompute { reason } => write!(f, "Recompute: {reason}"),
            ViewPlan::Incremental(p) => p.fmt(f),
            ViewPlan::Join(p) => p.fmt(f),
        }
    }
}

/// The decision for one view, with what the incremental path runs when it is chosen.
pub(crate) struct Planned {
    pub plan: ViewPlan,
    pub compiled: Option<CompiledAggregate>,
    pub join: Option<CompiledJoin>,
}

impl Planned {
    fn recompute(reason: FallbackReason) -> Self {
        Planned {
            plan: ViewPlan::Recompute { reason },
            compiled: None,
            join: None,
        }
    }

    fn join((plan, compiled): (JoinPlan, CompiledJoin)) -> Self {
        Planned {
            plan: ViewPlan::Join(plan),
            compiled: None,
            join: Some(compiled),
        }
    }

    /// Whether the incremental path runs it.
    pub fn incremental(&self) -> bool {
        self.compiled.is_some() || self.join.is_some()
    }
}

/// [`physical`], for a value kept by its declared type (a group or join
/// key, a projected column): an error where DataFusion's planner types `e`
/// one way and computes another (a `CASE` of `INT` and `BIGINT` branches,
/// typed `INT`, computed `BIGINT`), so that the view runs on the recompute
/// path, which computes it whole as DataFusion does; where only the
/// encoding of strings differs, cast to the declared one. (An aggregate's
/// argument needs no such check: it is cast to the aggregate's own type;
/// but one kept per value is a key.)
pub(crate) fn physical_as_declared(
    ctx: &SessionContext,
    e: &datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let declared = datafusion::logical_expr::ExprSchemable::get_type(e, schema)?;
    let p = strings_as_declared(physical(ctx, e, schema)?, &declared, schema)?;
    let computed = p.data_type(schema.as_arrow())?;
    if computed != declared {
        return Err(datafusion::error::DataFusionError::Plan(format!(
            "typed {declared} by DataFusion's planner but computed as {computed}"
        )));
    }
    Ok(p)
}

/// Whether `t` holds strings (in any of Arrow's encodings of them).
fn strings(t: &arrow::datatypes::DataType) -> bool {
    use arrow::datatypes::DataType::{LargeUtf8, Utf8, Utf8View};
    matches!(t, Utf8 | LargeUtf8 | Utf8View)
}

/// `e` over `schema` as DataFusion's own physical expression (coerced and
/// simplified, its arithmetic wrapping, its `AND`/`OR` decided per batch),
/// for a window function's `PARTITION BY` and `ORDER BY`: the recompute
/// path evaluates those as DataFusion does (see `paths::sql::logic::apply`),
/// and the incremental path must agree with it.
pub(crate) fn physical_as_datafusion(
    ctx: &SessionContext,
    e: &datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let declared = datafusion::logical_expr::ExprSchemable::get_type(e, schema)?;
    let p = ctx.create_physical_expr(simplified(ctx, e, schema)?, schema)?;
    strings_as_declared(p, &declared, schema)
}

/// `p`, computing strings in another encoding than `declared` (`||` of
/// `Utf8` and `Utf8View`, typed `Utf8`, computed `Utf8View`), cast to the
/// declared one, which the incremental path's row formats are built for.
fn strings_as_declared(
    p: std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
    declared: &arrow::datatypes::DataType,
    schema: &datafusion::common::DFSchema,
) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let computed = p.data_type(schema.as_arrow())?;
    if computed == *declared || !strings(&computed) || !strings(declared) {
        return Ok(p);
    }
    Ok(std::sync::Arc::new(
        datafusion::physical_expr::expressions::CastExpr::new(p, declared.clone(), None),
    ))
}

/// `e` coerced and simplified as DataFusion's optimizer leaves it.
fn simplified(
    ctx: &SessionContext,
    e: &datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> datafusion::error::Result<datafusion::logical_expr::Expr> {
    use datafusion::optimizer::simplify_expressions::{ExprSimplifier, SimplifyContext};
    let state = ctx.state();
    let simplifier = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(std::sync::Arc::new(schema.clone()))
            .with_config_options(std::sync::Arc::clone(state.config_options()))
            .build(),
    );
    simplifier.simplify(simplifier.coerce(e.clone(), schema)?)
}

/// `e` over `schema` as a physical expression, coerced and simplified as
/// DataFusion's optimizer leaves the expressions the recompute path runs:
/// some functions (`coalesce`, `nvl`) only run once simplified, and `AND`
/// and `OR` evaluate left to right ([`crate::paths::sql::logic`]). (No query
/// start time is given: a view calls no clock, which the planning of its SQL
/// refuses.)
pub(crate) fn physical(
    ctx: &SessionContext,
    e: &datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> datafusion::error::Result<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>> {
    let e = simplified(ctx, e, schema)?;
    // arithmetic checked, AND and OR left to right, row by row, as the
    // recompute path runs them
    crate::paths::sql::logic::rules(ctx.create_physical_expr(e, schema)?)
}

/// A session window's gap (ms) and key columns; `None` for other windows.
fn session_plan(window: &crate::spec::WindowSpec) -> Option<(i64, Vec<String>)> {
    match &window.kind {
        crate::spec::WindowKind::Session { gap, key } => Some((crate::spec::ms(*gap), key.clone())),
        _ => None,
    }
}

/// The first output column that DataFusion's planner types (in `logical`)
/// otherwise than the query computes it (`query_schema`, after type
/// coercion), described. The incremental path renders columns by the type
/// declared; the recompute path runs the plan whole, as DataFusion types it.
fn retyped(logical: &LogicalPlan, query_schema: &SchemaRef) -> Option<String> {
    let (f, g) = (logical.schema().fields().iter())
        .zip(query_schema.fields())
        .find(|(f, g)| f.data_type() != g.data_type())?;
    Some(format!(
        "column `{}` is typed {} by DataFusion's planner but computed as {}",
        f.name(),
        f.data_type(),
        g.data_type()
    ))
}

/// Whether `logical`, optimized in `ctx` as the recompute path runs it,
/// reads no source: its optimizer proved a condition always false
/// (`HAVING 0 * COUNT(*) > 0`) and dropped what lay below it, so nothing of
/// the query is evaluated there (a group key that divides by zero neither).
fn reads_no_rows(logical: &LogicalPlan, ctx: &SessionContext) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let Ok(optimized) = ctx.state().optimize(logical) else {
        return false;
    };
    let mut scans = 0usize;
    let _ = optimized.apply_with_subqueries(|p| {
        scans += usize::from(matches!(p, LogicalPlan::TableScan(_)));
        Ok(TreeNodeRecursion::Continue)
    });
    scans == 0
}

/// Decide (and compile) the plan of a validated view from its DataFusion
/// logical plan, planned in `ctx`. `bound` is the type of the window bounds
/// (the first source's event-time type) and `query_schema` the query's
/// output schema.
pub(crate) fn plan_view(
    spec: &ViewSpec,
    logical: &LogicalPlan,
    ctx: &SessionContext,
    bound: Option<&DataType>,
    query_schema: SchemaRef,
) -> Planned {
    if spec.mode == ExecMode::Recompute {
        return Planned::recompute(FallbackReason::Requested);
    }
    let Some(window) = spec.window.as_ref() else {
        return Planned::recompute(FallbackReason::NoWindow);
    };
    if reads_no_rows(logical, ctx) {
        return Planned::recompute(FallbackReason::ReadsNoRows);
    }
    if let Some(detail) = retyped(logical, &query_schema) {
        return Planned::recompute(FallbackReason::CannotCompile { detail });
    }
    let session = session_plan(window);
    let units = match &session {
        // sessions: each row in its pane of `gap`, held until three gaps after its start
        Some((gap, _)) => gap
            .checked_mul(3)
            .and_then(|size| TimeWindows::new(size, *gap, 0)),
        None => TimeWindows::from_spec(window),
    };
    let (Some(windows), Some(bound)) = (units, bound) else {
        return Planned::recompute(FallbackReason::SessionWindow);
    };
    if spec.sources.len() == 2 && session.is_none() {
        return match join::compile(logical, ctx, windows, bound) {
            Ok(Some(j)) => joined(j, ctx, query_schema),
            Ok(None) => Planned::recompute(FallbackReason::SeveralSources),
            Err(reason) => Planned::recompute(reason),
        };
    }
    if spec.sources.len() != 1 {
        return Planned::recompute(FallbackReason::SeveralSources);
    }
    // `SELECT DISTINCT e, …` is `GROUP BY e, …` without aggregates
    let grouped = shape::distinct_as_grouping(logical);
    let logical = grouped.as_ref().unwrap_or(logical);
    let source = &spec.sources[0].name;
    let compiled = match &session {
        None => over_one_input(logical, source, windows, bound, query_schema.clone(), ctx),
        Some((gap, key)) => shape::shape(logical).and_then(|s| {
            aggregate::session_shape(&s, key)?;
            let (mut plan, mut compiled) = aggregate::compile(
                source,
                &s,
                windows,
                bound.clone(),
                query_schema.clone(),
                ctx,
            )?;
            if compiled.keeps_per_value() {
                return Err(FallbackReason::SessionShape {
                    what: "aggregates kept per value (COUNT(DISTINCT …), MIN/MAX of strings) \
                           are not incremental"
                        .to_string(),
                });
            }
            plan.session_gap = Some(*gap);
            compiled.session = Some(*gap);
            Ok((plan, compiled))
        }),
    };
    match compiled {
        Ok((plan, compiled)) => Planned {
            plan: ViewPlan::Incremental(plan),
            compiled: Some(compiled),
            join: None,
        },
        // a join of the source with itself
        Err(reason) => match session
            .is_none()
            .then(|| join::compile(logical, ctx, windows, bound))
        {
            Some(Ok(Some(j))) => joined(j, ctx, query_schema),
            _ => Planned::recompute(reason),
        },
    }
}

/// A query over one input's rows (a source's, or a join's output) as an
/// incremental aggregate: the aggregate itself; the input read only through
/// one aggregate (that aggregate incremental, the rest of the query per
/// window over its groups); or a window's top rows (its candidates
/// incremental, the query per window over them).
fn over_one_input(
    logical: &LogicalPlan,
    source: &str,
    windows: TimeWindows,
    bound: &DataType,
    query_schema: SchemaRef,
    ctx: &SessionContext,
) -> Result<(AggregatePlan, CompiledAggregate), FallbackReason> {
    // (a filter of group keys over the aggregate also refuses the rows of the
    // groups it refuses, as on the recompute path)
    let pushed = post::key_filters_below(logical);
    let logical = pushed.as_ref().unwrap_or(logical);
    let reason = match shape::shape(logical) {
        Ok(s) => return aggregate::compile(source, &s, windows, bound.clone(), query_schema, ctx),
        Err(reason) => reason,
    };
    if let Some(split) = post::split(logical) {
        let s = shape::shape(&split.aggregate)?;
        let (mut plan, mut compiled) =
            aggregate::compile(source, &s, windows, bound.clone(), query_schema, ctx)?;
        // values kept per value are merged on output: not built under a post stage
        if compiled.keeps_per_value() {
            return Err(reason);
        }
        // an aggregate the optimized rest no longer reads is never evaluated,
        // as on the recompute path, whose optimizer drops it
        if let Some(read) = post::columns_read(&split.rest, ctx) {
            aggregate::drop_unread(&mut plan, &mut compiled, &read)?;
        }
        plan.post = Some(split.rest.display_indent().to_string());
        let (extremal, name) = extremal::extremal(&split.rest).unzip();
        // over the groups holding the extremum, the rest without its condition,
        // where that is projections and filters
        let at_extremum = extremal
            .and_then(|_| extremal::over_holders(&split.rest))
            .filter(|r| same_types(r.schema().inner(), split.rest.schema().inner()))
            .and_then(|r| outer::PerRow::compile(&r, ctx));
        plan.post_extremum = extremal.zip(name).map(|(e, name)| {
            let what = if e.max { "MAX" } else { "MIN" };
            let how = match at_extremum {
                Some(_) => ", and it runs over them as projections and filters, without DataFusion",
                None => "",
            };
            format!("only the groups holding the window's {what}({name}) are handed to it{how}")
        });
        let outer = match extremal {
            None => outer::outer(&split.rest, source, windows, bound, ctx).map(Box::new),
            Some(_) => None,
        };
        plan.post_outer = outer.as_ref().map(|_| {
            "in Update mode, each open window's outer groups are kept, and only those \
             a trigger's changed groups touch are shown again"
                .to_string()
        });
        compiled.post = Some(PostPlan {
            rest: split.rest,
            table: split.table,
            expand: None,
            by_partition: None,
            extremal,
            at_extremum,
            outer,
            ranked: None,
        });
        return Ok((plan, compiled));
    }
    match rows::top_rows(logical)? {
        Some(top) => top_rows(top, source, windows, bound, query_schema, ctx, reason),
        None => Err(reason),
    }
}

/// Whether two schemas have the same column types, in order.
fn same_types(a: &arrow::datatypes::Schema, b: &arrow::datatypes::Schema) -> bool {
    let types = |s: &arrow::datatypes::Schema| {
        s.fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect::<Vec<_>>()
    };
    types(a) == types(b)
}

/// The name a join's output goes by in the plan of the aggregate it feeds.
const JOIN_OUTPUT: &str = "the join's output";

/// A compiled join, and the rest of its query as an incremental aggregate
/// over the join's output where it compiles as one (see [`over_one_input`])
/// and gives no rows for a window without pairs (a window any source's
/// on-time row opened may have none): then a window's new pairs are folded
/// into its groups instead of the rest being evaluated over all its pairs.
///
/// A pair belongs to one window. Over tumbling windows the aggregate has
/// the join's windows; over hopping ones it holds a window's pairs in the
/// unit of one slide at the window's start (no two windows share one), and
/// its watermark is the join's less (size − slide), so a unit closes when
/// its window does; its output shows the window's end.
fn joined(
    (mut plan, mut join): (JoinPlan, CompiledJoin),
    ctx: &SessionContext,
    query_schema: SchemaRef,
) -> Planned {
    let (size, slide) = (join.windows.size(), join.windows.slide());
    let Some(units) = TimeWindows::new(slide, slide, join.windows.offset()) else {
        return Planned::join((plan, join));
    };
    let grouped = shape::distinct_as_grouping(&join.rest);
    let rest = grouped.as_ref().unwrap_or(&join.rest);
    let then = over_one_input(rest, JOIN_OUTPUT, units, &join.bound, query_schema, ctx);
    if let Ok((p, c)) = then {
        let empty = c.group_keys > 0
            && c.session.is_none()
            && c.post
                .as_ref()
                .is_none_or(|post| empty_on_empty(&post.rest));
        if empty {
            plan.then = Some(Box::new(p));
            plan.then_shift = size - slide;
            join.then = Some(Box::new(c));
            join.then_shift = size - slide;
        }
    }
    Planned::join((plan, join))
}

/// Whether `plan` gives no rows when its scans read no rows (a global
/// aggregate gives one; a subquery inside an expression adds no rows).
fn empty_on_empty(plan: &LogicalPlan) -> bool {
    use datafusion::logical_expr::JoinType;
    match plan {
        LogicalPlan::TableScan(_) => true,
        LogicalPlan::EmptyRelation(e) => !e.produce_one_row,
        LogicalPlan::Aggregate(a) => !a.group_expr.is_empty() && empty_on_empty(&a.input),
        LogicalPlan::Join(j) => match j.join_type {
            JoinType::Inner => empty_on_empty(&j.left) || empty_on_empty(&j.right),
            JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                empty_on_empty(&j.left)
            }
            JoinType::Right | JoinType::RightSemi | JoinType::RightAnti => empty_on_empty(&j.right),
            _ => empty_on_empty(&j.left) && empty_on_empty(&j.right),
        },
        LogicalPlan::Union(u) => u.inputs.iter().all(|i| empty_on_empty(i)),
        LogicalPlan::Projection(_)
        | LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::SubqueryAlias(_)
        | LogicalPlan::Window(_)
        | LogicalPlan::Distinct(_)
        | LogicalPlan::Subquery(_) => plan.inputs().iter().all(|i| empty_on_empty(i)),
        _ => false,
    }
}

/// Compile a top-rows query (see `rows`): the candidates' aggregate, the
/// rule the host rules rows out by, and the query over the candidates.
fn top_rows(
    top: rows::TopRows,
    source: &str,
    windows: TimeWindows,
    bound: &DataType,
    query_schema: SchemaRef,
    ctx: &SessionContext,
    reason: FallbackReason,
) -> Result<(AggregatePlan, CompiledAggregate), FallbackReason> {
    use datafusion::logical_expr::ExprSchemable;
    let s = shape::shape(&top.aggregate)?;
    let (mut plan, mut compiled) =
        aggregate::compile(source, &s, windows, bound.clone(), query_schema, ctx)?;
    if compiled.keeps_per_value() {
        return Err(reason);
    }
    let input = s.aggregate.input.schema().clone();
    let typed = |e: &datafusion::logical_expr::Expr| {
        let dt = e.get_type(&input).map_err(|_| reason.clone())?;
        // floats: -0.0 and 0.0 are peers in a rank, not in a byte order
        if dt.is_floating() {
            return Err(FallbackReason::FloatRows {
                column: e.to_string(),
            });
        }
        if arrow::row::RowConverter::new(vec![arrow::row::SortField::new(dt.clone())]).is_err() {
            return Err(FallbackReason::KeyNotEncodable {
                key: e.to_string(),
                data_type: dt.to_string(),
            });
        }
        // (a window function's keys as DataFusion evaluates them, as the
        // recompute path does; an `ORDER BY … LIMIT`'s by Þund's rules)
        let p = match top.window {
            true => physical_as_datafusion(ctx, e, &input),
            false => physical(ctx, e, &input),
        };
        let p = p.map_err(|err| FallbackReason::CannotCompile {
            detail: format!("`{e}`: {err}"),
        })?;
        Ok((p, dt))
    };
    let partition = top
        .partition
        .iter()
        .map(typed)
        .collect::<Result<Vec<_>, _>>()?;
    let order = top
        .order
        .iter()
        .map(|o| {
            typed(&o.expr).map(|(p, dt)| {
                let opts = arrow::compute::SortOptions {
                    descending: !o.asc,
                    nulls_first: o.nulls_first,
                };
                (p, dt, opts)
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ranked = ranks::RankedRest::compile(
        &top.rest,
        datafusion::datasource::TableProvider::schema(top.table.as_ref()),
        ctx,
    );
    plan.keep = Some(match ranked {
        Some(_) => format!("{}; the rest ranks them without DataFusion", top.describe),
        None => top.describe,
    });
    plan.post = Some(top.rest.display_indent().to_string());
    let by_partition = top.by_partition.then(|| partition.clone());
    compiled.prune = Some(Prune {
        partition,
        order,
        n: top.n,
    });
    compiled.post = Some(PostPlan {
        rest: top.rest,
        table: top.table,
        expand: Some(top.columns),
        by_partition,
        extremal: None,
        at_extremum: None,
        outer: None,
        ranked,
    });
    Ok((plan, compiled))
}
