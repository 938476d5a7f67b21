//! Running the real `thund` binary from tests: a command, its outcome, and
//! the rows of CSV and Parquet files it wrote. Shared through `#[path]`.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary under test: this build's, or `THUND_BIN` (to run the same
/// tests against another build, e.g. to see them fail before a fix).
pub fn thund() -> Command {
    match std::env::var_os("THUND_BIN") {
        Some(bin) => Command::new(bin),
        None => Command::new(env!("CARGO_BIN_EXE_thund")),
    }
}

/// What a run of the binary did.
#[derive(Debug)]
pub struct Outcome {
    /// Exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Outcome {
    /// Exit code 0.
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Run `thund` with `args`.
pub fn run<I, S>(args: I) -> Outcome
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = thund().args(args).output().expect("run thund");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

/// Write `text` to `dir/name`.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// The data rows of a CSV file (header dropped), sorted; none if it does not exist.
pub fn csv_rows(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    lines.sort();
    lines
}

/// The rows of a Parquet file as CSV text, sorted; an error if it is not
/// readable Parquet.
pub fn parquet_rows(path: &Path) -> Result<Vec<String>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    {
        let mut w = arrow::csv::WriterBuilder::new()
            .with_header(false)
            .build(&mut buf);
        for b in reader {
            w.write(&b.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
    }
    let mut lines: Vec<String> = String::from_utf8_lossy(&buf)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    Ok(lines)
}

/// The JSON lines of a `--report` file.
pub fn report(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// A `file://` URL for a local directory.
pub fn url(dir: &Path) -> String {
    format!("file://{}", dir.display())
}

/// A TOML view spec (what `thund run --view` reads) as one SQL DDL text
/// (what `thund run --sql` reads): each source a `CREATE SOURCE` with the
/// given `columns` and the spec's watermark, the view a `CREATE VIEW` with
/// the spec's modes and its window written in the SQL ([`super::in_sql`]).
pub fn ddl_of(toml: &str, columns: &str) -> String {
    let spec = thund::ViewSpec::from_toml(toml).expect("a TOML view");
    let in_sql = super::in_sql(&spec).expect("a window with a SQL spelling");
    let mark = &spec.watermark;
    let mut out = String::new();
    for s in &spec.sources {
        out.push_str(&format!(
            "CREATE SOURCE {} ({columns},\n  WATERMARK FOR {t} AS {t} - INTERVAL '{}' MILLISECOND)",
            s.name,
            mark.allowed_lateness.as_millis(),
            t = s.event_time,
        ));
        if !mark.idle_timeout.is_zero() {
            let idle = mark.idle_timeout.as_millis();
            out.push_str(&format!(" WITH (idle_timeout = '{idle}ms')"));
        }
        out.push_str(";\n");
    }
    let lower = |d: String| d.to_ascii_lowercase();
    out.push_str(&format!(
        "CREATE VIEW {} WITH (output = '{}', mode = '{}') AS\n  {};\n",
        spec.name,
        lower(format!("{:?}", spec.output)),
        lower(format!("{:?}", spec.mode)),
        in_sql.sql
    ));
    out
}

/// The flag that passes `spec` to `thund run` or `explain`: `--sql` for a
/// `.sql` pipeline, `--view` for a TOML spec.
pub fn spec_flag(spec: &Path) -> &'static str {
    match spec.extension().is_some_and(|e| e == "sql") {
        true => "--sql",
        false => "--view",
    }
}
