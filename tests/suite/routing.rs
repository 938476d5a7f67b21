//! Routing: which path each query shape takes, with the reason for every
//! fallback — and every one, whichever path, equal to the batch oracle.

use crate::common;

use std::time::Duration;

use common::{batch, canon, oracle, Ev, SplitMix, Win};
use thund::plan::Construct;
use thund::{Engine, ExecMode, FallbackReason as Why, OutputMode, PathKind, ViewSpec, WindowSpec};

/// Each query and its expected plan: `None` = incremental, `Some(reason)` =
/// recompute for exactly that reason.
fn table() -> Vec<(&'static str, Option<Why>)> {
    let s = |x: &str| x.to_string();
    vec![
        ("SELECT k, COUNT(*) AS c FROM a GROUP BY k", None),
        ("SELECT COUNT(*) AS c, SUM(v) AS s FROM a", None),
        (
            "SELECT g, AVG(f) AS af, MIN(d) AS md FROM a WHERE v > 0 GROUP BY g",
            None,
        ),
        (
            "SELECT k, SUM(v) * 2 AS s2 FROM a GROUP BY k HAVING COUNT(*) > 1",
            None,
        ),
        (
            "SELECT CAST(MAX(f) AS BIGINT) AS m, k + 1 AS k1 FROM a GROUP BY k + 1",
            None,
        ),
        ("SELECT k, g, COUNT(v) AS c FROM a GROUP BY k, g", None),
        (
            "SELECT k, COUNT(*) FILTER (WHERE v < 0) AS neg, SUM(v) FILTER (WHERE f > 10) AS s FROM a GROUP BY k",
            None,
        ),
        (
            "SELECT g, MAX(ts) AS last, MAX(v > 0) AS any_pos, MIN(CAST(ts AS DATE)) AS day FROM a GROUP BY g",
            None,
        ),
        ("SELECT DISTINCT k, g FROM a", None),
        ("SELECT k FROM a WHERE v > 0 GROUP BY k", None),
        // windowed equi-joins: the join in the dataflow, the rest per window over its pairs
        (
            "SELECT a.k, COUNT(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k",
            None,
        ),
        ("SELECT a.k, a.v, b.g, b.ts FROM a JOIN b ON a.k = b.k", None),
        (
            "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k AND a.v < b.v WHERE b.g <> 'x'",
            None,
        ),
        ("SELECT COUNT(*) AS n, SUM(b.v) AS s FROM a JOIN b ON a.g = b.g", None),
        (
            "SELECT x.k, x.v2, y.v FROM (SELECT k, v * 2 AS v2 FROM a WHERE v > 0) x JOIN b y ON x.k = y.k",
            None,
        ),
        (
            "SELECT x.k, y.v FROM a x JOIN a y ON x.k = y.k AND x.g = y.g WHERE x.v > y.v",
            None,
        ),
        (
            "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k ORDER BY b.v DESC NULLS LAST, a.k LIMIT 3",
            None,
        ),
        (
            "SELECT a.k, b.v FROM a LEFT JOIN b ON a.k = b.k",
            Some(Why::JoinShape {
                what: s("a Left join keeps rows without a match"),
            }),
        ),
        (
            "SELECT a.k, b.k AS bk FROM a JOIN b ON a.f = b.f",
            Some(Why::JoinShape {
                what: s("join key `a.f` is a float (-0.0 = 0.0 in SQL, not in a key's bytes)"),
            }),
        ),
        (
            "SELECT a.k, b.k AS bk FROM a JOIN b ON a.v < b.v",
            Some(Why::JoinShape {
                what: s("the join has no equality between its sides"),
            }),
        ),
        (
            "SELECT n, COUNT(*) AS c FROM (SELECT a.k, COUNT(*) AS n FROM a GROUP BY a.k) x JOIN b ON x.k = b.k GROUP BY n",
            Some(Why::JoinShape {
                what: s("a side reads more than filters and projections of one source (Aggregate)"),
            }),
        ),
        (
            "SELECT k, COUNT(DISTINCT g) AS dg, COUNT(*) FILTER (WHERE v > 0) AS pos FROM a GROUP BY k",
            None,
        ),
        (
            "SELECT k, COUNT(DISTINCT g) AS dg, COUNT(DISTINCT v) AS dv FROM a GROUP BY k",
            None,
        ),
        (
            "SELECT k, SUM(DISTINCT v) AS sv FROM a GROUP BY k",
            None,
        ),
        (
            "SELECT k, AVG(DISTINCT v) AS av FROM a GROUP BY k",
            Some(Why::DistinctAggregate { func: s("AVG") }),
        ),
        (
            "SELECT k, SUM(DISTINCT f) AS sf FROM a GROUP BY k",
            Some(Why::DistinctAggregate { func: s("SUM") }),
        ),
        (
            "SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM a",
            Some(Why::Uses(Construct::WindowFunction)),
        ),
        (
            "SELECT k, SUM(v) AS s FROM a GROUP BY k ORDER BY s DESC NULLS LAST, k LIMIT 2",
            None,
        ),
        ("SELECT k, SUM(v) AS s FROM a GROUP BY k ORDER BY k", None),
        (
            "SELECT g, COUNT(*) AS c FROM a GROUP BY g ORDER BY c, g LIMIT 2 OFFSET 1",
            None,
        ),
        // (an unordered LIMIT, which is not incremental, is also no row here)
        (
            "SELECT k, COUNT(*) AS c FROM a GROUP BY k LIMIT 0",
            Some(Why::ReadsNoRows),
        ),
        (
            "SELECT k, COUNT(*) AS c FROM a GROUP BY k HAVING 0 * COUNT(*) > 0",
            Some(Why::ReadsNoRows),
        ),
        // the source read only through one aggregate: the rest per window over its groups
        ("SELECT k FROM a GROUP BY k ORDER BY COUNT(*) DESC, k LIMIT 1", None),
        (
            "SELECT k, c FROM (SELECT k, COUNT(*) AS c FROM a GROUP BY k) AS x \
             WHERE c = (SELECT MAX(c) FROM (SELECT k, COUNT(*) AS c FROM a GROUP BY k) AS y)",
            None,
        ),
        (
            "SELECT k, c, ROW_NUMBER() OVER (ORDER BY c DESC, k) AS r FROM \
             (SELECT k, COUNT(*) AS c FROM a GROUP BY k) AS x",
            None,
        ),
        (
            "SELECT k, c FROM (SELECT k, COUNT(*) AS c FROM a GROUP BY k) AS x \
             WHERE c = (SELECT MAX(c) FROM (SELECT k, COUNT(v) AS c FROM a GROUP BY k) AS y)",
            // two different aggregates of the source: judged by the top of the query
            Some(Why::Uses(Construct::Other(s("SubqueryAlias: x")))),
        ),
        (
            "SELECT k, COUNT(*) AS n FROM a WHERE v > (SELECT AVG(v) FROM a) GROUP BY k",
            Some(Why::SubqueryInPredicate),
        ),
        (
            "SELECT DISTINCT k FROM a ORDER BY k",
            Some(Why::Uses(Construct::OrderBy)),
        ),
        (
            "SELECT DISTINCT k, n FROM (SELECT k, COUNT(*) AS n FROM a GROUP BY k) s",
            None,
        ),
        ("SELECT k, v FROM a WHERE v > 0", Some(Why::NoAggregate)),
        // each window's top rows, read row by row: the rows holding the
        // maximum (Nexmark q7), the first per partition (q19), ORDER BY … LIMIT
        ("SELECT k, v, g FROM a WHERE v = (SELECT MAX(v) FROM a)", None),
        (
            "SELECT k, v, rn FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, g) AS rn \
             FROM a WHERE v IS NOT NULL) AS x WHERE rn <= 2",
            None,
        ),
        ("SELECT k, v, ts FROM a ORDER BY v DESC NULLS LAST, ts, k LIMIT 3", None),
        (
            "SELECT k, f FROM a WHERE f = (SELECT MAX(f) FROM a)",
            Some(Why::FloatRows { column: s("f") }),
        ),
        (
            "SELECT k, v FROM (SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY f) AS r FROM a) AS x WHERE r <= 1",
            Some(Why::FloatRows { column: s("f") }),
        ),
        (
            // the subquery reads other rows than the outer query: not the same window's extremum
            "SELECT k, v FROM a WHERE v = (SELECT MAX(v) FROM a WHERE k > 1)",
            Some(Why::NoAggregate),
        ),
        ("SELECT g, MIN(g) AS first FROM a GROUP BY g", None),
        (
            "SELECT k, MIN(g) AS lo, MAX(g) FILTER (WHERE v > 0) AS hi, COUNT(DISTINCT g) AS n FROM a GROUP BY k",
            None,
        ),
        (
            "SELECT k, MIN(g) AS lo, COUNT(DISTINCT v) AS dv FROM a GROUP BY k",
            Some(Why::DistinctArguments {
                args: vec![s("a.g"), s("a.v")],
            }),
        ),
        (
            "SELECT k FROM a UNION ALL SELECT k FROM b",
            Some(Why::SeveralSources),
        ),
        (
            "SELECT k, COUNT(*) AS n FROM (SELECT k FROM a WHERE v > 0) s GROUP BY k",
            Some(Why::AggregateReads(Construct::Other(s("Projection: a.k")))),
        ),
        (
            "SELECT k, STDDEV(f) AS sd FROM a GROUP BY k",
            Some(Why::UnsupportedAggregate { func: s("STDDEV") }),
        ),
    ]
}

fn stream(seed: u64) -> Vec<Vec<(usize, Ev)>> {
    let mut r = SplitMix::new(seed);
    let mut t = 80_000i64;
    (0..6)
        .map(|_| {
            (0..25)
                .map(|_| {
                    t += r.below(150) as i64;
                    let e = Ev {
                        t: t - r.below(2_000) as i64,
                        k: r.below(4) as i64,
                        g: ["x", "y", "z"][r.below(3) as usize].to_string(),
                        v: (r.below(5) != 0).then(|| r.below(40) as i64 - 20),
                        f: r.below(100) as f64 / 4.0,
                    };
                    (r.below(2) as usize, e)
                })
                .collect()
        })
        .collect()
}

fn uses_b(sql: &str) -> bool {
    sql.contains(" b ") || sql.ends_with(" b") || sql.contains("JOIN b")
}

/// One query of the table through the engine: its plan, its `explain`, and its
/// output over `triggers`. The window is in the spec, or (`in_sql`) written in
/// the SQL over source `a` as `FROM HOP(a, ts, …)`.
fn route(
    sql: &str,
    sources: &[&str],
    in_sql: bool,
    triggers: &[Vec<(usize, Ev)>],
) -> (thund::ViewPlan, String, Vec<String>) {
    let win = WIN;
    let sql = if in_sql {
        common::window_in_sql_over(sql, "a", &common::hop_call_over("a", win))
    } else {
        sql.to_string()
    };
    let mut b = ViewSpec::builder("v", &sql).allowed_lateness(Duration::from_millis(300));
    if !in_sql {
        b = b.window(WindowSpec::hopping(
            Duration::from_millis(win.size as u64),
            Duration::from_millis(win.slide as u64),
        ));
    }
    for s in sources {
        b = b.source(s, "ts", common::schema());
    }
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(b.build().expect("spec")).expect("view");
    let plan = e.plan("v").expect("plan").clone();
    let explain = e.explain("v").expect("explain");
    (plan, explain, run(&mut e, sources, triggers))
}

/// Every trigger's and the end's rows of view `v`, `triggers` pushed to
/// `sources` (a row's source is its index there).
fn run(e: &mut Engine, sources: &[&str], triggers: &[Vec<(usize, Ev)>]) -> Vec<String> {
    let mut out = Vec::new();
    for trig in triggers {
        for (s, name) in sources.iter().enumerate() {
            let rows: Vec<Ev> = trig
                .iter()
                .filter(|(x, _)| *x == s)
                .map(|(_, e)| e.clone())
                .collect();
            e.push(name, batch(&rows)).expect("push");
        }
        out.extend(e.trigger().expect("trigger").views[0].output.clone());
    }
    out.extend(e.finish().expect("finish").views[0].output.clone());
    canon(&out)
}

/// The table's window: 2 s hopping by 1 s.
const WIN: Win = Win {
    size: 2000,
    slide: 1000,
};

#[test]
fn each_query_takes_its_path_and_equals_the_oracle() {
    let mut explains = String::new();
    for (i, (sql, expected_reason)) in table().into_iter().enumerate() {
        let sources: &[&str] = if uses_b(sql) { &["a", "b"] } else { &["a"] };
        let mut triggers = stream(i as u64);
        if sources.len() == 1 {
            for t in &mut triggers {
                for (s, _) in t.iter_mut() {
                    *s = 0;
                }
            }
        }
        let (plan, explain, out) = route(sql, sources, false, &triggers);
        assert_eq!(plan.reason(), expected_reason.as_ref(), "{sql}: {plan}");
        let path = if expected_reason.is_some() {
            PathKind::Recompute
        } else {
            PathKind::Incremental
        };
        assert_eq!(plan.path(), path, "{sql}: {plan}");
        explains.push_str(&format!("==== {sql}\n{explain}\n"));
        let (expected, _) = oracle(&triggers, sources, 300, WIN, sql);
        assert_eq!(out, expected, "{sql}");
        // the same view with its window written in the SQL: the same path, the
        // same reason, the same rows (a window over one of two sources is
        // another view: the table's joins and unions keep the spec's window)
        if sources.len() == 1 {
            let (in_sql, _, out_sql) = route(sql, sources, true, &triggers);
            assert_eq!(in_sql.path(), plan.path(), "{sql} in SQL: {in_sql}");
            assert_eq!(in_sql.reason(), plan.reason(), "{sql} in SQL: {in_sql}");
            assert_eq!(out_sql, expected, "{sql}, the window in SQL");
        }
    }
    // the whole routing table as `explain` prints it: a change is a reviewed diff
    insta::assert_snapshot!("routing_explain", explains);
}

/// Session views grouped by exactly their key (or global with no key) are
/// incremental; grouped otherwise, ranked, kept per value or keyed by a
/// float they stay on recompute, each with its reason.
#[test]
fn session_views_route_by_shape() {
    let session = |key: &[&str]| WindowSpec::session(Duration::from_secs(1), key);
    let incremental = [
        ("SELECT k, COUNT(*) AS c FROM a GROUP BY k", vec!["k"]),
        (
            "SELECT g, k, SUM(v) AS s FROM a WHERE v > 0 GROUP BY k, g",
            vec!["k", "g"],
        ),
        ("SELECT COUNT(*) AS c, MAX(ts) AS last FROM a", vec![]),
    ];
    let plan_of = |sql: &str, key: &[&str]| {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(
            ViewSpec::builder("v", sql)
                .source("a", "ts", common::schema())
                .window(session(key))
                .build()
                .expect("spec"),
        )
        .expect("view");
        e.plan("v").expect("plan").clone()
    };
    // the same session written in the SQL: its key is the query's GROUP BY
    let plan_in_sql = |sql: &str| {
        let sql = sql.replace("FROM a", "FROM SESSION(a, ts, INTERVAL '1' SECOND)");
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(
            ViewSpec::builder("v", &sql)
                .source("a", "ts", common::schema())
                .build()
                .expect("spec"),
        )
        .expect("view");
        e.plan("v").expect("plan").clone()
    };
    for (sql, key) in incremental {
        let plan = plan_of(sql, &key);
        assert_eq!(plan.path(), PathKind::Incremental, "{sql}: {plan}");
        assert!(
            plan.to_string().contains("sessions per key, gap 1000 ms"),
            "{plan}"
        );
        assert_eq!(
            plan_in_sql(sql).to_string(),
            plan.to_string(),
            "{sql} in SQL"
        );
    }
    let fallback = [
        (
            "SELECT k, g, COUNT(*) AS c FROM a GROUP BY k, g",
            vec!["k"],
            "GROUP BY (g, k) is not the session key (k)",
        ),
        (
            "SELECT COUNT(*) AS c FROM a",
            vec!["k"],
            "GROUP BY () is not the session key (k)",
        ),
        (
            "SELECT k % 2 AS p, COUNT(*) AS c FROM a GROUP BY k % 2",
            vec!["k"],
            "is not a column of the session key",
        ),
        (
            "SELECT f, COUNT(*) AS c FROM a GROUP BY f",
            vec!["f"],
            "of type Float64 is not incremental",
        ),
        (
            "SELECT k, COUNT(DISTINCT g) AS n FROM a GROUP BY k",
            vec!["k"],
            "kept per value",
        ),
        (
            "SELECT k, COUNT(*) AS c FROM a GROUP BY k ORDER BY c LIMIT 1",
            vec!["k"],
            "ORDER BY … LIMIT",
        ),
    ];
    for (sql, key, why) in fallback {
        let plan = plan_of(sql, &key);
        assert_eq!(plan.path(), PathKind::Recompute, "{sql}");
        assert!(
            matches!(plan.reason(), Some(Why::SessionShape { what }) if what.contains(why)),
            "{sql}: {plan}"
        );
        // in SQL the key is the GROUP BY, so only the other reasons carry over
        if !why.contains("session key") {
            let in_sql = plan_in_sql(sql);
            assert_eq!(in_sql.reason(), plan.reason(), "{sql} in SQL: {in_sql}");
        }
    }
}

#[test]
fn no_window_and_forced_recompute_fall_back_with_reasons() {
    let sql = "SELECT k, COUNT(*) AS c FROM a GROUP BY k";
    let cases = [
        (None, ExecMode::Auto, OutputMode::Complete, Why::NoWindow),
        (
            Some(WindowSpec::tumbling(Duration::from_secs(1))),
            ExecMode::Recompute,
            OutputMode::Append,
            Why::Requested,
        ),
    ];
    for (w, mode, out, why) in cases {
        let mut b = ViewSpec::builder("v", sql)
            .source("a", "ts", common::schema())
            .mode(mode)
            .output(out);
        if let Some(w) = w {
            b = b.window(w);
        }
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(b.build().expect("spec")).expect("view");
        let plan = e.plan("v").expect("plan");
        assert_eq!(plan.path(), PathKind::Recompute);
        assert_eq!(plan.reason(), Some(&why), "{plan}");
    }
}

/// A join whose rest is an aggregate over its output folds each step's new
/// pairs into that aggregate, over tumbling and hopping windows (explain
/// says so); under a global aggregate (a window without pairs still has its
/// row) the rest runs per window over the window's pairs. Either way the
/// rows are the oracle's.
#[test]
fn joins_feeding_an_aggregate_fold_their_new_pairs() {
    const FEEDS: &str = "the join's new pairs feed";
    let grouped =
        "SELECT a.k, COUNT(*) AS n, MAX(b.v) AS m FROM a JOIN b ON a.k = b.k GROUP BY a.k";
    let nested = "SELECT q.g, AVG(q.m) AS am FROM \
                  (SELECT a.k, b.g, MAX(b.v) AS m FROM a JOIN b ON a.k = b.k WHERE a.v < b.v \
                   GROUP BY a.k, b.g) AS q GROUP BY q.g";
    let global = "SELECT COUNT(*) AS n FROM a JOIN b ON a.k = b.k";
    let global_over_groups = "SELECT COUNT(*) AS keys FROM \
                              (SELECT a.k FROM a JOIN b ON a.k = b.k GROUP BY a.k) AS q";
    let tumbling = Win {
        size: 1000,
        slide: 1000,
    };
    let cases = [
        (grouped, tumbling, true),
        (nested, tumbling, true),
        (global, tumbling, false),
        (global_over_groups, tumbling, false),
        // hopping: a window's pairs in a unit of one slide at its start
        (grouped, WIN, true),
        (nested, WIN, true),
        (global, WIN, false),
    ];
    for (i, (sql, win, feeds)) in cases.into_iter().enumerate() {
        let triggers = stream(100 + i as u64);
        let spec = ViewSpec::builder("v", sql)
            .allowed_lateness(Duration::from_millis(300))
            .window(WindowSpec::hopping(
                Duration::from_millis(win.size as u64),
                Duration::from_millis(win.slide as u64),
            ))
            .source("a", "ts", common::schema())
            .source("b", "ts", common::schema())
            .build()
            .expect("spec");
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(spec).expect("view");
        assert_eq!(
            e.plan("v").expect("plan").path(),
            PathKind::Incremental,
            "{sql}"
        );
        let explain = e.explain("v").expect("explain");
        assert_eq!(explain.contains(FEEDS), feeds, "{sql}: {explain}");
        if i == 1 {
            // what the aggregate fed by the join looks like: a reviewed diff
            insta::assert_snapshot!("join_feeds_explain", explain);
        }
        let out = run(&mut e, &["a", "b"], &triggers);
        let (expected, _) = oracle(&triggers, &["a", "b"], 300, win, sql);
        assert_eq!(out, expected, "{sql}");
    }
}
