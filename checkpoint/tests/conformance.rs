//! One conformance suite, every backend: each test function below runs against
//! `memory://` and against a `file://` temp dir (object_store's
//! `integration.rs` style).

mod common;

use std::collections::BTreeMap;

use bytes::Bytes;
use common::{batch, concat, Backend};
use object_store::{ObjectStoreExt, PutPayload};
use thund_checkpoint::{
    CheckpointStore, Counters, EpochMeta, Error, FileEntry, LeaseInfo, NewFile, SkipReason,
    SourceState, Takeover,
};

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::memory(stringify!($name))).await
                }
            )*
        }
        mod file {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::common::file(stringify!($name))).await
                }
            )*
        }
    };
}

conformance!(
    round_trip_several_epochs,
    manifestless_epoch_is_ignored,
    committed_epoch_ahead_of_pointer_is_resumed,
    conditional_create_refuses_overwrite,
    retention_gc_keeps_referenced_files,
    fencing,
    stale_lease_takeover,
    fingerprint_mismatch_is_an_error,
    cold_start_and_refusal,
    garbage_manifest_falls_back,
    missing_reused_file_is_refused,
);

fn meta(fp: &str, epoch: u64) -> EpochMeta {
    EpochMeta {
        fingerprint: fp.to_string(),
        fingerprint_parts: Default::default(),
        watermark: Some(1_000 * epoch as i64),
        watermark_clock: Some((7, 1_000 * epoch as i64)),
        trigger_epoch: Some(epoch + 100),
        sources: vec![
            SourceState {
                name: "clicks".into(),
                max_event_time: Some(1_500 * epoch as i64),
                idle: false,
                last_active_ms: Some(42),
                offset: Some(100 * epoch),
            },
            SourceState {
                name: "views".into(),
                max_event_time: None,
                idle: true,
                last_active_ms: None,
                offset: None,
            },
        ],
        counters: Counters {
            late_rows_dropped: epoch,
            windows_closed: 2 * epoch,
            other: BTreeMap::from([("null_event_time_rows".to_string(), 7)]),
        },
        emitted_frontier: Some(900 * epoch as i64),
        extra: serde_json::json!({ "sink_committed_len": 4096 * epoch }),
    }
}

/// Writes a file object directly, bypassing the protocol (a crash leftover or
/// tampering).
async fn put_raw(b: &Backend, view: &str, rel: &str, bytes: &'static [u8]) {
    let path = rel
        .split('/')
        .fold(b.store.layout().view_dir(view), |p, part| p.join(part));
    b.store
        .object_store()
        .put(&path, PutPayload::from(Bytes::from_static(bytes)))
        .await
        .expect("raw put");
}

async fn round_trip_several_epochs(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("clicks").await.expect("acquire");
    assert_eq!(w.next_epoch(), 1);

    // Epoch 1: two operators, two workers.
    let m1 = w
        .write_epoch(
            1,
            vec![
                NewFile::new("count", 0, vec![batch(1, 10), batch(2, 5)]),
                NewFile::new("count", 1, vec![batch(3, 7)]),
                ("sum", 0, vec![batch(4, 3)]).into(),
                NewFile::new("empty", 0, vec![]),
            ],
            vec![],
            meta("fp", 1),
        )
        .await
        .expect("epoch 1");
    assert_eq!(
        m1.files.len(),
        3,
        "an operator without batches writes no file"
    );
    assert_eq!(m1.files[0].rows, 15);
    assert!(m1.files.iter().all(|f| f.epoch == 1 && f.bytes > 0));

    // Epoch 2: full rewrite of `count`, nothing else.
    w.write_epoch(
        2,
        vec![NewFile::new("count", 0, vec![batch(5, 4)])],
        vec![],
        meta("fp", 2),
    )
    .await
    .expect("epoch 2");

    // Epoch 3: incremental — new `count` w0 state, reuses `sum` from epoch 1
    // and `count` w1 from epoch 1.
    let reused: Vec<FileEntry> = m1
        .files
        .iter()
        .filter(|f| f.operator == "sum" || f.worker == 1)
        .cloned()
        .collect();
    let m3 = w
        .write_epoch(
            3,
            vec![NewFile::new("count", 0, vec![batch(6, 9), batch(7, 0)])],
            reused,
            meta("fp", 3),
        )
        .await
        .expect("epoch 3");
    assert_eq!(m3.files.len(), 3);
    assert_eq!(w.next_epoch(), 4);
    assert_eq!(w.last_committed(), Some(3));
    w.release().await.expect("release");

    let loaded = store
        .load_expecting("clicks", "fp")
        .await
        .expect("load")
        .expect("committed");
    assert_eq!(loaded.epoch(), 3);
    assert!(!loaded.fell_back(), "{:?}", loaded.fell_back_from);
    assert_eq!(loaded.manifest, m3);
    assert_eq!(loaded.manifest.watermark, Some(3_000));
    assert_eq!(loaded.manifest.watermark_clock, Some((7, 3_000)));
    assert_eq!(loaded.manifest.trigger_epoch, Some(103));
    assert_eq!(loaded.manifest.sources[0].offset, Some(300));
    assert!(loaded.manifest.sources[1].idle);
    assert_eq!(loaded.manifest.counters.windows_closed, 6);
    assert_eq!(loaded.manifest.counters.other["null_event_time_rows"], 7);
    assert_eq!(loaded.manifest.emitted_frontier, Some(2_700));
    assert_eq!(loaded.manifest.extra["sink_committed_len"], 12_288);
    assert_eq!(loaded.next_epoch, 4);

    // The data round-trips exactly, types included.
    let count: Vec<_> = loaded.operators["count"].iter().collect();
    assert_eq!(count.len(), 2);
    assert_eq!(count[0].entry.epoch, 3);
    assert_eq!(concat(&count[0].batches), concat(&[batch(6, 9)]));
    assert_eq!(count[1].entry.epoch, 1);
    assert_eq!(count[1].entry.worker, 1);
    assert_eq!(concat(&count[1].batches), batch(3, 7));
    assert_eq!(
        concat(&loaded.batches("sum").cloned().collect::<Vec<_>>()),
        batch(4, 3)
    );
    assert_eq!(loaded.rows("count"), 16);
    assert!(!loaded.operators.contains_key("empty"));

    // Older committed epochs stay readable.
    let m1_again = store.read_manifest("clicks", 1).await.expect("manifest 1");
    assert_eq!(m1_again, m1);
    assert_eq!(
        store.views().await.expect("views"),
        vec!["clicks".to_string()]
    );
    let listing = store.list("clicks").await.expect("list");
    assert_eq!(
        listing.committed().map(|(e, _)| e).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

async fn manifestless_epoch_is_ignored(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("v").await.expect("acquire");
    w.write_epoch(
        1,
        vec![NewFile::new("op", 0, vec![batch(1, 3)])],
        vec![],
        meta("fp", 1),
    )
    .await
    .expect("epoch 1");
    w.release().await.expect("release");
    // A crash after writing epoch 2's state file, before its manifest.
    put_raw(&b, "v", "epoch=000002/operator-op-w0.parquet", b"partial").await;

    let loaded = store.load("v").await.expect("load").expect("committed");
    assert_eq!(loaded.epoch(), 1);
    assert!(
        !loaded.fell_back(),
        "an uncommitted epoch is not a fall-back"
    );
    assert_eq!(loaded.ignored_uncommitted, vec![2]);
    assert_eq!(loaded.next_epoch, 3);

    // A restarted writer does not collide with the leftover.
    let mut w = store.acquire("v").await.expect("acquire again");
    assert_eq!(w.next_epoch(), 3);
    w.write_epoch(
        3,
        vec![NewFile::new("op", 0, vec![batch(3, 2)])],
        vec![],
        meta("fp", 3),
    )
    .await
    .expect("epoch 3");
    // gc removes the dead write below the newest committed epoch.
    let report = w.gc().await.expect("gc");
    assert!(report
        .deleted
        .contains(&"epoch=000002/operator-op-w0.parquet".to_string()));
    w.release().await.expect("release");
    assert_eq!(
        store.load("v").await.expect("load").expect("some").epoch(),
        3
    );
}

async fn committed_epoch_ahead_of_pointer_is_resumed(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("v").await.expect("acquire");
    for e in 1..=2 {
        w.write_epoch(
            e,
            vec![NewFile::new("op", 0, vec![batch(e as i64, 2)])],
            vec![],
            meta("fp", e),
        )
        .await
        .expect("write");
    }
    w.release().await.expect("release");
    // Crash between manifest 2 and the pointer: the pointer still names 1.
    put_raw(
        &b,
        "v",
        "_thund_latest.json",
        br#"{"format_version":1,"view":"v","epoch":1,"manifest":"epoch=000001/_thund_checkpoint.json"}"#,
    )
    .await;
    let loaded = store.load("v").await.expect("load").expect("some");
    assert_eq!(loaded.epoch(), 2, "the manifest is the commit point");
    assert!(!loaded.fell_back());
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
}

async fn conditional_create_refuses_overwrite(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("v").await.expect("acquire");
    w.write_epoch(
        1,
        vec![NewFile::new("op", 0, vec![batch(1, 3)])],
        vec![],
        meta("fp", 1),
    )
    .await
    .expect("epoch 1");
    // Re-writing a committed epoch is refused before any I/O.
    let err = w
        .write_epoch(
            1,
            vec![NewFile::new("op", 0, vec![batch(9, 3)])],
            vec![],
            meta("fp", 1),
        )
        .await
        .expect_err("epoch 1 again");
    assert!(
        matches!(
            err,
            Error::EpochNotIncreasing {
                epoch: 1,
                last_committed: 1,
                ..
            }
        ),
        "{err}"
    );

    // A leftover object at the path of a new file: the conditional create
    // refuses, the object is untouched, and nothing is committed.
    put_raw(&b, "v", "epoch=000002/operator-op-w0.parquet", b"leftover").await;
    let err = w
        .write_epoch(
            2,
            vec![NewFile::new("op", 0, vec![batch(2, 3)])],
            vec![],
            meta("fp", 2),
        )
        .await
        .expect_err("overwrite");
    match &err {
        Error::AlreadyExists { path, epoch } => {
            assert!(
                path.ends_with("epoch=000002/operator-op-w0.parquet"),
                "{path}"
            );
            assert_eq!(*epoch, Some(2));
        }
        other => panic!("expected AlreadyExists, got {other}"),
    }
    let path = store.layout().state_file("v", 2, "op", 0);
    let bytes = store
        .object_store()
        .get(&path)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(&bytes[..], b"leftover");
    assert_eq!(
        store.load("v").await.expect("load").expect("some").epoch(),
        1
    );

    // A manifest already present (another writer committed epoch 3) is not
    // overwritten either.
    put_raw(&b, "v", "epoch=000003/_thund_checkpoint.json", b"{}").await;
    let err = w
        .write_epoch(3, vec![], vec![], meta("fp", 3))
        .await
        .expect_err("manifest overwrite");
    assert!(
        matches!(&err, Error::AlreadyExists { path, .. } if path.ends_with("_thund_checkpoint.json")),
        "{err}"
    );
    w.release().await.expect("release");
}

async fn retention_gc_keeps_referenced_files(b: Backend) {
    let store = b.store.clone().with_retention(2);
    assert_eq!(store.retention(), 2);
    let mut w = store.acquire("v").await.expect("acquire");
    // Epoch 1 writes `big` (reused by every later epoch) and `small`.
    let m1 = w
        .write_epoch(
            1,
            vec![
                NewFile::new("big", 0, vec![batch(1, 20)]),
                NewFile::new("small", 0, vec![batch(2, 2)]),
            ],
            vec![],
            meta("fp", 1),
        )
        .await
        .expect("epoch 1");
    let big = m1.files[0].clone();
    for e in 2..=4u64 {
        w.write_epoch(
            e,
            vec![NewFile::new("small", 0, vec![batch(e as i64 * 10, 2)])],
            vec![big.clone()],
            meta("fp", e),
        )
        .await
        .expect("write");
    }
    let report = w.gc().await.expect("gc");
    assert_eq!(report.retained, vec![3, 4]);
    assert_eq!(
        report.deleted,
        vec![
            "epoch=000001/_thund_checkpoint.json",
            "epoch=000002/_thund_checkpoint.json",
            "epoch=000001/operator-small-w0.parquet",
            "epoch=000002/operator-small-w0.parquet",
        ]
    );
    let listing = store.list("v").await.expect("list");
    let objects: Vec<&str> = listing.objects.keys().map(String::as_str).collect();
    assert_eq!(
        objects,
        vec![
            "epoch=000001/operator-big-w0.parquet",
            "epoch=000003/_thund_checkpoint.json",
            "epoch=000003/operator-small-w0.parquet",
            "epoch=000004/_thund_checkpoint.json",
            "epoch=000004/operator-small-w0.parquet",
        ]
    );
    if let Some(dir) = &b.dir {
        // Empty epoch directories disappear on the file backend.
        assert!(!dir.path().join("state root/v/epoch=000002").exists());
        assert!(dir.path().join("state root/v/epoch=000001").exists());
    }
    // gc is idempotent.
    assert!(w.gc().await.expect("gc again").deleted.is_empty());

    // Both retained epochs still load in full (the referenced file survived).
    let loaded = store.load("v").await.expect("load").expect("some");
    assert_eq!(loaded.epoch(), 4);
    assert_eq!(
        concat(&loaded.batches("big").cloned().collect::<Vec<_>>()),
        batch(1, 20)
    );
    let m3 = store.read_manifest("v", 3).await.expect("manifest 3");
    assert!(m3.files.contains(&big));

    // An incremental epoch may keep referencing the old file after gc.
    w.write_epoch(5, vec![], vec![big.clone()], meta("fp", 5))
        .await
        .expect("epoch 5");
    let report = w.gc().await.expect("gc 3");
    assert_eq!(report.retained, vec![4, 5]);
    assert!(!report.deleted.iter().any(|p| p.contains("big")));
    w.release().await.expect("release");
    assert_eq!(
        store
            .load("v")
            .await
            .expect("load")
            .expect("some")
            .rows("big"),
        20
    );
}

async fn fencing(b: Backend) {
    let store = &b.store;
    let mut first = store.acquire("v").await.expect("first");
    let holder = store
        .lease_holder("v")
        .await
        .expect("holder")
        .expect("held")
        .expect("readable");
    assert_eq!(&holder, first.lease());

    // A second writer on the same root and view (another handle, as another
    // process would have) is fenced out with a clear error.
    let other = if b.kind == "memory" {
        store.clone()
    } else {
        let dir = b.dir.as_ref().expect("dir").path().join("state root");
        CheckpointStore::open(&common::url_for(&dir)).expect("reopen")
    };
    let err = other.acquire("v").await.expect_err("second writer");
    match &err {
        Error::Fenced { view, holder, .. } => {
            assert_eq!(view, "v");
            assert!(
                holder.contains(&format!("pid {}", std::process::id())),
                "{holder}"
            );
        }
        e => panic!("expected Fenced, got {e}"),
    }
    assert!(err.to_string().contains("Takeover::Force"), "{err}");
    // The holder is alive (it is us): IfStale does not take over.
    assert!(matches!(
        other.acquire_with("v", Takeover::IfStale).await,
        Err(Error::Fenced { .. })
    ));
    // Another view is independent.
    other
        .acquire("w")
        .await
        .expect("view w")
        .release()
        .await
        .expect("release w");

    // Release, then the other writer gets in.
    first
        .write_epoch(
            1,
            vec![NewFile::new("op", 0, vec![batch(1, 1)])],
            vec![],
            meta("fp", 1),
        )
        .await
        .expect("epoch 1");
    first.release().await.expect("release");
    assert!(store.lease_holder("v").await.expect("holder").is_none());
    let second = other.acquire("v").await.expect("after release");
    assert_eq!(second.last_committed(), Some(1));

    // A forced takeover fences the previous holder out at its next commit.
    let mut third = store
        .acquire_with("v", Takeover::Force)
        .await
        .expect("force");
    let mut second = second;
    let err = second
        .write_epoch(
            2,
            vec![NewFile::new("op", 0, vec![batch(2, 1)])],
            vec![],
            meta("fp", 2),
        )
        .await
        .expect_err("lost lease");
    assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
    assert!(matches!(second.gc().await, Err(Error::LeaseLost { .. })));
    assert!(matches!(
        second.release().await,
        Err(Error::LeaseLost { .. })
    ));
    // Its half-written epoch 2 never committed; the new holder skips past it.
    assert_eq!(
        store.load("v").await.expect("load").expect("some").epoch(),
        1
    );
    let e = third.next_epoch();
    assert_eq!(e, 2, "the lease was taken before the loser wrote its files");
    let listing = store.list("v").await.expect("list");
    let e = listing.next_epoch().max(e);
    third
        .write_epoch(
            e,
            vec![NewFile::new("op", 0, vec![batch(3, 1)])],
            vec![],
            meta("fp", e),
        )
        .await
        .expect("write after takeover");
    third.release().await.expect("release third");
}

async fn stale_lease_takeover(b: Backend) {
    let store = &b.store;
    // A lease left by a process that no longer exists on this host (as after
    // SIGKILL): Never refuses, IfStale takes over.
    let mut dead = LeaseInfo::for_this_process();
    #[cfg(target_os = "linux")]
    {
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        dead.pid = child.id();
        child.wait().expect("wait");
    }
    #[cfg(not(target_os = "linux"))]
    {
        dead.pid = u32::MAX - 7;
    }
    let json = serde_json::to_vec(&dead).expect("json");
    let path = store.layout().lease("v");
    store
        .object_store()
        .put(&path, PutPayload::from(Bytes::from(json)))
        .await
        .expect("put lease");
    assert!(matches!(
        store.acquire("v").await,
        Err(Error::Fenced { .. })
    ));
    if cfg!(target_os = "linux") {
        let w = store
            .acquire_with("v", Takeover::IfStale)
            .await
            .expect("takeover");
        assert_ne!(w.lease().owner, dead.owner);
        w.release().await.expect("release");
    }

    // A writer dropped without release (an in-process "crash"): its lease
    // stays, fences `Never`, and is stale for `IfStale`.
    let w = store.acquire("dropped").await.expect("acquire");
    drop(w);
    assert!(matches!(
        store.acquire("dropped").await,
        Err(Error::Fenced { .. })
    ));
    let w = store
        .acquire_with("dropped", Takeover::IfStale)
        .await
        .expect("takeover of a dropped writer's lease");
    w.release().await.expect("release");

    // An unreadable lease can only be forced.
    put_raw(&b, "v", "_thund_writer.json", b"garbage").await;
    assert!(matches!(
        store.acquire_with("v", Takeover::IfStale).await,
        Err(Error::Fenced { holder, .. }) if holder.contains("unreadable")
    ));
    let w = store
        .acquire_with("v", Takeover::Force)
        .await
        .expect("force");
    w.release().await.expect("release");
}

async fn fingerprint_mismatch_is_an_error(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("v").await.expect("acquire");
    w.write_epoch(
        1,
        vec![NewFile::new("op", 0, vec![batch(1, 1)])],
        vec![],
        meta("sql-v1", 1),
    )
    .await
    .expect("write");
    w.release().await.expect("release");
    let err = store
        .load_expecting("v", "sql-v2")
        .await
        .expect_err("mismatch");
    match &err {
        Error::FingerprintMismatch {
            expected,
            found,
            epoch,
            ..
        } => {
            assert_eq!(
                (expected.as_str(), found.as_str(), *epoch),
                ("sql-v2", "sql-v1", 1)
            );
        }
        e => panic!("expected FingerprintMismatch, got {e}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("sql-v1") && msg.contains("sql-v2"), "{msg}");
    assert!(store
        .load_expecting("v", "sql-v1")
        .await
        .expect("ok")
        .is_some());
}

async fn cold_start_and_refusal(b: Backend) {
    let store = &b.store;
    assert!(store.load("nothing").await.expect("load").is_none());
    // A crash during the very first checkpoint: nothing was committed.
    put_raw(
        &b,
        "first",
        "epoch=000001/operator-op-w0.parquet",
        b"partial",
    )
    .await;
    assert!(store.load("first").await.expect("load").is_none());
    let w = store.acquire("first").await.expect("acquire");
    assert_eq!(w.next_epoch(), 2);
    w.release().await.expect("release");

    // Epoch directories whose only manifest is garbage: refuse, never a
    // silent cold start.
    put_raw(
        &b,
        "broken",
        "epoch=000004/_thund_checkpoint.json",
        b"{\"format_version\":",
    )
    .await;
    put_raw(&b, "broken", "epoch=000004/operator-op-w0.parquet", b"x").await;
    let err = store.load("broken").await.expect_err("refuse");
    match &err {
        Error::NoCommittedEpoch { skipped, .. } => {
            assert_eq!(skipped.len(), 1);
            assert!(matches!(
                skipped[0].reason,
                SkipReason::ManifestUnreadable(_)
            ));
        }
        e => panic!("expected NoCommittedEpoch, got {e}"),
    }
    assert!(
        err.to_string().contains("refusing a silent cold start"),
        "{err}"
    );

    // Bad names are typed errors, not paths.
    assert!(matches!(
        store.load("../x").await,
        Err(Error::InvalidName { .. })
    ));
}

async fn garbage_manifest_falls_back(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("v").await.expect("acquire");
    for e in 1..=2 {
        w.write_epoch(
            e,
            vec![NewFile::new("op", 0, vec![batch(e as i64, 4)])],
            vec![],
            meta("fp", e),
        )
        .await
        .expect("write");
    }
    w.release().await.expect("release");
    put_raw(
        &b,
        "v",
        "epoch=000002/_thund_checkpoint.json",
        b"not json at all",
    )
    .await;
    let loaded = store.load("v").await.expect("load").expect("some");
    assert_eq!(loaded.epoch(), 1);
    assert!(loaded.fell_back());
    assert_eq!(loaded.fell_back_from[0].epoch, 2);
    assert!(matches!(
        loaded.fell_back_from[0].reason,
        SkipReason::ManifestUnreadable(_)
    ));
    assert_eq!(
        concat(&loaded.batches("op").cloned().collect::<Vec<_>>()),
        batch(1, 4)
    );
}

async fn missing_reused_file_is_refused(b: Backend) {
    let store = &b.store;
    let mut w = store.acquire("v").await.expect("acquire");
    let m1 = w
        .write_epoch(
            1,
            vec![NewFile::new("op", 0, vec![batch(1, 4)])],
            vec![],
            meta("fp", 1),
        )
        .await
        .expect("write");
    let mut ghost = m1.files[0].clone();
    ghost.bytes += 1;
    let err = w
        .write_epoch(2, vec![], vec![ghost], meta("fp", 2))
        .await
        .expect_err("resized reuse");
    assert!(
        matches!(err, Error::ReusedFileMissing { epoch: 2, .. }),
        "{err}"
    );
    let future = FileEntry::new(5, "op", 0, 1, 1);
    let err = w
        .write_epoch(3, vec![], vec![future], meta("fp", 3))
        .await
        .expect_err("reuse from the future");
    assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    let err = w
        .write_epoch(
            3,
            vec![NewFile::new("bad/name", 0, vec![batch(1, 1)])],
            vec![],
            meta("fp", 3),
        )
        .await
        .expect_err("bad operator");
    assert!(
        matches!(
            err,
            Error::InvalidName {
                kind: "operator",
                ..
            }
        ),
        "{err}"
    );
    w.release().await.expect("release");
    assert_eq!(
        store.load("v").await.expect("load").expect("some").epoch(),
        1
    );
}

#[test]
fn store_is_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    fn check_send<T: Send + Sync>() {}
    check::<CheckpointStore>();
    check::<thund_checkpoint::BlockingCheckpointStore>();
    check_send::<thund_checkpoint::Writer>();
    check_send::<thund_checkpoint::BlockingWriter>();
}

#[test]
fn blocking_api_from_sync_code_and_threads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = common::url_for(dir.path());
    let store = thund_checkpoint::BlockingCheckpointStore::open(&url).expect("open");
    let mut w = store.acquire("v").expect("acquire");
    // The writer can move to a background thread (the engine's sidecar).
    let handle = std::thread::spawn(move || {
        for e in 1..=3 {
            w.write_epoch(
                e,
                vec![NewFile::new("op", 0, vec![batch(e as i64, 2)])],
                vec![],
                meta("fp", e),
            )
            .expect("write");
        }
        w.gc().expect("gc");
        w.release().expect("release");
    });
    handle.join().expect("thread");
    let reader = store.clone();
    let loaded = std::thread::spawn(move || reader.load_expecting("v", "fp"))
        .join()
        .expect("thread")
        .expect("load")
        .expect("some");
    assert_eq!(loaded.epoch(), 3);
    assert_eq!(store.list("v").expect("list").committed().count(), 2);

    // Clones share one current-thread runtime; concurrent callers are fine.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = store.clone();
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| s.load("v").expect("load").expect("some").epoch())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("thread"), vec![3; 5]);
    }
}

#[test]
fn unknown_schemes_are_typed_errors() {
    assert!(matches!(
        CheckpointStore::open("ftp://host/dir"),
        Err(Error::UnsupportedScheme { .. })
    ));
    #[cfg(not(feature = "s3"))]
    {
        let err = CheckpointStore::open("s3://bucket/prefix").expect_err("no s3");
        assert!(err.to_string().contains("feature `s3`"), "{err}");
    }
    assert!(matches!(
        CheckpointStore::open("/no/scheme"),
        Err(Error::InvalidUrl { .. })
    ));
    assert!(matches!(
        CheckpointStore::open("file://relative/x"),
        Err(Error::InvalidUrl { .. })
    ));
}
