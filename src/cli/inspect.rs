//! `thund inspect` (a state root's views, epochs, files and writer lease)
//! and `thund explain` (a view's plan).
//!
//! `inspect` only reads: a state root that does not exist is an error, and
//! nothing is created. Each committed epoch's files are checked (present,
//! the recorded size, readable Parquet with the recorded row count); an
//! epoch that fails is shown as BROKEN with the reason.

use std::collections::BTreeMap;

use object_store::ObjectStoreExt;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use thund_checkpoint::decision::{ManifestState, PointerState, ResumeDecision};
use thund_checkpoint::{BlockingCheckpointStore, FileEntry, LeaseInfo};

use super::run::{open_inputs, parse_inputs};
use super::{CliError, ExplainArgs, InspectArgs, Result};
use crate::error::Error;
use crate::time::display;
use crate::Engine;

/// The local directory of a `file://` URL (percent-decoded).
fn local_dir(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    Some(std::path::PathBuf::from(
        String::from_utf8_lossy(&out).into_owned(),
    ))
}

/// Why a file of an epoch cannot be used, if it cannot.
fn check_file(
    rt: &tokio::runtime::Runtime,
    store: &BlockingCheckpointStore,
    view: &str,
    f: &FileEntry,
) -> Option<String> {
    let inner = store.inner();
    let Some(path) = inner.layout().resolve(view, &f.path) else {
        return Some(format!("`{}` is not a state file path", f.path));
    };
    let os = inner.object_store();
    let bytes = match rt.block_on(async { os.get(&path).await?.bytes().await }) {
        Ok(b) => b,
        Err(object_store::Error::NotFound { .. }) => {
            return Some(format!("file `{}` is missing", f.path))
        }
        Err(e) => return Some(format!("file `{}` cannot be read: {e}", f.path)),
    };
    if bytes.len() as u64 != f.bytes {
        return Some(format!(
            "file `{}` has {} bytes, the manifest says {}",
            f.path,
            bytes.len(),
            f.bytes
        ));
    }
    let reader = match ParquetRecordBatchReaderBuilder::try_new(bytes).and_then(|b| b.build()) {
        Ok(r) => r,
        Err(e) => return Some(format!("file `{}` is not readable Parquet: {e}", f.path)),
    };
    let mut rows = 0u64;
    for b in reader {
        match b {
            Ok(b) => rows += b.num_rows() as u64,
            Err(e) => return Some(format!("file `{}` is not readable Parquet: {e}", f.path)),
        }
    }
    if rows != f.rows {
        return Some(format!(
            "file `{}` holds {rows} rows, the manifest says {}",
            f.path, f.rows
        ));
    }
    None
}

fn lease_text(lease: Option<std::result::Result<LeaseInfo, String>>) -> String {
    match lease {
        None => "free".to_string(),
        Some(Err(r)) => format!("UNREADABLE lease file ({r}); `thund run --takeover` replaces it"),
        Some(Ok(l)) => {
            let state = if l.is_stale() {
                "its process is gone: the next run takes it over"
            } else {
                "if that process is gone (another host, a replaced container), `thund run --takeover` takes it over"
            };
            format!(
                "held by pid {} on host `{}` since {}; {state}",
                l.pid,
                l.hostname,
                display(Some(l.acquired_at_ms))
            )
        }
    }
}

pub(super) fn inspect(a: InspectArgs) -> Result<()> {
    if super::in_memory(&a.url) {
        return Err(CliError::Refused(format!(
            "state root {}: a memory:// state root lives only inside the process that made it; \
             nothing of it is here to inspect",
            a.url
        )));
    }
    if let Some(dir) = local_dir(&a.url) {
        if !dir.is_dir() {
            return Err(CliError::Refused(format!(
                "state root {}: {} {}; nothing to inspect (inspect creates nothing)",
                a.url,
                dir.display(),
                if dir.exists() {
                    "is not a directory"
                } else {
                    "does not exist"
                }
            )));
        }
    }
    let ck = |e: thund_checkpoint::Error| Error::checkpoint(format!("state root {}", a.url), e);
    let store = BlockingCheckpointStore::open(&a.url).map_err(ck)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let views = store.views().map_err(ck)?;
    if views.is_empty() {
        outln!("{}: no views", a.url)?;
    }
    for v in views {
        let listing = store.list(&v).map_err(ck)?;
        let latest = match &listing.latest {
            PointerState::Points(e) => format!("epoch {e}"),
            PointerState::Missing => "missing".into(),
            PointerState::Unreadable(r) => format!("UNREADABLE ({r})"),
        };
        outln!("view {v}: latest pointer {latest}")?;
        let lease = store.lease_holder(&v).map_err(ck)?;
        outln!("  writer lease: {}", lease_text(lease))?;
        let mut checked: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (epoch, el) in &listing.epochs {
            match &el.manifest {
                ManifestState::Missing => outln!("  epoch {epoch}: not committed (no manifest)")?,
                ManifestState::Unreadable(r) => {
                    outln!("  epoch {epoch}: BROKEN: unreadable manifest: {r}")?
                }
                ManifestState::Valid(m) => {
                    let mut broken = listing.check_files(m).err().map(|r| r.to_string());
                    if broken.is_none() {
                        for f in &m.files {
                            let why = checked
                                .entry(f.path.clone())
                                .or_insert_with(|| check_file(&rt, &store, &v, f))
                                .clone();
                            if why.is_some() {
                                broken = why;
                                break;
                            }
                        }
                    }
                    let rows: u64 = m.files.iter().map(|f| f.rows).sum();
                    let bytes: u64 = m.files.iter().map(|f| f.bytes).sum();
                    let offsets: Vec<String> = m
                        .sources
                        .iter()
                        .filter_map(|s| s.offset.map(|o| format!("{}={o}", s.name)))
                        .collect();
                    let finished = m.extra.get("finished").and_then(|f| f.as_bool()) == Some(true);
                    outln!(
                        "  epoch {epoch}: {}, W {}, {} files, {rows} rows, {bytes} bytes, late {}, windows closed {}{}{}",
                        match &broken {
                            Some(r) => format!("BROKEN ({r})"),
                            None => "COMMITTED".to_string(),
                        },
                        display(m.watermark),
                        m.files.len(),
                        m.counters.late_rows_dropped,
                        m.counters.windows_closed,
                        if offsets.is_empty() {
                            String::new()
                        } else {
                            format!(", offsets {}", offsets.join(" "))
                        },
                        if finished { ", end of stream" } else { "" }
                    )?;
                    for f in &m.files {
                        outln!(
                            "    {} (operator {}, worker {}, {} rows, {} bytes, written by epoch {})",
                            f.path, f.operator, f.worker, f.rows, f.bytes, f.epoch
                        )?;
                    }
                }
            }
        }
        let resume = match store.decide(&v).map_err(ck)? {
            ResumeDecision::ColdStart { .. } => "a run starts cold (nothing committed)".to_string(),
            ResumeDecision::Resume(p) => format!(
                "a run resumes from epoch {}{}",
                p.epoch,
                if p.fell_back_from.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", falling back past {}",
                        p.fell_back_from
                            .iter()
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                }
            ),
            ResumeDecision::Refuse { reason, .. } => format!("a run is refused: {reason}"),
        };
        outln!("  {resume}")?;
    }
    Ok(())
}

pub(super) fn explain(a: ExplainArgs) -> Result<()> {
    let mut engine = Engine::builder().build()?;
    for (i, mut spec) in a.view.specs(true)?.into_iter().enumerate() {
        let inputs = parse_inputs(&spec, &a.inputs)?;
        open_inputs(&mut spec, &inputs, "explain")?;
        let view = spec.name.clone();
        a.view.check(&engine, &view)?;
        engine.create_view(spec)?;
        if i > 0 {
            outln!()?;
        }
        out!("{}", engine.explain(&view)?)?;
    }
    Ok(())
}
