//! The Nexmark event stream (the `nexmark` crate's generator, seeded by a
//! fixed base time), pre-generated into Arrow batches per trigger, and the
//! queries kept in `benches/nexmark/q*.sql`. Shared by the Nexmark test and
//! the `nexmark` bench.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use nexmark::config::NexmarkConfig;
use nexmark::event::Event;
use nexmark::EventGenerator;

/// The generator's first event time (ms): fixed, so streams repeat.
pub const BASE_TIME: u64 = 1_700_000_000_000;

/// The query files, by name, in the order of the Nexmark suite.
pub const QUERIES: &[&str] = &[
    "q0", "q1", "q2", "q4", "q5", "q7", "q8", "q8_pairs", "q11", "q12", "q15", "q16", "q17", "q18",
    "q19",
];

/// Query `name`'s file: `benches/nexmark/{name}.sql`.
pub fn query_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/nexmark")
        .join(format!("{name}.sql"))
}

/// Query `name`'s DDL text (see [`query_file`]).
pub fn query(name: &str) -> String {
    let p = query_file(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, None)
}

fn schema(cols: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        cols.iter()
            .map(|(n, t)| Field::new(*n, t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

/// The sources' schemas, as the query files declare them.
pub fn person_schema() -> SchemaRef {
    let s = DataType::Utf8;
    schema(&[
        ("id", DataType::Int64),
        ("name", s.clone()),
        ("email_address", s.clone()),
        ("credit_card", s.clone()),
        ("city", s.clone()),
        ("state", s.clone()),
        ("date_time", ts()),
        ("extra", s),
    ])
}

/// See [`person_schema`].
pub fn auction_schema() -> SchemaRef {
    let s = DataType::Utf8;
    schema(&[
        ("id", DataType::Int64),
        ("item_name", s.clone()),
        ("description", s.clone()),
        ("initial_bid", DataType::Int64),
        ("reserve", DataType::Int64),
        ("date_time", ts()),
        ("expires", ts()),
        ("seller", DataType::Int64),
        ("category", DataType::Int64),
        ("extra", s),
    ])
}

/// See [`person_schema`].
pub fn bid_schema() -> SchemaRef {
    let s = DataType::Utf8;
    schema(&[
        ("auction", DataType::Int64),
        ("bidder", DataType::Int64),
        ("price", DataType::Int64),
        ("channel", s.clone()),
        ("url", s.clone()),
        ("date_time", ts()),
        ("extra", s),
    ])
}

/// One trigger's events, per source (`person`, `auction`, `bid`).
pub struct Trigger {
    pub batches: Vec<(&'static str, RecordBatch)>,
}

fn int(v: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(v))
}

fn text<'a>(v: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

fn time(v: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(TimestampMillisecondArray::from_iter_values(v))
}

/// `events` events at `rate` events per second of event time (the
/// generator's default is 10 000), in triggers of `per` events each.
pub fn triggers(events: usize, rate: usize, per: usize) -> Vec<Trigger> {
    let cfg = NexmarkConfig {
        base_time: BASE_TIME,
        first_rate: rate,
        next_rate: rate,
        ..NexmarkConfig::default()
    };
    let all: Vec<Event> = EventGenerator::new(cfg).take(events).collect();
    all.chunks(per.max(1)).map(trigger).collect()
}

fn trigger(chunk: &[Event]) -> Trigger {
    let (mut p, mut a, mut b) = (Vec::new(), Vec::new(), Vec::new());
    for e in chunk {
        match e {
            Event::Person(x) => p.push(x),
            Event::Auction(x) => a.push(x),
            Event::Bid(x) => b.push(x),
        }
    }
    let n = |x: usize| x as i64;
    let mut batches = Vec::new();
    if !p.is_empty() {
        let cols = vec![
            int(p.iter().map(|x| n(x.id))),
            text(p.iter().map(|x| x.name.as_str())),
            text(p.iter().map(|x| x.email_address.as_str())),
            text(p.iter().map(|x| x.credit_card.as_str())),
            text(p.iter().map(|x| x.city.as_str())),
            text(p.iter().map(|x| x.state.as_str())),
            time(p.iter().map(|x| x.date_time as i64)),
            text(p.iter().map(|x| x.extra.as_str())),
        ];
        batches.push((
            "person",
            RecordBatch::try_new(person_schema(), cols).expect("persons"),
        ));
    }
    if !a.is_empty() {
        let cols = vec![
            int(a.iter().map(|x| n(x.id))),
            text(a.iter().map(|x| x.item_name.as_str())),
            text(a.iter().map(|x| x.description.as_str())),
            int(a.iter().map(|x| n(x.initial_bid))),
            int(a.iter().map(|x| n(x.reserve))),
            time(a.iter().map(|x| x.date_time as i64)),
            time(a.iter().map(|x| x.expires as i64)),
            int(a.iter().map(|x| n(x.seller))),
            int(a.iter().map(|x| n(x.category))),
            text(a.iter().map(|x| x.extra.as_str())),
        ];
        batches.push((
            "auction",
            RecordBatch::try_new(auction_schema(), cols).expect("auctions"),
        ));
    }
    if !b.is_empty() {
        let cols = vec![
            int(b.iter().map(|x| n(x.auction))),
            int(b.iter().map(|x| n(x.bidder))),
            int(b.iter().map(|x| n(x.price))),
            text(b.iter().map(|x| x.channel.as_str())),
            text(b.iter().map(|x| x.url.as_str())),
            time(b.iter().map(|x| x.date_time as i64)),
            text(b.iter().map(|x| x.extra.as_str())),
        ];
        batches.push((
            "bid",
            RecordBatch::try_new(bid_schema(), cols).expect("bids"),
        ));
    }
    Trigger { batches }
}

/// An engine running query `name` on `mode`'s path with `workers`
/// workers, in `output` mode if given (else the file's): the engine, the
/// view's name and the sources it reads.
pub fn engine(
    name: &str,
    mode: thund::ExecMode,
    workers: usize,
    output: Option<thund::OutputMode>,
) -> (thund::Engine, String, Vec<String>) {
    engine_of(&query(name), mode, workers, output)
}

/// [`engine`] for the first view of the DDL `text`.
pub fn engine_of(
    text: &str,
    mode: thund::ExecMode,
    workers: usize,
    output: Option<thund::OutputMode>,
) -> (thund::Engine, String, Vec<String>) {
    let name = text.lines().next().unwrap_or_default();
    let p = thund::spec::ddl::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut v = p.views.into_iter().next().expect("a view");
    v.mode = mode;
    if let Some(o) = output {
        v.output = o;
    }
    let view = v.name.clone();
    let sources = v.sources.iter().map(|s| s.name.clone()).collect();
    let mut e = thund::Engine::builder()
        .workers(workers)
        .build()
        .expect("engine");
    e.create_view(v).unwrap_or_else(|e| panic!("{name}: {e}"));
    (e, view, sources)
}

/// Push a trigger's batches of `sources`, then trigger.
pub fn step(e: &mut thund::Engine, t: &Trigger, sources: &[String]) -> thund::TriggerReport {
    for (s, b) in &t.batches {
        if sources.iter().any(|x| x == s) {
            e.push(s, b.clone()).expect("push");
        }
    }
    e.trigger().expect("trigger")
}
