//! Nexmark, the way streaming engines publish it: the `nexmark` crate's
//! event stream (persons, auctions, bids; fixed seed), pre-generated into
//! Arrow batches before timing, through each query of `benches/nexmark/`.
//!
//! ```text
//! cargo bench --bench nexmark -- [--query q5[,q7…]] [--path incremental|recompute|both]
//!     [--workers 1[,2]] [--events N] [--rows-per-trigger N] [--check-events N]
//!     [--output update|append]
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
//! `--check-events` events (default 20 000): a disagreement stops the bench.
//! Per run it prints the path (with the reason for recompute), events/s per
//! core (events over the run's wall time, divided by the workers), and p50
//! and p99 of the time per trigger (push + trigger); then each query's
//! incremental / recompute ratio at 1 worker.

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
    [--output update|append]
queries: see benches/nexmark/*.sql";

struct Args {
    queries: Vec<String>,
    paths: Vec<ExecMode>,
    workers: Vec<usize>,
    events: usize,
    per: usize,
    check: usize,
    output: thund::OutputMode,
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

fn main() {
    let a = args();
    println!(
        "Nexmark: {} events, {} events per trigger, {:?} mode, checked on the first {} events",
        a.events, a.per, a.output, a.check
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
        let mut at_one: [Option<f64>; 2] = [None, None];
        for &mode in &a.paths {
            for &w in &a.workers {
                let (mut e, view, sources) = data::engine(q, mode, w, Some(a.output));
                let plan = e.plan(&view).expect("plan").clone();
                let mut lat = Vec::with_capacity(triggers.len());
                let start = Instant::now();
                for t in &triggers {
                    let s = Instant::now();
                    data::step(&mut e, t, &sources);
                    lat.push(s.elapsed());
                }
                e.finish().expect("finish");
                let secs = start.elapsed().as_secs_f64();
                let per_core = a.events as f64 / secs / w as f64;
                if w == 1 {
                    at_one[usize::from(mode == ExecMode::Recompute)] = Some(per_core);
                }
                println!(
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
            }
        }
        if let [Some(i), Some(r)] = at_one {
            ratios.push(format!("{q} {:.2}x", i / r));
        }
    }
    if !ratios.is_empty() {
        println!(
            "auto / forced recompute, events/s at 1 worker: {}",
            ratios.join(", ")
        );
    }
}
