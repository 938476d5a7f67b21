//! Real crashes: the `thund` binary, checkpointing every trigger to a
//! file:// state root, is killed with SIGKILL at random moments (epochs are
//! small, so some kills land while a checkpoint is being written) and
//! restarted until the input is done. Its `--output` file must then equal an
//! uninterrupted run's, row for row: every on-time row counted, no window
//! twice, no torn row. The clean run and the killed runs are given the
//! view in its two spellings (a TOML spec, a SQL pipeline with the window in
//! the query), so the equality also holds across them.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bin, rng};
use rng::SplitMix;

fn write_input(dir: &Path, rows: usize) -> std::path::PathBuf {
    write_source(dir, "bids", rows, 99)
}

/// A CSV of `rows` random `auction,price,ts` rows (seeded), `{name}.csv`.
fn write_source(dir: &Path, name: &str, rows: usize, seed: u64) -> std::path::PathBuf {
    let mut r = SplitMix::new(seed);
    let mut s = String::from("auction,price,ts\n");
    let mut t = 0i64;
    for _ in 0..rows {
        t += r.below(30) as i64;
        s.push_str(&format!(
            "{},{},{}\n",
            r.below(8),
            r.below(100) + 1,
            t - r.below(2500) as i64
        ));
    }
    let p = dir.join(format!("{name}.csv"));
    std::fs::write(&p, s).expect("input");
    p
}

/// The hopping window most crash tests use.
const HOP: &str = "kind = \"hopping\"\nsize = \"6s\"\nslide = \"3s\"\n";

fn view(dir: &Path, sql: &str, mode: &str, output: &str, window: &str) -> std::path::PathBuf {
    let p = dir.join("v.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"v\"\nsql = \"{sql}\"\nmode = \"{mode}\"\noutput = \"{output}\"\n\
             [[source]]\nname = \"bids\"\nevent_time = \"ts\"\n\
             [watermark]\nallowed_lateness = \"1s\"\n\
             [window]\n{window}"
        ),
    )
    .expect("view");
    p
}

fn sorted_lines(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(p)
        .expect("output")
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// The view as a TOML spec and as a SQL pipeline; odd seeds run cleanly
/// from the TOML spec and are killed running the SQL one, even seeds the
/// other way round.
fn crash_until_done(sql: &str, mode: &str, output: &str, seed: u64, window: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_input(dir.path(), 8000);
    let toml = view(dir.path(), sql, mode, output, window);
    let text = std::fs::read_to_string(&toml).expect("view");
    let ddl = dir.path().join("v.sql");
    let columns = "auction BIGINT, price BIGINT, ts BIGINT";
    std::fs::write(&ddl, bin::ddl_of(&text, columns)).expect("pipeline");
    let (clean, killed) = match seed % 2 {
        1 => (&toml, &ddl),
        _ => (&ddl, &toml),
    };
    killed_runs_equal_a_clean_one(dir.path(), &input, clean, killed, seed);
}

/// Runs `thund run` over `input` once cleanly with the `clean` spec, then
/// killed and restarted until done with the `killed` one (a TOML spec or a
/// `.sql` pipeline each): both outputs must be equal.
fn killed_runs_equal_a_clean_one(dir: &Path, input: &Path, clean: &Path, killed: &Path, seed: u64) {
    killed_runs_over_inputs_equal_a_clean_one(dir, &[("bids", input)], clean, killed, seed)
}

/// [`killed_runs_equal_a_clean_one`] over several sources' inputs.
fn killed_runs_over_inputs_equal_a_clean_one(
    dir: &Path,
    inputs: &[(&str, &Path)],
    clean_spec: &Path,
    killed_spec: &Path,
    seed: u64,
) {
    killed_runs_sink_like_a_clean_one(dir, inputs, clean_spec, killed_spec, seed, DbSink::None)
}

/// A database sink for the runs: the clean run and the killed runs each
/// write their own table.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DbSink {
    None,
    Sqlite,
    Postgres,
}

/// Reads a sink's table back as sorted text rows.
type ReadRows = Box<dyn Fn() -> Vec<String>>;

/// The `--sink` URL of the run writing `out`, and its table's rows.
fn sink_of(db: DbSink, out: &Path, tag: &str) -> Option<(String, ReadRows)> {
    match db {
        DbSink::None => None,
        DbSink::Sqlite => {
            let file = out.with_extension("db");
            let url = format!("sqlite://{}?table=v", file.display());
            Some((
                url,
                Box::new(move || crate::common::db::sqlite_rows(&file, "v")),
            ))
        }
        DbSink::Postgres => {
            let table = format!(
                "{tag}_{}",
                out.file_stem().and_then(|s| s.to_str()).unwrap_or("v")
            );
            let url = crate::common::db::pg_sink(&table);
            Some((url, Box::new(move || crate::common::db::pg_rows(&table))))
        }
    }
}

/// [`killed_runs_over_inputs_equal_a_clean_one`], and with a database sink
/// each run also sinks into a table (`--sink`): after the kills the table
/// must equal the clean run's, row for row (no duplicate, none lost).
fn killed_runs_sink_like_a_clean_one(
    dir: &Path,
    inputs: &[(&str, &Path)],
    clean_spec: &Path,
    killed_spec: &Path,
    seed: u64,
    db: DbSink,
) {
    let tag = crate::common::db::pg_table("crash");
    let base = |spec: &Path, out: &Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_thund"));
        c.args(["run", "--rows-per-trigger", "40", bin::spec_flag(spec)])
            .arg(spec);
        for (name, input) in inputs {
            c.arg("--input").arg(format!("{name}={}", input.display()));
        }
        if let Some((url, _)) = sink_of(db, out, &tag) {
            c.arg("--sink").arg(url);
        }
        // the last run's stderr, shown if it fails
        let err = std::fs::File::create(out.with_extension("stderr")).expect("stderr file");
        c.arg("--output").arg(out).stdout(Stdio::null()).stderr(err);
        c
    };
    let clean = dir.join("clean.csv");
    assert!(base(clean_spec, &clean).status().expect("run").success());

    let out = dir.join("out.csv");
    let root = format!("file://{}", dir.join("state").display());
    let mut r = SplitMix::new(seed);
    let (mut kills, mut runs, mut mid_run_kills, mut seen) = (0, 0, 0, 0u64);
    let started = Instant::now();
    loop {
        runs += 1;
        assert!(
            runs < 200 && started.elapsed() < Duration::from_secs(240),
            "no progress after {runs} runs"
        );
        let mut child = base(killed_spec, &out)
            .arg("--state-root")
            .arg(&root)
            .spawn()
            .expect("spawn");
        // the first runs are killed early and often; later ones get more time
        let wait = Duration::from_millis(20 + r.below(50 + 25 * runs as u64));
        std::thread::sleep(wait);
        match child.try_wait().expect("wait") {
            Some(status) => {
                assert!(
                    status.success(),
                    "thund run failed after {kills} kills: {status}: {}",
                    std::fs::read_to_string(out.with_extension("stderr")).unwrap_or_default()
                );
                break;
            }
            None => {
                child.kill().expect("SIGKILL");
                child.wait().expect("reap");
                kills += 1;
                // a kill after this run had written output: it died mid-stream
                let len = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
                if len > seen {
                    mid_run_kills += 1;
                }
                seen = seen.max(len);
            }
        }
    }
    eprintln!("{kills} kills ({mid_run_kills} mid-stream) in {runs} runs");
    assert!(
        mid_run_kills >= 3,
        "only {mid_run_kills} of {kills} kills landed mid-stream: the test proved nothing"
    );
    assert_eq!(
        sorted_lines(&out),
        sorted_lines(&clean),
        "after {kills} kills and {runs} runs"
    );
    if let (Some((_, got)), Some((_, want))) = (sink_of(db, &out, &tag), sink_of(db, &clean, &tag))
    {
        let (got, want) = (got(), want());
        assert!(!want.is_empty());
        assert_eq!(
            got, want,
            "the sink's table ({db:?}) after {kills} kills and {runs} runs"
        );
    }
}

/// Killed runs sinking into SQLite, in Update mode (upserts on the window and
/// the GROUP BY key, a closing window's final rows replacing its rows) and
/// in Append mode (inserts): each epoch and the sink's epoch are one
/// transaction, so the replay after a kill skips what was applied.
#[test]
fn killed_runs_into_sqlite_resume_exactly() {
    killed_runs_into_a_database_resume_exactly(DbSink::Sqlite);
}

/// [`killed_runs_into_sqlite_resume_exactly`] into the suite's PostgreSQL server.
#[test]
fn killed_runs_into_postgres_resume_exactly() {
    killed_runs_into_a_database_resume_exactly(DbSink::Postgres);
}

fn killed_runs_into_a_database_resume_exactly(db: DbSink) {
    for (mode, output, seed) in [("auto", "update", 11), ("recompute", "append", 12)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = write_input(dir.path(), 8000);
        let toml = view(
            dir.path(),
            "SELECT auction, COUNT(*) AS bids, MAX(price) AS top FROM bids GROUP BY auction",
            mode,
            output,
            HOP,
        );
        killed_runs_sink_like_a_clean_one(dir.path(), &[("bids", &input)], &toml, &toml, seed, db);
    }
}

#[test]
fn killed_incremental_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume, MAX(price) AS top, \
         COUNT(*) FILTER (WHERE price < 50) AS cheap, MAX(ts) AS last FROM bids GROUP BY auction",
        "auto",
        "update",
        1,
        HOP,
    );
}

#[test]
fn killed_recompute_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction, COUNT(*) AS bids FROM bids GROUP BY auction ORDER BY bids DESC, auction LIMIT 3",
        "recompute",
        "update",
        2,
        HOP,
    );
}

/// The top of each window (ORDER BY … LIMIT) on the incremental path, in
/// Update mode: what each open window showed is rebuilt from the checkpoint.
#[test]
fn killed_ranked_incremental_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction, COUNT(*) AS bids, MAX(price) AS top FROM bids GROUP BY auction \
         ORDER BY bids DESC, auction LIMIT 3",
        "auto",
        "update",
        3,
        HOP,
    );
}

/// Session windows on the incremental path (sessions of one auction break
/// after 300 ms without a bid and often run for many gaps, so units are
/// carried), in Append mode: every session emitted once, whole.
#[test]
fn killed_session_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume, MIN(ts) AS first \
         FROM bids WHERE price > 10 GROUP BY auction",
        "auto",
        "append",
        4,
        "kind = \"session\"\ngap = \"300ms\"\nkey = [\"auction\"]\n",
    );
}

/// Aggregates kept per value of two arguments (Nexmark q15/q16's shape:
/// each row one entry per argument), in Update mode: the open groups'
/// entries are rebuilt from the checkpoint.
#[test]
fn killed_distinct_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction % 5 AS a5, COUNT(*) AS bids, COUNT(DISTINCT auction) AS auctions, \
         COUNT(DISTINCT price) FILTER (WHERE price < 50) AS cheap_prices, SUM(DISTINCT price) AS prices \
         FROM bids GROUP BY auction % 5",
        "auto",
        "update",
        9,
        HOP,
    );
}

/// A query over one aggregate (the auctions with the most bids per window,
/// Nexmark q5's shape): the aggregate incremental, the rest per window over
/// its groups, in Update mode (the open groups rebuilt from the checkpoint).
#[test]
fn killed_hot_items_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction, num FROM (SELECT auction, COUNT(*) AS num FROM bids GROUP BY auction) AS c \
         WHERE num = (SELECT MAX(num) FROM (SELECT auction, COUNT(*) AS num FROM bids GROUP BY auction) AS m)",
        "auto",
        "update",
        5,
        HOP,
    );
}

/// An aggregate over the groups (Nexmark q4's shape): in Update mode each
/// open window's outer groups are kept, and built again from the groups a
/// restart restores.
#[test]
fn killed_aggregate_over_groups_runs_resume_exactly() {
    crash_until_done(
        "SELECT a5, COUNT(*) AS auctions, SUM(bids) AS bids, AVG(top) AS avg_top FROM \
         (SELECT auction, auction % 5 AS a5, COUNT(*) AS bids, MAX(price) AS top \
          FROM bids GROUP BY auction) AS c GROUP BY a5",
        "auto",
        "update",
        5,
        HOP,
    );
}

/// The bids holding each window's highest price (Nexmark q7's shape): only
/// candidate rows reach the dataflow, the query runs per window over them;
/// in Update mode, after a restart the host's pruning rule starts empty.
#[test]
fn killed_highest_bid_runs_resume_exactly() {
    crash_until_done(
        "SELECT auction, price, ts FROM bids WHERE price = (SELECT MAX(price) FROM bids)",
        "auto",
        "update",
        6,
        HOP,
    );
}

/// A pipeline written in SQL DDL (`thund run --sql`), its hopping window in
/// the query, on the incremental path in Update mode.
#[test]
fn killed_sql_pipeline_runs_resume_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_input(dir.path(), 8000);
    let sql = dir.path().join("p.sql");
    std::fs::write(
        &sql,
        "CREATE SOURCE bids (auction BIGINT, price BIGINT, ts BIGINT,\n\
           WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
         CREATE VIEW v WITH (output = 'update') AS\n\
           SELECT auction, window_start, window_end, COUNT(*) AS bids, MAX(price) AS top\n\
           FROM HOP(bids, ts, INTERVAL '3' SECOND, INTERVAL '6' SECOND)\n\
           GROUP BY auction, window_start, window_end;\n",
    )
    .expect("pipeline");
    killed_runs_equal_a_clean_one(dir.path(), &input, &sql, &sql, 7);
}

/// A windowed join of two sources (bids against asks of the same auction in
/// the same hopping window, then aggregated), written in SQL DDL, on the
/// incremental path in Update mode: each source resumes from its own offset.
/// The aggregate folds the join's new pairs (each window's in a unit of one
/// slide): after each kill its state is rebuilt from the restored rows' pairs.
#[test]
fn killed_join_runs_resume_exactly() {
    killed_join_runs(
        "HOP(bids, ts, INTERVAL '3' SECOND, INTERVAL '6' SECOND)",
        "HOP(asks, ts, INTERVAL '3' SECOND, INTERVAL '6' SECOND)",
        true,
    );
}

/// The same join over tumbling windows.
#[test]
fn killed_join_aggregate_runs_resume_exactly() {
    killed_join_runs(
        "TUMBLE(bids, ts, INTERVAL '4' SECOND)",
        "TUMBLE(asks, ts, INTERVAL '4' SECOND)",
        true,
    );
}

/// Kills and resumes `thund run` over bids joined with asks in the windows
/// of `bids_window` and `asks_window`; `feeds`: whether `explain` shows the
/// aggregate fed by the join's new pairs.
fn killed_join_runs(bids_window: &str, asks_window: &str, feeds: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bids = write_source(dir.path(), "bids", 6000, 99);
    let asks = write_source(dir.path(), "asks", 1500, 7);
    let sql = dir.path().join("p.sql");
    std::fs::write(
        &sql,
        format!(
            "CREATE SOURCE bids (auction BIGINT, price BIGINT, ts BIGINT,\n\
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
             CREATE SOURCE asks (auction BIGINT, price BIGINT, ts BIGINT,\n\
               WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);\n\
             CREATE VIEW v WITH (output = 'update') AS\n\
               SELECT b.auction, b.window_start, b.window_end, COUNT(*) AS pairs,\n\
                 MAX(b.price - a.price) AS spread\n\
               FROM {bids_window} AS b\n\
               JOIN {asks_window} AS a\n\
               ON b.auction = a.auction AND b.window_start = a.window_start\n\
                 AND b.window_end = a.window_end\n\
               WHERE b.price >= a.price\n\
               GROUP BY b.auction, b.window_start, b.window_end;\n"
        ),
    )
    .expect("pipeline");
    let explain = Command::new(env!("CARGO_BIN_EXE_thund"))
        .args(["explain", "--sql"])
        .arg(&sql)
        .output()
        .expect("explain");
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("Incremental join of `bids` and `asks`"),
        "{text}"
    );
    assert_eq!(text.contains("the join's new pairs feed"), feeds, "{text}");
    killed_runs_over_inputs_equal_a_clean_one(
        dir.path(),
        &[("bids", &bids), ("asks", &asks)],
        &sql,
        &sql,
        8,
    );
}

/// Sends `signal` (`INT`, `TERM`) to a child with the system's `kill`.
fn signal(child: &std::process::Child, signal: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(ok.success(), "kill -{signal}");
}

/// Ctrl-C (SIGINT) and SIGTERM stop `thund run` between two triggers: the
/// one in progress is applied and checkpointed, the exit code is 128 + the
/// signal, stderr says how to go on, and rerunning the same command
/// resumes: the output equals an uninterrupted run's.
#[test]
fn sigint_and_sigterm_stop_between_triggers_and_the_same_command_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = write_input(dir.path(), 20_000);
    let spec = view(
        dir.path(),
        "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume FROM bids GROUP BY auction",
        "auto",
        "append",
        HOP,
    );
    let run = |out: &Path, root: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_thund"));
        c.args(["run", "--rows-per-trigger", "20", "--view"])
            .arg(&spec)
            .arg("--input")
            .arg(format!("bids={}", input.display()))
            .arg("--output")
            .arg(out);
        if let Some(r) = root {
            c.arg("--state-root").arg(r);
        }
        c.stdout(Stdio::null()).stderr(Stdio::piped());
        c
    };
    let clean = dir.path().join("clean.csv");
    assert!(run(&clean, None).status().expect("run").success());

    let out = dir.path().join("out.csv");
    let root = format!("file://{}", dir.path().join("state").display());
    for (sig, code, name) in [("INT", 130, "SIGINT"), ("TERM", 143, "SIGTERM")] {
        let mut child = run(&out, Some(&root)).spawn().expect("spawn");
        // signal once the run has emitted something of its own
        let before = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let started = Instant::now();
        while std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) <= before {
            assert!(started.elapsed() < Duration::from_secs(60), "no output");
            assert!(
                child.try_wait().expect("wait").is_none(),
                "ended before {name}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(&child, sig);
        let done = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(code), "{stderr}");
        assert!(
            stderr.contains(&format!("interrupted by {name}"))
                && stderr.contains("the same command resumes"),
            "{stderr}"
        );
        assert!(stderr.contains(&format!("(stopped by {name})")), "{stderr}");
    }
    let last = run(&out, Some(&root)).output().expect("run");
    assert!(
        last.status.success(),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    assert_eq!(sorted_lines(&out), sorted_lines(&clean));
}
