//! Simulated crashes: a run that checkpoints, stops at a random trigger
//! (dropping the engine), and resumes from its state root with another
//! worker count emits, with the outputs after its last committed checkpoint
//! discarded (as an exactly-once sink does), exactly what one uninterrupted
//! run emits — for incremental and recompute shapes and every output mode,
//! whether each checkpoint is committed before the next trigger or later,
//! with the window in the spec or written in the SQL.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arrow::array::RecordBatch;
use common::{answer, batch, canon, cases, Ev};
use proptest::prelude::*;
use thund::{Engine, ExecMode, OutputMode, PathKind, ViewSpec, WindowSpec};

const SHAPES: &[(&str, &str, ExecMode)] = &[
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s, MAX(f) AS m, AVG(d) AS ad FROM t GROUP BY k",
        "hop",
        ExecMode::Auto,
    ),
    (
        "SELECT COUNT(*) AS c, MIN(v) AS mn FROM t WHERE v > 0",
        "tumble",
        ExecMode::Auto,
    ),
    (
        "SELECT k, SUM(v) AS s FROM t GROUP BY k HAVING COUNT(*) > 1",
        "tumble",
        ExecMode::Recompute,
    ),
    (
        "SELECT g, COUNT(*) AS c FROM t GROUP BY g ORDER BY c DESC, g LIMIT 2",
        "hop",
        ExecMode::Auto,
    ),
    (
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
        "session",
        ExecMode::Auto,
    ),
    (
        "SELECT g, COUNT(*) FILTER (WHERE v < 0) AS neg, MIN(ts) AS first, MAX(v > 0) AS any_pos \
         FROM t GROUP BY g",
        "hop",
        ExecMode::Auto,
    ),
    ("SELECT DISTINCT k, g FROM t", "tumble", ExecMode::Auto),
    (
        "SELECT g, COUNT(DISTINCT k) AS dk, COUNT(*) AS c FROM t GROUP BY g",
        "hop",
        ExecMode::Auto,
    ),
    (
        "SELECT g, COUNT(DISTINCT k) AS dk, COUNT(DISTINCT v) FILTER (WHERE v > 0) AS dv, \
         SUM(DISTINCT v) AS sv FROM t GROUP BY g",
        "tumble",
        ExecMode::Auto,
    ),
    (
        "SELECT COUNT(*) AS c, MAX(v) AS mx, MIN(ts) AS first FROM t WHERE v > 0",
        "global session",
        ExecMode::Auto,
    ),
    // the source read only through one aggregate (Nexmark q5's shape)
    (
        "SELECT k, c FROM (SELECT k, COUNT(*) AS c FROM t WHERE v > -15 GROUP BY k) AS x \
         WHERE c = (SELECT MAX(c) FROM (SELECT k, COUNT(*) AS c FROM t WHERE v > -15 GROUP BY k) AS y)",
        "hop",
        ExecMode::Auto,
    ),
    // an aggregate over the groups (Nexmark q4's shape), which moves a group
    // from one outer group to the next: Update mode's outer groups are built
    // again from the restored groups
    (
        "SELECT x.c % 3 AS b, COUNT(*) AS n, SUM(x.s) AS ss FROM \
         (SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k) AS x GROUP BY x.c % 3",
        "hop",
        ExecMode::Auto,
    ),
    // each window's first rows per partition (Nexmark q19's shape): the
    // host's pruning rule starts empty after a restore
    (
        "SELECT k, v, rn FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC NULLS LAST, g) AS rn \
         FROM t) AS x WHERE rn <= 2",
        "tumble",
        ExecMode::Auto,
    ),
    ("SELECT k, v, g FROM t WHERE v = (SELECT MAX(v) FROM t)", "hop", ExecMode::Auto),
];

static CASE: AtomicUsize = AtomicUsize::new(0);

/// Shape `shape`'s view, its window in the spec or (`in_sql`) in the SQL.
fn spec(shape: usize, mode: OutputMode, in_sql: bool) -> ViewSpec {
    let (sql, win, exec) = SHAPES[shape];
    let (w, call) = match win {
        "hop" => (
            WindowSpec::hopping(Duration::from_millis(2000), Duration::from_millis(1000)),
            "HOP(t, ts, INTERVAL '1' SECOND, INTERVAL '2' SECOND)",
        ),
        "tumble" => (
            WindowSpec::tumbling(Duration::from_millis(1500)),
            "TUMBLE(t, ts, INTERVAL '1500' MILLISECOND)",
        ),
        "session" => (
            WindowSpec::session(Duration::from_millis(700), &["k"]),
            "SESSION(t, ts, INTERVAL '700' MILLISECOND)",
        ),
        _ => (
            WindowSpec::session(Duration::from_millis(700), &[]),
            "SESSION(t, ts, INTERVAL '700' MILLISECOND)",
        ),
    };
    let b = if in_sql {
        ViewSpec::builder("v", &common::window_in_sql(sql, call))
    } else {
        ViewSpec::builder("v", sql).window(w)
    };
    b.source("t", "ts", common::schema())
        .allowed_lateness(Duration::from_millis(300))
        .output(mode)
        .mode(exec)
        .build()
        .expect("spec")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn resumed_run_equals_uninterrupted_run(
        rows in prop::collection::vec((0i64..3, 0usize..3, prop::option::weighted(0.85, -20i64..20), 0i64..200, 0i64..1500), 1..90),
        per_trigger in 3usize..15,
        shape in 0..SHAPES.len(),
        mode in prop_oneof![Just(OutputMode::Append), Just(OutputMode::Update), Just(OutputMode::Complete)],
        crash_frac in 0.0f64..1.0,
        every in 1usize..4,
        workers in (1usize..=2, 1usize..=2),
        compact_every in 1usize..5,
        lazy_sync in any::<bool>(),
        in_sql in (any::<bool>(), any::<bool>()),
    ) {
        let mut t = 100_000i64;
        let evs: Vec<Ev> = rows
            .into_iter()
            .map(|(k, g, v, step, back)| {
                t += step;
                Ev { t: t - back, k, g: ["a", "b", "c"][g].into(), v, f: k as f64 * 1.5 }
            })
            .collect();
        let triggers: Vec<Vec<Ev>> = evs.chunks(per_trigger).map(|c| c.to_vec()).collect();

        // one uninterrupted run
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(spec(shape, mode, in_sql.0)).expect("view");
        let mut outs = Vec::new();
        for trig in &triggers {
            e.push("t", batch(trig)).expect("push");
            outs.push(e.trigger().expect("trigger").views[0].output.clone());
        }
        outs.push(e.finish().expect("finish").views[0].output.clone());
        let expected = answer(mode, &outs);
        // a run that stops after `crash` triggers, checkpointing every `every`
        let root = format!("memory://recovery-{}", CASE.fetch_add(1, Ordering::SeqCst));
        let crash = ((triggers.len() as f64) * crash_frac) as usize;
        let mut kept: Vec<Vec<RecordBatch>> = Vec::new();
        let mut since_checkpoint: Vec<Vec<RecordBatch>> = Vec::new();
        {
            let mut a = Engine::builder()
                .workers(workers.0)
                .with_state_root(&root)
                .checkpoint_compaction(compact_every)
                .build()
                .expect("engine");
            a.create_view(spec(shape, mode, in_sql.0)).expect("view");
            prop_assert!(a.recovery("v").expect("view").is_none());
            for (i, trig) in triggers.iter().enumerate().take(crash) {
                a.push_at("t", batch(trig), i as u64 + 1).expect("push");
                since_checkpoint.push(a.trigger().expect("trigger").views[0].output.clone());
                if (i + 1) % every == 0 {
                    a.checkpoint(serde_json::json!({ "trigger": i + 1 })).expect("checkpoint");
                    // lazily: later triggers run while the sidecar reads a full
                    // capture (keys reclaimed and ids reused meanwhile); the
                    // engine's drop still commits what is queued
                    if !lazy_sync {
                        a.sync_checkpoints().expect("committed");
                    }
                    kept.append(&mut since_checkpoint);
                }
            }
            // the crash: outputs after the last commit are lost with the process
        }
        let mut b = Engine::builder().workers(workers.1).with_state_root(&root).build().expect("engine");
        b.create_view(spec(shape, mode, in_sql.1)).expect("resume");
        let from = b.source_offset("t").unwrap_or(0) as usize;
        prop_assert_eq!(from, crash / every * every, "resume offset");
        if from > 0 {
            let rec = b.recovery("v").expect("view").cloned().expect("resumed");
            prop_assert_eq!(rec.extra["trigger"].as_u64(), Some(from as u64));
            prop_assert!(rec.fell_back_from.is_empty());
        }
        let want = if SHAPES[shape].2 == ExecMode::Auto {
            PathKind::Incremental
        } else {
            PathKind::Recompute
        };
        prop_assert_eq!(b.plan("v").expect("plan").path(), want);
        for (i, trig) in triggers.iter().enumerate().skip(from) {
            b.push_at("t", batch(trig), i as u64 + 1).expect("push");
            let out = b.trigger().expect("trigger").views[0].output.clone();
            // every trigger after resuming emits what the uninterrupted run
            // emitted at it: Complete mode the whole result (the resumed
            // run's open windows are the uninterrupted run's), Update mode
            // the rows that changed since what the crashed run last showed
            if mode != OutputMode::Append {
                prop_assert_eq!(canon(&out), canon(&outs[i]), "trigger {} after resuming", i + 1);
            }
            kept.push(out);
            b.checkpoint(serde_json::Value::Null).expect("checkpoint");
        }
        kept.push(b.finish().expect("finish").views[0].output.clone());
        b.sync_checkpoints().expect("committed");
        prop_assert_eq!(answer(mode, &kept), expected);
    }
}

/// A finished Complete-mode view, checkpointed at its end with a delta
/// epoch, resumes whole: the final epoch still references every closed
/// window's results (their files never expire, even at W = +∞).
#[test]
fn a_finished_complete_view_resumes_with_every_closed_window() {
    for shape in [0, 2] {
        let root = format!("memory://finished-{}", CASE.fetch_add(1, Ordering::SeqCst));
        let evs: Vec<Ev> = (0..60)
            .map(|i| Ev {
                t: 100_000 + i * 400,
                k: i % 3,
                g: "a".into(),
                v: Some(i),
                f: 1.0,
            })
            .collect();
        let mut a = Engine::builder()
            .with_state_root(&root)
            .checkpoint_compaction(4)
            .build()
            .expect("engine");
        a.create_view(spec(shape, OutputMode::Complete, false))
            .expect("view");
        for (i, c) in evs.chunks(6).enumerate() {
            a.push_at("t", batch(c), i as u64 + 1).expect("push");
            a.trigger().expect("trigger");
            a.checkpoint(serde_json::Value::Null).expect("checkpoint");
        }
        let last = a.finish().expect("finish").views[0].output.clone();
        a.checkpoint(serde_json::Value::Null).expect("checkpoint");
        let done = a.sync_checkpoints().expect("committed");
        assert!(
            !done
                .last()
                .expect("outcome")
                .result
                .as_ref()
                .expect("ok")
                .full,
            "the final epoch is a delta"
        );
        drop(a);
        let mut b = Engine::builder()
            .with_state_root(&root)
            .build()
            .expect("engine");
        b.create_view(spec(shape, OutputMode::Complete, false))
            .expect("resume");
        let again = b.finish().expect("finish").views[0].output.clone();
        assert_eq!(
            answer(OutputMode::Complete, &[again]),
            answer(OutputMode::Complete, &[last]),
            "shape {shape}"
        );
    }
}

/// Windowed joins of two sources, checkpointed at every `every` triggers,
/// crashed and resumed at another worker count (the aggregates fold the
/// join's new pairs: their state is rebuilt from the restored rows' pairs).
const JOINS: &[&str] = &[
    "SELECT a.k, a.v, b.g, b.ts FROM a JOIN b ON a.k = b.k",
    "SELECT a.g, COUNT(*) AS n, SUM(b.v) AS s FROM a JOIN b ON a.k = b.k WHERE a.v >= b.v GROUP BY a.g",
    "SELECT q.g, MAX(q.n) AS top FROM \
     (SELECT a.k, b.g, COUNT(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k, b.g) AS q GROUP BY q.g",
    "SELECT q.g, AVG(q.m) AS am, COUNT(*) AS keys FROM \
     (SELECT a.k, b.g, MAX(b.v) AS m FROM a JOIN b ON a.k = b.k GROUP BY a.k, b.g) AS q GROUP BY q.g",
];

/// The join view, with its window in the spec or (`in_sql`) in the SQL:
/// 2 s hopping by 1 s, or 1 s tumbling.
fn join_spec(sql: &str, mode: OutputMode, in_sql: bool, tumbling: bool) -> ViewSpec {
    let size = if tumbling { 1000 } else { 2000 };
    let spec = ViewSpec::builder("v", sql)
        .source("a", "ts", common::schema())
        .source("b", "ts", common::schema())
        .window(WindowSpec::hopping(
            Duration::from_millis(size),
            Duration::from_millis(1000),
        ))
        .allowed_lateness(Duration::from_millis(300))
        .output(mode)
        .build()
        .expect("spec");
    match in_sql {
        true => common::in_sql(&spec).expect("a SQL spelling"),
        false => spec,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    #[test]
    fn a_resumed_join_equals_the_uninterrupted_join(
        rows in prop::collection::vec((0usize..2, 0i64..3, 0usize..3, prop::option::weighted(0.85, -20i64..20), 0i64..200, 0i64..1500), 1..90),
        per_trigger in 3usize..15,
        query in 0..JOINS.len(),
        mode in prop_oneof![Just(OutputMode::Append), Just(OutputMode::Update), Just(OutputMode::Complete)],
        crash_frac in 0.0f64..1.0,
        every in 1usize..4,
        workers in (1usize..=2, 1usize..=2),
        // the window in the spec or in the SQL, before and after the crash
        in_sql in (any::<bool>(), any::<bool>()),
        tumbling in any::<bool>(),
    ) {
        let mut t = 100_000i64;
        let evs: Vec<(usize, Ev)> = rows
            .into_iter()
            .map(|(s, k, g, v, step, back)| {
                t += step;
                (s, Ev { t: t - back, k, g: ["a", "b", "c"][g].into(), v, f: k as f64 * 1.5 })
            })
            .collect();
        let triggers: Vec<Vec<(usize, Ev)>> = evs.chunks(per_trigger).map(|c| c.to_vec()).collect();
        let sql = JOINS[query];
        let push = |e: &mut Engine, trig: &[(usize, Ev)], offset: u64| {
            for (s, name) in ["a", "b"].into_iter().enumerate() {
                let rows: Vec<Ev> = trig.iter().filter(|(x, _)| *x == s).map(|(_, e)| e.clone()).collect();
                e.push_at(name, batch(&rows), offset).expect("push");
            }
        };
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(join_spec(sql, mode, false, tumbling)).expect("view");
        prop_assert_eq!(e.plan("v").expect("plan").path(), PathKind::Incremental);
        let mut outs = Vec::new();
        for (i, trig) in triggers.iter().enumerate() {
            push(&mut e, trig, i as u64 + 1);
            outs.push(e.trigger().expect("trigger").views[0].output.clone());
        }
        outs.push(e.finish().expect("finish").views[0].output.clone());
        let expected = answer(mode, &outs);
        let root = format!("memory://recovery-join-{}", CASE.fetch_add(1, Ordering::SeqCst));
        let crash = ((triggers.len() as f64) * crash_frac) as usize;
        let mut kept: Vec<Vec<RecordBatch>> = Vec::new();
        let mut since_checkpoint: Vec<Vec<RecordBatch>> = Vec::new();
        {
            let mut a = Engine::builder().workers(workers.0).with_state_root(&root).build().expect("engine");
            a.create_view(join_spec(sql, mode, in_sql.0, tumbling)).expect("view");
            for (i, trig) in triggers.iter().enumerate().take(crash) {
                push(&mut a, trig, i as u64 + 1);
                since_checkpoint.push(a.trigger().expect("trigger").views[0].output.clone());
                if (i + 1) % every == 0 {
                    a.checkpoint(serde_json::Value::Null).expect("checkpoint");
                    a.sync_checkpoints().expect("committed");
                    kept.append(&mut since_checkpoint);
                }
            }
        }
        let mut b = Engine::builder().workers(workers.1).with_state_root(&root).build().expect("engine");
        b.create_view(join_spec(sql, mode, in_sql.1, tumbling)).expect("resume");
        let from = b.source_offset("a").unwrap_or(0) as usize;
        prop_assert_eq!(from, crash / every * every, "resume offset");
        for (i, trig) in triggers.iter().enumerate().skip(from) {
            push(&mut b, trig, i as u64 + 1);
            let out = b.trigger().expect("trigger").views[0].output.clone();
            if mode != OutputMode::Append {
                prop_assert_eq!(canon(&out), canon(&outs[i]), "trigger {} after resuming", i + 1);
            }
            kept.push(out);
            b.checkpoint(serde_json::Value::Null).expect("checkpoint");
        }
        kept.push(b.finish().expect("finish").views[0].output.clone());
        b.sync_checkpoints().expect("committed");
        prop_assert_eq!(answer(mode, &kept), expected);
    }
}

/// A crashed write leaves an uncommitted epoch directory; the store never
/// reuses its number, so the next checkpoint is stored one number higher.
/// The engine's own epochs (the triggers) must not skip with it: a restart
/// resumes the trigger count, so every epoch number means the same rows in
/// every run (what the database sinks skip replays by).
#[test]
fn epochs_count_triggers_across_a_crashed_write_the_store_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    let open = || {
        let mut e = Engine::builder()
            .with_state_root(&root)
            .build()
            .expect("engine");
        e.create_view(spec(0, OutputMode::Append, false))
            .expect("view");
        e
    };
    let ev = |t: i64| Ev {
        t,
        k: 1,
        g: "a".into(),
        v: Some(1),
        f: 0.0,
    };
    let mut e = open();
    for t in [1_000, 2_000] {
        e.push("t", batch(&[ev(t)])).expect("push");
        assert!(e.trigger().is_ok());
        e.checkpoint(serde_json::Value::Null).expect("checkpoint");
    }
    e.sync_checkpoints().expect("sync");
    drop(e);
    // what a write killed before its manifest leaves: epoch 3's files only
    let leftover = dir.path().join("v").join("epoch=000003");
    std::fs::create_dir_all(&leftover).expect("leftover");
    std::fs::write(leftover.join("operator-x-w0.parquet"), b"torn").expect("torn file");

    let mut e = open();
    assert_eq!(e.recovery("v").expect("view").map(|r| r.epoch), Some(2));
    e.push("t", batch(&[ev(3_000)])).expect("push");
    assert_eq!(e.trigger().expect("trigger").epoch, 3);
    e.checkpoint(serde_json::Value::Null).expect("checkpoint");
    e.sync_checkpoints().expect("sync");
    drop(e);

    let mut e = open();
    let r = e.recovery("v").expect("view").cloned().expect("resumed");
    assert_eq!(
        (r.epoch, r.store_epoch),
        (3, 4),
        "the store skipped 3, the triggers did not"
    );
    e.push("t", batch(&[ev(4_000)])).expect("push");
    assert_eq!(e.trigger().expect("trigger").epoch, 4);
}
