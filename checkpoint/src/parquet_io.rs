//! Encoding state batches as plain Parquet and reading them back, verified.

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

/// Key-value metadata keys written into every state file's footer.
pub mod meta_keys {
    /// The view name.
    pub const VIEW: &str = "thund.view";
    /// The epoch that wrote the file.
    pub const EPOCH: &str = "thund.epoch";
    /// The operator.
    pub const OPERATOR: &str = "thund.operator";
    /// The worker.
    pub const WORKER: &str = "thund.worker";
}

/// Encodes batches (all of one schema) as one Parquet file in memory.
/// Zstd-compressed, with the Arrow schema embedded (so `Timestamp`,
/// `Decimal128`, … come back as written) and `thund.*` footer metadata.
pub(crate) fn encode(
    batches: &[RecordBatch],
    view: &str,
    epoch: u64,
    operator: &str,
    worker: usize,
) -> Result<(Bytes, u64), EncodeError> {
    let Some(first) = batches.first() else {
        return Err(EncodeError::Empty);
    };
    let schema = first.schema();
    for (i, b) in batches.iter().enumerate() {
        if b.schema().fields() != schema.fields() {
            return Err(EncodeError::SchemaMismatch { batch: i });
        }
    }
    let kv = [
        (meta_keys::VIEW, view.to_string()),
        (meta_keys::EPOCH, epoch.to_string()),
        (meta_keys::OPERATOR, operator.to_string()),
        (meta_keys::WORKER, worker.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| KeyValue::new(k.to_string(), v))
    .collect();
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_key_value_metadata(Some(kv))
        .build();
    let mut writer = ArrowWriter::try_new(Vec::new(), schema, Some(props))?;
    let mut rows = 0u64;
    for b in batches {
        writer.write(b)?;
        rows += b.num_rows() as u64;
    }
    let buf = writer.into_inner()?;
    Ok((Bytes::from(buf), rows))
}

/// Why encoding failed.
#[derive(Debug)]
pub(crate) enum EncodeError {
    Empty,
    SchemaMismatch { batch: usize },
    Parquet(parquet::errors::ParquetError),
}

impl From<parquet::errors::ParquetError> for EncodeError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        EncodeError::Parquet(e)
    }
}

/// Decodes a whole Parquet file and checks its row count. `Err` is a
/// human-readable reason (the file is then treated as corrupt).
pub(crate) fn decode(bytes: Bytes, expected_rows: u64) -> Result<Vec<RecordBatch>, String> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| format!("not a readable Parquet file: {e}"))?
        .build()
        .map_err(|e| format!("cannot read Parquet file: {e}"))?;
    let batches = reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot decode Parquet data: {e}"))?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    if rows != expected_rows {
        return Err(format!(
            "has {rows} rows, the manifest says {expected_rows}"
        ));
    }
    Ok(batches)
}
