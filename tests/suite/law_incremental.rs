//! The law, incremental side: on random disordered streams split into random
//! triggers, for every supported shape, all output modes and 1 or 2 workers,
//! the differential-dataflow path emits what the recompute path emits (row
//! for row at every trigger) and what the independent batch oracle computes; the dataflow frontier equals
//! the watermark after every trigger. Each case runs a third time with the
//! window written in SQL (`FROM HOP(t, ts, …)`): the rows are the same.

use crate::common;

use std::time::Duration;

use arrow::array::RecordBatch;
use common::{answer, batch, canon, cases, oracle, Ev, Win};
use proptest::prelude::*;
use thund::{Engine, ExecMode, OutputMode, PathKind, ViewSpec, WindowSpec};

const QUERIES: &[&str] = &[
    "SELECT k, COUNT(*) AS c, SUM(v) AS s, MIN(v) AS mn, MAX(v) AS mx, AVG(v) AS a FROM t GROUP BY k",
    "SELECT g, COUNT(v) AS c, SUM(f) AS sf, AVG(f) AS af, MIN(f) AS mnf, MAX(f) AS mxf FROM t WHERE v > 0 GROUP BY g",
    "SELECT COUNT(*) AS c, SUM(v) AS s, MAX(f) AS mx, AVG(v) AS a FROM t",
    "SELECT COUNT(*) AS c, SUM(v) AS s FROM t WHERE v > 30",
    "SELECT k, g, COUNT(*) AS c, MAX(v) AS mx FROM t WHERE f < 50 GROUP BY k, g",
    "SELECT SUM(v) + 1 AS s1, k * 10 AS k10, CASE WHEN COUNT(*) > 2 THEN 'many' ELSE 'few' END AS size \
     FROM t GROUP BY k HAVING SUM(v) IS NOT NULL",
    "SELECT k % 2 AS parity, CAST(AVG(v * 2) AS BIGINT) AS a2, MIN(f) AS mf FROM t WHERE g <> 'c' \
     GROUP BY k % 2 HAVING COUNT(*) > 1",
    "SELECT d, COUNT(*) AS c, SUM(d) AS sd, AVG(d) AS ad, MIN(d) AS mind, MAX(d) AS maxd FROM t GROUP BY d",
    "SELECT v > 0 AS pos, SUM(d) AS sd, COUNT(d) AS cd FROM t GROUP BY v > 0",
    "SELECT MAX(v) AS mx, k FROM t GROUP BY k HAVING MAX(v) > 0 AND COUNT(*) >= 2",
    "SELECT CAST(ts AS DATE) AS day, date_trunc('second', ts) AS sec, COUNT(*) AS c, AVG(v) AS a \
     FROM t GROUP BY CAST(ts AS DATE), date_trunc('second', ts)",
    // MIN/MAX over timestamps, booleans (NULL where v is) and dates
    "SELECT k, MIN(ts) AS first, MAX(ts + INTERVAL '1 second') AS last1, MIN(v > 0) AS all_pos, MAX(f > 10.0) AS any_big, \
     MAX(CAST(ts AS DATE)) AS day FROM t GROUP BY k",
    // FILTER (WHERE …): groups exist for every row, each aggregate folds its own rows
    "SELECT g, COUNT(*) AS c, COUNT(*) FILTER (WHERE v < 0) AS neg, SUM(v) FILTER (WHERE f > 10) AS sv, \
     AVG(f) FILTER (WHERE k = 1) AS af, MAX(ts) FILTER (WHERE v IS NULL) AS mt, SUM(v) AS s, \
     MIN(d) FILTER (WHERE v > 0) AS md FROM t GROUP BY g",
    "SELECT DISTINCT k % 3 AS k3, g FROM t WHERE v IS NOT NULL",
    // COUNT(DISTINCT …), with FILTER and beside other aggregates; NULLs not counted
    "SELECT g, COUNT(*) AS c, COUNT(DISTINCT k) AS dk, COUNT(DISTINCT k) FILTER (WHERE v > 0) AS dkp, \
     SUM(v) AS s, MAX(f) AS mx, AVG(d) AS ad FROM t GROUP BY g",
    "SELECT COUNT(DISTINCT v) AS dv, AVG(f) AS af FROM t",
    // SUM(DISTINCT …) of integers and decimals, with FILTER, beside COUNT(DISTINCT …)
    "SELECT k % 2 AS p, SUM(DISTINCT v) AS sv, AVG(v) AS av, \
     SUM(DISTINCT v) FILTER (WHERE f > 10) AS svf, COUNT(DISTINCT v) AS cv, COUNT(*) AS c FROM t GROUP BY k % 2",
    "SELECT SUM(DISTINCT d) AS sd, AVG(d) AS ad, MAX(f) AS mf FROM t",
    "SELECT k % 2 AS p, COUNT(DISTINCT g) AS dg FROM t GROUP BY k % 2 HAVING COUNT(DISTINCT g) > 1",
    // several arguments kept per value (each row one entry per argument), of
    // one type and of several; COUNT(v) beside COUNT(DISTINCT v) folds once per row
    "SELECT k % 2 AS p, COUNT(*) AS c, COUNT(DISTINCT k) AS dk, COUNT(v) AS cv, COUNT(DISTINCT v) AS dv, \
     COUNT(DISTINCT g) FILTER (WHERE v > 0) AS dgp, SUM(DISTINCT v) AS sv, \
     COUNT(DISTINCT v) FILTER (WHERE f > 10) AS dvf, SUM(v) AS s FROM t GROUP BY k % 2",
    "SELECT COUNT(DISTINCT k) AS dk, COUNT(DISTINCT v) AS dv, COUNT(*) FILTER (WHERE v < 0) AS neg, \
     COUNT(DISTINCT k) FILTER (WHERE v < 0) AS dkn FROM t",
    // ORDER BY … LIMIT per window, in total orders (ties would pick either row)
    "SELECT k, SUM(v) AS s, COUNT(*) AS c FROM t GROUP BY k ORDER BY c DESC, k LIMIT 2",
    "SELECT g, MAX(f) AS m FROM t WHERE v IS NOT NULL GROUP BY g ORDER BY m, g LIMIT 3 OFFSET 1",
    "SELECT k, g, COUNT(*) AS c FROM t GROUP BY k, g HAVING COUNT(*) > 1 ORDER BY k DESC, g",
    "SELECT k, g FROM t GROUP BY k, g HAVING k > 1",
    // the source read only through one aggregate, the rest over its groups:
    // the groups holding the window's maximum (Nexmark q5's shape) …
    "SELECT k, c FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS x \
     WHERE c = (SELECT MAX(c) FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS y)",
    // … q5 as written (joined with the maximum, kept where they reach it),
    // and a minimum of sums that rise and fall, under a filter of the kept side
    "SELECT a.k, a.c, a.s FROM (SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k) AS a \
     JOIN (SELECT MAX(x.c) AS m FROM (SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k) AS x) AS b \
     ON a.c >= b.m",
    "SELECT g, s FROM (SELECT g, SUM(v) AS s FROM t GROUP BY g) AS a \
     WHERE g <> 'b' AND s <= (SELECT MIN(s) FROM (SELECT g, SUM(v) AS s FROM t GROUP BY g) AS y)",
    // … the maximum joined on the left, selected, beside another condition
    "SELECT b.m, a.k, a.c * 2 AS c2 FROM (SELECT MAX(x.c) AS m FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS x) AS b \
     JOIN (SELECT k, COUNT(*) AS c FROM t GROUP BY k) AS a ON a.c = b.m AND a.k % 2 = 0",
    "SELECT k, last FROM (SELECT k, MAX(ts) AS last FROM t GROUP BY k) AS a \
     WHERE last = (SELECT MAX(last) FROM (SELECT k, MAX(ts) AS last FROM t GROUP BY k) AS b)",
    // … the groups holding the greatest COUNT of a column (NULLs count
    // nothing: many groups tie at 0), under a WHERE that leaves groups unshown
    "SELECT g, n FROM (SELECT g, COUNT(v) AS n FROM t WHERE f > 10 GROUP BY g) AS a \
     WHERE n = (SELECT MAX(n) FROM (SELECT g, COUNT(v) AS n FROM t WHERE f > 10 GROUP BY g) AS b)",
    // … ORDER BY an aggregate not selected, a window function over the groups,
    "SELECT k FROM t GROUP BY k ORDER BY SUM(v) DESC NULLS LAST, k LIMIT 2",
    "SELECT k, c, RANK() OVER (ORDER BY c DESC) AS r FROM \
     (SELECT k, COUNT(*) AS c FROM t WHERE v > 0 GROUP BY k) AS x",
    // … the aggregate joined with itself, and aggregated again (a window whose
    // rows WHERE all refuses still has its row)
    "SELECT a.k, a.c, b.c AS c2 FROM (SELECT k, COUNT(*) AS c, SUM(f) AS sf FROM t GROUP BY k) AS a \
     JOIN (SELECT k, COUNT(*) AS c, SUM(f) AS sf FROM t GROUP BY k) AS b ON a.k = b.k + 1",
    "SELECT COUNT(*) AS groups, MAX(c) AS top, SUM(s) AS total FROM \
     (SELECT g, COUNT(*) AS c, SUM(v) AS s FROM t WHERE v > 10 GROUP BY g) AS x",
    // … aggregated again by groups (Update mode keeps the outer groups): by a
    // group key (Nexmark q4's shape); by a count, which moves a group from one
    // outer group to the next, under a WHERE that sums rising and falling let
    // in and out and a HAVING; by a maximum that may be NULL
    "SELECT x.g, AVG(x.mx) AS a, COUNT(*) AS n, SUM(x.c) AS sc FROM \
     (SELECT k, g, MAX(v) AS mx, COUNT(*) AS c FROM t GROUP BY k, g) AS x GROUP BY x.g",
    "SELECT x.c % 3 AS b, COUNT(*) AS n, SUM(x.s) AS ss, COUNT(x.s) FILTER (WHERE x.s > 0) AS pos \
     FROM (SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k) AS x WHERE x.s <> 0 \
     GROUP BY x.c % 3 HAVING SUM(x.s) > -30",
    "SELECT mx, COUNT(*) AS n, AVG(c) AS ac FROM \
     (SELECT g, MAX(v) AS mx, COUNT(*) AS c FROM t GROUP BY g) AS x GROUP BY mx",
    // … and by what only a maximum feeds: an inner group whose maximum
    // stayed adds what it added before (Nexmark q4 exactly)
    "SELECT x.g, AVG(x.mx) AS a, COUNT(*) AS n FROM \
     (SELECT k, g, MAX(v) AS mx FROM t GROUP BY k, g) AS x GROUP BY x.g",
];

/// MIN/MAX of strings: kept per value, exact under eviction; with a FILTER
/// or beside COUNT(DISTINCT …) one entry per value, with nothing else kept
/// per value a batch's rows of a window (or pane) and group keep entries for
/// their least and greatest value only, the others folded into the least.
const STRING_EXTREMES: &[&str] = &[
    "SELECT k, MIN(g) AS lo, MAX(g) AS hi, MAX(g) FILTER (WHERE v > 0) AS hip, COUNT(DISTINCT g) AS n, \
     COUNT(*) AS c FROM t GROUP BY k",
    "SELECT MIN(g) AS lo, MAX(g) AS hi, SUM(v) AS s FROM t WHERE f > 20",
    "SELECT k, MIN(g) AS lo, MAX(g) AS hi, COUNT(*) AS c, SUM(v) AS s FROM t WHERE v IS NOT NULL GROUP BY k",
    "SELECT k % 2 AS p, MAX(CAST(v AS VARCHAR)) AS hv, MIN(CAST(v AS VARCHAR)) AS lv, COUNT(v) AS cv \
     FROM t GROUP BY k % 2",
    "SELECT MAX(CAST(v AS VARCHAR)) AS hv, COUNT(*) AS c FROM t WHERE k <> 1",
];

const TOP_ROWS: &[&str] = &[
    // each window's top rows, read row by row (only candidates reach the
    // dataflow): the rows holding the maximum (Nexmark q7) or minimum …
    "SELECT k, v, g FROM t WHERE v = (SELECT MAX(v) FROM t)",
    "SELECT k, ts, d FROM t WHERE ts = (SELECT MIN(ts) FROM t) AND k > 0",
    // … the first rows per partition (Nexmark q19; ties give equal rows) …
    "SELECT k, g, v, rn FROM (SELECT k, g, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, g, ts) AS rn \
     FROM t WHERE v IS NOT NULL) AS x WHERE rn <= 2",
    "SELECT g, v, r FROM (SELECT g, v, RANK() OVER (PARTITION BY g ORDER BY d DESC, v) AS r FROM t) AS x WHERE r < 3",
    // (a fractional bound keeps the whole ranks below it: ranks 1 and 2)
    "SELECT k, v, rn FROM (SELECT k, v, ROW_NUMBER() OVER (ORDER BY v DESC NULLS LAST, k, g, ts) AS rn \
     FROM t) AS x WHERE rn < 2.5",
    // … the first rows per partition aggregated over all partitions (a changed
    // window is not re-evaluated per partition) …
    "SELECT COUNT(*) AS n, SUM(v) AS s, MAX(k) AS mk FROM (SELECT k, v, RANK() OVER (PARTITION BY g ORDER BY v DESC NULLS LAST) AS r \
     FROM t) AS x WHERE r <= 2",
    // … and ORDER BY … LIMIT over the rows
    "SELECT k, v, g FROM t ORDER BY v DESC, k, g LIMIT 3",
    "SELECT g, d FROM t WHERE k <> 2 ORDER BY d NULLS FIRST, g LIMIT 2 OFFSET 1",
];

#[derive(Clone, Debug)]
struct Case {
    triggers: Vec<Vec<Ev>>,
    lateness: i64,
    win: Win,
    sql: &'static str,
    mode: OutputMode,
    workers: usize,
}

fn case(queries: &'static [&'static str]) -> impl Strategy<Value = Case> {
    (
        common::stream(),
        proptest::sample::select(queries),
        prop_oneof![
            Just(OutputMode::Append),
            Just(OutputMode::Update),
            Just(OutputMode::Complete)
        ],
        1usize..=2,
    )
        .prop_map(|((triggers, lateness, win), sql, mode, workers)| Case {
            triggers,
            lateness,
            win,
            sql,
            mode,
            workers,
        })
}

/// What one run emitted: the mode's final answer, every trigger's rows, and the late count.
type Run = (Vec<String>, Vec<Vec<String>>, u64);

/// Run through the engine on one path.
fn run(c: &Case, exec: ExecMode) -> Result<Run, TestCaseError> {
    run_spelled(c, exec, false)
}

/// The law's hopping window as a window function over `t`.
/// Run through the engine on one path, the window in the spec or (`in_sql`) in the SQL.
fn run_spelled(c: &Case, exec: ExecMode, in_sql: bool) -> Result<Run, TestCaseError> {
    let sql = if in_sql {
        common::window_in_sql(c.sql, &common::hop_call(c.win))
    } else {
        c.sql.to_string()
    };
    let mut spec = ViewSpec::builder("v", &sql).source("t", "ts", common::schema());
    if !in_sql {
        spec = spec.window(WindowSpec::hopping(
            Duration::from_millis(c.win.size as u64),
            Duration::from_millis(c.win.slide as u64),
        ));
    }
    let spec = spec
        .allowed_lateness(Duration::from_millis(c.lateness as u64))
        .output(c.mode)
        .mode(exec)
        .build()
        .expect("spec");
    let mut e = Engine::builder()
        .workers(c.workers)
        .build()
        .expect("engine");
    e.create_view(spec).expect("view");
    let want = if exec == ExecMode::Auto {
        PathKind::Incremental
    } else {
        PathKind::Recompute
    };
    prop_assert_eq!(
        e.plan("v").expect("plan").path(),
        want,
        "{}",
        e.explain("v").unwrap_or_default()
    );
    let mut outs: Vec<Vec<RecordBatch>> = Vec::new();
    for (i, trig) in c.triggers.iter().enumerate() {
        e.push("t", batch(trig)).expect("push");
        let r = e.trigger().expect("trigger");
        let v = &r.views[0];
        if exec == ExecMode::Auto {
            // the dataflow's frontier is the watermark (−∞ shows as None on both)
            prop_assert_eq!(v.frontier, v.watermark, "frontier after trigger {}", i + 1);
        }
        outs.push(v.output.clone());
    }
    let r = e.finish().expect("finish");
    if exec == ExecMode::Auto {
        prop_assert_eq!(r.views[0].frontier, Some(i64::MAX), "frontier at finish");
    }
    outs.push(r.views[0].output.clone());
    let got = answer(c.mode, &outs);
    let per_trigger = outs.iter().map(|o| canon(o)).collect();
    Ok((
        got,
        per_trigger,
        e.counters("v").expect("counters").late_rows_dropped,
    ))
}

/// One case of the law: both paths, trigger by trigger, and the oracle.
fn law(c: &Case) -> Result<(), TestCaseError> {
    let triggers: Vec<Vec<(usize, Ev)>> = c
        .triggers
        .iter()
        .map(|t| t.iter().map(|e| (0, e.clone())).collect())
        .collect();
    let (expected, late) = oracle(&triggers, &["t"], c.lateness, c.win, c.sql);
    let (inc, inc_rows, inc_late) = run(c, ExecMode::Auto)?;
    let (rec, rec_rows, rec_late) = run(c, ExecMode::Recompute)?;
    // the same view with its window written in SQL (issue 11): the same rows
    let (_, sql_rows, sql_late) = run_spelled(c, ExecMode::Auto, true)?;
    prop_assert_eq!(
        &sql_rows,
        &inc_rows,
        "window in SQL vs in the spec, per trigger: {}",
        common::window_in_sql(c.sql, &common::hop_call(c.win))
    );
    prop_assert_eq!(sql_late, inc_late);
    // row for row, trigger by trigger: in Update mode only groups whose
    // projected row changed are emitted, on both paths
    prop_assert_eq!(
        &inc_rows,
        &rec_rows,
        "incremental vs recompute, per trigger"
    );
    prop_assert_eq!(&inc, &expected, "incremental vs oracle");
    prop_assert_eq!(&rec, &expected, "recompute vs oracle");
    prop_assert_eq!(inc_late, late);
    prop_assert_eq!(rec_late, late);
    Ok(())
}

/// Update mode's rule (a window emits its new rows less its old ones, as
/// multisets): with the group key not shown two groups' rows can be equal
/// and the window's rows must be compared; with every key shown a group's
/// row is compared with its own old row; with the keys and `COUNT(*)` shown
/// a changed group's row always differs and the comparison is skipped.
const UPDATE_RULE: &[&str] = &[
    "SELECT COUNT(*) AS c FROM t GROUP BY k",
    "SELECT COUNT(*) AS c FROM t GROUP BY k % 3",
    "SELECT k, COUNT(*) AS c FROM t GROUP BY k",
    "SELECT COUNT(*) AS c, g FROM t WHERE v > 0 GROUP BY g, k",
    // every key shown, no COUNT(*): each group's row compared with its own
    // old one (rows that stay the same, and a HAVING that drops groups)
    "SELECT k, MAX(v) AS mx FROM t GROUP BY k",
    "SELECT g, k, MIN(v) AS mn, SUM(v) AS s FROM t GROUP BY k, g HAVING MIN(v) > -20",
];

fn update_rule_case() -> impl Strategy<Value = Case> {
    (case(UPDATE_RULE), 1usize..=2).prop_map(|(c, workers)| Case {
        mode: OutputMode::Update,
        workers,
        ..c
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]

    #[test]
    fn incremental_equals_recompute_equals_oracle(c in case(QUERIES)) {
        law(&c)?;
    }

    /// The top-rows shapes, whose host-side pruning drops rows before the
    /// dataflow: a rule that dropped one candidate too many shows here.
    #[test]
    fn top_rows_incremental_equals_recompute_equals_oracle(c in case(TOP_ROWS)) {
        law(&c)?;
    }

    #[test]
    fn string_extremes_incremental_equals_recompute_equals_oracle(c in case(STRING_EXTREMES)) {
        law(&c)?;
    }

    #[test]
    fn update_mode_shows_a_window_its_new_rows_less_its_old(c in update_rule_case()) {
        law(&c)?;
    }
}

/// A bound on the rank that is not a whole number keeps the whole ranks on
/// its side of it (`rn < 2.5`: ranks 1 and 2), as the comparison does. The
/// rank's bound was read by cutting the number to an integer first (`rn <
/// 2.5` as `rn < 2`), and the host then ruled out the rows ranked second:
/// with each row worse than the ones before it, one per trigger, the
/// incremental path emitted one row per window too few.
#[test]
fn a_fractional_rank_bound_keeps_the_whole_ranks_below_it() {
    const BOUNDS: &[&str] = &[
        "SELECT v, rn FROM (SELECT v, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM t) AS x \
         WHERE rn < 2.5",
        "SELECT v, rn FROM (SELECT v, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM t) AS x \
         WHERE rn < 3.0000001",
        "SELECT v, rn FROM (SELECT v, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM t) AS x \
         WHERE 4.5 > rn",
        "SELECT v, rn FROM (SELECT v, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM t) AS x \
         WHERE rn <= 2.99",
        "SELECT v, rn FROM (SELECT v, ROW_NUMBER() OVER (ORDER BY v DESC) AS rn FROM t) AS x \
         WHERE rn = 3.0",
        "SELECT k, v, r FROM (SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY v DESC) AS r FROM t) AS x \
         WHERE r < 1.5e0",
    ];
    // in each 10 s window, each row worse than those before it, one per trigger
    let triggers: Vec<Vec<Ev>> = (0..24i64)
        .map(|i| {
            vec![Ev {
                t: 1_000 + i * 900,
                k: i % 2,
                g: "a".into(),
                v: Some(100 - i),
                f: 0.0,
            }]
        })
        .collect();
    for sql in BOUNDS {
        for mode in [OutputMode::Append, OutputMode::Update] {
            let c = Case {
                triggers: triggers.clone(),
                lateness: 0,
                win: Win {
                    size: 10_000,
                    slide: 10_000,
                },
                sql,
                mode,
                workers: 1,
            };
            if let Err(e) = law(&c) {
                panic!("{sql} in {mode:?} mode: {e}");
            }
        }
    }
}

/// Batches big enough that with two workers each key shard folds its rows on
/// its own thread: the outputs equal one worker's and the recompute path's,
/// trigger by trigger, with short and long (over 15 bytes) string keys.
#[test]
fn large_batches_fold_per_shard_and_agree_with_one_worker_and_recompute() {
    let mut r = common::SplitMix::new(5);
    let mut t = 1_000_000i64;
    let triggers: Vec<Vec<Ev>> = (0..4)
        .map(|_| {
            (0..6_000)
                .map(|_| {
                    t += r.below(3) as i64;
                    let long = r.below(3) == 0;
                    Ev {
                        t: t - r.below(1_500) as i64,
                        k: r.below(300) as i64,
                        g: if long {
                            format!("a-long-group-key-{}", r.below(50))
                        } else {
                            format!("g{}", r.below(20))
                        },
                        v: (r.below(9) != 0).then(|| r.below(1_000) as i64 - 500),
                        f: r.below(1_000) as f64 / 8.0,
                    }
                })
                .collect()
        })
        .collect();
    let run = |workers: usize, exec: ExecMode, mode: OutputMode| -> Vec<Vec<String>> {
        let mut e = Engine::builder().workers(workers).build().expect("engine");
        e.create_view(
            ViewSpec::builder(
                "v",
                "SELECT k, g, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS m FROM t WHERE k <> 7 GROUP BY k, g",
            )
            .source("t", "ts", common::schema())
            .window(WindowSpec::hopping(
                Duration::from_secs(4),
                Duration::from_secs(2),
            ))
            .allowed_lateness(Duration::from_millis(800))
            .output(mode)
            .mode(exec)
            .build()
            .expect("spec"),
        )
        .expect("view");
        let mut out = Vec::new();
        for trig in &triggers {
            e.push("t", batch(trig)).expect("push");
            out.push(canon(&e.trigger().expect("trigger").views[0].output));
        }
        out.push(canon(&e.finish().expect("finish").views[0].output));
        out
    };
    for mode in [OutputMode::Append, OutputMode::Update] {
        let expected = run(1, ExecMode::Recompute, mode);
        assert!(expected.iter().map(Vec::len).sum::<usize>() > 1_000);
        assert_eq!(run(1, ExecMode::Auto, mode), expected, "{mode:?}, 1 worker");
        assert_eq!(
            run(2, ExecMode::Auto, mode),
            expected,
            "{mode:?}, 2 workers"
        );
    }
}

/// String `MIN`/`MAX` keep entries for each batch's least and greatest value
/// per unit and group only: near both ends of time, with empty, long,
/// non-ASCII and NUL-holding strings, tumbling and hopping, in Update and
/// Append mode, both paths emit the same rows at every trigger.
#[test]
fn string_extremes_near_the_ends_of_time_agree_on_both_paths() {
    let long = "ż".repeat(3_000);
    let strings = ["", "a", long.as_str(), "é", "zz", "a\u{0}b", "a\u{0}"];
    let sql = "SELECT k, MIN(g) AS lo, MAX(g) AS hi, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k";
    let windows = [
        WindowSpec::tumbling(Duration::from_secs(10)),
        WindowSpec::hopping(Duration::from_secs(10), Duration::from_secs(4)),
    ];
    for window in &windows {
        for mode in [OutputMode::Update, OutputMode::Append] {
            let run = |exec: ExecMode| {
                let spec = ViewSpec::builder("v", sql)
                    .source("t", "ts", common::schema())
                    .window(window.clone())
                    .allowed_lateness(Duration::from_secs(2))
                    .output(mode)
                    .mode(exec)
                    .build()
                    .expect("spec");
                let mut e = Engine::builder().build().expect("engine");
                e.create_view(spec).expect("view");
                let want = match exec {
                    ExecMode::Auto => PathKind::Incremental,
                    _ => PathKind::Recompute,
                };
                assert_eq!(e.plan("v").expect("plan").path(), want);
                let mut out = Vec::new();
                for base in [i64::MIN, -30_000, i64::MAX - 60_000] {
                    for step in 0..6i64 {
                        let rows: Vec<Ev> = (0..60i64)
                            .map(|j| Ev {
                                t: base.saturating_add(step * 9_000 + (j * 3_700) % 11_000),
                                k: j % 3,
                                g: strings[((j * 5 + step) % 7) as usize].to_string(),
                                v: (j % 4 != 0).then_some(j - 6),
                                f: 0.0,
                            })
                            .collect();
                        e.push("t", batch(&rows)).expect("push");
                        out.push(canon(&e.trigger().expect("trigger").views[0].output));
                    }
                }
                out.push(canon(&e.finish().expect("finish").views[0].output));
                out
            };
            let inc = run(ExecMode::Auto);
            assert_eq!(inc, run(ExecMode::Recompute), "{window:?}, {mode:?}");
            assert!(inc.iter().any(|rows| !rows.is_empty()));
        }
    }
}

/// `COUNT(DISTINCT …)` in Update and Complete modes: a batch whose rows all
/// lie in one window open at the last trigger splits its entries (the
/// aggregates not kept per value fold into the group's entry, and an entry
/// whose value counts already is not sent again), while a batch across
/// windows keeps whole entries; a trigger of several batches mixes both.
/// With NULLs, `FILTER`, several arguments and 1 or 2 workers, both paths
/// emit the same rows at every trigger.
#[test]
fn distinct_entries_split_within_open_windows_agree_with_recompute() {
    let queries = [
        "SELECT g, COUNT(*) AS c, COUNT(DISTINCT k) AS dk, COUNT(DISTINCT k) FILTER (WHERE v > 0) AS dkp, \
         SUM(v) AS s, COUNT(v) AS cv, COUNT(DISTINCT v) AS dv FROM t GROUP BY g",
        "SELECT k % 2 AS p, COUNT(*) AS c, SUM(DISTINCT v) AS sv, COUNT(DISTINCT g) FILTER (WHERE v > 0) AS dgp, \
         COUNT(DISTINCT v) FILTER (WHERE f > 10) AS dvf, AVG(f) AS af FROM t GROUP BY k % 2",
    ];
    let mut r = common::SplitMix::new(11);
    let mut t = 1_000_000i64;
    // each trigger: batches within one 10 s window, and now and then one across windows
    let triggers: Vec<Vec<Vec<Ev>>> = (0..40)
        .map(|i| {
            (0..3)
                .map(|b| {
                    let across = i % 7 == 3 && b == 1;
                    (0..30)
                        .map(|_| {
                            t += if across { 400 } else { r.below(40) as i64 };
                            Ev {
                                t: t - r.below(200) as i64,
                                k: r.below(6) as i64,
                                g: format!("g{}", r.below(4)),
                                v: (r.below(5) != 0).then(|| r.below(12) as i64 - 4),
                                f: r.below(160) as f64 / 8.0,
                            }
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    for sql in queries {
        let run = |workers: usize, exec: ExecMode, mode: OutputMode| -> Vec<Vec<String>> {
            let mut e = Engine::builder().workers(workers).build().expect("engine");
            e.create_view(
                ViewSpec::builder("v", sql)
                    .source("t", "ts", common::schema())
                    .window(WindowSpec::tumbling(Duration::from_secs(10)))
                    .allowed_lateness(Duration::from_millis(300))
                    .output(mode)
                    .mode(exec)
                    .build()
                    .expect("spec"),
            )
            .expect("view");
            let mut out = Vec::new();
            for trig in &triggers {
                for b in trig {
                    e.push("t", batch(b)).expect("push");
                }
                out.push(canon(&e.trigger().expect("trigger").views[0].output));
            }
            out.push(canon(&e.finish().expect("finish").views[0].output));
            out
        };
        for mode in [OutputMode::Update, OutputMode::Complete] {
            let expected = run(1, ExecMode::Recompute, mode);
            for workers in [1, 2] {
                assert_eq!(
                    run(workers, ExecMode::Auto, mode),
                    expected,
                    "{sql}: {mode:?}, {workers} workers"
                );
            }
        }
    }
}
