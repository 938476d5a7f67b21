//! `thund run`: replay CSV or Parquet inputs through a view in triggers,
//! streaming them a chunk per trigger, with an exactly-once CSV sink when
//! checkpointing.
//!
//! Everything that can be checked is checked before a file is touched: the
//! flags, the inputs (opened, typed), the view, the state root and what its
//! checkpoint committed; then the report and the output are opened without
//! truncation, and only once both are open is either truncated.

use std::fs::File;
use std::io::{BufWriter, Seek, Write};
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;

use super::resume::{self, InputRecord, RunRecord, SinkRecord};
use super::{CliError, Result, RunArgs};
use crate::error::Error;
use crate::io::{canonical, format_of, FileFormat, InputReader, Refused, Sink};
use crate::time::display;
use crate::{Engine, InvalidRow, TriggerReport, ViewSpec};

/// Refused rows printed on stderr; the rest are only counted.
const SHOWN_REFUSALS: usize = 10;

pub(super) fn parse_inputs(spec: &ViewSpec, inputs: &[String]) -> Result<Vec<(String, PathBuf)>> {
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for i in inputs {
        let Some((s, p)) = i.split_once('=') else {
            return Err(
                Error::spec(&spec.name, format!("--input {i:?}: expected SOURCE=PATH")).into(),
            );
        };
        // the source of that name, or the one whose name differs only in
        // ASCII case (`bid` for `CREATE TABLE Bid`, read as SQL reads it)
        let like: Vec<&str> = (spec.sources.iter())
            .map(|x| x.name.as_str())
            .filter(|n| n.eq_ignore_ascii_case(s))
            .collect();
        let s = match (spec.sources.iter().find(|x| x.name == s), like.as_slice()) {
            (Some(x), _) => x.name.as_str(),
            (None, [one]) => one,
            _ => s,
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
            )
            .into());
        }
        if let Some((_, first)) = out.iter().find(|(n, _)| n == s) {
            return Err(CliError::Refused(format!(
                "--input gives source `{s}` twice ({} and {p}): give one file per source",
                first.display()
            )));
        }
        out.push((s.to_string(), PathBuf::from(p)));
    }
    Ok(out)
}

/// Open each source's input (in the spec's source order) and give its
/// schema to the spec: a declared schema wins, else the input's. Notes of
/// inference go to stderr.
pub(super) fn open_inputs(
    spec: &mut ViewSpec,
    inputs: &[(String, PathBuf)],
    command: &str,
) -> Result<Vec<Option<InputReader>>> {
    let mut readers = Vec::new();
    for src in &mut spec.sources {
        let Some((_, path)) = inputs.iter().find(|(s, _)| *s == src.name) else {
            readers.push(None);
            continue;
        };
        let reader = InputReader::open(path, &src.event_time, src.schema.as_ref())?;
        for note in reader.notes() {
            eprintln!("thund {command}: input {}: {note}", path.display());
        }
        src.schema = Some(reader.schema().clone());
        readers.push(Some(reader));
    }
    Ok(readers)
}

fn out_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Output {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// A file opened for writing without truncating it; removed again if the
/// run stops before using it and this run created it.
struct Opened {
    path: PathBuf,
    file: Option<File>,
    created: bool,
}

impl Opened {
    fn open(path: &Path) -> Result<Opened> {
        let existed = path.exists();
        if path.is_dir() {
            return Err(out_err(path, "is a directory").into());
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| out_err(path, e))?;
        Ok(Opened {
            path: path.to_path_buf(),
            file: Some(file),
            created: !existed,
        })
    }

    fn take(&mut self) -> File {
        self.created = false;
        self.file.take().expect("taken once")
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        if self.created && self.file.is_some() {
            self.file = None;
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A CSV file that only grows by whole triggers: its committed length is
/// stored with each checkpoint, and a resume truncates back to it.
struct ExactlyOnceCsv {
    path: PathBuf,
    file: File,
    len: u64,
}

impl ExactlyOnceCsv {
    fn new(path: &Path, file: File, committed: u64) -> Result<Self> {
        // drop what triggers after the last committed checkpoint wrote (and any torn row)
        file.set_len(committed).map_err(|e| out_err(path, e))?;
        Ok(ExactlyOnceCsv {
            path: path.to_path_buf(),
            file,
            len: committed,
        })
    }

    fn write(&mut self, batches: &[RecordBatch]) -> Result<u64> {
        self.file
            .seek(std::io::SeekFrom::Start(self.len))
            .map_err(|e| out_err(&self.path, e))?;
        {
            let mut buf = BufWriter::new(&mut self.file);
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

/// `--output` and `--report` must not be an input, nor the view's own file
/// (`--view` or `--sql`), nor each other.
fn check_paths(a: &RunArgs, inputs: &[(String, PathBuf)]) -> Result<()> {
    let outs: Vec<(&str, &PathBuf)> = [
        ("--output", a.output.as_ref()),
        ("--report", a.report.as_ref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.filter(|p| p.as_os_str() != "-").map(|p| (f, p)))
    .collect();
    for (flag, out) in &outs {
        let o = canonical(out);
        for (what, spec) in view_files(a) {
            if canonical(spec) == o {
                return Err(CliError::Refused(format!(
                    "{flag} {} is {what}: writing it would destroy the view; choose another file",
                    out.display()
                )));
            }
        }
        for (source, input) in inputs {
            if canonical(input) == o {
                return Err(CliError::Refused(format!(
                    "{flag} {} is the input of source `{source}`: writing it would destroy the input; choose another file",
                    out.display()
                )));
            }
        }
    }
    if let [(_, o), (_, r)] = outs.as_slice() {
        if canonical(o) == canonical(r) {
            return Err(CliError::Refused(format!(
                "--output and --report are the same file ({}): choose two files",
                o.display()
            )));
        }
    }
    if let Some(o) = &a.output {
        if o.as_os_str() != "-" && format_of(o).is_none() {
            return Err(out_err(
                o,
                "unknown format: the file name must end in .csv or .parquet, or be `-`",
            )
            .into());
        }
        if a.state_root.is_some() && format_of(o) != Some(FileFormat::Csv) {
            return Err(out_err(
                o,
                "with --state-root the output must be a .csv file (an exactly-once sink truncates it on resume)",
            )
            .into());
        }
    }
    Ok(())
}

/// The files the view is read from (`--view` or `--sql`), with what each is.
fn view_files(a: &RunArgs) -> impl Iterator<Item = (String, &PathBuf)> {
    [("--view", &a.view.view), ("--sql", &a.view.sql)]
        .into_iter()
        .filter_map(|(flag, p)| Some((format!("the view's {flag} file"), p.as_ref()?)))
}

/// A checkpoint the sidecar could not commit (reported by a later trigger)
/// stops the run, as Flink stops a job at its first failed checkpoint by
/// default: running on would write output that a resume truncates away, with
/// nothing said until the end. Run again to resume from the last committed
/// epoch.
fn stop_if_uncommitted(r: &TriggerReport) -> Result<()> {
    match r
        .checkpoints
        .iter()
        .find_map(|o| Some((o, o.result.as_ref().err()?)))
    {
        None => Ok(()),
        Some((o, e)) => Err(Error::Checkpoint {
            context: format!(
                "view `{}` epoch {} (the run stops at a checkpoint it cannot commit; run it \
                 again to resume from the last committed one)",
                o.view, o.epoch
            ),
            source: e.clone(),
        }
        .into()),
    }
}

/// A held lease gets a message that says what the command line can do.
fn lease_hint(e: Error, root: Option<&str>) -> CliError {
    if let Error::Checkpoint { source, .. } = &e {
        if let thund_checkpoint::Error::Fenced { view, path, holder } = source.as_ref() {
            return CliError::Refused(format!(
                "view `{view}` is being written by another process: the lease {}/{path} is held by {holder}. If that process is still running, let it finish or stop it first. If it is gone (it ran on another host or in a replaced container, or the lease file is garbage), run again with --takeover.",
                root.unwrap_or("")
            ));
        }
    }
    e.into()
}

/// Rows refused by the readers, as stderr shows them: the first few, then a count.
struct Refusals {
    shown: usize,
    hidden: u64,
}

impl Refusals {
    fn note(&mut self, path: &Path, r: &Refused) {
        if self.shown < SHOWN_REFUSALS {
            self.shown += 1;
            eprintln!(
                "thund run: input {}: {} (row refused, counted as invalid)",
                path.display(),
                r.describe()
            );
        } else {
            self.hidden += 1;
        }
    }
}

/// Peak resident memory of this process, in bytes (Linux).
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub(super) fn run(a: RunArgs) -> Result<()> {
    // 1. flags and files, before anything is opened for writing
    if let Some(root) = a.state_root.as_deref().filter(|r| super::in_memory(r)) {
        return Err(CliError::Refused(format!(
            "--state-root {root}: a memory:// state root lives only as long as this process, so no \
             later run could resume from it; give file:///absolute/path"
        )));
    }
    let mut spec = a.view.spec()?;
    let inputs = parse_inputs(&spec, &a.inputs)?;
    for s in &spec.sources {
        if !inputs.iter().any(|(n, _)| *n == s.name) {
            return Err(
                Error::spec(&spec.name, format!("no --input for source `{}`", s.name)).into(),
            );
        }
    }
    check_paths(&a, &inputs)?;
    let sink_url = a
        .sink
        .as_deref()
        .map(crate::io::db::SinkUrl::parse)
        .transpose()?;
    if let Some(path) = sink_url.as_ref().and_then(|u| u.sqlite_path()) {
        let db = canonical(path);
        let taken = inputs
            .iter()
            .map(|(source, p)| (format!("the input of source `{source}`"), p))
            .chain(
                a.output
                    .iter()
                    .map(|p| ("the --output file".to_string(), p)),
            )
            .chain(
                a.report
                    .iter()
                    .map(|p| ("the --report file".to_string(), p)),
            )
            .chain(view_files(&a));
        for (what, p) in taken {
            if canonical(p) == db {
                return Err(CliError::Refused(format!(
                    "--sink {} is {what}: choose another database file",
                    path.display()
                )));
            }
        }
    }
    let output_mode = spec.output;
    let mut readers: Vec<InputReader> = open_inputs(&mut spec, &inputs, "run")?
        .into_iter()
        .flatten()
        .collect();
    let names: Vec<String> = spec.sources.iter().map(|s| s.name.clone()).collect();
    let view = spec.name.clone();

    // 2. the engine, the view, and what a checkpoint committed
    let mut builder = Engine::builder()
        .workers(a.workers)
        .force_takeover(a.takeover);
    if let Some(url) = &a.state_root {
        builder = builder.with_state_root(url);
    }
    let mut engine = builder.build()?;
    a.view.check(&engine, &view)?;
    engine
        .create_view(spec)
        .map_err(|e| lease_hint(e, a.state_root.as_deref()))?;
    let recovery = engine.recovery(&view)?.cloned();
    for w in engine.warnings(&view)? {
        eprintln!("thund run: {w}");
    }
    let committed = recovery
        .as_ref()
        .map(|r| RunRecord::from_extra(&r.extra))
        .unwrap_or_default();
    let epoch = recovery.as_ref().map(|r| r.epoch).unwrap_or(0);
    if let Some(r) = &recovery {
        if committed.finished {
            eprintln!(
                "thund run: view `{view}` already finished: the end of its stream was committed at epoch {} (W = {}), and its output is complete. Nothing to do; to run it again from the start, use a new --state-root.",
                r.epoch,
                display(r.watermark)
            );
            return Ok(());
        }
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
    // where each input resumes, checked against the file the checkpoint read
    let mut starts = Vec::with_capacity(readers.len());
    for (name, reader) in names.iter().zip(&readers) {
        let offset = engine.source_offset(name).unwrap_or(0);
        let start = match committed.inputs.get(name) {
            Some(then) => {
                if let Some(note) =
                    resume::check_input(name, reader.path(), reader.identity(), then, epoch)?
                {
                    eprintln!("thund run: {note}");
                }
                if then.position.rows == offset {
                    then.position.clone()
                } else {
                    crate::io::InputPosition {
                        rows: offset,
                        ..Default::default()
                    }
                }
            }
            None => crate::io::InputPosition {
                rows: offset,
                ..Default::default()
            },
        };
        starts.push(start);
    }
    let exactly_once = a.state_root.is_some();
    let committed_len = if exactly_once {
        resume::check_sink(a.output.as_deref(), &committed, epoch)?
    } else {
        0
    };

    // 3. open report and output without truncating; only then truncate
    let mut report_file = a.report.as_deref().map(Opened::open).transpose()?;
    let mut output_file = match a.output.as_deref() {
        Some(p) if p.as_os_str() != "-" => Some(Opened::open(p)?),
        _ => None,
    };
    for ((r, s), name) in readers.iter_mut().zip(&starts).zip(&names) {
        if s.rows > 0 {
            r.seek(s)?;
        }
        // event times no window can place are refused at their line
        r.set_event_time_domain(engine.event_time_domain(name)?);
    }
    let mut report = match (report_file.as_mut(), a.report.as_deref()) {
        (Some(o), Some(p)) => {
            let mut f = o.take();
            let keep = if exactly_once {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut f, &mut text).map_err(|e| out_err(p, e))?;
                resume::committed_report_lines(&text, epoch)
            } else {
                String::new()
            };
            f.set_len(0).map_err(|e| out_err(p, e))?;
            f.rewind().map_err(|e| out_err(p, e))?;
            f.write_all(keep.as_bytes()).map_err(|e| out_err(p, e))?;
            Some(BufWriter::new(f))
        }
        _ => None,
    };
    // a database sink: exactly once with a state root (its epochs are this
    // run's: the state root and the view's fingerprint name the run)
    let run_id = format!(
        "{} {}",
        a.state_root.as_deref().unwrap_or("(no state root)"),
        engine.fingerprint(&view)?
    );
    let mut db = match &sink_url {
        Some(u) => Some(crate::io::db::DbSink::open(
            u,
            &view,
            engine.output_schema(&view)?,
            output_mode,
            engine.key_columns(&view)?,
            engine.window_columns(&view)?,
            &run_id,
            !exactly_once,
        )?),
        None => None,
    };
    let mut sink = None;
    let mut csv = None;
    let output_path = a.output.as_deref().map(canonical);
    if let Some(p) = &a.output {
        match output_file.as_mut() {
            Some(o) if exactly_once => csv = Some(ExactlyOnceCsv::new(p, o.take(), committed_len)?),
            Some(o) => sink = Some(Sink::from_file(p, o.take(), engine.output_schema(&view)?)?),
            None => sink = Some(Sink::open(p, engine.output_schema(&view)?)?),
        }
    }

    // 4. the triggers
    let mut emitted = 0usize;
    let mut emit = |r: &TriggerReport| -> Result<u64> {
        let batches: Vec<RecordBatch> = r
            .views
            .iter()
            .flat_map(|v| v.output.iter().cloned())
            .collect();
        emitted += batches.iter().map(|b| b.num_rows()).sum::<usize>();
        let mut len = 0;
        if let Some(s) = sink.as_mut() {
            for b in &batches {
                s.write(b)?;
            }
        }
        if let Some(c) = csv.as_mut() {
            len = c.write(&batches)?;
        }
        if let Some(d) = db.as_mut() {
            d.write(r.epoch, &run_id, &batches)?;
        }
        if let (Some(w), Some(p)) = (report.as_mut(), a.report.as_ref()) {
            for line in r.to_json_lines() {
                writeln!(w, "{line}").map_err(|e| out_err(p, e))?;
            }
            w.flush().map_err(|e| out_err(p, e))?;
        }
        Ok(len)
    };
    let record = |readers: &[InputReader], len: u64, finished: bool| -> serde_json::Value {
        RunRecord {
            output_len: len,
            sink: Some(match &output_path {
                Some(p) => SinkRecord::Csv {
                    path: p.display().to_string(),
                    len,
                },
                None => SinkRecord::None,
            }),
            inputs: names
                .iter()
                .zip(readers)
                .map(|(n, r)| {
                    (
                        n.clone(),
                        InputRecord {
                            identity: r.identity().clone(),
                            position: r.position(),
                        },
                    )
                })
                .collect(),
            finished,
        }
        .to_extra()
    };
    let limit = a.max_triggers.unwrap_or(usize::MAX);
    let mut refusals = Refusals {
        shown: 0,
        hidden: 0,
    };
    let mut ran = 0;
    let mut ended = false;
    let interrupt = super::signals::Interrupt::install()
        .map_err(|e| CliError::Refused(format!("cannot handle SIGINT/SIGTERM: {e}")))?;
    let mut interrupted = None;
    while ran < limit {
        if let Some(sig) = interrupt.received() {
            interrupted = Some(sig);
            break;
        }
        let mut chunks = Vec::with_capacity(readers.len());
        for r in &mut readers {
            chunks.push(r.next_chunk(a.rows_per_trigger)?);
        }
        if chunks.iter().all(|c| c.rows == 0) {
            ended = true;
            break;
        }
        if a.strict {
            for (r, c) in readers.iter().zip(&chunks) {
                if let Some(bad) = c.refused.first() {
                    return Err(Error::Input {
                        path: r.path().to_path_buf(),
                        message: format!(
                            "{} (--strict: stopped before trigger {} was applied; the {ran} trigger{} before it {} applied)",
                            bad.describe(),
                            engine.epoch() + 1,
                            if ran == 1 { "" } else { "s" },
                            if ran == 1 { "was" } else { "were" },
                        ),
                    }
                    .into());
                }
            }
        }
        for (si, (r, c)) in readers.iter().zip(chunks).enumerate() {
            if c.rows == 0 {
                continue;
            }
            let pos = r.position().rows;
            let batch = c
                .batch
                .unwrap_or_else(|| RecordBatch::new_empty(r.schema().clone()));
            engine.push_at(&names[si], batch, pos)?;
            if !c.refused.is_empty() {
                for x in &c.refused {
                    refusals.note(r.path(), x);
                }
                let rows: Vec<InvalidRow> = c.refused.into_iter().map(|x| x.row).collect();
                engine.push_invalid(&names[si], rows)?;
            }
        }
        let r = engine.trigger()?;
        stop_if_uncommitted(&r)?;
        let len = emit(&r)?;
        if exactly_once {
            engine.checkpoint(record(&readers, len, false))?;
        }
        ran += 1;
    }
    if ended {
        let r = engine.finish()?;
        stop_if_uncommitted(&r)?;
        let len = emit(&r)?;
        if exactly_once {
            engine.checkpoint(record(&readers, len, true))?;
        }
    }
    if exactly_once {
        engine.sync_checkpoints()?;
    }
    if let Some(s) = sink {
        s.close()?;
    }
    if refusals.hidden > 0 {
        eprintln!(
            "thund run: {} more refused rows not shown (the report's invalid_rows counts them all)",
            refusals.hidden
        );
    }
    let c = engine.counters(&view)?;
    let stopped = match interrupted {
        _ if ended => " and the end of stream".to_string(),
        Some((_, name)) => format!(" (stopped by {name})"),
        None => " (stopped by --max-triggers)".to_string(),
    };
    eprintln!(
        "thund run: {ran} triggers{stopped}, {} rows in, {} late, {} invalid, {} windows closed, {} rows out{}",
        c.rows,
        c.late_rows_dropped,
        c.invalid_rows,
        c.windows_closed,
        emitted,
        match peak_rss() {
            Some(b) => format!(", peak RSS {:.1} MB", b as f64 / 1e6),
            None => String::new(),
        }
    );
    if let Some((signal, name)) = interrupted {
        let message = if exactly_once {
            format!(
                "interrupted by {name} after epoch {}, which is checkpointed: \
                 the same command resumes from it",
                engine.epoch()
            )
        } else {
            format!(
                "interrupted by {name} after epoch {}: without --state-root a rerun \
                 starts over",
                engine.epoch()
            )
        };
        return Err(CliError::Interrupted { signal, message });
    }
    Ok(())
}
