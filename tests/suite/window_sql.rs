//! Windows declared in SQL (`TUMBLE`/`HOP`/`SESSION` in `FROM`, `date_bin`
//! or Flink's legacy `TUMBLE(ts, …)` in `GROUP BY`) against the same view
//! with its window in the spec: on random disordered streams, in every
//! output mode, on both paths and 1 or 2 workers, both spellings take the
//! same plan and emit the same rows at every trigger, the SQL spelling
//! laying its columns out where its select list puts the bounds. Malformed
//! window calls are errors that name the call and its position.

use crate::common;

use std::time::Duration;

use arrow::array::RecordBatch;
use common::{batch, canon, cases, Ev};
use proptest::prelude::*;
use thund::{Engine, ExecMode, OutputMode, ViewSpec, WindowSpec};

/// A window of the pair, as both spellings give it.
#[derive(Clone, Copy, Debug)]
enum Win {
    Hop { size: i64, slide: i64 },
    Tumble(i64),
    Session(i64),
}

impl Win {
    fn spec(self) -> WindowSpec {
        let ms = |x: i64| Duration::from_millis(x as u64);
        match self {
            Win::Hop { size, slide } => WindowSpec::hopping(ms(size), ms(slide)),
            Win::Tumble(size) => WindowSpec::tumbling(ms(size)),
            Win::Session(gap) => WindowSpec::session(ms(gap), &["k"]),
        }
    }

    /// The window function over source `t`.
    fn call(self) -> String {
        match self {
            Win::Hop { size, slide } => format!(
                "HOP(t, ts, INTERVAL '{slide}' MILLISECOND, INTERVAL '{size} milliseconds')"
            ),
            Win::Tumble(size) => format!("TUMBLE(t, ts, INTERVAL '{size}' MILLISECOND)"),
            Win::Session(gap) => format!("SESSION(t, ts, INTERVAL '{gap}' MILLISECOND)"),
        }
    }

    /// `sql` with Flink's legacy group window in it: `{G}` the call in
    /// `GROUP BY`, `{S}` and `{E}` its bounds (`TUMBLE_START(…)`, …).
    fn legacy(self, sql: &str) -> String {
        let (name, args) = match self {
            Win::Hop { size, slide } => (
                "HOP",
                format!("ts, INTERVAL '{slide}' MILLISECOND, INTERVAL '{size} milliseconds'"),
            ),
            Win::Tumble(size) => ("TUMBLE", format!("t.ts, INTERVAL '{size}' MILLISECOND")),
            Win::Session(gap) => ("SESSION", format!("ts, INTERVAL '{gap}' MILLISECOND")),
        };
        sql.replace("{G}", &format!("{name}({args})"))
            .replace("{S}", &format!("{name}_START({args})"))
            .replace("{E}", &format!("{}_end({args})", name.to_lowercase()))
    }
}

/// Per-window query (window in the spec), and the same with the window in
/// SQL, where `{W}` is the window function and the bounds are selected
/// first, as the spec's rows carry them.
const PAIRS: &[(&str, &str)] = &[
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS m FROM t GROUP BY k",
        "SELECT window_start, window_end, k, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS m \
         FROM {W} GROUP BY k, window_start, window_end",
    ),
    (
        "SELECT COUNT(*) AS c, AVG(v) AS a FROM t AS w WHERE v > 0",
        "SELECT w.window_start, w.window_end, COUNT(*) AS c, AVG(v) AS a FROM {W} AS w \
         WHERE v > 0 GROUP BY w.window_start, w.window_end",
    ),
    (
        "SELECT k, COUNT(DISTINCT g) AS dg FROM t GROUP BY k HAVING COUNT(*) > 1",
        "SELECT window_start, window_end, k, COUNT(DISTINCT g) AS dg FROM {W} \
         GROUP BY window_start, k, window_end HAVING COUNT(*) > 1",
    ),
    (
        "SELECT k, v, g FROM t WHERE v = (SELECT MAX(v) FROM t)",
        "SELECT window_start, window_end, k, v, g FROM {W} WHERE v = (SELECT MAX(v) FROM {W})",
    ),
    (
        // Nexmark q5 as Flink writes it: the bounds carried through
        // subqueries under other names and joined on
        "SELECT x.k, x.c FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS x \
         JOIN (SELECT MAX(c) AS m FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS y) AS z \
         ON x.c = z.m",
        "SELECT x.st AS window_start, x.en AS window_end, x.k, x.c FROM \
         (SELECT k, COUNT(*) AS c, window_start AS st, window_end AS en FROM {W} \
          GROUP BY k, window_start, window_end) AS x \
         JOIN (SELECT MAX(c) AS m, st, en FROM (SELECT k, COUNT(*) AS c, window_start AS st, \
          window_end AS en FROM {W} GROUP BY k, window_start, window_end) AS y GROUP BY st, en) AS z \
         ON x.st = z.st AND x.en = z.en AND x.c = z.m",
    ),
    // Flink's legacy group windows (`{G}` in GROUP BY, `{S}`/`{E}` its bounds)
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS m FROM t GROUP BY k",
        "SELECT {S} AS window_start, {E} AS window_end, k, COUNT(*) AS c, SUM(v) AS s, \
         MAX(f) AS m FROM t GROUP BY k, {G}",
    ),
    (
        "SELECT x.k, x.c FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS x \
         JOIN (SELECT MAX(c) AS m FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS y) AS z \
         ON x.c = z.m",
        // Nexmark q5 as Flink's own repository writes it
        "SELECT x.st AS window_start, x.en AS window_end, x.k, x.c FROM \
         (SELECT k, COUNT(*) AS c, {S} AS st, {E} AS en FROM t GROUP BY k, {G}) AS x \
         JOIN (SELECT MAX(c) AS m, st, en FROM (SELECT k, COUNT(*) AS c, {S} AS st, \
          {E} AS en FROM t GROUP BY {G}, k) AS y GROUP BY st, en) AS z \
         ON x.st = z.st AND x.en = z.en AND x.c = z.m",
    ),
];

/// Session pairs: grouped by the session key `k`.
const SESSION_PAIRS: &[(&str, &str)] = &[
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
        "SELECT window_start, window_end, k, COUNT(*) AS c, SUM(v) AS s FROM {W} \
         GROUP BY k, window_start, window_end",
    ),
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
        "SELECT {S} AS window_start, {E} AS window_end, k, COUNT(*) AS c, SUM(v) AS s \
         FROM t GROUP BY {G}, k",
    ),
];

fn view(name: &str, sql: &str, win: Option<Win>, c: &Case, exec: ExecMode) -> ViewSpec {
    let mut b = ViewSpec::builder(name, sql)
        .source("t", "ts", common::schema())
        .allowed_lateness(Duration::from_millis(c.lateness as u64))
        .output(c.mode)
        .mode(exec);
    if let Some(w) = win {
        b = b.window(w.spec());
    }
    b.build().expect("spec")
}

#[derive(Clone, Debug)]
struct Case {
    triggers: Vec<Vec<Ev>>,
    lateness: i64,
    win: Win,
    pair: (&'static str, &'static str),
    mode: OutputMode,
    workers: usize,
}

fn case(sessions: bool) -> impl Strategy<Value = Case> {
    let pairs = if sessions { SESSION_PAIRS } else { PAIRS };
    (
        common::stream(),
        proptest::sample::select(pairs),
        prop_oneof![
            Just(OutputMode::Append),
            Just(OutputMode::Update),
            Just(OutputMode::Complete)
        ],
        1usize..=2,
        any::<bool>(),
    )
        .prop_map(
            move |((triggers, lateness, win), pair, mode, workers, tumble)| {
                let win = if sessions {
                    Win::Session(win.slide.max(100))
                } else if tumble {
                    Win::Tumble(win.size)
                } else {
                    Win::Hop {
                        size: win.size,
                        slide: win.slide,
                    }
                };
                Case {
                    triggers,
                    lateness,
                    win,
                    pair,
                    mode,
                    workers,
                }
            },
        )
}

/// Both spellings in one engine, fed the same triggers: same plan, same
/// schema, same rows at every trigger.
fn same(c: &Case, exec: ExecMode) -> Result<(), TestCaseError> {
    let mut e = Engine::builder()
        .workers(c.workers)
        .build()
        .expect("engine");
    let (spec_sql, sql_form) = c.pair;
    e.create_view(view("spec", spec_sql, Some(c.win), c, exec))
        .expect("spec view");
    let written = c.win.legacy(&sql_form.replace("{W}", &c.win.call()));
    e.create_view(view("sql", &written, None, c, exec))
        .expect("sql view");
    prop_assert_eq!(
        e.plan("spec").expect("plan"),
        e.plan("sql").expect("plan"),
        "{}",
        e.explain("sql").unwrap_or_default()
    );
    prop_assert_eq!(
        e.output_schema("spec").expect("schema"),
        e.output_schema("sql").expect("schema")
    );
    let mut outs: (Vec<RecordBatch>, Vec<RecordBatch>) = (Vec::new(), Vec::new());
    let mut step = |r: thund::TriggerReport| -> Result<(), TestCaseError> {
        let (a, b) = (r.view("spec").expect("spec"), r.view("sql").expect("sql"));
        prop_assert_eq!(canon(&a.output), canon(&b.output), "per trigger");
        outs.0.extend(a.output.clone());
        outs.1.extend(b.output.clone());
        Ok(())
    };
    for trig in &c.triggers {
        e.push("t", batch(trig)).expect("push");
        step(e.trigger().expect("trigger"))?;
    }
    step(e.finish().expect("finish"))?;
    prop_assert_eq!(
        e.counters("spec").expect("c").late_rows_dropped,
        e.counters("sql").expect("c").late_rows_dropped
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn sql_windows_equal_spec_windows_on_both_paths(c in case(false), recompute in any::<bool>()) {
        same(&c, if recompute { ExecMode::Recompute } else { ExecMode::Auto })?;
    }

    #[test]
    fn sql_sessions_equal_spec_sessions_on_both_paths(c in case(true), recompute in any::<bool>()) {
        same(&c, if recompute { ExecMode::Recompute } else { ExecMode::Auto })?;
    }
}

fn rows(c: u64) -> Vec<Ev> {
    (0..c as i64)
        .map(|i| Ev {
            t: 1_000 + i * 370,
            k: i % 3,
            g: ["a", "b"][i as usize % 2].into(),
            v: Some(i),
            f: 0.5,
        })
        .collect()
}

/// Every emitted row of `view`, trigger by trigger, with `finish`.
fn run_rows(e: &mut Engine, view: &str) -> Vec<RecordBatch> {
    common::emitted(e, "t", batch(&rows(40)), view)
}

/// View `v`'s output column names.
fn names(e: &Engine) -> Vec<String> {
    e.output_schema("v")
        .expect("schema")
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

fn engine_with(sql: &str, window: Option<WindowSpec>) -> Engine {
    engine_on(sql, window, ExecMode::Auto)
}

/// An engine with view `v` of `sql` over `t`, on path `exec`.
fn engine_on(sql: &str, window: Option<WindowSpec>, exec: ExecMode) -> Engine {
    let mut b = ViewSpec::builder("v", sql)
        .source("t", "ts", common::schema())
        .mode(exec);
    if let Some(w) = window {
        b = b.window(w);
    }
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(b.build().expect("spec"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    e
}

/// Every row view `v` of `sql` emits over [`rows`], on path `exec`, canonical.
fn rows_on(sql: &str, window: Option<WindowSpec>, exec: ExecMode) -> Vec<String> {
    canon(&run_rows(&mut engine_on(sql, window, exec), "v"))
}

/// The select list decides where the bounds go and what they are called;
/// bounds not selected are not shown.
#[test]
fn the_query_places_and_names_the_bounds() {
    let tumble = WindowSpec::tumbling(Duration::from_secs(2));
    let mut spec = engine_with(
        "SELECT k, COUNT(*) AS c FROM t GROUP BY k",
        Some(tumble.clone()),
    );
    let want = canon(&run_rows(&mut spec, "v"));
    // `window_start, window_end, k, c` rearranged as `k, c, we, ws`
    let rearranged: Vec<String> = {
        let mut v: Vec<String> = want
            .iter()
            .map(|r| {
                let f: Vec<&str> = r.split('|').collect();
                format!("{}|{}|{}|{}", f[2], f[3], f[1], f[0])
            })
            .collect();
        v.sort();
        v
    };
    let mut sql = engine_with(
        "SELECT k, COUNT(*) AS c, window_end AS we, window_start AS ws \
         FROM TUMBLE(t, ts, INTERVAL '2' SECOND) GROUP BY k, window_start, window_end",
        None,
    );
    let shown = names(&sql);
    assert_eq!(shown, ["k", "c", "we", "ws"]);
    let mut got = canon(&run_rows(&mut sql, "v"));
    got.sort();
    assert_eq!(got, rearranged);
    assert!(
        want.len() > 3,
        "the stream closes several windows: {want:?}"
    );

    // date_bin: a tumbling window whose start the query names
    let mut bin = engine_with(
        "SELECT date_bin(INTERVAL '2 seconds', ts) AS w, k, COUNT(*) AS c FROM t \
         GROUP BY date_bin(INTERVAL '2 seconds', ts), k",
        None,
    );
    let shown = names(&bin);
    assert_eq!(shown, ["w", "k", "c"]);
    let mut got = canon(&run_rows(&mut bin, "v"));
    got.sort();
    let mut start_k_c: Vec<String> = want
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split('|').collect();
            format!("{}|{}|{}", f[0], f[2], f[3])
        })
        .collect();
    start_k_c.sort();
    assert_eq!(got, start_k_c);
    assert!(bin
        .explain("v")
        .expect("explain")
        .contains("per window: SELECT k, COUNT(*) AS c"));
}

fn refused(sql: &str, window: Option<WindowSpec>) -> String {
    let mut b = ViewSpec::builder("v", sql).source("t", "ts", common::schema());
    if let Some(w) = window {
        b = b.window(w);
    }
    let mut e = Engine::builder().build().expect("engine");
    match b.build().and_then(|spec| e.create_view(spec)) {
        Ok(()) => panic!("accepted: {sql}"),
        Err(err) => {
            // the engine stays usable
            e.create_view(
                ViewSpec::builder("ok", "SELECT COUNT(*) AS c FROM t")
                    .source("t", "ts", common::schema())
                    .window(WindowSpec::tumbling(Duration::from_secs(1)))
                    .build()
                    .expect("spec"),
            )
            .expect("a good view after a refused one");
            err.to_string()
        }
    }
}

#[test]
fn malformed_window_calls_name_the_call_and_its_position() {
    let cases: &[(&str, Option<WindowSpec>, &[&str])] = &[
        (
            "SELECT k, COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY k",
            Some(WindowSpec::tumbling(Duration::from_secs(1))),
            &["declared twice", "line 1, column 30", "[window]"],
        ),
        (
            "SELECT k, COUNT(*) AS c\nFROM TUMBLE(t, k, INTERVAL '1' SECOND) GROUP BY k",
            None,
            &["windows by `k`", "event time `ts`", "line 2, column 6"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(bids, ts, INTERVAL '1' SECOND)",
            None,
            &["`bids`", "not a source", "its sources: t"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' MONTH)",
            None,
            &["not a fixed duration"],
        ),
        // Flink's legacy group windows: their calls checked as the table functions' are
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, TUMBLE(ts)",
            None,
            &["`TUMBLE(ts)`", "line 1, column 44", "takes 2 arguments", "TUMBLE(time_column, INTERVAL size)"],
        ),
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY HOP(ts, INTERVAL '2' SECOND, INTERVAL '1' SECOND), k",
            None,
            &["line 1, column 41", "the slide (second argument) must not exceed the size (third)"],
        ),
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, TUMBLE(k, INTERVAL '1' SECOND)",
            None,
            &["windows by `k`", "event time `ts`"],
        ),
        (
            "SELECT k, TUMBLE_START(ts, INTERVAL '2' SECOND) AS s, COUNT(*) AS c FROM t \
             GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)",
            None,
            &["`TUMBLE_START(ts, INTERVAL '2' SECOND)` (line 1, column 11) is not a bound of the window the query declares", "`TUMBLE(ts, INTERVAL '1' SECOND)` (line 1, column 88)"],
        ),
        (
            "SELECT k, HOP_END(ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND) AS e, COUNT(*) AS c \
             FROM t GROUP BY k",
            None,
            &["`HOP_END(ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND)` (line 1, column 11)", "none: group by `HOP(…)` to declare one"],
        ),
        (
            "SELECT k, SESSION_PROCTIME(ts, INTERVAL '1' SECOND) AS r, COUNT(*) AS c FROM t \
             GROUP BY k, SESSION(ts, INTERVAL '1' SECOND)",
            None,
            &["`SESSION_PROCTIME(ts, INTERVAL '1' SECOND)` (line 1, column 11)", "no processing time", "SESSION_ROWTIME"],
        ),
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND) \
             HAVING TUMBLE_END(ts, INTERVAL '1' SECOND) > 0",
            None,
            &["in HAVING uses the window bound `TUMBLE_END(ts, INTERVAL '1' SECOND) (line 1, column 83)`"],
        ),
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND), \
             TUMBLE(ts, INTERVAL '2' SECOND)",
            None,
            &["two different windows", "line 1, column 44", "line 1, column 77"],
        ),
        // a date_bin selected is the declared window's start only if it is that window
        (
            "SELECT k, date_bin(INTERVAL '2 seconds', ts) AS w, COUNT(*) AS c FROM t \
             GROUP BY k, date_bin(INTERVAL '1 second', ts)",
            None,
            &[
                "`date_bin(INTERVAL '2 seconds', ts)` (line 1, column 11)",
                "not the window the query declares",
                "date_bin(INTERVAL '1 second', ts)",
            ],
        ),
        (
            "SELECT k % 3 AS b, COUNT(*) AS c FROM SESSION(t, ts, INTERVAL '1' SECOND) \
             GROUP BY k % 3, window_start, window_end",
            None,
            &[
                "a session's key",
                "`k % 3` (line 1, column ",
                "not a column",
            ],
        ),
        // months and years, however spelled, are no fixed duration
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1 month')",
            None,
            &["`month` is not a fixed duration", "line 1, column 50"],
        ),
        // a negative offset's fault is said of it as written
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND, INTERVAL '-3' MONTH)",
            None,
            &["`INTERVAL '-3' MONTH`: MONTH is not a fixed duration"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND, INTERVAL '-1.5' MILLISECOND)",
            None,
            &["`INTERVAL '-1.5' MILLISECOND` must be a whole number of milliseconds"],
        ),
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, date_bin(INTERVAL '2 YEARS', ts)",
            None,
            &["`YEARS` is not a fixed duration", "date_bin"],
        ),
        (
            "SELECT COUNT(*) AS c FROM SESSION(t, ts, INTERVAL '1M')",
            None,
            &["minutes or months", "`min`"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1 month' SECOND)",
            None,
            &["give only a number"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' MICROSECOND)",
            None,
            &["whole milliseconds"],
        ),
        // a size past the longest duration a spec takes, in each call, with
        // its position (the spec's own check named no call)
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '9999999999999' DAY)",
            None,
            &["`INTERVAL '9999999999999' DAY` is too large", "line 1, column 50"],
        ),
        (
            "SELECT COUNT(*) AS c FROM HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '9999999999999' DAY)",
            None,
            &["is too large", "line 1, column 68"],
        ),
        (
            "SELECT COUNT(*) AS c FROM SESSION(t, ts, INTERVAL '9999999999999' DAY)",
            None,
            &["is too large", "SESSION"],
        ),
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, date_bin(INTERVAL '9999999999999 days', ts)",
            None,
            &["is too large", "date_bin"],
        ),
        (
            "SELECT COUNT(*) AS c FROM HOP(t, ts, INTERVAL '10' SECOND, INTERVAL '2' SECOND)",
            None,
            &["must not exceed the size"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts)",
            None,
            &[
                "takes 3 or 4 arguments",
                "TUMBLE(source, time_column, INTERVAL size [, INTERVAL offset])",
            ],
        ),
        (
            "SELECT COUNT(*) AS c FROM SESSION(t, ts, INTERVAL '1' SECOND, INTERVAL '1' SECOND)",
            None,
            &["takes 3 arguments", "SESSION(source, time_column, INTERVAL gap)"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND, INTERVAL '1' MONTH)",
            None,
            &["not a fixed duration", "line 1, column 71"],
        ),
        // one window: the same size with another offset is another window
        (
            "SELECT a.c FROM (SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND)) AS a \
             JOIN (SELECT COUNT(*) AS d FROM TUMBLE(t, ts, INTERVAL '1' SECOND, INTERVAL '1' MILLISECOND)) \
             AS b ON a.c = b.d",
            None,
            &["two different windows", "INTERVAL '1' MILLISECOND"],
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, 1000)",
            None,
            &["`1000` is not an INTERVAL"],
        ),
        (
            "SELECT window_start + INTERVAL '1' SECOND AS later, COUNT(*) AS c \
             FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY window_start, window_end",
            None,
            &[
                "the select list",
                "window bound `window_start",
                "compute nothing",
            ],
        ),
        (
            "SELECT a.c FROM (SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND)) AS a \
             JOIN (SELECT COUNT(*) AS d FROM TUMBLE(t, ts, INTERVAL '2' SECOND)) AS b ON a.c = b.d",
            None,
            &["two different windows", "INTERVAL '2' SECOND"],
        ),
        (
            "SELECT window_start, window_end FROM TUMBLE(t, ts, INTERVAL '1' SECOND) \
             GROUP BY window_start, window_end",
            None,
            &["selects only window bounds"],
        ),
        // `*` over a subquery whose bounds were taken out would drop them
        (
            "SELECT * FROM (SELECT k, window_start, COUNT(*) AS c \
             FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY k, window_start, window_end) AS x",
            None,
            &[
                "`*` in the select list",
                "selects `window_start` (line 1, column 26)",
                "name the columns",
            ],
        ),
        (
            "WITH w AS (SELECT k, window_end AS e, COUNT(*) AS c \
             FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY k, window_start, window_end) \
             SELECT w.* FROM w",
            None,
            &["`w.*` in the select list", "selects `window_end AS e`"],
        ),
        (
            "SELECT * FROM (SELECT * FROM TUMBLE(t, ts, INTERVAL '1' SECOND)) AS x",
            None,
            &["the bounds of `TUMBLE(t, ts, INTERVAL '1' SECOND)`"],
        ),
    ];
    for (sql, window, wants) in cases {
        let msg = refused(sql, window.clone());
        for w in *wants {
            assert!(
                msg.contains(w),
                "{sql}\n  error: {msg}\n  should contain: {w}"
            );
        }
    }
    // the same `*`s where the subquery selects no bound, or the window
    // function is the select's own: taken
    for sql in [
        "SELECT * FROM (SELECT k, COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND) \
         GROUP BY k, window_start, window_end) AS x",
        "SELECT x.* FROM TUMBLE(t, ts, INTERVAL '1' SECOND) AS x",
    ] {
        let _ = engine_with(sql, None);
    }
}

/// A window function's name in a string, or SQL the window parser does not
/// take, declares no window: the spec's window holds, and DataFusion judges
/// the SQL.
#[test]
fn only_a_call_declares_a_window() {
    let mut e = engine_with(
        "SELECT g, COUNT(*) AS c FROM t WHERE g <> 'TUMBLE(t, ts, INTERVAL ''1'' SECOND)' GROUP BY g",
        Some(WindowSpec::tumbling(Duration::from_secs(2))),
    );
    assert!(!run_rows(&mut e, "v").is_empty());
    let shown = names(&e);
    assert_eq!(shown, ["window_start", "window_end", "g", "c"]);
    // SQL that does not parse says so first, not that it lacks a window
    // (the window may be what could not be read)
    let msg = refused("SELECT date_bin( FROM t", None);
    assert!(
        msg.contains("invalid SQL") && msg.contains("Expected"),
        "{msg}"
    );
    let msg = refused("SELECT COUNT(*) AS c FROM t", None);
    assert!(msg.contains("needs a window"), "{msg}");
}

/// An interval's units are read in any letter case, with SQL's names of the
/// units below a second, and give the window a spec of the same duration
/// gives; in TOML too. Months and years are refused in every form.
#[test]
fn interval_units_read_in_any_case_equal_the_spec() {
    let mut spec = engine_with(
        "SELECT k, COUNT(*) AS c FROM t GROUP BY k",
        Some(WindowSpec::tumbling(Duration::from_secs(2))),
    );
    let want = canon(&run_rows(&mut spec, "v"));
    assert!(want.len() > 3, "several windows close: {want:?}");
    for interval in [
        "INTERVAL '2' SECOND",
        "INTERVAL '2' SECONDS",
        "INTERVAL '2 SECONDS'",
        "INTERVAL '2 Seconds'",
        "INTERVAL '2000 MILLISECONDS'",
        "INTERVAL '2s'",
    ] {
        let mut e = engine_with(
            &format!(
                "SELECT window_start, window_end, k, COUNT(*) AS c \
                 FROM TUMBLE(t, ts, {interval}) GROUP BY k, window_start, window_end"
            ),
            None,
        );
        assert_eq!(canon(&run_rows(&mut e, "v")), want, "{interval}");
    }
    let toml = |size: &str| {
        format!(
            "name = \"v\"\nsql = \"SELECT k, COUNT(*) AS c FROM t GROUP BY k\"\n\
             [[source]]\nname = \"t\"\nevent_time = \"ts\"\n\
             schema = \"k BIGINT, ts TIMESTAMP\"\n\
             [window]\nkind = \"tumbling\"\nsize = \"{size}\"\n"
        )
    };
    let read = ViewSpec::from_toml(&toml("2 SECONDS")).expect("toml");
    let written = ViewSpec::from_toml(&toml("2s")).expect("toml");
    assert_eq!(
        format!("{:?}", read.window),
        format!("{:?}", written.window)
    );
    for size in ["1month", "1 YEAR", "1y", "1M"] {
        let msg = ViewSpec::from_toml(&toml(size))
            .map(|_| "accepted".to_string())
            .unwrap_or_else(|e| e.to_string());
        assert!(
            msg.contains("size") && msg.contains("refused") && msg.contains("month"),
            "{size}: {msg}"
        );
    }
}

/// Flink's `window_time` (and its legacy `TUMBLE_ROWTIME`) is the window's
/// last millisecond: each row's `window_end` less 1 ms, where and as the
/// query selects it (also grouped by), on both paths and in Update mode, and
/// last of the columns `*` shows; the rest of each row is the spec's. `TUMBLE_PROCTIME`, a bound in arithmetic
/// and a source column named `window_time` are refused, naming them.
#[test]
fn window_time_is_the_windows_last_millisecond() {
    use arrow::array::{Array, Int64Array};
    let millis = |b: &RecordBatch, name: &str| -> Vec<i64> {
        let col = b
            .column_by_name(name)
            .unwrap_or_else(|| panic!("no {name}"));
        let col = arrow::compute::cast(col, &arrow::datatypes::DataType::Int64).expect("cast");
        let col = col.as_any().downcast_ref::<Int64Array>().expect("i64");
        (0..col.len()).map(|i| col.value(i)).collect()
    };
    let queries = [
        "SELECT window_time AS wt, window_end AS we, k, COUNT(*) AS c \
         FROM TUMBLE(t, ts, INTERVAL '2' SECOND) GROUP BY k, window_start, window_end, window_time",
        "SELECT TUMBLE_ROWTIME(ts, INTERVAL '2' SECOND) AS wt, \
         TUMBLE_END(ts, INTERVAL '2' SECOND) AS we, k, COUNT(*) AS c \
         FROM t GROUP BY TUMBLE(ts, INTERVAL '2' SECOND), k",
        "SELECT window_time AS wt, window_end AS we, k, COUNT(*) AS c \
         FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND)) \
         GROUP BY window_start, window_end, k",
    ];
    for (sql, window) in queries.iter().zip([
        WindowSpec::tumbling(Duration::from_secs(2)),
        WindowSpec::tumbling(Duration::from_secs(2)),
        WindowSpec::hopping(Duration::from_secs(3), Duration::from_secs(1)),
    ]) {
        let want = canon(&run_rows(
            &mut engine_with("SELECT k, COUNT(*) AS c FROM t GROUP BY k", Some(window)),
            "v",
        ));
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let out = run_rows(&mut engine_on(sql, None, exec), "v");
            let (mut ends, mut times) = (Vec::new(), Vec::new());
            for b in &out {
                ends.extend(millis(b, "we"));
                times.extend(millis(b, "wt"));
            }
            assert!(ends.len() > 3, "{sql}: several windows close");
            let last: Vec<i64> = ends.iter().map(|e| e - 1).collect();
            assert_eq!(times, last, "{sql} {exec:?}");
            // the rest of each row: the spec's window end, key and count
            let mut rest: Vec<String> = canon(&out)
                .iter()
                .map(|r| r.split_once('|').expect("wt|…").1.to_string())
                .collect();
            rest.sort();
            let mut spec: Vec<String> = want
                .iter()
                .map(|r| r.split_once('|').expect("ws|…").1.to_string())
                .collect();
            spec.sort();
            assert_eq!(rest, spec, "{sql} {exec:?}");
        }
    }
    // Update mode: each changed row carries its window's last millisecond
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(
        ViewSpec::builder("v", queries[0])
            .source("t", "ts", common::schema())
            .output(OutputMode::Update)
            .build()
            .expect("spec"),
    )
    .expect("view");
    let out = run_rows(&mut e, "v");
    let times: Vec<i64> = out.iter().flat_map(|b| millis(b, "wt")).collect();
    let ends: Vec<i64> = out.iter().flat_map(|b| millis(b, "we")).collect();
    assert!(!ends.is_empty());
    assert_eq!(times, ends.iter().map(|e| e - 1).collect::<Vec<_>>());
    // `*` over a window function: the source's columns, then the bounds and
    // `window_time`, as Flink's window table functions give them
    for sql in [
        "SELECT * FROM TUMBLE(t, ts, INTERVAL '2' SECOND)",
        "SELECT * FROM TABLE(HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '2' SECOND))",
    ] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let mut e = engine_on(sql, None, exec);
            let shown = names(&e);
            let mut want: Vec<String> = common::schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect();
            want.extend(["window_start", "window_end", "window_time"].map(String::from));
            assert_eq!(shown, want, "{sql} {exec:?}");
            let out = run_rows(&mut e, "v");
            let times: Vec<i64> = out.iter().flat_map(|b| millis(b, "window_time")).collect();
            let ends: Vec<i64> = out.iter().flat_map(|b| millis(b, "window_end")).collect();
            assert!(ends.len() > 3, "{sql}: rows in several windows");
            assert_eq!(times, ends.iter().map(|e| e - 1).collect::<Vec<_>>(), "{sql}");
        }
    }
    for (sql, want) in [
        (
            "SELECT TUMBLE_PROCTIME(ts, INTERVAL '2' SECOND) AS p, COUNT(*) AS c \
             FROM t GROUP BY TUMBLE(ts, INTERVAL '2' SECOND)",
            &["TUMBLE_PROCTIME", "no processing time", "TUMBLE_ROWTIME"][..],
        ),
        (
            "SELECT window_time + INTERVAL '1' SECOND AS x, COUNT(*) AS c \
             FROM TUMBLE(t, ts, INTERVAL '2' SECOND) GROUP BY window_start, window_end",
            &["window_time"],
        ),
    ] {
        let msg = refused(sql, None);
        for w in want {
            assert!(msg.contains(w), "{sql}: {w}: {msg}");
        }
    }
    let mut e = Engine::builder().build().expect("engine");
    let msg = e
        .execute_sql(
            "CREATE SOURCE s (k BIGINT, window_time BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts);
             CREATE VIEW v AS SELECT k, COUNT(*) AS c FROM TUMBLE(s, ts, INTERVAL '2' SECOND) \
             GROUP BY k, window_start, window_end;",
        )
        .expect_err("a source column named window_time")
        .to_string();
    assert!(
        msg.contains("`window_time`") && msg.contains("rename it"),
        "{msg}"
    );
}

/// A day-time interval in several fields, as the SQL standard and Flink
/// write it (`INTERVAL '1:30' MINUTE TO SECOND`), is the sum of its fields:
/// the rows of the spec of that duration, as a size, a slide, an offset
/// (also negative) and a watermark's delay. A field out of its range, a text
/// that does not match the fields, and months are refused naming the interval.
#[test]
fn intervals_in_several_fields_read_as_their_sum() {
    let ms = Duration::from_millis;
    for (interval, size) in [
        ("INTERVAL '0:02' MINUTE TO SECOND", ms(2_000)),
        ("INTERVAL '0:00:02.5' HOUR TO SECOND", ms(2_500)),
        ("INTERVAL '0 00:00:03' DAY TO SECOND(3)", ms(3_000)),
        ("INTERVAL '0:01.250' MINUTE TO SECOND", ms(1_250)),
    ] {
        let want = rows_on(
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k",
            Some(WindowSpec::tumbling(size)),
            ExecMode::Auto,
        );
        assert!(want.len() > 3, "several windows close: {want:?}");
        let got = rows_on(
            &format!(
                "SELECT window_start, window_end, k, COUNT(*) AS c \
                 FROM TUMBLE(t, ts, {interval}) GROUP BY k, window_start, window_end"
            ),
            None,
            ExecMode::Auto,
        );
        assert_eq!(got, want, "{interval}");
    }
    // as HOP's slide and size, and as a negative offset, on both paths
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let want = rows_on(
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k",
            Some(WindowSpec::hopping(ms(3_000), ms(1_500)).with_offset(ms(1_500 - 700))),
            exec,
        );
        let got = rows_on(
            "SELECT window_start, window_end, k, COUNT(*) AS c \
             FROM HOP(t, ts, INTERVAL '0:01.5' MINUTE TO SECOND, \
             INTERVAL '0:00:03' HOUR TO SECOND, INTERVAL '-0:00.7' MINUTE TO SECOND) \
             GROUP BY k, window_start, window_end",
            None,
            exec,
        );
        assert_eq!(got, want, "{exec:?}");
    }
    let watermark = |delay: &str| {
        let mut e = Engine::builder().build().expect("engine");
        e.execute_sql(&format!(
            "CREATE SOURCE bids (auction BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - {delay});
             CREATE VIEW v AS SELECT auction, COUNT(*) AS n
             FROM TUMBLE(bids, ts, INTERVAL '2' SECOND) GROUP BY auction, window_start, window_end;"
        ))
        .unwrap_or_else(|err| panic!("{delay}: {err}"));
        e.explain("v").expect("explain")
    };
    assert_eq!(
        watermark("INTERVAL '0:01:30' HOUR TO SECOND"),
        watermark("INTERVAL '90' SECOND")
    );
    for (interval, want) in [
        (
            "INTERVAL '1:60' MINUTE TO SECOND",
            &["60 seconds is out of range", "at most 59"][..],
        ),
        (
            "INTERVAL '1 24:00' DAY TO MINUTE",
            &["24 hours is out of range"],
        ),
        (
            "INTERVAL '1:30' HOUR TO SECOND",
            &["give HOUR TO SECOND as 'H:MM:SS'"],
        ),
        ("INTERVAL '1 2:3' DAY TO SECOND", &["as 'D HH:MM:SS'"]),
        ("INTERVAL '1:3x' MINUTE TO SECOND", &["as 'M:SS'"]),
        ("INTERVAL '1.5:00' MINUTE TO SECOND", &["as 'M:SS'"]),
        (
            "INTERVAL '0:01.0005' MINUTE TO SECOND",
            &["whole number of milliseconds"],
        ),
        ("INTERVAL '0:00' MINUTE TO SECOND", &["positive"]),
        (
            "INTERVAL '1-2' YEAR TO MONTH",
            &["YEAR TO MONTH", "not a fixed duration"],
        ),
        (
            "INTERVAL '1:30' MINUTE TO HOUR",
            &["from a larger field to a smaller one"],
        ),
        (
            "INTERVAL '99999999999999999999999999999999999999999:00' MINUTE TO SECOND",
            &["too large"],
        ),
        (
            "INTERVAL '3000000000000000:00' MINUTE TO SECOND",
            &["too large"],
        ),
        // u128::MAX milliseconds lie between 31.455 and 31.456 seconds past these minutes
        (
            "INTERVAL '5671372782015641057722910123862803:31.456' MINUTE TO SECOND",
            &["too large"],
        ),
    ] {
        let msg = refused(
            &format!(
                "SELECT k, COUNT(*) AS c FROM TUMBLE(t, ts, {interval}) \
                 GROUP BY k, window_start, window_end"
            ),
            None,
        );
        assert!(msg.contains(&format!("`{interval}`")), "{interval}: {msg}");
        for w in want {
            assert!(msg.contains(w), "{interval}: {w}: {msg}");
        }
    }
}

/// Flink's spelling of a window call's first two arguments, `TABLE t` and
/// `DESCRIPTOR(ts)` (any case, any spacing), is the plain one: the same rows
/// on both paths, through the spec and through DDL; an error further on in
/// the call points at the column where the user wrote it.
#[test]
fn flinks_table_and_descriptor_arguments_read_as_the_plain_names() {
    for win in [
        Win::Tumble(2_000),
        Win::Hop {
            size: 3_000,
            slide: 1_000,
        },
        Win::Session(500),
    ] {
        let sql = |call: &str| {
            format!(
                "SELECT window_start, window_end, k, COUNT(*) AS c, SUM(v) AS s \
                 FROM {call} GROUP BY k, window_start, window_end"
            )
        };
        let plain = win.call();
        let flink = plain.replacen("(t, ts,", "( TABLE t ,descriptor (ts),", 1);
        assert_ne!(plain, flink, "{plain}");
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let run = |call: &str| rows_on(&sql(call), None, exec);
            let want = run(&plain);
            assert!(want.len() > 3, "{plain}: several windows close: {want:?}");
            assert_eq!(run(&flink), want, "{flink} on {exec:?}");
        }
        // through DDL, whose check of the sources read parses the query too
        let ddl = |call: &str| {
            let mut e = Engine::builder().build().expect("engine");
            e.execute_sql(&format!(
                "CREATE SOURCE t (k BIGINT, g VARCHAR, v BIGINT, f DOUBLE, ts TIMESTAMP, \
                 d DECIMAL(10, 2), WATERMARK FOR ts AS ts);\nCREATE VIEW v AS {}",
                sql(call)
            ))
            .unwrap_or_else(|e| panic!("{call}: {e}"));
            canon(&run_rows(&mut e, "v"))
        };
        assert_eq!(ddl(&flink), ddl(&plain), "{flink} through DDL");
    }
    let bad = "SELECT COUNT(*) AS c FROM TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '1' MONTH)";
    let column = bad.find("'1'").expect("literal") + 1;
    let msg = refused(bad, None);
    assert!(
        msg.contains("not a fixed duration") && msg.contains(&format!("line 1, column {column}")),
        "{msg}"
    );
}

/// Flink's other spellings: the `TABLE(…)` around a call in `FROM`, named
/// arguments (`SIZE => …`, any order), and a session's `PARTITION BY`, which
/// keys the sessions (and must be grouped by). Each gives the plain call's
/// rows on both paths (and through DDL); a misspelt one is refused, naming
/// the call, where it is, and what is wrong.
#[test]
fn flinks_wrapper_named_arguments_and_partition_by_read_as_written() {
    let grouped = |call: &str, by: &str| {
        format!(
            "SELECT window_start, window_end, k, COUNT(*) AS c, SUM(v) AS s \
             FROM {call} GROUP BY {by}, window_start, window_end"
        )
    };
    let g = |call: &str| grouped(call, "k");
    let cases = [
        (
            g("TUMBLE(t, ts, INTERVAL '2' SECOND)"),
            g("TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND))"),
        ),
        (
            g("TUMBLE(t, ts, INTERVAL '2' SECOND)"),
            g(
                "TABLE(\n  TUMBLE(\n    DATA => TABLE t,\n    TIMECOL => DESCRIPTOR(ts),\n    \
               size => INTERVAL '2' SECOND)) AS w",
            ),
        ),
        // named in another order: the names, not the places, decide
        (
            g("HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND)"),
            g("HOP(TABLE t, DESCRIPTOR(ts), SIZE => INTERVAL '3' SECOND, \
               SLIDE => INTERVAL '1' SECOND)"),
        ),
        (
            g("TUMBLE(t, ts, INTERVAL '2' SECOND, INTERVAL '500' MILLISECOND)"),
            g("TABLE(TUMBLE(TIMECOL => DESCRIPTOR(ts), DATA => TABLE t, \
               OFFSET => INTERVAL '500' MILLISECOND, SIZE => INTERVAL '2' SECOND))"),
        ),
        (
            g("SESSION(t, ts, INTERVAL '500' MILLISECOND)"),
            g("TABLE(SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), \
               INTERVAL '500' MILLISECOND))"),
        ),
        (
            grouped("SESSION(t, ts, INTERVAL '500' MILLISECOND)", "g, k"),
            grouped(
                "SESSION(DATA => TABLE t PARTITION BY (k, g), TIMECOL => DESCRIPTOR(ts), \
                 GAP => INTERVAL '500' MILLISECOND)",
                "g, k",
            ),
        ),
    ];
    for (plain, flink) in &cases {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let want = rows_on(plain, None, exec);
            assert!(want.len() > 3, "{plain}: several windows close: {want:?}");
            assert_eq!(rows_on(flink, None, exec), want, "{flink} on {exec:?}");
        }
        let ddl = |sql: &str| {
            let mut e = Engine::builder().build().expect("engine");
            e.execute_sql(&format!(
                "CREATE SOURCE t (k BIGINT, g VARCHAR, v BIGINT, f DOUBLE, ts TIMESTAMP, \
                 d DECIMAL(10, 2), WATERMARK FOR ts AS ts);\nCREATE VIEW v AS {sql}"
            ))
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
            canon(&run_rows(&mut e, "v"))
        };
        assert_eq!(ddl(flink), ddl(plain), "{flink} through DDL");
    }
    // a partition narrower than the GROUP BY keys the sessions, and the
    // query groups each session's rows by the rest: the spec's session key
    // beside a longer GROUP BY (on the recompute path, which says why)
    // (a key's rows are 1.11 s apart, a key's and `g`'s 2.22 s: a gap of
    // 1.5 s makes one session of each key's rows, and each row one session
    // of its `k` and `g`)
    let by_k = grouped(
        "SESSION(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1500' MILLISECOND)",
        "k, g",
    );
    let gap = Duration::from_millis(1_500);
    let spec = rows_on(
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k, g",
        Some(WindowSpec::session(gap, &["k"])),
        ExecMode::Recompute,
    );
    assert!(spec.len() > 3, "several groups: {spec:?}");
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        assert_eq!(rows_on(&by_k, None, exec), spec, "{by_k} on {exec:?}");
    }
    let by_kg = rows_on(
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k, g",
        Some(WindowSpec::session(gap, &["k", "g"])),
        ExecMode::Recompute,
    );
    assert_ne!(by_kg, spec, "the partition keys the sessions");
    let why = engine_with(&by_k, None)
        .plan("v")
        .expect("plan")
        .to_string();
    assert!(why.contains("not the session key (k)"), "{why}");
    // the partition must be grouped by: sessions of `g` would share a group
    let by_g = g("SESSION(TABLE t PARTITION BY g, DESCRIPTOR(ts), INTERVAL '500' MILLISECOND)");
    let at = by_g.find("SESSION").expect("call") + 1;
    for (sql, says) in [
        (
            by_g.as_str(),
            format!(
                "line 1, column {at}): its PARTITION BY (g) must be among the query's other \
                 GROUP BY columns (k): group by `g` too"
            ),
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(TABLE t PARTITION BY k, DESCRIPTOR(ts), INTERVAL '1' SECOND)",
            "PARTITION BY keys a SESSION only".into(),
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, WIDTH => INTERVAL '1' SECOND)",
            "no parameter is named `WIDTH` (its parameters: DATA, TIMECOL, SIZE, OFFSET)".into(),
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, ts, INTERVAL '1' SECOND, SIZE => INTERVAL '2' SECOND)",
            "SIZE is given twice".into(),
        ),
        (
            "SELECT COUNT(*) AS c FROM TUMBLE(t, TIMECOL => ts, INTERVAL '1' SECOND)",
            "the plain argument `INTERVAL '1' SECOND` follows the named argument `TIMECOL => ts`".into(),
        ),
        (
            "SELECT COUNT(*) AS c FROM HOP(t, ts, SIZE => INTERVAL '2' SECOND)",
            "takes 4 or 5 arguments (SLIDE missing)".into(),
        ),
        (
            "SELECT COUNT(*) AS c FROM TABLE(CUMULATE(TABLE t, DESCRIPTOR(ts), \
             INTERVAL '1' SECOND, INTERVAL '4' SECOND))",
            "(line 1, column 33): CUMULATE windows are not supported".into(),
        ),
    ] {
        let msg = refused(sql, None);
        assert!(msg.contains(&says), "{sql}: {msg}");
    }
}

/// Flink's optional last argument of `TUMBLE` and `HOP`, the offset, is the
/// spec's `offset`: the same rows on both paths, and not those of the grid
/// it shifts.
#[test]
fn an_offset_argument_equals_the_spec_offset() {
    let ms = Duration::from_millis;
    for (call, unshifted, window) in [
        (
            "TUMBLE(t, ts, INTERVAL '2' SECOND, INTERVAL '500' MILLISECOND)",
            "TUMBLE(t, ts, INTERVAL '2' SECOND)",
            WindowSpec::tumbling(ms(2_000)).with_offset(ms(500)),
        ),
        // an offset beyond the size shifts by its remainder
        (
            "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '2300' MILLISECOND)",
            "TUMBLE(t, ts, INTERVAL '2' SECOND)",
            WindowSpec::tumbling(ms(2_000)).with_offset(ms(2_300)),
        ),
        (
            "HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND, INTERVAL '300' MILLISECOND)",
            "HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND)",
            WindowSpec::hopping(ms(3_000), ms(1_000)).with_offset(ms(300)),
        ),
        // a negative offset (Flink takes both spellings) shifts back by it:
        // forward by the step (size, or slide) less its remainder
        (
            "TUMBLE(t, ts, INTERVAL '2' SECOND, INTERVAL '-500' MILLISECOND)",
            "TUMBLE(t, ts, INTERVAL '2' SECOND)",
            WindowSpec::tumbling(ms(2_000)).with_offset(ms(2_000 - 500)),
        ),
        (
            "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '2' SECOND, -INTERVAL '2300' MILLISECOND)",
            "TUMBLE(t, ts, INTERVAL '2' SECOND)",
            WindowSpec::tumbling(ms(2_000)).with_offset(ms(2_000 - 300)),
        ),
        (
            "HOP(DATA => TABLE t, TIMECOL => DESCRIPTOR(ts), SLIDE => INTERVAL '1' SECOND, \
             SIZE => INTERVAL '3' SECOND, OFFSET => INTERVAL '-1300' MILLISECOND)",
            "HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND)",
            WindowSpec::hopping(ms(3_000), ms(1_000)).with_offset(ms(1_000 - 300)),
        ),
    ] {
        let sql = |call: &str| {
            format!(
                "SELECT window_start, window_end, k, COUNT(*) AS c, SUM(v) AS s \
                 FROM {call} GROUP BY k, window_start, window_end"
            )
        };
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let want = rows_on(
                "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
                Some(window.clone()),
                exec,
            );
            assert!(want.len() > 3, "{call}: several windows close: {want:?}");
            assert_eq!(rows_on(&sql(call), None, exec), want, "{call} on {exec:?}");
            assert_ne!(
                rows_on(&sql(unshifted), None, exec),
                want,
                "{call} shifts its windows"
            );
        }
    }
    // an offset of zero (either sign) shifts nothing
    for zero in ["INTERVAL '0' SECOND", "INTERVAL '-0' MILLISECOND"] {
        let sql = format!(
            "SELECT window_start, window_end, k, COUNT(*) AS c \
             FROM TUMBLE(t, ts, INTERVAL '2' SECOND, {zero}) GROUP BY k, window_start, window_end"
        );
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let want = rows_on(
                "SELECT k, COUNT(*) AS c FROM t GROUP BY k",
                Some(WindowSpec::tumbling(ms(2_000))),
                exec,
            );
            assert_eq!(rows_on(&sql, None, exec), want, "{zero} on {exec:?}");
        }
    }
}

/// Two window calls whose offsets differ by whole sizes (tumbling) or
/// slides (hopping) declare the same windows: the query is read as one
/// window, the rows those of the same query with equal offsets, on both
/// paths; offsets that differ otherwise are still two windows.
#[test]
fn offsets_equal_modulo_the_grid_are_one_window() {
    let q7 = |a: &str, b: &str| {
        format!(
            "SELECT window_start, window_end, k, v FROM {a} \
             WHERE v = (SELECT MAX(v) FROM {b})"
        )
    };
    let tumble =
        |off: u32| format!("TUMBLE(t, ts, INTERVAL '2' SECOND, INTERVAL '{off}' MILLISECOND)");
    let hop = |off: u32| {
        format!(
            "HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND, INTERVAL '{off}' MILLISECOND)"
        )
    };
    for (a, b, same) in [
        (tumble(500), tumble(2_500), tumble(500)),
        (hop(300), hop(2_300), hop(300)),
    ] {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let want = rows_on(&q7(&same, &same), None, exec);
            assert!(want.len() > 3, "{a}: several windows close: {want:?}");
            assert_eq!(
                rows_on(&q7(&a, &b), None, exec),
                want,
                "{a} / {b} on {exec:?}"
            );
        }
    }
    let err = ViewSpec::builder("v", &q7(&hop(300), &hop(400)))
        .source("t", "ts", common::schema())
        .build()
        .expect_err("two windows");
    assert!(err.to_string().contains("two different windows"), "{err}");
}

/// `date_bin`'s origin (PostgreSQL requires one) aligns its bins as the
/// offset does: the origin's time modulo the size, however the origin is
/// written, before or after the epoch; a select-list `date_bin` of another
/// origin is another window, and an origin that is no timestamp is refused.
#[test]
fn a_date_bin_origin_is_an_offset() {
    let by_offset = "SELECT window_start AS b, k, COUNT(*) AS c, SUM(v) AS s \
        FROM TUMBLE(t, ts, INTERVAL '2' SECOND, INTERVAL '500' MILLISECOND) \
        GROUP BY k, window_start, window_end";
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let run = |sql: &str| rows_on(sql, None, exec);
        let want = run(by_offset);
        assert!(want.len() > 3, "several windows close: {want:?}");
        for origin in [
            "TIMESTAMP '1970-01-01 00:00:00.500'",
            "TIMESTAMP '2020-01-01T00:00:00.500'",
            "'1969-12-31 23:59:58.500'",
        ] {
            let bin = format!("date_bin(INTERVAL '2 seconds', ts, {origin})");
            let sql = format!(
                "SELECT {bin} AS b, k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k, {bin}"
            );
            assert_eq!(run(&sql), want, "{origin} on {exec:?}");
        }
        let unshifted = "SELECT date_bin(INTERVAL '2 seconds', ts) AS b, k, COUNT(*) AS c, \
            SUM(v) AS s FROM t GROUP BY k, date_bin(INTERVAL '2 seconds', ts)";
        assert_ne!(run(unshifted), want, "the origin shifts the bins");
    }
    for (sql, wants) in [
        (
            "SELECT k, COUNT(*) AS c FROM t GROUP BY k, \
             date_bin(INTERVAL '2 seconds', ts, TIMESTAMP 'yesterday')",
            &["the origin `TIMESTAMP 'yesterday'` is not a timestamp"][..],
        ),
        (
            "SELECT date_bin(INTERVAL '2 seconds', ts, TIMESTAMP '1970-01-01 00:00:01') AS b, \
             COUNT(*) AS c FROM t GROUP BY date_bin(INTERVAL '2 seconds', ts)",
            &["not the window the query declares"][..],
        ),
    ] {
        let msg = refused(sql, None);
        for w in wants {
            assert!(msg.contains(w), "{sql}\n  {msg}\n  should contain: {w}");
        }
    }
}

/// A hopping window puts each row in up to ⌈size / slide⌉ windows, each a
/// result of its own: up to a million are taken, in either spelling, and
/// more are refused when the view is declared, naming the count (1 ms every
/// 100 days was 8.64 · 10⁹ windows a row: the process ran out of memory).
#[test]
fn a_row_in_more_than_a_million_windows_is_refused_in_both_spellings() {
    let sql = "SELECT k, COUNT(*) AS c FROM t GROUP BY k";
    let call = |slide_ms: u64, size_ms: u64| {
        format!(
            "SELECT window_start, window_end, k, COUNT(*) AS c FROM \
             HOP(t, ts, INTERVAL '{slide_ms}' MILLISECOND, INTERVAL '{size_ms}' MILLISECOND) \
             GROUP BY k, window_start, window_end"
        )
    };
    let ms = Duration::from_millis;
    // exactly a million windows a row: taken, in both spellings
    let _ = engine_with(sql, Some(WindowSpec::hopping(ms(1_000_000), ms(1))));
    let _ = engine_with(&call(1, 1_000_000), None);
    let _ = engine_with(&call(3, 3_000_000), None);
    // one more: refused, in both spellings, with the count
    for (size, slide, count) in [
        (1_000_001, 1, "1000001"),
        // not a multiple: a row is in up to ⌈size / slide⌉
        (3_000_001, 3, "1000001"),
        (8_640_000_000, 1, "8640000000"),
    ] {
        let msg = refused(sql, Some(WindowSpec::hopping(ms(size), ms(slide))));
        for want in [count, "window.size", "window.slide", "at most 1000000"] {
            assert!(msg.contains(want), "{size}/{slide}: {msg}\n  wants: {want}");
        }
        let msg = refused(&call(slide, size), None);
        for want in [count, "`HOP(t, ts,", "line 1, column ", "at most 1000000"] {
            assert!(
                msg.contains(want),
                "{size}/{slide} in SQL: {msg}\n  wants: {want}"
            );
        }
    }
}

/// A view's output never has two columns of one name, and a window
/// function never hides a source's column: the bounds the output adds
/// before the query's columns (a window in the spec), Update mode's `final`
/// flag after them, a bound selected under another column's name, and a
/// source column named `window_start` under `TUMBLE` are refused when the
/// view is declared, on both paths and through `execute_sql`. They ran and
/// wrote headers such as `window_start,window_end,final,n,final`, or read
/// the bound where the query named the source's column.
#[test]
fn names_the_output_would_give_twice_are_refused() {
    use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
    use std::sync::Arc;
    let odd = Arc::new(Schema::new(vec![
        Field::new("window_start", DataType::Int64, false),
        Field::new("final", DataType::Int64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    // the same without `window_start`, for the queries that call TUMBLE
    let plain = Arc::new(Schema::new(
        odd.fields().iter().skip(1).cloned().collect::<Vec<_>>(),
    ));
    let second = || Some(WindowSpec::tumbling(Duration::from_secs(1)));
    let tumble = "TUMBLE(t, ts, INTERVAL '1' SECOND)";
    // (query, its source's schema, window in the spec, output mode, what the
    // error says, or None: taken)
    type Case<'a> = (
        String,
        &'a SchemaRef,
        Option<WindowSpec>,
        OutputMode,
        Option<&'a [&'a str]>,
    );
    let cases: Vec<Case> = vec![
        (
            "SELECT window_start AS w, COUNT(*) AS c FROM t GROUP BY window_start".into(),
            &odd,
            second(),
            OutputMode::Append,
            None,
        ),
        (
            "SELECT window_start, COUNT(*) AS c FROM t GROUP BY window_start".into(),
            &odd,
            second(),
            OutputMode::Append,
            Some(&[
                "two columns named `window_start`",
                "the window's bounds first",
            ]),
        ),
        (
            "SELECT final, COUNT(*) AS c FROM t GROUP BY final".into(),
            &odd,
            second(),
            OutputMode::Update,
            Some(&["two columns named `final`", "Update mode adds"]),
        ),
        (
            "SELECT final, COUNT(*) AS c FROM t GROUP BY final".into(),
            &odd,
            second(),
            OutputMode::Append,
            None,
        ),
        (
            format!(
                "SELECT final, window_end, COUNT(*) AS c FROM {tumble} \
                 GROUP BY final, window_start, window_end"
            ),
            &plain,
            None,
            OutputMode::Update,
            Some(&["two columns named `final`", "Update mode adds"]),
        ),
        (
            format!(
                "SELECT window_end AS final, COUNT(*) AS c FROM {tumble} \
                 GROUP BY window_start, window_end"
            ),
            &plain,
            None,
            OutputMode::Update,
            Some(&["two columns named `final`", "Update mode adds"]),
        ),
        (
            format!(
                "SELECT window_end AS c, COUNT(*) AS c FROM {tumble} \
                 GROUP BY window_start, window_end"
            ),
            &plain,
            None,
            OutputMode::Append,
            Some(&["two columns named `c`", "a window bound is selected"]),
        ),
        (
            format!("SELECT COUNT(*) AS c FROM {tumble} GROUP BY window_start, window_end"),
            &odd,
            None,
            OutputMode::Append,
            Some(&[
                "source `t` has a column `window_start`",
                "`TUMBLE(t, ts, INTERVAL '1' SECOND)` (line 1, column 27)",
            ]),
        ),
        (
            format!("SELECT * FROM {tumble} AS a JOIN {tumble} AS b ON a.final = b.final"),
            &plain,
            None,
            OutputMode::Append,
            Some(&["two columns named `final`", "the query's result has two"]),
        ),
        // date_bin names no bound: the source's column is the query's
        (
            "SELECT window_start, COUNT(*) AS c FROM t \
             GROUP BY window_start, date_bin(INTERVAL '1 second', ts)"
                .into(),
            &odd,
            None,
            OutputMode::Append,
            None,
        ),
    ];
    for (sql, schema, window, mode, wants) in &cases {
        for exec in [ExecMode::Auto, ExecMode::Recompute] {
            let mut b = ViewSpec::builder("v", sql)
                .source("t", "ts", Arc::clone(schema))
                .output(*mode)
                .mode(exec);
            if let Some(w) = window {
                b = b.window(w.clone());
            }
            let mut e = Engine::builder().build().expect("engine");
            let got = b.build().and_then(|spec| e.create_view(spec));
            match (wants, got) {
                (None, Ok(())) => {
                    // the rows come out under distinct names
                    let schema = e.output_schema("v").expect("schema");
                    let mut names: Vec<&String> =
                        schema.fields().iter().map(|f| f.name()).collect();
                    names.sort();
                    names.dedup();
                    assert_eq!(names.len(), schema.fields().len(), "{sql}: {schema:?}");
                }
                (Some(wants), Err(err)) => {
                    let msg = err.to_string();
                    for w in *wants {
                        assert!(msg.contains(w), "{sql} ({exec:?})\n  {msg}\n  wants: {w}");
                    }
                }
                (_, got) => panic!("{sql} ({exec:?}): {got:?}"),
            }
        }
    }
    // a pipeline whose second view would write `final` twice creates none
    let source = "CREATE SOURCE t (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);\n";
    let good = "CREATE VIEW a WITH (output = 'update') AS SELECT k, COUNT(*) AS n \
                FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY k, window_start, window_end;\n";
    let bad = "CREATE VIEW b WITH (output = 'update') AS SELECT k AS final, COUNT(*) AS n \
               FROM TUMBLE(t, ts, INTERVAL '1' SECOND) GROUP BY k, window_start, window_end;\n";
    let mut e = Engine::builder().build().expect("engine");
    let err = e
        .execute_sql(&format!("{source}{good}{bad}"))
        .expect_err("b writes `final` twice");
    assert!(err.to_string().contains("`final`"), "{err}");
    assert!(e.views().is_empty(), "created: {:?}", e.views());
}
