//! Session windows, three ways: per key, sessions are maximal runs of
//! accepted rows whose spans `[t, t+gap)` overlap; a row is late iff its span
//! ends at or before W_prev or overlaps a session already closed. The
//! incremental path (units chained into sessions), the recompute path and an
//! independent oracle (sessions formed here, each evaluated by DataFusion)
//! agree: both paths row for row at every trigger, in every output mode, with
//! 1 and 2 workers, and the dataflow's frontier is the watermark.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{answer, batch, canon, cases, schema, ts, Ev};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use proptest::prelude::*;
use thund::{Engine, ExecMode, OutputMode, PathKind, ViewSpec, WindowSpec};

/// Session queries and whether they are keyed by `k` (else one global
/// session stream): WHERE refuses rows that still extend their session,
/// FILTER, HAVING, expressions over keys and aggregates, NULL arguments.
const QUERIES: &[(&str, bool)] = &[
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS mf FROM t GROUP BY k",
        true,
    ),
    (
        "SELECT k, COUNT(*) AS c, MIN(v) AS mn, AVG(f) AS af, MAX(ts) AS last, SUM(d) AS sd \
         FROM t WHERE v > 0 GROUP BY k",
        true,
    ),
    (
        "SELECT k * 2 AS k2, COUNT(*) FILTER (WHERE v < 0) AS neg, MAX(v) - MIN(v) AS spread \
         FROM t GROUP BY k HAVING COUNT(*) > 1",
        true,
    ),
    (
        "SELECT COUNT(*) AS c, SUM(v) AS s, MIN(f) AS mf FROM t WHERE v > 5",
        false,
    ),
    (
        "SELECT COUNT(v) AS n, AVG(v) AS a, MIN(ts) AS first FROM t",
        false,
    ),
];

/// Sessions of one key's rows: (start, end = last + gap, rows).
fn sessionize(mut rows: Vec<Ev>, gap: i64) -> Vec<(i64, i64, Vec<Ev>)> {
    rows.sort_by_key(|e| e.t);
    let mut out: Vec<(i64, i64, Vec<Ev>)> = Vec::new();
    for e in rows {
        match out.last_mut() {
            Some((_, end, rs)) if e.t < *end => {
                *end = (*end).max(e.t + gap);
                rs.push(e);
            }
            _ => out.push((e.t, e.t + gap, vec![e])),
        }
    }
    out
}

fn session_oracle(
    triggers: &[Vec<Ev>],
    gap: i64,
    lateness: i64,
    (sql, keyed): (&str, bool),
) -> (Vec<String>, u64) {
    let key = |e: &Ev| if keyed { e.k } else { 0 };
    let mut accepted: BTreeMap<i64, Vec<Ev>> = BTreeMap::new();
    let (mut wm, mut max, mut late) = (None::<i64>, None::<i64>, 0u64);
    for trig in triggers {
        let w_prev = wm;
        let closed: BTreeMap<i64, Vec<(i64, i64)>> = accepted
            .iter()
            .map(|(k, rows)| {
                let c = sessionize(rows.clone(), gap)
                    .into_iter()
                    .filter(|(_, end, _)| w_prev.is_some_and(|wp| *end <= wp))
                    .map(|(s, e, _)| (s, e))
                    .collect();
                (*k, c)
            })
            .collect();
        for e in trig {
            max = Some(max.map_or(e.t, |m| m.max(e.t)));
            let behind = w_prev.is_some_and(|wp| e.t + gap <= wp);
            let merges = closed
                .get(&key(e))
                .is_some_and(|c| c.iter().any(|(s, end)| e.t < *end && e.t + gap > *s));
            if behind || merges {
                late += 1;
            } else {
                accepted.entry(key(e)).or_default().push(e.clone());
            }
        }
        if let Some(m) = max {
            wm = Some(wm.map_or(m - lateness, |w| w.max(m - lateness)));
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let mut out = Vec::new();
    for rows in accepted.into_values() {
        for (s, e, rs) in sessionize(rows, gap) {
            let ctx = SessionContext::new();
            let t = MemTable::try_new(schema(), vec![vec![batch(&rs)]]).expect("memtable");
            ctx.register_table("t", Arc::new(t)).expect("register");
            let res = rt
                .block_on(async { ctx.sql(sql).await?.collect().await })
                .expect("sql");
            for line in canon(&res) {
                out.push(format!("{}|{}|{line}", ts(s), ts(e)));
            }
        }
    }
    out.sort();
    (out, late)
}

/// What one run emitted: every trigger's rows, the mode's answer, the late count.
type Run = (Vec<Vec<String>>, Vec<String>, u64);

#[allow(clippy::too_many_arguments)]
fn run(
    triggers: &[Vec<Ev>],
    gap: i64,
    lateness: i64,
    (sql, keyed): (&str, bool),
    mode: OutputMode,
    exec: ExecMode,
    workers: usize,
    in_sql: bool,
) -> Result<Run, TestCaseError> {
    let key: &[&str] = if keyed { &["k"] } else { &[] };
    // the window in the spec, or in the SQL (`FROM SESSION(t, ts, …)`, the
    // key taken from GROUP BY)
    let spec = if in_sql {
        let call = format!("SESSION(t, ts, INTERVAL '{gap}' MILLISECOND)");
        ViewSpec::builder("s", &crate::common::window_in_sql(sql, &call)).source(
            "t",
            "ts",
            schema(),
        )
    } else {
        ViewSpec::builder("s", sql)
            .source("t", "ts", schema())
            .window(WindowSpec::session(Duration::from_millis(gap as u64), key))
    };
    let spec = spec
        .allowed_lateness(Duration::from_millis(lateness as u64))
        .output(mode)
        .mode(exec)
        .build()
        .expect("spec");
    let mut e = Engine::builder().workers(workers).build().expect("engine");
    e.create_view(spec).expect("view");
    let want = match exec {
        ExecMode::Auto => PathKind::Incremental,
        _ => PathKind::Recompute,
    };
    prop_assert_eq!(
        e.plan("s").expect("plan").path(),
        want,
        "{}",
        e.explain("s").unwrap_or_default()
    );
    let mut outs = Vec::new();
    for (i, trig) in triggers.iter().enumerate() {
        e.push("t", batch(trig)).expect("push");
        let r = e.trigger().expect("trigger");
        let v = &r.views[0];
        if exec == ExecMode::Auto {
            prop_assert_eq!(v.frontier, v.watermark, "frontier after trigger {}", i + 1);
        }
        outs.push(v.output.clone());
    }
    outs.push(e.finish().expect("finish").views[0].output.clone());
    Ok((
        outs.iter().map(|o| canon(o)).collect(),
        answer(mode, &outs),
        e.counters("s").expect("counters").late_rows_dropped,
    ))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(32), ..ProptestConfig::default() })]

    /// Rows of three keys about 250 ms apart (each key's about 750 ms) and
    /// up to 1.6 s out of order, with a 1 s gap: sessions both break and run
    /// on for many gaps (their early units carried), and some rows are late.
    #[test]
    fn sessions_incremental_equals_recompute_equals_oracle(
        rows in prop::collection::vec((0i64..3, 0i64..7, 0i64..4, -20i64..20), 0..90),
        cuts in prop::collection::vec(1usize..20, 1..10),
        lateness in prop_oneof![Just(0i64), Just(500i64), Just(1500i64)],
        mode in prop_oneof![Just(OutputMode::Append), Just(OutputMode::Update), Just(OutputMode::Complete)],
        query in 0..QUERIES.len(),
        workers in 1usize..=2,
        in_sql in any::<bool>(),
    ) {
        let gap = 1000i64;
        let mut t = 10_000i64;
        let evs: Vec<Ev> = rows
            .into_iter()
            .map(|(k, step, back, v)| {
                t += step * 100;
                // a long pause now and then ends every session
                if step == 6 {
                    t += 2_500;
                }
                Ev { t: t - back * 400, k, g: "g".into(), v: (v != -20).then_some(v), f: v as f64 / 2.0 }
            })
            .collect();
        let mut triggers = Vec::new();
        let mut rest = &evs[..];
        for c in cuts {
            let n = c.min(rest.len());
            triggers.push(rest[..n].to_vec());
            rest = &rest[n..];
        }
        triggers.push(rest.to_vec());
        let q = QUERIES[query];
        let (expected, late) = session_oracle(&triggers, gap, lateness, q);
        // the incremental run with its window in SQL half the time (issue 11)
        let (inc_rows, inc, inc_late) = run(&triggers, gap, lateness, q, mode, ExecMode::Auto, workers, in_sql)?;
        let (rec_rows, rec, rec_late) = run(&triggers, gap, lateness, q, mode, ExecMode::Recompute, 1, false)?;
        prop_assert_eq!(&inc_rows, &rec_rows, "incremental vs recompute, per trigger");
        prop_assert_eq!(&inc, &expected, "incremental vs oracle");
        prop_assert_eq!(&rec, &expected, "recompute vs oracle");
        prop_assert_eq!(inc_late, late);
        prop_assert_eq!(rec_late, late);
    }
}
