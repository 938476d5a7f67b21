//! Checkpoints at the engine level: corrupt or missing files fall back to
//! the previous committed epoch and say so; a state root written by another
//! view, two engines on one root, and epochs without any readable manifest
//! are clear errors; a committed epoch is plain Parquet that DataFusion SQL
//! reads back as exactly the live state.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{batch, schema, Ev};
use thund::{Engine, Error, ViewSpec, WindowSpec};

const SQL: &str = "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k";

fn spec(sql: &str) -> ViewSpec {
    ViewSpec::builder("v", sql)
        .source("t", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .build()
        .expect("spec")
}

/// The view of these tests, with its window in the spec or (`in_sql`)
/// written in the SQL: the tests below use both.
fn view(in_sql: bool) -> ViewSpec {
    match in_sql {
        true => common::in_sql(&spec(SQL)).expect("a SQL spelling"),
        false => spec(SQL),
    }
}

fn rows(i: i64) -> Vec<Ev> {
    (0..30)
        .map(|j| Ev {
            t: i * 4_000 + j * 100,
            k: j % 3,
            g: "a".into(),
            v: Some(j),
            f: 0.0,
        })
        .collect()
}

/// Run `n` triggers with a checkpoint after each, all committed.
fn run(root: &str, n: i64, in_sql: bool) {
    let mut e = Engine::builder()
        .with_state_root(root)
        .retain_epochs(5)
        .build()
        .expect("engine");
    e.create_view(view(in_sql)).expect("view");
    for i in 0..n {
        e.push_at("t", batch(&rows(i)), i as u64 + 1).expect("push");
        e.trigger().expect("trigger");
        e.checkpoint(serde_json::Value::Null).expect("checkpoint");
    }
    e.sync_checkpoints().expect("committed");
}

fn epoch_dir(dir: &Path, epoch: u64) -> PathBuf {
    dir.join("v").join(format!("epoch={epoch:06}"))
}

fn reopen(root: &str, in_sql: bool) -> thund::Result<Engine> {
    let mut e = Engine::builder().with_state_root(root).build()?;
    e.create_view(view(in_sql))?;
    Ok(e)
}

#[test]
fn a_truncated_newest_file_falls_back_loudly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 4, false);
    let f = std::fs::read_dir(epoch_dir(dir.path(), 4))
        .expect("epoch 4")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .expect("a state file");
    let len = std::fs::metadata(&f).expect("meta").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .expect("open")
        .set_len(len / 2)
        .expect("truncate");
    let mut e = reopen(&root, false).expect("falls back, does not fail");
    let rec = e.recovery("v").expect("view").cloned().expect("resumed");
    assert_eq!(rec.epoch, 3);
    assert!(
        rec.fell_back_from.iter().map(|s| s.epoch).eq([4]),
        "{rec:?}"
    );
    assert_eq!(
        e.source_offset("t"),
        Some(3),
        "replay from epoch 3's offset"
    );
    // the first trigger report says so too
    let r = e.trigger().expect("trigger");
    assert_eq!(r.views[0].recovery.as_ref().map(|r| r.epoch), Some(3));
    assert!(
        e.trigger().expect("trigger").views[0].recovery.is_none(),
        "said once"
    );
}

#[test]
fn a_garbage_manifest_or_a_dangling_pointer_falls_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 3, true);
    std::fs::write(
        epoch_dir(dir.path(), 3).join("_thund_checkpoint.json"),
        b"{ not json",
    )
    .expect("garbage");
    let e = reopen(&root, true).expect("falls back");
    assert_eq!(e.recovery("v").expect("view").map(|r| r.epoch), Some(2));
    drop(e);

    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 3, true);
    std::fs::remove_dir_all(epoch_dir(dir.path(), 3)).expect("remove epoch 3");
    let e = reopen(&root, true).expect("pointer to a missing epoch: previous one");
    assert_eq!(e.recovery("v").expect("view").map(|r| r.epoch), Some(2));
}

#[test]
fn epochs_without_any_readable_manifest_are_an_error_not_a_cold_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 2, false);
    for epoch in 1..=2 {
        let m = epoch_dir(dir.path(), epoch).join("_thund_checkpoint.json");
        if m.exists() {
            std::fs::write(&m, b"garbage").expect("garbage");
        }
    }
    let err = reopen(&root, false).err().expect("must refuse");
    assert!(
        matches!(&err, Error::Checkpoint { source, .. }
            if matches!(**source, thund_checkpoint::Error::NoCommittedEpoch { .. })),
        "{err}"
    );
}

#[test]
fn another_views_state_root_and_a_second_engine_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 2, false);
    let mut e = Engine::builder()
        .with_state_root(&root)
        .build()
        .expect("engine");
    let err = e
        .create_view(spec("SELECT k, MAX(v) AS m FROM t GROUP BY k"))
        .expect_err("fingerprint differs");
    // it says what changed: the SQL and, with it, the plan and the output's
    // columns — nothing else
    match &err {
        Error::ViewChanged {
            view,
            epoch,
            changed,
        } => {
            assert_eq!((view.as_str(), *epoch), ("v", 2));
            let parts: Vec<&str> = changed
                .iter()
                .map(|c| c.split(" (").next().unwrap_or(""))
                .collect();
            assert_eq!(parts, ["the output", "the plan", "the sql"], "{err}");
        }
        other => panic!("expected ViewChanged, got {other}"),
    }
    insta::assert_snapshot!("view_changed", err.to_string());

    let mut first = Engine::builder()
        .with_state_root(&root)
        .build()
        .expect("engine");
    first.create_view(spec(SQL)).expect("first writer");
    let mut second = Engine::builder()
        .with_state_root(&root)
        .build()
        .expect("engine");
    let err = second.create_view(spec(SQL)).expect_err("fenced");
    assert!(
        matches!(&err, Error::Checkpoint { source, .. }
            if matches!(**source, thund_checkpoint::Error::Fenced { .. })),
        "{err}"
    );
    // the first engine keeps working
    first.push("t", batch(&rows(9))).expect("push");
    first.trigger().expect("trigger");
    first
        .checkpoint(serde_json::Value::Null)
        .expect("checkpoint");
    first.sync_checkpoints().expect("still commits");
}

#[test]
fn a_committed_epoch_is_plain_parquet_holding_the_live_state() {
    for in_sql in [false, true] {
        epoch_is_plain_parquet(in_sql);
    }
}

fn epoch_is_plain_parquet(in_sql: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 3, in_sql); // rows at [0, 12 s); W = 11.9 s: [0,10) closed, [10,20) open
                           // the test's own view of the open state: per key, count and sum of the rows in [10 s, 20 s)
    let mut want: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for i in 0..3 {
        for r in rows(i).iter().filter(|r| (10_000..20_000).contains(&r.t)) {
            let e = want.entry(r.k).or_default();
            e.0 += 1;
            e.1 += r.v.unwrap_or(0);
        }
    }
    // the aggregate's state (beside it, the view's table: see below)
    let glob = epoch_dir(dir.path(), 3).join("operator-aggregate-w0.parquet");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let got = rt.block_on(async {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_parquet("state", glob.to_str().expect("utf8"), Default::default())
            .await?;
        ctx.sql(
            "SELECT window_start, window_end, k, agg0_count, CAST(agg1_int AS BIGINT) AS s \
             FROM state ORDER BY k",
        )
        .await?
        .collect()
        .await
    });
    let got = got.expect("DataFusion reads the epoch");
    let mut seen = BTreeMap::new();
    for b in &got {
        let col = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .expect("i64")
                .clone()
        };
        let (ws, we, k, c, s) = (col(0), col(1), col(2), col(3), col(4));
        for i in 0..b.num_rows() {
            assert_eq!(
                (ws.value(i), we.value(i)),
                (10_000, 20_000),
                "only the open window"
            );
            seen.insert(k.value(i), (c.value(i), s.value(i)));
        }
    }
    assert_eq!(seen, want);

    // the view's table, plain Parquet too: the closed window [0 s, 10 s)'s
    // final rows, per key count and sum (Append mode holds no open window)
    let table = epoch_dir(dir.path(), 3).join("operator-table-w0.parquet");
    let got = rt.block_on(async {
        let ctx = datafusion::prelude::SessionContext::new();
        ctx.register_parquet("t", table.to_str().expect("utf8"), Default::default())
            .await?;
        ctx.sql("SELECT _thund_window_start, k, c, s FROM t ORDER BY k")
            .await?
            .collect()
            .await
    });
    let got = got.expect("DataFusion reads the table");
    let mut closed: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    for i in 0..3 {
        for r in rows(i).iter().filter(|r| r.t < 10_000) {
            let e = closed.entry(r.k).or_default();
            e.0 += 1;
            e.1 += r.v.unwrap_or(0);
        }
    }
    let mut table_rows = BTreeMap::new();
    for b in &got {
        let col = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .expect("i64")
                .clone()
        };
        let (ws, k, c, s) = (col(0), col(1), col(2), col(3));
        for i in 0..b.num_rows() {
            assert_eq!(ws.value(i), 0, "only the closed window");
            table_rows.insert(k.value(i), (c.value(i), s.value(i)));
        }
    }
    assert_eq!(table_rows, closed);
}

/// A view whose window is in its SQL and whose SQL changed is refused
/// showing the SQL as its author wrote it (with `TUMBLE(…)`), not the query
/// Þund lowered it to; the fingerprint is the same as before (the SQL as
/// written is kept beside the hashed parts).
#[test]
fn a_changed_view_shows_its_sql_as_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 2, true);
    let mut e = Engine::builder()
        .with_state_root(&root)
        .build()
        .expect("engine");
    let mut changed = view(true);
    assert!(changed.sql.contains("TUMBLE("), "{}", changed.sql);
    changed.sql = changed.sql.replace("COUNT(*)", "MAX(v)");
    assert_ne!(changed.sql, view(true).sql);
    let err = e.create_view(changed.clone()).expect_err("the SQL changed");
    let Error::ViewChanged { changed: parts, .. } = &err else {
        panic!("expected ViewChanged, got {err}");
    };
    let sql = parts
        .iter()
        .find(|p| p.starts_with("the sql ("))
        .unwrap_or_else(|| panic!("the sql is among {parts:?}"));
    assert!(sql.contains("MAX(v)") && sql.contains("COUNT(*)"), "{sql}");
    assert!(sql.matches("TUMBLE(").count() == 2, "{sql}");
    assert!(
        parts.iter().all(|p| !p.starts_with("the sql as written")),
        "{parts:?}"
    );
    // the view as it was resumes: the SQL as written is no part of the hash
    let mut same = Engine::builder()
        .with_state_root(&root)
        .build()
        .expect("engine");
    same.create_view(view(true)).expect("the same view resumes");
    assert_eq!(same.recovery("v").expect("view").map(|r| r.epoch), Some(2));
}

#[test]
fn a_crashed_first_checkpoint_is_a_cold_start_that_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    // what a SIGKILL during the very first checkpoint leaves: a state file, no manifest, no pointer
    let epoch1 = epoch_dir(dir.path(), 1);
    std::fs::create_dir_all(&epoch1).expect("mkdir");
    std::fs::write(epoch1.join("operator-aggregate-w0.parquet"), b"PAR1 torn").expect("file");
    let e = reopen(&root, true).expect("a cold start, not an error");
    assert!(e.recovery("v").expect("view").is_none());
    let w = e.warnings("v").expect("view");
    assert_eq!(
        w,
        [thund::StateWarning::IgnoredUncommitted { epochs: vec![1] }],
        "{w:?}"
    );
}

#[test]
fn a_garbage_latest_pointer_is_reported_not_passed_over_in_silence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 3, true);
    let pointer = dir.path().join("v").join("_thund_latest.json");
    assert!(pointer.exists(), "{pointer:?}");
    std::fs::write(&pointer, b"{ garbage").expect("garbage");
    let mut e = reopen(&root, true).expect("resumes from the listing");
    assert_eq!(e.recovery("v").expect("view").map(|r| r.epoch), Some(3));
    let is_pointer =
        |w: &thund::StateWarning| matches!(w, thund::StateWarning::UnreadablePointer { .. });
    assert!(e.warnings("v").expect("view").iter().any(is_pointer));
    // and the first trigger report says so, once
    let first = e.trigger().expect("trigger");
    assert!(
        first.views[0].warnings.iter().any(is_pointer),
        "{:?}",
        first.views[0].warnings
    );
    assert!(e.trigger().expect("trigger").views[0].warnings.is_empty());
}

/// The window moved from the spec into the SQL is the same view: the same
/// per-window query, window and output columns, so either spelling resumes
/// the other's checkpoint and goes on as the uninterrupted run does. Moving
/// the bounds to other columns changes the output, and the checkpoint is
/// refused naming it.
#[test]
fn either_spelling_resumes_the_others_checkpoint_unless_the_output_moves() {
    for (wrote, resumes) in [(false, true), (true, false)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = format!("file://{}", dir.path().display());
        run(&root, 2, wrote);
        let mut e = reopen(&root, resumes).expect("the other spelling resumes");
        assert_eq!(e.recovery("v").expect("view").map(|r| r.epoch), Some(2));
        let mut whole = Engine::builder().build().expect("engine");
        whole.create_view(view(wrote)).expect("view");
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for i in 0..5 {
            whole.push("t", batch(&rows(i))).expect("push");
            let out = whole.trigger().expect("trigger").views[0].output.clone();
            if i >= 2 {
                // what the resumed engine is given: the input after its offset
                e.push("t", batch(&rows(i))).expect("push");
                got.extend(e.trigger().expect("trigger").views[0].output.clone());
                want.extend(out);
            }
        }
        got.extend(e.finish().expect("finish").views[0].output.clone());
        want.extend(whole.finish().expect("finish").views[0].output.clone());
        assert_eq!(
            common::canon(&got),
            common::canon(&want),
            "wrote in_sql={wrote}"
        );
        assert!(!want.is_empty());
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let root = format!("file://{}", dir.path().display());
    run(&root, 2, false);
    let mut moved = view(true);
    moved.sql = "SELECT k, COUNT(*) AS c, SUM(v) AS s, window_start, window_end \
                 FROM TUMBLE(t, ts, INTERVAL '10' SECOND) GROUP BY k"
        .into();
    let mut e = Engine::builder()
        .with_state_root(&root)
        .build()
        .expect("engine");
    let err = e
        .create_view(moved)
        .expect_err("the output's columns moved");
    match &err {
        Error::ViewChanged { changed, .. } => {
            let parts: Vec<&str> = changed
                .iter()
                .map(|c| c.split(" (").next().unwrap_or(""))
                .collect();
            assert_eq!(parts, ["the output"], "{err}");
        }
        other => panic!("expected ViewChanged, got {other}"),
    }
}

/// A join view's checkpoint, run `n` triggers, each committed.
fn run_join(root: &str, sql: &str, n: i64) {
    let mut e = Engine::builder()
        .with_state_root(root)
        .build()
        .expect("engine");
    e.create_view(join_view(sql)).expect("view");
    for i in 0..n {
        e.push_at("a", batch(&rows(i)), 0).expect("push");
        e.push_at("b", batch(&rows(i)), 0).expect("push");
        e.trigger().expect("trigger");
        e.checkpoint(serde_json::Value::Null).expect("checkpoint");
    }
    e.sync_checkpoints().expect("committed");
}

fn join_view(sql: &str) -> ViewSpec {
    ViewSpec::builder("v", sql)
        .source("a", "ts", schema())
        .source("b", "ts", schema())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .output(thund::OutputMode::Update)
        .build()
        .expect("spec")
}

/// Every count (column 2) of epoch `epoch`'s state files whose name starts
/// holds `prefix` set to `count`, and the manifest's sizes made to match: a
/// checkpoint doctored with care.
fn doctor_counts(dir: &Path, epoch: u64, prefix: &str, count: i64) {
    use arrow::array::{Array, Int64Array};
    let edir = epoch_dir(dir, epoch);
    let manifest_path = edir.join("_thund_checkpoint.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_path).expect("manifest")).expect("json");
    let mut doctored = 0;
    for f in manifest["files"].as_array_mut().expect("files") {
        let rel = f["path"].as_str().expect("path").to_string();
        let name = rel.rsplit('/').next().expect("name");
        if !name.contains(prefix) {
            continue;
        }
        let path = dir.join("v").join(&rel);
        let file = std::fs::File::open(&path).expect("open");
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .expect("parquet")
            .build()
            .expect("reader");
        let batches: Vec<_> = reader.map(|b| b.expect("batch")).collect();
        let Some(first) = batches.first() else {
            continue;
        };
        let out = std::fs::File::create(&path).expect("create");
        let mut w =
            parquet::arrow::ArrowWriter::try_new(out, first.schema(), None).expect("writer");
        for b in &batches {
            let mut cols = b.columns().to_vec();
            let n = cols[2].len();
            cols[2] = std::sync::Arc::new(Int64Array::from(vec![count; n]));
            let b = arrow::array::RecordBatch::try_new(b.schema(), cols).expect("batch");
            w.write(&b).expect("write");
            doctored += n;
        }
        w.close().expect("close");
        f["bytes"] = std::fs::metadata(&path).expect("meta").len().into();
    }
    assert!(doctored > 0, "no rows in {prefix}* of epoch {epoch}");
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).expect("json")).expect("write");
}

/// A doctored join checkpoint whose rows count more than any run could
/// make (or whose pairs would) is a typed error on resume, not an attempt
/// to materialise that many rows.
#[test]
fn a_join_checkpoint_with_huge_counts_is_refused_not_materialised() {
    const AGG: &str = "SELECT a.k, COUNT(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k";
    const ROWS: &str = "SELECT a.k, b.v FROM a JOIN b ON a.k = b.k";
    for sql in [AGG, ROWS] {
        // one side's count beyond what any run holds: the stored state is wrong
        let dir = tempfile::tempdir().expect("tempdir");
        let root = format!("file://{}", dir.path().display());
        run_join(&root, sql, 2);
        doctor_counts(dir.path(), 2, "join-left", 1 << 40);
        let mut e = Engine::builder()
            .with_state_root(&root)
            .build()
            .expect("engine");
        match e.create_view(join_view(sql)) {
            Err(Error::CheckpointFormat { message, .. }) => {
                assert!(
                    message.contains("join-left") && message.contains("counts"),
                    "{message}"
                )
            }
            other => panic!("{sql}: expected a checkpoint format error, got {other:?}"),
        }

        if sql == ROWS {
            // its restored pairs are not evaluated again: nothing to refuse
            continue;
        }
        // both sides at a plausible count, their pairs beyond the limit
        let dir = tempfile::tempdir().expect("tempdir");
        let root = format!("file://{}", dir.path().display());
        run_join(&root, sql, 2);
        doctor_counts(dir.path(), 2, "join-left", 1 << 20);
        doctor_counts(dir.path(), 2, "join-right", 1 << 20);
        let mut e = Engine::builder()
            .with_state_root(&root)
            .build()
            .expect("engine");
        match e.create_view(join_view(sql)) {
            Err(Error::Unsupported { message, .. }) => {
                assert!(message.contains("join output"), "{message}")
            }
            other => panic!("{sql}: expected the rows limit, got {other:?}"),
        }
    }
}
