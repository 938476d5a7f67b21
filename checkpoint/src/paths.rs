//! The one path builder: every object name the protocol uses is made (and
//! parsed back) here.
//!
//! ```text
//! {state_root}/{view}/epoch=000007/operator-{op}-w{worker}.parquet
//! {state_root}/{view}/epoch=000007/_thund_checkpoint.json
//! {state_root}/{view}/_thund_latest.json
//! {state_root}/{view}/_thund_writer.json
//! ```
//!
//! Paths stored in manifests ([`crate::FileEntry::path`]) are *relative to the
//! view directory*, e.g. `epoch=000007/operator-count-w0.parquet`, so a state
//! root can be moved or copied as a whole.

use object_store::path::Path;

use crate::error::{Error, Result};

/// File name of an epoch's manifest (the commit point).
pub const MANIFEST_FILE: &str = "_thund_checkpoint.json";
/// File name of the pointer to the newest committed epoch.
pub const LATEST_FILE: &str = "_thund_latest.json";
/// File name of the writer lease.
pub const LEASE_FILE: &str = "_thund_writer.json";
/// Prefix of epoch directory names.
pub const EPOCH_DIR_PREFIX: &str = "epoch=";

const MAX_NAME_LEN: usize = 200;

/// Name of an epoch's directory: `epoch=` and at least six digits.
pub fn epoch_dir_name(epoch: u64) -> String {
    format!("{EPOCH_DIR_PREFIX}{epoch:06}")
}

/// Parses an epoch directory name; only the canonical form
/// [`epoch_dir_name`] produces is accepted (so `epoch=7` and `epoch=000007`
/// can never both name epoch 7).
pub fn parse_epoch_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(EPOCH_DIR_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let epoch: u64 = digits.parse().ok()?;
    (epoch_dir_name(epoch) == name).then_some(epoch)
}

/// File name of one operator's state written by one worker.
pub fn state_file_name(operator: &str, worker: usize) -> String {
    format!("operator-{operator}-w{worker}.parquet")
}

/// Parses a state file name back into `(operator, worker)`.
pub fn parse_state_file_name(name: &str) -> Option<(String, usize)> {
    let stem = name.strip_prefix("operator-")?.strip_suffix(".parquet")?;
    let (op, worker) = stem.rsplit_once("-w")?;
    if worker.is_empty() || !worker.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let worker: usize = worker.parse().ok()?;
    if validate_name("operator", op).is_err() || state_file_name(op, worker) != name {
        return None;
    }
    Some((op.to_string(), worker))
}

/// The path of a state file relative to its view directory.
pub fn relative_state_path(epoch: u64, operator: &str, worker: usize) -> String {
    format!(
        "{}/{}",
        epoch_dir_name(epoch),
        state_file_name(operator, worker)
    )
}

/// A parsed relative state-file path (as stored in a manifest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePath {
    /// Epoch directory it lives in.
    pub epoch: u64,
    /// Operator name.
    pub operator: String,
    /// Worker index.
    pub worker: usize,
}

/// Parses a relative state-file path `epoch=NNNNNN/operator-{op}-w{n}.parquet`.
/// Anything else (absolute paths, `..`, extra directories) is refused: manifest
/// contents are user-controlled data.
pub fn parse_relative_state_path(rel: &str) -> Option<StatePath> {
    let (dir, file) = rel.split_once('/')?;
    let epoch = parse_epoch_dir(dir)?;
    let (operator, worker) = parse_state_file_name(file)?;
    Some(StatePath {
        epoch,
        operator,
        worker,
    })
}

/// Checks that a view or operator name is a safe single path component:
/// 1–200 characters of `[A-Za-z0-9_.-]`, not starting with `.` or `_`
/// (reserved for protocol files).
pub fn validate_name(kind: &'static str, name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("must be at most 200 characters")
    } else if name.starts_with('.') || name.starts_with('_') {
        Some("must not start with `.` or `_`")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Some("may only contain ASCII letters, digits, `_`, `-` and `.`")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidName {
            kind,
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Builds object-store paths under one state root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    root: Path,
}

impl Layout {
    /// A layout rooted at `root` (an object-store path; empty = store root).
    pub fn new(root: Path) -> Self {
        Self { root }
    }

    /// The state root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `{root}/{view}`.
    pub fn view_dir(&self, view: &str) -> Path {
        self.root.clone().join(view)
    }

    /// `{root}/{view}/epoch=NNNNNN`.
    pub fn epoch_dir(&self, view: &str, epoch: u64) -> Path {
        self.view_dir(view).join(epoch_dir_name(epoch))
    }

    /// `{root}/{view}/epoch=NNNNNN/operator-{op}-w{worker}.parquet`.
    pub fn state_file(&self, view: &str, epoch: u64, operator: &str, worker: usize) -> Path {
        self.epoch_dir(view, epoch)
            .join(state_file_name(operator, worker))
    }

    /// `{root}/{view}/epoch=NNNNNN/_thund_checkpoint.json`.
    pub fn manifest(&self, view: &str, epoch: u64) -> Path {
        self.epoch_dir(view, epoch).join(MANIFEST_FILE)
    }

    /// `{root}/{view}/_thund_latest.json`.
    pub fn latest(&self, view: &str) -> Path {
        self.view_dir(view).join(LATEST_FILE)
    }

    /// `{root}/{view}/_thund_writer.json`.
    pub fn lease(&self, view: &str) -> Path {
        self.view_dir(view).join(LEASE_FILE)
    }

    /// Resolves a path relative to the view directory (as stored in a
    /// manifest) to an object path; `None` if it is not a valid state path.
    pub fn resolve(&self, view: &str, relative: &str) -> Option<Path> {
        let p = parse_relative_state_path(relative)?;
        Some(self.state_file(view, p.epoch, &p.operator, p.worker))
    }

    /// Resolves any relative path made of valid parts (used for listing
    /// results and garbage collection).
    pub(crate) fn resolve_any(&self, view: &str, relative: &str) -> Path {
        relative
            .split('/')
            .fold(self.view_dir(view), |p, part| p.join(part))
    }

    /// The path of `object` relative to the view directory, if it is inside it.
    pub fn relative_to_view(&self, view: &str, object: &Path) -> Option<String> {
        let parts: Vec<String> = object
            .prefix_match(&self.view_dir(view))?
            .map(|p| p.as_ref().to_string())
            .collect();
        (!parts.is_empty()).then(|| parts.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_dirs_are_canonical() {
        assert_eq!(epoch_dir_name(7), "epoch=000007");
        assert_eq!(epoch_dir_name(1234567), "epoch=1234567");
        assert_eq!(parse_epoch_dir("epoch=000007"), Some(7));
        assert_eq!(parse_epoch_dir("epoch=1234567"), Some(1234567));
        assert_eq!(parse_epoch_dir("epoch=7"), None);
        assert_eq!(parse_epoch_dir("epoch=0000007"), None);
        assert_eq!(parse_epoch_dir("epoch=-00007"), None);
        assert_eq!(parse_epoch_dir("epoch="), None);
        assert_eq!(parse_epoch_dir("_thund_latest.json"), None);
    }

    #[test]
    fn state_files_round_trip() {
        assert_eq!(
            parse_state_file_name("operator-count-w0.parquet"),
            Some(("count".into(), 0))
        );
        assert_eq!(
            parse_state_file_name(&state_file_name("a-w1", 12)),
            Some(("a-w1".into(), 12))
        );
        assert_eq!(parse_state_file_name("operator--w0.parquet"), None);
        assert_eq!(parse_state_file_name("operator-x-w.parquet"), None);
        assert_eq!(parse_state_file_name("operator-x-w01.parquet"), None);
        assert_eq!(
            parse_relative_state_path("epoch=000003/operator-count-w1.parquet"),
            Some(StatePath {
                epoch: 3,
                operator: "count".into(),
                worker: 1
            })
        );
        assert_eq!(
            parse_relative_state_path("../epoch=000003/operator-count-w1.parquet"),
            None
        );
        assert_eq!(
            parse_relative_state_path("epoch=000003/x/operator-count-w1.parquet"),
            None
        );
    }

    #[test]
    fn layout_paths() {
        let l = Layout::new(Path::from("root/dir"));
        assert_eq!(
            l.state_file("v", 7, "count", 2).as_ref(),
            "root/dir/v/epoch=000007/operator-count-w2.parquet"
        );
        assert_eq!(
            l.manifest("v", 7).as_ref(),
            "root/dir/v/epoch=000007/_thund_checkpoint.json"
        );
        assert_eq!(l.latest("v").as_ref(), "root/dir/v/_thund_latest.json");
        assert_eq!(l.lease("v").as_ref(), "root/dir/v/_thund_writer.json");
        assert_eq!(
            l.relative_to_view("v", &l.manifest("v", 7)).as_deref(),
            Some("epoch=000007/_thund_checkpoint.json")
        );
        assert_eq!(l.relative_to_view("v", &l.view_dir("w")), None);
        let root = Layout::new(Path::default());
        assert_eq!(root.latest("v").as_ref(), "v/_thund_latest.json");
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_name("view", "clicks_per_minute-v2.1").is_ok());
        for bad in ["", "_x", ".x", "a/b", "a b", "ü", &"x".repeat(201)] {
            assert!(validate_name("view", bad).is_err(), "{bad:?}");
        }
    }
}
