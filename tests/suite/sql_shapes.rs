//! Any SQL DataFusion runs over the sources works on the recompute path:
//! joins between sources, DISTINCT, HAVING, window functions, subqueries,
//! ORDER BY/LIMIT — each checked against the batch oracle on seeded random
//! streams over two sources. Every third seed writes the window in the SQL
//! (on the first source the query reads; a UNION, whose branches would each
//! need the bounds, keeps it in the spec).

use crate::common;

use std::time::Duration;

use common::SplitMix;
use common::{batch, canon, oracle, Ev, Win};
use thund::{Engine, ExecMode, PathKind, ViewSpec, WindowSpec};

const QUERIES: &[&str] = &[
    "SELECT a.k, COUNT(*) AS n, SUM(b.v) AS sv FROM a JOIN b ON a.k = b.k GROUP BY a.k",
    "SELECT a.g, b.g AS bg FROM a LEFT JOIN b ON a.k = b.k AND a.g = b.g WHERE a.v > 0",
    "SELECT DISTINCT k, g FROM a",
    "SELECT k, COUNT(*) AS n FROM a GROUP BY k HAVING COUNT(*) > 2",
    "SELECT k, v, RANK() OVER (PARTITION BY k ORDER BY v) AS r FROM a WHERE v IS NOT NULL",
    "SELECT k, COUNT(*) AS n FROM a WHERE v > (SELECT AVG(v) FROM a) GROUP BY k",
    "SELECT k, SUM(v) AS s FROM a GROUP BY k ORDER BY s DESC NULLS LAST, k LIMIT 2",
    "SELECT COUNT(DISTINCT g) AS dg, COUNT(DISTINCT k) AS dk FROM a",
    "SELECT k, 'a' AS side FROM a UNION ALL SELECT k, 'b' AS side FROM b",
    "SELECT k, f * 2 AS f2, CASE WHEN v > 0 THEN 'pos' ELSE 'neg' END AS sign FROM b",
    "SELECT k FROM a WHERE k IN (SELECT k FROM b WHERE v < 0)",
];

fn stream(seed: u64) -> Vec<Vec<(usize, Ev)>> {
    let mut r = SplitMix::new(seed);
    let mut t = 50_000i64;
    let mut triggers = Vec::new();
    for _ in 0..(3 + r.below(8)) {
        let mut trig = Vec::new();
        for _ in 0..r.below(30) {
            t += r.below(120) as i64;
            let e = Ev {
                t: t - r.below(2_500) as i64,
                k: r.below(4) as i64,
                g: ["x", "y"][r.below(2) as usize].to_string(),
                v: (r.below(5) != 0).then(|| r.below(40) as i64 - 20),
                f: r.below(100) as f64 / 4.0,
            };
            trig.push((r.below(2) as usize, e));
        }
        triggers.push(trig);
    }
    triggers
}

#[test]
fn every_query_shape_equals_the_oracle() {
    let seeds = common::cases(6) as u64;
    for (qi, sql) in QUERIES.iter().enumerate() {
        for seed in 0..seeds {
            let triggers = stream(seed * 100 + qi as u64);
            let (lateness, win) = if seed % 2 == 0 {
                (
                    500,
                    Win {
                        size: 1000,
                        slide: 1000,
                    },
                )
            } else {
                (
                    0,
                    Win {
                        size: 2000,
                        slide: 500,
                    },
                )
            };
            let (expected, _) = oracle(&triggers, &["a", "b"], lateness, win, sql);
            let spec = ViewSpec::builder("v", sql)
                .source("a", "ts", common::schema())
                .source("b", "ts", common::schema())
                .window(WindowSpec::hopping(
                    Duration::from_millis(win.size as u64),
                    Duration::from_millis(win.slide as u64),
                ))
                .allowed_lateness(Duration::from_millis(lateness as u64))
                // the recompute path on every shape (a join of two sources is
                // incremental on auto: see law_join)
                .mode(ExecMode::Recompute)
                .build()
                .expect("spec");
            let spec = match seed % 3 == 2 && !sql.contains("UNION") {
                true => common::in_sql(&spec).expect("a SQL spelling"),
                false => spec,
            };
            let mut e = Engine::builder().build().expect("engine");
            e.create_view(spec).expect("view");
            assert_eq!(e.plan("v").expect("plan").path(), PathKind::Recompute);
            let mut out = Vec::new();
            for trig in &triggers {
                for (s, ev) in trig {
                    e.push(["a", "b"][*s], batch(std::slice::from_ref(ev)))
                        .expect("push");
                }
                out.extend(e.trigger().expect("trigger").views[0].output.clone());
            }
            out.extend(e.finish().expect("finish").views[0].output.clone());
            assert_eq!(canon(&out), expected, "query {sql} seed {seed}");
        }
    }
}
