//! What `thund run` stores with each checkpoint (the manifest's `extra`)
//! and what a resume checks against it before anything is touched: the
//! inputs are the files the checkpoint read (same first kilobyte, not
//! shorter), the output is the one it committed (same path, at least the
//! committed length), and a finished run is not run again.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{CliError, Result};
use crate::io::{canonical, InputIdentity, InputPosition};

/// One input as a checkpoint saw it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct InputRecord {
    /// The file when the run opened it.
    #[serde(flatten)]
    pub identity: InputIdentity,
    /// Where the next trigger reads from.
    pub position: InputPosition,
}

/// The output sink a checkpoint committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum SinkRecord {
    /// The run had no `--output`.
    None,
    /// An exactly-once CSV file, canonical path, with its committed length.
    Csv {
        /// Canonical path.
        path: String,
        /// Bytes committed.
        len: u64,
    },
}

/// The `extra` of a `thund run` checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(super) struct RunRecord {
    /// Committed length of the output file (0 without one); kept for
    /// checkpoints written before `sink`.
    #[serde(default)]
    pub output_len: u64,
    /// The sink; absent in checkpoints of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<SinkRecord>,
    /// Each input, by source.
    #[serde(default)]
    pub inputs: BTreeMap<String, InputRecord>,
    /// The end of stream was reached and committed.
    #[serde(default)]
    pub finished: bool,
}

impl RunRecord {
    /// The record in a recovery's `extra` (`null` or a foreign value: empty).
    pub fn from_extra(extra: &serde_json::Value) -> RunRecord {
        serde_json::from_value(extra.clone()).unwrap_or_default()
    }

    pub fn to_extra(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

const START_OVER: &str =
    "or start over with a new --state-root (or after deleting this view's directory in it)";

/// Check an input against what the checkpoint at `epoch` read. `Ok(Some(note))`
/// when it moved but is the same file.
pub(super) fn check_input(
    source: &str,
    path: &Path,
    now: &InputIdentity,
    then: &InputRecord,
    epoch: u64,
) -> Result<Option<String>> {
    let was = &then.identity;
    if now.head != was.head {
        return Err(CliError::Refused(format!(
            "input {} for source `{source}` is not the file the checkpoint at epoch {epoch} read ({}): its first kilobyte differs, so the checkpoint's offset ({} rows) means nothing in it. Resume with the same input, {START_OVER}.",
            path.display(),
            was.path,
            then.position.rows
        )));
    }
    if now.len < was.len {
        return Err(CliError::Refused(format!(
            "input {} for source `{source}` is shorter ({} bytes) than when the checkpoint at epoch {epoch} read it ({} bytes): rows the checkpoint counted may be gone. Resume with the complete input, {START_OVER}.",
            path.display(),
            now.len,
            was.len
        )));
    }
    if now.path != was.path {
        return Ok(Some(format!(
            "input {} for source `{source}` was at {} when the checkpoint read it; its first kilobyte and length match, so it is taken to be the same file",
            path.display(),
            was.path
        )));
    }
    Ok(None)
}

/// Check the `--output` of a resume against the sink the checkpoint at
/// `epoch` committed; the committed length to truncate the file back to.
pub(super) fn check_sink(output: Option<&Path>, committed: &RunRecord, epoch: u64) -> Result<u64> {
    let Some(sink) = &committed.sink else {
        // a checkpoint of an older version: its committed length only
        return Ok(committed.output_len);
    };
    match (sink, output) {
        (SinkRecord::None, None) => Ok(0),
        (SinkRecord::None, Some(p)) => Err(CliError::Refused(format!(
            "the checkpoint at epoch {epoch} was written by a run without --output: the rows its triggers emitted were not written anywhere, so resuming cannot make {} complete. Resume without --output, {START_OVER} to write the whole output.",
            p.display()
        ))),
        (SinkRecord::Csv { path, len }, None) => Err(CliError::Refused(format!(
            "the checkpoint at epoch {epoch} committed {len} bytes of --output {path}: resume with --output {path}, or the rows of the next triggers would be missing from it."
        ))),
        (SinkRecord::Csv { path, len }, Some(p)) => {
            let here = canonical(p).display().to_string();
            if here != *path {
                return Err(CliError::Refused(format!(
                    "--output {} is not the output the checkpoint at epoch {epoch} committed ({len} bytes of {path}): resume with --output {path} (copy the file there first if it moved), {START_OVER}.",
                    p.display()
                )));
            }
            let have = match std::fs::metadata(p) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && *len > 0 => {
                    return Err(CliError::Refused(format!(
                        "--output {} is missing, but the checkpoint at epoch {epoch} committed {len} bytes of it: restore the file, {START_OVER}.",
                        p.display()
                    )))
                }
                Err(_) => 0,
            };
            if have < *len {
                return Err(CliError::Refused(format!(
                    "--output {} holds {have} bytes, but the checkpoint at epoch {epoch} committed {len}: the file was changed or replaced, and resuming would leave rows out of it. Restore the file, {START_OVER}.",
                    p.display()
                )));
            }
            Ok(*len)
        }
    }
}

/// The lines of a JSON-lines report that belong to epochs up to `epoch`
/// (a resume drops the lines of triggers whose checkpoint did not commit,
/// and any torn last line).
pub(super) fn committed_report_lines(text: &str, epoch: u64) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let keep = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("epoch").and_then(|e| e.as_u64()))
            .is_some_and(|e| e <= epoch);
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_keeps_committed_epochs_only() {
        let text = "{\"epoch\":1}\n{\"epoch\":2}\n{\"epoch\":3}\n{\"epo";
        assert_eq!(
            committed_report_lines(text, 2),
            "{\"epoch\":1}\n{\"epoch\":2}\n"
        );
        assert_eq!(committed_report_lines(text, 0), "");
    }

    #[test]
    fn records_round_trip_and_old_extras_read_as_legacy() {
        let r = RunRecord {
            output_len: 7,
            sink: Some(SinkRecord::None),
            inputs: BTreeMap::new(),
            finished: true,
        };
        let back = RunRecord::from_extra(&r.to_extra());
        assert_eq!(back.sink, Some(SinkRecord::None));
        assert!(back.finished);
        let old = RunRecord::from_extra(&serde_json::json!({"output_len": 12}));
        assert_eq!((old.output_len, &old.sink), (12, &None));
        assert_eq!(check_sink(None, &old, 3).expect("legacy"), 12);
    }
}
