//! Shared helpers: backends and test batches.
#![allow(dead_code)]

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Decimal128Array, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use thund_checkpoint::CheckpointStore;

/// A store under test plus whatever keeps it alive.
pub struct Backend {
    pub store: CheckpointStore,
    pub kind: &'static str,
    /// The state root directory for `file://` backends.
    pub dir: Option<tempfile::TempDir>,
}

pub fn memory(test: &str) -> Backend {
    let url = format!("memory://conformance-{test}/state/root");
    Backend {
        store: CheckpointStore::open(&url).expect("open memory"),
        kind: "memory",
        dir: None,
    }
}

pub fn file(_test: &str) -> Backend {
    let dir = tempfile::tempdir().expect("tempdir");
    // A state root below the temp dir that does not exist yet: open creates it.
    let root = dir.path().join("state root");
    let url = url_for(&root);
    Backend {
        store: CheckpointStore::open(&url).expect("open file"),
        kind: "file",
        dir: Some(dir),
    }
}

pub fn url_for(path: &std::path::Path) -> String {
    url::Url::from_directory_path(path)
        .expect("absolute path")
        .to_string()
}

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "window_end",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        ),
        Field::new("amount", DataType::Decimal128(12, 2), true),
        Field::new("avg", DataType::Float64, true),
    ]))
}

/// A batch of `n` rows whose values depend on `seed`, with nulls sprinkled in.
pub fn batch(seed: i64, n: usize) -> RecordBatch {
    let keys: Vec<i64> = (0..n as i64).map(|i| seed * 1000 + i).collect();
    let names: Vec<Option<String>> = keys
        .iter()
        .map(|k| (k % 3 != 0).then(|| format!("k{k}-ü")))
        .collect();
    let ends: Vec<Option<i64>> = keys
        .iter()
        .map(|k| (k % 4 != 1).then_some(1_700_000_000_000 + k * 60_000))
        .collect();
    let amounts: Vec<Option<i128>> = keys
        .iter()
        .map(|k| (k % 5 != 2).then_some(i128::from(*k) * 12_345 - 99))
        .collect();
    let avgs: Vec<Option<f64>> = keys
        .iter()
        .map(|k| (k % 2 == 0).then_some(*k as f64 / 7.0))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(keys)),
        Arc::new(StringArray::from(names)),
        Arc::new(TimestampMillisecondArray::from(ends)),
        Arc::new(
            Decimal128Array::from(amounts)
                .with_precision_and_scale(12, 2)
                .expect("decimal"),
        ),
        Arc::new(Float64Array::from(avgs)),
    ];
    RecordBatch::try_new(schema(), columns).expect("batch")
}

/// Concatenates batches (schema from the first, or the test schema).
pub fn concat(batches: &[RecordBatch]) -> RecordBatch {
    let schema = batches.first().map_or_else(schema, |b| b.schema());
    concat_batches(&schema, batches).expect("concat")
}
