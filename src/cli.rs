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
    let mut engine = Engine::builder().build()?;
    engine.create_view(spec)?;
    let chunks: Vec<Vec<Vec<RecordBatch>>> = data
        .iter()
        .map(|d| rechunk(d, a.rows_per_trigger))
        .collect();
    let triggers = chunks.iter().map(|c| c.len()).max().unwrap_or(0);
    let mut sink = match &a.output {
        Some(p) => Some(Sink::open(p, engine.output_schema(&view)?)?),
        None => None,
    };
    let mut report = match &a.report {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p).map_err(
            |e| Error::Output {
                path: p.clone(),
                message: e.to_string(),
            },
        )?)),
        None => None,
    };
    let mut emitted = 0usize;
    let mut emit = |r: &TriggerReport, sink: &mut Option<Sink>| -> Result<()> {
        for v in &r.views {
            for b in &v.output {
                emitted += b.num_rows();
                if let Some(s) = sink.as_mut() {
                    s.write(b)?;
                }
            }
        }
        if let (Some(w), Some(p)) = (report.as_mut(), a.report.as_ref()) {
            for line in r.to_json_lines() {
                writeln!(w, "{line}").map_err(|e| Error::Output {
                    path: p.clone(),
                    message: e.to_string(),
                })?;
            }
        }
        Ok(())
    };
    for k in 0..triggers {
        for (si, c) in chunks.iter().enumerate() {
            for b in c.get(k).into_iter().flatten() {
                engine.push(&names[si], b.clone())?;
            }
        }
        let r = engine.trigger()?;
        emit(&r, &mut sink)?;
    }
    let r = engine.finish()?;
    emit(&r, &mut sink)?;
    if let Some(s) = sink {
        s.close()?;
    }
    if let (Some(mut w), Some(p)) = (report, a.report.as_ref()) {
        w.flush().map_err(|e| Error::Output {
            path: p.clone(),
            message: e.to_string(),
        })?;
    }
    let c = engine.counters(&view)?;
    eprintln!(
        "thund run: {} triggers, {} rows in, {} late, {} invalid, {} windows closed, {} rows out",
        triggers + 1,
        c.rows,
        c.late_rows_dropped,
        c.invalid_rows,
        c.windows_closed,
        emitted
    );
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
