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
use thund::io::db::{DbSink, SinkUrl};
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

fn as_stored_all(batches: &[RecordBatch]) -> Vec<String> {
    batches.iter().flat_map(as_stored).collect()
}

/// A sink table, new for each use: a SQLite file in a temporary
/// directory, or a table of its own on the suite's PostgreSQL server.
struct Target {
    db: Db,
    url: SinkUrl,
    table: String,
    _dir: Option<tempfile::TempDir>,
}

#[derive(Clone, Copy, Debug)]
enum Db {
    Sqlite,
    Postgres,
}

impl Target {
    fn new(db: Db) -> Target {
        match db {
            Db::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = format!("sqlite://{}/s.db?table=out", dir.path().display());
                Target {
                    db,
                    url: SinkUrl::parse(&url).expect("url"),
                    table: "out".into(),
                    _dir: Some(dir),
                }
            }
            Db::Postgres => {
                let table = common::db::pg_table("sink");
                Target {
                    db,
                    url: SinkUrl::parse(&common::db::pg_sink(&table)).expect("url"),
                    table,
                    _dir: None,
                }
            }
        }
    }

    fn rows(&self) -> Vec<String> {
        match self.db {
            Db::Sqlite => {
                common::db::sqlite_rows(self.url.sqlite_path().expect("sqlite"), &self.table)
            }
            Db::Postgres => common::db::pg_rows(&self.table),
        }
    }
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

/// A sink for view `v` of `e` into `url`, as a new run (`test`) would open it.
fn open_fresh(e: &Engine, url: &SinkUrl, mode: OutputMode) -> thund::Result<DbSink> {
    DbSink::open(
        url,
        "v",
        e.output_schema("v").expect("schema"),
        mode,
        e.key_columns("v").expect("key"),
        e.window_columns("v").expect("window"),
        "test",
        true,
    )
}

/// How a view shows its window: in the spec (the bounds first, as
/// `window_start` and `window_end`), or in SQL with the bounds renamed and
/// placed apart, or not selected.
#[derive(Clone, Copy, Debug)]
enum Shown {
    Spec,
    Renamed,
    Hidden,
}

#[allow(clippy::too_many_arguments)]
fn check(
    triggers: &[Vec<Ev>],
    lateness: i64,
    win: common::Win,
    q: usize,
    mode: OutputMode,
    exec: ExecMode,
    db: Db,
    shown: Shown,
) -> Result<(), TestCaseError> {
    let target = Target::new(db);
    let mut e = Engine::builder().build().expect("engine");
    let mut view = spec(QUERIES[q], win, lateness, mode, exec);
    if let Shown::Renamed | Shown::Hidden = shown {
        let first = "SELECT window_start, window_end, ";
        view = common::in_sql(&view).expect("a SQL spelling");
        view.sql = match shown {
            Shown::Renamed => view
                .sql
                .replacen(first, "SELECT window_end AS w_end, ", 1)
                .replacen(" FROM ", ", window_start AS w_start FROM ", 1),
            _ => view.sql.replacen(first, "SELECT ", 1),
        };
    }
    e.create_view(view).expect("view");
    let sink = open_fresh(&e, &target.url, mode);
    // Update mode upserts on the window: a view that hides it is refused
    // (the rows of its windows overwrote each other)
    let mut sink = match (shown, mode, sink) {
        (Shown::Hidden, OutputMode::Update, Err(err)) => {
            prop_assert!(
                err.to_string()
                    .contains("does not show its window's bounds"),
                "{}",
                err
            );
            return Ok(());
        }
        (_, _, sink) => sink.expect("sink"),
    };
    let mut refused = false;
    common::run_stream(&mut e, triggers, |i, r, e| {
        if refused {
            return Ok(());
        }
        let written = sink.write(r.epoch, "test", &r.views[0].output);
        // PostgreSQL text holds no NUL: such a row is a typed error, and
        // nothing of its epoch is written
        let nul = as_stored_all(&r.views[0].output)
            .iter()
            .any(|row| row.contains('\0'));
        if let (Db::Postgres, true) = (db, nul) {
            let err = written.expect_err("a NUL in PostgreSQL text");
            prop_assert!(err.to_string().contains("NUL character"), "{}", err);
            refused = true;
            return Ok(());
        }
        prop_assert!(written.expect("write"));
        // a replay of the epoch is skipped
        prop_assert!(!sink
            .write(r.epoch, "test", &r.views[0].output)
            .expect("replay"));
        let (_, held) = e.tables().contents("v").expect("contents");
        prop_assert_eq!(
            target.rows(),
            as_stored(&held),
            "trigger {} ({:?}, {:?}, {:?})",
            i + 1,
            mode,
            exec,
            db
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
        for db in [Db::Sqlite, Db::Postgres] {
            for shown in [Shown::Spec, Shown::Renamed, Shown::Hidden] {
                check(&triggers, lateness, win, q, mode, ExecMode::Auto, db, shown)?;
                check(&triggers, lateness, win, q, mode, ExecMode::Recompute, db, shown)?;
            }
        }
    }
}

#[test]
fn a_table_of_another_shape_or_run_and_bad_urls_are_refused() {
    for db in [Db::Sqlite, Db::Postgres] {
        refusals(db);
    }
    for bad in [
        "postgres://",
        "postgres://x:notaport/db",
        "mysql://127.0.0.1/db",
        "sqlite://relative.db",
        "sqlite:///tmp/x.db?table=1bad",
        "sqlite:///tmp/x.db?tabel=x",
        "postgres://u@127.0.0.1/db?table=a;drop",
    ] {
        let err = SinkUrl::parse(bad).expect_err(bad);
        assert!(matches!(err, Error::Output { .. }), "{bad}: {err}");
    }
    // a server that is not there is an error naming the URL, without its password
    let t = SinkUrl::parse("postgres://me:secret@127.0.0.1:1/db?table=t").expect("url");
    let err = DbSink::open(
        &t,
        "v",
        common::schema(),
        OutputMode::Append,
        None,
        None,
        "r",
        true,
    )
    .err()
    .expect("no server");
    let shown = err.to_string();
    assert!(
        shown.contains("cannot connect") && shown.contains("me:***@127.0.0.1:1"),
        "{shown}"
    );
    assert!(!shown.contains("secret"), "{shown}");
}

fn refusals(db: Db) {
    let target = Target::new(db);
    let url = target.url.clone();
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
                e.window_columns(v).expect("window"),
            );
            (v, m)
        })
        .collect();
    let open = |view: &str, run: &str, fresh: bool| {
        let (schema, key, window) = meta[view].clone();
        DbSink::open(
            &url,
            view,
            schema,
            OutputMode::Update,
            key,
            window,
            run,
            fresh,
        )
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
}

/// A session that grows is a new window, and Update mode emits no
/// retraction of the old one's rows: a database sink would keep them beside
/// the session's final row (a session of three rows left its provisional
/// rows of one and two beside its final count of three). Such a sink is
/// refused, in either spelling; in Append mode the table holds each
/// session's final rows, as the view emitted them.
#[test]
fn sessions_in_update_mode_are_refused_by_database_sinks() {
    let ev = |t: i64| Ev {
        t,
        k: 1,
        g: "a".into(),
        v: Some(1),
        f: 0.0,
    };
    for mode in [OutputMode::Update, OutputMode::Append] {
        let spec = ViewSpec::builder("v", "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
            .source("t", "ts", common::schema())
            .window(WindowSpec::session(Duration::from_secs(2), &["k"]))
            .output(mode)
            .build()
            .expect("spec");
        for view in common::spellings(spec) {
            let target = Target::new(Db::Sqlite);
            let mut e = Engine::builder().build().expect("engine");
            e.create_view(view).expect("view");
            let sink = open_fresh(&e, &target.url, mode);
            let mut sink = match mode {
                OutputMode::Update => {
                    let err = sink.err().expect("sessions in Update mode");
                    assert!(err.to_string().contains("session windows"), "{err}");
                    continue;
                }
                _ => sink.expect("sink"),
            };
            let mut emitted = Vec::new();
            for t in [0, 1_000, 2_000, 30_000, 60_000] {
                e.push("t", batch(&[ev(t)])).expect("push");
                let r = e.trigger().expect("trigger");
                assert!(sink
                    .write(r.epoch, "test", &r.views[0].output)
                    .expect("write"));
                emitted.extend(r.views[0].output.clone());
            }
            let mut want = as_stored_all(&emitted);
            want.sort();
            assert_eq!(want.len(), 2, "two sessions closed: {want:?}");
            assert_eq!(target.rows(), want);
        }
    }
}

/// A NaN result: PostgreSQL stores it; SQLite would store NULL, a value
/// it does not hold (and one NULL key for a NaN group and a NULL group), so
/// that epoch is refused naming the column and row, nothing of it written,
/// and the epochs before it stay.
#[test]
fn a_nan_is_stored_or_refused_never_made_null() {
    let ev = |t: i64, f: f64| common::Ev {
        t,
        k: 1,
        g: "a".into(),
        v: Some(1),
        f,
    };
    let first = vec![ev(1_000, 1.5)];
    let second = vec![ev(12_000, f64::NAN)];
    for db in [Db::Sqlite, Db::Postgres] {
        let target = Target::new(db);
        let mut e = Engine::builder().build().expect("engine");
        let win = common::Win {
            size: 10_000,
            slide: 10_000,
        };
        let sql = "SELECT k, MAX(f) AS m FROM t GROUP BY k";
        e.create_view(spec(sql, win, 0, OutputMode::Append, ExecMode::Auto))
            .expect("view");
        let mut sink = open_fresh(&e, &target.url, OutputMode::Append).expect("sink");
        let mut epochs = Vec::new();
        for rows in [&first, &second] {
            e.push("t", common::batch(rows)).expect("push");
            epochs.push(e.trigger().expect("trigger"));
        }
        epochs.push(e.finish().expect("finish"));
        let mut stored = Vec::new();
        for r in &epochs {
            let out = &r.views[0].output;
            let written = sink.write(r.epoch, "test", out);
            let nan = as_stored_all(out).iter().any(|row| row.contains("NaN"));
            match (db, nan) {
                (Db::Sqlite, true) => {
                    let err = written.expect_err("a NaN in SQLite").to_string();
                    assert!(
                        err.contains("column `m`, row 1") && err.contains("NaN"),
                        "{err}"
                    );
                    break;
                }
                _ => {
                    assert!(written.expect("write"));
                    stored.extend(as_stored_all(out));
                }
            }
        }
        assert!(
            stored.iter().any(|r| r.ends_with("|1.500000000e0")),
            "{stored:?}"
        );
        stored.sort();
        assert_eq!(target.rows(), stored, "{db:?}");
        if let Db::Postgres = db {
            assert!(stored.iter().any(|r| r.contains("NaN")), "{stored:?}");
        }
    }
}

/// PostgreSQL keeps microseconds and rounds finer digits: a nanosecond
/// timestamp is floored to the microsecond, as event times are, so that a
/// time 100 ns before midnight stays before it (rounded, it showed the next
/// day, outside the window its row names).
#[test]
fn a_nanosecond_time_is_floored_to_postgresqls_microseconds() {
    use std::sync::Arc;

    use arrow::array::{Int64Array, TimestampNanosecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};
    let ns = DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("ts", ns, false),
    ]));
    let spec = ViewSpec::builder("v", "SELECT k, MIN(ts) AS lo FROM t GROUP BY k")
        .source("t", "ts", schema.clone())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .build()
        .expect("spec");
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec).expect("view");
    let table = common::db::pg_table("ns");
    let url = SinkUrl::parse(&common::db::pg_sink(&table)).expect("url");
    let mut sink = open_fresh(&e, &url, OutputMode::Append).expect("sink");
    let rows = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 2])),
            Arc::new(
                TimestampNanosecondArray::from(vec![-100, 1_123_456_789]).with_timezone("+00:00"),
            ),
        ],
    )
    .expect("batch");
    e.push("t", rows).expect("push");
    let r = e.finish().expect("finish");
    assert!(sink
        .write(r.epoch, "test", &r.views[0].output)
        .expect("write"));
    let got: Vec<String> = common::db::pg_client()
        .query(
            &format!(
                "SELECT to_char(window_start AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' ' || \
                 to_char(lo AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') FROM \"{table}\" ORDER BY k"
            ),
            &[],
        )
        .expect("rows")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        got,
        [
            "1969-12-31 23:59:50 1969-12-31 23:59:59.999999",
            "1970-01-01 00:00:00 1970-01-01 00:00:01.123456",
        ]
    );
}
