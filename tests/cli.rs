//! The `thund` binary: `run` over CSV files, `explain`, `demo`, and errors.

use std::path::Path;
use std::process::Command;

fn thund() -> Command {
    Command::new(env!("CARGO_BIN_EXE_thund"))
}

const VIEW: &str = r#"
name = "bids_per_auction"
sql = "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume FROM bids GROUP BY auction"
output = "append"
[[source]]
name = "bids"
event_time = "ts"
[watermark]
allowed_lateness = "2s"
[window]
kind = "tumbling"
size = "10s"
"#;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

/// Data rows of a CSV file, sorted (header dropped).
fn rows(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("read output");
    let mut lines: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    lines.sort();
    lines
}

fn run_ok(args: &[&str]) -> String {
    let out = thund().args(args).output().expect("run thund");
    assert!(
        out.status.success(),
        "thund {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn run_replays_a_csv_with_rfc3339_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = write(dir.path(), "v.toml", VIEW);
    // 3 rows per trigger: trigger 1 ends at W = 13s - 2s = 11s, closing [0s,10s);
    // in trigger 2 the 2s row is late; finish closes [10s,20s) and [20s,30s).
    let csv = write(
        dir.path(),
        "bids.csv",
        "auction,price,ts\n\
         1,10,2026-01-01T00:00:01Z\n\
         2,20,2026-01-01T00:00:04Z\n\
         1,30,2026-01-01T00:00:13Z\n\
         1,5,2026-01-01T00:00:02Z\n\
         2,7,2026-01-01T00:00:25Z\n",
    );
    let out = dir.path().join("out.csv");
    let report = dir.path().join("report.jsonl");
    run_ok(&[
        "run",
        "--view",
        view.to_str().expect("utf8"),
        "--input",
        &format!("bids={}", csv.display()),
        "--rows-per-trigger",
        "3",
        "--output",
        out.to_str().expect("utf8"),
        "--report",
        report.to_str().expect("utf8"),
    ]);
    assert_eq!(
        rows(&out),
        vec![
            "2026-01-01T00:00:00,2026-01-01T00:00:10,1,1,10",
            "2026-01-01T00:00:00,2026-01-01T00:00:10,2,1,20",
            "2026-01-01T00:00:10,2026-01-01T00:00:20,1,1,30",
            "2026-01-01T00:00:20,2026-01-01T00:00:30,2,1,7",
        ]
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&report)
        .expect("report")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 3, "two triggers and the finish");
    for key in [
        "epoch",
        "watermark",
        "rows",
        "late_rows_dropped",
        "windows_closed",
        "path",
        "latency_us",
    ] {
        assert!(lines.iter().all(|l| l.get(key).is_some()), "missing {key}");
    }
    assert_eq!(lines[0]["watermark"], 1_767_225_611_000i64);
    assert_eq!(lines[1]["late_rows_dropped"], 1);
    assert_eq!(lines[0]["path"], "incremental");
    // the report carries the dataflow's frontier next to W, and they agree
    assert!(
        lines.iter().all(|l| l["frontier"] == l["watermark"]),
        "{lines:?}"
    );
}

#[test]
fn run_takes_integer_millisecond_times_and_writes_parquet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = write(dir.path(), "v.toml", VIEW);
    let csv = write(
        dir.path(),
        "bids.csv",
        "auction,price,ts\n1,10,1000\n1,5,9999\n2,20,10000\n",
    );
    let out = dir.path().join("out.parquet");
    run_ok(&[
        "run",
        "--view",
        view.to_str().expect("utf8"),
        "--input",
        &format!("bids={}", csv.display()),
        "--output",
        out.to_str().expect("utf8"),
    ]);
    let file = std::fs::File::open(&out).expect("parquet");
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("reader")
        .build()
        .expect("build");
    let batches: Vec<_> = reader.map(|b| b.expect("batch")).collect();
    let n: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(n, 2);
    let schema = batches[0].schema();
    assert_eq!(schema.field(0).name(), "window_start");
    assert_eq!(
        schema.field(0).data_type(),
        &arrow::datatypes::DataType::Int64
    );
}

#[test]
fn explain_shows_the_path_and_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with_schema = VIEW.replace(
        "event_time = \"ts\"",
        "event_time = \"ts\"\nschema = \"auction BIGINT, price BIGINT, ts TIMESTAMP\"",
    );
    let view = write(dir.path(), "v.toml", &with_schema);
    let text = run_ok(&["explain", "--view", view.to_str().expect("utf8")]);
    assert!(text.contains("path: incremental"), "{text}");
    assert!(text.contains("agg:  Count"), "{text}");
    assert!(text.contains("tumbling 10s"), "{text}");

    let missing = dir.path().join("nope.csv");
    let out = thund()
        .args(["run", "--view", view.to_str().expect("utf8"), "--input"])
        .arg(format!("bids={}", missing.display()))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope.csv"), "{err}");

    let bad = write(dir.path(), "bad.toml", &VIEW.replace("10s", "ten seconds"));
    let out = thund()
        .args(["explain", "--view", bad.to_str().expect("utf8")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("window.size") && err.contains("ten seconds"),
        "{err}"
    );
}

#[test]
fn demo_runs_and_shows_windows_closing() {
    let text = run_ok(&["demo", "--events", "20000"]);
    assert!(text.contains("bids_per_auction ["), "{text}");
    assert!(text.contains("epoch"), "{text}");
    assert!(text.contains("done in"), "{text}");
}
