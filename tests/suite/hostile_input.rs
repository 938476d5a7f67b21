//! Hostile inputs against the real `thund run`: generated files with a bad
//! cell at a random row of a random numeric column, ragged rows, empty and
//! header-only CSVs, truncated and zero-byte Parquet files, unwritable
//! outputs, an output that is an input, NaN/±0.0/±∞ prices and event times
//! at the limits of `i64`. For each: the exit code, a
//! message that names the file, line and column, that no row already emitted
//! is lost, and that the results over the good rows equal a run over the
//! good rows alone. The view is given as a TOML spec or, with its window
//! written in SQL, as a `.sql` pipeline (`--sql`); the random cases take
//! both in turn.
//!
//! A few random cases by default (CI); `THUND_PROPTEST_CASES=200` runs more.

use std::path::{Path, PathBuf};

use crate::common::bin;
use crate::common::rng;

use bin::{csv_rows, ddl_of, parquet_rows, report, run, spec_flag, write};
use rng::SplitMix;

const VIEW: &str = r#"
name = "v"
sql = "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume, MIN(price) AS low, MAX(price) AS high FROM bids GROUP BY auction"
output = "append"
[[source]]
name = "bids"
event_time = "ts"
[watermark]
allowed_lateness = "1s"
[window]
kind = "tumbling"
size = "2s"
"#;

/// The columns of the bids files, as DDL declares them.
const TYPES: &str = "auction BIGINT, price BIGINT, ts BIGINT";

const COLUMNS: [&str; 3] = ["auction", "price", "ts"];
const BAD_CELLS: [&str; 6] = ["n/a", "abc", "12x", "#REF!", "--", "1e"];

fn cases() -> u64 {
    std::env::var("THUND_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// `n` in-order-ish bids: event times grow by up to 40 ms and jitter by
/// less than 300 ms, under the view's 1 s lateness, so no row is ever late
/// and the result does not depend on how rows are cut into triggers.
fn bids(r: &mut SplitMix, n: usize) -> Vec<[String; 3]> {
    let mut t = 1_000_000i64;
    (0..n)
        .map(|_| {
            t += r.below(40) as i64;
            [
                r.below(8).to_string(),
                (1 + r.below(1000)).to_string(),
                (t - r.below(300) as i64).to_string(),
            ]
        })
        .collect()
}

fn csv_text(rows: &[Vec<String>]) -> String {
    let mut s = String::from("auction,price,ts\n");
    for r in rows {
        s.push_str(&r.join(","));
        s.push('\n');
    }
    s
}

struct Files {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    /// [`VIEW`] as a TOML spec.
    view: PathBuf,
    /// [`VIEW`] as a SQL pipeline, its window in the query.
    sql: PathBuf,
}

impl Files {
    /// The TOML spec for odd `seed`s, the SQL pipeline for even ones.
    fn spelling(&self, seed: u64) -> &Path {
        match seed % 2 {
            0 => &self.sql,
            _ => &self.view,
        }
    }
}

fn files() -> Files {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let view = write(&path, "v.toml", VIEW);
    let sql = write(&path, "v.sql", &ddl_of(VIEW, TYPES));
    Files {
        _dir: dir,
        dir: path,
        view,
        sql,
    }
}

/// `thund run` of `view` (a TOML spec or a `.sql` pipeline) over `input`.
fn args(view: &Path, input: &Path, per: usize, output: &Path) -> Vec<String> {
    vec![
        "run".into(),
        spec_flag(view).into(),
        view.display().to_string(),
        "--input".into(),
        format!("bids={}", input.display()),
        "--rows-per-trigger".into(),
        per.to_string(),
        "--output".into(),
        output.display().to_string(),
    ]
}

fn rows_of(p: &Path) -> Vec<String> {
    if p.extension().is_some_and(|e| e == "parquet") {
        parquet_rows(p).unwrap_or_else(|e| panic!("{} is not readable Parquet: {e}", p.display()))
    } else {
        csv_rows(p)
    }
}

/// One random case: a bad cell (or a ragged row) at a random row.
fn bad_row_case(seed: u64) {
    let f = files();
    let view = f.spelling(seed);
    let mut r = SplitMix::new(seed);
    let n = 200 + r.below(1300) as usize;
    let per = 40 + r.below(300) as usize;
    let good: Vec<Vec<String>> = bids(&mut r, n).into_iter().map(|b| b.to_vec()).collect();
    let at = r.below(n as u64) as usize;
    let kind = r.below(3);
    let col = r.below(3) as usize;
    let mut bad_row = good[at].clone();
    let what = match kind {
        0 => {
            bad_row[col] = BAD_CELLS[r.below(BAD_CELLS.len() as u64) as usize].to_string();
            format!("column `{}`", COLUMNS[col])
        }
        1 => {
            bad_row.push("7".into());
            "4 fields, the header has 3".to_string()
        }
        _ => {
            bad_row.pop();
            "2 fields, the header has 3".to_string()
        }
    };
    let mut with_bad = good.clone();
    with_bad.insert(at, bad_row.clone());
    let bad_in = write(&f.dir, "bids.csv", &csv_text(&with_bad));
    let good_in = write(&f.dir, "good.csv", &csv_text(&good));
    let line = format!("line {}", at + 2);
    let ctx = format!(
        "seed {seed} ({}): {n} rows, {per} per trigger, bad row {bad_row:?} at {line}",
        view.display()
    );

    // the good rows alone
    let clean = f.dir.join("clean.csv");
    let o = run(args(view, &good_in, per, &clean));
    assert!(o.ok(), "{ctx}: good rows alone failed: {}", o.stderr);

    // the file with the bad row: refused, counted, said, and nothing else changes
    let out = f.dir.join("out.csv");
    let rep = f.dir.join("report.jsonl");
    let mut a = args(view, &bad_in, per, &out);
    a.extend(["--report".to_string(), rep.display().to_string()]);
    let o = run(&a);
    assert!(o.ok(), "{ctx}: {}", o.stderr);
    for needle in ["bids.csv", line.as_str(), what.as_str(), "refused"] {
        assert!(
            o.stderr.contains(needle),
            "{ctx}: no {needle:?} in: {}",
            o.stderr
        );
    }
    let invalid: u64 = report(&rep)
        .iter()
        .map(|l| l["invalid_rows"].as_u64().expect("invalid_rows"))
        .sum();
    assert_eq!(invalid, 1, "{ctx}");
    assert_eq!(
        rows_of(&out),
        rows_of(&clean),
        "{ctx}: results over the good rows differ"
    );

    // --strict: stops at the bad row's trigger, naming it; every row emitted
    // by the triggers before it is in the output (CSV or Parquet)
    let ext = if r.below(2) == 0 { "csv" } else { "parquet" };
    let strict_out = f.dir.join(format!("strict.{ext}"));
    let mut a = args(view, &bad_in, per, &strict_out);
    a.push("--strict".into());
    let o = run(&a);
    assert_eq!(o.code, Some(1), "{ctx}: --strict must fail: {}", o.stderr);
    for needle in ["bids.csv", line.as_str(), what.as_str(), "--strict"] {
        assert!(
            o.stderr.contains(needle),
            "{ctx}: no {needle:?} in: {}",
            o.stderr
        );
    }
    let before = at / per;
    let prefix = f.dir.join(format!("prefix.{ext}"));
    let mut a = args(view, &good_in, per, &prefix);
    a.extend(["--max-triggers".to_string(), before.to_string()]);
    let p = run(&a);
    assert!(p.ok(), "{ctx}: {}", p.stderr);
    assert_eq!(
        rows_of(&strict_out),
        rows_of(&prefix),
        "{ctx}: --strict lost or added rows of the {before} triggers before the bad row"
    );
}

#[test]
fn a_bad_cell_or_a_ragged_row_refuses_that_row_only() {
    for seed in 1..=cases() {
        bad_row_case(seed);
    }
}

/// PostgreSQL's float order (README, "Arithmetic"): NaN above every number.
fn pg_cmp(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => a.partial_cmp(&b).expect("numbers"),
    }
}

const SPECIAL_PRICES: [&str; 6] = ["NaN", "-0.0", "0.0", "inf", "-inf", "-0"];

/// One random case of special floats and event times at the limits of
/// `i64`: both paths give the rule's answer for every window and auction,
/// the rows whose windows do not fit are refused at their line, and the rest
/// equals the run without them.
fn special_values_case(seed: u64) {
    let f = files();
    let mut r = SplitMix::new(seed);
    let n = 100 + r.below(900) as usize;
    let per = 20 + r.below(200) as usize;
    let mut good: Vec<Vec<String>> = bids(&mut r, n).into_iter().map(|b| b.to_vec()).collect();
    for row in &mut good {
        row[1] = if r.below(4) == 0 {
            SPECIAL_PRICES[r.below(SPECIAL_PRICES.len() as u64) as usize].to_string()
        } else {
            format!("{}", (r.below(160) as f64 - 80.0) / 8.0)
        };
    }
    let mut all = good.clone();
    let mut extreme_lines = Vec::new();
    for _ in 0..1 + r.below(3) {
        let at = r.below(all.len() as u64 + 1) as usize;
        let ts = if r.below(2) == 0 {
            i64::MAX - r.below(1000) as i64
        } else {
            i64::MIN + r.below(1000) as i64
        };
        all.insert(
            at,
            vec![r.below(8).to_string(), "1.5".into(), ts.to_string()],
        );
        extreme_lines.iter_mut().for_each(|l: &mut usize| {
            if *l >= at + 2 {
                *l += 1
            }
        });
        extreme_lines.push(at + 2);
    }
    let input = write(&f.dir, "bids.csv", &csv_text(&all));
    let good_in = write(&f.dir, "good.csv", &csv_text(&good));
    let ctx = format!(
        "seed {seed}: {n} rows, {per} per trigger, extreme times at lines {extreme_lines:?}"
    );
    // the TOML spec for odd seeds, the SQL pipeline for even ones
    let recompute_toml = VIEW.replace(
        "output = \"append\"",
        "output = \"append\"\nmode = \"recompute\"",
    );
    let floats = "auction BIGINT, price DOUBLE, ts BIGINT";
    let (auto, recompute) = match seed % 2 {
        0 => (
            write(&f.dir, "v_floats.sql", &ddl_of(VIEW, floats)),
            write(&f.dir, "r.sql", &ddl_of(&recompute_toml, floats)),
        ),
        _ => (f.view.clone(), write(&f.dir, "r.toml", &recompute_toml)),
    };
    let ctx = format!("{ctx} ({})", auto.display());
    let clean = f.dir.join("clean.csv");
    assert!(run(args(&auto, &good_in, per, &clean)).ok(), "{ctx}");
    let mut outs = Vec::new();
    for view in [&auto, &recompute] {
        let out = f.dir.join("out.csv");
        let o = run(args(view, &input, per, &out));
        assert!(o.ok(), "{ctx}: {}", o.stderr);
        for l in &extreme_lines {
            let needle = format!("line {l}: column `ts`: event time");
            assert!(
                o.stderr.contains(&needle),
                "{ctx}: no {needle:?} in {}",
                o.stderr
            );
        }
        assert!(
            o.stderr.contains("do not fit in i64"),
            "{ctx}: {}",
            o.stderr
        );
        assert!(
            o.stderr
                .contains(&format!("{} invalid", extreme_lines.len())),
            "{ctx}: {}",
            o.stderr
        );
        outs.push(csv_rows(&out));
    }
    assert_eq!(outs[0], outs[1], "{ctx}: the paths differ");
    assert_eq!(
        outs[0],
        csv_rows(&clean),
        "{ctx}: the refused rows changed the rest"
    );
    // the rule, folded here: -0.0 = 0.0, NaN above every number
    let mut want: std::collections::BTreeMap<(i64, i64), (u64, f64, f64, f64)> = Default::default();
    for row in &good {
        let (a, p, t): (i64, f64, i64) = (
            row[0].parse().expect("auction"),
            row[1].parse().expect("price"),
            row[2].parse().expect("ts"),
        );
        let e = want
            .entry((t.div_euclid(2000) * 2000, a))
            .or_insert((0, 0.0, p, p));
        e.0 += 1;
        e.1 += p;
        if pg_cmp(p, e.2).is_lt() {
            e.2 = p;
        }
        if pg_cmp(p, e.3).is_gt() {
            e.3 = p;
        }
    }
    let got: Vec<(i64, i64, u64, f64, f64, f64)> = outs[0]
        .iter()
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            let f = |i: usize| c[i].parse::<f64>().unwrap_or_else(|_| panic!("{ctx}: {l}"));
            (
                c[0].parse().expect("start"),
                c[2].parse().expect("auction"),
                c[3].parse().expect("bids"),
                f(4),
                f(5),
                f(6),
            )
        })
        .collect();
    assert_eq!(got.len(), want.len(), "{ctx}");
    for (w, a, count, sum, low, high) in got {
        let &(c, s, lo, hi) = want
            .get(&(w, a))
            .unwrap_or_else(|| panic!("{ctx}: no window {w} auction {a}"));
        let same = |x: f64, y: f64| {
            pg_cmp(x, y).is_eq()
                && x.is_sign_negative() == (y.is_sign_negative() && y != 0.0 && !y.is_nan())
        };
        assert_eq!(count, c, "{ctx}: count of {w}/{a}");
        assert!(same(sum, s), "{ctx}: sum of {w}/{a}: {sum} vs {s}");
        assert!(same(low, lo), "{ctx}: low of {w}/{a}: {low} vs {lo}");
        assert!(same(high, hi), "{ctx}: high of {w}/{a}: {high} vs {hi}");
    }
}

#[test]
fn special_floats_and_extreme_event_times_follow_the_rule_on_both_paths() {
    for seed in 1..=cases() {
        special_values_case(seed);
    }
}

#[test]
fn an_empty_or_header_only_csv_says_so() {
    let f = files();
    let empty = write(&f.dir, "empty.csv", "");
    let o = run(args(&f.view, &empty, 10, &f.dir.join("o1.csv")));
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("empty.csv") && o.stderr.contains("empty (0 bytes)"),
        "{}",
        o.stderr
    );
    let header = write(&f.dir, "header.csv", "auction,price,ts\n");
    let o = run(args(&f.view, &header, 10, &f.dir.join("o2.csv")));
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("header.csv") && o.stderr.contains("no data rows"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("Null"), "{}", o.stderr);
    // with declared types, a header-only file is an empty input
    let typed = write(
        &f.dir,
        "typed.toml",
        &VIEW.replace(
            "event_time = \"ts\"",
            "event_time = \"ts\"\nschema = \"auction BIGINT, price BIGINT, ts BIGINT\"",
        ),
    );
    for typed in [&typed, &f.sql] {
        let out = f.dir.join("o3.csv");
        let o = run(args(typed, &header, 10, &out));
        assert!(o.ok(), "{}: {}", typed.display(), o.stderr);
        assert!(csv_rows(&out).is_empty());
    }
    // a zero-byte file has no header to check the declared columns against
    let o = run(args(&f.sql, &empty, 10, &f.dir.join("o4.csv")));
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("empty.csv") && o.stderr.contains("empty (0 bytes)"),
        "{}",
        o.stderr
    );
    // a header with a trailing comma over rows without one: every row is
    // refused as read, and inference says so, not that the cells are empty
    let trailing = write(&f.dir, "trailing.csv", "auction,price,ts,\n1,2,3\n4,5,6\n");
    let o = run(args(&f.view, &trailing, 10, &f.dir.join("o5.csv")));
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr
            .contains("every one of its 2 data rows was refused")
            && o.stderr
                .contains("line 2: the row has 3 fields, the header has 4"),
        "{}",
        o.stderr
    );
}

/// A bad cell of a million bytes is refused like any other, and quoted cut
/// with its length: the message stays a line, not a megabyte.
#[test]
fn a_huge_bad_cell_is_named_not_copied_into_the_message() {
    let f = files();
    // (enough good rows that the TOML spelling infers the column an integer)
    let mut csv = format!(
        "auction,price,ts\n1,10,1000\n2,{},1500\n",
        "x".repeat(1_000_000)
    );
    for i in 0..300 {
        csv.push_str(&format!("{},{},{}\n", i % 5, i, 2_000 + i * 20));
    }
    let input = write(&f.dir, "huge.csv", &csv);
    let good = write(
        &f.dir,
        "good.csv",
        &csv.lines()
            .filter(|l| l.len() < 100)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    for view in [&f.view, &f.sql] {
        let out = f.dir.join("o.csv");
        let o = run(args(view, &input, 10, &out));
        assert!(o.ok(), "{}: {}", view.display(), o.stderr);
        let line = o
            .stderr
            .lines()
            .find(|l| l.contains("line 3"))
            .unwrap_or_else(|| panic!("no line 3 in {}", o.stderr));
        assert!(
            line.contains("column `price`") && line.contains("(1000000 bytes)") && line.len() < 300,
            "{}",
            &line[..line.len().min(300)]
        );
        assert!(o.stderr.len() < 4_000, "stderr of {} bytes", o.stderr.len());
        same_as_good_rows_alone(&f, view, &good, 10, &out);
    }
}

/// `out` holds what a run of `view` over the `good` rows alone emits.
fn same_as_good_rows_alone(f: &Files, view: &Path, good: &Path, per: usize, out: &Path) {
    let alone = f.dir.join("alone.csv");
    let g = run(args(view, good, per, &alone));
    assert!(g.ok(), "{}", g.stderr);
    assert_eq!(csv_rows(out), csv_rows(&alone));
}

/// A number written past a float's range (`1e400`, a 401-digit integer)
/// would cast to an infinity: its row is refused as out of range, as SQL
/// databases refuse it, while `inf` and `-Infinity` written as such and the
/// largest finite double are values. The results equal a run over the
/// other rows alone.
#[test]
fn a_float_past_its_range_is_refused_not_read_as_infinity() {
    let f = files();
    let types = "auction BIGINT, price DOUBLE, ts BIGINT";
    let view = write(
        &f.dir,
        "d.toml",
        &VIEW.replace(
            "event_time = \"ts\"",
            &format!("event_time = \"ts\"\nschema = \"{types}\""),
        ),
    );
    let sql = write(&f.dir, "d.sql", &ddl_of(VIEW, types));
    let big = format!("1{}", "0".repeat(400));
    let kept = ["10", "inf", "-Infinity", "1.7976931348623157e308", "-0.0"];
    let refused = ["1e400", "-1e400", "1.8e308", big.as_str()];
    let mut all = String::from("auction,price,ts\n");
    let mut good = all.clone();
    for (i, p) in kept.iter().chain(&refused).enumerate() {
        let row = format!("{},{p},{}\n", i % 3, 1_000 + i * 300);
        all.push_str(&row);
        if kept.contains(p) {
            good.push_str(&row);
        }
    }
    let all = write(&f.dir, "all.csv", &all);
    let good = write(&f.dir, "good.csv", &good);
    for spec in [&view, &sql] {
        let out = f.dir.join("out.csv");
        let o = run(args(spec, &all, 4, &out));
        assert!(o.ok(), "{}", o.stderr);
        for (k, p) in refused.iter().enumerate() {
            let line = kept.len() + k + 2;
            assert!(
                o.stderr
                    .lines()
                    .any(|l| l.contains(&format!("line {line}: column `price`"))
                        && l.contains("is out of range for DOUBLE")
                        && l.contains(&p[..5])),
                "line {line} ({p:.10}): {}",
                o.stderr
            );
        }
        assert!(o.stderr.contains("4 invalid"), "{}", o.stderr);
        same_as_good_rows_alone(&f, spec, &good, 4, &out);
    }
}

/// A named pipe (or a directory) given as an input is refused at once,
/// naming it: an input is read more than once, and a pipe's second open
/// would wait for a writer for ever. No writer is ever attached here, so a
/// run that opened the pipe would block; it must end within the deadline.
#[test]
fn a_pipe_or_a_directory_as_input_is_refused_not_waited_on() {
    let f = files();
    let fifo = f.dir.join("stream.csv");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let dir = f.dir.join("folder.csv");
    std::fs::create_dir(&dir).expect("mkdir");
    for (input, says) in [
        (&fifo, "not a regular file (a named pipe, socket or device)"),
        (&dir, "is a directory, not a file"),
    ] {
        for spec in [&f.view, &f.sql] {
            let mut child = bin::thund()
                .args(args(spec, input, 10, &f.dir.join("o.csv")))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn thund");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while child.try_wait().expect("try_wait").is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("thund waited on {} past a minute", input.display());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let out = child.wait_with_output().expect("output");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(
                err.contains(&input.display().to_string()) && err.contains(says),
                "{err}"
            );
        }
    }
}

/// A refused row is named by the line an editor shows it on, whatever the
/// file's line ends: CRLF (as Windows and spreadsheets write CSV), blank
/// lines between rows, a quoted cell that spans lines. The `csv` reader
/// places a row where its read began, before the line ends it skips, so
/// each of these named an earlier line.
#[test]
fn a_refused_row_is_named_at_its_editor_line_whatever_the_line_ends() {
    let f = files();
    let sql = write(
        &f.dir,
        "n.sql",
        "CREATE SOURCE bids (auction BIGINT, price BIGINT, ts BIGINT, note VARCHAR,\n\
         WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
         CREATE VIEW v AS SELECT auction, SUM(price) AS volume, MAX(note) AS note \
         FROM TUMBLE(bids, ts, INTERVAL '2' SECOND) GROUP BY auction, window_start, window_end;",
    );
    // the bad cells `x` and `y` are on the editor's lines 4 and 8
    let mut lines: Vec<String> = [
        "auction,price,ts,note",
        "1,10,1000,\"a",
        "two-line\"",
        "2,x,1100,plain",
        "3,30,1200,plain",
        "",
        "",
        "4,y,1300,\"q \"\"z\"\"\"",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    // (enough good rows that the TOML spelling infers the column an integer)
    lines.extend((0..300).map(|i| format!("{},{i},{},n", i % 4, 1_400 + i * 10)));
    for eol in ["\n", "\r\n"] {
        let input = write(&f.dir, "n.csv", &(lines.join(eol) + eol));
        for spec in [&sql, &f.view] {
            let o = run(args(spec, &input, 50, &f.dir.join("o.csv")));
            assert!(o.ok(), "{}", o.stderr);
            for want in [
                "line 4: column `price`: \"x\" is not a valid BIGINT",
                "line 8: column `price`: \"y\" is not a valid BIGINT",
            ] {
                assert!(
                    o.stderr.contains(want),
                    "{eol:?} {}: no {want:?} in\n{}",
                    spec.display(),
                    o.stderr
                );
            }
        }
        // the note of inference quotes them at the same lines
        let o = run(args(&f.view, &input, 50, &f.dir.join("o.csv")));
        assert!(
            o.stderr.contains("line 4: \"x\"") && o.stderr.contains("line 8: \"y\""),
            "{eol:?}: {}",
            o.stderr
        );
    }
}

/// `rows` as Parquet, the auction column dictionary-encoded with `dictionary`
/// (as pandas and Spark write repetitive columns).
fn write_parquet(path: &Path, rows: &[[String; 3]], group: usize, dictionary: bool) {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    let auction = match dictionary {
        true => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Int64)),
        false => DataType::Int64,
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", auction, true),
        Field::new("price", DataType::Int64, true),
        Field::new("ts", DataType::Int64, true),
    ]));
    let col = |i: usize| {
        let a: ArrayRef = Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| r[i].parse::<i64>().expect("int")),
        ));
        arrow::compute::cast(&a, schema.field(i).data_type()).expect("encode")
    };
    let batch = RecordBatch::try_new(schema.clone(), vec![col(0), col(1), col(2)]).expect("batch");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .build();
    let file = std::fs::File::create(path).expect("create");
    let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, Some(props)).expect("writer");
    w.write(&batch).expect("write");
    w.close().expect("close");
}

#[test]
fn a_parquet_input_gives_the_csv_results_and_a_broken_one_is_named() {
    let f = files();
    let mut r = SplitMix::new(7);
    let rows = bids(&mut r, 900);
    let csv_in = write(
        &f.dir,
        "bids.csv",
        &csv_text(&rows.iter().map(|b| b.to_vec()).collect::<Vec<_>>()),
    );
    let pq_in = f.dir.join("bids.parquet");
    let dict_in = f.dir.join("dictionary.parquet");
    write_parquet(&pq_in, &rows, 128, false);
    write_parquet(&dict_in, &rows, 128, true);
    let (a, b) = (f.dir.join("a.csv"), f.dir.join("b.csv"));
    assert!(run(args(&f.view, &csv_in, 100, &a)).ok());
    let recompute = write(
        &f.dir,
        "r.toml",
        &VIEW.replace(
            "output = \"append\"",
            "output = \"append\"\nmode = \"recompute\"",
        ),
    );
    for input in [&pq_in, &dict_in] {
        for view in [&f.view, &f.sql, &recompute] {
            let o = run(args(view, input, 100, &b));
            assert!(
                o.ok(),
                "{} over {}: {}",
                view.display(),
                input.display(),
                o.stderr
            );
            assert_eq!(
                csv_rows(&a),
                csv_rows(&b),
                "{} over {}",
                view.display(),
                input.display()
            );
        }
    }
    assert!(!csv_rows(&a).is_empty());

    let zero = write(&f.dir, "zero.parquet", "");
    let o = run(args(&f.view, &zero, 100, &f.dir.join("z.csv")));
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("zero.parquet") && o.stderr.contains("empty (0 bytes)"),
        "{}",
        o.stderr
    );
    let bytes = std::fs::read(&pq_in).expect("parquet");
    let cut = write(&f.dir, "cut.parquet", "");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("truncate");
    let o = run(args(&f.view, &cut, 100, &f.dir.join("c.csv")));
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("cut.parquet") && o.stderr.contains("not a readable Parquet file"),
        "{}",
        o.stderr
    );
}

/// A typed Parquet column read as a declared type keeps its meaning or is
/// refused: a microsecond timestamp just before the epoch (or a window's
/// start) stays before it, as in the CSV of the same values; a fraction
/// read as an integer, or a `DOUBLE` past a `FLOAT`'s range, refuses its
/// row as the text would; a timestamp or date declared an integer (which
/// would be its count of microseconds or days, read as milliseconds) is
/// refused, naming the column.
#[test]
fn a_typed_parquet_column_keeps_its_meaning_as_the_declared_type_or_is_refused() {
    use std::sync::Arc;

    use arrow::array::{
        ArrayRef, Date32Array, Float64Array, Int64Array, RecordBatch, TimestampMicrosecondArray,
    };
    use arrow::datatypes::{Field, Schema};
    let f = files();
    let pq = |name: &str, cols: Vec<(&str, ArrayRef)>| {
        let schema = Arc::new(Schema::new(
            cols.iter()
                .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_new(schema.clone(), cols.into_iter().map(|c| c.1).collect())
            .expect("batch");
        let path = f.dir.join(name);
        let file = std::fs::File::create(&path).expect("create");
        let mut w = parquet::arrow::ArrowWriter::try_new(file, schema, None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        path
    };
    let sql = |price: &str, ts: &str| {
        // (a DATE is not summed)
        let sum = match price {
            "DATE" => "MAX(price)",
            _ => "SUM(price)",
        };
        write(
            &f.dir,
            &format!("{price}_{ts}.sql"),
            &format!(
                "CREATE SOURCE bids (auction BIGINT, price {price}, ts {ts}, \
                 WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
                 CREATE VIEW v WITH (output = 'append') AS SELECT window_start, window_end, auction, \
                 COUNT(*) AS n, {sum} AS s, MIN(ts) AS lo \
                 FROM TUMBLE(bids, ts, INTERVAL '2' SECOND) GROUP BY window_start, window_end, auction;"
            ),
        )
    };
    let go = |view: &Path, input: &Path| {
        let out = f.dir.join("out.csv");
        let _ = std::fs::remove_file(&out);
        let o = run(args(view, input, 3, &out));
        // each refusal's row (a CSV's line 1 is its header: line r + 1 is
        // the Parquet file's row r) and column
        let refused: Vec<(u64, String)> = (o.stderr.lines())
            .filter_map(|l| {
                let (_, r) = l
                    .split_once(".parquet: row ")
                    .or_else(|| l.split_once(".csv: line "))?;
                let (n, rest) = r.split_once(": column `")?;
                let shift = u64::from(l.contains(".csv: "));
                Some((
                    n.parse::<u64>().ok()? - shift,
                    rest.split('`').next()?.to_string(),
                ))
            })
            .collect();
        (o, csv_rows(&out), refused)
    };
    let auction = [1i64, 1, 2, 2, 1, 2, 1, 2];
    let micros = [
        -1i64, -999, -1000, -1001, 1_999_999, 2_000_000, 3_999_001, 5,
    ];
    let prices = [1.0f64, 1.5, -2.0, 0.999, 1e300, 4.0, -1.5, -0.0];
    let file = pq(
        "typed.parquet",
        vec![
            ("auction", Arc::new(Int64Array::from(auction.to_vec()))),
            ("price", Arc::new(Float64Array::from(prices.to_vec()))),
            (
                "ts",
                Arc::new(TimestampMicrosecondArray::from(micros.to_vec())),
            ),
        ],
    );
    // the same values as text: the header is a CSV's line 1, so its rows are
    // lines 2.. where the Parquet file's are rows 1..; shifted to compare
    let text: String = (0..auction.len())
        .map(|i| {
            let us = micros[i];
            let (s, frac) = (us.div_euclid(1_000_000), us.rem_euclid(1_000_000));
            // (a few seconds around the epoch)
            let t = match s {
                s if s < 0 => format!("1969-12-31T23:59:{:02}", 60 + s),
                s => format!("1970-01-01T00:00:{s:02}"),
            };
            format!("{},{},{t}.{frac:06}\n", auction[i], prices[i])
        })
        .collect();
    let csv = write(&f.dir, "typed.csv", &format!("auction,price,ts\n{text}"));
    for (price, refused_rows) in [("BIGINT", vec![2, 4, 5, 7]), ("FLOAT", vec![5])] {
        let view = sql(price, "TIMESTAMP");
        let (a, rows_a, refused_a) = go(&view, &file);
        let (b, rows_b, refused_b) = go(&view, &csv);
        assert!(a.ok() && b.ok(), "{}\n{}", a.stderr, b.stderr);
        assert!(!rows_a.is_empty());
        assert_eq!(rows_a, rows_b, "{price}: the Parquet file and its CSV");
        assert_eq!(refused_a, refused_b, "{price}");
        let at: Vec<(u64, String)> = (refused_rows.iter())
            .map(|&r| (r, "price".to_string()))
            .collect();
        assert_eq!(refused_a, at, "{price}");
        // the rows at -1 µs and -999 µs are in the window before the epoch
        assert!(
            rows_a
                .iter()
                .any(|r| r.starts_with("1969-12-31T23:59:58,1970-01-01T00:00:00,1,")),
            "{rows_a:?}"
        );
    }
    // a time declared an integer, a number declared a date: refused, named
    let dates = pq(
        "dates.parquet",
        vec![
            ("auction", Arc::new(Int64Array::from(vec![1]))),
            ("price", Arc::new(Int64Array::from(vec![1]))),
            ("ts", Arc::new(Date32Array::from(vec![3]))),
        ],
    );
    for (input, price, ts, says) in [
        (
            &file,
            "BIGINT",
            "BIGINT",
            "column `ts` holds TIMESTAMP values, which cannot be read as BIGINT",
        ),
        (
            &dates,
            "BIGINT",
            "BIGINT",
            "column `ts` holds DATE values, which cannot be read as BIGINT",
        ),
        (
            &file,
            "DATE",
            "TIMESTAMP",
            "column `price` holds DOUBLE values, which cannot be read as DATE",
        ),
    ] {
        let o = go(&sql(price, ts), input).0;
        assert_eq!(o.code, Some(1), "{ts}: {}", o.stderr);
        assert!(o.stderr.contains(says), "{ts}: {}", o.stderr);
    }
}

/// An empty cell of a column declared `NOT NULL` refuses its row, named,
/// as a cell that does not parse does: the run goes on (it ended with an
/// internal Arrow error), on both paths, and emits
/// what the good rows alone give; `--strict` stops at it.
#[test]
fn an_empty_cell_of_a_not_null_column_refuses_its_row() {
    let f = files();
    let strict = ddl_of(VIEW, "auction BIGINT NOT NULL, price BIGINT, ts BIGINT");
    let recompute = strict.replace("mode = 'auto'", "mode = 'recompute'");
    assert_ne!(strict, recompute);
    let mut r = SplitMix::new(3);
    let rows: Vec<Vec<String>> = bids(&mut r, 300).iter().map(|b| b.to_vec()).collect();
    let mut holed = rows.clone();
    holed[120][0] = String::new();
    let good: Vec<Vec<String>> = (rows.iter().enumerate())
        .filter(|(i, _)| *i != 120)
        .map(|(_, r)| r.clone())
        .collect();
    let input = write(&f.dir, "holed.csv", &csv_text(&holed));
    let good = write(&f.dir, "good.csv", &csv_text(&good));
    for (name, sql) in [("auto.sql", &strict), ("recompute.sql", &recompute)] {
        let view = write(&f.dir, name, sql);
        let out = f.dir.join("out.csv");
        let o = run(args(&view, &input, 50, &out));
        assert!(o.ok(), "{name}: {}", o.stderr);
        assert!(
            o.stderr.contains("holed.csv: line 122: column `auction`: the cell is empty (NULL), but `auction` is declared NOT NULL"),
            "{name}: {}",
            o.stderr
        );
        same_as_good_rows_alone(&f, &view, &good, 50, &out);
        let mut a = args(&view, &input, 50, &out);
        a.push("--strict".into());
        let o = run(a);
        assert_eq!(o.code, Some(1), "{name}: {}", o.stderr);
        assert!(o.stderr.contains("line 122"), "{name}: {}", o.stderr);
    }
}

/// A file's column whose name differs from a declared one only in ASCII
/// case is that column (an unquoted DDL name is lower case: Flink's
/// `dateTime` declares `datetime`), in a CSV header and a Parquet file,
/// unless two names could be it: both are then named. An `--input` source
/// name is read so too.
#[test]
fn a_column_named_in_another_case_is_the_declared_one_unless_ambiguous() {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    let f = files();
    let sql = write(
        &f.dir,
        "mixed.sql",
        &ddl_of(VIEW, TYPES).replace("auction BIGINT", "Auction BIGINT"),
    );
    let mut r = SplitMix::new(11);
    let rows: Vec<Vec<String>> = bids(&mut r, 200).iter().map(|b| b.to_vec()).collect();
    let plain = write(&f.dir, "plain.csv", &csv_text(&rows));
    let mixed = write(
        &f.dir,
        "mixed.csv",
        &csv_text(&rows).replacen("auction,price,ts", "AucTion,Price,ts", 1),
    );
    let cols: Vec<ArrayRef> = (0..3)
        .map(|i| {
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r[i].parse::<i64>().expect("int")),
            )) as ArrayRef
        })
        .collect();
    let schema = Arc::new(Schema::new(
        ["AUCTION", "price", "TS"]
            .iter()
            .map(|n| Field::new(*n, DataType::Int64, true))
            .collect::<Vec<_>>(),
    ));
    let pq = f.dir.join("mixed.parquet");
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&pq).expect("create"),
        schema.clone(),
        None,
    )
    .expect("writer");
    w.write(&RecordBatch::try_new(schema, cols).expect("batch"))
        .expect("write");
    w.close().expect("close");
    let (want, got) = (f.dir.join("want.csv"), f.dir.join("got.csv"));
    let o = run(args(&sql, &plain, 40, &want));
    assert!(o.ok(), "{}", o.stderr);
    assert!(!csv_rows(&want).is_empty());
    for input in [&mixed, &pq] {
        let o = run(args(&sql, input, 40, &got));
        assert!(o.ok(), "{}: {}", input.display(), o.stderr);
        assert_eq!(csv_rows(&got), csv_rows(&want), "{}", input.display());
    }
    // so is a source named in another case by --input
    let upper: Vec<String> = (args(&sql, &plain, 40, &got).into_iter())
        .map(|a| a.replace("bids=", "BIDS="))
        .collect();
    assert!(upper.iter().any(|a| a.starts_with("BIDS=")));
    let o = run(upper);
    assert!(o.ok(), "{}", o.stderr);
    assert_eq!(csv_rows(&got), csv_rows(&want));
    let both = write(&f.dir, "both.csv", "Auction,AUCTION,price,ts\n1,1,2,3\n");
    let o = run(args(&sql, &both, 40, &got));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("missing auction") && o.stderr.contains("not declared: Auction, AUCTION"),
        "{}",
        o.stderr
    );
}

#[test]
fn unwritable_outputs_fail_before_anything_is_touched() {
    let f = files();
    let mut r = SplitMix::new(3);
    let rows: Vec<Vec<String>> = bids(&mut r, 300).into_iter().map(|b| b.to_vec()).collect();
    let input = write(&f.dir, "bids.csv", &csv_text(&rows));
    // an output in a directory that does not exist, and one that is a directory
    let o = run(args(
        &f.view,
        &input,
        50,
        &f.dir.join("nope").join("out.csv"),
    ));
    assert_eq!(o.code, Some(1));
    assert!(o.stderr.contains("nope/out.csv"), "{}", o.stderr);
    let o = run(args(&f.view, &input, 50, &f.dir));
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    // an unwritable --report leaves an existing --output as it was
    let out = write(&f.dir, "out.csv", "precious\n");
    let mut a = args(&f.view, &input, 50, &out);
    a.extend([
        "--report".to_string(),
        f.dir.join("nope").join("r.jsonl").display().to_string(),
    ]);
    let o = run(&a);
    assert_eq!(o.code, Some(1));
    assert!(o.stderr.contains("r.jsonl"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&out).expect("out"), "precious\n");
}

#[test]
fn an_output_that_is_an_input_is_refused() {
    let f = files();
    let mut r = SplitMix::new(4);
    let rows: Vec<Vec<String>> = bids(&mut r, 100).into_iter().map(|b| b.to_vec()).collect();
    let text = csv_text(&rows);
    let input = write(&f.dir, "bids.csv", &text);
    std::fs::create_dir(f.dir.join("sub")).expect("mkdir");
    // the same file under another spelling
    let same = f.dir.join("sub").join("..").join("bids.csv");
    for (flag, view) in [("--output", &f.view), ("--report", &f.sql)] {
        let mut a = args(view, &input, 50, &f.dir.join("o.csv"));
        if flag == "--output" {
            a[8] = same.display().to_string();
        } else {
            a.extend([flag.to_string(), same.display().to_string()]);
        }
        let o = run(&a);
        assert_eq!(o.code, Some(1), "{flag}: {}", o.stderr);
        assert!(
            o.stderr.contains(flag) && o.stderr.contains("input of source `bids`"),
            "{}",
            o.stderr
        );
        assert_eq!(std::fs::read_to_string(&input).expect("input"), text);
    }
    // a database sink over an input, the output or the report
    let report = f.dir.join("r.jsonl");
    for (target, what) in [
        (same.clone(), "input of source `bids`"),
        (f.dir.join("o.csv"), "--output file"),
        (report.clone(), "--report file"),
    ] {
        let mut a = args(&f.view, &input, 50, &f.dir.join("o.csv"));
        a.extend([
            "--report".to_string(),
            report.display().to_string(),
            "--sink".to_string(),
            format!("sqlite://{}?table=v", target.display()),
        ]);
        let o = run(&a);
        assert_eq!(o.code, Some(1), "{what}: {}", o.stderr);
        assert!(
            o.stderr.contains("--sink") && o.stderr.contains(what),
            "{}",
            o.stderr
        );
        assert_eq!(std::fs::read_to_string(&input).expect("input"), text);
    }
    // the view's own file, in either spelling, as the report, the sink or
    // the output (a pipeline whose file name ends in .csv): `--report v.sql`
    // wrote the report over the pipeline
    let in_csv = write(&f.dir, "pipeline.csv", &ddl_of(VIEW, TYPES));
    for view in [&f.view, &f.sql, &in_csv] {
        let kept = std::fs::read_to_string(view).expect("view");
        let flag = match view == &in_csv {
            true => "--sql",
            false => spec_flag(view),
        };
        let target = view.display().to_string();
        let sink = format!("sqlite://{target}?table=v");
        let mut tries = vec![("--report", target.as_str()), ("--sink", sink.as_str())];
        if view == &in_csv {
            tries.push(("--output", target.as_str()));
        }
        for (out_flag, value) in tries {
            let mut a = args(view, &input, 50, &f.dir.join("o.csv"));
            a[1] = flag.to_string();
            match out_flag {
                "--output" => a[8] = value.to_string(),
                _ => a.extend([out_flag.to_string(), value.to_string()]),
            }
            let o = run(&a);
            assert_eq!(o.code, Some(1), "{out_flag} {value}: {}", o.stderr);
            assert!(
                o.stderr.contains(out_flag) && o.stderr.contains(&format!("view's {flag} file")),
                "{out_flag} {value}: {}",
                o.stderr
            );
            assert_eq!(std::fs::read_to_string(view).expect("view"), kept);
        }
    }
}

#[test]
fn a_parquet_output_stays_readable_after_a_failure_midway() {
    let f = files();
    let toml =
        "name = \"v\"\nsql = \"SELECT auction, SUM(price) AS volume FROM bids GROUP BY auction\"\n\
         [[source]]\nname = \"bids\"\nevent_time = \"ts\"\n\
         [window]\nkind = \"tumbling\"\nsize = \"10s\"\n";
    let toml_view = write(&f.dir, "sum.toml", toml);
    let sql_view = write(&f.dir, "sum.sql", &ddl_of(toml, TYPES));
    // trigger 2 closes [0s, 10s); trigger 3's sum does not fit BIGINT
    let big = i64::MAX / 2 + 1;
    let input = write(
        &f.dir,
        "bids.csv",
        &format!(
            "auction,price,ts\n1,10,1000\n2,20,2000\n1,5,12000\n2,6,13000\n1,{big},15000\n1,{big},16000\n1,1,30000\n1,1,31000\n"
        ),
    );
    for view in [&toml_view, &sql_view] {
        let out = f.dir.join("out.parquet");
        let o = run(args(view, &input, 2, &out));
        assert_eq!(o.code, Some(1), "the sum must overflow: {}", o.stderr);
        let rows =
            parquet_rows(&out).unwrap_or_else(|e| panic!("unreadable after the failure: {e}"));
        assert_eq!(rows, vec!["0,10000,1,10", "0,10000,2,20"], "{}", o.stderr);
    }
}

#[test]
fn bad_flags_are_refused() {
    let f = files();
    let input = write(&f.dir, "bids.csv", "auction,price,ts\n1,2,3\n");
    let out = f.dir.join("o.csv");
    let mut a = args(&f.view, &input, 0, &out);
    let o = run(&a);
    assert_ne!(o.code, Some(0));
    assert!(o.stderr.contains("at least 1"), "{}", o.stderr);
    a[6] = "10".into();
    a.extend(["--input".to_string(), format!("bids={}", input.display())]);
    let o = run(&a);
    assert_eq!(o.code, Some(1));
    assert!(o.stderr.contains("twice"), "{}", o.stderr);
    assert!(
        !out.exists(),
        "nothing is written before the flags are checked"
    );
    // a memory:// state root would be gone when the process ends: no run
    // could resume from it, and no other process inspect it
    a.truncate(a.len() - 2);
    a.extend(["--state-root".to_string(), "memory://runs".to_string()]);
    let o = run(&a);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("--state-root memory://runs") && o.stderr.contains("file:///"),
        "{}",
        o.stderr
    );
    assert!(!out.exists(), "nothing is written");
    let o = run(["inspect", "MEMORY://runs"]);
    assert_eq!(o.code, Some(1));
    assert!(
        o.stderr.contains("lives only inside the process"),
        "{}",
        o.stderr
    );
}

/// A query whose operators chain deeper than DataFusion's recursion takes
/// (thousands of `OR`s or `UNION`s) overflowed the stack and aborted the
/// process. Such a query is refused with an error that counts them, in the
/// library and through DDL, and the engine stays usable; a chain at the
/// limit runs on both paths (on this 2 MiB test thread, in a debug build)
/// and gives what its `IN` form gives.
#[test]
fn a_query_that_chains_too_many_operators_is_refused_not_a_crash() {
    use crate::common::{batch, canon, emitted, schema, Ev};
    use std::time::Duration;
    use thund::{Engine, ExecMode, ViewSpec, WindowSpec};

    let rows: Vec<Ev> = (0..400)
        .map(|i| Ev {
            t: i * 37 % 5_000,
            k: i % 7,
            g: format!("g{}", i % 3),
            v: Some(i % 600),
            f: 0.5,
        })
        .collect();
    let view = |sql: &str, exec: ExecMode| {
        ViewSpec::builder("v", sql)
            .source("t", "ts", schema())
            .window(WindowSpec::tumbling(Duration::from_secs(1)))
            .mode(exec)
            .build()
            .expect("spec")
    };
    let run = |sql: &str, exec: ExecMode| -> Result<Vec<String>, String> {
        let mut e = Engine::builder().build().expect("engine");
        e.create_view(view(sql, exec)).map_err(|e| e.to_string())?;
        Ok(canon(&emitted(&mut e, "t", batch(&rows), "v")))
    };
    let ors = |n: i64| {
        let terms: Vec<String> = (0..n).map(|i| format!("v = {i}")).collect();
        format!(
            "SELECT k, COUNT(*) AS c FROM t WHERE {} GROUP BY k",
            terms.join(" OR ")
        )
    };
    let listed = |n: i64| {
        let vals: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        format!(
            "SELECT k, COUNT(*) AS c FROM t WHERE v IN ({}) GROUP BY k",
            vals.join(", ")
        )
    };
    // at the limit: 500 equalities, 499 ORs and COUNT's `*`, 1000 operators
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        let want = run(&listed(500), exec).expect("IN");
        assert!(want.len() > 5, "{want:?}");
        assert_eq!(
            run(&ors(500), exec).expect("at the limit"),
            want,
            "{exec:?}"
        );
    }
    let unions =
        |n: usize| vec!["SELECT k, COUNT(*) AS c FROM t GROUP BY k"; n].join(" UNION ALL ");
    // 256 set operations, the most taken
    for exec in [ExecMode::Auto, ExecMode::Recompute] {
        run(&unions(257), exec).expect("at the limit");
    }
    // over it, by a little and by far
    for (sql, says) in [
        (
            ors(501),
            "the query has 1002 operators (0 of them UNION, INTERSECT or EXCEPT); at most 1000",
        ),
        (ors(100_000), "the query has 200000 operators"),
        (unions(258), "the query has 257 set operations"),
        (unions(50_000), "the query has 49999 set operations"),
    ] {
        let mut e = Engine::builder().build().expect("engine");
        let msg = e
            .create_view(view(&sql, ExecMode::Auto))
            .expect_err("refused")
            .to_string();
        assert!(msg.contains(says), "{}…: {msg}", &sql[..80]);
        assert!(msg.contains("at most"), "{msg}");
        // the engine stays usable
        e.create_view(view(&listed(3), ExecMode::Auto))
            .expect("a good view after");
        // and through DDL, at the query
        let ddl = format!(
            "CREATE SOURCE t (k BIGINT, g VARCHAR, v BIGINT, f DOUBLE, ts TIMESTAMP, \
             d DECIMAL(10, 2), WATERMARK FOR ts AS ts);\nCREATE VIEW v AS {sql}"
        );
        let msg = Engine::builder()
            .build()
            .expect("engine")
            .execute_sql(&ddl)
            .expect_err("refused")
            .to_string();
        assert!(
            msg.contains(says) && msg.contains("line 2, column 18"),
            "{msg}"
        );
    }
}
