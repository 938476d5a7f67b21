//! CSV inputs, read as a stream of chunks: a header line, then one record
//! per row. Cells are read as text and cast to their column's type (see
//! [`super::typing`]); a row whose cell does not parse, whose field count
//! differs from the header's, or that is not UTF-8 is refused with its line.
//!
//! # Column types
//!
//! A `schema = "…"` declared for the source wins: the header must name
//! exactly its columns (in any order). Otherwise the types are inferred from
//! the whole file, read once as a stream before the first trigger, by this
//! rule, over each column's non-empty cells (an empty cell is NULL):
//!
//! * at least 99% of them are numbers: `BIGINT` when every number is an
//!   integer, else `DOUBLE`;
//! * every one is `true` or `false` (any case): `BOOLEAN`;
//! * at least 99% are timestamps (RFC 3339 or `YYYY-MM-DD hh:mm:ss[.fff]`):
//!   `TIMESTAMP` (milliseconds), or `DATE` when each is a plain `YYYY-MM-DD`;
//! * otherwise text (`VARCHAR`).
//!
//! So a few bad cells never retype a numeric column: they are bad cells, and
//! their rows are refused. Both cases are said on stderr: a typed column with
//! bad cells (how many, and the first ones), and a column read as text
//! although most of its cells are numbers or timestamps. The event-time
//! column must come out as an integer of milliseconds, a timestamp or a date.

use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray, StringBuilder};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::typing::{type_columns, type_name, Locate, Refused};
use super::{input_err, Chunk, InputPosition};
use crate::engine::InvalidRow;
use crate::error::Result;
use crate::window::EventTimeDomain;

/// Records read per chunk while inferring types.
const INFER_CHUNK: usize = 8192;
/// Cells named in a note per column.
const SAMPLES: usize = 3;

/// Where records start, as an editor counts lines. The `csv` reader gives a
/// record the position where its read began, before the line ends it then
/// skips (the `\n` of the last record's `\r\n`, blank lines): in a file
/// with CRLF line ends or blank lines that line is early. The skipped bytes
/// are read back from the record's offset, only for the rows a message
/// names (a refused row, a cell a note quotes), on a handle of its own.
struct LineFinder {
    path: PathBuf,
    file: RefCell<Option<File>>,
}

impl LineFinder {
    fn new(path: &Path) -> Self {
        LineFinder {
            path: path.to_path_buf(),
            file: RefCell::new(None),
        }
    }

    /// The line of the record whose read began at `(byte, line)`.
    fn line(&self, (byte, mut line): (u64, u64)) -> u64 {
        let mut slot = self.file.borrow_mut();
        if slot.is_none() {
            *slot = File::open(&self.path).ok();
        }
        let Some(f) = slot.as_mut() else {
            return line;
        };
        if f.seek(SeekFrom::Start(byte)).is_err() {
            return line;
        }
        let mut buf = [0u8; 512];
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) | Err(_) => return line,
                Ok(n) => n,
            };
            for &b in &buf[..n] {
                match b {
                    b'\n' => line += 1,
                    b'\r' => {}
                    _ => return line,
                }
            }
        }
    }
}

/// `(byte, line)` of a `csv` position.
fn at(p: &csv::Position) -> (u64, u64) {
    (p.byte(), p.line())
}

/// A CSV file being read.
pub(crate) struct CsvInput {
    path: PathBuf,
    lines: LineFinder,
    reader: csv::Reader<File>,
    record: csv::ByteRecord,
    header: Vec<String>,
    /// For each field of `schema`, its column in the file.
    map: Vec<usize>,
    schema: SchemaRef,
    event_time: usize,
    rows: u64,
    notes: Vec<String>,
}

fn open_reader(path: &Path) -> Result<(csv::Reader<File>, Vec<String>)> {
    let file = File::open(path).map_err(|e| input_err(path, e))?;
    let len = file.metadata().map_err(|e| input_err(path, e))?.len();
    if len == 0 {
        return Err(input_err(
            path,
            "the file is empty (0 bytes): a CSV input needs a header line naming its columns",
        ));
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(file);
    let header = reader
        .byte_headers()
        .map_err(|e| input_err(path, format!("line 1 (the header): {e}")))?
        .clone();
    if header
        .iter()
        .all(|f| f.iter().all(|b| b.is_ascii_whitespace()))
    {
        return Err(input_err(
            path,
            "the file has no header line (its first line is blank): a CSV input needs a header line naming its columns",
        ));
    }
    let mut names = Vec::with_capacity(header.len());
    for (i, f) in header.iter().enumerate() {
        let name = std::str::from_utf8(f).map_err(|_| {
            input_err(
                path,
                format!("line 1 (the header): column {} is not UTF-8", i + 1),
            )
        })?;
        if names.iter().any(|n| n == name) {
            return Err(input_err(
                path,
                format!("line 1 (the header): column `{name}` appears twice"),
            ));
        }
        names.push(name.to_string());
    }
    Ok((reader, names))
}

/// Text columns of up to `n` records, in the file's column order.
struct Raw {
    cols: Vec<ArrayRef>,
    /// Where each row's read began (see [`LineFinder`]).
    starts: Vec<(u64, u64)>,
    refused: Vec<Refused>,
    records: u64,
}

struct Lines<'a> {
    path: &'a Path,
    starts: &'a [(u64, u64)],
    finder: &'a LineFinder,
}

impl Locate for Lines<'_> {
    fn locate(&self, i: usize) -> (u64, String, String) {
        let l = self.starts.get(i).map_or(0, |&s| self.finder.line(s));
        (
            l,
            format!("line {l}"),
            format!("{}:{l}", self.path.display()),
        )
    }
}

fn refuse(path: &Path, line: u64, column: Option<&str>, reason: String) -> Refused {
    Refused {
        line,
        place: format!("line {line}"),
        row: InvalidRow {
            location: Some(format!("{}:{line}", path.display())),
            column: column.map(str::to_string),
            value: None,
            reason,
            event_time: None,
        },
    }
}

fn read_raw(
    path: &Path,
    finder: &LineFinder,
    reader: &mut csv::Reader<File>,
    record: &mut csv::ByteRecord,
    header: &[String],
    n: usize,
) -> Result<Raw> {
    let width = header.len();
    let mut builders: Vec<StringBuilder> = (0..width)
        .map(|_| StringBuilder::with_capacity(n.min(INFER_CHUNK), 16 * n.min(INFER_CHUNK)))
        .collect();
    let mut starts = Vec::with_capacity(n.min(INFER_CHUNK));
    let mut refused = Vec::new();
    let mut records = 0u64;
    while (records as usize) < n {
        let more = reader.read_byte_record(record).map_err(|e| {
            let line = finder.line(e.position().map_or(at(reader.position()), at));
            input_err(path, format!("line {line}: {e}"))
        })?;
        if !more {
            break;
        }
        records += 1;
        let start = record.position().map_or(at(reader.position()), at);
        if record.len() != width {
            refused.push(refuse(
                path,
                finder.line(start),
                None,
                format!(
                    "the row has {} field{}, the header has {width}",
                    record.len(),
                    if record.len() == 1 { "" } else { "s" }
                ),
            ));
            continue;
        }
        if let Some(bad) = record.iter().position(|f| std::str::from_utf8(f).is_err()) {
            refused.push(refuse(
                path,
                finder.line(start),
                Some(&header[bad]),
                "the cell is not valid UTF-8 text".to_string(),
            ));
            continue;
        }
        for (b, f) in builders.iter_mut().zip(record.iter()) {
            match std::str::from_utf8(f) {
                Ok(s) if !s.is_empty() => b.append_value(s),
                _ => b.append_null(),
            }
        }
        starts.push(start);
    }
    Ok(Raw {
        cols: builders
            .into_iter()
            .map(|mut b| Arc::new(b.finish()) as ArrayRef)
            .collect(),
        starts,
        refused,
        records,
    })
}

/// What inference counted for one column.
#[derive(Default)]
struct Stats {
    non_empty: u64,
    numbers: u64,
    integers: u64,
    booleans: u64,
    timestamps: u64,
    dates: u64,
    not_numbers: Vec<(u64, String)>,
    not_timestamps: Vec<(u64, String)>,
}

fn valid(a: &dyn Array) -> u64 {
    (a.len() - a.null_count()) as u64
}

/// A necessary condition for a timestamp or date: it starts `YYYY-MM-DD`.
fn looks_like_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10 && b[4] == b'-' && b[7] == b'-' && b[..4].iter().all(u8::is_ascii_digit)
}

impl Stats {
    fn add(
        &mut self,
        col: &StringArray,
        starts: &[(u64, u64)],
        finder: &LineFinder,
    ) -> Result<(), arrow::error::ArrowError> {
        let non_empty = valid(col);
        if non_empty == 0 {
            return Ok(());
        }
        self.non_empty += non_empty;
        let floats = cast(col, &DataType::Float64)?;
        let numbers = valid(floats.as_ref());
        self.numbers += numbers;
        if numbers > 0 {
            self.integers += valid(cast(col, &DataType::Int64)?.as_ref());
        }
        self.booleans += col
            .iter()
            .flatten()
            .filter(|s| s.eq_ignore_ascii_case("true") || s.eq_ignore_ascii_case("false"))
            .count() as u64;
        let datelike: StringArray = col
            .iter()
            .map(|o| o.filter(|s| looks_like_date(s)))
            .collect();
        let (stamps, stamped) = if datelike.null_count() < datelike.len() {
            let t = cast(&datelike, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
            let stamped = valid(t.as_ref());
            self.timestamps += stamped;
            self.dates += (0..datelike.len())
                .filter(|&r| t.is_valid(r) && datelike.value(r).len() == 10)
                .count() as u64;
            (Some(t), stamped)
        } else {
            (None, 0)
        };
        let want_samples = (numbers < non_empty && self.not_numbers.len() < SAMPLES)
            || (stamped < non_empty && self.not_timestamps.len() < SAMPLES);
        if want_samples {
            for r in 0..col.len() {
                if col.is_null(r) {
                    continue;
                }
                let line = starts.get(r).map_or(0, |&s| finder.line(s));
                if floats.is_null(r) && self.not_numbers.len() < SAMPLES {
                    self.not_numbers.push((line, col.value(r).to_string()));
                }
                let stamp = stamps.as_ref().is_some_and(|t| t.is_valid(r));
                if !stamp && self.not_timestamps.len() < SAMPLES {
                    self.not_timestamps.push((line, col.value(r).to_string()));
                }
            }
        }
        Ok(())
    }

    fn most(part: u64, all: u64) -> bool {
        part * 100 >= all * 99
    }

    /// The column's type by the rule of the module doc.
    fn decide(&self) -> DataType {
        let n = self.non_empty;
        if n == 0 {
            DataType::Utf8
        } else if Self::most(self.numbers, n) {
            if self.integers == self.numbers {
                DataType::Int64
            } else {
                DataType::Float64
            }
        } else if self.booleans == n {
            DataType::Boolean
        } else if Self::most(self.timestamps, n) {
            if self.dates == self.timestamps {
                DataType::Date32
            } else {
                DataType::Timestamp(TimeUnit::Millisecond, None)
            }
        } else {
            DataType::Utf8
        }
    }
}

fn samples(s: &[(u64, String)]) -> String {
    s.iter()
        .map(|(l, v)| format!("line {l}: {}", super::typing::quoted(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Infer the schema from the whole file (see the module doc); notes for
/// stderr say what a reader should know about it.
fn infer(path: &Path, event_time: &str) -> Result<(SchemaRef, Vec<String>)> {
    let (mut reader, header) = open_reader(path)?;
    if !header.iter().any(|h| h == event_time) {
        return Err(input_err(
            path,
            format!(
                "the header has no column `{event_time}` (the view's event-time column); its columns are: {}",
                header.join(", ")
            ),
        ));
    }
    let mut stats: Vec<Stats> = header.iter().map(|_| Stats::default()).collect();
    let finder = LineFinder::new(path);
    let mut record = csv::ByteRecord::new();
    let mut rows = 0u64;
    // rows refused as they were read (a wrong number of fields, not UTF-8)
    let (mut refused, mut first_refused) = (0u64, None);
    loop {
        let raw = read_raw(
            path,
            &finder,
            &mut reader,
            &mut record,
            &header,
            INFER_CHUNK,
        )?;
        if raw.records == 0 {
            break;
        }
        rows += raw.records;
        refused += raw.refused.len() as u64;
        if first_refused.is_none() {
            first_refused = raw.refused.first().map(Refused::describe);
        }
        for (s, c) in stats.iter_mut().zip(&raw.cols) {
            let col = c
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| input_err(path, "internal: a text column is not text"))?;
            s.add(col, &raw.starts, &finder)
                .map_err(|e| input_err(path, e))?;
        }
    }
    if rows == 0 {
        return Err(input_err(
            path,
            format!(
                "the file has a header ({}) but no data rows, so there is nothing to infer the column types from; declare them with schema = \"…\" in the view's [[source]] to run over an empty input",
                header.join(", ")
            ),
        ));
    }
    let mut notes = Vec::new();
    let mut fields = Vec::with_capacity(header.len());
    for (name, s) in header.iter().zip(&stats) {
        let dt = s.decide();
        let n = s.non_empty;
        if name == event_time {
            let ok = matches!(
                dt,
                DataType::Int64 | DataType::Date32 | DataType::Timestamp(_, _)
            );
            if n == 0 {
                // every row refused as read: say why, not that they are empty
                let why = match &first_refused {
                    Some(first) if refused == rows => format!(
                        "; every one of its {rows} data rows was refused as it was read, the first at {first}"
                    ),
                    Some(first) => format!(
                        " that could be read; {refused} of its {rows} data rows {} refused as read, the first at {first}", if refused == 1 { "was" } else { "were" }
                    ),
                    None => String::new(),
                };
                return Err(input_err(
                    path,
                    format!("the event-time column `{name}` is empty in every row{why}"),
                ));
            }
            if !ok {
                let (bad, first) = if s.numbers * 2 >= n {
                    (n - s.integers, &s.not_numbers)
                } else {
                    (n - s.timestamps, &s.not_timestamps)
                };
                return Err(input_err(
                    path,
                    format!(
                        "the event-time column `{name}` must hold timestamps (e.g. 2026-01-01T00:00:00Z), dates or integers of milliseconds, but {bad} of its {n} non-empty cells are not ({})",
                        if first.is_empty() { "numbers with a fraction".to_string() } else { samples(first) }
                    ),
                ));
            }
        }
        let typed_bad = match &dt {
            DataType::Int64 | DataType::Float64 => n - s.numbers,
            DataType::Date32 | DataType::Timestamp(_, _) => n - s.timestamps,
            _ => 0,
        };
        if typed_bad > 0 {
            let first = match &dt {
                DataType::Int64 | DataType::Float64 => &s.not_numbers,
                _ => &s.not_timestamps,
            };
            notes.push(format!(
                "column `{name}` is read as {} ({} of its {n} non-empty cells parse); {typed_bad} cell{} do{} not ({}{}): {} row{} refused and counted as invalid",
                type_name(&dt),
                n - typed_bad,
                if typed_bad == 1 { "" } else { "s" },
                if typed_bad == 1 { "es" } else { "" },
                samples(first),
                if typed_bad as usize > first.len() { ", …" } else { "" },
                if typed_bad == 1 { "its" } else { "their" },
                if typed_bad == 1 { " is" } else { "s are" },
            ));
        } else if dt == DataType::Utf8 && n > 0 && (s.numbers * 2 > n || s.timestamps * 2 > n) {
            let (what, good, first) = if s.numbers * 2 > n {
                ("numbers", s.numbers, &s.not_numbers)
            } else {
                ("timestamps", s.timestamps, &s.not_timestamps)
            };
            notes.push(format!(
                "column `{name}` is read as text (VARCHAR): {good} of its {n} non-empty cells are {what}, fewer than the 99% that type it ({} …); declare the type with schema = \"…\" in the view's [[source]] to refuse the rows that do not parse instead",
                samples(first)
            ));
        }
        fields.push(Field::new(name, dt, true));
    }
    Ok((Arc::new(Schema::new(fields)), notes))
}

impl CsvInput {
    /// Open a CSV input: with `declared`, check the header against it;
    /// otherwise infer the types from the whole file.
    pub(crate) fn open(
        path: &Path,
        event_time: &str,
        declared: Option<&SchemaRef>,
    ) -> Result<CsvInput> {
        let (schema, notes) = match declared {
            Some(s) => (s.clone(), Vec::new()),
            None => infer(path, event_time)?,
        };
        let (reader, header) = open_reader(path)?;
        let map = match declared {
            None => (0..header.len()).collect(),
            Some(s) => match_header(path, &header, s)?,
        };
        let event_time = schema.index_of(event_time).map_err(|_| {
            input_err(
                path,
                format!("no column `{event_time}` (the view's event-time column)"),
            )
        })?;
        Ok(CsvInput {
            path: path.to_path_buf(),
            lines: LineFinder::new(path),
            reader,
            record: csv::ByteRecord::new(),
            header,
            map,
            schema,
            event_time,
            rows: 0,
            notes,
        })
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    pub(crate) fn position(&self) -> InputPosition {
        let p = self.reader.position();
        InputPosition {
            rows: self.rows,
            byte: Some(p.byte()),
            line: Some(p.line()),
        }
    }

    /// Continue after `to.rows` records: at its byte offset when known
    /// (nothing before it is read), else by reading past them as a stream.
    pub(crate) fn seek(&mut self, to: &InputPosition) -> Result<()> {
        if let (Some(byte), Some(line)) = (to.byte, to.line) {
            let mut p = csv::Position::new();
            p.set_byte(byte).set_line(line).set_record(to.rows + 1);
            self.reader
                .seek(p)
                .map_err(|e| input_err(&self.path, format!("cannot seek to byte {byte}: {e}")))?;
            self.rows = to.rows;
            return Ok(());
        }
        while self.rows < to.rows {
            let more = self
                .reader
                .read_byte_record(&mut self.record)
                .map_err(|e| input_err(&self.path, e))?;
            if !more {
                return Err(input_err(
                    &self.path,
                    format!(
                        "the file has {} data rows, fewer than the {} the checkpoint already took in: it is not the input the checkpoint read",
                        self.rows, to.rows
                    ),
                ));
            }
            self.rows += 1;
        }
        Ok(())
    }

    /// The next `n` records (fewer at the end; none when done).
    pub(crate) fn next_chunk(&mut self, n: usize, domain: &EventTimeDomain) -> Result<Chunk> {
        let raw = read_raw(
            &self.path,
            &self.lines,
            &mut self.reader,
            &mut self.record,
            &self.header,
            n,
        )?;
        self.rows += raw.records;
        let cols: Vec<ArrayRef> = self.map.iter().map(|&i| raw.cols[i].clone()).collect();
        let at = Lines {
            path: &self.path,
            starts: &raw.starts,
            finder: &self.lines,
        };
        let (batch, mut refused) = type_columns(
            &self.path,
            &cols,
            &self.schema,
            self.event_time,
            domain,
            &at,
        )?;
        if !raw.refused.is_empty() {
            refused.extend(raw.refused);
            refused.sort_by_key(|r| r.line);
        }
        Ok(Chunk {
            batch,
            refused,
            rows: raw.records,
        })
    }
}

/// For each column of `schema`, its column in the header (see
/// [`super::find_column`]); an error names what is missing and what is not
/// declared.
fn match_header(path: &Path, header: &[String], schema: &SchemaRef) -> Result<Vec<usize>> {
    let names: Vec<&str> = header.iter().map(String::as_str).collect();
    let at: Vec<Option<usize>> = (schema.fields().iter())
        .map(|f| super::find_column(&names, f.name(), schema))
        .collect();
    let missing: Vec<&str> = (schema.fields().iter().zip(&at))
        .filter(|(_, a)| a.is_none())
        .map(|(f, _)| f.name().as_str())
        .collect();
    let extra: Vec<&str> = (header.iter().enumerate())
        .filter(|(i, _)| !at.contains(&Some(*i)))
        .map(|(_, h)| h.as_str())
        .collect();
    if missing.is_empty() && extra.is_empty() {
        return Ok(at.into_iter().flatten().collect());
    }
    let mut what = Vec::new();
    if !missing.is_empty() {
        what.push(format!("missing {}", missing.join(", ")));
    }
    if !extra.is_empty() {
        what.push(format!("not declared: {}", extra.join(", ")));
    }
    // a name that is a declared one with spaces around it: said, since a
    // list of names does not show them
    let spaced: Vec<String> = extra
        .iter()
        .filter(|h| h.trim() != **h && missing.contains(&h.trim()))
        .map(|h| format!("`{h}` is `{}` with spaces around it", h.trim()))
        .collect();
    if !spaced.is_empty() {
        what.push(format!(
            "{} (the header's names are read as written)",
            spaced.join(", ")
        ));
    }
    Err(input_err(
        path,
        format!(
            "the header's columns ({}) do not match the schema declared for the source ({}): {}",
            header.join(", "),
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", "),
            what.join("; ")
        ),
    ))
}
