//! Files in and out: CSV and Parquet inputs for `thund run`, read as a
//! stream of chunks, and the output sinks (files, and [`db`]: keyed,
//! exactly-once database tables).
//!
//! An [`InputReader`] gives the rows of a file a chunk at a time, typed by
//! the source's declared schema or by inference (CSV: see the rule in
//! [`InputReader::open`]); a row that does not fit its types is not in the
//! chunk's batch but in its [`Chunk::refused`] list, with its line, column,
//! value and reason, ready for [`crate::Engine::push_invalid`]. Nothing but
//! the current chunk is held in memory, and a resume starts at a position
//! ([`InputPosition`]) without reading what comes before it (CSV: its byte
//! offset; Parquet: its row group).

mod csv_input;
pub mod db;
mod parquet_input;
mod sink;
mod typing;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};

pub use sink::Sink;
pub use typing::{type_name, Refused};

use crate::error::{Error, Result};
use crate::window::EventTimeDomain;

/// Where a declared column `name` is among a file's column `names`: the
/// column of that name, or else the one column whose name differs only in
/// ASCII case, when no other declared column could take it (`dateTime` in a
/// header is the `datetime` that an unquoted DDL name declares).
pub(crate) fn find_column(
    names: &[&str],
    name: &str,
    declared: &arrow::datatypes::SchemaRef,
) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| *n == name) {
        return Some(i);
    }
    let like = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let mut found = (names.iter().enumerate()).filter(|(_, n)| like(n, name));
    let (i, n) = found.next()?;
    let unique = found.next().is_none()
        && declared.index_of(n).is_err()
        && (declared.fields().iter())
            .filter(|f| like(f.name(), name))
            .count()
            == 1;
    unique.then_some(i)
}

pub(crate) fn input_err(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Input {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// File formats, chosen by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Comma-separated values with a header line.
    Csv,
    /// Apache Parquet.
    Parquet,
}

/// The format of `path` from its extension.
pub fn format_of(path: &Path) -> Option<FileFormat> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "csv" => Some(FileFormat::Csv),
        "parquet" | "pq" => Some(FileFormat::Parquet),
        _ => None,
    }
}

/// Rows of an input read by one [`InputReader::next_chunk`].
#[derive(Debug)]
pub struct Chunk {
    /// The rows whose every cell has its column's type, in the source's
    /// schema (`None` when there are none).
    pub batch: Option<RecordBatch>,
    /// The rows refused, in file order.
    pub refused: Vec<Refused>,
    /// Rows of the file consumed: taken and refused. Zero at the end.
    pub rows: u64,
}

/// Where a reader is in its file: after `rows` data rows, and (CSV) at this
/// byte offset and line, so a resume can seek there directly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputPosition {
    /// Data rows consumed.
    pub rows: u64,
    /// Byte offset of the next row (CSV).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte: Option<u64>,
    /// Line of the next row, 1-based (CSV).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

/// What identifies an input file across runs: its path, length and a hash
/// of its first kilobyte. A resume compares them with what the checkpoint
/// read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputIdentity {
    /// The canonical path.
    pub path: String,
    /// Length in bytes when it was opened.
    pub len: u64,
    /// FNV-1a 64 of the first 1 024 bytes, in hex.
    pub head: String,
}

impl InputIdentity {
    /// The identity of the file at `path`, now.
    pub fn of(path: &Path) -> Result<InputIdentity> {
        let mut f = File::open(path).map_err(|e| input_err(path, e))?;
        let len = f.metadata().map_err(|e| input_err(path, e))?.len();
        let mut head = Vec::with_capacity(1024);
        f.by_ref()
            .take(1024)
            .read_to_end(&mut head)
            .map_err(|e| input_err(path, e))?;
        Ok(InputIdentity {
            path: canonical(path).display().to_string(),
            len,
            head: format!("{:016x}", fnv1a(&head)),
        })
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `path` made absolute with symlinks resolved; for a file that does not
/// exist yet, its directory's canonical path joined with its name.
pub fn canonical(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let name = path.file_name().map(|n| n.to_os_string());
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match (std::fs::canonicalize(&dir), name) {
        (Ok(d), Some(n)) => d.join(n),
        _ => path.to_path_buf(),
    }
}

enum Inner {
    Csv(Box<csv_input::CsvInput>),
    Parquet(Box<parquet_input::ParquetInput>),
}

/// A CSV or Parquet input read a chunk at a time.
pub struct InputReader {
    path: PathBuf,
    inner: Inner,
    identity: InputIdentity,
    domain: EventTimeDomain,
}

impl InputReader {
    /// Open an input by its extension. `event_time` is the source's
    /// event-time column. With `declared`, that schema wins: the file must
    /// have exactly its columns (in any order) and each cell is read as its
    /// declared type. Otherwise a Parquet file's own schema is used, and a
    /// CSV file's types are inferred from the whole file, read once as a
    /// stream: a column is `BIGINT` (or `DOUBLE`) when at least 99% of its
    /// non-empty cells are numbers, `BOOLEAN` when all are `true`/`false`,
    /// `TIMESTAMP` (or `DATE`) when at least 99% are timestamps, else text;
    /// the cells that do not parse refuse their rows. [`Self::notes`] says
    /// when that happened, and when a column mostly of numbers was read as
    /// text.
    pub fn open(path: &Path, event_time: &str, declared: Option<&SchemaRef>) -> Result<Self> {
        // an input is read more than once (its identity, its header and
        // types, then its rows; a resume seeks to an offset in it): a pipe's
        // second read would wait for a writer for ever
        let meta = std::fs::metadata(path).map_err(|e| input_err(path, e))?;
        if meta.is_dir() {
            return Err(input_err(path, "is a directory, not a file"));
        }
        if !meta.is_file() {
            return Err(input_err(
                path,
                "not a regular file (a named pipe, socket or device): an input is read more \
                 than once (its header and types, then its rows) and a resume seeks into it; \
                 write the stream to a file first",
            ));
        }
        let identity = InputIdentity::of(path)?;
        let inner = match format_of(path) {
            Some(FileFormat::Csv) => Inner::Csv(Box::new(csv_input::CsvInput::open(
                path, event_time, declared,
            )?)),
            Some(FileFormat::Parquet) => Inner::Parquet(Box::new(
                parquet_input::ParquetInput::open(path, event_time, declared)?,
            )),
            None => {
                return Err(input_err(
                    path,
                    "unknown format: the file name must end in .csv or .parquet",
                ))
            }
        };
        Ok(InputReader {
            path: path.to_path_buf(),
            inner,
            identity,
            domain: EventTimeDomain::default(),
        })
    }

    /// The file, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema of the batches this reader gives.
    pub fn schema(&self) -> &SchemaRef {
        match &self.inner {
            Inner::Csv(c) => c.schema(),
            Inner::Parquet(p) => p.schema(),
        }
    }

    /// What inference noticed that a reader should be told (CSV).
    pub fn notes(&self) -> &[String] {
        match &self.inner {
            Inner::Csv(c) => c.notes(),
            Inner::Parquet(_) => &[],
        }
    }

    /// The file's identity when it was opened.
    pub fn identity(&self) -> &InputIdentity {
        &self.identity
    }

    /// Where the reader is.
    pub fn position(&self) -> InputPosition {
        match &self.inner {
            Inner::Csv(c) => c.position(),
            Inner::Parquet(p) => p.position(),
        }
    }

    /// Continue from `to`, without reading what comes before it when the
    /// position says where that is (a CSV byte offset, Parquet row groups).
    pub fn seek(&mut self, to: &InputPosition) -> Result<()> {
        match &mut self.inner {
            Inner::Csv(c) => c.seek(to),
            Inner::Parquet(p) => p.seek(to),
        }
    }

    /// Refuse, at their line, the rows whose event time is outside `domain`
    /// (see [`crate::Engine::event_time_domain`]); by default every time is in.
    pub fn set_event_time_domain(&mut self, domain: EventTimeDomain) {
        self.domain = domain;
    }

    /// The next `n` rows of the file (fewer at its end; `rows == 0` when done).
    pub fn next_chunk(&mut self, n: usize) -> Result<Chunk> {
        match &mut self.inner {
            Inner::Csv(c) => c.next_chunk(n.max(1), &self.domain),
            Inner::Parquet(p) => p.next_chunk(n.max(1), &self.domain),
        }
    }
}
