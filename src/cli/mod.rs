//! The `thund` command line: `demo`, `run`, `explain`, `inspect` (behind
//! the default `cli` feature).
//!
//! One file per command: `demo` (with its bid generator), `run`, and
//! `inspect`/`explain`.

/// `print!` to stdout that gives a failed write (a reader gone: `thund
/// explain … | head -1`) as an error, where `print!` would panic.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout(), $($t)*).map_err(crate::cli::CliError::Stdout)
    }};
}

/// `println!` as [`out!`] does `print!`.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($t)*).map_err(crate::cli::CliError::Stdout)
    }};
}

mod demo;
mod inspect;
mod resume;
mod run;
mod signals;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// What the command line reports when it stops: an error of the engine or
/// of an input or output file, or a refusal of the command line itself that
/// says what to do instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// An engine, input or output error.
    #[error(transparent)]
    Engine(#[from] crate::Error),
    /// The command line refuses to go on: why, and what to do.
    #[error("{0}")]
    Refused(String),
    /// Standard output could not be written (its reader is gone, or the
    /// disk behind it is full).
    #[error("stdout: {0}")]
    Stdout(std::io::Error),
    /// `thund run` stopped on SIGINT (Ctrl-C) or SIGTERM between two
    /// triggers, after the last one was applied (and, with a state root,
    /// checkpointed). The process exits with 128 + the signal's number.
    #[error("{message}")]
    Interrupted {
        /// The signal's number (2 for SIGINT, 15 for SIGTERM).
        signal: i32,
        /// What was applied and how to go on.
        message: String,
    },
}

impl CliError {
    /// The process's exit code for this error: 128 + the signal's number
    /// for [`CliError::Interrupted`] (130 after Ctrl-C), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Interrupted { signal, .. } => (128 + signal).clamp(1, 255) as u8,
            _ => 1,
        }
    }
}

/// `Result` of the command line.
pub type Result<T, E = CliError> = std::result::Result<T, E>;

/// A count that must be at least 1.
fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

/// `--workers`: a count from 1 to [`thund_dataflows::MAX_WORKERS`].
fn worker_count(s: &str) -> std::result::Result<usize, String> {
    let max = thund_dataflows::MAX_WORKERS;
    match at_least_one(s)? {
        n if n > max => Err(format!(
            "at most {max} (each worker is a thread of this process)"
        )),
        n => Ok(n),
    }
}

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
    /// Bids per trigger (at least 1).
    #[arg(long, default_value_t = 5_000, value_parser = at_least_one)]
    pub rows_per_trigger: usize,
    /// Seed of the generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Rows shown per closed window.
    #[arg(long, default_value_t = 3)]
    pub show: usize,
}

/// Where a view comes from: a TOML spec, or a SQL DDL file (`CREATE
/// SOURCE …; CREATE VIEW …`) and which of its views.
#[derive(Args, Debug)]
pub struct ViewArgs {
    /// The view spec (TOML).
    #[arg(long, required_unless_present = "sql", conflicts_with = "sql")]
    pub view: Option<PathBuf>,
    /// A pipeline in SQL DDL: `CREATE SOURCE … (…, WATERMARK FOR ts AS ts -
    /// INTERVAL …)` and `CREATE VIEW … AS …` statements.
    #[arg(long)]
    pub sql: Option<PathBuf>,
    /// With --sql: the view to take, when the file declares several.
    #[arg(long, requires = "sql")]
    pub view_name: Option<String>,
}

/// The DDL file at `path`, parsed.
fn pipeline(path: &std::path::Path) -> Result<crate::spec::ddl::Pipeline> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::Error::SpecFile {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    crate::spec::ddl::parse(&text).map_err(|e| in_file(path, e))
}

/// Whether a state root URL is the in-process `memory://` store.
fn in_memory(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("memory://"))
}

/// An error of the DDL file at `path`, the file named first.
fn in_file(path: &std::path::Path, e: crate::Error) -> CliError {
    CliError::Refused(format!("{}: {e}", path.display()))
}

impl ViewArgs {
    /// The views these flags name: the TOML spec, or the DDL file's views
    /// (`all`: every one unless --view-name picks one; else exactly one).
    fn specs(&self, all: bool) -> Result<Vec<crate::ViewSpec>> {
        let (Some(path), None) = (&self.sql, &self.view) else {
            let path = self.view.as_ref().ok_or_else(|| {
                CliError::Refused("give the view as --view spec.toml or --sql pipeline.sql".into())
            })?;
            return Ok(vec![crate::ViewSpec::from_toml_file(path)?]);
        };
        let views = pipeline(path)?.views;
        let names = || {
            views
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.view_name {
            Some(n) => match views.iter().find(|v| v.name == *n) {
                Some(v) => Ok(vec![v.clone()]),
                None => Err(CliError::Refused(format!(
                    "{} declares no view `{n}` (its views: {})",
                    path.display(),
                    names()
                ))),
            },
            None if all || views.len() == 1 => Ok(views),
            None => Err(CliError::Refused(format!(
                "{} declares {} views ({}): choose one with --view-name",
                path.display(),
                views.len(),
                names()
            ))),
        }
    }

    /// With --sql: what `engine` would refuse of view `name` (its SQL over
    /// the declared columns), placed at its statement and query as a parse
    /// error of the file is. Called once the inputs are checked against the
    /// sources, before the view is created in `engine`.
    fn check(&self, engine: &crate::Engine, name: &str) -> Result<()> {
        let (Some(path), None) = (&self.sql, &self.view) else {
            return Ok(());
        };
        engine
            .check_pipeline(&pipeline(path)?, |n| n == name)
            .map_err(|e| in_file(path, e))
    }

    /// The one view these flags name.
    fn spec(&self) -> Result<crate::ViewSpec> {
        let mut v = self.specs(false)?;
        v.pop()
            .ok_or_else(|| CliError::Refused("no view to run".into()))
    }
}

/// `thund run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The view: a TOML spec or a SQL DDL file.
    #[command(flatten)]
    pub view: ViewArgs,
    /// An input as SOURCE=PATH (.csv or .parquet); one per source (its name in any ASCII case, when no other source has it).
    #[arg(long = "input", value_name = "SOURCE=PATH", required = true)]
    pub inputs: Vec<String>,
    /// Rows of each source per trigger (at least 1): rows of the file,
    /// refused ones included.
    #[arg(long, default_value_t = 10_000, value_parser = at_least_one)]
    pub rows_per_trigger: usize,
    /// Timely workers of the incremental path (1 to 256): one runs on the
    /// trigger thread, N >= 2 on N threads of their own, the keys split
    /// between them. The rows are the same for every number (their order
    /// within a trigger is not), and a state root written with one number
    /// resumes with another.
    #[arg(long, default_value_t = 1, value_parser = worker_count)]
    pub workers: usize,
    /// Where emitted rows go: a .csv or .parquet file, or `-` for CSV on stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// A database table the emitted rows are applied to, exactly once with
    /// --state-root: `sqlite:///abs/path.db?table=name` or
    /// `postgres://user@host:port/db?table=name` (the table defaults to the
    /// view's name; Append inserts, Update upserts on the window and the
    /// view's key, Complete replaces).
    #[arg(long)]
    pub sink: Option<String>,
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
    /// Stop at the first row of an input that is refused (a cell that does
    /// not parse as its column's type, a row with the wrong number of
    /// fields, an empty event time), naming its file, line and column,
    /// before anything of that trigger is applied. Without it such rows are
    /// refused, counted as `invalid_rows` and the run goes on.
    #[arg(long)]
    pub strict: bool,
    /// Take over the view's writer lease in the state root even though
    /// another process holds it (or the lease file is unreadable). RISK: if
    /// that process is in fact still running, both write the same state root
    /// and output file, and the result is wrong; use it only when you know
    /// the holder is gone (it ran on another host, in a replaced container,
    /// or the lease file is garbage). A holder that died on this host is
    /// taken over without this flag.
    #[arg(long, requires = "state_root")]
    pub takeover: bool,
}

/// `thund explain`.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The view: a TOML spec, or a SQL DDL file (every view of it unless
    /// --view-name picks one).
    #[command(flatten)]
    pub view: ViewArgs,
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
