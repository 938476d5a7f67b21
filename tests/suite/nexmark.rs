//! Every Nexmark query of `benches/nexmark/` on a small generated stream:
//! the path it takes (incremental, or recompute with its reason), and the
//! same rows on both paths, trigger by trigger, with 1 and 2 workers.

use crate::common::nexmark::query;
use crate::common::{canon, nexmark};

use thund::{ExecMode, FallbackReason as Why, OutputMode, PathKind};

/// Each query's path on `auto`: `None` = incremental.
fn expected(q: &str) -> Option<Why> {
    match q {
        "q0" | "q1" | "q2" => Some(Why::NoAggregate),
        // each side of q8's join is a GROUP BY (the window's distinct persons and sellers)
        "q8" => Some(Why::JoinShape {
            what: "a side reads more than filters and projections of one source (Aggregate)".into(),
        }),
        _ => None,
    }
}

#[test]
fn every_query_takes_its_path_and_agrees_with_recompute() {
    // 24 s of event time: 10 s windows close mid-stream, hopping ones every 2 s
    let triggers = nexmark::triggers(6_000, 250, 300);
    for (i, q) in nexmark::QUERIES.iter().enumerate() {
        // the files' Append mode, and Update mode (every trigger's changes) for every other query
        let output = (i % 2 == 1).then_some(OutputMode::Update);
        for workers in [1, 2] {
            let (mut inc, view, sources) = nexmark::engine(q, ExecMode::Auto, workers, output);
            let plan = inc.plan(&view).expect("plan").clone();
            let want = expected(q);
            assert_eq!(plan.reason(), want.as_ref(), "{q}: {plan}");
            let path = if want.is_some() {
                PathKind::Recompute
            } else {
                PathKind::Incremental
            };
            assert_eq!(plan.path(), path, "{q}");
            let (mut rec, _, _) = nexmark::engine(q, ExecMode::Recompute, workers, output);
            let (mut rows, mut before_finish) = (0, 0);
            for (i, t) in triggers.iter().enumerate() {
                let a = nexmark::step(&mut inc, t, &sources);
                let b = nexmark::step(&mut rec, t, &sources);
                let (a, b) = (
                    &a.view(&view).expect("v").output,
                    &b.view(&view).expect("v").output,
                );
                assert_eq!(canon(a), canon(b), "{q}, {workers} workers, trigger {i}");
                rows += canon(a).len();
            }
            before_finish = before_finish.max(rows);
            let (a, b) = (inc.finish().expect("finish"), rec.finish().expect("finish"));
            let (a, b) = (
                &a.view(&view).expect("v").output,
                &b.view(&view).expect("v").output,
            );
            assert_eq!(canon(a), canon(b), "{q}, {workers} workers, at finish");
            rows += canon(a).len();
            assert!(rows > 0, "{q} emitted nothing over the stream");
            // all but the daily windows close before the end of the stream
            if !matches!(*q, "q15" | "q16" | "q17") {
                assert!(before_finish > 0, "{q} emitted nothing before finish");
            }
        }
    }
}

/// Nexmark q5 as Flink's own repository writes it, with legacy group windows
/// (`HOP(…)` in `GROUP BY`, `HOP_START`/`HOP_END` in the select list; the
/// bounds also selected, as `q5.sql` shows them), gives `q5.sql`'s rows at
/// every trigger, on both paths, with 1 and 2 workers.
#[test]
fn flinks_own_q5_with_legacy_windows_equals_q5() {
    let ddl = query("q5");
    let source =
        &ddl[ddl.find("CREATE SOURCE").expect("source")..ddl.find("CREATE VIEW").expect("view")];
    let hop = "B1.date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND";
    let flink = format!(
        "-- Nexmark q5, Flink's text\n{source}
        CREATE VIEW q5 AS
        SELECT AuctionBids.auction, AuctionBids.num,
               AuctionBids.starttime AS window_start, AuctionBids.endtime AS window_end
        FROM (
          SELECT B1.auction, count(*) AS num,
                 HOP_START({hop}) AS starttime, HOP_END({hop}) AS endtime
          FROM bid B1
          GROUP BY B1.auction, HOP({hop})
        ) AS AuctionBids
        JOIN (
          SELECT max(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime
          FROM (
            SELECT count(*) AS num,
                   HOP_START({b2}) AS starttime, HOP_END({b2}) AS endtime
            FROM bid B2
            GROUP BY B2.auction, HOP({b2})
          ) AS CountBids
          GROUP BY CountBids.starttime, CountBids.endtime
        ) AS MaxBids
        ON AuctionBids.starttime = MaxBids.starttime AND
           AuctionBids.endtime = MaxBids.endtime AND
           AuctionBids.num >= MaxBids.maxn;",
        b2 = hop.replace("B1.", "B2.")
    );
    let triggers = nexmark::triggers(6_000, 250, 300);
    for workers in [1, 2] {
        let output = Some(OutputMode::Update);
        let (mut want, view, sources) = nexmark::engine("q5", ExecMode::Auto, workers, output);
        let mut runs = [ExecMode::Auto, ExecMode::Recompute]
            .map(|mode| nexmark::engine_of(&flink, mode, workers, output).0);
        assert_eq!(
            runs[0].plan(&view).expect("plan").path(),
            PathKind::Incremental
        );
        let mut rows = 0;
        for (i, t) in triggers.iter().enumerate() {
            let w = canon(
                &nexmark::step(&mut want, t, &sources)
                    .view(&view)
                    .expect("v")
                    .output,
            );
            for e in &mut runs {
                let got = nexmark::step(e, t, &sources);
                assert_eq!(
                    canon(&got.view(&view).expect("v").output),
                    w,
                    "{workers} workers, trigger {i}"
                );
            }
            rows += w.len();
        }
        let w = canon(
            &want
                .finish()
                .expect("finish")
                .view(&view)
                .expect("v")
                .output,
        );
        for e in &mut runs {
            assert_eq!(
                canon(&e.finish().expect("finish").view(&view).expect("v").output),
                w
            );
        }
        assert!(rows > 0, "q5 emitted nothing before finish");
    }
}
