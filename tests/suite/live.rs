//! The live runner on tokio's paused clock (the injected clock: the
//! triggers' interval and the engine's idleness both read it): triggers fire
//! on the interval and every N rows; `advance_when_idle` closes the last
//! window after the sources go quiet, and does nothing when off; shutdown
//! takes a final checkpoint from which a restart resumes exactly once;
//! refused batches and failing sources stop the run with what came before
//! them kept; and, as a proptest, a run shut down anywhere and resumed
//! from its checkpoint emits exactly the batch oracle's rows.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::RecordBatch;
use common::{batch, canon, Ev};
use futures::{stream, StreamExt};
use proptest::prelude::*;
use thund::live::{Live, Stopped, TokioClock};
use thund::{Engine, ExecMode, OutputMode, ViewSpec, WindowSpec};

fn ev(t: i64, k: i64) -> Ev {
    Ev {
        t,
        k,
        g: format!("g{}", k % 3),
        v: Some(t % 7),
        f: k as f64,
    }
}

fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn view(exec: ExecMode, idle: Duration, advance: bool) -> ViewSpec {
    ViewSpec::builder(
        "v",
        "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
    )
    .source("t", "ts", common::schema())
    .window(WindowSpec::tumbling(Duration::from_secs(10)))
    .idle_timeout(idle)
    .advance_when_idle(advance)
    .output(OutputMode::Append)
    .mode(exec)
    .build()
    .expect("spec")
}

/// An engine on tokio's clock with `spec` declared. The engine is a
/// blocking API, so it is built on a thread of its own (the tests call this
/// inside the runtime, whose clock it reads).
fn engine(spec: ViewSpec, root: Option<&str>) -> Engine {
    let clock = Arc::new(TokioClock::new());
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut b = Engine::builder().with_clock(clock);
            if let Some(r) = root {
                b = b.with_state_root(r);
            }
            let mut e = b.build().expect("engine");
            e.create_view(spec).expect("view");
            e
        })
        .join()
        .expect("engine thread")
    })
}

/// The rows a batch run of `events` (one trigger, then the end) emits for
/// windows ending at or before `upto` (everything with `i64::MAX`).
fn oracle(events: &[Ev], exec: ExecMode, upto: i64) -> Vec<String> {
    let out = batch_output(view(exec, Duration::ZERO, false), &[("t", events)]);
    let ends: Vec<i64> = out
        .iter()
        .flat_map(|b| {
            let c = b.column(1).as_any();
            let ends = c
                .downcast_ref::<arrow::array::TimestampMillisecondArray>()
                .expect("window_end");
            ends.values().to_vec()
        })
        .collect();
    let mut rows: Vec<String> = canon(&out)
        .into_iter()
        .zip(ends)
        .filter(|(_, end)| *end <= upto)
        .map(|(r, _)| r)
        .collect();
    rows.sort();
    rows
}

/// What a batch run of `spec` emits: every source's events pushed at once,
/// one trigger, then the end of the stream (on a thread of its own: the
/// engine is a blocking API, and tests call this inside the runtime).
fn batch_output(spec: ViewSpec, pushes: &[(&str, &[Ev])]) -> Vec<RecordBatch> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut e = Engine::builder().build().expect("engine");
            e.create_view(spec).expect("view");
            for (source, events) in pushes {
                e.push(source, batch(events)).expect("push");
            }
            let mut out = e.trigger().expect("trigger").views[0].output.clone();
            out.extend(e.finish().expect("finish").views[0].output.clone());
            out
        })
        .join()
        .expect("batch run")
    })
}

/// [`batch_output`]'s rows, sorted.
fn batch_rows(spec: ViewSpec, pushes: &[(&str, &[Ev])]) -> Vec<String> {
    let mut rows = canon(&batch_output(spec, pushes));
    rows.sort();
    rows
}

/// Processing time (ms since the run started) of every trigger, with its rows.
type Log = Arc<Mutex<Vec<(u64, Vec<RecordBatch>)>>>;

fn logger(log: &Log) -> impl FnMut(&thund::TriggerReport) -> thund::Result<()> + Send + 'static {
    let log = log.clone();
    let start = tokio::time::Instant::now();
    move |r| {
        let at = (tokio::time::Instant::now() - start).as_millis() as u64;
        if std::env::var("LIVE_DEBUG").is_ok() {
            eprintln!(
                "{at}: W {:?} frontier {:?}",
                r.views[0].watermark, r.views[0].frontier
            );
        }
        log.lock()
            .expect("log")
            .push((at, r.views[0].output.clone()));
        Ok(())
    }
}

fn rows(log: &Log) -> Vec<String> {
    let out: Vec<RecordBatch> = log
        .lock()
        .expect("log")
        .iter()
        .flat_map(|(_, b)| b.clone())
        .collect();
    let mut rows = canon(&out);
    rows.sort();
    rows
}

/// A source that yields each batch after its delay, then stays open and silent.
fn timed(batches: Vec<(u64, RecordBatch)>) -> impl futures::Stream<Item = RecordBatch> + Send {
    stream::iter(batches)
        .then(|(delay, b)| async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            b
        })
        .chain(stream::pending())
}

#[test]
fn triggers_fire_on_the_interval_and_every_n_rows() {
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let rt = paused();
        let log: Log = Default::default();
        let first: Vec<Ev> = (0..5).map(|i| ev(1_000 + i, i)).collect();
        let second: Vec<Ev> = (0..5).map(|i| ev(12_000 + i, i)).collect();
        let outcome = rt.block_on(async {
            let e = engine(view(exec, Duration::ZERO, false), None);
            Live::new(e)
                .source(
                    "t",
                    timed(vec![(100, batch(&first)), (2_400, batch(&second))]),
                )
                .trigger_interval(Duration::from_secs(1))
                .on_trigger(logger(&log))
                .run(tokio::time::sleep(Duration::from_millis(5_500)))
                .await
                .expect("run")
        });
        assert_eq!(outcome.stopped, Stopped::Shutdown);
        let times: Vec<u64> = log.lock().expect("log").iter().map(|(t, _)| *t).collect();
        // on the interval, and one more at shutdown
        assert_eq!(
            times,
            vec![1_000, 2_000, 3_000, 4_000, 5_000, 5_500],
            "{exec:?}"
        );
        assert_eq!(outcome.triggers, 6);
        assert_eq!(outcome.rows_in, 10);
        // the second batch (at 2.5 s) moved W to 12 s: [0 s, 10 s) closed at the 3 s trigger
        let per: Vec<usize> = log
            .lock()
            .expect("log")
            .iter()
            .map(|(_, b)| b.iter().map(|b| b.num_rows()).sum())
            .collect();
        assert_eq!(per, vec![0, 0, 5, 0, 0, 0], "{exec:?}");
        assert_eq!(
            rows(&log),
            oracle(&[first.clone(), second.clone()].concat(), exec, 10_000)
        );
        assert_eq!(outcome.engine.epoch(), 6);

        // every 4 rows, the interval off: a trigger as the 4th, 8th, … row arrives
        let log: Log = Default::default();
        let singles: Vec<(u64, RecordBatch)> =
            (0..9).map(|i| (10, batch(&[ev(i * 3_000, i)]))).collect();
        let outcome = rt.block_on(async {
            let e = engine(view(exec, Duration::ZERO, false), None);
            Live::new(e)
                .source("t", stream::iter(singles).map(|(_, b)| b))
                .trigger_interval(Duration::ZERO)
                .trigger_every_rows(4)
                .on_trigger(logger(&log))
                .run(std::future::pending())
                .await
                .expect("run")
        });
        assert_eq!(outcome.stopped, Stopped::SourcesEnded);
        // 2 row triggers, then the end of the stream
        assert_eq!(outcome.triggers, 3);
        let events: Vec<Ev> = (0..9).map(|i| ev(i * 3_000, i)).collect();
        assert_eq!(rows(&log), oracle(&events, exec, i64::MAX), "{exec:?}");
    }
}

#[test]
fn advance_when_idle_closes_the_last_window_and_off_it_does_not() {
    let events: Vec<Ev> = vec![ev(1_000, 1), ev(5_000, 2), ev(12_000, 1), ev(13_000, 3)];
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        for advance in [true, false] {
            let rt = paused();
            let log: Log = Default::default();
            let outcome = rt.block_on(async {
                let e = engine(view(exec, Duration::from_secs(3), advance), None);
                Live::new(e)
                    .source("t", timed(vec![(0, batch(&events))]))
                    .trigger_interval(Duration::from_millis(500))
                    .finish_at_end(false)
                    .on_trigger(logger(&log))
                    .run(tokio::time::sleep(Duration::from_secs(30)))
                    .await
                    .expect("run")
            });
            assert_eq!(outcome.stopped, Stopped::Shutdown);
            let w = outcome.engine.watermark("v").expect("w");
            let closed_at: Vec<u64> = log
                .lock()
                .expect("log")
                .iter()
                .filter(|(_, b)| b.iter().any(|b| b.num_rows() > 0))
                .map(|(t, _)| *t)
                .collect();
            if advance {
                // the rows came at 0 and the trigger at 0.5 s took them: idle
                // from 3.5 s, W = 13 s + (now - 3.5 s) reaches 20 s at 10.5 s
                assert_eq!(closed_at, vec![500, 10_500], "{exec:?}");
                assert_eq!(rows(&log), oracle(&events, exec, i64::MAX), "{exec:?}");
                assert_eq!(w, Some(13_000 + 30_000 - 3_500), "{exec:?}");
            } else {
                assert_eq!(closed_at, vec![500], "{exec:?}");
                assert_eq!(rows(&log), oracle(&events, exec, 10_000), "{exec:?}");
                assert_eq!(w, Some(13_000), "{exec:?}");
            }
        }
    }
}

#[test]
fn a_row_after_the_clock_moved_w_is_late_and_counted() {
    let rt = paused();
    let log: Log = Default::default();
    let outcome = rt.block_on(async {
        let e = engine(view(ExecMode::Auto, Duration::from_secs(1), true), None);
        Live::new(e)
            .source(
                "t",
                timed(vec![
                    (0, batch(&[ev(1_000, 1)])),
                    (12_000, batch(&[ev(2_000, 2)])),
                ]),
            )
            .trigger_interval(Duration::from_millis(500))
            .on_trigger(logger(&log))
            .run(tokio::time::sleep(Duration::from_secs(13)))
            .await
            .expect("run")
    });
    // taken at 0.5 s, idle from 1.5 s: W = 1 s + (now - 1.5 s) passes the
    // end of [0 s, 10 s) at 10.5 s, so the row at 2 s that comes at 12 s is late
    assert_eq!(outcome.stopped, Stopped::Shutdown);
    let c = outcome.engine.counters("v").expect("counters");
    assert_eq!((c.rows, c.late_rows_dropped), (2, 1));
}

#[test]
fn shutdown_checkpoints_and_a_restart_resumes_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    let events: Vec<Ev> = (0..1_000).map(|i| ev(i * 50, i % 13)).collect();
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let root = format!("{root}/{exec:?}");
        let rt = paused();
        let first: Log = Default::default();
        // 40-row batches, one every 100 ms; shutdown at 1.75 s (17 batches in)
        let feed = |from: usize| {
            let batches: Vec<(u64, RecordBatch)> =
                events[from..].chunks(40).map(|c| (100, batch(c))).collect();
            timed(batches)
        };
        let outcome = rt.block_on(async {
            let e = engine(view(exec, Duration::ZERO, false), Some(&root));
            Live::new(e)
                .source("t", feed(0))
                .trigger_interval(Duration::from_millis(250))
                .checkpoint_every(3)
                .on_trigger(logger(&first))
                .run(tokio::time::sleep(Duration::from_millis(1_750)))
                .await
                .expect("run")
        });
        assert_eq!(outcome.stopped, Stopped::Shutdown);
        // 6 interval triggers (the 7th falls on the shutdown, which goes
        // first) and the last: checkpoints after the 3rd, the 6th and the last
        assert_eq!((outcome.triggers, outcome.checkpoints), (7, 3), "{exec:?}");
        let epoch = outcome.engine.epoch();
        let offset = outcome.engine.source_offset("t").expect("offset");
        assert_eq!(offset, 17 * 40);
        drop(outcome);

        // the restart reads the source from the committed offset, to the end
        let second: Log = Default::default();
        let outcome = rt.block_on(async {
            let e = engine(view(exec, Duration::ZERO, false), Some(&root));
            let r = e.recovery("v").expect("recovery").expect("resumed").clone();
            assert_eq!(r.epoch, epoch, "the shutdown's checkpoint is the newest");
            let from = e.source_offset("t").expect("offset") as usize;
            let rest: Vec<RecordBatch> = events[from..].chunks(40).map(batch).collect();
            Live::new(e)
                .source("t", stream::iter(rest))
                .finish_at_end(true)
                .on_trigger(logger(&second))
                .run(std::future::pending())
                .await
                .expect("run")
        });
        assert_eq!(outcome.stopped, Stopped::SourcesEnded);
        let mut both = rows(&first);
        both.extend(rows(&second));
        both.sort();
        assert_eq!(both, oracle(&events, exec, i64::MAX), "{exec:?}");
    }
}

#[test]
fn refused_batches_failing_sources_and_bad_setups_are_typed() {
    let rt = paused();
    let log: Log = Default::default();
    let good = batch(&[ev(1_000, 1), ev(2_000, 2)]);
    let bad = RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("x", arrow::datatypes::DataType::Int64, false),
        ])),
        vec![Arc::new(arrow::array::Int64Array::from(vec![1]))],
    )
    .expect("batch");
    let outcome = rt.block_on(async {
        let e = engine(view(ExecMode::Auto, Duration::ZERO, false), None);
        Live::new(e)
            .source("t", stream::iter(vec![good.clone(), bad]))
            .on_trigger(logger(&log))
            .run(std::future::pending())
            .await
            .expect("run")
    });
    match &outcome.stopped {
        Stopped::SourceFailed {
            source,
            batch,
            message,
        } => {
            assert_eq!((source.as_str(), *batch), ("t", 2));
            assert!(message.contains("schema"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // what came before the refused batch was kept, and the engine goes on
    let mut e = outcome.engine;
    assert_eq!(e.counters("v").expect("counters").rows, 2);
    e.push("t", batch(&[ev(30_000, 3)])).expect("usable");

    // a source whose stream fails
    let failing = stream::iter(vec![Ok(good.clone()), Err("the broker went away")]);
    let outcome = rt.block_on(async {
        let e = engine(view(ExecMode::Auto, Duration::ZERO, false), None);
        Live::new(e)
            .try_source("t", failing)
            .run(std::future::pending())
            .await
            .expect("run")
    });
    assert_eq!(
        outcome.stopped,
        Stopped::SourceFailed {
            source: "t".into(),
            batch: 2,
            message: "the broker went away".into()
        }
    );

    // set-ups that cannot run
    let setups: Vec<(Live, &str)> = vec![
        (
            Live::new(engine(view(ExecMode::Auto, Duration::ZERO, false), None)),
            "no sources",
        ),
        (
            Live::new(engine(view(ExecMode::Auto, Duration::ZERO, false), None))
                .source("nope", stream::empty()),
            "`nope`",
        ),
        (
            Live::new(engine(view(ExecMode::Auto, Duration::ZERO, false), None))
                .source("t", stream::empty())
                .trigger_interval(Duration::ZERO),
            "nothing triggers",
        ),
        (
            Live::new(engine(view(ExecMode::Auto, Duration::ZERO, false), None))
                .source("t", stream::empty())
                .source("t", stream::empty()),
            "fed twice",
        ),
        (
            Live::new(engine(view(ExecMode::Auto, Duration::ZERO, false), None))
                .source("t", stream::empty())
                .checkpoint_every(0),
            "checkpoint_every(0)",
        ),
    ];
    // an interval past the clock's range is accepted and never fires
    let huge = rt.block_on(
        Live::new(engine(view(ExecMode::Auto, Duration::ZERO, false), None))
            .source("t", stream::iter(vec![good.clone()]))
            .trigger_interval(Duration::MAX)
            .run(std::future::pending()),
    );
    assert_eq!(
        huge.expect("a huge interval").triggers,
        1,
        "only the end of the stream"
    );
    for (live, says) in setups {
        let err = rt
            .block_on(live.run(std::future::pending()))
            .expect_err(says);
        assert!(err.to_string().contains(says), "{err} / {says}");
    }
    // advance_when_idle without an idle timeout is refused where the view is declared
    let err = ViewSpec::builder("v", "SELECT COUNT(*) AS c FROM t")
        .source("t", "ts", common::schema())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .advance_when_idle(true)
        .build()
        .expect_err("needs an idle timeout");
    assert!(err.to_string().contains("idle_timeout"), "{err}");
}

#[test]
fn advance_when_idle_is_spelled_alike_in_toml_ddl_and_rust() {
    let toml = r#"
name = "v"
sql = "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k"
output = "append"
[[source]]
name = "t"
event_time = "ts"
schema = "k BIGINT, g VARCHAR, v BIGINT, f DOUBLE, ts TIMESTAMP"
[watermark]
idle_timeout = "3s"
advance_when_idle = true
[window]
kind = "tumbling"
size = "10s"
"#;
    let from_toml = ViewSpec::from_toml(toml).expect("toml");
    let ddl = "CREATE SOURCE t (k BIGINT, g VARCHAR, v BIGINT, f DOUBLE, ts TIMESTAMP, \
               WATERMARK FOR ts AS ts) WITH (idle_timeout = '3s', advance_when_idle = true);
               CREATE VIEW v WITH (output = 'append') AS
               SELECT k, window_start, window_end, COUNT(*) AS c, SUM(v) AS s
               FROM TUMBLE(t, ts, INTERVAL '10' SECOND) GROUP BY k, window_start, window_end";
    let from_ddl = &thund::spec::ddl::parse(ddl).expect("ddl").views[0];
    let built = view(ExecMode::Auto, Duration::from_secs(3), true);
    for spec in [&from_toml, from_ddl] {
        assert_eq!(spec.watermark, built.watermark);
    }
    assert!(from_toml.watermark.advance_when_idle);
    // the engine says so in `explain`
    let mut e = Engine::builder().build().expect("engine");
    e.create_view(from_toml).expect("view");
    let plan = e.explain("v").expect("explain");
    assert!(
        plan.contains("then W advances with processing time"),
        "{plan}"
    );

    // hostile spellings are typed errors that name the option
    let bad = ddl.replace(
        "advance_when_idle = true",
        "advance_when_idle = 'sometimes'",
    );
    let err = thund::spec::ddl::parse(&bad).expect_err("not a boolean");
    assert!(err.to_string().contains("write true or false"), "{err}");
    let no_idle = ddl.replace("idle_timeout = '3s', ", "");
    let err = thund::spec::ddl::parse(&no_idle).expect_err("no idle timeout");
    assert!(err.to_string().contains("idle_timeout above zero"), "{err}");
    let err =
        ViewSpec::from_toml(&toml.replace("advance_when_idle = true", "advance_when_idle = 1"))
            .expect_err("not a boolean");
    assert!(err.to_string().contains("advance_when_idle"), "{err}");
}

/// One random live run: the events (disorder within `lateness`), cut into
/// batches that arrive after random delays.
#[derive(Clone, Debug)]
struct LiveCase {
    events: Vec<Ev>,
    /// Batch sizes and the delay (ms) before each.
    cuts: Vec<(usize, u64)>,
    lateness: i64,
    interval: u64,
    every_rows: Option<u64>,
    checkpoint_every: u64,
    /// Processing time (ms) the first run is shut down at.
    stop_at: u64,
    exec: ExecMode,
}

fn live_case() -> impl Strategy<Value = LiveCase> {
    (1usize..160, 0i64..2_000, 1i64..400).prop_flat_map(|(n, lateness, step)| {
        (
            proptest::collection::vec((0i64..=lateness, 0i64..5), n),
            proptest::collection::vec((1usize..30, 0u64..400), 1..40),
            50u64..500,
            proptest::option::of(1u64..60),
            1u64..4,
            0u64..6_000,
            prop_oneof![Just(ExecMode::Auto), Just(ExecMode::Recompute)],
        )
            .prop_map(
                move |(jitter, cuts, interval, every_rows, checkpoint_every, stop_at, exec)| {
                    let events = jitter
                        .iter()
                        .enumerate()
                        .map(|(i, &(j, k))| ev(i as i64 * step + j, k))
                        .collect();
                    LiveCase {
                        events,
                        cuts,
                        lateness,
                        interval,
                        every_rows,
                        checkpoint_every,
                        stop_at,
                        exec,
                    }
                },
            )
    })
}

/// `events[from..]` as timed batches cut as `cuts` says (the last cut
/// repeats until the events run out).
fn cut(events: &[Ev], from: usize, cuts: &[(usize, u64)]) -> Vec<(u64, RecordBatch)> {
    let mut out = Vec::new();
    let (mut at, mut i) = (from, 0);
    while at < events.len() {
        let (size, delay) = cuts[i.min(cuts.len() - 1)];
        let end = (at + size).min(events.len());
        out.push((delay, batch(&events[at..end])));
        at = end;
        i += 1;
    }
    out
}

fn lateness_view(exec: ExecMode, lateness: i64) -> ViewSpec {
    ViewSpec {
        watermark: thund::WatermarkSpec {
            allowed_lateness: Duration::from_millis(lateness as u64),
            ..view(exec, Duration::ZERO, false).watermark
        },
        ..view(exec, Duration::ZERO, false)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: common::cases(24), ..ProptestConfig::default() })]

    /// The law for the live runner: whatever the arrival times, trigger
    /// interval, row-count triggers, checkpoint spacing and shutdown moment,
    /// a run shut down and resumed from its checkpoint (its source restarted
    /// at the committed offset) emits, over both runs, exactly the batch
    /// oracle's rows: none twice, none lost (no row is late: the disorder
    /// stays within the allowed lateness).
    #[test]
    fn a_live_run_shut_down_anywhere_and_resumed_equals_the_batch_oracle(c in live_case()) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = format!("file://{}", dir.path().display());
        let spec = lateness_view(c.exec, c.lateness);
        // the first run's source stays open and is shut down at `stop_at`;
        // the second's ends after its batches
        let run = |from: usize, shutdown: Option<u64>, log: &Log| {
            let rt = paused();
            rt.block_on(async {
                let batches = cut(&c.events, from, &c.cuts);
                let source = match shutdown {
                    Some(_) => timed(batches).boxed(),
                    None => stream::iter(batches)
                        .then(|(delay, b)| async move {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            b
                        })
                        .boxed(),
                };
                let mut live = Live::new(engine(spec.clone(), Some(&root)))
                    .source("t", source)
                    .trigger_interval(Duration::from_millis(c.interval))
                    .checkpoint_every(c.checkpoint_every)
                    .on_trigger(logger(log));
                if let Some(n) = c.every_rows {
                    live = live.trigger_every_rows(n);
                }
                live.run(async move {
                    match shutdown {
                        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                        None => std::future::pending().await,
                    }
                })
                .await
                .expect("run")
            })
        };
        let first: Log = Default::default();
        let outcome = run(0, Some(c.stop_at), &first);
        prop_assert_eq!(&outcome.stopped, &Stopped::Shutdown);
        let from = outcome.engine.source_offset("t").unwrap_or(0) as usize;
        prop_assert_eq!(from as u64, outcome.rows_in);
        drop(outcome);
        let second: Log = Default::default();
        let outcome = run(from, None, &second);
        prop_assert_eq!(&outcome.stopped, &Stopped::SourcesEnded);
        prop_assert_eq!(outcome.engine.counters("v").expect("counters").late_rows_dropped, 0);
        drop(outcome);
        let mut both = rows(&first);
        both.extend(rows(&second));
        both.sort();
        let want = batch_rows(spec.clone(), &[("t", &c.events)]);
        prop_assert_eq!(both, want);
    }
}

#[test]
fn empty_batches_are_taken_and_change_nothing() {
    let events: Vec<Ev> = (0..30).map(|i| ev(i * 700, i % 4)).collect();
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let rt = paused();
        let log: Log = Default::default();
        let empty = RecordBatch::new_empty(common::schema());
        let outcome = rt.block_on(async {
            let e = engine(view(exec, Duration::ZERO, false), None);
            Live::new(e)
                .source(
                    "t",
                    stream::iter(vec![
                        empty.clone(),
                        batch(&events[..10]),
                        empty.clone(),
                        empty.clone(),
                        batch(&events[10..]),
                        empty.clone(),
                    ]),
                )
                .trigger_every_rows(1)
                .on_trigger(logger(&log))
                .run(std::future::pending())
                .await
                .expect("run")
        });
        assert_eq!(outcome.stopped, Stopped::SourcesEnded);
        assert_eq!(outcome.rows_in, 30);
        assert_eq!(outcome.engine.source_offset("t"), Some(30), "{exec:?}");
        assert_eq!(rows(&log), oracle(&events, exec, i64::MAX), "{exec:?}");
    }
}

/// Two sources (a windowed join) fed live: each source's stream is read as
/// its batches come, W is the minimum over both, and the run emits what the
/// batch run emits, on both paths.
#[test]
fn a_join_of_two_live_sources_equals_the_batch_run() {
    let left: Vec<Ev> = (0..40).map(|i| ev(i * 450, i % 5)).collect();
    let right: Vec<Ev> = (0..25).map(|i| ev(i * 700 + 30, i % 5)).collect();
    let spec = |exec: ExecMode| {
        ViewSpec::builder(
            "v",
            "SELECT a.k, COUNT(*) AS pairs, SUM(b.v) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.k",
        )
        .source("a", "ts", common::schema())
        .source("b", "ts", common::schema())
        .window(WindowSpec::tumbling(Duration::from_secs(5)))
        .output(OutputMode::Append)
        .mode(exec)
        .build()
        .expect("spec")
    };
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let rt = paused();
        let log: Log = Default::default();
        let outcome = rt.block_on(async {
            let e = engine(spec(exec), None);
            let feed = |evs: &[Ev], every: u64| {
                let b: Vec<(u64, RecordBatch)> = evs.chunks(7).map(|c| (every, batch(c))).collect();
                stream::iter(b).then(|(d, b)| async move {
                    tokio::time::sleep(Duration::from_millis(d)).await;
                    b
                })
            };
            Live::new(e)
                .source("a", feed(&left, 90))
                .source("b", feed(&right, 130))
                .trigger_interval(Duration::from_millis(100))
                .on_trigger(logger(&log))
                .run(std::future::pending())
                .await
                .expect("run")
        });
        assert_eq!(outcome.stopped, Stopped::SourcesEnded);
        assert_eq!(outcome.rows_in, 65);
        let want = batch_rows(spec(exec), &[("a", &left), ("b", &right)]);
        assert!(!want.is_empty());
        assert_eq!(rows(&log), want, "{exec:?}");
    }
}
