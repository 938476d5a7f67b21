//! The sidecar: each checkpoint captures the views' state at the current
//! epoch (in the caller's thread: Arc clones, the changed groups of a delta
//! epoch, and for a full epoch only the workers' trace batches and the key
//! dictionary's ids), then a background thread reads and encodes what a full
//! epoch captured and writes it as Parquet epochs through `thund-checkpoint`,
//! so a trigger's latency holds no Parquet I/O and no full-state read. Commits happen in order: a
//! checkpoint waits while the previous one is still queued.
//!
//! Checkpoints are incremental: an epoch writes only what changed since the
//! previous one, and its manifest references the older files that still hold
//! live state — a file is dropped once W passes the last window end it holds.
//! A full checkpoint (no references) is written after every start and every
//! `compact_every` epochs, which folds the chain.

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::sync::Arc;

use thund_checkpoint::policy::LiveFiles;
use thund_checkpoint::{BlockingWriter, EpochMeta, FileEntry, NewFile};

use super::Export;
use crate::error::{Error, Result};
use crate::time::EventTime;

/// What one committed checkpoint cost.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointStats {
    /// Whether it was a full checkpoint (no references to older files).
    pub full: bool,
    /// Files this epoch wrote.
    pub files_written: usize,
    /// Bytes this epoch wrote.
    pub bytes_written: u64,
    /// Older files its manifest references.
    pub files_referenced: usize,
    /// Rows in all files of the manifest (the whole state).
    pub state_rows: u64,
    /// Time the sidecar spent writing and committing it.
    pub write_time: Duration,
}

/// One committed (or failed) checkpoint of one view.
#[derive(Clone, Debug)]
pub struct CheckpointOutcome {
    /// The view.
    pub view: String,
    /// The checkpoint epoch.
    pub epoch: u64,
    /// What it cost, or the store's error.
    pub result: std::result::Result<CheckpointStats, Arc<thund_checkpoint::Error>>,
}

enum Job {
    Register(Box<BlockingWriter>),
    Write {
        view: String,
        epoch: u64,
        export: Export,
        meta: Box<EpochMeta>,
    },
    Release,
}

struct ViewWriter {
    writer: BlockingWriter,
    /// Files of the last committed epoch, with their expiry.
    live: LiveFiles,
}

fn write_one(
    v: &mut ViewWriter,
    epoch: u64,
    export: Export,
    meta: EpochMeta,
) -> std::result::Result<CheckpointStats, thund_checkpoint::Error> {
    let started = Instant::now();
    let mut export = export;
    if let Some(deferred) = export.deferred.take() {
        let more = deferred().map_err(|e| thund_checkpoint::Error::Capture {
            view: v.writer.view().to_string(),
            epoch,
            reason: e.to_string(),
        })?;
        export.files.extend(more);
    }
    let reused = v.live.carried(meta.watermark, export.full);
    let expiries: Vec<(String, usize, EventTime)> = export
        .files
        .iter()
        .map(|f| (f.file.operator.clone(), f.file.worker, f.expiry))
        .collect();
    let new: Vec<NewFile> = export.files.into_iter().map(|f| f.file).collect();
    let epoch = epoch.max(v.writer.next_epoch());
    let m = v.writer.write_epoch(epoch, new, reused, meta)?;
    v.live.record_commit(&m, &expiries);
    let own: Vec<&FileEntry> = m.files.iter().filter(|f| f.epoch == m.epoch).collect();
    let stats = CheckpointStats {
        full: export.full,
        files_written: own.len(),
        bytes_written: own.iter().map(|f| f.bytes).sum(),
        files_referenced: m.files.len() - own.len(),
        state_rows: m.files.iter().map(|f| f.rows).sum(),
        write_time: started.elapsed(),
    };
    let _ = v.writer.gc();
    Ok(stats)
}

/// The background writer.
pub(crate) struct Sidecar {
    tx: Option<SyncSender<Job>>,
    done: Receiver<CheckpointOutcome>,
    thread: Option<JoinHandle<()>>,
    queued: usize,
}

impl Sidecar {
    pub fn start() -> Result<Self> {
        // capacity 1: one epoch may wait while another is written; a third waits in `send`
        let (tx, rx) = sync_channel::<Job>(1);
        let (done_tx, done) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("thund-sidecar".into())
            .spawn(move || {
                let mut writers: HashMap<String, ViewWriter> = HashMap::new();
                while let Ok(job) = rx.recv() {
                    match job {
                        Job::Register(w) => {
                            writers.insert(
                                w.view().to_string(),
                                ViewWriter {
                                    writer: *w,
                                    live: LiveFiles::new(),
                                },
                            );
                        }
                        Job::Write {
                            view,
                            epoch,
                            export,
                            meta,
                        } => {
                            let result = match writers.get_mut(&view) {
                                // register() runs before a view's first write; say so if not
                                None => Err(Arc::new(thund_checkpoint::Error::InvalidInput {
                                    view: view.clone(),
                                    epoch,
                                    reason: "no checkpoint writer is registered for this view"
                                        .into(),
                                })),
                                Some(v) => write_one(v, epoch, export, *meta).map_err(Arc::new),
                            };
                            if done_tx
                                .send(CheckpointOutcome {
                                    view,
                                    epoch,
                                    result,
                                })
                                .is_err()
                            {
                                return;
                            }
                        }
                        Job::Release => {
                            for (_, v) in writers.drain() {
                                let _ = v.writer.release();
                            }
                        }
                    }
                }
                for (_, v) in writers.drain() {
                    let _ = v.writer.release();
                }
            })
            .map_err(|e| Error::Sidecar(format!("thread could not start: {e}")))?;
        Ok(Sidecar {
            tx: Some(tx),
            done,
            thread: Some(thread),
            queued: 0,
        })
    }

    fn send(&mut self, job: Job) -> Result<()> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| Error::Sidecar("has stopped".into()))?;
        tx.send(job)
            .map_err(|_| Error::Sidecar("thread has stopped".into()))
    }

    pub fn register(&mut self, writer: BlockingWriter) -> Result<()> {
        self.send(Job::Register(Box::new(writer)))
    }

    /// Queue an epoch; returns at once unless one is already waiting.
    pub fn write(&mut self, view: &str, epoch: u64, export: Export, meta: EpochMeta) -> Result<()> {
        self.send(Job::Write {
            view: view.to_string(),
            epoch,
            export,
            meta: Box::new(meta),
        })?;
        self.queued += 1;
        Ok(())
    }

    /// Outcomes that arrived so far, without waiting.
    pub fn poll(&mut self) -> Vec<CheckpointOutcome> {
        let out: Vec<_> = self.done.try_iter().collect();
        self.queued -= out.len().min(self.queued);
        out
    }

    /// Wait until every queued epoch is committed or failed.
    pub fn sync(&mut self) -> Vec<CheckpointOutcome> {
        let mut out = Vec::new();
        while self.queued > 0 {
            match self.done.recv() {
                Ok(o) => {
                    out.push(o);
                    self.queued -= 1;
                }
                Err(_) => break,
            }
        }
        out
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // finish what is queued, release the leases, stop
        let _ = self.send(Job::Release);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
