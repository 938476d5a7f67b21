//! The I/O edge: [`CheckpointStore`] (reading, listing) and [`Writer`]
//! (leased writing and garbage collection) over any `object_store` backend.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::decision::{
    decide_resume, plan_gc, EpochListing, Listing, ManifestState, PointerState, ResumeDecision,
    SkippedEpoch,
};
use crate::error::{Error, Result};
use crate::lease::{now_ms, LeaseInfo, Takeover};
use crate::manifest::{EpochMeta, EpochStatus, FileEntry, LatestPointer, Manifest, FORMAT_VERSION};
use crate::parquet_io::{self, EncodeError};
use crate::paths::{
    epoch_dir_name, parse_epoch_dir, validate_name, Layout, LATEST_FILE, MANIFEST_FILE,
};

/// Default number of committed epochs [`Writer::gc`] keeps.
pub const DEFAULT_RETAIN: usize = 2;

/// How many state files are uploaded at once.
const UPLOAD_CONCURRENCY: usize = 4;

/// A checkpoint store: one state root on one object-store backend.
///
/// Cheap to clone (an `Arc` inside), `Send + Sync`. Reading needs no lease;
/// writing goes through a [`Writer`] obtained with [`acquire`](Self::acquire).
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<dyn ObjectStore>,
    layout: Layout,
    url: String,
    retain: usize,
}

/// One process-wide `InMemory` per `memory://` name, so that two stores opened
/// on the same URL see the same objects (as two processes on one bucket would).
fn memory_store(name: &str) -> Arc<dyn ObjectStore> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    let map = STORES.get_or_init(Default::default);
    let mut map = match map.lock() {
        Ok(m) => m,
        Err(poisoned) => poisoned.into_inner(),
    };
    let store = map
        .entry(name.to_string())
        .or_insert_with(|| Arc::new(InMemory::new()));
    Arc::clone(store) as Arc<dyn ObjectStore>
}

fn invalid_url(url: &str, reason: impl Into<String>) -> Error {
    Error::InvalidUrl {
        url: url.to_string(),
        reason: reason.into(),
    }
}

fn prefix_path(url: &str, prefix: &str) -> Result<Path> {
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        return Ok(Path::default());
    }
    Path::parse(prefix).map_err(|e| invalid_url(url, e.to_string()))
}

impl CheckpointStore {
    /// Opens a state root by URL:
    ///
    /// * `file:///abs/path` — a local directory (created if missing);
    /// * `memory://name/optional/prefix` — an in-process store, shared by
    ///   every store opened on the same `name` in this process (tests, demos);
    /// * `s3://bucket/prefix` — only with the cargo feature `s3`
    ///   (credentials, region and endpoint from the usual `AWS_*`
    ///   environment variables; conditional create is sent as
    ///   `If-None-Match: *`, which AWS S3, MinIO and R2 support).
    ///
    /// Anything else is [`Error::UnsupportedScheme`] or [`Error::InvalidUrl`].
    ///
    /// ```
    /// let store = thund_checkpoint::CheckpointStore::open("memory://doc-open").unwrap();
    /// assert_eq!(store.url(), "memory://doc-open");
    /// assert!(thund_checkpoint::CheckpointStore::open("ftp://x/y").is_err());
    /// ```
    pub fn open(url: &str) -> Result<Self> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid_url(url, "expected scheme://…"))?;
        let (store, root): (Arc<dyn ObjectStore>, Path) = match scheme {
            "memory" => {
                let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                (memory_store(name), prefix_path(url, prefix)?)
            }
            "file" => {
                let parsed = url::Url::parse(url).map_err(|e| invalid_url(url, e.to_string()))?;
                let dir = parsed.to_file_path().map_err(|()| {
                    invalid_url(
                        url,
                        "a file URL needs an absolute local path: file:///abs/path",
                    )
                })?;
                std::fs::create_dir_all(&dir).map_err(|source| Error::CreateDir {
                    path: dir.display().to_string(),
                    source,
                })?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| invalid_url(url, e.to_string()))?
                    .with_automatic_cleanup(true);
                (Arc::new(fs), Path::default())
            }
            #[cfg(feature = "s3")]
            "s3" | "s3a" => {
                let parsed = url::Url::parse(url).map_err(|e| invalid_url(url, e.to_string()))?;
                let (store, root) = object_store::parse_url_opts(
                    &parsed,
                    std::env::vars().filter(|(k, _)| k.starts_with("AWS_")),
                )
                .map_err(|e| invalid_url(url, e.to_string()))?;
                (Arc::from(store), root)
            }
            other => {
                return Err(Error::UnsupportedScheme {
                    url: url.to_string(),
                    scheme: other.to_string(),
                    hint: if matches!(other, "s3" | "s3a") {
                        " (s3:// needs thund-checkpoint's cargo feature `s3`)"
                    } else {
                        ""
                    },
                })
            }
        };
        Ok(Self::new(store, root, url))
    }

    /// A store over an existing backend, rooted at `root` inside it. `label`
    /// is only used in messages (e.g. the URL it came from).
    ///
    /// The backend must offer atomic puts, `PutMode::Create` (conditional
    /// create), and a listing that shows every completed put (all stores in
    /// `object_store` 0.13 that support `PutMode::Create` do).
    pub fn new(store: Arc<dyn ObjectStore>, root: Path, label: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                layout: Layout::new(root),
                url: label.into(),
                retain: DEFAULT_RETAIN,
            }),
        }
    }

    /// Sets how many committed epochs [`Writer::gc`] keeps (at least 1;
    /// default [`DEFAULT_RETAIN`]).
    pub fn with_retention(self, epochs: usize) -> Self {
        let inner = Inner {
            store: Arc::clone(&self.inner.store),
            layout: self.inner.layout.clone(),
            url: self.inner.url.clone(),
            retain: epochs.max(1),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The number of committed epochs garbage collection keeps.
    pub fn retention(&self) -> usize {
        self.inner.retain
    }

    /// The URL (or label) the store was opened with.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The path builder of this store.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The underlying object store (e.g. to register it with a query engine
    /// that reads checkpoint files directly).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.inner.store)
    }

    fn store(&self) -> &dyn ObjectStore {
        self.inner.store.as_ref()
    }

    // ---- small I/O helpers -------------------------------------------------

    async fn get_bytes(&self, path: &Path, epoch: Option<u64>) -> Result<Option<Bytes>> {
        let res = match self.store().get(path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(Error::store("get", path, epoch, e)),
        };
        match res.bytes().await {
            Ok(b) => Ok(Some(b)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Error::store("get", path, epoch, e)),
        }
    }

    async fn put(
        &self,
        path: &Path,
        bytes: Bytes,
        mode: PutMode,
        epoch: Option<u64>,
    ) -> Result<()> {
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        self.store()
            .put_opts(path, PutPayload::from(bytes), opts)
            .await
            .map(|_| ())
            .map_err(|e| Error::store("put", path, epoch, e))
    }

    async fn delete_if_present(&self, path: &Path, epoch: Option<u64>) -> Result<()> {
        match self.store().delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Error::store("delete", path, epoch, e)),
        }
    }

    fn json(path: &Path, value: &impl serde::Serialize) -> Result<Bytes> {
        serde_json::to_vec_pretty(value)
            .map(Bytes::from)
            .map_err(|source| Error::JsonEncode {
                path: path.to_string(),
                source,
            })
    }

    // ---- reading ---------------------------------------------------------------

    /// The views that have a directory under the state root, sorted (for
    /// `inspect`-style tools). Directories whose names are not valid view
    /// names are left out.
    pub async fn views(&self) -> Result<Vec<String>> {
        let root = self.inner.layout.root();
        let listed = self
            .store()
            .list_with_delimiter(Some(root))
            .await
            .map_err(|e| Error::store("list", root, None, e))?;
        let mut views: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .filter(|name| validate_name("view", name).is_ok())
            .collect();
        views.sort();
        Ok(views)
    }

    /// Lists a view's directory: every epoch (with its manifest parsed and
    /// validated), every object in epoch directories, and the latest pointer.
    /// Reads each manifest, but no state file.
    pub async fn list(&self, view: &str) -> Result<Listing> {
        validate_name("view", view)?;
        let layout = &self.inner.layout;
        let dir = layout.view_dir(view);
        let objects: Vec<object_store::ObjectMeta> = self
            .store()
            .list(Some(&dir))
            .map_err(|e| Error::store("list", &dir, None, e))
            .try_collect()
            .await?;

        let mut listing = Listing::new(view);
        let mut with_manifest = BTreeSet::new();
        for meta in objects {
            let Some(rel) = layout.relative_to_view(view, &meta.location) else {
                continue;
            };
            let Some((first, rest)) = rel.split_once('/') else {
                continue; // pointer, lease, strays at the view root
            };
            let Some(epoch) = parse_epoch_dir(first) else {
                continue;
            };
            listing.epochs.entry(epoch).or_insert(EpochListing {
                manifest: ManifestState::Missing,
                rejected: None,
            });
            if rest == MANIFEST_FILE {
                with_manifest.insert(epoch);
            }
            listing.objects.insert(rel, meta.size);
        }

        for epoch in with_manifest {
            let path = layout.manifest(view, epoch);
            let state = match self.get_bytes(&path, Some(epoch)).await? {
                // Deleted between list and get (concurrent gc): uncommitted now.
                None => ManifestState::Missing,
                Some(bytes) => match Manifest::parse(&bytes, view, epoch) {
                    Ok(m) => ManifestState::Valid(Box::new(m)),
                    Err(reason) => ManifestState::Unreadable(reason),
                },
            };
            if let Some(l) = listing.epochs.get_mut(&epoch) {
                l.manifest = state;
            }
        }

        let latest = layout.latest(view);
        listing.latest = match self.get_bytes(&latest, None).await? {
            None => PointerState::Missing,
            Some(bytes) => match serde_json::from_slice::<LatestPointer>(&bytes) {
                Ok(p) if p.view == view => PointerState::Points(p.epoch),
                Ok(p) => PointerState::Unreadable(format!(
                    "{LATEST_FILE} names view `{}`, not `{view}`",
                    p.view
                )),
                Err(e) => PointerState::Unreadable(format!("{LATEST_FILE} is not valid: {e}")),
            },
        };
        Ok(listing)
    }

    /// Lists the view and runs the pure [`decide_resume`] on the listing (no
    /// state file is read; [`load`](Self::load) also verifies by reading).
    pub async fn decide(&self, view: &str) -> Result<ResumeDecision> {
        Ok(decide_resume(&self.list(view).await?))
    }

    /// Reads one committed epoch's manifest.
    pub async fn read_manifest(&self, view: &str, epoch: u64) -> Result<Manifest> {
        validate_name("view", view)?;
        let path = self.inner.layout.manifest(view, epoch);
        let bytes =
            self.get_bytes(&path, Some(epoch))
                .await?
                .ok_or_else(|| Error::EpochUnreadable {
                    view: view.to_string(),
                    epoch,
                    reason: format!("no manifest at `{path}`: the epoch is not committed"),
                })?;
        Manifest::parse(&bytes, view, epoch).map_err(|reason| Error::EpochUnreadable {
            view: view.to_string(),
            epoch,
            reason,
        })
    }

    /// Loads the newest usable committed epoch of `view`: its manifest and the
    /// record batches of every file, verified (Parquet readable, row counts as
    /// recorded). An epoch whose files are missing, resized or corrupt is
    /// skipped in favour of the previous committed one, and the returned
    /// [`Loaded::fell_back_from`] says which and why.
    ///
    /// `Ok(None)`: nothing was ever committed (cold start).
    /// [`Error::NoCommittedEpoch`]: something was committed but nothing can be
    /// resumed — never a silent cold start. Transient store errors are
    /// returned as errors, not treated as corruption.
    pub async fn load(&self, view: &str) -> Result<Option<Loaded>> {
        self.load_inner(view, None).await
    }

    /// Like [`load`](Self::load), but the resumed epoch's fingerprint must
    /// equal `fingerprint`, else [`Error::FingerprintMismatch`] (naming both).
    pub async fn load_expecting(&self, view: &str, fingerprint: &str) -> Result<Option<Loaded>> {
        self.load_inner(view, Some(fingerprint)).await
    }

    async fn load_inner(&self, view: &str, fingerprint: Option<&str>) -> Result<Option<Loaded>> {
        let mut listing = self.list(view).await?;
        let mut tried = BTreeSet::new();
        loop {
            let plan = match decide_resume(&listing) {
                ResumeDecision::ColdStart { .. } => return Ok(None),
                ResumeDecision::Refuse { reason, skipped } => {
                    return Err(Error::NoCommittedEpoch {
                        view: view.to_string(),
                        reason,
                        skipped,
                    })
                }
                ResumeDecision::Resume(plan) => plan,
            };
            if !tried.insert(plan.epoch) {
                // Cannot happen (a rejected epoch is skipped); never loop.
                return Err(Error::EpochUnreadable {
                    view: view.to_string(),
                    epoch: plan.epoch,
                    reason: "chosen again after its files failed verification".into(),
                });
            }
            let manifest = match listing.epochs.get(&plan.epoch).map(|l| &l.manifest) {
                Some(ManifestState::Valid(m)) => m.as_ref().clone(),
                _ => {
                    // decide_resume only resumes from valid manifests.
                    return Err(Error::EpochUnreadable {
                        view: view.to_string(),
                        epoch: plan.epoch,
                        reason: "decision named an epoch without a valid manifest".into(),
                    });
                }
            };
            if let Some(expected) = fingerprint {
                manifest.check_fingerprint(expected)?;
            }
            match self.read_files(view, &manifest).await? {
                Ok(operators) => {
                    return Ok(Some(Loaded {
                        next_epoch: listing.next_epoch(),
                        manifest,
                        operators,
                        fell_back_from: plan.fell_back_from,
                        ignored_uncommitted: plan.ignored_uncommitted,
                        warnings: plan.warnings,
                    }))
                }
                Err(reason) => listing.reject(plan.epoch, reason),
            }
        }
    }

    /// Reads and verifies every file of a manifest. The outer `Result` is a
    /// store failure; the inner `Err` says why the epoch is corrupt.
    async fn read_files(
        &self,
        view: &str,
        manifest: &Manifest,
    ) -> Result<std::result::Result<BTreeMap<String, Vec<LoadedFile>>, String>> {
        let mut operators: BTreeMap<String, Vec<LoadedFile>> = BTreeMap::new();
        for entry in &manifest.files {
            let Some(path) = self.inner.layout.resolve(view, &entry.path) else {
                return Ok(Err(format!("`{}` is not a state file path", entry.path)));
            };
            let Some(bytes) = self.get_bytes(&path, Some(manifest.epoch)).await? else {
                return Ok(Err(format!("file `{}` is missing", entry.path)));
            };
            if bytes.len() as u64 != entry.bytes {
                return Ok(Err(format!(
                    "file `{}` has {} bytes, the manifest says {}",
                    entry.path,
                    bytes.len(),
                    entry.bytes
                )));
            }
            match parquet_io::decode(bytes, entry.rows) {
                Ok(batches) => {
                    operators
                        .entry(entry.operator.clone())
                        .or_default()
                        .push(LoadedFile {
                            entry: entry.clone(),
                            batches,
                        })
                }
                Err(reason) => return Ok(Err(format!("file `{}` {reason}", entry.path))),
            }
        }
        Ok(Ok(operators))
    }

    // ---- fencing ---------------------------------------------------------------

    /// Acquires the writer lease of `view` (never taking over a held one).
    /// A second writer on the same state root and view gets
    /// [`Error::Fenced`].
    pub async fn acquire(&self, view: &str) -> Result<Writer> {
        self.acquire_with(view, Takeover::Never).await
    }

    /// Acquires the writer lease of `view`, taking over a held lease as
    /// `takeover` allows (see [`Takeover`] and the [`lease`](crate::lease)
    /// module for stale leases after a crash).
    pub async fn acquire_with(&self, view: &str, takeover: Takeover) -> Result<Writer> {
        validate_name("view", view)?;
        let path = self.inner.layout.lease(view);
        let mine = LeaseInfo::for_this_process();
        let bytes = Self::json(&path, &mine)?;
        // A few rounds: the lease may vanish or change between our create and
        // our read of it.
        for _ in 0..4 {
            match self.put(&path, bytes.clone(), PutMode::Create, None).await {
                Ok(()) => {
                    crate::lease::register_live(&mine.owner);
                    let mut writer = Writer {
                        store: self.clone(),
                        view: view.to_string(),
                        lease: mine,
                        last_committed: None,
                        next_epoch: 1,
                    };
                    match self.list(view).await {
                        Ok(listing) => {
                            writer.last_committed = listing.newest_committed();
                            writer.next_epoch = listing.next_epoch();
                            return Ok(writer);
                        }
                        Err(e) => {
                            // Do not keep a lease we cannot use.
                            let _ = writer.release().await;
                            return Err(e);
                        }
                    }
                }
                Err(Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
            let Some(current) = self.get_bytes(&path, None).await? else {
                continue; // released in between: try again
            };
            let holder = serde_json::from_slice::<LeaseInfo>(&current);
            let allowed = match (&holder, takeover) {
                (_, Takeover::Force) => true,
                (Ok(h), Takeover::IfStale) => h.is_stale(),
                _ => false,
            };
            if !allowed {
                return Err(Error::Fenced {
                    view: view.to_string(),
                    path: path.to_string(),
                    holder: match holder {
                        Ok(h) => h.to_string(),
                        Err(e) => format!("an unreadable lease ({e})"),
                    },
                });
            }
            // Delete only the lease we judged, not one created meanwhile.
            if self.get_bytes(&path, None).await?.as_ref() == Some(&current) {
                self.delete_if_present(&path, None).await?;
            }
        }
        Err(Error::Fenced {
            view: view.to_string(),
            path: path.to_string(),
            holder: "a writer that keeps re-acquiring it (contention)".into(),
        })
    }

    /// The current lease holder of `view`, if any (`Err` text if unreadable).
    pub async fn lease_holder(
        &self,
        view: &str,
    ) -> Result<Option<std::result::Result<LeaseInfo, String>>> {
        validate_name("view", view)?;
        let path = self.inner.layout.lease(view);
        Ok(self
            .get_bytes(&path, None)
            .await?
            .map(|b| serde_json::from_slice::<LeaseInfo>(&b).map_err(|e| e.to_string())))
    }
}

/// The result of [`CheckpointStore::load`]: the resumed epoch's manifest and
/// state.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The manifest of the resumed epoch.
    pub manifest: Manifest,
    /// The state files, grouped by operator (in manifest order within one).
    pub operators: BTreeMap<String, Vec<LoadedFile>>,
    /// Newer epochs passed over, newest first, with reasons. Non-empty means
    /// the resume fell back: report it loudly.
    pub fell_back_from: Vec<SkippedEpoch>,
    /// Newer uncommitted epoch directories (crashed writes), ignored.
    pub ignored_uncommitted: Vec<u64>,
    /// Oddities worth logging (see [`crate::ResumePlan::warnings`]).
    pub warnings: Vec<String>,
    /// An epoch number above every epoch directory present: the next epoch to
    /// write (see [`Writer::next_epoch`]).
    pub next_epoch: u64,
}

/// One state file as loaded.
#[derive(Debug, Clone)]
pub struct LoadedFile {
    /// Its manifest entry.
    pub entry: FileEntry,
    /// Its record batches.
    pub batches: Vec<RecordBatch>,
}

impl Loaded {
    /// The resumed epoch.
    pub fn epoch(&self) -> u64 {
        self.manifest.epoch
    }

    /// Whether newer committed epochs had to be passed over.
    pub fn fell_back(&self) -> bool {
        !self.fell_back_from.is_empty()
    }

    /// Every batch of `operator`, all workers, in manifest order.
    pub fn batches<'a>(&'a self, operator: &str) -> impl Iterator<Item = &'a RecordBatch> + 'a {
        self.operators
            .get(operator)
            .into_iter()
            .flatten()
            .flat_map(|f| f.batches.iter())
    }

    /// Total rows of `operator`.
    pub fn rows(&self, operator: &str) -> u64 {
        self.operators
            .get(operator)
            .into_iter()
            .flatten()
            .map(|f| f.entry.rows)
            .sum()
    }
}

/// New state to write in an epoch: one operator's state on one worker.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Operator name (a path component: `[A-Za-z0-9_.-]`, see
    /// [`validate_name`](crate::paths::validate_name)).
    pub operator: String,
    /// Worker index.
    pub worker: usize,
    /// The batches, all of one schema. An empty vector writes no file.
    pub batches: Vec<RecordBatch>,
}

impl NewFile {
    /// A new state file.
    pub fn new(operator: impl Into<String>, worker: usize, batches: Vec<RecordBatch>) -> Self {
        Self {
            operator: operator.into(),
            worker,
            batches,
        }
    }
}

impl<S: Into<String>> From<(S, usize, Vec<RecordBatch>)> for NewFile {
    fn from((operator, worker, batches): (S, usize, Vec<RecordBatch>)) -> Self {
        Self::new(operator, worker, batches)
    }
}

/// What [`Writer::gc`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GcReport {
    /// Committed epochs kept, oldest first.
    pub retained: Vec<u64>,
    /// Objects deleted, relative to the view directory.
    pub deleted: Vec<String>,
}

/// The single writer of one view, holding its lease. Obtained from
/// [`CheckpointStore::acquire`]; give it back with [`release`](Self::release).
///
/// Dropping a writer without releasing leaves its lease file in place (it
/// cannot do I/O in `drop`), but marks it stale for this process: a later
/// [`Takeover::IfStale`] acquisition — in this process, or in a new one once
/// this process is gone — takes it over.
#[derive(Debug)]
pub struct Writer {
    store: CheckpointStore,
    view: String,
    lease: LeaseInfo,
    last_committed: Option<u64>,
    next_epoch: u64,
}

impl Drop for Writer {
    fn drop(&mut self) {
        crate::lease::unregister_live(&self.lease.owner);
    }
}

impl Writer {
    /// The view this writer writes.
    pub fn view(&self) -> &str {
        &self.view
    }

    /// The store it writes to.
    pub fn store(&self) -> &CheckpointStore {
        &self.store
    }

    /// This writer's lease.
    pub fn lease(&self) -> &LeaseInfo {
        &self.lease
    }

    /// The newest epoch committed (by anyone before, or by this writer).
    pub fn last_committed(&self) -> Option<u64> {
        self.last_committed
    }

    /// The smallest epoch that collides with nothing present: above every
    /// epoch directory seen at acquisition (including leftovers of crashed,
    /// uncommitted writes) and every epoch this writer wrote.
    pub fn next_epoch(&self) -> u64 {
        self.next_epoch
    }

    /// Writes and commits one epoch:
    ///
    /// 1. each of `new_files` as `epoch=NNNNNN/operator-{op}-w{n}.parquet`
    ///    with a conditional create (an existing object is
    ///    [`Error::AlreadyExists`], never overwritten);
    /// 2. checks that every `reused` file (written by an earlier epoch) is still
    ///    there with its recorded size, and that the lease is still ours;
    /// 3. the manifest, with a conditional create — **the commit point**;
    /// 4. the latest pointer (overwritten).
    ///
    /// A crash between any two steps leaves an epoch without a manifest,
    /// which [`decide_resume`] ignores, or a committed epoch the pointer does
    /// not name yet, which it resumes from. Returns the committed manifest;
    /// its `files` are the new files followed by `reused`.
    pub async fn write_epoch(
        &mut self,
        epoch: u64,
        new_files: Vec<NewFile>,
        reused: Vec<FileEntry>,
        meta: EpochMeta,
    ) -> Result<Manifest> {
        let view = self.view.clone();
        if let Some(last) = self.last_committed.filter(|last| epoch <= *last) {
            return Err(Error::EpochNotIncreasing {
                view,
                epoch,
                last_committed: last,
            });
        }
        let invalid = |reason: String| Error::InvalidInput {
            view: view.clone(),
            epoch,
            reason,
        };
        let layout = self.store.layout().clone();

        // Validate everything before the first write.
        let mut names = BTreeSet::new();
        for f in &new_files {
            validate_name("operator", &f.operator)?;
            if !names.insert((f.operator.clone(), f.worker)) {
                return Err(invalid(format!(
                    "operator `{}` worker {} is given twice",
                    f.operator, f.worker
                )));
            }
        }
        let mut reused_paths = BTreeSet::new();
        for r in &reused {
            let parsed = crate::paths::parse_relative_state_path(&r.path);
            let consistent = parsed.as_ref().is_some_and(|p| {
                p.epoch == r.epoch && p.operator == r.operator && p.worker == r.worker
            });
            if !consistent {
                return Err(invalid(format!(
                    "reused file entry `{}` is not a consistent state file entry",
                    r.path
                )));
            }
            if r.epoch >= epoch {
                return Err(invalid(format!(
                    "reused file `{}` was written by epoch {}, not before epoch {epoch}",
                    r.path, r.epoch
                )));
            }
            if !reused_paths.insert(r.path.clone()) {
                return Err(invalid(format!("reused file `{}` is given twice", r.path)));
            }
        }

        // 1. Encode and upload the new files.
        let mut uploads = Vec::new();
        let mut entries = Vec::new();
        for f in &new_files {
            if f.batches.is_empty() {
                continue;
            }
            let path = layout.state_file(&view, epoch, &f.operator, f.worker);
            let (bytes, rows) =
                parquet_io::encode(&f.batches, &view, epoch, &f.operator, f.worker).map_err(
                    |e| match e {
                        EncodeError::Empty => invalid("empty state file".into()),
                        EncodeError::SchemaMismatch { batch } => invalid(format!(
                            "operator `{}` worker {}: batch {batch} has a different schema than batch 0",
                            f.operator, f.worker
                        )),
                        EncodeError::Parquet(source) => Error::ParquetEncode {
                            path: path.to_string(),
                            epoch,
                            source: Box::new(source),
                        },
                    },
                )?;
            entries.push(FileEntry::new(
                epoch,
                &f.operator,
                f.worker,
                rows,
                bytes.len() as u64,
            ));
            uploads.push((path, bytes));
        }
        // Leftovers of this epoch number (an earlier crashed write) make the
        // conditional creates fail: never write under a dirty epoch.
        self.next_epoch = self.next_epoch.max(epoch.saturating_add(1));
        let store = &self.store;
        futures::stream::iter(uploads)
            .map(|(path, bytes)| async move {
                store.put(&path, bytes, PutMode::Create, Some(epoch)).await
            })
            .buffer_unordered(UPLOAD_CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;

        // 2. Reused files must still be there, unchanged.
        for r in &reused {
            let path = layout.resolve_any(&view, &r.path);
            match store.store().head(&path).await {
                Ok(meta) if meta.size == r.bytes => {}
                Ok(meta) => {
                    return Err(Error::ReusedFileMissing {
                        view,
                        epoch,
                        path: r.path.clone(),
                        reason: format!("it has {} bytes, expected {}", meta.size, r.bytes),
                    })
                }
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::ReusedFileMissing {
                        view,
                        epoch,
                        path: r.path.clone(),
                        reason: "it does not exist (garbage collected?)".into(),
                    })
                }
                Err(e) => return Err(Error::store("head", &path, Some(epoch), e)),
            }
        }
        self.check_lease().await?;

        // 3. The manifest: the commit point.
        entries.extend(reused);
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            view: view.clone(),
            fingerprint: meta.fingerprint,
            fingerprint_parts: meta.fingerprint_parts,
            epoch,
            status: EpochStatus::Committed,
            committed_at_ms: now_ms(),
            watermark: meta.watermark,
            watermark_clock: meta.watermark_clock,
            trigger_epoch: meta.trigger_epoch,
            sources: meta.sources,
            counters: meta.counters,
            emitted_frontier: meta.emitted_frontier,
            files: entries,
            extra: meta.extra,
        };
        let mpath = layout.manifest(&view, epoch);
        let mbytes = CheckpointStore::json(&mpath, &manifest)?;
        store
            .put(&mpath, mbytes, PutMode::Create, Some(epoch))
            .await?;
        self.last_committed = Some(epoch);

        // 4. The latest pointer.
        let lpath = layout.latest(&view);
        let pointer = LatestPointer {
            format_version: FORMAT_VERSION,
            view: view.clone(),
            epoch,
            manifest: format!("{}/{MANIFEST_FILE}", epoch_dir_name(epoch)),
        };
        let lbytes = CheckpointStore::json(&lpath, &pointer)?;
        store
            .put(&lpath, lbytes, PutMode::Overwrite, Some(epoch))
            .await?;
        Ok(manifest)
    }

    /// Fails with [`Error::LeaseLost`] unless the lease file is still ours.
    pub async fn check_lease(&self) -> Result<()> {
        let path = self.store.layout().lease(&self.view);
        let current = self.store.get_bytes(&path, None).await?;
        let holder = current
            .as_ref()
            .map(|b| serde_json::from_slice::<LeaseInfo>(b));
        match holder {
            Some(Ok(h)) if h.owner == self.lease.owner => Ok(()),
            other => Err(Error::LeaseLost {
                view: self.view.clone(),
                path: path.to_string(),
                holder: match other {
                    None => "none".into(),
                    Some(Ok(h)) => h.to_string(),
                    Some(Err(e)) => format!("an unreadable lease ({e})"),
                },
            }),
        }
    }

    /// Deletes old epochs: keeps the store's [retention](CheckpointStore::with_retention)
    /// of committed epochs and every file a kept manifest references; deletes
    /// other epochs' manifests (first) and files, and files of crashed writes
    /// older than the newest committed epoch. See [`plan_gc`].
    pub async fn gc(&self) -> Result<GcReport> {
        self.check_lease().await?;
        let listing = self.store.list(&self.view).await?;
        let plan = plan_gc(&listing, self.store.retention());
        let layout = self.store.layout();
        for rel in &plan.delete {
            let epoch = rel.split('/').next().and_then(parse_epoch_dir);
            let path = layout.resolve_any(&self.view, rel);
            self.store.delete_if_present(&path, epoch).await?;
        }
        Ok(GcReport {
            retained: plan.retained,
            deleted: plan.delete,
        })
    }

    /// Releases the lease (deletes the lease file), after checking it is
    /// still ours ([`Error::LeaseLost`] otherwise, and nothing is deleted).
    pub async fn release(self) -> Result<()> {
        self.check_lease().await?;
        let path = self.store.layout().lease(&self.view);
        self.store.delete_if_present(&path, None).await
    }
}
