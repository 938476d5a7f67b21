//! Blocking wrappers for sync callers (the engine is sync): each owns a share
//! of one small current-thread tokio runtime and `block_on`s the async API.
//!
//! Do not call these from inside an async runtime (tokio panics on a nested
//! `block_on`); use [`CheckpointStore`] and [`Writer`] there.

use std::sync::Arc;

use tokio::runtime::Runtime;

use crate::decision::{Listing, ResumeDecision};
use crate::error::{Error, Result};
use crate::lease::{LeaseInfo, Takeover};
use crate::manifest::{EpochMeta, FileEntry, Manifest};
use crate::store::{CheckpointStore, GcReport, Loaded, NewFile, Writer};

/// A [`CheckpointStore`] with blocking methods. `Send + Sync + Clone`; clones
/// share the runtime.
///
/// ```
/// use thund_checkpoint::{BlockingCheckpointStore, EpochMeta, NewFile};
/// use arrow::array::Int64Array;
/// use arrow::record_batch::RecordBatch;
/// use std::sync::Arc;
///
/// let store = BlockingCheckpointStore::open("memory://doc-blocking")?;
/// let mut writer = store.acquire("clicks")?;
/// let batch = RecordBatch::try_from_iter([(
///     "count",
///     Arc::new(Int64Array::from(vec![1, 2, 3])) as _,
/// )])?;
/// let epoch = writer.next_epoch();
/// writer.write_epoch(epoch, vec![NewFile::new("count", 0, vec![batch])], vec![], EpochMeta::new("fp"))?;
/// writer.release()?;
///
/// let loaded = store.load_expecting("clicks", "fp")?.expect("committed");
/// assert_eq!(loaded.epoch(), 1);
/// assert_eq!(loaded.rows("count"), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct BlockingCheckpointStore {
    store: CheckpointStore,
    rt: Arc<Runtime>,
}

impl BlockingCheckpointStore {
    /// Opens a state root by URL (see [`CheckpointStore::open`]).
    pub fn open(url: &str) -> Result<Self> {
        Self::new(CheckpointStore::open(url)?)
    }

    /// Wraps a store, starting a current-thread runtime for it.
    pub fn new(store: CheckpointStore) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Runtime { source })?;
        Ok(Self {
            store,
            rt: Arc::new(rt),
        })
    }

    /// Sets the retention (see [`CheckpointStore::with_retention`]).
    pub fn with_retention(self, epochs: usize) -> Self {
        Self {
            store: self.store.with_retention(epochs),
            rt: self.rt,
        }
    }

    /// The async store inside.
    pub fn inner(&self) -> &CheckpointStore {
        &self.store
    }

    /// See [`CheckpointStore::views`].
    pub fn views(&self) -> Result<Vec<String>> {
        self.rt.block_on(self.store.views())
    }

    /// See [`CheckpointStore::list`].
    pub fn list(&self, view: &str) -> Result<Listing> {
        self.rt.block_on(self.store.list(view))
    }

    /// See [`CheckpointStore::decide`].
    pub fn decide(&self, view: &str) -> Result<ResumeDecision> {
        self.rt.block_on(self.store.decide(view))
    }

    /// See [`CheckpointStore::read_manifest`].
    pub fn read_manifest(&self, view: &str, epoch: u64) -> Result<Manifest> {
        self.rt.block_on(self.store.read_manifest(view, epoch))
    }

    /// See [`CheckpointStore::load`].
    pub fn load(&self, view: &str) -> Result<Option<Loaded>> {
        self.rt.block_on(self.store.load(view))
    }

    /// See [`CheckpointStore::load_expecting`].
    pub fn load_expecting(&self, view: &str, fingerprint: &str) -> Result<Option<Loaded>> {
        self.rt
            .block_on(self.store.load_expecting(view, fingerprint))
    }

    /// See [`CheckpointStore::lease_holder`].
    pub fn lease_holder(
        &self,
        view: &str,
    ) -> Result<Option<std::result::Result<LeaseInfo, String>>> {
        self.rt.block_on(self.store.lease_holder(view))
    }

    /// See [`CheckpointStore::acquire`].
    pub fn acquire(&self, view: &str) -> Result<BlockingWriter> {
        self.acquire_with(view, Takeover::Never)
    }

    /// See [`CheckpointStore::acquire_with`].
    pub fn acquire_with(&self, view: &str, takeover: Takeover) -> Result<BlockingWriter> {
        let writer = self.rt.block_on(self.store.acquire_with(view, takeover))?;
        Ok(BlockingWriter {
            writer,
            rt: Arc::clone(&self.rt),
        })
    }
}

/// A [`Writer`] with blocking methods. `Send + Sync`: it may be moved to a
/// background thread.
#[derive(Debug)]
pub struct BlockingWriter {
    writer: Writer,
    rt: Arc<Runtime>,
}

impl BlockingWriter {
    /// The async writer inside.
    pub fn inner(&self) -> &Writer {
        &self.writer
    }

    /// See [`Writer::view`].
    pub fn view(&self) -> &str {
        self.writer.view()
    }

    /// See [`Writer::next_epoch`].
    pub fn next_epoch(&self) -> u64 {
        self.writer.next_epoch()
    }

    /// See [`Writer::last_committed`].
    pub fn last_committed(&self) -> Option<u64> {
        self.writer.last_committed()
    }

    /// See [`Writer::write_epoch`].
    pub fn write_epoch(
        &mut self,
        epoch: u64,
        new_files: Vec<NewFile>,
        reused: Vec<FileEntry>,
        meta: EpochMeta,
    ) -> Result<Manifest> {
        self.rt
            .block_on(self.writer.write_epoch(epoch, new_files, reused, meta))
    }

    /// See [`Writer::check_lease`].
    pub fn check_lease(&self) -> Result<()> {
        self.rt.block_on(self.writer.check_lease())
    }

    /// See [`Writer::gc`].
    pub fn gc(&self) -> Result<GcReport> {
        self.rt.block_on(self.writer.gc())
    }

    /// See [`Writer::release`].
    pub fn release(self) -> Result<()> {
        self.rt.block_on(self.writer.release())
    }
}
