//! One timely instance per engine: every incremental view's dataflow runs on the engine's
//! workers (one stepped on the caller's thread, or worker threads), and views sharing them
//! give the answers each gives alone.
//!
//! This file holds one test on purpose: it counts the process's timely worker threads,
//! which other tests running beside it in the same binary would start too.

#[path = "suite/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{batch, canon, Ev, SplitMix};
use thund::{Engine, ExecMode, OutputMode, PathKind, ViewSpec, WindowSpec};

/// Threads of this process that timely started (`timely:work-<index>`).
fn timely_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("timely:work-"))
        .count()
}

/// [`timely_threads`] once joined threads are gone: a joined thread can stay
/// listed in `/proc` for a moment after `join` returned (the kernel wakes the
/// joiner before it reaps the thread).
fn settled_timely_threads() -> usize {
    for _ in 0..200 {
        if timely_threads() == 0 {
            return 0;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    timely_threads()
}

/// Ten views over one source: several windows, queries and output modes,
/// all incremental; on auto, every other one has its window written in SQL.
fn specs(mode: ExecMode) -> Vec<ViewSpec> {
    let s = Duration::from_secs;
    let windows = [
        WindowSpec::tumbling(s(1)),
        WindowSpec::tumbling(s(3)),
        WindowSpec::hopping(s(4), s(1)),
        WindowSpec::hopping(s(3), s(2)),
        WindowSpec::tumbling(s(10)),
    ];
    let queries = [
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM a GROUP BY k",
        "SELECT g, MAX(f) AS m, AVG(v) AS av, MIN(d) AS md FROM a WHERE k > 0 GROUP BY g",
    ];
    let outputs = [OutputMode::Append, OutputMode::Update, OutputMode::Complete];
    (0..10)
        .map(|i| {
            ViewSpec::builder(&format!("v{i}"), queries[i % 2])
                .source("a", "ts", common::schema())
                .window(windows[i % windows.len()].clone())
                .allowed_lateness(Duration::from_millis(700))
                .output(outputs[i % outputs.len()])
                .mode(mode)
                .build()
                .expect("spec")
        })
        .enumerate()
        .map(|(i, spec)| match mode == ExecMode::Auto && i % 2 == 1 {
            true => common::in_sql(&spec).expect("a SQL spelling"),
            false => spec,
        })
        .collect()
}

fn stream(seed: u64) -> Vec<Vec<Ev>> {
    let mut r = SplitMix::new(seed);
    let mut t = 50_000i64;
    (0..12)
        .map(|_| {
            (0..40)
                .map(|_| {
                    t += r.below(120) as i64;
                    Ev {
                        t: t - r.below(1_500) as i64,
                        k: r.below(5) as i64,
                        g: ["x", "y", "z"][r.below(3) as usize].to_string(),
                        v: (r.below(6) != 0).then(|| r.below(50) as i64 - 25),
                        f: r.below(100) as f64 / 8.0,
                    }
                })
                .collect()
        })
        .collect()
}

/// Every view's output, per trigger, in canonical form.
fn run(engine: &mut Engine, stream: &[Vec<Ev>]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut record = |report: thund::TriggerReport| {
        for v in &report.views {
            out.push(
                std::iter::once(v.view.clone())
                    .chain(canon(&v.output))
                    .collect(),
            );
        }
    };
    for rows in stream {
        engine.push("a", batch(rows)).expect("push");
        record(engine.trigger().expect("trigger"));
    }
    record(engine.finish().expect("finish"));
    out
}

#[test]
fn ten_views_share_the_engines_workers_and_answer_as_recompute_does() {
    // recompute views need no worker threads
    let mut e = Engine::builder().workers(2).build().expect("engine");
    for spec in specs(ExecMode::Recompute) {
        e.create_view(spec).expect("view");
    }
    assert_eq!(
        timely_threads(),
        0,
        "recompute views started timely threads"
    );
    let stream = stream(7);
    let expected = run(&mut e, &stream);
    drop(e);
    assert_eq!(settled_timely_threads(), 0);

    for workers in [1, 2] {
        let mut e = Engine::builder().workers(workers).build().expect("engine");
        for spec in specs(ExecMode::Auto) {
            e.create_view(spec).expect("view");
        }
        for v in e.views() {
            assert_eq!(e.plan(v).expect("plan").path(), PathKind::Incremental);
        }
        // one worker is stepped on the thread that triggers: no thread of its own
        let threads = if workers == 1 { 0 } else { workers };
        assert_eq!(
            timely_threads(),
            threads,
            "10 views on {workers} workers: one timely instance per engine"
        );
        let got = run(&mut e, &stream);
        assert_eq!(got, expected, "{workers} workers");
        drop(e);
        assert_eq!(
            settled_timely_threads(),
            0,
            "the worker threads stop with the engine ({workers} workers)"
        );
    }
}
