//! Files in and out: CSV and Parquet inputs for `thund run`, and the output sinks.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::csv::reader::Format;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use crate::error::{Error, Result};

fn input_err(path: &Path, message: impl std::fmt::Display) -> Error {
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

/// Read a whole CSV or Parquet file. In a CSV, the schema is inferred and
/// the event-time column, when it holds text (RFC 3339 timestamps), is read
/// as `Timestamp(ms)`; integers stay integers of milliseconds.
pub fn read_input(path: &Path, event_time: &str) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    match format_of(path) {
        Some(FileFormat::Csv) => read_csv(path, event_time),
        Some(FileFormat::Parquet) => read_parquet(path),
        None => Err(input_err(
            path,
            "unknown format: the file name must end in .csv or .parquet",
        )),
    }
}

fn read_csv(path: &Path, event_time: &str) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let mut file = File::open(path).map_err(|e| input_err(path, e))?;
    let format = Format::default().with_header(true);
    let (inferred, _) = format
        .infer_schema(BufReader::new(&mut file), None)
        .map_err(|e| input_err(path, e))?;
    let fields: Vec<Field> = inferred
        .fields()
        .iter()
        .map(|f| {
            if f.name() == event_time
                && matches!(f.data_type(), DataType::Utf8 | DataType::Timestamp(_, _))
            {
                Field::new(
                    f.name(),
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    true,
                )
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    file.seek(SeekFrom::Start(0))
        .map_err(|e| input_err(path, e))?;
    let reader = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_format(format)
        .with_batch_size(8192)
        .build(file)
        .map_err(|e| input_err(path, e))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| input_err(path, e))?;
    Ok((schema, batches))
}

fn read_parquet(path: &Path) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let file = File::open(path).map_err(|e| input_err(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| input_err(path, e))?;
    let schema = builder.schema().clone();
    let reader = builder.build().map_err(|e| input_err(path, e))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| input_err(path, e))?;
    Ok((schema, batches))
}

/// Cut batches into chunks of at most `n` rows, in order.
pub fn rechunk(batches: &[RecordBatch], n: usize) -> Vec<Vec<RecordBatch>> {
    let n = n.max(1);
    let mut out: Vec<Vec<RecordBatch>> = Vec::new();
    let mut cur: Vec<RecordBatch> = Vec::new();
    let mut filled = 0;
    for b in batches {
        let mut off = 0;
        while off < b.num_rows() {
            let take = (n - filled).min(b.num_rows() - off);
            cur.push(b.slice(off, take));
            off += take;
            filled += take;
            if filled == n {
                out.push(std::mem::take(&mut cur));
                filled = 0;
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Where emitted rows go.
pub enum Sink {
    /// CSV to a file or stdout, header first.
    Csv {
        /// Where.
        path: PathBuf,
        /// The writer.
        writer: arrow::csv::Writer<Box<dyn Write>>,
    },
    /// A Parquet file.
    Parquet {
        /// Where.
        path: PathBuf,
        /// The writer.
        writer: ArrowWriter<File>,
    },
}

impl Sink {
    /// Open a sink: `-` is CSV on stdout, otherwise by extension.
    pub fn open(path: &Path, schema: SchemaRef) -> Result<Sink> {
        let out_err = |e: &dyn std::fmt::Display| Error::Output {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        if path.as_os_str() == "-" {
            let w: Box<dyn Write> = Box::new(std::io::stdout());
            return Ok(Sink::Csv {
                path: path.to_path_buf(),
                writer: arrow::csv::WriterBuilder::new().with_header(true).build(w),
            });
        }
        match format_of(path) {
            Some(FileFormat::Csv) => {
                let f = File::create(path).map_err(|e| out_err(&e))?;
                let w: Box<dyn Write> = Box::new(std::io::BufWriter::new(f));
                Ok(Sink::Csv {
                    path: path.to_path_buf(),
                    writer: arrow::csv::WriterBuilder::new().with_header(true).build(w),
                })
            }
            Some(FileFormat::Parquet) => {
                let f = File::create(path).map_err(|e| out_err(&e))?;
                let writer = ArrowWriter::try_new(f, schema, None).map_err(|e| out_err(&e))?;
                Ok(Sink::Parquet {
                    path: path.to_path_buf(),
                    writer,
                })
            }
            None => Err(out_err(
                &"unknown format: the file name must end in .csv or .parquet, or be `-`",
            )),
        }
    }

    /// Write emitted rows.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            Sink::Csv { path, writer } => writer.write(batch).map_err(|e| Error::Output {
                path: path.clone(),
                message: e.to_string(),
            }),
            Sink::Parquet { path, writer } => writer.write(batch).map_err(|e| Error::Output {
                path: path.clone(),
                message: e.to_string(),
            }),
        }
    }

    /// Flush and close.
    pub fn close(self) -> Result<()> {
        match self {
            Sink::Csv { path, writer } => {
                let mut inner = writer.into_inner();
                inner.flush().map_err(|e| Error::Output {
                    path,
                    message: e.to_string(),
                })
            }
            Sink::Parquet { path, writer } => {
                writer.close().map(|_| ()).map_err(|e| Error::Output {
                    path,
                    message: e.to_string(),
                })
            }
        }
    }
}
