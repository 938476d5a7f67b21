//! A table whose rows are set before each run of one physical plan, so a
//! query evaluated window after window is physically planned once (planning
//! was ~40 % of a top-rows view's trigger in a `perf` profile): its scan
//! reads the rows at execution time, not at planning time.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::memory::{LazyBatchGenerator, LazyMemoryExec};
use datafusion::physical_plan::ExecutionPlan;
use parking_lot::{Mutex, RwLock};

/// The rows of a [`LiveTable`], shared with the plans that scan it.
type Rows = Arc<Mutex<Vec<RecordBatch>>>;

/// A table whose contents a caller sets before each execution.
#[derive(Debug)]
pub(crate) struct LiveTable {
    schema: SchemaRef,
    rows: Rows,
}

impl LiveTable {
    pub fn new(schema: SchemaRef) -> Self {
        LiveTable {
            schema,
            rows: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// What the next execution reads.
    pub fn set(&self, rows: Vec<RecordBatch>) {
        *self.rows.lock() = rows;
    }
}

#[async_trait]
impl TableProvider for LiveTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let generator: Arc<RwLock<dyn LazyBatchGenerator>> = Arc::new(RwLock::new(Reader {
            rows: self.rows.clone(),
            batches: Vec::new(),
        }));
        let exec = LazyMemoryExec::try_new(self.schema.clone(), vec![generator])?
            .with_projection(projection.cloned());
        Ok(Arc::new(exec))
    }
}

/// One execution's read of a [`LiveTable`]: every execution starts from
/// `reset_state`, which takes the rows set at that moment.
#[derive(Debug)]
struct Reader {
    rows: Rows,
    /// The rows still to hand out, last first.
    batches: Vec<RecordBatch>,
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LiveTable")
    }
}

impl LazyBatchGenerator for Reader {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn generate_next_batch(&mut self) -> DfResult<Option<RecordBatch>> {
        Ok(self.batches.pop())
    }

    fn reset_state(&self) -> Arc<RwLock<dyn LazyBatchGenerator>> {
        let mut batches = self.rows.lock().clone();
        batches.reverse();
        Arc::new(RwLock::new(Reader {
            rows: self.rows.clone(),
            batches,
        }))
    }
}
