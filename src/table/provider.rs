//! A view's published contents as a DataFusion table. A scan decodes the
//! rows of the snapshot it was made from; a filter that fixes every key
//! column (`key = literal`, ANDed) is served from the view's index instead.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, TableProvider, TableType};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;

use super::contents::Published;

/// One view of one snapshot, as a table.
pub(crate) struct ViewProvider {
    contents: Published,
}

impl std::fmt::Debug for ViewProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ViewProvider({})", self.contents.layout.view)
    }
}

impl ViewProvider {
    pub fn new(contents: Published) -> Self {
        ViewProvider { contents }
    }

    /// The key column this filter fixes, and to what: `col = literal`.
    fn fixes<'a>(&self, e: &'a Expr) -> Option<(String, &'a ScalarValue)> {
        let key = self.contents.layout.key_schema()?;
        let Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) = e
        else {
            return None;
        };
        let (col, lit) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => {
                (c, v)
            }
            _ => return None,
        };
        // a NULL literal matches nothing under `=`; leave it to the filter
        if lit.is_null() || key.field_with_name(&col.name).is_err() {
            return None;
        }
        Some((col.name.clone(), lit))
    }
}

#[async_trait]
impl TableProvider for ViewProvider {
    fn schema(&self) -> SchemaRef {
        self.contents.layout.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // DataFusion applies every filter again above the scan: the index
        // only narrows what the scan reads
        Ok(filters
            .iter()
            .map(|f| match self.fixes(f) {
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let fixed: HashMap<String, &ScalarValue> =
            filters.iter().filter_map(|f| self.fixes(f)).collect();
        let df = |e: crate::Error| DataFusionError::External(Box::new(e));
        let batch = match self.contents.layout.key_schema() {
            Some(key) if key.fields().iter().all(|f| fixed.contains_key(f.name())) => {
                let values: Vec<ArrayRef> = key
                    .fields()
                    .iter()
                    .map(|f| fixed[f.name()].to_array_of_size(1))
                    .collect::<DfResult<_>>()?;
                match self.contents.layout.encode_key(&values) {
                    Ok(k) => self.contents.lookup(&k).map_err(df)?,
                    // a literal that is no value of the key's type: the filter
                    // above the scan judges every row
                    Err(_) => self.contents.batch().map_err(df)?,
                }
            }
            _ => self.contents.batch().map_err(df)?,
        };
        let mem = MemTable::try_new(self.schema(), vec![vec![batch]])?;
        mem.scan(state, projection, &[], limit).await
    }
}
