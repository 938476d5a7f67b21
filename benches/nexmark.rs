//! Nexmark, the way streaming engines publish it: the `nexmark` crate's
//! event stream (persons, auctions, bids; fixed seed), pre-generated into
//! Arrow batches before timing, through each query of `benches/nexmark/`.
//!
//! ```text
//! cargo bench --bench nexmark -- [--query q5[,q7…]] [--path incremental|recompute|both]
//!     [--workers 1[,2]] [--events N] [--rows-per-trigger N] [--check-events N]
//!     [--output update|append] [--repeat N]
//! ```
//!
//! Update mode is the default: every trigger emits the windows' changed rows,
//! as an engine that keeps its views current does (Feldera, RisingWave). In
//! Append mode a window's rows come once, when it closes, so the recompute
//! path evaluates each window once, like a batch job.
//!
//! Defaults: every query, both paths, 1 and 2 workers, 1 000 000 events
//! (10 000 per second of event time, the generator's rate: 100 s), 10 000
//! events per trigger. Before timing, each query's incremental and
//! recompute outputs are compared trigger by trigger on the first
//! `--check-events` events (default 20 000, at most `--events`): a
//! disagreement stops the bench.
//! Per run it prints the path (with the reason for recompute), events/s per
//! core (events over the run's wall time, divided by the workers), and p50
//! and p99 of the time per trigger (push + trigger); then each query's
//! incremental / recompute ratio at 1 worker. This machine is shared and
//! noisy: `--repeat N` runs N rounds, each running every chosen path once in
//! turn (so a slow spell falls on both), and gives the ratio of the medians
//! with the range of the rounds' own ratios.

#![allow(missing_docs)]

use std::time::{Duration, Instant};

use thund::ExecMode;

// the allocator the `thund` binary uses, for both paths alike
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../tests/suite/common/nexmark.rs"]
mod nexmark_data;
use nexmark_data as data;

fn canon(batches: &[arrow::array::RecordBatch]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for b in batches {
        let opts = arrow::util::display::FormatOptions::default();
        let fs: Vec<_> = b
            .columns()
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &opts).expect("fmt"))
            .collect();
        for r in 0..b.num_rows() {
            out.push(
                fs.iter()
                    .map(|f| f.value(r).to_string())
                    .collect::<Vec<_>>()
                    .join("|"),
            );
        }
    }
    out.sort();
    out
}

const USAGE: &str = "usage: nexmark [--query q5[,q7…]] [--path incremental|recompute|both]
    [--workers 1[,2]] [--events N] [--rows-per-trigger N] [--check-events N]
    [--output update|append] [--repeat N]
queries: see benches/nexmark/*.sql";

struct Args {
    queries: Vec<String>,
    paths: Vec<ExecMode>,
    workers: Vec<usize>,
    events: usize,
    per: usize,
    check: usize,
    output: thund::OutputMode,
    /// Rounds: each runs every chosen path and worker count once.
    repeat: usize,
}

fn args() -> Args {
    let mut a = Args {
        queries: data::QUERIES.iter().map(|s| s.to_string()).collect(),
        paths: vec![ExecMode::Auto, ExecMode::Recompute],
        workers: vec![1, 2],
        events: 1_000_000,
        per: 10_000,
        check: 20_000,
        output: thund::OutputMode::Update,
        repeat: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| fail(&format!("{flag} needs a value")))
        };
        let count = |v: String| -> usize {
            match v.parse() {
                Ok(0) | Err(_) => fail(&format!("{flag} {v}: expected a positive number")),
                Ok(n) => n,
            }
        };
        match flag.as_str() {
            "--bench" => {}
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--query" => a.queries = value().split(',').map(str::to_string).collect(),
            "--path" => {
                a.paths = match value().as_str() {
                    "incremental" => vec![ExecMode::Auto],
                    "recompute" => vec![ExecMode::Recompute],
                    "both" => vec![ExecMode::Auto, ExecMode::Recompute],
                    other => fail(&format!("--path {other}: incremental, recompute or both")),
                }
            }
            "--workers" => a.workers = value().split(',').map(|w| count(w.to_string())).collect(),
            "--events" => a.events = count(value()),
            "--rows-per-trigger" => a.per = count(value()),
            "--repeat" => a.repeat = count(value()),
            "--check-events" => {
                let v = value();
                a.check = v
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("--check-events {v}: expected a number")))
            }
            "--output" => {
                a.output = match value().as_str() {
                    "append" => thund::OutputMode::Append,
                    "update" => thund::OutputMode::Update,
                    other => fail(&format!("--output {other}: append or update")),
                }
            }
            other => fail(&format!("unknown flag {other}")),
        }
    }
    for q in &a.queries {
        let file = data::query_file(q);
        if !file.is_file() {
            fail(&format!("--query {q}: no {}", file.display()));
        }
    }
    a
}

/// A bad command line: what is wrong, the usage, exit status 2.
fn fail(what: &str) -> ! {
    eprintln!("nexmark: {what}\n{USAGE}");
    std::process::exit(2);
}

/// Both paths agree on `triggers`, trigger by trigger.
fn check(q: &str, triggers: &[data::Trigger], output: thund::OutputMode) {
    let (mut inc, view, sources) = data::engine(q, ExecMode::Auto, 1, Some(output));
    let (mut rec, _, _) = data::engine(q, ExecMode::Recompute, 1, Some(output));
    for (i, t) in triggers.iter().enumerate() {
        let a = data::step(&mut inc, t, &sources);
        let b = data::step(&mut rec, t, &sources);
        assert_eq!(
            canon(&a.view(&view).expect("v").output),
            canon(&b.view(&view).expect("v").output),
            "{q}: the paths disagree at trigger {i}"
        );
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

/// One run of query `q` on `mode` with `w` workers: events/s per core, and
/// the table row to print.
fn run(q: &str, mode: ExecMode, w: usize, a: &Args, triggers: &[data::Trigger]) -> (f64, String) {
    let (mut e, view, sources) = data::engine(q, mode, w, Some(a.output));
    let plan = e.plan(&view).expect("plan").clone();
    let mut lat = Vec::with_capacity(triggers.len());
    let start = Instant::now();
    for t in triggers {
        let s = Instant::now();
        data::step(&mut e, t, &sources);
        lat.push(s.elapsed());
    }
    e.finish().expect("finish");
    let secs = start.elapsed().as_secs_f64();
    let per_core = a.events as f64 / secs / w as f64;
    let row = format!(
        "| {q} | {} | {w} | {:.0} | {:.2?} | {:.2?} | {} |",
        if mode == ExecMode::Recompute {
            "recompute (forced)".to_string()
        } else {
            plan.path().to_string()
        },
        per_core,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        plan.reason().map(|r| r.to_string()).unwrap_or_default()
    );
    (per_core, row)
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (v[(n - 1) / 2] + v[n / 2]) / 2.0
}

fn main() {
    let mut a = args();
    // the check covers at most the run's events (a short run is not held up
    // by a longer check than what it times)
    a.check = a.check.min(a.events);
    println!(
        "Nexmark: {} events, {} events per trigger, {:?} mode, checked on the first {} events{}",
        a.events,
        a.per,
        a.output,
        a.check,
        match a.repeat {
            1 => String::new(),
            n => format!(", {n} rounds (the paths alternate within each)"),
        }
    );
    let check_triggers = data::triggers(a.check, 10_000, a.per);
    let triggers = data::triggers(a.events, 10_000, a.per);
    println!(
        "| query | path | workers | events/s per core | p50 per trigger | p99 | why recompute |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut ratios = Vec::new();
    for q in &a.queries {
        check(q, &check_triggers, a.output);
        // events/s per core at 1 worker, by path (incremental, recompute), one per round
        let mut at_one: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..a.repeat {
            for &mode in &a.paths {
                for &w in &a.workers {
                    let (per_core, row) = run(q, mode, w, &a, &triggers);
                    if w == 1 {
                        at_one[usize::from(mode == ExecMode::Recompute)].push(per_core);
                    }
                    println!("{row}");
                }
            }
        }
        let [inc, rec] = &mut at_one;
        if !inc.is_empty() && !rec.is_empty() {
            // each round's ratio (the paths ran side by side), and the medians' ratio
            let each: Vec<f64> = inc.iter().zip(rec.iter()).map(|(i, r)| i / r).collect();
            let (lo, hi) = each
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
            ratios.push(match each.len() {
                1 => format!("{q} {:.2}x", each[0]),
                _ => format!(
                    "{q} {:.2}x (rounds {lo:.2}-{hi:.2})",
                    median(inc) / median(rec)
                ),
            });
        }
    }
    if !ratios.is_empty() {
        println!(
            "auto / forced recompute, events/s at 1 worker{}: {}",
            match a.repeat {
                1 => "",
                _ => " (median over rounds)",
            },
            ratios.join(", ")
        );
    }
}
