//! The `thund` command line: `demo`, `run`, `explain`.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::demo::{demo_views, BidGenerator};
use crate::error::{Error, Result};
use crate::io::{read_input, rechunk, Sink};
use crate::time::display;
use crate::{Engine, TriggerReport, ViewSpec};

/// Þund: incremental SQL views over event streams.
#[derive(Parser, Debug)]
#[command(name = "thund", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate a stream of auction bids and show windows closing as the watermark passes them.
    Demo(DemoArgs),
    /// Replay CSV or Parquet files through a view in triggers; write what it emits.
    Run(RunArgs),
    /// Show a view's plan and the path it takes.
    Explain(ExplainArgs),
    /// List a state root's views, epochs, watermarks, files and row counts.
    Inspect(InspectArgs),
}

/// `thund inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The state root: file:///abs/path (or memory://, only within one process).
    pub url: String,
}

/// `thund demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Number of bids to generate.
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
    /// Bids per trigger.
    #[arg(long, default_value_t = 5_000)]
    pub rows_per_trigger: usize,
    /// Seed of the generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Rows shown per closed window.
    #[arg(long, default_value_t = 3)]
    pub show: usize,
}

/// `thund run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The view spec (TOML).
    #[arg(long)]
    pub view: PathBuf,
    /// An input as SOURCE=PATH (.csv or .parquet); one per source.
    #[arg(long = "input", value_name = "SOURCE=PATH", required = true)]
    pub inputs: Vec<String>,
    /// Rows of each source per trigger.
    #[arg(long, default_value_t = 10_000)]
    pub rows_per_trigger: usize,
    /// Where emitted rows go: a .csv or .parquet file, or `-` for CSV on stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// A JSON-lines file with one object per trigger.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Checkpoint every trigger to this state root (file:///abs/path) and
    /// resume from it when started again; `--output` is then an exactly-once
    /// CSV sink across restarts.
    #[arg(long)]
    pub state_root: Option<String>,
    /// Stop after N triggers of this process, without ending the stream
    /// (a clean, simulated crash; run again to resume).
    #[arg(long)]
    pub max_triggers: Option<usize>,
}

/// `thund explain`.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The view spec (TOML).
    #[arg(long)]
    pub view: PathBuf,
    /// Inputs to infer source schemas from (SOURCE=PATH), for sources whose spec has no `schema`.
    #[arg(long = "input", value_name = "SOURCE=PATH")]
    pub inputs: Vec<String>,
}

/// Parse the process arguments and run.
pub fn main_from_args() -> Result<()> {
    run_cli(Cli::parse())
}

/// Run a parsed command line.
pub fn run_cli(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Demo(a) => demo(a),
        Command::Run(a) => run(a),
        Command::Explain(a) => explain(a),
        Command::Inspect(a) => inspect(a),
    }
}

fn parse_inputs(spec: &ViewSpec, inputs: &[String]) -> Result<Vec<(String, PathBuf)>> {
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
fn load_inputs(spec: &mut ViewSpec, inputs: &[(String, PathBuf)]) -> Result<Vec<Vec<RecordBatch>>> {
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

fn run(a: RunArgs) -> Result<()> {
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
                    r.fell_back_from.join("; ")
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

fn inspect(a: InspectArgs) -> Result<()> {
    use thund_checkpoint::decision::{ManifestState, PointerState};
    let store = thund_checkpoint::BlockingCheckpointStore::open(&a.url)
        .map_err(|e| Error::Checkpoint(format!("{}: {e}", a.url)))?;
    let ck = |e: thund_checkpoint::Error| Error::Checkpoint(e.to_string());
    let views = store.views().map_err(ck)?;
    if views.is_empty() {
        println!("{}: no views", a.url);
    }
    for v in views {
        let listing = store.list(&v).map_err(ck)?;
        let latest = match &listing.latest {
            PointerState::Points(e) => format!("epoch {e}"),
            PointerState::Missing => "missing".into(),
            PointerState::Unreadable(r) => format!("unreadable ({r})"),
        };
        println!("view {v}: latest pointer {latest}");
        for (epoch, el) in &listing.epochs {
            match &el.manifest {
                ManifestState::Missing => println!("  epoch {epoch}: not committed (no manifest)"),
                ManifestState::Unreadable(r) => {
                    println!("  epoch {epoch}: unreadable manifest: {r}")
                }
                ManifestState::Valid(m) => {
                    let rows: u64 = m.files.iter().map(|f| f.rows).sum();
                    let bytes: u64 = m.files.iter().map(|f| f.bytes).sum();
                    println!(
                        "  epoch {epoch}: COMMITTED, W {}, {} files, {rows} rows, {bytes} bytes, late {}, windows closed {}",
                        display(m.watermark),
                        m.files.len(),
                        m.counters.late_rows_dropped,
                        m.counters.windows_closed
                    );
                    for f in &m.files {
                        println!(
                            "    {} (operator {}, worker {}, {} rows, {} bytes, written by epoch {})",
                            f.path, f.operator, f.worker, f.rows, f.bytes, f.epoch
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

fn explain(a: ExplainArgs) -> Result<()> {
    let mut spec = ViewSpec::from_toml_file(&a.view)?;
    let inputs = parse_inputs(&spec, &a.inputs)?;
    load_inputs(&mut spec, &inputs)?;
    let view = spec.name.clone();
    let mut engine = Engine::builder().build()?;
    engine.create_view(spec)?;
    print!("{}", engine.explain(&view)?);
    Ok(())
}

/// Render a closed window's rows as `col=value` pairs, at most `show` rows.
fn window_lines(batch: &RecordBatch, show: usize) -> Vec<String> {
    let opts = FormatOptions::default();
    let schema = batch.schema();
    let fmts: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
        .collect();
    let mut lines = Vec::new();
    for r in 0..batch.num_rows().min(show) {
        let cells: Vec<String> = schema
            .fields()
            .iter()
            .enumerate()
            .skip(2)
            .map(|(i, f)| match &fmts[i] {
                Ok(fm) => format!("{}={}", f.name(), fm.value(r)),
                Err(_) => format!("{}=?", f.name()),
            })
            .collect();
        lines.push(cells.join(" "));
    }
    if batch.num_rows() > show {
        lines.push(format!("… {} more rows", batch.num_rows() - show));
    }
    lines
}

fn demo(a: DemoArgs) -> Result<()> {
    let started = Instant::now();
    let mut engine = Engine::builder().build()?;
    let views = demo_views()?;
    let names: Vec<String> = views.iter().map(|v| v.name.clone()).collect();
    for v in views {
        engine.create_view(v)?;
    }
    let mut gen = BidGenerator::new(a.seed);
    let per = a.rows_per_trigger.max(1);
    let triggers = a.events.div_ceil(per);
    let pb = ProgressBar::new(triggers as u64 + 1);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} triggers {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    println!(
        "Þund demo: {} bids in {} triggers, views: {}",
        a.events,
        triggers,
        names.join(", ")
    );
    let mut latencies = Vec::new();
    let mut pushed = 0usize;
    for k in 0..=triggers {
        let last = k == triggers;
        let report = if last {
            engine.finish()?
        } else {
            let n = per.min(a.events - pushed);
            engine.push("bids", gen.batch(n)?)?;
            pushed += n;
            engine.trigger()?
        };
        latencies.push(report.latency);
        let mut lines = Vec::new();
        for v in &report.views {
            for b in &v.output {
                let (Some(s), Some(e)) = (
                    b.column(0)
                        .as_any()
                        .downcast_ref::<arrow::array::TimestampMillisecondArray>(),
                    b.column(1)
                        .as_any()
                        .downcast_ref::<arrow::array::TimestampMillisecondArray>(),
                ) else {
                    continue;
                };
                if b.num_rows() == 0 {
                    continue;
                }
                lines.push(format!(
                    "  {} [{}, {}) closed: {}",
                    v.view,
                    display(Some(s.value(0))),
                    display(Some(e.value(0))),
                    window_lines(b, a.show).join(" | ")
                ));
            }
        }
        let first = &report.views[0];
        let closed: u64 = report.views.iter().map(|v| v.windows_closed).sum();
        let late: u64 = report
            .views
            .iter()
            .map(|v| v.late_rows_dropped)
            .max()
            .unwrap_or(0);
        lines.push(format!(
            "epoch {:>3} | W {} | rows {:>6} | late {:>4} | closed {:>3} | {:>8.2?}",
            report.epoch,
            display(first.watermark),
            first.rows,
            late,
            closed,
            report.latency
        ));
        pb.suspend(|| {
            for l in &lines {
                println!("{l}");
            }
        });
        pb.inc(1);
        pb.set_message(format!("W {}", display(first.watermark)));
    }
    pb.finish_and_clear();
    latencies.sort();
    let p50 = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or(Duration::ZERO);
    println!(
        "done in {:.2?}; trigger latency p50 {:.2?}",
        started.elapsed(),
        p50
    );
    for n in &names {
        let c = engine.counters(n)?;
        println!(
            "  {n}: {} rows, {} late, {} windows closed",
            c.rows, c.late_rows_dropped, c.windows_closed
        );
    }
    Ok(())
}
