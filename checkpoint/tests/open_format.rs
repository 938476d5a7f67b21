//! Open format: a checkpoint's state file is plain Parquet that the plain
//! parquet reader (and so DataFusion or DuckDB) reads without this crate.

mod common;

use arrow::datatypes::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use thund_checkpoint::{meta_keys, BlockingCheckpointStore, EpochMeta, NewFile};

#[test]
fn state_files_are_plain_parquet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = BlockingCheckpointStore::open(&common::url_for(dir.path())).expect("open");
    let mut w = store.acquire("clicks").expect("acquire");
    let batches = vec![common::batch(1, 30), common::batch(2, 12)];
    let m = w
        .write_epoch(
            7,
            vec![NewFile::new("count", 3, batches.clone())],
            vec![],
            EpochMeta::new("fp"),
        )
        .expect("write");
    w.release().expect("release");

    // The layout on disk is exactly the documented one.
    let epoch_dir = dir.path().join("clicks/epoch=000007");
    assert!(epoch_dir.join("_thund_checkpoint.json").is_file());
    assert!(dir.path().join("clicks/_thund_latest.json").is_file());
    assert!(
        !dir.path().join("clicks/_thund_writer.json").exists(),
        "released"
    );
    let path = epoch_dir.join("operator-count-w3.parquet");
    assert_eq!(m.files[0].path, "epoch=000007/operator-count-w3.parquet");

    let file = std::fs::File::open(&path).expect("open parquet");
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("parquet");
    let kv: Vec<(String, Option<String>)> = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .expect("kv metadata")
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    assert!(kv.contains(&(meta_keys::EPOCH.into(), Some("7".into()))));
    assert!(kv.contains(&(meta_keys::OPERATOR.into(), Some("count".into()))));
    assert!(kv.contains(&(meta_keys::WORKER.into(), Some("3".into()))));
    let schema = builder.schema().clone();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["key", "name", "window_end", "amount", "avg"]);
    assert_eq!(schema.field(0).data_type(), &DataType::Int64);
    assert_eq!(schema.field(1).data_type(), &DataType::Utf8);
    assert_eq!(
        schema.field(2).data_type(),
        &DataType::Timestamp(TimeUnit::Millisecond, None)
    );
    assert_eq!(schema.field(3).data_type(), &DataType::Decimal128(12, 2));
    assert_eq!(schema.field(4).data_type(), &DataType::Float64);

    let read: Vec<_> = builder
        .build()
        .expect("reader")
        .collect::<Result<_, _>>()
        .expect("batches");
    assert_eq!(read.iter().map(|b| b.num_rows()).sum::<usize>(), 42);
    assert_eq!(m.files[0].rows, 42);
    assert_eq!(
        m.files[0].bytes,
        std::fs::metadata(&path).expect("meta").len()
    );
    assert_eq!(common::concat(&read), common::concat(&batches));

    // The manifest is plain JSON with the documented fields.
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(epoch_dir.join("_thund_checkpoint.json")).expect("read"),
    )
    .expect("json");
    assert_eq!(json["status"], "COMMITTED");
    assert_eq!(json["epoch"], 7);
    assert_eq!(json["view"], "clicks");
    assert_eq!(json["files"][0]["operator"], "count");
    let latest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("clicks/_thund_latest.json")).expect("read"),
    )
    .expect("json");
    assert_eq!(latest["epoch"], 7);
    assert_eq!(latest["manifest"], "epoch=000007/_thund_checkpoint.json");
}
