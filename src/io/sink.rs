//! Output sinks: CSV (a file or stdout) and Parquet. A sink is closed on
//! every path out — [`Sink::close`], or when it is dropped after an error —
//! so a failed run leaves a readable file holding every row written before
//! the failure.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use parquet::arrow::ArrowWriter;

use super::{format_of, FileFormat};
use crate::error::{Error, Result};

enum Writer {
    Csv(arrow::csv::Writer<Box<dyn Write>>),
    Parquet(ArrowWriter<File>),
}

/// Where emitted rows go.
pub struct Sink {
    path: PathBuf,
    /// `None` once closed.
    writer: Option<Writer>,
}

fn out_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Output {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Sink {
    /// Open a sink: `-` is CSV on stdout, otherwise a new or truncated file
    /// whose format is chosen by extension.
    pub fn open(path: &Path, schema: SchemaRef) -> Result<Sink> {
        if path.as_os_str() == "-" {
            let w: Box<dyn Write> = Box::new(std::io::stdout());
            return Ok(Sink {
                path: path.to_path_buf(),
                writer: Some(Writer::Csv(
                    arrow::csv::WriterBuilder::new().with_header(true).build(w),
                )),
            });
        }
        if format_of(path).is_none() {
            return Err(out_err(
                path,
                "unknown format: the file name must end in .csv or .parquet, or be `-`",
            ));
        }
        let f = File::create(path).map_err(|e| out_err(path, e))?;
        Self::from_file(path, f, schema)
    }

    /// A sink writing to `file`, already open for writing at `path`
    /// (format by extension); the file is truncated first.
    pub fn from_file(path: &Path, file: File, schema: SchemaRef) -> Result<Sink> {
        file.set_len(0).map_err(|e| out_err(path, e))?;
        let writer = match format_of(path) {
            Some(FileFormat::Csv) => {
                let w: Box<dyn Write> = Box::new(std::io::BufWriter::new(file));
                Writer::Csv(arrow::csv::WriterBuilder::new().with_header(true).build(w))
            }
            Some(FileFormat::Parquet) => Writer::Parquet(
                ArrowWriter::try_new(file, schema, None).map_err(|e| out_err(path, e))?,
            ),
            None => {
                return Err(out_err(
                    path,
                    "unknown format: the file name must end in .csv or .parquet, or be `-`",
                ))
            }
        };
        Ok(Sink {
            path: path.to_path_buf(),
            writer: Some(writer),
        })
    }

    /// Write emitted rows.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let path = &self.path;
        match self.writer.as_mut() {
            Some(Writer::Csv(w)) => w.write(batch).map_err(|e| out_err(path, e)),
            Some(Writer::Parquet(w)) => w.write(batch).map_err(|e| out_err(path, e)),
            None => Err(out_err(path, "the sink is closed")),
        }
    }

    /// Flush and close: a Parquet file gets its footer.
    pub fn close(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        let path = &self.path;
        match self.writer.take() {
            // every write flushed its rows through (a failed one said so);
            // `into_inner` would flush again and panic on an error (a reader
            // of stdout gone after a failed write: `thund run … | head -1`)
            Some(Writer::Csv(w)) => {
                drop(w);
                Ok(())
            }
            Some(Writer::Parquet(w)) => w.close().map(|_| ()).map_err(|e| out_err(path, e)),
            None => Ok(()),
        }
    }
}

impl Drop for Sink {
    /// A sink dropped without [`Sink::close`] (an error on the way) is still
    /// closed, so what was written stays readable.
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
