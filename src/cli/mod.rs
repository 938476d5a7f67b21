//! The `thund` command line: `demo`, `run`, `explain`, `inspect` (behind
//! the default `cli` feature).
//!
//! One file per command: `demo` (with its bid generator), `run`, and
//! `inspect`/`explain`.

mod demo;
mod inspect;
mod run;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::Result;

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
        Command::Demo(a) => demo::demo(a),
        Command::Run(a) => run::run(a),
        Command::Explain(a) => inspect::explain(a),
        Command::Inspect(a) => inspect::inspect(a),
    }
}
