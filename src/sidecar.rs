//! The sidecar: each checkpoint captures the views' state at the current
//! epoch (in the caller's thread: cheap Arc clones and a trace read), then a
//! background thread writes it as Parquet epochs through `thund-checkpoint`,
//! so a trigger's latency holds no Parquet I/O. Commits happen in order: a
//! checkpoint waits while the previous one is still queued.

use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use thund_checkpoint::{BlockingWriter, EpochMeta, NewFile};

use crate::error::{Error, Result};

/// One committed (or failed) checkpoint of one view.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointOutcome {
    /// The view.
    pub view: String,
    /// The checkpoint epoch.
    pub epoch: u64,
    /// Files written by this epoch and their total bytes, or the error.
    pub result: std::result::Result<(usize, u64), String>,
}

enum Job {
    Register(Box<BlockingWriter>),
    Write {
        view: String,
        epoch: u64,
        files: Vec<NewFile>,
        meta: Box<EpochMeta>,
    },
    Release,
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
                let mut writers: HashMap<String, BlockingWriter> = HashMap::new();
                while let Ok(job) = rx.recv() {
                    match job {
                        Job::Register(w) => {
                            writers.insert(w.view().to_string(), *w);
                        }
                        Job::Write {
                            view,
                            epoch,
                            files,
                            meta,
                        } => {
                            let result = match writers.get_mut(&view) {
                                None => Err(format!("no checkpoint writer for view `{view}`")),
                                Some(w) => {
                                    let r = w
                                        .write_epoch(epoch, files, Vec::new(), *meta)
                                        .map(|m| {
                                            let own: Vec<_> = m
                                                .files
                                                .iter()
                                                .filter(|f| f.epoch == epoch)
                                                .collect();
                                            (own.len(), own.iter().map(|f| f.bytes).sum())
                                        })
                                        .map_err(|e| e.to_string());
                                    if r.is_ok() {
                                        let _ = w.gc();
                                    }
                                    r
                                }
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
                            for (_, w) in writers.drain() {
                                let _ = w.release();
                            }
                        }
                    }
                }
                for (_, w) in writers.drain() {
                    let _ = w.release();
                }
            })
            .map_err(|e| Error::Checkpoint(format!("cannot start the sidecar thread: {e}")))?;
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
            .ok_or_else(|| Error::Checkpoint("the sidecar has stopped".into()))?;
        tx.send(job)
            .map_err(|_| Error::Checkpoint("the sidecar thread has stopped".into()))
    }

    pub fn register(&mut self, writer: BlockingWriter) -> Result<()> {
        self.send(Job::Register(Box::new(writer)))
    }

    /// Queue an epoch; returns at once unless one is already waiting.
    pub fn write(
        &mut self,
        view: &str,
        epoch: u64,
        files: Vec<NewFile>,
        meta: EpochMeta,
    ) -> Result<()> {
        self.send(Job::Write {
            view: view.to_string(),
            epoch,
            files,
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

/// A stable fingerprint (FNV-1a, 64 bits, hex) of a view's defining text.
pub(crate) fn fingerprint(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fnv1a64:{h:016x}")
}
