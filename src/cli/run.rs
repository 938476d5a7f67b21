//! `thund run`: replay CSV or Parquet inputs through a view in triggers,
//! with an exactly-once CSV sink when checkpointing.

use std::io::Write;
use std::path::PathBuf;

use arrow::array::RecordBatch;

use super::RunArgs;
use crate::error::{Error, Result};
use crate::io::{read_input, rechunk, Sink};
use crate::time::display;
use crate::{Engine, TriggerReport, ViewSpec};

pub(super) fn parse_inputs(spec: &ViewSpec, inputs: &[String]) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for i in inputs {
        let Some((s, p)) = i.split_once('=') else {
            return Err(Error::spec(
                &spec.name,
                format!("--input {i:?}: expected SOURCE=PATH"),
            ));
        };
        if !spec.sources.iter().any(|x| x.name == s) {
            return Err(Error::spec(
                &spec.name,
                format!(
                    "--input names source `{s}`, which the view does not declare (sources: {})",
                    spec.sources
                        .iter()
                        .map(|x| x.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        out.push((s.to_string(), PathBuf::from(p)));
    }
    Ok(out)
}

/// Read each input and give its schema to the spec's source.
pub(super) fn load_inputs(
    spec: &mut ViewSpec,
    inputs: &[(String, PathBuf)],
) -> Result<Vec<Vec<RecordBatch>>> {
    let mut data = Vec::new();
    for src in &mut spec.sources {
        let Some((_, path)) = inputs.iter().find(|(s, _)| *s == src.name) else {
            if src.schema.is_some() {
                data.push(Vec::new());
                continue;
            }
            return Err(Error::spec(
                &spec.name,
                format!("no --input for source `{}`", src.name),
            ));
        };
        let (schema, batches) = read_input(path, &src.event_time)?;
        src.schema = Some(schema);
        data.push(batches);
    }
    Ok(data)
}

fn out_err(path: &std::path::Path, e: impl std::fmt::Display) -> Error {
    Error::Output {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A CSV file that only grows by whole triggers: its committed length is
/// stored with each checkpoint, and a resume truncates back to it.
struct ExactlyOnceCsv {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
}

impl ExactlyOnceCsv {
    fn open(path: &std::path::Path, committed: u64) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| out_err(path, e))?;
        let have = file.metadata().map_err(|e| out_err(path, e))?.len();
        if have < committed {
            return Err(out_err(
                path,
                format!("holds {have} bytes but the checkpoint committed {committed}: the output file was changed or replaced"),
            ));
        }
        // drop what triggers after the last committed checkpoint wrote (and any torn row)
        file.set_len(committed).map_err(|e| out_err(path, e))?;
        Ok(ExactlyOnceCsv {
            path: path.to_path_buf(),
            file,
            len: committed,
        })
    }

    fn write(&mut self, batches: &[RecordBatch]) -> Result<u64> {
        use std::io::Seek;
        self.file
            .seek(std::io::SeekFrom::Start(self.len))
            .map_err(|e| out_err(&self.path, e))?;
        {
            let mut buf = std::io::BufWriter::new(&mut self.file);
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(self.len == 0)
                .build(&mut buf);
            for b in batches.iter().filter(|b| b.num_rows() > 0) {
                w.write(b).map_err(|e| out_err(&self.path, e))?;
            }
            drop(w);
            buf.flush().map_err(|e| out_err(&self.path, e))?;
        }
        self.len = self
            .file
            .stream_position()
            .map_err(|e| out_err(&self.path, e))?;
        Ok(self.len)
    }
}

pub(super) fn run(a: RunArgs) -> Result<()> {
    let mut spec = ViewSpec::from_toml_file(&a.view)?;
    let inputs = parse_inputs(&spec, &a.inputs)?;
    for s in &spec.sources {
        if !inputs.iter().any(|(n, _)| *n == s.name) {
            return Err(Error::spec(
                &spec.name,
                format!("no --input for source `{}`", s.name),
            ));
        }
    }
    let data = load_inputs(&mut spec, &inputs)?;
    let names: Vec<String> = spec.sources.iter().map(|s| s.name.clone()).collect();
    let view = spec.name.clone();
    let mut builder = Engine::builder();
    if let Some(url) = &a.state_root {
        builder = builder.with_state_root(url);
    }
    let mut engine = builder.build()?;
    engine.create_view(spec)?;
    let recovery = engine.recovery(&view)?.cloned();
    for w in engine.warnings(&view)? {
        eprintln!("thund run: {w}");
    }
    if let Some(r) = &recovery {
        eprintln!(
            "thund run: resuming view `{view}` from epoch {} (W = {}){}",
            r.epoch,
            display(r.watermark),
            if r.fell_back_from.is_empty() {
                String::new()
            } else {
                format!(
                    "; FELL BACK past newer epochs: {}",
                    r.fell_back_from
                        .iter()
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }
        );
    }
    // replay each source from its offset (rows taken in by committed triggers)
    let chunks: Vec<Vec<Vec<RecordBatch>>> = data
        .iter()
        .zip(&names)
        .map(|(d, n)| {
            let skip = engine.source_offset(n).unwrap_or(0) as usize;
            rechunk(&skip_rows(d, skip), a.rows_per_trigger)
        })
        .collect();
    let mut offsets: Vec<u64> = names
        .iter()
        .map(|n| engine.source_offset(n).unwrap_or(0))
        .collect();
    let triggers = chunks.iter().map(|c| c.len()).max().unwrap_or(0);
    let exactly_once = a.state_root.is_some();
    let mut sink = None;
    let mut csv = None;
    if let Some(p) = &a.output {
        if exactly_once {
            let is_csv = crate::io::format_of(p) == Some(crate::io::FileFormat::Csv);
            if !is_csv {
                return Err(out_err(
                    p,
                    "with --state-root the output must be a .csv file (an exactly-once sink truncates it on resume)",
                ));
            }
            let committed = recovery
                .as_ref()
                .and_then(|r| r.extra.get("output_len").and_then(|v| v.as_u64()))
                .unwrap_or(0);
            csv = Some(ExactlyOnceCsv::open(p, committed)?);
        } else {
            sink = Some(Sink::open(p, engine.output_schema(&view)?)?);
        }
    }
    let mut report = match &a.report {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(exactly_once)
                .write(true)
                .truncate(!exactly_once)
                .open(p)
                .map_err(|e| out_err(p, e))?,
        )),
        None => None,
    };
    let mut emitted = 0usize;
    let mut emit = |r: &TriggerReport| -> Result<Option<u64>> {
        let batches: Vec<RecordBatch> = r
            .views
            .iter()
            .flat_map(|v| v.output.iter().cloned())
            .collect();
        emitted += batches.iter().map(|b| b.num_rows()).sum::<usize>();
        let mut len = None;
        if let Some(s) = sink.as_mut() {
            for b in &batches {
                s.write(b)?;
            }
        }
        if let Some(c) = csv.as_mut() {
            len = Some(c.write(&batches)?);
        }
        if let (Some(w), Some(p)) = (report.as_mut(), a.report.as_ref()) {
            for line in r.to_json_lines() {
                writeln!(w, "{line}").map_err(|e| out_err(p, e))?;
            }
            w.flush().map_err(|e| out_err(p, e))?;
        }
        Ok(len)
    };
    let limit = a.max_triggers.unwrap_or(usize::MAX);
    let mut ran = 0;
    for k in 0..triggers {
        if ran == limit {
            break;
        }
        for (si, c) in chunks.iter().enumerate() {
            for b in c.get(k).into_iter().flatten() {
                offsets[si] += b.num_rows() as u64;
                engine.push_at(&names[si], b.clone(), offsets[si])?;
            }
        }
        let r = engine.trigger()?;
        let len = emit(&r)?;
        if exactly_once {
            engine.checkpoint(serde_json::json!({ "output_len": len.unwrap_or(0) }))?;
        }
        ran += 1;
    }
    if ran < limit {
        let r = engine.finish()?;
        let len = emit(&r)?;
        if exactly_once {
            engine.checkpoint(
                serde_json::json!({ "output_len": len.unwrap_or(0), "finished": true }),
            )?;
        }
    }
    if exactly_once {
        engine.sync_checkpoints()?;
    }
    if let Some(s) = sink {
        s.close()?;
    }
    let c = engine.counters(&view)?;
    eprintln!(
        "thund run: {ran} triggers{}, {} rows in, {} late, {} invalid, {} windows closed, {} rows out",
        if ran < limit { " and the end of stream" } else { " (stopped by --max-triggers)" },
        c.rows,
        c.late_rows_dropped,
        c.invalid_rows,
        c.windows_closed,
        emitted
    );
    Ok(())
}

/// The rows of `batches` after the first `skip`.
fn skip_rows(batches: &[RecordBatch], mut skip: usize) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for b in batches {
        if skip >= b.num_rows() {
            skip -= b.num_rows();
            continue;
        }
        out.push(b.slice(skip, b.num_rows() - skip));
        skip = 0;
    }
    out
}
