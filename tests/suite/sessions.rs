//! Session windows against their own oracle: per key, sessions are maximal
//! runs of accepted rows whose spans `[t, t+gap)` overlap; a row is late iff
//! its span ends at or before W_prev or overlaps a session already closed.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{answer, batch, canon, cases, schema, ts, Ev};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use proptest::prelude::*;
use thund::{Engine, OutputMode, ViewSpec, WindowSpec};

const SQL: &str = "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS mf FROM t GROUP BY k";

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

fn session_oracle(triggers: &[Vec<Ev>], gap: i64, lateness: i64) -> (Vec<String>, u64) {
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
                .get(&e.k)
                .is_some_and(|c| c.iter().any(|(s, end)| e.t < *end && e.t + gap > *s));
            if behind || merges {
                late += 1;
            } else {
                accepted.entry(e.k).or_default().push(e.clone());
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
                .block_on(async { ctx.sql(SQL).await?.collect().await })
                .expect("sql");
            for line in canon(&res) {
                out.push(format!("{}|{}|{line}", ts(s), ts(e)));
            }
        }
    }
    out.sort();
    (out, late)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn sessions_equal_their_oracle(
        rows in prop::collection::vec((0i64..3, 0i64..6, 0i64..4, -20i64..20), 0..80),
        cuts in prop::collection::vec(1usize..20, 1..10),
        lateness in prop_oneof![Just(0i64), Just(500i64), Just(1500i64)],
        mode in prop_oneof![Just(OutputMode::Append), Just(OutputMode::Update), Just(OutputMode::Complete)],
    ) {
        let gap = 1000i64;
        let mut t = 10_000i64;
        let evs: Vec<Ev> = rows
            .into_iter()
            .map(|(k, step, back, v)| {
                t += step * 100;
                Ev { t: t - back * 400, k, g: "g".into(), v: Some(v), f: v as f64 / 2.0 }
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
        let (expected, late) = session_oracle(&triggers, gap, lateness);

        let spec = ViewSpec::builder("s", SQL)
            .source("t", "ts", schema())
            .window(WindowSpec::session(Duration::from_millis(gap as u64), &["k"]))
            .allowed_lateness(Duration::from_millis(lateness as u64))
            .output(mode)
            .build()
            .expect("spec");
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(spec).expect("view");
        let mut outs = Vec::new();
        for trig in &triggers {
            e.push("t", batch(trig)).expect("push");
            outs.push(e.trigger().expect("trigger").views[0].output.clone());
        }
        outs.push(e.finish().expect("finish").views[0].output.clone());
        let got = answer(mode, &outs);
        prop_assert_eq!(got, expected);
        prop_assert_eq!(e.counters("s").expect("counters").late_rows_dropped, late);
    }
}
