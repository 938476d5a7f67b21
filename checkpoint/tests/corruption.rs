//! Corruption through real files on a `file://` store: the newest epoch's
//! Parquet file is damaged on disk and recovery falls back to the previous
//! committed epoch, saying why.

mod common;

use common::{batch, concat};
use thund_checkpoint::{BlockingCheckpointStore, EpochMeta, Error, NewFile, SkipReason};

fn setup() -> (tempfile::TempDir, BlockingCheckpointStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = BlockingCheckpointStore::open(&common::url_for(dir.path())).expect("open");
    let mut w = store.acquire("v").expect("acquire");
    for e in 1..=2u64 {
        w.write_epoch(
            e,
            vec![NewFile::new("op", 0, vec![batch(e as i64, 50)])],
            vec![],
            EpochMeta::new("fp"),
        )
        .expect("write");
    }
    w.release().expect("release");
    (dir, store)
}

fn newest_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("v/epoch=000002/operator-op-w0.parquet")
}

#[test]
fn truncated_parquet_falls_back_loudly() {
    let (dir, store) = setup();
    let path = newest_file(&dir);
    let len = std::fs::metadata(&path).expect("meta").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    f.set_len(len / 2).expect("truncate");
    drop(f);

    let loaded = store.load("v").expect("load").expect("some");
    assert_eq!(loaded.epoch(), 1);
    assert!(loaded.fell_back());
    assert_eq!(loaded.fell_back_from.len(), 1);
    assert_eq!(loaded.fell_back_from[0].epoch, 2);
    assert_eq!(
        loaded.fell_back_from[0].reason,
        SkipReason::FileSizeMismatch {
            path: "epoch=000002/operator-op-w0.parquet".into(),
            expected: len,
            found: len / 2,
        }
    );
    let why = loaded.fell_back_from[0].to_string();
    assert!(
        why.contains("epoch 2") && why.contains("operator-op-w0.parquet"),
        "{why}"
    );
    assert_eq!(
        concat(&loaded.batches("op").cloned().collect::<Vec<_>>()),
        batch(1, 50)
    );
}

#[test]
fn same_size_corruption_is_caught_by_reading() {
    let (dir, store) = setup();
    let path = newest_file(&dir);
    let mut bytes = std::fs::read(&path).expect("read");
    // Damage the footer (length + magic) but keep the size: only reading
    // the file can tell.
    let n = bytes.len();
    for b in &mut bytes[n - 8..] {
        *b = 0;
    }
    std::fs::write(&path, &bytes).expect("write");

    // The pure, listing-only decision cannot see it …
    match store.decide("v").expect("decide") {
        thund_checkpoint::ResumeDecision::Resume(plan) => assert_eq!(plan.epoch, 2),
        other => panic!("{other:?}"),
    }
    // … loading does, and falls back.
    let loaded = store.load("v").expect("load").expect("some");
    assert_eq!(loaded.epoch(), 1);
    match &loaded.fell_back_from[..] {
        [s] => {
            assert_eq!(s.epoch, 2);
            assert!(
                matches!(&s.reason, SkipReason::FilesUnreadable(r) if r.contains("operator-op-w0.parquet")),
                "{s}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn deleted_file_in_every_epoch_refuses() {
    let (dir, store) = setup();
    std::fs::remove_file(newest_file(&dir)).expect("rm 2");
    std::fs::remove_file(dir.path().join("v/epoch=000001/operator-op-w0.parquet")).expect("rm 1");
    let err = store.load("v").expect_err("nothing usable");
    match err {
        Error::NoCommittedEpoch { skipped, .. } => {
            assert_eq!(
                skipped.iter().map(|s| s.epoch).collect::<Vec<_>>(),
                vec![2, 1]
            );
            assert!(skipped
                .iter()
                .all(|s| matches!(s.reason, SkipReason::FileMissing { .. })));
        }
        e => panic!("expected NoCommittedEpoch, got {e}"),
    }
}

#[test]
fn deleted_latest_pointer_resumes_newest_committed() {
    let (dir, store) = setup();
    std::fs::remove_file(dir.path().join("v/_thund_latest.json")).expect("rm pointer");
    let loaded = store.load("v").expect("load").expect("some");
    assert_eq!(loaded.epoch(), 2);
    assert!(!loaded.fell_back());
}
