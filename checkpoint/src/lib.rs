//! ```text
//!            Arrow RecordBatches (push)  /  replayable Source (offsets)
//!                               │
//!                               ▼
//!  thund (root crate) ── Engine: views, triggers, watermark tracker, sinks, CLI
//!        │  planning: DataFusion LogicalPlan ──► the view's plan (own IR):
//!        │            a supported shape, or Recompute { reason }
//!        │
//!        ├─► incremental path ──► thund-dataflows
//!        │                        timely + differential-dataflow; knows no SQL;
//!        │                        timestamps = event time; close = frontier
//!        │
//!        ├─► recompute path ────► DataFusion over the buffered rows of open /
//!        │   (in the root crate)  dirty windows; fallback and test oracle
//!        │
//!        │   both paths export operator state per epoch (full or delta)
//!        ▼
//!  sidecar (root crate, background thread) ── asks policy: full or delta?
//!        │                                     which older files to reuse?
//!        ▼
//!  ┌──────────────────────── thund-checkpoint (this crate) ───────────────────┐
//!  │ policy: CheckpointSchedule, LiveFiles   decision: decide_resume, plan_gc │
//!  │ Writer / CheckpointStore: Parquet epochs + manifest, commit protocol     │
//!  │ knows no timely, no SQL                                                  │
//!  └──────────────────────────────────┬───────────────────────────────────────┘
//!                                     ▼
//!                object_store: memory:// · file:// · s3://
//! ```
//!
//! Þund's checkpoints: operator state as Parquet epochs plus a JSON manifest
//! over any [`object_store`] backend.
//!
//! # Role and boundary
//!
//! This crate stores Arrow [`RecordBatch`](arrow::record_batch::RecordBatch)es
//! and a manifest with a crash-safe commit protocol, and decides which epoch a
//! restarted process resumes from. It knows no timely, no differential, no SQL
//! and no DataFusion: the engine hands it batches and opaque metadata (a
//! fingerprint it computed, watermarks, offsets, counters) and gets them back.
//! The protocol is pure logic ([`decide_resume`], [`plan_gc`], [`paths`]) with
//! I/O at the edge ([`CheckpointStore`], [`Writer`]); sync callers use
//! [`BlockingCheckpointStore`]. The scheduling policy is pure logic too
//! ([`policy`]): [`CheckpointSchedule`] says whether the next epoch is full or
//! a delta, and [`LiveFiles`] which older files a delta still references and
//! when they expire.
//!
//! # Layout
//!
//! ```text
//! {state_root}/{view}/
//!   epoch=000007/
//!     operator-{op}-w{worker}.parquet   state of one operator on one worker
//!     _thund_checkpoint.json            manifest; written last = commit point
//!   epoch=000008/...
//!   _thund_latest.json                  pointer to the newest COMMITTED epoch
//!   _thund_writer.json                  the writer's lease (fencing)
//! ```
//!
//! State files are plain Parquet (zstd, Arrow schema embedded, `thund.*`
//! footer metadata): DataFusion or DuckDB can query
//! `{state_root}/{view}/epoch=*/operator-*.parquet` directly. Which files make
//! up an epoch is only ever what its manifest lists: an incremental epoch
//! references files written by earlier epochs.
//!
//! # Protocol
//!
//! * **Commit order** ([`Writer::write_epoch`]): state files (conditional
//!   create) → manifest (conditional create; the commit point) → latest
//!   pointer (overwrite). A crash between any two writes leaves an epoch
//!   without a manifest, which recovery ignores. Nothing is ever overwritten
//!   except the pointer.
//! * **Recovery** ([`CheckpointStore::load`]): the newest epoch with a valid
//!   manifest whose files all read back with the recorded sizes and row
//!   counts. A missing or corrupt epoch falls back to the previous committed
//!   one *loudly* ([`Loaded::fell_back_from`]). Epoch directories with no
//!   usable manifest when something was committed are an error
//!   ([`Error::NoCommittedEpoch`]), never a silent cold start. A fingerprint
//!   mismatch is [`Error::FingerprintMismatch`].
//! * **Fencing** ([`lease`]): one writer per view, by a lease file created
//!   conditionally; stale leases of crashed processes can be taken over.
//! * **Retention** ([`Writer::gc`]): keeps the newest N committed epochs
//!   (default 2) and every file they reference.
//!
//! # Typical use by the engine
//!
//! 1. `let mut w = store.acquire_with(view, Takeover::IfStale)?` — become the
//!    view's only writer (taking over the lease of a crashed predecessor on
//!    this host; [`Takeover::Force`] for an operator override).
//! 2. `store.load_expecting(view, fingerprint)?` — `None`: cold start;
//!    `Some(loaded)`: restore state, W, counters and offsets from
//!    `loaded.manifest`, and log `loaded.fell_back_from` if non-empty.
//! 3. Each checkpoint: `full = schedule.want_full()` (the runtime may write
//!    full anyway), `reused = live.carried(meta.watermark, full)`, then
//!    `m = w.write_epoch(w.next_epoch(), new_files, reused, meta)`, then
//!    `live.record_commit(&m, &expiries)` and `schedule.record(full)`
//!    ([`policy`]); `w.gc()` now and then.
//! 4. On shutdown: `w.release()`.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use arrow::array::{Int64Array, StringArray};
//! use arrow::record_batch::RecordBatch;
//! use thund_checkpoint::{CheckpointStore, EpochMeta, NewFile};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let store = CheckpointStore::open("memory://doc-example")?;
//! let mut writer = store.acquire("clicks").await?;
//! let state = RecordBatch::try_from_iter([
//!     ("key", Arc::new(StringArray::from(vec!["a", "b"])) as _),
//!     ("count", Arc::new(Int64Array::from(vec![3, 4])) as _),
//! ])?;
//! let mut meta = EpochMeta::new("fingerprint-of-the-view");
//! meta.watermark = Some(60_000);
//! let committed = writer
//!     .write_epoch(1, vec![NewFile::new("count", 0, vec![state])], vec![], meta)
//!     .await?;
//! assert_eq!(committed.files[0].path, "epoch=000001/operator-count-w0.parquet");
//! writer.release().await?;
//!
//! let loaded = store.load_expecting("clicks", "fingerprint-of-the-view").await?;
//! let loaded = loaded.expect("epoch 1 is committed");
//! assert_eq!((loaded.epoch(), loaded.rows("count")), (1, 2));
//! assert!(!loaded.fell_back());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
#![warn(missing_docs)]

pub mod blocking;
pub mod decision;
mod error;
pub mod lease;
pub mod manifest;
mod parquet_io;
pub mod paths;
pub mod policy;
mod store;

pub use blocking::{BlockingCheckpointStore, BlockingWriter};
pub use decision::{
    decide_resume, plan_gc, EpochListing, GcPlan, Listing, ManifestState, PointerState,
    ResumeDecision, ResumePlan, SkipReason, SkippedEpoch,
};
pub use error::{Error, Result};
pub use lease::{LeaseInfo, Takeover};
pub use manifest::{
    Counters, EpochMeta, EpochStatus, FileEntry, LatestPointer, Manifest, SourceState,
    FORMAT_VERSION,
};
pub use parquet_io::meta_keys;
pub use policy::{CheckpointSchedule, LiveFile, LiveFiles, DEFAULT_COMPACT_EVERY};
pub use store::{CheckpointStore, GcReport, Loaded, LoadedFile, NewFile, Writer, DEFAULT_RETAIN};
