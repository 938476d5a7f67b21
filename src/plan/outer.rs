//! An aggregate over a grouped aggregate's rows, with only projections and
//! filters above it: `SELECT category, AVG(final) FROM (SELECT MAX(price)
//! AS final, category … GROUP BY id, category) GROUP BY category` (Nexmark
//! q4).
//!
//! Where the outer aggregate's functions have an exact inverse (`COUNT`, and
//! `SUM` and `AVG` of integers and decimals, summed in `i128`), Update mode
//! keeps each open window's outer groups as states: a changed inner group
//! takes its old row out of its outer group and puts its new row in, and
//! only the outer groups it touched are shown again, instead of the whole
//! rest being evaluated over all of the window's groups at every trigger.
//! An outer group's rows are the inner rows the part below it (`below`: the
//! inner groups' projections and filters) gives for it, so an inner group
//! that moves to another outer group, or that a filter below starts or stops
//! letting through, leaves one and enters the other.

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use thund_dataflows::AggKind;

use super::aggregate::{self, CompiledAggregate};
use super::post::{read_from_table, reads_scan};
use super::shape::{self, has_subquery};
use crate::paths::sql::live::LiveTable;
use crate::window::TimeWindows;

/// The name of the table that holds a window's rows below the outer aggregate.
const BELOW: &str = "__thund_below";

/// The name of the table that holds a window's outer groups.
const OUTER: &str = "__thund_outer";

/// The outer aggregate of a post stage's rest, split out.
pub(crate) struct OuterPlan {
    /// The part of the rest below the outer aggregate, over the groups
    /// table: each inner group's row for the outer aggregate, if any.
    pub below: PerRow,
    /// The outer aggregate, compiled over `below`'s rows (its keys and
    /// aggregates; no WHERE of its own: that is in `below`).
    pub aggregate: CompiledAggregate,
    /// The rest above the outer aggregate, over `table`'s rows.
    pub above: PerRow,
    pub table: Arc<LiveTable>,
}

/// Projections and filters over one table's rows, as physical expressions
/// evaluated in turn: a few rows are evaluated without a DataFusion run,
/// and each row out is known by the row in it came from.
#[derive(Clone)]
pub(crate) struct PerRow {
    steps: Vec<RowStep>,
}

#[derive(Clone)]
enum RowStep {
    /// The table scan's columns.
    Select(Vec<usize>),
    Project(Vec<Arc<dyn PhysicalExpr>>, SchemaRef),
    Filter(Arc<dyn PhysicalExpr>),
}

impl PerRow {
    /// `plan` (made in `ctx`), optimized, if it is projections and filters
    /// over a scan.
    pub(crate) fn compile(plan: &LogicalPlan, ctx: &SessionContext) -> Option<PerRow> {
        let plan = ctx.state().optimize(plan).ok()?;
        let phys =
            |e: &Expr, input: &LogicalPlan| super::physical_as_declared(ctx, e, input.schema());
        let mut steps = Vec::new();
        let mut p = &plan;
        loop {
            match p {
                LogicalPlan::Projection(pr) => {
                    let exprs = pr
                        .expr
                        .iter()
                        .map(|e| phys(e, &pr.input))
                        .collect::<datafusion::error::Result<Vec<_>>>()
                        .ok()?;
                    steps.push(RowStep::Project(exprs, pr.schema.inner().clone()));
                    p = &pr.input;
                }
                LogicalPlan::Filter(f) => {
                    steps.push(RowStep::Filter(phys(&f.predicate, &f.input).ok()?));
                    p = &f.input;
                }
                LogicalPlan::SubqueryAlias(a) => p = &a.input,
                LogicalPlan::TableScan(t) if t.filters.is_empty() && t.fetch.is_none() => {
                    if let Some(columns) = &t.projection {
                        steps.push(RowStep::Select(columns.clone()));
                    }
                    break;
                }
                _ => return None,
            }
        }
        steps.reverse();
        Some(PerRow { steps })
    }

    /// `batch` (the table's rows) through the steps, and for each row out
    /// the index of the row of `batch` it came from.
    pub fn run(&self, batch: RecordBatch) -> datafusion::error::Result<(RecordBatch, Vec<u32>)> {
        use arrow::array::{Array, BooleanArray, RecordBatchOptions};
        let mut from: Vec<u32> = (0..batch.num_rows() as u32).collect();
        let mut batch = batch;
        for step in &self.steps {
            batch = match step {
                RowStep::Select(columns) => batch.project(columns)?,
                RowStep::Project(exprs, schema) => {
                    let n = batch.num_rows();
                    let cols = exprs
                        .iter()
                        .map(|e| e.evaluate(&batch).and_then(|c| c.into_array(n)))
                        .collect::<datafusion::error::Result<Vec<_>>>()?;
                    RecordBatch::try_new_with_options(
                        schema.clone(),
                        cols,
                        &RecordBatchOptions::new().with_row_count(Some(n)),
                    )?
                }
                RowStep::Filter(predicate) => {
                    let m = predicate
                        .evaluate(&batch)
                        .and_then(|c| c.into_array(batch.num_rows()))?;
                    let Some(m) = m.as_any().downcast_ref::<BooleanArray>() else {
                        return Err(datafusion::error::DataFusionError::Internal(
                            "a filter that is not a boolean".into(),
                        ));
                    };
                    let m = match m.nulls() {
                        Some(_) => arrow::compute::prep_null_mask_filter(m),
                        None => m.clone(),
                    };
                    from = from
                        .iter()
                        .zip(m.values().iter())
                        .filter_map(|(i, keep)| keep.then_some(*i))
                        .collect();
                    arrow::compute::filter_record_batch(&batch, &m)?
                }
            };
        }
        Ok((batch, from))
    }
}

/// The outer aggregate of `rest`, where `rest` is projections and filters
/// over a grouped aggregate whose functions all have an exact inverse, over
/// projections and filters of the groups table (`None` otherwise).
pub(crate) fn outer(
    rest: &LogicalPlan,
    source: &str,
    windows: TimeWindows,
    bound: &DataType,
    ctx: &SessionContext,
) -> Option<OuterPlan> {
    let LogicalPlan::Aggregate(a) = under_row_steps(rest) else {
        return None;
    };
    // a global aggregate has a row for a window without groups: not kept here
    if a.group_expr.is_empty() || !per_row(&a.input) {
        return None;
    }
    let node = LogicalPlan::Aggregate(a.clone());
    let (_, over_below) = read_from_table(&node, &a.input, BELOW)?;
    let s = shape::shape(&over_below).ok()?;
    let schema = over_below.schema().inner().clone();
    let (_, compiled) = aggregate::compile(source, &s, windows, bound.clone(), schema, ctx).ok()?;
    let invertible = compiled
        .aggs
        .iter()
        .all(|g| g.per_value.is_none() && matches!(g.kind, AggKind::Count | AggKind::SumInt));
    if !invertible
        || compiled.keeps_per_value()
        || compiled.tagged.is_some()
        || !compiled.filters.is_empty()
        || compiled.session.is_some()
    {
        return None;
    }
    let (table, above) = read_from_table(rest, &node, OUTER)?;
    Some(OuterPlan {
        below: PerRow::compile(&a.input, ctx)?,
        aggregate: compiled,
        above: PerRow::compile(&above, ctx)?,
        table,
    })
}

/// The first node of `p` below its projections, filters (without
/// subqueries) and aliases: what a rest of row-wise steps stands on.
pub(super) fn under_row_steps(mut p: &LogicalPlan) -> &LogicalPlan {
    loop {
        p = match p {
            LogicalPlan::Projection(pr) if !pr.expr.iter().any(has_subquery) => &pr.input,
            LogicalPlan::Filter(f) if !has_subquery(&f.predicate) => &f.input,
            LogicalPlan::SubqueryAlias(s) => &s.input,
            other => return other,
        }
    }
}

/// Whether `p` gives each of its input's rows zero or one rows of its own:
/// projections and filters (without subqueries) down to the groups table.
fn per_row(p: &LogicalPlan) -> bool {
    match p {
        LogicalPlan::Projection(pr) => !pr.expr.iter().any(has_subquery) && per_row(&pr.input),
        LogicalPlan::Filter(f) => !has_subquery(&f.predicate) && per_row(&f.input),
        LogicalPlan::SubqueryAlias(s) => per_row(&s.input),
        LogicalPlan::TableScan(_) => reads_scan(p),
        _ => false,
    }
}
