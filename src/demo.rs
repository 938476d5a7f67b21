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
/// order, 2% up to 25 s behind (some of them late).
#[derive(Clone, Debug)]
pub struct BidGenerator {
    rng: SplitMix,
    next: u64,
    auctions: u64,
}

impl BidGenerator {
    /// A generator with a seed.
    pub fn new(seed: u64) -> Self {
        BidGenerator {
            rng: SplitMix::new(seed),
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
            let hot = self.rng.below(4) == 0;
            auction.push(if hot {
                1
            } else {
                self.rng.below(self.auctions) as i64
            });
            bidder.push(self.rng.below(1000) as i64);
            price.push((self.rng.below(100_000) as f64) / 100.0 + 1.0);
            let base = DEMO_START_MS + (i as i64) * 2;
            let jitter = if self.rng.below(50) == 0 {
                self.rng.below(25_000)
            } else {
                self.rng.below(3_000)
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
