//! Every crash point: a store wrapper lets the first `n` mutations (puts and
//! deletes) through and fails every later one, as if the process died there.
//! For each `n`, a script of checkpoints (with an incremental epoch and a gc)
//! runs until the "crash"; then a restarted process must resume from exactly
//! the newest epoch whose manifest was written — never a fall-back, never an
//! error, never a collision when it goes on writing.

mod common;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use thund_checkpoint::{
    CheckpointStore, EpochMeta, Error, FileEntry, Manifest, NewFile, Takeover, Writer,
};

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = object_store::Result<T>> + Send + 'a>>;

/// Lets `budget` mutations through, then fails all of them.
#[derive(Debug)]
struct CrashingStore {
    inner: Arc<dyn ObjectStore>,
    budget: Arc<AtomicI64>,
}

impl fmt::Display for CrashingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CrashingStore({})", self.inner)
    }
}

fn take(budget: &AtomicI64) -> object_store::Result<()> {
    if budget.fetch_sub(1, Ordering::SeqCst) > 0 {
        Ok(())
    } else {
        Err(object_store::Error::Generic {
            store: "crashing",
            source: "injected crash".into(),
        })
    }
}

impl ObjectStore for CrashingStore {
    fn put_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> BoxFut<'async_trait, PutResult>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            take(&self.budget)?;
            self.inner.put_opts(location, payload, opts).await
        })
    }

    fn put_multipart_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        opts: PutMultipartOptions,
    ) -> BoxFut<'async_trait, Box<dyn MultipartUpload>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            take(&self.budget)?;
            self.inner.put_multipart_opts(location, opts).await
        })
    }

    fn get_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        options: GetOptions,
    ) -> BoxFut<'async_trait, GetResult>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.get_opts(location, options)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let budget = Arc::clone(&self.budget);
        let inner = Arc::clone(&self.inner);
        locations
            .and_then(move |p| {
                let budget = Arc::clone(&budget);
                let inner = Arc::clone(&inner);
                async move {
                    take(&budget)?;
                    inner.delete(&p).await.map(|()| p)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_delimiter<'life0, 'life1, 'async_trait>(
        &'life0 self,
        prefix: Option<&'life1 Path>,
    ) -> BoxFut<'async_trait, ListResult>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.list_with_delimiter(prefix)
    }

    fn copy_opts<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        from: &'life1 Path,
        to: &'life2 Path,
        options: CopyOptions,
    ) -> BoxFut<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            take(&self.budget)?;
            self.inner.copy_opts(from, to, options).await
        })
    }
}

/// Rows written per operator by each epoch of the script (the oracle).
fn expected_rows(epoch: u64) -> Vec<(&'static str, u64)> {
    match epoch {
        1 => vec![("a", 5), ("b", 3)],
        2 => vec![("a", 5), ("b", 4)], // reuses a from 1
        3 => vec![("a", 6), ("b", 4)], // a new, reuses b from 2
        4 => vec![("a", 6), ("b", 7)], // reuses a from 3
        _ => vec![("a", 8), ("b", 8)], // after restart: full rewrite
    }
}

fn file<'m>(m: &'m Manifest, op: &str) -> &'m FileEntry {
    m.files
        .iter()
        .find(|f| f.operator == op)
        .expect("operator present")
}

/// Makes one epoch's new and reused files from the manifests before it.
type Step = Box<dyn Fn(&[Manifest]) -> (Vec<NewFile>, Vec<FileEntry>)>;

/// The script: epochs 1–4 with incremental reuse and a gc after epoch 3.
/// Returns the epochs whose `write_epoch` returned `Ok` and the epoch being
/// written when the crash hit (if any).
async fn script(store: &CheckpointStore) -> (Vec<u64>, Option<u64>) {
    let mut ok = Vec::new();
    let Ok(mut w) = store.acquire("v").await else {
        return (ok, None);
    };
    let steps: Vec<(u64, Step)> = vec![
        (
            1,
            Box::new(|_| {
                (
                    vec![
                        NewFile::new("a", 0, vec![common::batch(1, 5)]),
                        NewFile::new("b", 0, vec![common::batch(2, 3)]),
                    ],
                    vec![],
                )
            }),
        ),
        (
            2,
            Box::new(|ms| {
                (
                    vec![NewFile::new("b", 0, vec![common::batch(3, 4)])],
                    vec![file(&ms[0], "a").clone()],
                )
            }),
        ),
        (
            3,
            Box::new(|ms| {
                (
                    vec![NewFile::new("a", 0, vec![common::batch(4, 6)])],
                    vec![file(&ms[1], "b").clone()],
                )
            }),
        ),
        (
            4,
            Box::new(|ms| {
                (
                    vec![NewFile::new("b", 0, vec![common::batch(5, 7)])],
                    vec![file(&ms[2], "a").clone()],
                )
            }),
        ),
    ];
    let mut manifests = Vec::new();
    for (epoch, make) in steps {
        let (new, reused) = make(&manifests);
        match w
            .write_epoch(epoch, new, reused, EpochMeta::new("fp"))
            .await
        {
            Ok(m) => {
                ok.push(epoch);
                manifests.push(m);
            }
            Err(_) => return (ok, Some(epoch)),
        }
        if epoch == 3 && w.gc().await.is_err() {
            return (ok, None);
        }
    }
    let _ = w.release().await;
    (ok, None)
}

async fn manifest_exists(mem: &Arc<dyn ObjectStore>, store: &CheckpointStore, epoch: u64) -> bool {
    mem.head(&store.layout().manifest("v", epoch)).await.is_ok()
}

fn check_loaded(loaded: &thund_checkpoint::Loaded, epoch: u64, n: i64) {
    assert_eq!(loaded.epoch(), epoch, "crash point {n}");
    assert!(
        !loaded.fell_back(),
        "crash point {n}: fell back {:?}",
        loaded.fell_back_from
    );
    for (op, rows) in expected_rows(epoch) {
        assert_eq!(
            loaded.rows(op),
            rows,
            "crash point {n}, epoch {epoch}, op {op}"
        );
        let read: usize = loaded.batches(op).map(|b| b.num_rows()).sum();
        assert_eq!(read as u64, rows, "crash point {n}");
    }
}

#[tokio::test]
async fn every_crash_point_resumes_the_last_commit() {
    // Enough budget to run the whole script uncrashed, found by growing it.
    let mut n = 0i64;
    loop {
        let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let budget = Arc::new(AtomicI64::new(n));
        let crashing = Arc::new(CrashingStore {
            inner: Arc::clone(&mem),
            budget: Arc::clone(&budget),
        });
        let store = CheckpointStore::new(crashing, Path::from("root"), "crashing");
        let (ok, crashed_in) = script(&store).await;
        let completed = budget.load(Ordering::SeqCst) >= 0 && crashed_in.is_none();

        // "Restart": same objects, no crash injection.
        let fresh = CheckpointStore::new(Arc::clone(&mem), Path::from("root"), "restart");
        let committed_in_crash = match crashed_in {
            Some(e) => manifest_exists(&mem, &fresh, e).await,
            None => false,
        };
        let expected = if committed_in_crash {
            crashed_in
        } else {
            ok.last().copied()
        };
        let loaded = fresh
            .load_expecting("v", "fp")
            .await
            .expect("load never fails");
        match (expected, &loaded) {
            (None, None) => {}
            (Some(e), Some(l)) => check_loaded(l, e, n),
            (e, l) => panic!(
                "crash point {n}: expected {e:?}, loaded {:?}",
                l.as_ref().map(|l| l.epoch())
            ),
        }

        // The restarted writer takes over the dead writer's lease and goes on
        // writing without colliding with leftovers; gc cleans up after it.
        let mut w: Writer = fresh
            .acquire_with("v", Takeover::IfStale)
            .await
            .unwrap_or_else(|e| panic!("crash point {n}: takeover: {e}"));
        let next = w.next_epoch();
        assert!(next > expected.unwrap_or(0), "crash point {n}");
        w.write_epoch(
            next,
            vec![
                NewFile::new("a", 0, vec![common::batch(6, 8)]),
                NewFile::new("b", 0, vec![common::batch(7, 8)]),
            ],
            vec![],
            EpochMeta::new("fp"),
        )
        .await
        .unwrap_or_else(|e| panic!("crash point {n}: write after restart: {e}"));
        w.gc()
            .await
            .unwrap_or_else(|e| panic!("crash point {n}: gc: {e}"));
        w.release().await.expect("release");
        let loaded = fresh.load("v").await.expect("load").expect("committed");
        assert_eq!(loaded.epoch(), next);
        assert!(!loaded.fell_back());
        assert_eq!(loaded.rows("a"), 8);

        if completed {
            assert_eq!(ok, vec![1, 2, 3, 4]);
            assert!(n > 10, "the script makes more than 10 mutations");
            break;
        }
        n += 1;
        assert!(n < 200, "script never completed");
    }
}

#[tokio::test]
async fn crashing_store_really_crashes() {
    // Guard for the harness itself: with no budget nothing is written.
    let mem: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let crashing = Arc::new(CrashingStore {
        inner: Arc::clone(&mem),
        budget: Arc::new(AtomicI64::new(0)),
    });
    let store = CheckpointStore::new(crashing, Path::from("root"), "crashing");
    assert!(matches!(store.acquire("v").await, Err(Error::Store { .. })));
    let listed: Vec<_> = mem.list(None).try_collect().await.expect("list");
    assert!(listed.is_empty());
}
