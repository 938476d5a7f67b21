//! The `thund` binary: `run` over CSV files, `explain`, `demo`, and errors.
//! The view is given as a TOML spec (`--view`) or as a SQL pipeline with
//! its window in the query (`--sql`): the runs below take both.

use std::path::Path;
use std::process::Command;

use crate::common::bin;

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

/// The bids columns with integer millisecond times, as DDL declares them.
const INT_TYPES: &str = "auction BIGINT, price BIGINT, ts BIGINT";

/// `toml` as a TOML spec (`v.toml`) and as a SQL pipeline (`v.sql`, with
/// the sources' `columns`), in `dir`.
fn spellings(dir: &Path, toml: &str, columns: &str) -> [std::path::PathBuf; 2] {
    [
        write(dir, "v.toml", toml),
        write(dir, "v.sql", &bin::ddl_of(toml, columns)),
    ]
}

/// [`VIEW`] as a SQL pipeline, `v.sql` in `dir`.
fn pipeline(dir: &Path) -> std::path::PathBuf {
    write(dir, "v.sql", &bin::ddl_of(VIEW, INT_TYPES))
}

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
    let types = "auction BIGINT, price BIGINT, ts TIMESTAMP";
    for view in spellings(dir.path(), VIEW, types) {
        replays_a_csv_with_rfc3339_times(dir.path(), &view);
    }
}

fn replays_a_csv_with_rfc3339_times(dir: &Path, view: &Path) {
    // 3 rows per trigger: trigger 1 ends at W = 13s - 2s = 11s, closing [0s,10s);
    // in trigger 2 the 2s row is late; finish closes [10s,20s) and [20s,30s).
    let csv = write(
        dir,
        "bids.csv",
        "auction,price,ts\n\
         1,10,2026-01-01T00:00:01Z\n\
         2,20,2026-01-01T00:00:04Z\n\
         1,30,2026-01-01T00:00:13Z\n\
         1,5,2026-01-01T00:00:02Z\n\
         2,7,2026-01-01T00:00:25Z\n",
    );
    let out = dir.join("out.csv");
    let report = dir.join("report.jsonl");
    run_ok(&[
        "run",
        bin::spec_flag(view),
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
    assert_eq!(
        lines.len(),
        3,
        "{}: two triggers and the finish",
        view.display()
    );
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
    for view in spellings(dir.path(), VIEW, INT_TYPES) {
        integer_millisecond_times_to_parquet(dir.path(), &view);
    }
}

fn integer_millisecond_times_to_parquet(dir: &Path, view: &Path) {
    let csv = write(
        dir,
        "bids.csv",
        "auction,price,ts\n1,10,1000\n1,5,9999\n2,20,10000\n",
    );
    let out = dir.join("out.parquet");
    run_ok(&[
        "run",
        bin::spec_flag(view),
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

/// `n` in-order bids with integer millisecond times, as CSV text.
fn int_bids(n: usize) -> String {
    let mut s = String::from("auction,price,ts\n");
    for i in 0..n {
        s.push_str(&format!(
            "{},{},{}\n",
            i % 5,
            1 + (i * 7) % 97,
            1_000 + i * 173
        ));
    }
    s
}

fn run_args(view: &Path, input: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "run".to_string(),
        bin::spec_flag(view).into(),
        view.display().to_string(),
        "--input".into(),
        format!("bids={}", input.display()),
        "--rows-per-trigger".into(),
        "20".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[test]
fn a_declared_schema_wins_and_the_header_must_match_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let declared = |schema: &str| {
        VIEW.replace(
            "event_time = \"ts\"",
            &format!("event_time = \"ts\"\nschema = \"{schema}\""),
        )
    };
    let input = write(
        dir.path(),
        "bids.csv",
        "auction,price,ts\n1,10,1000\n1,30,2000\n2,5,12000\n",
    );
    // declared in the TOML spec's schema, or in the pipeline's CREATE SOURCE
    let types = "auction BIGINT, price DOUBLE, ts BIGINT";
    for view in spellings(dir.path(), &declared(types), types) {
        let out = dir.path().join("out.csv");
        let o = bin::run(run_args(
            &view,
            &input,
            &["--output", out.to_str().expect("utf8")],
        ));
        assert!(o.ok(), "{}: {}", view.display(), o.stderr);
        // SUM over the declared DOUBLE, not over an inferred BIGINT
        assert_eq!(rows(&out), vec!["0,10000,1,2,40.0", "10000,20000,2,1,5.0"]);
    }

    let types = "auction BIGINT, ts BIGINT";
    for short in spellings(dir.path(), &declared(types), types) {
        let o = bin::run(run_args(&short, &input, &[]));
        assert_eq!(o.code, Some(1), "{}", o.stderr);
        for needle in ["bids.csv", "auction, price, ts", "not declared: price"] {
            assert!(o.stderr.contains(needle), "no {needle:?} in {}", o.stderr);
        }
    }
    // a header name with spaces around it is said to be one, since a list
    // of names does not show them
    let spaced = write(dir.path(), "spaced.csv", "auction ,price, ts\n1,10,1000\n");
    let types = "auction BIGINT, price DOUBLE, ts BIGINT";
    for view in spellings(dir.path(), &declared(types), types) {
        let o = bin::run(run_args(&view, &spaced, &[]));
        assert_eq!(o.code, Some(1), "{}", o.stderr);
        assert!(
            o.stderr
                .contains("`auction ` is `auction` with spaces around it")
                && o.stderr.contains("` ts` is `ts` with spaces around it"),
            "{}",
            o.stderr
        );
    }
}

#[test]
fn a_resume_whose_output_does_not_match_the_checkpoint_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = pipeline(dir.path());
    let input = write(dir.path(), "bids.csv", &int_bids(200));
    let out = dir.path().join("out.csv");
    let clean = dir.path().join("clean.csv");
    let o = bin::run(run_args(
        &view,
        &input,
        &["--output", clean.to_str().expect("utf8")],
    ));
    assert!(o.ok(), "{}", o.stderr);
    let root = bin::url(&dir.path().join("state"));
    let first = bin::run(run_args(
        &view,
        &input,
        &[
            "--output",
            out.to_str().expect("utf8"),
            "--state-root",
            &root,
            "--max-triggers",
            "5",
        ],
    ));
    assert!(first.ok(), "{}", first.stderr);
    let committed = std::fs::read(&out).expect("out");
    assert!(!committed.is_empty());

    // without --output, and with another file: refused, saying which file
    let o = bin::run(run_args(&view, &input, &["--state-root", &root]));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("resume with --output") && o.stderr.contains("out.csv"),
        "{}",
        o.stderr
    );
    let other = dir.path().join("other.csv");
    let o = bin::run(run_args(
        &view,
        &input,
        &[
            "--output",
            other.to_str().expect("utf8"),
            "--state-root",
            &root,
        ],
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("out.csv") && !other.exists(),
        "{}",
        o.stderr
    );
    // a file shorter than what was committed
    std::fs::write(&out, &committed[..committed.len() / 2]).expect("shorten");
    let o = bin::run(run_args(
        &view,
        &input,
        &[
            "--output",
            out.to_str().expect("utf8"),
            "--state-root",
            &root,
        ],
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("committed") && o.stderr.contains("Restore the file"),
        "{}",
        o.stderr
    );
    // the right file: the run completes, every row once
    std::fs::write(&out, &committed).expect("restore");
    let o = bin::run(run_args(
        &view,
        &input,
        &[
            "--output",
            out.to_str().expect("utf8"),
            "--state-root",
            &root,
        ],
    ));
    assert!(o.ok(), "{}", o.stderr);
    assert_eq!(rows(&out), rows(&clean));

    // a checkpoint written without --output cannot be resumed with one
    let root2 = bin::url(&dir.path().join("state2"));
    let o = bin::run(run_args(
        &view,
        &input,
        &["--state-root", &root2, "--max-triggers", "2"],
    ));
    assert!(o.ok(), "{}", o.stderr);
    let late = dir.path().join("late.csv");
    let o = bin::run(run_args(
        &view,
        &input,
        &[
            "--output",
            late.to_str().expect("utf8"),
            "--state-root",
            &root2,
        ],
    ));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stderr.contains("without --output"), "{}", o.stderr);
    assert!(!late.exists(), "a refused resume creates no output");
}

#[test]
fn a_finished_run_is_not_run_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let complete = VIEW.replace("output = \"append\"", "output = \"complete\"");
    let view = write(dir.path(), "v.sql", &bin::ddl_of(&complete, INT_TYPES));
    let input = write(dir.path(), "bids.csv", &int_bids(120));
    let out = dir.path().join("out.csv");
    let root = bin::url(&dir.path().join("state"));
    let args = run_args(
        &view,
        &input,
        &[
            "--output",
            out.to_str().expect("utf8"),
            "--state-root",
            &root,
        ],
    );
    let o = bin::run(&args);
    assert!(o.ok(), "{}", o.stderr);
    let done = std::fs::read(&out).expect("out");
    let o = bin::run(&args);
    assert!(o.ok(), "{}", o.stderr);
    assert!(o.stderr.contains("already finished"), "{}", o.stderr);
    assert_eq!(std::fs::read(&out).expect("out"), done, "nothing appended");
}

#[test]
fn the_report_does_not_repeat_epochs_after_a_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = write(dir.path(), "v.toml", VIEW);
    let input = write(dir.path(), "bids.csv", &int_bids(200));
    let rep = dir.path().join("report.jsonl");
    let root = bin::url(&dir.path().join("state"));
    let r = rep.to_str().expect("utf8");
    let o = bin::run(run_args(
        &view,
        &input,
        &["--report", r, "--state-root", &root, "--max-triggers", "2"],
    ));
    assert!(o.ok(), "{}", o.stderr);
    // a killed run wrote epoch 3's line, but its checkpoint never committed
    let mut text = std::fs::read_to_string(&rep).expect("report");
    text.push_str("{\"epoch\":3,\"view\":\"bids_per_auction\",\"output_rows\":99}\n{\"epo");
    std::fs::write(&rep, text).expect("report");
    let o = bin::run(run_args(
        &view,
        &input,
        &["--report", r, "--state-root", &root],
    ));
    assert!(o.ok(), "{}", o.stderr);
    let epochs: Vec<u64> = bin::report(&rep)
        .iter()
        .map(|l| l["epoch"].as_u64().expect("epoch"))
        .collect();
    assert_eq!(
        epochs,
        (1..=11).collect::<Vec<u64>>(),
        "each epoch once, in order"
    );
}

#[test]
fn a_resume_over_another_or_a_shorter_input_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = pipeline(dir.path());
    let text = int_bids(400);
    let input = write(dir.path(), "bids.csv", &text);
    let root = bin::url(&dir.path().join("state"));
    let o = bin::run(run_args(
        &view,
        &input,
        &["--state-root", &root, "--max-triggers", "2"],
    ));
    assert!(o.ok(), "{}", o.stderr);
    // another file under the same name
    std::fs::write(&input, text.replacen("0,1,1000", "0,2,1000", 1)).expect("rewrite");
    let o = bin::run(run_args(&view, &input, &["--state-root", &root]));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("not the file the checkpoint at epoch 2 read"),
        "{}",
        o.stderr
    );
    // the same file, cut short
    std::fs::write(&input, &text[..text.len() / 2]).expect("cut");
    let o = bin::run(run_args(&view, &input, &["--state-root", &root]));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(o.stderr.contains("is shorter"), "{}", o.stderr);
    // the same file, grown: resumes
    std::fs::write(&input, format!("{text}1,1,999999\n")).expect("grow");
    let o = bin::run(run_args(&view, &input, &["--state-root", &root]));
    assert!(o.ok(), "{}", o.stderr);
}

#[test]
fn resumed_csv_and_parquet_inputs_continue_at_their_offset() {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    let dir = tempfile::tempdir().expect("tempdir");
    let view = write(dir.path(), "v.toml", VIEW);
    let text = int_bids(300);
    let csv_in = write(dir.path(), "bids.csv", &text);
    // the same rows as Parquet, in row groups of 32 (a resume skips whole groups)
    let vals: Vec<Vec<i64>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|v| v.parse().expect("int")).collect())
        .collect();
    let schema = Arc::new(Schema::new(
        ["auction", "price", "ts"]
            .iter()
            .map(|n| Field::new(*n, DataType::Int64, false))
            .collect::<Vec<_>>(),
    ));
    let cols = (0..3)
        .map(|i| Arc::new(Int64Array::from_iter_values(vals.iter().map(|r| r[i]))) as _)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), cols).expect("batch");
    let pq_in = dir.path().join("bids.parquet");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(32))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&pq_in).expect("create"),
        schema,
        Some(props),
    )
    .expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");

    let clean = dir.path().join("clean.csv");
    let o = bin::run(run_args(
        &view,
        &csv_in,
        &["--output", clean.to_str().expect("utf8")],
    ));
    assert!(o.ok(), "{}", o.stderr);
    // the Parquet input resumes under the SQL spelling, the CSV under the TOML one
    let sql = pipeline(dir.path());
    for (name, input, view) in [("csv", &csv_in, &view), ("pq", &pq_in, &sql)] {
        let out = dir.path().join(format!("{name}.csv"));
        let root = bin::url(&dir.path().join(format!("state-{name}")));
        let o = out.to_str().expect("utf8");
        for limit in ["3", "4", "1"] {
            let r = bin::run(run_args(
                view,
                input,
                &[
                    "--output",
                    o,
                    "--state-root",
                    &root,
                    "--max-triggers",
                    limit,
                ],
            ));
            assert!(r.ok(), "{}", r.stderr);
        }
        let r = bin::run(run_args(
            view,
            input,
            &["--output", o, "--state-root", &root],
        ));
        assert!(r.ok(), "{}", r.stderr);
        assert_eq!(rows(&out), rows(&clean), "{name}");
    }
}

/// Event times past year 9999 (and before 1970) are valid input: the
/// report, a resume's message and `inspect` show such a watermark in
/// milliseconds since the epoch instead of stopping the run (RFC 3339 has
/// four-digit years: the formatter failed, and the process panicked, on
/// writing the report line of a trigger whose W was past 9999).
#[test]
fn watermarks_past_year_9999_are_reported_inspected_and_resumed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = pipeline(dir.path());
    let last_rfc3339: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    let times = [
        -5_000,
        1_000,
        last_rfc3339,
        last_rfc3339 + 3_000,
        i64::MAX - 20_000,
    ];
    let mut csv = String::from("auction,price,ts\n");
    for (i, t) in times.iter().enumerate() {
        csv.push_str(&format!("{},{},{t}\n", i % 2, i + 1));
    }
    let input = write(dir.path(), "bids.csv", &csv);
    // one row per trigger
    let one = |mut args: Vec<String>| {
        let at = args
            .iter()
            .position(|a| a == "--rows-per-trigger")
            .expect("flag");
        args[at + 1] = "1".into();
        args
    };
    let plain = dir.path().join("plain.csv");
    let args = one(run_args(
        &view,
        &input,
        &["--output", plain.to_str().expect("utf8")],
    ));
    let o = bin::run(&args);
    assert!(o.ok(), "{}", o.stderr);

    let out = dir.path().join("out.csv");
    let rep = dir.path().join("report.jsonl");
    let root = bin::url(&dir.path().join("state"));
    let (o_, r) = (out.to_str().expect("utf8"), rep.to_str().expect("utf8"));
    let extra = ["--output", o_, "--report", r, "--state-root", &root];
    let args = one(run_args(&view, &input, &extra));
    let mut stopped = args.clone();
    stopped.extend(["--max-triggers".to_string(), "4".to_string()]);
    let o = bin::run(&stopped);
    assert!(o.ok(), "{}", o.stderr);
    // W after the fourth row: its time less the 2 s lateness, past 9999
    let w = last_rfc3339 + 1_000;
    let o = bin::run(["inspect", root.as_str()]);
    assert!(o.ok(), "{}", o.stderr);
    assert!(o.stdout.contains(&format!("{w}ms")), "{}", o.stdout);
    let o = bin::run(&args);
    assert!(o.ok(), "{}", o.stderr);
    assert!(o.stderr.contains(&format!("(W = {w}ms)")), "{}", o.stderr);
    assert_eq!(
        rows(&out),
        rows(&plain),
        "the resumed run emits what one run does"
    );
    assert!(!rows(&out).is_empty());

    let texts: Vec<String> = bin::report(&rep)
        .iter()
        .map(|l| {
            l["watermark_text"]
                .as_str()
                .expect("watermark_text")
                .to_string()
        })
        .collect();
    let want: Vec<String> = [
        "-7000ms".to_string(),
        "-1000ms".to_string(),
        "9999-12-31T23:59:57.999Z".to_string(),
        format!("{w}ms"),
        format!("{}ms", i64::MAX - 22_000),
        "+inf".to_string(),
    ]
    .to_vec();
    assert_eq!(texts, want, "each trigger's W, in order");
}

#[test]
fn inspect_reads_only_and_marks_broken_epochs_and_the_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-root");
    let o = bin::run(["inspect", bin::url(&missing).as_str()]);
    assert_eq!(o.code, Some(1), "{}", o.stdout);
    assert!(o.stderr.contains("does not exist"), "{}", o.stderr);
    assert!(!missing.exists(), "inspect created the state root");

    let view = write(dir.path(), "v.toml", VIEW);
    let input = write(dir.path(), "bids.csv", &int_bids(200));
    let state = dir.path().join("state");
    let root = bin::url(&state);
    let o = bin::run(run_args(
        &view,
        &input,
        &["--state-root", &root, "--max-triggers", "3"],
    ));
    assert!(o.ok(), "{}", o.stderr);
    let o = bin::run(["inspect", root.as_str()]);
    assert!(o.ok(), "{}", o.stderr);
    assert!(o.stdout.contains("writer lease: free"), "{}", o.stdout);
    assert!(!o.stdout.contains("BROKEN"), "{}", o.stdout);
    // cut a state file of the newest epoch; leave a garbage lease
    let vdir = state.join("bids_per_auction");
    let file = std::fs::read_dir(vdir.join("epoch=000003"))
        .expect("epoch 3")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .expect("a state file");
    let bytes = std::fs::read(&file).expect("state file");
    std::fs::write(&file, &bytes[..bytes.len() / 2]).expect("cut");
    std::fs::write(vdir.join("_thund_writer.json"), "garbage").expect("lease");
    let o = bin::run(["inspect", root.as_str()]);
    assert!(o.ok(), "{}", o.stderr);
    let epoch3 = o
        .stdout
        .lines()
        .find(|l| l.contains("epoch 3:"))
        .unwrap_or_else(|| panic!("no epoch 3 in {}", o.stdout));
    assert!(epoch3.contains("BROKEN"), "{}", o.stdout);
    assert!(
        o.stdout.contains("writer lease: UNREADABLE"),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("resumes from epoch 2"), "{}", o.stdout);
}

#[test]
fn a_held_lease_is_taken_over_only_on_purpose() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = pipeline(dir.path());
    let input = write(dir.path(), "bids.csv", &int_bids(100));
    let state = dir.path().join("state");
    let root = bin::url(&state);
    let o = bin::run(run_args(
        &view,
        &input,
        &["--state-root", &root, "--max-triggers", "1"],
    ));
    assert!(o.ok(), "{}", o.stderr);
    let lease = state.join("bids_per_auction").join("_thund_writer.json");
    let foreign = r#"{"owner":"0123456789abcdef0123456789abcdef","pid":4242,"hostname":"another-host.invalid","process_start":null,"acquired_at_ms":1767225600000}"#;
    for content in [foreign, "not json"] {
        std::fs::write(&lease, content).expect("lease");
        let o = bin::run(run_args(
            &view,
            &input,
            &["--state-root", &root, "--max-triggers", "1"],
        ));
        assert_eq!(o.code, Some(1), "{}", o.stderr);
        assert!(o.stderr.contains("--takeover"), "{}", o.stderr);
        assert!(!o.stderr.contains("Takeover::"), "{}", o.stderr);
        let o = bin::run(run_args(
            &view,
            &input,
            &["--state-root", &root, "--max-triggers", "1", "--takeover"],
        ));
        assert!(o.ok(), "{}", o.stderr);
    }
    let help = bin::run(["run", "--help"]);
    assert!(
        help.stdout.contains("--takeover") && help.stdout.contains("RISK"),
        "{}",
        help.stdout
    );
}

/// The same view as [`VIEW`] (event times in integer milliseconds, as the
/// TOML run infers them from the CSV), written as a SQL DDL pipeline with a
/// second view.
const PIPELINE: &str = "
CREATE SOURCE bids (auction BIGINT, price BIGINT, ts BIGINT,
                    WATERMARK FOR ts AS ts - INTERVAL '2' SECOND);
CREATE VIEW bids_per_auction WITH (output = 'append') AS
  SELECT window_start, window_end, auction, COUNT(*) AS bids, SUM(price) AS volume
  FROM TUMBLE(bids, ts, INTERVAL '10' SECOND) GROUP BY auction, window_start, window_end;
CREATE VIEW top WITH (output = 'update') AS
  SELECT auction, MAX(price) AS top FROM bids GROUP BY auction;
";

#[test]
fn run_takes_a_sql_pipeline_and_equals_the_toml_view() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = write(dir.path(), "v.toml", VIEW);
    let sql = write(dir.path(), "p.sql", PIPELINE);
    let mut csv = String::from("auction,price,ts\n");
    for i in 0..400i64 {
        csv.push_str(&format!(
            "{},{},{}\n",
            i % 7,
            i * 3 % 101,
            1_000 + i * 137 - (i * 7919 % 1500)
        ));
    }
    let input = write(dir.path(), "bids.csv", &csv);
    let input_arg = format!("bids={}", input.display());
    let (a, b) = (dir.path().join("a.csv"), dir.path().join("b.csv"));
    let view_s = view.display().to_string();
    let sql_s = sql.display().to_string();
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());
    run_ok(&[
        "run",
        "--view",
        &view_s,
        "--input",
        &input_arg,
        "--rows-per-trigger",
        "50",
        "--output",
        &a_s,
    ]);
    run_ok(&[
        "run",
        "--sql",
        &sql_s,
        "--view-name",
        "bids_per_auction",
        "--input",
        &input_arg,
        "--rows-per-trigger",
        "50",
        "--output",
        &b_s,
    ]);
    assert!(rows(&a).len() > 10, "windows closed: {:?}", rows(&a));
    assert_eq!(rows(&a), rows(&b));
    // two views and no --view-name: refused, naming them
    let out = thund()
        .args([
            "run", "--sql", &sql_s, "--input", &input_arg, "--output", &b_s,
        ])
        .output()
        .expect("run thund");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("declares 2 views (bids_per_auction, top)") && err.contains("--view-name"),
        "{err}"
    );
    // explain shows every view of the file, the windowed one with its per-window query
    let shown = run_ok(&["explain", "--sql", &sql_s]);
    assert!(
        shown.contains("view: bids_per_auction") && shown.contains("view: top"),
        "{shown}"
    );
    assert!(
        shown.contains("per window: SELECT auction, COUNT(*) AS bids"),
        "{shown}"
    );
    // a DDL error names the file, line and column
    let bad = write(
        dir.path(),
        "bad.sql",
        "CREATE SOURCE bids (ts TIMESTAMP);\nCREATE VIEW v AS SELECT 1 AS x FROM bids",
    );
    let out = thund()
        .args(["explain", "--sql", &bad.display().to_string()])
        .output()
        .expect("run thund");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("bad.sql: invalid DDL at line 1, column 34"),
        "{err}"
    );
    // so does what the engine refuses once the text parsed (a column the
    // query reads that its source does not declare, placed at the column),
    // showing the query as written; a view that --view-name leaves out is
    // not checked
    let unknown = PIPELINE.replace("SUM(price)", "SUM(cost)");
    let bad = write(dir.path(), "unknown.sql", &unknown);
    let bad_s = bad.display().to_string();
    for args in [
        vec!["run", "--sql", &bad_s, "--view-name", "bids_per_auction"],
        vec!["explain", "--sql", &bad_s],
    ] {
        let out = thund()
            .args(&args)
            .args(["--input", &input_arg])
            .args(if args[0] == "run" {
                vec!["--output", &b_s]
            } else {
                vec![]
            })
            .output()
            .expect("run thund");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains("unknown.sql: invalid DDL at line 5, column 67")
                && err.contains("No field named cost")
                && err
                    .contains("SUM(cost) AS volume\n  FROM TUMBLE(bids, ts, INTERVAL '10' SECOND)")
                && err.contains("(in statement 2: `CREATE VIEW bids_per_auction`)"),
            "{args:?}: {err}"
        );
    }
    run_ok(&[
        "run",
        "--sql",
        &bad_s,
        "--view-name",
        "top",
        "--input",
        &input_arg,
        "--output",
        &b_s,
    ]);
}

/// A reader of stdout that goes away (`thund run --output - | head -1`)
/// ends the run with an error naming the broken pipe, not a panic: the
/// output (far more than a pipe holds) is written to a pipe whose read end
/// is closed before anything is read.
#[test]
fn a_closed_stdout_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sql = write(
        dir.path(),
        "p.sql",
        "CREATE SOURCE bids (auction BIGINT, ts BIGINT, WATERMARK FOR ts AS ts);\n\
         CREATE VIEW v AS SELECT auction, COUNT(*) AS n, window_start \
         FROM TUMBLE(bids, ts, INTERVAL '1' SECOND) GROUP BY auction, window_start, window_end;",
    );
    let mut csv = String::from("auction,ts\n");
    for i in 0..20_000i64 {
        csv.push_str(&format!("{i},{}\n", i / 10));
    }
    let input = write(dir.path(), "bids.csv", &csv);
    let input_arg = format!("bids={}", input.display());
    for args in [
        vec![
            "run",
            "--sql",
            sql.to_str().expect("utf8"),
            "--input",
            &input_arg,
            "--output",
            "-",
        ],
        vec!["demo", "--events", "20000", "--rows-per-trigger", "10"],
    ] {
        let mut child = thund()
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn thund");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("Broken pipe") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

/// A checkpoint that cannot be committed (its epoch's directory cannot be
/// made: a file has its name) stops `thund run` at a later trigger, exit 1
/// naming the epoch, instead of running on to the end of the stream with
/// nothing said; run again once the way is clear, it resumes from the last
/// committed epoch and its output equals an uninterrupted run's.
#[test]
fn a_checkpoint_that_cannot_be_committed_stops_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let view = pipeline(dir.path());
    let input = write(dir.path(), "bids.csv", &int_bids(200));
    let (out, whole) = (dir.path().join("out.csv"), dir.path().join("whole.csv"));
    let rep = dir.path().join("report.jsonl");
    let state = dir.path().join("state");
    let blocker = state.join("bids_per_auction").join("epoch=000003");
    std::fs::create_dir_all(state.join("bids_per_auction")).expect("mkdir");
    std::fs::write(&blocker, "in the way").expect("block epoch 3");
    let root = bin::url(&state);
    let args = run_args(
        &view,
        &input,
        &[
            "--output",
            out.to_str().expect("utf8"),
            "--report",
            rep.to_str().expect("utf8"),
            "--state-root",
            &root,
        ],
    );
    let o = bin::run(&args);
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("epoch 3") && o.stderr.contains("run it again to resume"),
        "{}",
        o.stderr
    );
    // stopped within two triggers of the failure, not at the end (epoch 11)
    let ran = bin::report(&rep).len();
    assert!((3..=5).contains(&ran), "{ran} triggers ran: {}", o.stderr);
    std::fs::remove_file(&blocker).expect("clear the way");
    let o = bin::run(&args);
    assert!(o.ok(), "{}", o.stderr);
    let o = bin::run(run_args(
        &view,
        &input,
        &["--output", whole.to_str().expect("utf8")],
    ));
    assert!(o.ok(), "{}", o.stderr);
    assert!(
        rows(&whole).len() > 10,
        "windows closed: {:?}",
        rows(&whole)
    );
    assert_eq!(rows(&out), rows(&whole));
}

/// `--workers N` runs the incremental path on N timely workers: the rows
/// are those of one worker, and a state root written with one number
/// resumes with another (each restart here takes a different number).
/// A number outside 1–256 is refused before any file is made.
#[test]
fn run_on_several_workers_gives_the_rows_of_one_and_resumes_with_another_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sql = write(dir.path(), "p.sql", PIPELINE);
    let mut csv = String::from("auction,price,ts\n");
    for i in 0..900i64 {
        csv.push_str(&format!(
            "{},{},{}\n",
            i * 7 % 61,
            i * 13 % 211,
            1_000 + i * 97 - (i * 7919 % 1700)
        ));
    }
    let input = write(dir.path(), "bids.csv", &csv);
    let input_arg = format!("bids={}", input.display());
    let sql_s = sql.display().to_string();
    let run = |workers: &str, out: &Path, extra: &[&str]| {
        let out_s = out.display().to_string();
        let mut args = vec![
            "run",
            "--sql",
            &sql_s,
            "--view-name",
            "bids_per_auction",
            "--input",
            &input_arg,
            "--rows-per-trigger",
            "40",
            "--workers",
            workers,
            "--output",
            &out_s,
        ];
        args.extend_from_slice(extra);
        thund().args(&args).output().expect("run thund")
    };
    let one = dir.path().join("one.csv");
    assert!(run("1", &one, &[]).status.success());
    assert!(rows(&one).len() > 100, "{:?}", rows(&one));
    let three = dir.path().join("three.csv");
    let o = run("3", &three, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(rows(&one), rows(&three));

    let root = bin::url(&dir.path().join("state"));
    let resumed = dir.path().join("resumed.csv");
    let mut restarts = 0;
    for workers in ["2", "1", "3", "2", "1", "3"].iter().cycle() {
        let o = run(
            workers,
            &resumed,
            &["--state-root", &root, "--max-triggers", "4"],
        );
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{err}");
        restarts += 1;
        if err.contains("end of stream") || err.contains("already finished") {
            break;
        }
        assert!(restarts < 40, "the run never ended: {err}");
    }
    assert!(restarts > 3, "{restarts} restarts");
    assert_eq!(rows(&one), rows(&resumed));

    for bad in ["0", "257"] {
        let never = dir.path().join(format!("never{bad}.csv"));
        let o = run(bad, &never, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--workers"), "{err}");
        assert!(!never.exists());
    }
}
