//! A top-rows query's rest ranked without DataFusion: where the rest is
//! projections and filters over one `ROW_NUMBER()` or `RANK()` window over
//! the candidates (Nexmark q18 and q19: `WHERE rn <= n` over `ROW_NUMBER()
//! OVER (PARTITION BY … ORDER BY …)`), a window's candidates are numbered
//! here — each partition's rows gathered by a hash of its row-format bytes
//! and sorted by the order's — and the steps above run as physical
//! expressions, instead of a DataFusion run (a plan's streams, a sort of
//! every column and a window operator) per changed window and trigger.
//!
//! The numbers are the window function's: `ROW_NUMBER()` counts the rows of
//! a partition in order from 1 (peers, rows equal in the order, in no
//! defined order among themselves, as in DataFusion); `RANK()` is one more
//! than the rows of the partition strictly before the row. Partitions are
//! equal where their row-format bytes are (NULLs one partition, as `PARTITION
//! BY` groups them); the order's bytes follow its directions and NULL
//! placement. Float partition or order keys are not ranked by a top-rows
//! query at all (see `plan::rows`).

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array, UInt64Array};
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::TreeNode;
use datafusion::error::Result;
use datafusion::logical_expr::expr::{WindowFunctionDefinition, WindowFunctionParams};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use rustc_hash::FxHashMap;

use super::outer::{under_row_steps, PerRow};
use super::post::read_from_table;
use super::shape::has_subquery;

/// The name of the table the steps above the window read.
const RANKED: &str = "__thund_ranked";

/// Which number the window gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Numbering {
    RowNumber,
    Rank,
}

/// The rest of a top-rows query, compiled: the steps below the window (over
/// the candidates' table), its partition and order, and the steps above it.
#[derive(Clone)]
pub(crate) struct RankedRest {
    below: PerRow,
    partition: Vec<Arc<dyn PhysicalExpr>>,
    partition_rows: Arc<RowConverter>,
    order: Vec<Arc<dyn PhysicalExpr>>,
    /// The order's columns, with their directions: within a partition, a
    /// row's bytes order it by rank.
    order_rows: Arc<RowConverter>,
    numbering: Numbering,
    /// The window's output: its input's columns, then the number.
    numbered: SchemaRef,
    above: PerRow,
}

/// The window function of `w`, if it is one `ROW_NUMBER()` or `RANK()` with
/// an order, no argument and no filter, numbered as `UInt64`: what it
/// numbers and its parameters (partition and order).
fn numbering(
    w: &datafusion::logical_expr::logical_plan::Window,
) -> Option<(Numbering, &WindowFunctionParams)> {
    let [e] = w.window_expr.as_slice() else {
        return None;
    };
    let Expr::WindowFunction(wf) = unaliased(e) else {
        return None;
    };
    let numbering = match &wf.fun {
        WindowFunctionDefinition::WindowUDF(u) if u.name() == "row_number" => Numbering::RowNumber,
        WindowFunctionDefinition::WindowUDF(u) if u.name() == "rank" => Numbering::Rank,
        _ => return None,
    };
    let p = &wf.params;
    let last = w.schema.fields().last()?;
    if !p.args.is_empty()
        || p.filter.is_some()
        || p.order_by.is_empty()
        || last.data_type() != &DataType::UInt64
    {
        return None;
    }
    Some((numbering, p))
}

fn unaliased(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unaliased(&a.expr),
        e => e,
    }
}

impl RankedRest {
    /// `rest` (over the candidates' table, of schema `table`) compiled, if it
    /// is projections and filters over one numbering window over projections
    /// and filters of the table, and gives the rest's column types; `None`
    /// otherwise (DataFusion runs it).
    pub(crate) fn compile(
        rest: &LogicalPlan,
        table: SchemaRef,
        ctx: &SessionContext,
    ) -> Option<RankedRest> {
        // down from the top to the window, through row-wise steps only
        let LogicalPlan::Window(win) = under_row_steps(rest) else {
            return None;
        };
        let (numbering, params) = numbering(win)?;
        let input = win.input.schema();
        // (the window's keys as DataFusion evaluates them, as the recompute
        // path does: see `super::physical_as_datafusion`)
        let phys = |e: &Expr| super::physical_as_datafusion(ctx, e, input).ok();
        let typed = |e: &Expr| e.get_type(input).ok();
        let partition = params
            .partition_by
            .iter()
            .map(phys)
            .collect::<Option<Vec<_>>>()?;
        let partition_fields = params
            .partition_by
            .iter()
            .map(|e| typed(e).map(SortField::new))
            .collect::<Option<Vec<_>>>()?;
        let partition_rows = RowConverter::new(partition_fields).ok()?;
        let order = params
            .order_by
            .iter()
            .map(|s| phys(&s.expr))
            .collect::<Option<Vec<_>>>()?;
        let order_fields = params
            .order_by
            .iter()
            .map(|s| {
                let dt = typed(&s.expr)?;
                if dt.is_floating() {
                    return None;
                }
                let opts = SortOptions {
                    descending: !s.asc,
                    nulls_first: s.nulls_first,
                };
                Some(SortField::new_with_options(dt, opts))
            })
            .collect::<Option<Vec<_>>>()?;
        let order_rows = RowConverter::new(order_fields).ok()?;
        // no subquery anywhere below either
        let clean = !win
            .input
            .exists(|n| Ok(n.expressions().iter().any(has_subquery)))
            .unwrap_or(true);
        let node = LogicalPlan::Window(win.clone());
        let (_, above) = read_from_table(rest, &node, RANKED)?;
        let compiled = RankedRest {
            below: PerRow::compile(&win.input, ctx).filter(|_| clean)?,
            partition,
            partition_rows: Arc::new(partition_rows),
            order,
            order_rows: Arc::new(order_rows),
            numbering,
            numbered: win.schema.inner().clone(),
            above: PerRow::compile(&above, ctx)?,
        };
        // what it gives has the types of the rest as DataFusion runs it
        // (analyzed: coerced), checked over no rows
        let out = compiled.run(RecordBatch::new_empty(table)).ok()?;
        let rest = ctx.state().optimize(rest).ok()?;
        let types = |s: &arrow::datatypes::Schema| {
            s.fields()
                .iter()
                .map(|f| f.data_type().clone())
                .collect::<Vec<_>>()
        };
        (types(&out.schema()) == types(rest.schema().inner())).then_some(compiled)
    }

    /// The rest over a window's candidate rows `rows` (each as often as it
    /// came): its result rows, each partition's together (in the order the
    /// partitions first come) and in rank order within it.
    pub(crate) fn run(&self, rows: RecordBatch) -> Result<RecordBatch> {
        Ok(self.run_traced(rows)?.0)
    }

    /// [`Self::run`], and for each result row the index of the row of
    /// `rows` it came from.
    pub(crate) fn run_traced(&self, rows: RecordBatch) -> Result<(RecordBatch, Vec<u32>)> {
        let (base, from_below) = self.below.run(rows)?;
        let n = base.num_rows();
        let eval = |exprs: &[Arc<dyn PhysicalExpr>]| {
            exprs
                .iter()
                .map(|e| e.evaluate(&base).and_then(|c| c.into_array(n)))
                .collect::<Result<Vec<ArrayRef>>>()
        };
        let partition = eval(&self.partition)?;
        // no partition: one, whose rows all compare equal
        let parts = match partition.is_empty() {
            true => None,
            false => Some(self.partition_rows.convert_columns(&partition)?),
        };
        let part = |i: usize| parts.as_ref().map(|p| p.row(i).data());
        let keys = self.order_rows.convert_columns(&eval(&self.order)?)?;
        let sorted = sorted_by_partition(n, &part, |i| keys.row(i).data());
        let mut numbers: Vec<u64> = Vec::with_capacity(n);
        // the previous row, and where its partition starts in `numbers`
        let (mut prev, mut start): (Option<(&[u8], usize)>, usize) = (None, 0);
        for (at, &(key, i)) in sorted.iter().enumerate() {
            let i = i as usize;
            let number = match prev {
                Some((k, p)) if part(p) == part(i) => match self.numbering {
                    // peers (equal in the order) share the rank of the first
                    Numbering::Rank if k == key => numbers[at - 1],
                    Numbering::Rank | Numbering::RowNumber => (at - start + 1) as u64,
                },
                _ => {
                    start = at;
                    1
                }
            };
            numbers.push(number);
            prev = Some((key, i));
        }
        let idx: Vec<u32> = sorted.into_iter().map(|(_, i)| i).collect();
        let idx = UInt32Array::from(idx);
        // a numbered row's source: the row of `rows` its base row came from
        let source: Vec<u32> = idx
            .values()
            .iter()
            .map(|&i| from_below[i as usize])
            .collect();
        let mut cols = base
            .columns()
            .iter()
            .map(|c| arrow::compute::take(c.as_ref(), &idx, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        cols.push(Arc::new(UInt64Array::from(numbers)));
        let numbered = RecordBatch::try_new_with_options(
            self.numbered.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let (out, from_above) = self.above.run(numbered)?;
        let traced = from_above.iter().map(|&i| source[i as usize]).collect();
        Ok((out, traced))
    }
}

/// Rows `0..n` as `(key, row)`: each partition's rows together, sorted by
/// `key` (the row's order bytes), the partitions
/// in the order they first come (`part` gives a row's partition bytes;
/// `None`: one partition). A window's candidates come mostly a partition at
/// a time (its changed partitions' groups in turn), so the rows are cut
/// into runs of one partition, the runs of each partition gathered by a
/// hash of its bytes, and only each partition's rows sorted: about
/// `n log(rows per partition)` comparisons, where a sort of all the rows
/// (or of the runs by partition) costs `n log n`.
fn sorted_by_partition<'k>(
    n: usize,
    part: &impl Fn(usize) -> Option<&'k [u8]>,
    key: impl Fn(usize) -> &'k [u8],
) -> Vec<(&'k [u8], u32)> {
    // each partition's runs of rows, in the order partitions first come
    let mut index: FxHashMap<&[u8], usize> = FxHashMap::default();
    let mut parts: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut i = 0;
    while i < n {
        let p = part(i);
        let mut end = i + 1;
        while end < n && part(end) == p {
            end += 1;
        }
        let at = *index.entry(p.unwrap_or(&[])).or_insert_with(|| {
            parts.push(Vec::new());
            parts.len() - 1
        });
        parts[at].push((i, end));
        i = end;
    }
    let mut sorted: Vec<(&[u8], u32)> = Vec::with_capacity(n);
    for runs in parts {
        let from = sorted.len();
        for (start, end) in runs {
            sorted.extend((start..end).map(|i| (key(i), i as u32)));
        }
        sorted[from..].sort_unstable_by(|a, b| a.0.cmp(b.0));
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use datafusion::datasource::MemTable;
    use proptest::prelude::*;

    /// A row of `t`: `k`, `v`, `g` (few values each, NULLs among them, so
    /// partitions and order peers repeat).
    type Row = (Option<i64>, Option<i64>, Option<&'static str>);

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("g", DataType::Utf8, true),
        ]))
    }

    fn batch(rows: &[Row]) -> RecordBatch {
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r.2))),
            ],
        )
        .expect("batch")
    }

    /// `batch`'s rows as sorted lines.
    fn lines(batches: &[RecordBatch]) -> Vec<String> {
        let text = arrow::util::pretty::pretty_format_batches(batches)
            .expect("format")
            .to_string();
        let mut lines: Vec<String> = text
            .lines()
            .skip(3)
            .filter(|l| !l.starts_with('+'))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    /// A table `t` of `rows`, `sql` planned over it, and its rest ranked natively.
    struct Compiled {
        ctx: SessionContext,
        rt: tokio::runtime::Runtime,
        plan: LogicalPlan,
        ranked: RankedRest,
    }

    fn compiled(sql: &str, rows: &[Row]) -> Compiled {
        // (Þund's session: its arithmetic, which fails on overflow)
        let ctx = crate::paths::sql::session(datafusion::prelude::SessionConfig::new());
        let t = MemTable::try_new(schema(), vec![vec![batch(rows)]]).expect("table");
        ctx.register_table("t", Arc::new(t)).expect("register");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let plan = rt
            .block_on(ctx.state().create_logical_plan(sql))
            .expect("plan");
        let ranked = RankedRest::compile(&plan, schema(), &ctx).expect("ranked natively");
        Compiled {
            ctx,
            rt,
            plan,
            ranked,
        }
    }

    /// `sql` over `rows` as DataFusion runs it, and as [`RankedRest`] does
    /// (`None`: it failed, as `v + 1` of `i64::MAX` does).
    fn both(sql: &str, rows: &[Row]) -> (Option<Vec<String>>, Option<Vec<String>>) {
        let Compiled {
            ctx,
            rt,
            plan,
            ranked,
        } = compiled(sql, rows);
        let expected = rt
            .block_on(async { ctx.execute_logical_plan(plan).await?.collect().await })
            .ok();
        let got = ranked.run(batch(rows)).ok();
        (expected.map(|e| lines(&e)), got.map(|g| lines(&[g])))
    }

    /// Queries whose result does not depend on how peers are ordered: `RANK()`
    /// (peers share a rank), and `ROW_NUMBER()` where only peers' shared
    /// columns are selected.
    const QUERIES: &[&str] = &[
        "SELECT k, v, g, r FROM (SELECT k, v, g, RANK() OVER (PARTITION BY k ORDER BY v DESC) AS r FROM t) AS x WHERE r <= 2",
        "SELECT g, v, r FROM (SELECT g, v, RANK() OVER (PARTITION BY g ORDER BY v NULLS FIRST) AS r FROM t) AS x WHERE r < 3",
        "SELECT k, v, rn FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k, g ORDER BY v DESC NULLS LAST) AS rn FROM t) AS x WHERE rn <= 3",
        "SELECT v, rn FROM (SELECT v, ROW_NUMBER() OVER (ORDER BY v) AS rn FROM t WHERE k IS NOT NULL) AS x WHERE rn <= 4",
        "SELECT k, r * 10 AS r10, v + 1 AS v1 FROM (SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY v, g DESC) AS r FROM t) AS x WHERE r <= 1 AND v > 0",
        "SELECT k, v, g, r FROM (SELECT k, v, g, RANK() OVER (PARTITION BY k ORDER BY g, v) AS r FROM t) AS x",
    ];

    fn row() -> impl Strategy<Value = Row> {
        (
            proptest::option::weighted(0.9, 0i64..4),
            proptest::option::weighted(0.9, prop_oneof![Just(i64::MIN), Just(i64::MAX), -3i64..4]),
            proptest::option::weighted(0.9, proptest::sample::select(vec!["a", "b", "ab", ""])),
        )
    }

    proptest! {
        // more with THUND_PROPTEST_CASES, as the integration suite
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("THUND_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
        ))]

        /// The law: ranked here, the rest gives what DataFusion gives.
        #[test]
        fn ranked_without_datafusion_equals_datafusion(
            rows in proptest::collection::vec(row(), 0..60),
            sql in proptest::sample::select(QUERIES),
        ) {
            let (expected, got) = both(sql, &rows);
            prop_assert_eq!(got, expected, "{}", sql);
        }

        /// Each result row is traced to the row it came from: the columns
        /// it selects as they are (`k`, `v`, `g`) hold that row's values.
        #[test]
        fn each_result_row_is_traced_to_its_source_row(
            rows in proptest::collection::vec(row(), 0..60),
            sql in proptest::sample::select(QUERIES),
        ) {
            let ranked = compiled(sql, &[]).ranked;
            let input = batch(&rows);
            let Ok((out, traced)) = ranked.run_traced(input.clone()) else {
                // (an overflow fails both ways of running it)
                prop_assert!(ranked.run(input).is_err());
                return Ok(());
            };
            prop_assert_eq!(&out, &ranked.run(input.clone()).expect("ranked"));
            prop_assert_eq!(traced.len(), out.num_rows());
            for (j, f) in out.schema().fields().iter().enumerate() {
                let Ok(at) = input.schema().index_of(f.name()) else {
                    continue;
                };
                let sources = UInt32Array::from(traced.clone());
                let expected = arrow::compute::take(input.column(at).as_ref(), &sources, None)
                    .expect("take");
                prop_assert_eq!(out.column(j).as_ref(), expected.as_ref(), "{} {}", sql, f.name());
            }
        }
    }

    #[test]
    fn other_shapes_are_left_to_datafusion() {
        let ctx = SessionContext::new();
        let t = MemTable::try_new(schema(), vec![vec![]]).expect("table");
        ctx.register_table("t", Arc::new(t)).expect("register");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        for sql in [
            // an aggregate above the ranks
            "SELECT COUNT(*) AS n FROM (SELECT k, RANK() OVER (PARTITION BY g ORDER BY v) AS r FROM t) AS x WHERE r <= 2",
            // two window functions
            "SELECT k, r, s FROM (SELECT k, RANK() OVER (ORDER BY v) AS r, ROW_NUMBER() OVER (ORDER BY k) AS s FROM t) AS x",
            // a function that is no numbering
            "SELECT k, l FROM (SELECT k, LAG(v) OVER (PARTITION BY g ORDER BY v) AS l FROM t) AS x",
        ] {
            let plan = rt
                .block_on(ctx.state().create_logical_plan(sql))
                .expect("plan");
            assert!(RankedRest::compile(&plan, schema(), &ctx).is_none(), "{sql}");
        }
    }
}
