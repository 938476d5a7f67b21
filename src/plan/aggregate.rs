//! The windowed aggregate plan: what it says ([`AggregatePlan`], printable
//! and serialisable) and what rendering runs ([`CompiledAggregate`]: DataFusion
//! physical expressions, aggregate kinds, types). Both are made in one pass
//! by [`compile`], so nothing downstream re-derives the shape.

use std::sync::Arc;

use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, ScalarValue};
use datafusion::logical_expr::{Aggregate, Expr, ExprSchemable};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use serde::{Deserialize, Serialize};
use thund_dataflows::AggKind;

use super::shape::{has_subquery, Shape};
use super::FallbackReason;
use crate::window::TimeWindows;

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
    /// `FILTER (WHERE …)`: the rows it folds, if not all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// `COUNT(DISTINCT …)`: counts distinct non-NULL values.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub distinct: bool,
}

/// A grouped (or global) aggregate over one source and tumbling or hopping
/// windows: WHERE and key/argument expressions are evaluated on Arrow
/// batches before rows enter the dataflow; HAVING and the top projection
/// after results leave it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregatePlan {
    /// The source read.
    pub source: String,
    /// The windows, in milliseconds: `(size, slide, offset)`.
    pub windows: (i64, i64, i64),
    /// The WHERE predicate, if any.
    pub filter: Option<String>,
    /// Group keys (expression and type); empty for a global aggregate.
    pub keys: Vec<(String, String)>,
    /// The aggregates, in the order of the Aggregate node.
    pub aggregates: Vec<AggregateSpec>,
    /// The argument kept per value (`COUNT(DISTINCT x)`, `MIN`/`MAX` of a
    /// string), with its type: the dataflow's state is by group and value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_key: Option<Box<(String, String)>>,
    /// More than one argument kept per value (`COUNT(DISTINCT a)` beside
    /// `COUNT(DISTINCT b)`), with their types: the dataflow's state is by
    /// group, argument and value (each row is one entry per argument).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value_keys: Vec<(String, String)>,
    /// The HAVING predicate, if any.
    pub having: Option<String>,
    /// The output columns, as expressions over keys and aggregates.
    pub output: Vec<String>,
    /// `ORDER BY` over the output, per window, with its `OFFSET` and `LIMIT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Box<OrderSpec>>,
    /// Session windows: their gap in ms (`windows` are then the units the
    /// dataflow holds rows in: panes of one gap, each kept three gaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_gap: Option<i64>,
    /// The rest of the query, evaluated per window over the aggregate's rows
    /// (the source is read only through this aggregate), as DataFusion prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<String>,
    /// When the rest depends only on the groups holding each window's
    /// extremum of one column (see `plan::extremal`): that extremum, as
    /// `explain` names it (only those groups are handed to the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_extremum: Option<String>,
    /// When the rest is an aggregate over the groups with an exact inverse,
    /// under projections and filters (see `plan::outer`): how it is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_outer: Option<String>,
    /// A top-rows query (the aggregate holds the rows the query reads, by
    /// value, with their multiplicity): the rule that rules rows out first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<String>,
}

/// `ORDER BY … [LIMIT n [OFFSET m]]` of an [`AggregatePlan`], applied to
/// each window's output rows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderSpec {
    /// The sort keys, as DataFusion prints them.
    pub by: Vec<String>,
    /// Rows skipped (`OFFSET`).
    pub skip: usize,
    /// Rows kept after those (`LIMIT`; `None`: all).
    pub fetch: Option<usize>,
}

impl std::fmt::Display for AggregatePlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (size, slide, offset) = self.windows;
        writeln!(f, "Incremental aggregate over `{}`", self.source)?;
        if let Some(gap) = self.session_gap {
            writeln!(f, "  windows: sessions per key, gap {gap} ms")?;
            writeln!(
                f,
                "  state: per key and pane of {gap} ms (with its first and last event time), \
                 chained into sessions on output"
            )?;
        } else {
            writeln!(
                f,
                "  windows: size {size} ms, slide {slide} ms, offset {offset} ms"
            )?;
        }
        // hopping: the dataflow's state is per pane, each window folded from its panes
        if let Some(p) = crate::window::Panes::new(size, slide, offset)
            .filter(|_| size != slide && self.session_gap.is_none())
        {
            writeln!(
                f,
                "  state: panes of {} ms, one update per pane and key",
                p.width()
            )?;
        }
        if let Some(w) = &self.filter {
            writeln!(f, "  pre:  WHERE {w}")?;
        }
        if self.keys.is_empty() {
            writeln!(f, "  keys: (none: one group per window)")?;
        }
        for (k, t) in &self.keys {
            writeln!(f, "  key:  {k} : {t}")?;
        }
        if let Some((arg, t)) = self.value_key.as_deref() {
            writeln!(
                f,
                "  state: by group and value of {arg} : {t}, merged per group on output"
            )?;
        }
        if !self.value_keys.is_empty() {
            let args: Vec<String> = self
                .value_keys
                .iter()
                .map(|(arg, t)| format!("{arg} : {t}"))
                .collect();
            writeln!(
                f,
                "  state: by group, argument and value of {} (one entry per argument and row), \
                 merged per group on output",
                args.join("; ")
            )?;
        }
        for a in &self.aggregates {
            let distinct = if a.distinct { "DISTINCT " } else { "" };
            write!(f, "  agg:  {:?}({distinct}{})", a.func, a.arg)?;
            if let Some(w) = &a.filter {
                write!(f, " FILTER (WHERE {w})")?;
            }
            writeln!(f, " : {} -> {}", a.input_type, a.output_type)?;
        }
        if let Some(h) = &self.having {
            writeln!(f, "  post: HAVING {h}")?;
        }
        if let Some(k) = &self.keep {
            writeln!(f, "  keep: per pane and partition, {k}")?;
        }
        if let Some(rest) = &self.post {
            write!(
                f,
                "  post: per window, the rest of the query over the aggregate's rows:"
            )?;
            for line in rest.lines() {
                write!(f, "\n    {line}")?;
            }
            if let Some(o) = &self.post_outer {
                write!(f, "\n  post: {o}")?;
            }
            return Ok(());
        }
        write!(f, "  post: SELECT {}", self.output.join(", "))?;
        if let Some(o) = self.order.as_deref() {
            write!(f, "\n  post: per window ORDER BY {}", o.by.join(", "))?;
            if let Some(n) = o.fetch {
                write!(f, " LIMIT {n}")?;
            }
            if o.skip > 0 {
                write!(f, " OFFSET {}", o.skip)?;
            }
        }
        Ok(())
    }
}

/// One compiled aggregate: its function, the dataflow state kind, the
/// argument as a physical expression, and its types.
pub(crate) struct CompiledAgg {
    /// The aggregate as errors name it: `SUM(t.v)`.
    pub name: String,
    pub func: AggFunc,
    pub kind: AggKind,
    pub arg: Arc<dyn PhysicalExpr>,
    /// `FILTER (WHERE …)`, on source batches: rows where it is not true do
    /// not feed this aggregate (they still make their group exist).
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// Kept per value of its argument (the plan's last key): the dataflow
    /// counts the argument's rows per group and value, and the output reads
    /// the values whose count is positive.
    pub per_value: Option<PerValue>,
    /// With more than one argument kept per value ([`Tagged`]): the index of
    /// the argument whose entries fold this aggregate (0 for one not kept
    /// per value: the first argument's entries fold it, once per row).
    pub tag: usize,
    pub input_type: DataType,
    pub output_type: DataType,
}

/// More than one argument kept per value (`COUNT`/`SUM(DISTINCT …)` of
/// different arguments): each row makes one entry per argument, keyed by
/// the group keys, the argument's index (`UInt8`) and its value, and each
/// entry folds only the aggregates of its argument ([`CompiledAgg::tag`]).
pub(crate) struct Tagged {
    /// The arguments, in the order their index names them.
    pub args: Vec<Arc<dyn PhysicalExpr>>,
    /// Their types differ: the value column holds each value's row-format
    /// bytes (`Binary`), by each argument's encoder; else the value itself.
    pub encode: Option<Vec<arrow::row::RowConverter>>,
}

/// An aggregate kept per value of its argument: what a group's output reads
/// from its values (those with a positive count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PerValue {
    /// `COUNT(DISTINCT x)`: how many there are.
    CountDistinct,
    /// `SUM(DISTINCT x)` of integers and decimals: each value's state is
    /// `MAX(x)` (so `x` itself); the group sums its values.
    SumDistinct,
    /// `MIN(x)` of a type without an integer order (strings, binaries): the least.
    Min,
    /// `MAX(x)` likewise: the greatest.
    Max,
}

/// The types `MIN`/`MAX` keep per value (ordered as the row format orders
/// them: bytes, as SQL compares strings and binaries).
fn ordered_per_value(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// Everything the incremental path runs, decided at `create_view`.
pub(crate) struct CompiledAggregate {
    /// The windows rows are assigned to.
    pub windows: TimeWindows,
    /// The Arrow type of `window_start`/`window_end` (the event-time column's).
    pub bound: DataType,
    /// WHERE predicates, on source batches.
    pub filters: Vec<Arc<dyn PhysicalExpr>>,
    /// The dataflow's keys, on source batches: the group keys, then the
    /// argument of `COUNT(DISTINCT …)` if there is one (with several, see
    /// `tagged`: the group keys only).
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The dataflow's key fields (names and types): the group keys', then
    /// those of the value kept per value (with several arguments, the
    /// argument's index and the value).
    pub key_fields: Vec<Field>,
    /// How many of `keys` are group keys (all but a DISTINCT argument).
    pub group_keys: usize,
    /// More than one argument kept per value: each row is one entry per
    /// argument, its key the group keys, the argument's index and its value.
    pub tagged: Option<Tagged>,
    /// The aggregates, in the Aggregate node's order.
    pub aggs: Vec<CompiledAgg>,
    /// The Aggregate node's output: keys, then aggregates (all nullable).
    pub agg_schema: SchemaRef,
    /// HAVING, over `agg_schema`.
    pub having: Option<Arc<dyn PhysicalExpr>>,
    /// The select list, over `agg_schema` (`None`: the aggregate's output as is).
    pub projection: Option<Vec<Arc<dyn PhysicalExpr>>>,
    /// The query's output schema.
    pub query_schema: SchemaRef,
    /// `ORDER BY … LIMIT` per window, over the query's output.
    pub order: Option<TopN>,
    /// Session windows: the gap in ms (`windows` are then the panes rows are
    /// held in, see `paths::incremental::session`).
    pub session: Option<i64>,
    /// The rest of the query over the aggregate's rows, per window.
    pub post: Option<PostPlan>,
    /// A top-rows query: the rows the host rules out before the dataflow.
    pub prune: Option<Prune>,
}

impl CompiledAggregate {
    /// Whether some aggregate is kept per value of its argument: the
    /// dataflow's keys are then entries (group and value), merged per group.
    pub fn keeps_per_value(&self) -> bool {
        self.key_fields.len() > self.group_keys
    }

    /// Whether the only aggregates kept per value are `MIN`/`MAX` without
    /// `FILTER` (of one argument, the last key), in a plain grouped query
    /// (no sessions, no later stage, no top-rows rule): a batch's rows of a
    /// unit and group then need entries for their least and greatest value
    /// only (see `paths::incremental::extremes`).
    pub fn extremes_per_value(&self) -> bool {
        self.keeps_per_value()
            && self.tagged.is_none()
            && !self.keeps_refused_rows()
            && self.prune.is_none()
            && self.aggs.iter().all(|a| match a.per_value {
                None => true,
                Some(PerValue::Min | PerValue::Max) => a.filter.is_none(),
                Some(PerValue::CountDistinct | PerValue::SumDistinct) => false,
            })
    }

    /// Whether rows WHERE refuses still make their group slot (session
    /// windows: they extend their session; a post stage: they make their
    /// window exist), with three more states per group after the aggregates
    /// (first and last event time, rows WHERE let through).
    pub fn keeps_refused_rows(&self) -> bool {
        self.session.is_some() || self.post.is_some()
    }

    /// Whether a group's row changes whenever its state does, so that
    /// Update mode need not remember what each group last showed: the select
    /// list shows every group key and a `COUNT(*)` as plain columns, which
    /// tell groups apart and grow with every row a group takes (one row per
    /// group and window, only the rows WHERE lets through fed, no later
    /// stage).
    pub fn rows_always_change(&self) -> bool {
        use datafusion::physical_expr::expressions::Literal;
        if !self.keys_shown() || self.keeps_per_value() || self.keeps_refused_rows() {
            return false;
        }
        let shown = self.shown_columns();
        let count_star = |a: &CompiledAgg| {
            a.func == AggFunc::Count
                && a.filter.is_none()
                && a.per_value.is_none()
                && a.arg
                    .downcast_ref::<Literal>()
                    .is_some_and(|l| !l.value().is_null())
        };
        self.aggs
            .iter()
            .enumerate()
            .any(|(j, a)| count_star(a) && shown.contains(&(self.group_keys + j)))
    }

    /// Whether the select list shows every group key as a plain column, one
    /// row per group and window (no later stage): rows of different groups
    /// then always differ, so Update mode's rule (new rows less old ones, as
    /// multisets per window) compares each group's row with its own old row
    /// only.
    pub fn keys_shown(&self) -> bool {
        if self.post.is_some() || self.order.is_some() || self.prune.is_some() {
            return false;
        }
        let shown = self.shown_columns();
        (0..self.group_keys).all(|k| shown.contains(&k))
    }

    /// The columns of `agg_schema` the select list shows as plain columns.
    fn shown_columns(&self) -> Vec<usize> {
        use datafusion::physical_expr::expressions::Column as Col;
        match &self.projection {
            None => (0..self.agg_schema.fields().len()).collect(),
            Some(exprs) => exprs
                .iter()
                .filter_map(|e| e.downcast_ref::<Col>().map(|c| c.index()))
                .collect(),
        }
    }
}

/// The rest of a query that reads its source only through one aggregate
/// (see `plan::post`): a plan over `table`, which holds a window's groups.
pub(crate) struct PostPlan {
    pub rest: datafusion::logical_expr::LogicalPlan,
    pub table: Arc<crate::paths::sql::live::LiveTable>,
    /// A top-rows query: `table` holds rows, not groups; each of its columns
    /// is this group key (`None`: a column never read, filled with a
    /// default), and each group is repeated as often as its count says.
    pub expand: Option<Vec<Option<usize>>>,
    /// A top-rows query whose result is the union of its partitions' (see
    /// `plan::rows`): the partition expressions over `table`'s rows.
    pub by_partition: Option<Vec<(Arc<dyn PhysicalExpr>, DataType)>>,
    /// The rest depends only on the groups holding each window's extremum
    /// of this column of `table` (see `plan::extremal`).
    pub extremal: Option<super::extremal::Extremal>,
    /// With `extremal`: the rest over the groups holding the extremum, as
    /// projections and filters (see `plan::extremal::over_holders`).
    pub at_extremum: Option<super::outer::PerRow>,
    /// The rest is an aggregate over the groups that Update mode keeps (see
    /// `plan::outer`).
    pub outer: Option<Box<super::outer::OuterPlan>>,
    /// A top-rows query's rest ranked without DataFusion (see `plan::ranks`).
    pub ranked: Option<super::ranks::RankedRest>,
}

/// A top-rows query's rule (see `plan::rows`): a row with `n` rows strictly
/// before it in `order` within its pane and `partition` is no candidate.
pub(crate) struct Prune {
    pub partition: Vec<(Arc<dyn PhysicalExpr>, DataType)>,
    pub order: Vec<(Arc<dyn PhysicalExpr>, DataType, SortOptions)>,
    pub n: usize,
}

/// `ORDER BY … [LIMIT n [OFFSET m]]`, applied to each window's output rows.
pub(crate) struct TopN {
    /// Sort keys over the query's output columns, with their direction.
    pub sort: Vec<(Arc<dyn PhysicalExpr>, SortOptions)>,
    pub skip: usize,
    pub fetch: Option<usize>,
}

/// A checked aggregate call: its function, argument, the argument's type and
/// its `FILTER (WHERE …)`.
type AggCall = (AggFunc, Expr, DataType, Option<Expr>, Option<PerValue>);

/// The function, checked: one argument, no DISTINCT or ORDER BY, a supported type.
fn agg_func(e: &Expr, input: &DFSchema) -> Result<AggCall, FallbackReason> {
    let inner = match e {
        Expr::Alias(a) => a.expr.as_ref(),
        other => other,
    };
    let Expr::AggregateFunction(af) = inner else {
        return Err(FallbackReason::NotAnAggregate {
            expr: e.to_string(),
        });
    };
    let name = af.func.name().to_ascii_uppercase();
    let p = &af.params;
    // COUNT/SUM(DISTINCT x) are kept per value of x (SUM of integers and
    // decimals, checked below); MIN/MAX(DISTINCT x) are MIN/MAX(x)
    if p.distinct && !matches!(name.as_str(), "COUNT" | "SUM" | "MIN" | "MAX") {
        return Err(FallbackReason::DistinctAggregate { func: name });
    }
    if !p.order_by.is_empty() {
        return Err(FallbackReason::FilteredOrOrderedAggregate {
            expr: e.to_string(),
        });
    }
    let func = match name.as_str() {
        "COUNT" => AggFunc::Count,
        "SUM" => AggFunc::Sum,
        "MIN" => AggFunc::Min,
        "MAX" => AggFunc::Max,
        "AVG" | "MEAN" => AggFunc::Avg,
        _ => return Err(FallbackReason::UnsupportedAggregate { func: name }),
    };
    let [arg] = p.args.as_slice() else {
        return Err(FallbackReason::NotAnAggregate {
            expr: e.to_string(),
        });
    };
    let dt = arg
        .get_type(input)
        .map_err(|err| FallbackReason::CannotCompile {
            detail: format!("the type of `{arg}`: {err}"),
        })?;
    let number = dt.is_integer()
        || matches!(
            dt,
            DataType::Float32 | DataType::Float64 | DataType::Decimal128(_, _)
        );
    let ok = match func {
        AggFunc::Count => true,
        AggFunc::Sum | AggFunc::Avg => number,
        AggFunc::Min | AggFunc::Max => number || ordered_as_integer(&dt) || ordered_per_value(&dt),
    };
    if !ok {
        return Err(FallbackReason::UnsupportedArgumentType {
            func: name,
            data_type: dt.to_string(),
        });
    }
    // SUM/AVG(DISTINCT …) of floats: which of -0.0 and 0.0, or which NaN,
    // is one value is not settled here
    let exact = dt.is_integer() || matches!(dt, DataType::Decimal128(_, _));
    if p.distinct && func == AggFunc::Sum && !exact {
        return Err(FallbackReason::DistinctAggregate { func: name });
    }
    let per_value = match func {
        AggFunc::Count if p.distinct => Some(PerValue::CountDistinct),
        AggFunc::Sum if p.distinct => Some(PerValue::SumDistinct),
        AggFunc::Min if ordered_per_value(&dt) => Some(PerValue::Min),
        AggFunc::Max if ordered_per_value(&dt) => Some(PerValue::Max),
        _ => None,
    };
    Ok((
        func,
        arg.clone(),
        dt,
        p.filter.as_deref().cloned(),
        per_value,
    ))
}

/// The types whose order is the order of their integer representation, so
/// `MIN`/`MAX` keep them as integers: booleans (`false < true`), dates,
/// times, timestamps (in any time zone: the instant is what is compared) and
/// durations.
pub(crate) fn ordered_as_integer(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Boolean
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Timestamp(_, _)
            | DataType::Duration(_)
    )
}

/// How errors name an aggregate: the SQL function in upper case and its argument.
pub(crate) fn aggregate_name(a: &AggregateSpec) -> String {
    let func = format!("{:?}", a.func).to_uppercase();
    let filter = a.filter.as_ref().map(|w| w as &dyn std::fmt::Display);
    call_name(&func, a.distinct, &a.arg, filter)
}

/// An aggregate call as both paths name it in their errors:
/// `SUM(DISTINCT t.v) FILTER (WHERE t.g > Int64(2))`.
pub(crate) fn call_name(
    func: &str,
    distinct: bool,
    arg: &dyn std::fmt::Display,
    filter: Option<&dyn std::fmt::Display>,
) -> String {
    let distinct = if distinct { "DISTINCT " } else { "" };
    let call = format!("{func}({distinct}{arg})");
    match filter {
        Some(w) => format!("{call} FILTER (WHERE {w})"),
        None => call,
    }
}

/// The dataflow state that maintains `func` over `dt`.
fn kind_of(func: AggFunc, dt: &DataType) -> AggKind {
    let float = matches!(dt, DataType::Float32 | DataType::Float64);
    match (func, float) {
        (AggFunc::Count, _) => AggKind::Count,
        (AggFunc::Sum | AggFunc::Avg, false) => AggKind::SumInt,
        (AggFunc::Sum | AggFunc::Avg, true) => AggKind::SumFloat,
        (AggFunc::Min, false) => AggKind::MinInt,
        (AggFunc::Min, true) => AggKind::MinFloat,
        (AggFunc::Max, false) => AggKind::MaxInt,
        (AggFunc::Max, true) => AggKind::MaxFloat,
    }
}

/// Replace every sub-expression that the Aggregate node computes (a group
/// key or an aggregate) by a column of the Aggregate's output.
fn over_aggregate(e: &Expr, agg: &Aggregate) -> datafusion::error::Result<Expr> {
    let outs: Vec<(Expr, Column)> = agg
        .group_expr
        .iter()
        .chain(agg.aggr_expr.iter())
        .enumerate()
        .map(|(i, x)| {
            let (q, f) = agg.schema.qualified_field(i);
            (x.clone().unalias(), Column::new(q.cloned(), f.name()))
        })
        .collect();
    e.clone()
        .transform_down(|x| {
            Ok(match outs.iter().find(|(o, _)| *o == x) {
                Some((_, c)) => Transformed::yes(Expr::Column(c.clone())),
                None => Transformed::no(x),
            })
        })
        .map(|t| t.data)
}

/// By aggregate of `s`: whether the rest of the query no longer reads it
/// once its expressions are simplified as DataFusion's optimizer does
/// (`CASE WHEN 2 > 0 THEN SUM(k) ELSE SUM(100 / k) END` reads `SUM(k)`
/// alone). The recompute path's optimizer drops such an aggregate, so its
/// argument is never evaluated there; the incremental path must not
/// evaluate it either, or it fails where the other passes.
fn dead_aggregates(s: &Shape<'_>, ctx: &SessionContext, outputs: usize) -> Vec<bool> {
    let n = s.aggregate.aggr_expr.len();
    let Some(projection) = s.projection else {
        // every aggregate is output
        return vec![false; n];
    };
    let simplified = |e: &Expr, schema: &DFSchema| super::simplified(ctx, e, schema).ok();
    // what the sort reads of the projection (which also holds the columns
    // only the sort reads, after the query's own)
    let mut sorted = std::collections::HashSet::new();
    if let Some(o) = &s.order {
        for e in o.sort {
            let Some(x) = simplified(&e.expr, o.schema) else {
                return vec![false; n];
            };
            sorted.extend(x.column_refs().into_iter().map(|c| c.name.clone()));
        }
    }
    let agg_df = s.aggregate.schema.as_ref();
    let mut read = std::collections::HashSet::new();
    let shown = projection
        .iter()
        .enumerate()
        .filter(|(i, e)| *i < outputs || sorted.contains(&e.qualified_name().1))
        .map(|(_, e)| e);
    for e in shown.chain(s.having) {
        let Some(x) = over_aggregate(e, s.aggregate)
            .ok()
            .and_then(|x| simplified(&x, agg_df))
        else {
            // (what does not simplify is read whole)
            return vec![false; n];
        };
        read.extend(x.column_refs().into_iter().map(|c| c.name.clone()));
    }
    let keys = s.aggregate.group_expr.len();
    (0..n)
        .map(|i| !read.contains(s.aggregate.schema.field(keys + i).name()))
        .collect()
}

/// Under a post stage that reads only the group table's columns `read` (by
/// index: the keys, then the aggregates), each aggregate it does not read
/// compiled as never evaluated (see [`dead_aggregates`]; no aggregate of a
/// post stage is kept per value). (Which columns the rest reads is known
/// once it is optimized, which also drops those columns.)
pub(super) fn drop_unread(
    plan: &mut AggregatePlan,
    compiled: &mut CompiledAggregate,
    read: &[usize],
) -> Result<(), FallbackReason> {
    let keys = compiled.group_keys;
    for (i, (agg, spec)) in compiled
        .aggs
        .iter_mut()
        .zip(&mut plan.aggregates)
        .enumerate()
    {
        if read.contains(&(keys + i)) || agg.per_value.is_some() {
            continue;
        }
        agg.arg = datafusion::physical_expr::expressions::lit(null_of(&agg.input_type, &agg.name)?);
        agg.filter = None;
        spec.arg = "NULL".to_string();
        spec.filter = None;
    }
    Ok(())
}

/// The NULL of `dt`, the argument of an aggregate (named `what`) that is
/// never evaluated.
fn null_of(dt: &DataType, what: impl std::fmt::Display) -> Result<ScalarValue, FallbackReason> {
    ScalarValue::try_from(dt).map_err(|err| FallbackReason::CannotCompile {
        detail: format!("`{what}`: {err}"),
    })
}

/// Compile an accepted shape: the printable plan and what rendering runs, or
/// the reason it cannot run incrementally.
pub(super) fn compile(
    source: &str,
    s: &Shape<'_>,
    windows: TimeWindows,
    bound: DataType,
    query_schema: SchemaRef,
    ctx: &SessionContext,
) -> Result<(AggregatePlan, CompiledAggregate), FallbackReason> {
    let input: &DFSchema = s.aggregate.input.schema();
    // a group key, or a value kept per value: kept by its declared type
    let declared = |e: &Expr| {
        super::physical_as_declared(ctx, e, input).map_err(|err| FallbackReason::CannotCompile {
            detail: format!("`{e}`: {err}"),
        })
    };
    let phys = |e: &Expr, schema: &DFSchema| {
        super::physical(ctx, e, schema).map_err(|err| FallbackReason::CannotCompile {
            detail: format!("`{e}`: {err}"),
        })
    };
    let mut keys = Vec::new();
    let mut key_desc = Vec::new();
    for (i, g) in s.aggregate.group_expr.iter().enumerate() {
        if matches!(g, Expr::GroupingSet(_)) {
            return Err(FallbackReason::GroupingSets);
        }
        let dt = s.aggregate.schema.field(i).data_type();
        if arrow::row::RowConverter::new(vec![arrow::row::SortField::new(dt.clone())]).is_err() {
            return Err(FallbackReason::KeyNotEncodable {
                key: g.to_string(),
                data_type: dt.to_string(),
            });
        }
        keys.push(declared(g)?);
        key_desc.push((g.to_string(), dt.to_string()));
    }
    let n_keys = keys.len();
    let mut key_fields: Vec<Field> = (0..n_keys)
        .map(|i| s.aggregate.schema.field(i).as_ref().clone())
        .collect();
    let agg_schema: SchemaRef = Arc::new(Schema::new(
        s.aggregate
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<Field>>(),
    ));
    let mut aggs = Vec::new();
    let mut agg_desc = Vec::new();
    let mut value_args: Vec<(Expr, DataType)> = Vec::new();
    let mut calls = Vec::new();
    let dead = dead_aggregates(s, ctx, query_schema.fields().len());
    for (e, dead) in s.aggregate.aggr_expr.iter().zip(dead) {
        let mut call = agg_func(e, input)?;
        if dead {
            // never evaluated: NULL of its type, on no row's condition
            call.1 = Expr::Literal(null_of(&call.2, e)?, None);
            call.3 = None;
        }
        let (_, arg, input_type, _, per_value) = &call;
        let tag = match per_value {
            None => 0,
            Some(_) => match value_args.iter().position(|(a, _)| a == arg) {
                Some(t) => t,
                None => {
                    value_args.push((arg.clone(), input_type.clone()));
                    value_args.len() - 1
                }
            },
        };
        calls.push((call, tag));
    }
    // MIN/MAX of strings read their value from the entry's key: one argument only
    let ordered = calls
        .iter()
        .find(|((_, _, _, _, p), _)| matches!(p, Some(PerValue::Min | PerValue::Max)));
    if let (Some(((_, arg, ..), _)), true) = (ordered, value_args.len() > 1) {
        let other = value_args.iter().find(|(a, _)| a != arg).map(|(a, _)| a);
        return Err(FallbackReason::DistinctArguments {
            args: [Some(arg), other]
                .into_iter()
                .flatten()
                .map(|a| a.to_string())
                .collect(),
        });
    }
    if value_args.len() > usize::from(u8::MAX) {
        return Err(FallbackReason::CannotCompile {
            detail: format!("{} arguments kept per value", value_args.len()),
        });
    }
    for (i, ((func, arg, input_type, filter, per_value), tag)) in calls.into_iter().enumerate() {
        if filter.as_ref().is_some_and(has_subquery) {
            return Err(FallbackReason::SubqueryInPredicate);
        }
        let output_type = agg_schema.field(n_keys + i).data_type().clone();
        agg_desc.push(AggregateSpec {
            func,
            arg: arg.to_string(),
            input_type: input_type.to_string(),
            output_type: output_type.to_string(),
            filter: filter.as_ref().map(|f| f.to_string()),
            distinct: matches!(
                per_value,
                Some(PerValue::CountDistinct | PerValue::SumDistinct)
            ),
        });
        aggs.push(CompiledAgg {
            name: aggregate_name(&agg_desc[agg_desc.len() - 1]),
            func,
            // per value: the count of the argument's rows (of its FILTER)
            kind: match per_value {
                // the value itself, so the group can sum its values
                Some(PerValue::SumDistinct) => kind_of(AggFunc::Max, &input_type),
                Some(_) => AggKind::Count,
                None => kind_of(func, &input_type),
            },
            arg: phys(&arg, input)?,
            filter: filter.as_ref().map(|f| phys(f, input)).transpose()?,
            per_value,
            tag,
            input_type,
            output_type,
        });
    }
    // each argument's encoder (a value key must encode; with arguments of
    // different types, values are kept as their encoded bytes)
    let encoders = value_args
        .iter()
        .map(|(arg, dt)| {
            arrow::row::RowConverter::new(vec![arrow::row::SortField::new(dt.clone())]).map_err(
                |_| FallbackReason::KeyNotEncodable {
                    key: arg.to_string(),
                    data_type: dt.to_string(),
                },
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tagged = match value_args.as_slice() {
        [] => None,
        [(arg, dt)] => {
            keys.push(declared(arg)?);
            key_fields.push(Field::new(format!("value({arg})"), dt.clone(), true));
            None
        }
        [(_, dt), rest @ ..] => {
            let same = rest.iter().all(|(_, t)| t == dt);
            let names: Vec<String> = value_args.iter().map(|(a, _)| a.to_string()).collect();
            key_fields.push(Field::new("argument", DataType::UInt8, false));
            key_fields.push(Field::new(
                format!("value({})", names.join(", ")),
                if same { dt.clone() } else { DataType::Binary },
                true,
            ));
            Some(Tagged {
                args: value_args
                    .iter()
                    .map(|(a, _)| declared(a))
                    .collect::<Result<Vec<_>, _>>()?,
                encode: (!same).then_some(encoders),
            })
        }
    };
    let filters = s
        .filters
        .iter()
        .map(|f| phys(f, input))
        .collect::<Result<Vec<_>, _>>()?;
    let agg_df = s.aggregate.schema.as_ref();
    let post = |e: &Expr| {
        let rewritten =
            over_aggregate(e, s.aggregate).map_err(|err| FallbackReason::CannotCompile {
                detail: format!("`{e}` over the aggregate's output: {err}"),
            })?;
        phys(&rewritten, agg_df)
    };
    let having = s.having.map(post).transpose()?;
    let projection = s
        .projection
        .map(|p| p.iter().map(post).collect::<Result<Vec<_>, _>>())
        .transpose()?;
    let plan = AggregatePlan {
        source: source.to_string(),
        windows: (windows.size(), windows.slide(), windows.offset()),
        filter: (!s.filters.is_empty()).then(|| {
            s.filters
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join(" AND ")
        }),
        keys: key_desc,
        value_key: match value_args.as_slice() {
            [(a, t)] => Some(Box::new((a.to_string(), t.to_string()))),
            _ => None,
        },
        value_keys: match value_args.as_slice() {
            [_, _, ..] => value_args
                .iter()
                .map(|(a, t)| (a.to_string(), t.to_string()))
                .collect(),
            _ => Vec::new(),
        },
        aggregates: agg_desc,
        having: s.having.map(|h| h.to_string()),
        output: match s.projection {
            Some(p) => p.iter().map(|e| e.to_string()).collect(),
            None => agg_schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        },
        order: s.order.as_ref().map(|o| {
            let by = o.sort.iter().map(|e| e.to_string()).collect();
            Box::new(OrderSpec {
                by,
                skip: o.skip,
                fetch: o.fetch,
            })
        }),
        session_gap: None,
        post: None,
        post_extremum: None,
        post_outer: None,
        keep: None,
    };
    let order = s
        .order
        .as_ref()
        .map(|o| {
            let sort = o
                .sort
                .iter()
                .map(|e| {
                    Ok((
                        phys(&e.expr, o.schema)?,
                        SortOptions::new(!e.asc, e.nulls_first),
                    ))
                })
                .collect::<Result<Vec<_>, FallbackReason>>()?;
            Ok::<_, FallbackReason>(TopN {
                sort,
                skip: o.skip,
                fetch: o.fetch,
            })
        })
        .transpose()?;
    if order.is_some() && !value_args.is_empty() {
        // per-value groups are merged on output; ranking them is not built
        return Err(FallbackReason::Uses(super::Construct::OrderBy));
    }
    let compiled = CompiledAggregate {
        windows,
        bound,
        filters,
        keys,
        key_fields,
        group_keys: n_keys,
        tagged,
        aggs,
        agg_schema,
        having,
        projection,
        query_schema,
        order,
        session: None,
        post: None,
        prune: None,
    };
    Ok((plan, compiled))
}

/// Whether a query runs per session incrementally: grouped by exactly the
/// session key's columns (one row per session), or global with no key, and
/// not ranked.
pub(super) fn session_shape(s: &Shape<'_>, key: &[String]) -> Result<(), FallbackReason> {
    let not = |what: String| Err(FallbackReason::SessionShape { what });
    if s.order.is_some() {
        return not("ORDER BY … LIMIT is not incremental".to_string());
    }
    let mut grouped: Vec<&str> = Vec::new();
    for (i, g) in s.aggregate.group_expr.iter().enumerate() {
        let Expr::Column(c) = g else {
            return not(format!(
                "the group key `{g}` is not a column of the session key"
            ));
        };
        // a float key's -0.0 and 0.0 (or two NaNs) are one group but two sessions
        let dt = s.aggregate.schema.field(i).data_type();
        if matches!(
            dt,
            DataType::Float16 | DataType::Float32 | DataType::Float64
        ) {
            return not(format!(
                "the session key `{}` of type {dt} is not incremental",
                c.name
            ));
        }
        grouped.push(&c.name);
    }
    let mut want: Vec<&str> = key.iter().map(String::as_str).collect();
    grouped.sort_unstable();
    grouped.dedup();
    want.sort_unstable();
    want.dedup();
    if grouped != want {
        return not(format!(
            "GROUP BY ({}) is not the session key ({}): only a query grouped by \
             exactly the session key is incremental",
            grouped.join(", "),
            want.join(", ")
        ));
    }
    Ok(())
}
