//! Dictionary encoding is an encoding, not a type: a source whose columns
//! are declared `Dictionary(…)` (as a Parquet file written by pandas, Spark
//! or DuckDB declares its repetitive strings), fed batches that are
//! dictionary-encoded or not, emits at every trigger what the same view over
//! plain columns emits, on both paths; the incremental path keeps it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use common::{canon, triggers, Triggers};
use proptest::prelude::*;
use thund::{Engine, ExecMode, ViewSpec, WindowSpec};

const KEYS: [Option<&str>; 5] = [Some("a"), Some(""), Some("bb"), Some("ä€"), None];

fn dict(value: DataType, key: DataType) -> DataType {
    DataType::Dictionary(Box::new(key), Box::new(value))
}

/// `k` and `v` plain, or dictionary-encoded (with the key types the Parquet
/// reader and pandas choose).
fn schema(encoded: bool) -> SchemaRef {
    let (k, v) = match encoded {
        true => (
            dict(DataType::Utf8, DataType::Int32),
            dict(DataType::Int64, DataType::Int8),
        ),
        false => (DataType::Utf8, DataType::Int64),
    };
    Arc::new(Schema::new(vec![
        Field::new("k", k, true),
        Field::new("v", v, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]))
}

type Row = (usize, Option<i64>, i64);

fn batch(rows: &[Row], encoded: bool) -> RecordBatch {
    let plain = schema(false);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter(rows.iter().map(|r| KEYS[r.0]))),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.1))),
        Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter().map(|r| r.2),
        )),
    ];
    let want = schema(encoded);
    let cols = (cols.iter().zip(want.fields()))
        .map(|(c, f)| cast(c, f.data_type()).expect("encode"))
        .collect();
    let b = RecordBatch::try_new(want, cols).expect("batch");
    assert_eq!(encoded, b.schema() != plain);
    b
}

/// Each trigger's rows, and whether its batch is dictionary-encoded.
type Case = Triggers<(Vec<Row>, bool)>;

fn case() -> impl Strategy<Value = Case> {
    let row = (0..KEYS.len(), prop::option::of(-50i64..50), 0i64..12_000);
    triggers((prop::collection::vec(row, 0..12), any::<bool>()))
}

/// Every trigger's rows and the end of the stream's, canonical.
fn run(c: &Case, exec: ExecMode, declared_encoded: bool) -> Vec<Vec<String>> {
    let spec = ViewSpec::builder(
        "v",
        "SELECT k, COUNT(*) AS n, SUM(v) AS s, MIN(v) AS lo, MAX(k) AS hi FROM t GROUP BY k",
    )
    .source("t", "ts", schema(declared_encoded))
    .window(WindowSpec::tumbling(Duration::from_secs(2)))
    .allowed_lateness(Duration::from_millis(500))
    .output(c.mode)
    .mode(exec)
    .build()
    .expect("spec");
    common::outputs(spec, c, |(rows, encoded)| batch(rows, *encoded)).expect("run")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(common::cases(16)))]

    #[test]
    fn dictionary_encoded_columns_give_what_plain_ones_give_on_both_paths(c in case()) {
        let want = run(&c, ExecMode::Recompute, false);
        prop_assert!(want.iter().any(|t| !t.is_empty()) || c.triggers.iter().all(|t| t.0.is_empty()));
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            for declared in [true, false] {
                prop_assert_eq!(&run(&c, exec, declared), &want, "{:?}, declared encoded: {}", exec, declared);
            }
        }
    }
}

/// A dictionary whose values are not the declared column's type is refused
/// as a mismatch, naming the column, and the engine goes on.
#[test]
fn a_dictionary_of_another_type_is_a_schema_mismatch() {
    let spec = ViewSpec::builder("v", "SELECT k, COUNT(*) AS n FROM t GROUP BY k")
        .source("t", "ts", schema(false))
        .window(WindowSpec::tumbling(Duration::from_secs(2)))
        .build()
        .expect("spec");
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec).expect("view");
    let good = batch(&[(0, Some(1), 10)], false);
    let bad_schema = Arc::new(Schema::new(vec![
        Field::new("k", dict(DataType::Int64, DataType::Int32), true),
        Field::new("v", DataType::Int64, true),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
    ]));
    let bad = RecordBatch::try_new(
        bad_schema,
        vec![
            cast(
                &Int64Array::from(vec![7]),
                &dict(DataType::Int64, DataType::Int32),
            )
            .expect("dict"),
            good.column(1).clone(),
            good.column(2).clone(),
        ],
    )
    .expect("batch");
    match e.push("t", bad) {
        Err(thund::Error::SchemaMismatch { message, .. }) => {
            assert!(message.contains("column `k`"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    e.push("t", good).expect("push");
    let out = canon(&e.finish().expect("finish").views[0].output);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].contains("|a|1"), "{out:?}");
}
