//! Parquet inputs, read as a stream of record batches: only the footer is
//! read at open; row groups are decoded as triggers consume them, and a
//! resume starts at the row group that holds its offset.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::typing::{type_columns, Locate};
use super::{input_err, Chunk, InputPosition};
use crate::error::Result;
use crate::window::EventTimeDomain;

/// Rows decoded per record batch.
const BATCH: usize = 8192;

/// A Parquet file being read.
pub(crate) struct ParquetInput {
    path: PathBuf,
    /// The file's own schema.
    file_schema: SchemaRef,
    /// The source's schema (the file's, or the declared one).
    schema: SchemaRef,
    /// For each field of `schema`, its column in the file.
    map: Vec<usize>,
    event_time: usize,
    /// Rows per row group, from the footer.
    groups: Vec<u64>,
    reader: Option<ParquetRecordBatchReader>,
    leftover: Option<RecordBatch>,
    rows: u64,
}

fn builder(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let file = File::open(path).map_err(|e| input_err(path, e))?;
    let len = file.metadata().map_err(|e| input_err(path, e))?.len();
    if len == 0 {
        return Err(input_err(
            path,
            "the file is empty (0 bytes), not a Parquet file",
        ));
    }
    ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| {
        input_err(
            path,
            format!("not a readable Parquet file ({len} bytes; truncated, or not Parquet?): {e}"),
        )
    })
}

struct Rows<'a> {
    path: &'a Path,
    first: u64,
}

impl Locate for Rows<'_> {
    fn locate(&self, i: usize) -> (u64, String, String) {
        let r = self.first + i as u64 + 1;
        (
            r,
            format!("row {r}"),
            format!("{} row {r}", self.path.display()),
        )
    }
}

impl ParquetInput {
    /// Open a Parquet input: the footer only. With `declared`, the file must
    /// have exactly its columns (in any order); a column of another type is
    /// cast, and a value that does not convert refuses its row.
    pub(crate) fn open(
        path: &Path,
        event_time: &str,
        declared: Option<&SchemaRef>,
    ) -> Result<ParquetInput> {
        let b = builder(path)?;
        let file_schema = b.schema().clone();
        let groups = b
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows().max(0) as u64)
            .collect();
        let schema = declared.cloned().unwrap_or_else(|| file_schema.clone());
        let names = |s: &SchemaRef| {
            s.fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut map = Vec::with_capacity(schema.fields().len());
        let file_names: Vec<&str> = (file_schema.fields().iter())
            .map(|f| f.name().as_str())
            .collect();
        for f in schema.fields() {
            match super::find_column(&file_names, f.name(), &schema) {
                Some(i) => map.push(i),
                None => {
                    return Err(input_err(
                        path,
                        format!(
                            "the file's columns ({}) do not match the schema declared for the source ({}): missing {}",
                            names(&file_schema),
                            names(&schema),
                            f.name()
                        ),
                    ))
                }
            }
        }
        if map.len() != file_schema.fields().len() {
            let extra: Vec<&str> = (file_names.iter().enumerate())
                .filter(|(i, _)| !map.contains(i))
                .map(|(_, n)| *n)
                .collect();
            return Err(input_err(
                path,
                format!(
                    "the file's columns ({}) do not match the schema declared for the source ({}): not declared: {}",
                    names(&file_schema),
                    names(&schema),
                    extra.join(", ")
                ),
            ));
        }
        let event_time = schema.index_of(event_time).map_err(|_| {
            input_err(
                path,
                format!(
                    "the file has no column `{event_time}` (the view's event-time column); its columns are: {}",
                    names(&file_schema)
                ),
            )
        })?;
        Ok(ParquetInput {
            path: path.to_path_buf(),
            file_schema,
            schema,
            map,
            event_time,
            groups,
            reader: None,
            leftover: None,
            rows: 0,
        })
    }

    pub(crate) fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    pub(crate) fn position(&self) -> InputPosition {
        InputPosition {
            rows: self.rows,
            byte: None,
            line: None,
        }
    }

    /// Rows in the file, from its footer.
    pub(crate) fn total_rows(&self) -> u64 {
        self.groups.iter().sum()
    }

    /// Continue after `to.rows` rows: whole row groups before it are not
    /// read at all, and the reader skips the rest.
    pub(crate) fn seek(&mut self, to: &InputPosition) -> Result<()> {
        let total = self.total_rows();
        if to.rows > total {
            return Err(input_err(
                &self.path,
                format!(
                    "the file has {total} rows, fewer than the {} the checkpoint already took in: it is not the input the checkpoint read",
                    to.rows
                ),
            ));
        }
        self.start(to.rows)?;
        self.rows = to.rows;
        Ok(())
    }

    fn start(&mut self, skip: u64) -> Result<()> {
        let mut before = 0u64;
        let mut groups = Vec::new();
        for (i, &n) in self.groups.iter().enumerate() {
            if !groups.is_empty() || before + n > skip {
                groups.push(i);
            } else {
                before += n;
            }
        }
        let b = builder(&self.path)?
            .with_batch_size(BATCH)
            .with_row_groups(groups)
            .with_offset((skip - before) as usize);
        self.reader = Some(b.build().map_err(|e| input_err(&self.path, e))?);
        self.leftover = None;
        Ok(())
    }

    /// The next `n` rows (fewer at the end; none when done).
    pub(crate) fn next_chunk(&mut self, n: usize, domain: &EventTimeDomain) -> Result<Chunk> {
        if self.reader.is_none() {
            self.start(self.rows)?;
        }
        let first = self.rows;
        let mut parts = Vec::new();
        let mut have = 0usize;
        while have < n {
            let b = match self.leftover.take() {
                Some(b) => b,
                None => match self.reader.as_mut().and_then(|r| r.next()) {
                    None => break,
                    Some(Ok(b)) => b,
                    Some(Err(e)) => {
                        return Err(input_err(
                            &self.path,
                            format!(
                                "cannot read the rows after row {}: {e}",
                                self.rows + have as u64
                            ),
                        ))
                    }
                },
            };
            let take = (n - have).min(b.num_rows());
            if take < b.num_rows() {
                self.leftover = Some(b.slice(take, b.num_rows() - take));
            }
            have += take;
            parts.push(b.slice(0, take));
        }
        self.rows += have as u64;
        if have == 0 {
            return Ok(Chunk {
                batch: None,
                refused: Vec::new(),
                rows: 0,
            });
        }
        let all = concat_batches(&self.file_schema, &parts)?;
        let cols: Vec<ArrayRef> = self.map.iter().map(|&i| all.column(i).clone()).collect();
        let at = Rows {
            path: &self.path,
            first,
        };
        let (batch, refused) = type_columns(
            &self.path,
            &cols,
            &self.schema,
            self.event_time,
            domain,
            &at,
        )?;
        Ok(Chunk {
            batch,
            refused,
            rows: have as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Array, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn file(dir: &Path, rows: i64, group: usize) -> PathBuf {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("ts", DataType::Int64, false),
        ]));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values((0..rows).map(|i| i % 5))),
                Arc::new(Int64Array::from_iter_values(0..rows)),
            ],
        )
        .expect("batch");
        let path = dir.join("t.parquet");
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group))
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            File::create(&path).expect("create"),
            schema,
            Some(props),
        )
        .expect("writer");
        w.write(&b).expect("write");
        w.close().expect("close");
        path
    }

    fn ts(c: &Chunk) -> Vec<i64> {
        let b = c.batch.as_ref().expect("rows");
        let a = b
            .column(1)
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("i64");
        (0..a.len()).map(|i| a.value(i)).collect()
    }

    #[test]
    fn chunks_and_seeks_give_every_row_once_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = file(dir.path(), 300, 32);
        let mut p = ParquetInput::open(&path, "ts", None).expect("open");
        assert_eq!(p.total_rows(), 300);
        let c = p
            .next_chunk(20, &EventTimeDomain::default())
            .expect("chunk");
        assert_eq!(ts(&c), (0..20).collect::<Vec<_>>());
        for skip in [0u64, 20, 31, 32, 60, 63, 64, 299] {
            let mut p = ParquetInput::open(&path, "ts", None).expect("open");
            p.seek(&InputPosition {
                rows: skip,
                ..Default::default()
            })
            .expect("seek");
            let mut got = Vec::new();
            loop {
                let c = p
                    .next_chunk(20, &EventTimeDomain::default())
                    .expect("chunk");
                if c.rows == 0 {
                    break;
                }
                got.extend(ts(&c));
            }
            assert_eq!(got, (skip as i64..300).collect::<Vec<_>>(), "from {skip}");
        }
    }
}
