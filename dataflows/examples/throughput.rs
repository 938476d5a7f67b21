//! Throughput of the windowed-aggregate dataflow, with the caller pre-aggregating each batch
//! (`PreAggregator`) or handing `insert` one update per row (which the arrangement then sums:
//! the dataflow's cost per update).
//!
//! `cargo run --release -p thund-dataflows --example throughput -- [rows] [keys] [workers] [rows/ms]`
//! (defaults: 10 000 000 rows, 1 000 keys, 1 worker, 10 rows per ms of event time). Rows
//! carry increasing event times with up to 50 ms of disorder; 1 s tumbling windows; COUNT,
//! SUM, MIN and MAX over an integer; a trigger every 100 000 rows advances the watermark to
//! the smallest event time still to come.

use std::time::{Duration, Instant};

use thund_dataflows::{
    AggKind, AggState, Config, EventTime, PreAggregator, Update, Value, Window, WindowedAggregate,
};

const KINDS: [AggKind; 4] = [
    AggKind::Count,
    AggKind::SumInt,
    AggKind::MinInt,
    AggKind::MaxInt,
];
const BATCH: u64 = 100_000;
const WINDOW: i64 = 1_000;

struct Row {
    t: EventTime,
    key: u64,
    x: i64,
}

fn rows(n: u64, keys: u64, rate: u64) -> impl Iterator<Item = Row> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n).map(move |i| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        Row {
            t: (i / rate) as i64 - (s % 50) as i64,
            key: (s >> 20) % keys,
            x: (s >> 40) as i64 % 1_000,
        }
    })
}

fn states(x: i64) -> Vec<AggState> {
    KINDS
        .iter()
        .map(|&k| AggState::from_value(k, Value::Int(i128::from(x))))
        .collect()
}

fn window_of(t: EventTime) -> Window {
    let s = t.div_euclid(WINDOW) * WINDOW;
    Window::new(s, s + WINDOW)
}

fn run(
    n: u64,
    keys: u64,
    workers: usize,
    rate: u64,
    preaggregate: bool,
) -> Result<(Duration, usize), thund_dataflows::Error> {
    let mut df = WindowedAggregate::spawn(Config::new(KINDS.to_vec()).with_workers(workers))?;
    let mut pre = PreAggregator::new(KINDS.to_vec());
    let mut batch: Vec<Update> = Vec::new();
    let mut closed = 0;
    let mut max_state = 0;
    let start = Instant::now();
    let mut i = 0u64;
    for row in rows(n, keys, rate) {
        let window = window_of(row.t);
        let key = row.key;
        if preaggregate {
            pre.add(window, key, states(row.x))?;
        } else {
            batch.push(Update {
                window,
                key,
                aggs: states(row.x),
            });
        }
        i += 1;
        if i % BATCH == 0 {
            let updates = if preaggregate {
                pre.drain()
            } else {
                std::mem::take(&mut batch)
            };
            df.insert(updates)?;
            // Every row to come has t >= i / rate - 49.
            closed += df.advance_to((i / rate) as i64 - 50)?.closed.len();
            max_state = max_state.max(df.state_size());
        }
    }
    let updates = if preaggregate {
        pre.drain()
    } else {
        std::mem::take(&mut batch)
    };
    df.insert(updates)?;
    closed += df.advance_to(EventTime::MAX)?.closed.len();
    let elapsed = start.elapsed();
    eprintln!("  closed {closed} groups; max state {max_state} records");
    Ok((elapsed, closed))
}

fn main() -> Result<(), thund_dataflows::Error> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let keys: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let workers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let rate: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(10)
        .max(1);
    for preaggregate in [true, false] {
        let (elapsed, _) = run(n, keys, workers, rate, preaggregate)?;
        println!(
            "{n} rows, {keys} keys, {rate} rows/ms, {workers} worker(s), {}: {:.2?}, {:.2} M rows/s",
            if preaggregate { "PreAggregator + insert" } else { "insert per row        " },
            elapsed,
            n as f64 / elapsed.as_secs_f64() / 1e6
        );
    }
    Ok(())
}
