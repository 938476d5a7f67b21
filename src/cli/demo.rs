//! `thund demo`: a seeded generator of auction bids and the demo's views.

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Float64Array, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::spec::{OutputMode, ViewSpec, WindowSpec};
use crate::Result;

/// 2026-01-01T00:00:00Z in milliseconds: where the demo's event time starts.
pub const DEMO_START_MS: i64 = 1_767_225_600_000;

/// A small, seeded pseudo-random generator (SplitMix64): the demo and the
/// tests need repeatable streams, not cryptography.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

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

    /// The same stream, positioned at bid `offset` (replay after a resume).
    pub fn starting_at(mut self, offset: u64) -> Self {
        self.next = offset;
        self
    }

    /// The offset of the next bid.
    pub fn offset(&self) -> u64 {
        self.next
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_replays_from_any_offset() {
        let mut a = BidGenerator::new(7);
        let whole = a.batch(100).expect("batch");
        let mut b = BidGenerator::new(7).starting_at(60);
        let tail = b.batch(40).expect("batch");
        assert_eq!(whole.slice(60, 40), tail);
        assert_eq!(b.offset(), 100);
    }
}
