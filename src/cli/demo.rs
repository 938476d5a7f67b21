//! `thund demo`: a seeded generator of auction bids, the demo's views, and
//! the command that shows windows closing as the watermark passes them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use indicatif::{ProgressBar, ProgressStyle};

use super::DemoArgs;
use crate::spec::{OutputMode, ViewSpec, WindowSpec};
use crate::time::display;
use crate::{Engine, Result};

/// 2026-01-01T00:00:00Z in milliseconds: where the demo's event time starts.
pub const DEMO_START_MS: i64 = 1_767_225_600_000;

/// A small, seeded pseudo-random generator (SplitMix64): the demo needs a
/// repeatable stream, not cryptography.
#[derive(Clone, Debug)]
struct SplitMix(u64);

impl SplitMix {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        SplitMix(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The schema of the demo's `bids` source.
pub fn bids_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, false),
        Field::new("bidder", DataType::Int64, false),
        Field::new("price", DataType::Float64, false),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

/// Generates bids: about 2 ms of event time per bid, most within 3 s of
/// order, 2% up to 25 s behind (some of them late). Bid `i` depends only on
/// the seed and `i`, so the stream is replayable from any offset.
#[derive(Clone, Debug)]
pub struct BidGenerator {
    seed: u64,
    next: u64,
    auctions: u64,
}

impl BidGenerator {
    /// A generator with a seed.
    pub fn new(seed: u64) -> Self {
        BidGenerator {
            seed,
            next: 0,
            auctions: 20,
        }
    }

    /// The next `n` bids as one batch.
    pub fn batch(&mut self, n: usize) -> Result<RecordBatch> {
        let mut auction = Vec::with_capacity(n);
        let mut bidder = Vec::with_capacity(n);
        let mut price = Vec::with_capacity(n);
        let mut ts = Vec::with_capacity(n);
        for _ in 0..n {
            let i = self.next;
            self.next += 1;
            let mut rng = SplitMix::new(self.seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03));
            let hot = rng.below(4) == 0;
            auction.push(if hot {
                1
            } else {
                rng.below(self.auctions) as i64
            });
            bidder.push(rng.below(1000) as i64);
            price.push((rng.below(100_000) as f64) / 100.0 + 1.0);
            let base = DEMO_START_MS + (i as i64) * 2;
            let jitter = if rng.below(50) == 0 {
                rng.below(25_000)
            } else {
                rng.below(3_000)
            } as i64;
            ts.push(base - jitter);
        }
        Ok(RecordBatch::try_new(
            bids_schema(),
            vec![
                Arc::new(Int64Array::from(auction)),
                Arc::new(Int64Array::from(bidder)),
                Arc::new(Float64Array::from(price)),
                Arc::new(TimestampMillisecondArray::from(ts)),
            ],
        )?)
    }
}

/// The demo's views: a tumbling grouped aggregate, a hopping top-3, and a
/// global average per 5 s.
pub fn demo_views() -> Result<Vec<ViewSpec>> {
    let s = bids_schema();
    Ok(vec![
        ViewSpec::builder(
            "bids_per_auction",
            "SELECT auction, COUNT(*) AS bids, SUM(price) AS volume, MAX(price) AS top \
             FROM bids GROUP BY auction",
        )
        .source("bids", "ts", s.clone())
        .window(WindowSpec::tumbling(Duration::from_secs(10)))
        .allowed_lateness(Duration::from_secs(2))
        .output(OutputMode::Append)
        .build()?,
        ViewSpec::builder(
            "hot_auctions",
            "SELECT auction, COUNT(*) AS bids FROM bids GROUP BY auction \
             ORDER BY bids DESC, auction LIMIT 3",
        )
        .source("bids", "ts", s.clone())
        .window(WindowSpec::hopping(
            Duration::from_secs(10),
            Duration::from_secs(5),
        ))
        .allowed_lateness(Duration::from_secs(2))
        .build()?,
        ViewSpec::builder(
            "avg_price",
            "SELECT COUNT(*) AS bids, AVG(price) AS avg_price FROM bids",
        )
        .source("bids", "ts", s)
        .window(WindowSpec::tumbling(Duration::from_secs(5)))
        .allowed_lateness(Duration::from_secs(2))
        .build()?,
    ])
}

/// Render a closed window's rows as `col=value` pairs, at most `show` rows.
fn window_lines(batch: &RecordBatch, show: usize) -> Vec<String> {
    let opts = FormatOptions::default();
    let schema = batch.schema();
    let fmts: Vec<_> = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
        .collect();
    let mut lines = Vec::new();
    for r in 0..batch.num_rows().min(show) {
        let cells: Vec<String> = schema
            .fields()
            .iter()
            .enumerate()
            .skip(2)
            .map(|(i, f)| match &fmts[i] {
                Ok(fm) => format!("{}={}", f.name(), fm.value(r)),
                Err(_) => format!("{}=?", f.name()),
            })
            .collect();
        lines.push(cells.join(" "));
    }
    if batch.num_rows() > show {
        lines.push(format!("… {} more rows", batch.num_rows() - show));
    }
    lines
}

pub(super) fn demo(a: DemoArgs) -> super::Result<()> {
    let started = Instant::now();
    let mut engine = Engine::builder().build()?;
    let views = demo_views()?;
    let names: Vec<String> = views.iter().map(|v| v.name.clone()).collect();
    for v in views {
        engine.create_view(v)?;
    }
    let mut bids = BidGenerator::new(a.seed);
    let per = a.rows_per_trigger.max(1);
    let triggers = a.events.div_ceil(per);
    let pb = ProgressBar::new(triggers as u64 + 1);
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} triggers {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    outln!(
        "Þund demo: {} bids in {} triggers, views: {}",
        a.events,
        triggers,
        names.join(", ")
    )?;
    let mut latencies = Vec::new();
    let mut pushed = 0usize;
    for k in 0..=triggers {
        let last = k == triggers;
        let report = if last {
            engine.finish()?
        } else {
            let n = per.min(a.events - pushed);
            engine.push("bids", bids.batch(n)?)?;
            pushed += n;
            engine.trigger()?
        };
        latencies.push(report.latency);
        let mut lines = Vec::new();
        for v in &report.views {
            for b in &v.output {
                let (Some(s), Some(e)) = (
                    b.column(0)
                        .as_any()
                        .downcast_ref::<arrow::array::TimestampMillisecondArray>(),
                    b.column(1)
                        .as_any()
                        .downcast_ref::<arrow::array::TimestampMillisecondArray>(),
                ) else {
                    continue;
                };
                if b.num_rows() == 0 {
                    continue;
                }
                lines.push(format!(
                    "  {} [{}, {}) closed: {}",
                    v.view,
                    display(Some(s.value(0))),
                    display(Some(e.value(0))),
                    window_lines(b, a.show).join(" | ")
                ));
            }
        }
        let first = &report.views[0];
        let closed: u64 = report.views.iter().map(|v| v.windows_closed).sum();
        let late: u64 = report
            .views
            .iter()
            .map(|v| v.late_rows_dropped)
            .max()
            .unwrap_or(0);
        lines.push(format!(
            "epoch {:>3} | W {} | rows {:>6} | late {:>4} | closed {:>3} | {:>8.2?}",
            report.epoch,
            display(first.watermark),
            first.rows,
            late,
            closed,
            report.latency
        ));
        pb.suspend(|| lines.iter().try_for_each(|l| outln!("{l}")))?;
        pb.inc(1);
        pb.set_message(format!("W {}", display(first.watermark)));
    }
    pb.finish_and_clear();
    latencies.sort();
    let p50 = latencies
        .get(latencies.len() / 2)
        .copied()
        .unwrap_or(Duration::ZERO);
    outln!(
        "done in {:.2?}; trigger latency p50 {:.2?}",
        started.elapsed(),
        p50
    )?;
    for n in &names {
        let c = engine.counters(n)?;
        outln!(
            "  {n}: {} rows, {} late, {} windows closed",
            c.rows,
            c.late_rows_dropped,
            c.windows_closed
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_repeatable_by_seed() {
        let a = BidGenerator::new(7).batch(100).expect("batch");
        let b = BidGenerator::new(7).batch(100).expect("batch");
        let c = BidGenerator::new(8).batch(100).expect("batch");
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
