//! The law, recompute side: on random disordered streams split into random
//! triggers, the engine's output equals the independent batch oracle; row
//! order within a trigger changes nothing; Update and Complete agree with
//! Append at `finish()`. Half the cases write the window in the SQL.

use crate::common;

use std::time::Duration;

use arrow::array::RecordBatch;
use common::SplitMix;
use common::{answer, batch, canon, cases, oracle, Ev, Win};
use proptest::prelude::*;
use thund::{Engine, OutputMode, ViewSpec, WindowSpec};

const QUERIES: &[&str] = &[
    "SELECT k, COUNT(*) AS c, SUM(v) AS s, MIN(v) AS mn, MAX(v) AS mx, AVG(v) AS a FROM t GROUP BY k",
    "SELECT g, COUNT(v) AS c, SUM(f) AS sf, AVG(f) AS af, MIN(f) AS mnf FROM t WHERE v > 0 GROUP BY g",
    "SELECT COUNT(*) AS c, SUM(v) AS s, MAX(f) AS mx FROM t",
    "SELECT k, g, COUNT(*) AS c, MAX(v) AS mx FROM t WHERE f < 50 GROUP BY k, g",
];

#[derive(Clone, Debug)]
struct Case {
    triggers: Vec<Vec<Ev>>,
    lateness: i64,
    win: Win,
    query: usize,
    shuffle_seed: u64,
    /// The window written in the SQL (`FROM HOP(t, ts, …)`), not the spec.
    in_sql: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        common::stream(),
        0..QUERIES.len(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |((triggers, lateness, win), query, shuffle_seed, in_sql)| Case {
                triggers,
                lateness,
                win,
                query,
                shuffle_seed,
                in_sql,
            },
        )
}

/// Run the case through the engine; the reports' outputs, trigger by trigger.
fn run(c: &Case, mode: OutputMode, shuffle: bool) -> (Vec<Vec<RecordBatch>>, u64) {
    let spec = if c.in_sql {
        let call = format!(
            "HOP(t, ts, INTERVAL '{}' MILLISECOND, INTERVAL '{}' MILLISECOND)",
            c.win.slide, c.win.size
        );
        ViewSpec::builder("v", &common::window_in_sql(QUERIES[c.query], &call))
    } else {
        ViewSpec::builder("v", QUERIES[c.query]).window(WindowSpec::hopping(
            Duration::from_millis(c.win.size as u64),
            Duration::from_millis(c.win.slide as u64),
        ))
    };
    let spec = spec
        .source("t", "ts", common::schema())
        .allowed_lateness(Duration::from_millis(c.lateness as u64))
        .output(mode)
        .mode(thund::ExecMode::Recompute)
        .build()
        .expect("spec");
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(spec).expect("view");
    let mut rng = SplitMix::new(c.shuffle_seed);
    let mut outs = Vec::new();
    for trig in &c.triggers {
        let mut rows = trig.clone();
        if shuffle {
            for i in (1..rows.len()).rev() {
                rows.swap(i, rng.below(i as u64 + 1) as usize);
            }
            // and split the trigger's rows over two pushes
            let half = rows.len() / 2;
            e.push("t", batch(&rows[..half])).expect("push");
            e.push("t", batch(&rows[half..])).expect("push");
        } else {
            e.push("t", batch(&rows)).expect("push");
        }
        outs.push(e.trigger().expect("trigger").views[0].output.clone());
    }
    outs.push(e.finish().expect("finish").views[0].output.clone());
    (outs, e.counters("v").expect("counters").late_rows_dropped)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn recompute_equals_the_batch_oracle(c in case()) {
        let triggers: Vec<Vec<(usize, Ev)>> = c.triggers.iter().map(|t| t.iter().map(|e| (0, e.clone())).collect()).collect();
        let (expected, late) = oracle(&triggers, &["t"], c.lateness, c.win, QUERIES[c.query]);

        let (append, append_late) = run(&c, OutputMode::Append, false);
        let got = canon(&append.concat());
        prop_assert_eq!(&got, &expected);
        prop_assert_eq!(append_late, late, "late rows counted");

        let (shuffled, _) = run(&c, OutputMode::Append, true);
        prop_assert_eq!(&canon(&shuffled.concat()), &expected, "row order within a trigger changed the output");

        let (update, _) = run(&c, OutputMode::Update, false);
        prop_assert_eq!(&answer(OutputMode::Update, &update), &expected, "Update's final rows differ from Append");

        let (complete, _) = run(&c, OutputMode::Complete, false);
        let last = complete.last().cloned().unwrap_or_default();
        prop_assert_eq!(&canon(&last), &expected, "Complete at finish differs from Append");
    }
}
