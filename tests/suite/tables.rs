//! The view as a table: after every trigger of a random stream, on both
//! paths and in every output mode, `contents`, `query` and `lookup` hold
//! exactly the rows a model replaying the view's emissions holds (the
//! model is this file's: Append keeps each closed window's rows, Update
//! replaces a row by its key and a window by its final rows, Complete
//! replaces everything; closed windows are kept per the retention); a query
//! racing triggers from another thread sees whole triggers; subscribers get
//! exactly the emitted changes, and a slow one is told it lagged.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch};
use arrow::datatypes::DataType;
use common::{batch, canon, cases, Ev};
use datafusion::common::ScalarValue;
use futures::StreamExt;
use proptest::prelude::*;
use thund::{Change, Engine, Error, ExecMode, OutputMode, Retention, ViewSpec, WindowSpec};

/// Queries and the output columns that key their rows within a window
/// (after `window_start`, `window_end`), as the test reads the SQL.
const QUERIES: &[(&str, Option<&[usize]>)] = &[
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
        Some(&[2]),
    ),
    (
        "SELECT g, k, MAX(v) AS m, MIN(f) AS lo FROM t GROUP BY g, k",
        Some(&[2, 3]),
    ),
    ("SELECT COUNT(*) AS c, AVG(f) AS a FROM t", Some(&[])),
    ("SELECT DISTINCT k, g FROM t", Some(&[2, 3])),
    ("SELECT k, v, g FROM t WHERE v > 0", None),
    (
        "SELECT k, COUNT(*) AS c FROM t GROUP BY k HAVING COUNT(*) > 1",
        Some(&[2]),
    ),
    (
        "SELECT k, COUNT(*) AS c FROM t GROUP BY k ORDER BY c DESC, k LIMIT 2",
        Some(&[2]),
    ),
];

/// One row as the model holds it: its window, key cells, and the key's
/// values (for lookups), and the whole row's canonical text.
#[derive(Clone, Debug)]
struct Row {
    key: Vec<String>,
    key_values: Vec<ScalarValue>,
    text: String,
}

/// The replay of a view's emissions (this file's reading of the rule).
struct Model {
    mode: OutputMode,
    key: Option<Vec<usize>>,
    retention: Retention,
    /// `(end, start) → rows`.
    windows: BTreeMap<(i64, i64), Vec<Row>>,
}

fn ms(col: &dyn Array) -> Int64Array {
    arrow::compute::cast(col, &DataType::Int64)
        .expect("bounds as ms")
        .as_any()
        .downcast_ref::<Int64Array>()
        .expect("i64")
        .clone()
}

impl Model {
    fn apply(&mut self, out: &[RecordBatch], w: Option<i64>) {
        if self.mode == OutputMode::Complete {
            self.windows.clear();
        }
        let mut cleared = std::collections::BTreeSet::new();
        for b in out {
            let (starts, ends) = (ms(b.column(0).as_ref()), ms(b.column(1).as_ref()));
            let fin = (self.mode == OutputMode::Update).then(|| {
                b.column(b.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .expect("final")
                    .clone()
            });
            for i in 0..b.num_rows() {
                let one = b.slice(i, 1);
                let text = canon(&[one]).remove(0);
                let cells: Vec<&str> = text.split('|').collect();
                let key_idx = self.key.clone().unwrap_or_default();
                let row = Row {
                    key: key_idx.iter().map(|&c| cells[c].to_string()).collect(),
                    key_values: key_idx
                        .iter()
                        .map(|&c| ScalarValue::try_from_array(b.column(c), i).expect("scalar"))
                        .collect(),
                    text: text.clone(),
                };
                let win = (ends.value(i), starts.value(i));
                let is_final = match &fin {
                    Some(f) => f.value(i),
                    None => self.mode == OutputMode::Append,
                };
                let rows = self.windows.entry(win).or_default();
                if is_final && cleared.insert(win) {
                    rows.clear();
                }
                if self.key.is_some() {
                    rows.retain(|r| r.key != row.key);
                }
                rows.push(row);
            }
        }
        let Some(w) = w else { return };
        let closed: Vec<(i64, i64)> = self.windows.keys().filter(|k| k.0 <= w).copied().collect();
        let drop: Vec<(i64, i64)> = match self.retention {
            Retention::EventTime(d) => {
                let from = if w == i64::MAX {
                    closed.last().map_or(w, |k| k.0)
                } else {
                    w
                };
                let cut = from.saturating_sub(d.as_millis() as i64);
                closed.into_iter().filter(|k| k.0 <= cut).collect()
            }
            Retention::Windows(n) => {
                let keep = n.min(closed.len());
                closed[..closed.len() - keep].to_vec()
            }
        };
        for k in drop {
            self.windows.remove(&k);
        }
        self.windows.retain(|_, rows| !rows.is_empty());
    }

    fn rows(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .windows
            .values()
            .flatten()
            .map(|r| r.text.clone())
            .collect();
        v.sort();
        v
    }

    /// Each key held, its values, and its rows across windows.
    fn by_key(&self) -> BTreeMap<Vec<String>, (Vec<ScalarValue>, Vec<String>)> {
        let mut m: BTreeMap<Vec<String>, (Vec<ScalarValue>, Vec<String>)> = BTreeMap::new();
        for r in self.windows.values().flatten() {
            let e = m
                .entry(r.key.clone())
                .or_insert_with(|| (r.key_values.clone(), Vec::new()));
            e.1.push(r.text.clone());
        }
        for (_, rows) in m.values_mut() {
            rows.sort();
        }
        m
    }
}

#[derive(Clone, Debug)]
struct Case {
    triggers: Vec<Vec<Ev>>,
    lateness: i64,
    win: common::Win,
    query: usize,
    mode: OutputMode,
    retention: Option<Retention>,
    /// The first trigger after which the test looks rows up by key (the
    /// table is indexed from the trigger after the first lookup on).
    lookups_from: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        common::stream(),
        0..QUERIES.len(),
        prop_oneof![
            Just(OutputMode::Append),
            Just(OutputMode::Update),
            Just(OutputMode::Complete)
        ],
        prop_oneof![
            Just(None),
            (0u64..8).prop_map(|n| Some(Retention::EventTime(Duration::from_millis(n * 500)))),
            (0usize..4).prop_map(|n| Some(Retention::Windows(n))),
        ],
        0usize..8,
    )
        .prop_map(
            |((triggers, lateness, win), query, mode, retention, lookups_from)| Case {
                triggers,
                lateness,
                win,
                query,
                mode,
                retention,
                lookups_from,
            },
        )
}

fn spec(c: &Case, exec: ExecMode) -> ViewSpec {
    let mut b = ViewSpec::builder("v", QUERIES[c.query].0)
        .source("t", "ts", common::schema())
        .window(WindowSpec::hopping(
            Duration::from_millis(c.win.size as u64),
            Duration::from_millis(c.win.slide as u64),
        ))
        .allowed_lateness(Duration::from_millis(c.lateness as u64))
        .output(c.mode)
        .mode(exec);
    if let Some(r) = c.retention {
        b = b.retention(r);
    }
    b.build().expect("spec")
}

/// Runs the case; after every trigger the table must equal the model.
fn check(c: &Case, exec: ExecMode) -> Result<(), TestCaseError> {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec(c, exec)).expect("view");
    let tables = e.tables();
    let key = QUERIES[c.query].1.map(|k| k.to_vec());
    let mut model = Model {
        mode: c.mode,
        key: key.clone(),
        retention: c
            .retention
            .unwrap_or(Retention::EventTime(Duration::from_millis(
                c.win.size as u64,
            ))),
        windows: BTreeMap::new(),
    };
    common::run_stream(&mut e, &c.triggers, |i, r, _| {
        let v = &r.views[0];
        model.apply(&v.output, v.watermark);
        let at = format!("trigger {} ({:?}, {exec:?})", i + 1, c.mode);
        let (epoch, rows) = tables.contents("v").expect("contents");
        prop_assert_eq!(epoch, r.epoch, "{}", at);
        prop_assert_eq!(canon(&[rows]), model.rows(), "contents at {}", at);
        let held = (
            model.windows.values().map(Vec::len).sum::<usize>(),
            model.windows.values().filter(|r| !r.is_empty()).count(),
        );
        prop_assert_eq!(tables.held("v").expect("held"), held, "held at {}", at);
        match &key {
            _ if i < c.lookups_from => {}
            Some(_) => {
                for (cells, (values, rows)) in model.by_key() {
                    let got = tables.lookup("v", &values).expect("lookup");
                    prop_assert_eq!(canon(&[got]), rows, "lookup {:?} at {}", cells, at);
                }
            }
            None => {
                let err = tables.lookup("v", &[ScalarValue::Int64(Some(1))]);
                prop_assert!(matches!(err, Err(Error::Lookup { .. })), "{:?}", err);
            }
        }
        Ok(())
    })?;
    // SQL over the table, and a filter on the key that the index serves
    let all = tables.query("SELECT * FROM v").expect("query");
    prop_assert_eq!(canon(&all), model.rows());
    if key.as_deref() == Some(&[2][..]) {
        for (_, (values, rows)) in model.by_key() {
            let sql = format!("SELECT * FROM v WHERE k = {}", values[0]);
            let got = tables.query(&sql).expect("query by key");
            prop_assert_eq!(canon(&got), rows, "{}", sql);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn the_table_holds_what_the_emissions_leave_standing(c in case()) {
        check(&c, ExecMode::Auto)?;
        check(&c, ExecMode::Recompute)?;
    }
}

fn counts_view(name: &str) -> ViewSpec {
    ViewSpec::builder(name, "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
        .source("t", "ts", common::schema())
        .output(OutputMode::Update)
        .build()
        .expect("spec")
}

fn ev(t: i64, k: i64) -> Ev {
    Ev {
        t,
        k,
        g: "a".into(),
        v: Some(1),
        f: 0.5,
    }
}

/// Every trigger adds one row per key to two views: any whole trigger has
/// every key at the same count in both, so a reader that saw half a
/// trigger, or two triggers at once, would see counts differ.
#[test]
fn a_query_racing_triggers_sees_whole_triggers() {
    const KEYS: i64 = 50;
    const TRIGGERS: i64 = 300;
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(counts_view("a")).expect("a");
    e.create_view(counts_view("b")).expect("b");
    let tables = e.tables();
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (tables, done) = (tables.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !done.load(Ordering::Relaxed) {
                let out = tables
                    .query(
                        "SELECT COUNT(*) AS n, MIN(a.c) AS lo, MAX(a.c) AS hi, \
                         MIN(b.c) AS blo, MAX(b.c) AS bhi FROM a JOIN b ON a.k = b.k",
                    )
                    .expect("query");
                let b = &out[0];
                let col = |i: usize| {
                    let a = b
                        .column(i)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .expect("i64");
                    a.is_valid(0).then(|| a.value(0))
                };
                let (n, lo, hi, blo, bhi) = (col(0), col(1), col(2), col(3), col(4));
                if n == Some(0) {
                    continue;
                }
                assert_eq!(n, Some(KEYS), "every key or none");
                assert_eq!((lo, blo), (hi, bhi), "one trigger's counts");
                assert_eq!(lo, hi, "one trigger in both views");
                seen.insert(lo);
            }
            seen.len()
        })
    };
    for i in 0..TRIGGERS {
        let rows: Vec<Ev> = (0..KEYS).map(|k| ev(i * 10, k)).collect();
        e.push("t", batch(&rows)).expect("push");
        e.trigger().expect("trigger");
    }
    done.store(true, Ordering::Relaxed);
    let distinct = reader.join().expect("reader");
    assert!(
        distinct > 1,
        "the reader saw {distinct} trigger(s): it raced nothing"
    );
}

#[test]
fn a_subscriber_gets_every_trigger_in_order_and_a_slow_one_is_told_it_lagged() {
    let mut e = Engine::builder()
        .subscriber_buffer(4)
        .build()
        .expect("engine");
    e.create_view(
        ViewSpec::builder("v", "SELECT k, COUNT(*) AS c FROM t GROUP BY k")
            .source("t", "ts", common::schema())
            .window(WindowSpec::tumbling(Duration::from_secs(1)))
            .output(OutputMode::Update)
            .build()
            .expect("spec"),
    )
    .expect("view");
    let mut fast = e.subscribe("v").expect("subscribe");
    let mut slow = e.subscribe("v").expect("subscribe");
    let mut emitted = Vec::new();
    let mut got = Vec::new();
    for i in 0..40i64 {
        let rows: Vec<Ev> = (0..3).map(|k| ev(i * 300 + k * 10, k % 2)).collect();
        e.push("t", batch(&rows)).expect("push");
        let r = e.trigger().expect("trigger");
        emitted.push((r.epoch, canon(&r.views[0].output)));
        // the fast subscriber reads each trigger as it comes
        match futures::executor::block_on(fast.next()).expect("a change") {
            Change::Trigger { epoch, rows, .. } => got.push((epoch, canon(&rows))),
            other => panic!("a reader in step lagged: {other:?}"),
        }
        assert!(e.tables().backlog("v").expect("backlog") <= 4, "bounded");
    }
    assert_eq!(got, emitted, "every trigger, in order, as emitted");

    // the slow one read nothing: told it lagged, given the contents, then goes on
    match futures::executor::block_on(slow.next()).expect("a change") {
        Change::Lagged {
            missed,
            epoch,
            contents,
        } => {
            assert_eq!(epoch, 40);
            assert_eq!(missed, 40, "every trigger was folded into the contents");
            let (at, now) = e.tables().contents("v").expect("contents");
            assert_eq!((epoch, canon(&[contents])), (at, canon(&[now])));
        }
        other => panic!("expected Lagged, got {other:?}"),
    }
    let r = e.finish().expect("finish");
    match futures::executor::block_on(slow.next()).expect("a change") {
        Change::Trigger { epoch, rows, .. } => {
            assert_eq!((epoch, canon(&rows)), (r.epoch, canon(&r.views[0].output)));
        }
        other => panic!("expected the next trigger, got {other:?}"),
    }
    drop(e);
    assert!(
        futures::executor::block_on(slow.next()).is_none(),
        "ends with the engine"
    );
}

/// A resumed engine's table is the one the checkpoint's engine had, and both
/// go on alike: for a keyed view, and for one without a key whose open
/// windows hold every row emitted so far.
#[test]
fn the_table_is_checkpointed_and_restored() {
    for (root, sql, mode) in [
        (
            "memory://tables-restore",
            "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
            OutputMode::Append,
        ),
        (
            "memory://tables-restore-unkeyed",
            "SELECT k, v FROM t WHERE v >= 0",
            OutputMode::Update,
        ),
    ] {
        table_restores(root, sql, mode);
    }
}

fn table_restores(root: &str, sql: &str, mode: OutputMode) {
    let view = || {
        ViewSpec::builder("v", sql)
            .source("t", "ts", common::schema())
            .window(WindowSpec::tumbling(Duration::from_secs(1)))
            .output(mode)
            .retention(Retention::Windows(3))
            .build()
            .expect("spec")
    };
    let trig = |i: i64| -> Vec<Ev> { (0..6).map(|k| ev(i * 700 + k * 13, k % 3)).collect() };
    let mut a = Engine::builder()
        .with_state_root(root)
        .build()
        .expect("engine");
    a.create_view(view()).expect("view");
    for i in 0..8 {
        a.push_at("t", batch(&trig(i)), i as u64 + 1).expect("push");
        a.trigger().expect("trigger");
    }
    a.checkpoint(serde_json::Value::Null).expect("checkpoint");
    a.sync_checkpoints().expect("committed");
    let before = canon(&[a.tables().contents("v").expect("contents").1]);
    assert!(before.len() >= 6, "closed windows are held: {before:?}");
    drop(a);
    let mut b = Engine::builder()
        .with_state_root(root)
        .build()
        .expect("engine");
    b.create_view(view()).expect("resume");
    assert_eq!(
        canon(&[b.tables().contents("v").expect("contents").1]),
        before
    );
    let mut whole = Engine::builder().build().expect("engine");
    whole.create_view(view()).expect("view");
    for i in 0..12 {
        whole.push("t", batch(&trig(i))).expect("push");
        whole.trigger().expect("trigger");
        if i >= 8 {
            b.push("t", batch(&trig(i))).expect("push");
            b.trigger().expect("trigger");
        }
    }
    let (x, y) = (
        canon(&[whole.tables().contents("v").expect("contents").1]),
        canon(&[b.tables().contents("v").expect("contents").1]),
    );
    assert_eq!(x, y);
}

/// Lookups name what is wrong: an unknown view, the key's arity, a value
/// that is no value of the key column's type.
#[test]
fn bad_lookups_and_queries_are_typed_errors() {
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(counts_view("v")).expect("view");
    e.push("t", batch(&[ev(1, 7)])).expect("push");
    e.trigger().expect("trigger");
    assert!(matches!(e.lookup("nope", &[]), Err(Error::UnknownView(_))));
    let err = e.lookup("v", &[]).expect_err("arity");
    assert!(err.to_string().contains("the key is (k)"), "{err}");
    let err = e
        .lookup("v", &[ScalarValue::Utf8(Some("seven".into()))])
        .expect_err("type");
    assert!(
        matches!(&err, Error::Lookup { view, message } if view == "v" && message.contains("`k`")),
        "{err}"
    );
    // a value the cast would change is refused, not rounded to another key
    let err = e
        .lookup("v", &[ScalarValue::Float64(Some(7.5))])
        .expect_err("7.5 is no BIGINT");
    assert!(matches!(&err, Error::Lookup { .. }), "{err}");
    // a string that is a number converts
    let rows = e
        .lookup("v", &[ScalarValue::Utf8(Some("7".into()))])
        .expect("converts");
    assert_eq!(rows.num_rows(), 1);
    let err = e.query("SELECT nope FROM v").expect_err("column");
    assert!(matches!(err, Error::Query { .. }), "{err}");
    let err = e.query("SELECT * FROM elsewhere").expect_err("table");
    assert!(err.to_string().contains("elsewhere"), "{err}");
    // the engine goes on
    e.push("t", batch(&[ev(2, 7)])).expect("push");
    e.trigger().expect("trigger");
    assert_eq!(e.lookup("v", &[7i64.into()]).expect("lookup").num_rows(), 1);
}

/// A window written in the SQL, its bounds shown last under other names:
/// the table is in the query's columns and keyed as the spec spelling is.
/// An engine built with `tables(false)` keeps none, says so, and still
/// serves subscribers.
#[test]
fn tables_follow_the_querys_columns_and_can_be_turned_off() {
    let sql = "SELECT k, COUNT(*) AS c, window_start AS ws, window_end AS we \
               FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY k, window_start, window_end";
    let view = || {
        ViewSpec::builder("v", sql)
            .source("t", "ts", common::schema())
            .output(OutputMode::Append)
            .build()
            .expect("spec")
    };
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(view()).expect("view");
    assert_eq!(
        e.key_columns("v").expect("key"),
        Some(vec!["k".to_string()])
    );
    let mut emitted = Vec::new();
    for i in 0..5i64 {
        let rows: Vec<Ev> = (0..4).map(|k| ev(i * 600 + k * 7, k % 2)).collect();
        e.push("t", batch(&rows)).expect("push");
        emitted.extend(e.trigger().expect("trigger").views[0].output.clone());
    }
    let (_, held) = e.tables().contents("v").expect("contents");
    let schema = held.schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["k", "c", "ws", "we"]);
    // the default retention (one window length) holds the last closed window
    // and every open one; all of them were emitted in Append mode
    assert!(held.num_rows() > 0);
    let all = canon(&emitted);
    assert!(canon(std::slice::from_ref(&held))
        .iter()
        .all(|r| all.contains(r)));
    let one = e.lookup("v", &[1i64.into()]).expect("lookup");
    assert!(one.num_rows() >= 1);
    assert!(canon(&[one]).iter().all(|r| r.starts_with("1|")));

    let mut off = Engine::builder().tables(false).build().expect("engine");
    off.create_view(view()).expect("view");
    let mut sub = off.subscribe("v").expect("subscribe");
    off.push("t", batch(&[ev(10, 1), ev(2_000, 1)]))
        .expect("push");
    let r = off.trigger().expect("trigger");
    assert!(matches!(
        off.lookup("v", &[1i64.into()]),
        Err(Error::Unsupported { .. })
    ));
    assert!(off.tables().contents("v").is_err());
    assert!(off.query("SELECT * FROM v").is_err());
    match futures::executor::block_on(sub.next()).expect("a change") {
        Change::Trigger { epoch, rows, .. } => {
            assert_eq!((epoch, canon(&rows)), (r.epoch, canon(&r.views[0].output)))
        }
        other => panic!("{other:?}"),
    }
}
