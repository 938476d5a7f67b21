//! The view's plan: which path runs it and why.
//!
//! Planning decides, rendering obeys (conventions §2): [`ViewPlan::decide`]
//! looks at DataFusion's logical plan once, at `create_view`, and either
//! describes a supported aggregate shape ([`AggregatePlan`], rendered by
//! `thund-dataflows`) or says in words why the view is recomputed. Every
//! trigger report and `explain` shows the decision.

use datafusion::common::tree_node::TreeNode;
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use serde::{Deserialize, Serialize};

use crate::spec::{ExecMode, ViewSpec, WindowKind};

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

/// An aggregate function the incremental path maintains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AggFunc {
    /// `COUNT(x)` (non-NULL inputs) or `COUNT(*)`.
    Count,
    /// `SUM(x)`: exact over integers and decimals.
    Sum,
    /// `MIN(x)`.
    Min,
    /// `MAX(x)`.
    Max,
    /// `AVG(x)`, kept as (sum, count).
    Avg,
}

/// One aggregate of an [`AggregatePlan`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateSpec {
    /// The function.
    pub func: AggFunc,
    /// The argument, as DataFusion prints it.
    pub arg: String,
    /// The argument's type.
    pub input_type: String,
    /// The result's type.
    pub output_type: String,
}

/// A grouped (or global) aggregate over one source and tumbling or hopping
/// windows: WHERE and key/argument expressions are evaluated on Arrow
/// batches before rows enter the dataflow; HAVING and the top projection
/// after results leave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregatePlan {
    /// The source read.
    pub source: String,
    /// The WHERE predicate, if any.
    pub filter: Option<String>,
    /// Group keys (expression and type); empty for a global aggregate.
    pub keys: Vec<(String, String)>,
    /// The aggregates, in the order of the Aggregate node.
    pub aggregates: Vec<AggregateSpec>,
    /// The HAVING predicate, if any.
    pub having: Option<String>,
    /// The output columns, as expressions over keys and aggregates.
    pub output: Vec<String>,
}

/// The plan of one view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ViewPlan {
    /// The differential-dataflow path.
    Incremental(AggregatePlan),
    /// Evaluate the SQL with DataFusion per window; `reason` says why this path.
    Recompute {
        /// Why the view is not incremental, in words a user understands.
        reason: String,
    },
}

/// The parts of a supported logical plan, for the incremental runtime to compile.
pub(crate) struct Shape<'a> {
    pub projection: Option<&'a [Expr]>,
    pub having: Option<&'a Expr>,
    pub aggregate: &'a datafusion::logical_expr::Aggregate,
    pub filters: Vec<&'a Expr>,
}

fn recompute(reason: impl Into<String>) -> ViewPlan {
    ViewPlan::Recompute {
        reason: reason.into(),
    }
}

fn has_subquery(e: &Expr) -> bool {
    e.exists(|x| {
        Ok(matches!(
            x,
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)
        ))
    })
    .unwrap_or(true)
}

/// The node's kind in words, for reasons.
fn node_name(p: &LogicalPlan) -> String {
    match p {
        LogicalPlan::Sort(_) => "ORDER BY".into(),
        LogicalPlan::Limit(_) => "LIMIT/OFFSET".into(),
        LogicalPlan::Join(_) => "a join".into(),
        LogicalPlan::Window(_) => "a window function (OVER …)".into(),
        LogicalPlan::Distinct(_) => "SELECT DISTINCT".into(),
        LogicalPlan::Union(_) => "UNION".into(),
        LogicalPlan::Subquery(_) => "a subquery".into(),
        other => format!("a {} node", other.display()),
    }
}

/// Split a logical plan into the supported shape, or say why not.
pub(crate) fn shape(plan: &LogicalPlan) -> Result<Shape<'_>, String> {
    let mut p = plan;
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
    let LogicalPlan::Aggregate(aggregate) = p else {
        return Err(match p {
            LogicalPlan::Aggregate(_) => unreachable_reason(),
            LogicalPlan::TableScan(_) | LogicalPlan::Filter(_) | LogicalPlan::Projection(_) => {
                "the query has no GROUP BY or aggregate".into()
            }
            other => format!("the query uses {}", node_name(other)),
        });
    };
    let mut filters = Vec::new();
    let mut q = aggregate.input.as_ref();
    loop {
        match q {
            LogicalPlan::Filter(f) => {
                filters.push(&f.predicate);
                q = f.input.as_ref();
            }
            LogicalPlan::SubqueryAlias(a) => q = a.input.as_ref(),
            LogicalPlan::TableScan(t) if t.filters.is_empty() && t.fetch.is_none() => break,
            other => return Err(format!("the aggregate reads {}", node_name(other))),
        }
    }
    for e in filters.iter().copied().chain(having) {
        if has_subquery(e) {
            return Err("a predicate holds a subquery".into());
        }
    }
    for e in projection.into_iter().flatten() {
        if has_subquery(e) {
            return Err("the select list holds a subquery".into());
        }
    }
    Ok(Shape {
        projection,
        having,
        aggregate,
        filters,
    })
}

fn unreachable_reason() -> String {
    "unsupported plan".into()
}

/// The function, checked: one argument, no DISTINCT/FILTER/ORDER BY, a supported type.
pub(crate) fn agg_func(
    e: &Expr,
    input: &DFSchema,
) -> Result<(AggFunc, Expr, arrow::datatypes::DataType), String> {
    let inner = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    let Expr::AggregateFunction(af) = inner else {
        return Err(format!("`{e}` is not a plain aggregate"));
    };
    let name = af.func.name().to_ascii_lowercase();
    let p = &af.params;
    if p.distinct {
        return Err(format!(
            "{}(DISTINCT …) is not incremental",
            name.to_uppercase()
        ));
    }
    if p.filter.is_some() || !p.order_by.is_empty() {
        return Err(format!("`{e}` has FILTER or ORDER BY"));
    }
    let func = match name.as_str() {
        "count" => AggFunc::Count,
        "sum" => AggFunc::Sum,
        "min" => AggFunc::Min,
        "max" => AggFunc::Max,
        "avg" | "mean" => AggFunc::Avg,
        other => return Err(format!("aggregate `{other}` is not incremental")),
    };
    let [arg] = p.args.as_slice() else {
        return Err(format!("`{e}` takes {} arguments", p.args.len()));
    };
    let dt = arg.get_type(input).map_err(|err| err.to_string())?;
    use arrow::datatypes::DataType::*;
    let ok = match func {
        AggFunc::Count => true,
        _ => dt.is_integer() || matches!(dt, Float32 | Float64 | Decimal128(_, _)),
    };
    if !ok {
        return Err(format!("{}({dt}) is not incremental", name.to_uppercase()));
    }
    Ok((func, arg.clone(), dt))
}

impl ViewPlan {
    /// Decide the plan of a validated view from its DataFusion logical plan.
    pub fn decide(spec: &ViewSpec, logical: &LogicalPlan) -> ViewPlan {
        if spec.mode == ExecMode::Recompute {
            return recompute("mode = \"recompute\" was requested");
        }
        match spec.window.as_ref().map(|w| &w.kind) {
            None => return recompute("the view has no window: it is recomputed over all its rows"),
            Some(WindowKind::Session { .. }) => {
                return recompute("session windows run on the recompute path")
            }
            Some(_) => {}
        }
        if spec.sources.len() != 1 {
            return recompute("the view reads several sources");
        }
        let s = match shape(logical) {
            Ok(s) => s,
            Err(reason) => return recompute(reason),
        };
        let input = s.aggregate.input.schema();
        let mut aggregates = Vec::new();
        for e in &s.aggregate.aggr_expr {
            match agg_func(e, input) {
                Ok((func, arg, dt)) => {
                    let i = aggregates.len() + s.aggregate.group_expr.len();
                    let out = s.aggregate.schema.field(i).data_type().to_string();
                    aggregates.push(AggregateSpec {
                        func,
                        arg: arg.to_string(),
                        input_type: dt.to_string(),
                        output_type: out,
                    });
                }
                Err(reason) => return recompute(reason),
            }
        }
        let mut keys = Vec::new();
        for (i, g) in s.aggregate.group_expr.iter().enumerate() {
            if matches!(g, Expr::GroupingSet(_)) {
                return recompute("GROUPING SETS / ROLLUP / CUBE are not incremental");
            }
            let dt = s.aggregate.schema.field(i).data_type();
            if arrow::row::RowConverter::new(vec![arrow::row::SortField::new(dt.clone())]).is_err()
            {
                return recompute(format!("group key `{g}` of type {dt} cannot be encoded"));
            }
            keys.push((g.to_string(), dt.to_string()));
        }
        let filter = (!s.filters.is_empty()).then(|| {
            s.filters
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join(" AND ")
        });
        ViewPlan::Incremental(AggregatePlan {
            source: spec.sources[0].name.clone(),
            filter,
            keys,
            aggregates,
            having: s.having.map(|h| h.to_string()),
            output: match s.projection {
                Some(p) => p.iter().map(|e| e.to_string()).collect(),
                None => s
                    .aggregate
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect(),
            },
        })
    }

    /// The path this plan takes.
    pub fn path(&self) -> PathKind {
        match self {
            ViewPlan::Incremental(_) => PathKind::Incremental,
            ViewPlan::Recompute { .. } => PathKind::Recompute,
        }
    }

    /// Why this path (empty for an incremental plan).
    pub fn reason(&self) -> &str {
        match self {
            ViewPlan::Incremental(_) => "",
            ViewPlan::Recompute { reason } => reason,
        }
    }
}

impl std::fmt::Display for ViewPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewPlan::Recompute { reason } => write!(f, "Recompute: {reason}"),
            ViewPlan::Incremental(p) => {
                writeln!(f, "Incremental aggregate over `{}`", p.source)?;
                if let Some(w) = &p.filter {
                    writeln!(f, "  pre:  WHERE {w}")?;
                }
                if p.keys.is_empty() {
                    writeln!(f, "  keys: (none: one group per window)")?;
                }
                for (k, t) in &p.keys {
                    writeln!(f, "  key:  {k} : {t}")?;
                }
                for a in &p.aggregates {
                    writeln!(
                        f,
                        "  agg:  {:?}({}) : {} -> {}",
                        a.func, a.arg, a.input_type, a.output_type
                    )?;
                }
                if let Some(h) = &p.having {
                    writeln!(f, "  post: HAVING {h}")?;
                }
                write!(f, "  post: SELECT {}", p.output.join(", "))
            }
        }
    }
}
