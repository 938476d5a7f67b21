//! The SQLite sink (a real database file): after every trigger of a random
//! stream, on both paths and in every output mode, its table holds what the
//! view's table holds (closed windows all kept); a replayed epoch is
//! skipped; a table of another shape or of another run is refused, naming it.

use crate::common;

use std::time::Duration;

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use common::{batch, canon, cases, Ev};
use proptest::prelude::*;
use thund::io::db::{SinkUrl, SqliteSink};
use thund::{Engine, Error, ExecMode, OutputMode, Retention, ViewSpec, WindowSpec};

const QUERIES: &[&str] = &[
    "SELECT k, g, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS m FROM t GROUP BY k, g",
    "SELECT COUNT(*) AS c, AVG(d) AS a FROM t",
    "SELECT k, v, g FROM t WHERE v > 0",
    "SELECT k, COUNT(*) AS c FROM t GROUP BY k HAVING COUNT(*) > 1",
];

/// The rows of a batch as the sink stores them: timestamps and booleans as
/// integers.
fn as_stored(b: &RecordBatch) -> Vec<String> {
    let cols: Vec<_> = b
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Timestamp(_, _) | DataType::Boolean => {
                arrow::compute::cast(c, &DataType::Int64).expect("cast")
            }
            _ => c.clone(),
        })
        .collect();
    let fields: Vec<_> = b
        .schema()
        .fields()
        .iter()
        .zip(&cols)
        .map(|(f, c)| arrow::datatypes::Field::new(f.name(), c.data_type().clone(), true))
        .collect();
    let b = RecordBatch::try_new(
        std::sync::Arc::new(arrow::datatypes::Schema::new(fields)),
        cols,
    )
    .expect("batch");
    canon(&[b])
}

/// The sink table's rows, formatted as [`canon`] formats Arrow values.
fn table_rows(db: &std::path::Path, table: &str) -> Vec<String> {
    use rusqlite::types::Value;
    let conn = rusqlite::Connection::open(db).expect("db");
    let mut stmt = conn
        .prepare(&format!("SELECT * FROM {table}"))
        .expect("table");
    let n = stmt.column_count();
    let mut rows: Vec<String> = stmt
        .query_map([], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, Value>(i).map(|v| match v {
                        Value::Null => "NULL".to_string(),
                        Value::Integer(x) => x.to_string(),
                        Value::Real(x) => format!("{x:.9e}"),
                        Value::Text(s) => s,
                        Value::Blob(b) => format!("{b:?}"),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|c| c.join("|"))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    rows.sort();
    rows
}

fn spec(sql: &str, win: common::Win, lateness: i64, mode: OutputMode, exec: ExecMode) -> ViewSpec {
    ViewSpec::builder("v", sql)
        .source("t", "ts", common::schema())
        .window(WindowSpec::hopping(
            Duration::from_millis(win.size as u64),
            Duration::from_millis(win.slide as u64),
        ))
        .allowed_lateness(Duration::from_millis(lateness as u64))
        .output(mode)
        .mode(exec)
        .retention(Retention::Windows(usize::MAX))
        .build()
        .expect("spec")
}

fn check(
    triggers: &[Vec<Ev>],
    lateness: i64,
    win: common::Win,
    q: usize,
    mode: OutputMode,
    exec: ExecMode,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let url =
        SinkUrl::parse(&format!("sqlite://{}/s.db?table=out", dir.path().display())).expect("url");
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec(QUERIES[q], win, lateness, mode, exec))
        .expect("view");
    let mut sink = SqliteSink::open(
        &url,
        "v",
        e.output_schema("v").expect("schema"),
        mode,
        e.key_columns("v").expect("key"),
        "test",
        true,
    )
    .expect("sink");
    common::run_stream(&mut e, triggers, |i, r, e| {
        prop_assert!(sink
            .write(r.epoch, "test", &r.views[0].output)
            .expect("write"));
        // a replay of the epoch is skipped
        prop_assert!(!sink
            .write(r.epoch, "test", &r.views[0].output)
            .expect("replay"));
        let (_, held) = e.tables().contents("v").expect("contents");
        prop_assert_eq!(
            table_rows(&url.path, "out"),
            as_stored(&held),
            "trigger {} ({:?}, {:?})",
            i + 1,
            mode,
            exec
        );
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(16), ..ProptestConfig::default() })]

    #[test]
    fn the_sink_table_holds_what_the_view_table_holds(
        (triggers, lateness, win) in common::stream(),
        q in 0..QUERIES.len(),
        mode in prop_oneof![Just(OutputMode::Append), Just(OutputMode::Update), Just(OutputMode::Complete)],
    ) {
        check(&triggers, lateness, win, q, mode, ExecMode::Auto)?;
        check(&triggers, lateness, win, q, mode, ExecMode::Recompute)?;
    }
}

#[test]
fn a_table_of_another_shape_or_run_and_bad_urls_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url =
        SinkUrl::parse(&format!("sqlite://{}/s.db?table=out", dir.path().display())).expect("url");
    let win = common::Win {
        size: 1000,
        slide: 1000,
    };
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec(QUERIES[0], win, 0, OutputMode::Update, ExecMode::Auto))
        .expect("view");
    e.create_view(ViewSpec {
        name: "w".into(),
        ..spec(QUERIES[1], win, 0, OutputMode::Update, ExecMode::Auto)
    })
    .expect("view w");
    let meta: std::collections::HashMap<&str, _> = ["v", "w"]
        .into_iter()
        .map(|v| {
            let m = (
                e.output_schema(v).expect("schema"),
                e.key_columns(v).expect("key"),
            );
            (v, m)
        })
        .collect();
    let open = |view: &str, run: &str, fresh: bool| {
        let (schema, key) = meta[view].clone();
        SqliteSink::open(&url, view, schema, OutputMode::Update, key, run, fresh)
    };
    let mut s = open("v", "run-1", true).expect("a new table");
    e.push(
        "t",
        batch(&[Ev {
            t: 10,
            k: 1,
            g: "a".into(),
            v: Some(1),
            f: 0.5,
        }]),
    )
    .expect("push");
    let r = e.trigger().expect("trigger");
    assert!(s
        .write(r.epoch, "run-1", &r.views[0].output)
        .expect("write"));
    drop(s);
    // the same run resumes; another run, or a fresh one, is refused
    assert_eq!(open("v", "run-1", false).expect("resume").applied(), 1);
    for (run, fresh) in [("run-2", false), ("run-1", true)] {
        let err = open("v", run, fresh).err().expect("refused");
        assert!(
            matches!(&err, Error::Output { message, .. } if message.contains("another run") || message.contains("holds epochs")),
            "{err}"
        );
    }
    // another view's rows into the same table: the columns are named
    let err = open("w", "run-1", false).err().expect("shape");
    assert!(err.to_string().contains("exists with columns"), "{err}");
    for bad in [
        "postgres://x",
        "sqlite://relative.db",
        "sqlite:///tmp/x.db?table=1bad",
        "sqlite:///tmp/x.db?tabel=x",
    ] {
        let err = SinkUrl::parse(bad).expect_err(bad);
        assert!(matches!(err, Error::Output { .. }), "{bad}: {err}");
    }
}
