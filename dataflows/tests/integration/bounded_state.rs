//! Bounded state: ~2 M rows through many sliding windows; the arrangement holds a number of
//! records proportional to the open windows x keys, not to the rows seen. (Without the
//! eviction at window end it would hold every window ever opened: tens of thousands.)

use std::time::Instant;

use thund_dataflows::{AggKind, Config, EventTime, PreAggregator, Window, WindowedAggregate};

use crate::common::{row_states, Rng};

const ROWS: u64 = 2_000_000;
const BATCHES: u64 = 200;
/// Event time covered by one batch, in ms.
const BATCH_SPAN: i64 = 50;
/// Hopping windows: size 100 ms, slide 25 ms: every row is in 4 windows.
const SIZE: i64 = 100;
const SLIDE: i64 = 25;
const KEYS: u64 = 50;

fn windows_of(t: EventTime) -> impl Iterator<Item = Window> {
    let last = t.div_euclid(SLIDE) * SLIDE;
    (0..SIZE / SLIDE)
        .map(move |i| last - i * SLIDE)
        .map(|s| Window::new(s, s + SIZE))
}

#[test]
fn state_stays_bounded_by_open_windows_times_keys() {
    let kinds = vec![AggKind::Count, AggKind::SumInt, AggKind::MaxFloat];
    let mut df = WindowedAggregate::spawn(Config::new(kinds.clone())).expect("spawn");
    let mut pre = PreAggregator::new(kinds.clone());
    let mut rng = Rng::new(7);
    let rows_per_batch = ROWS / BATCHES;
    // Open windows at any time: those overlapping [W - SIZE, W + BATCH_SPAN + lateness).
    let open_windows = ((SIZE + BATCH_SPAN + 20) / SLIDE + 1) as usize;
    let bound = 4 * open_windows * KEYS as usize;
    let mut max_state = 0;
    let mut max_open = 0;
    let mut max_ratio = 0f64;
    let mut total_count: i64 = 0;
    let mut closed_groups = 0usize;
    let start = Instant::now();
    let mut in_dataflow = std::time::Duration::ZERO;
    for b in 0..BATCHES as i64 {
        let w = b * BATCH_SPAN;
        for _ in 0..rows_per_batch {
            // Rows of this batch, with up to 20 ms of disorder behind the watermark's
            // successor (the watermark after this batch is (b + 1) * BATCH_SPAN).
            let t = w + rng.below((BATCH_SPAN + 20) as u64) as i64 - 20;
            let key = rng.below(KEYS);
            let x = rng.below(1000) as i64 - 500;
            for window in windows_of(t) {
                if window.end > w {
                    pre.add(window, key, row_states(&kinds, Some(x)))
                        .expect("add");
                }
            }
        }
        let t0 = Instant::now();
        df.insert(pre.drain()).expect("insert");
        let step = df.advance_to(w + BATCH_SPAN).expect("advance");
        in_dataflow += t0.elapsed();
        assert_eq!(df.frontier(), w + BATCH_SPAN);
        for u in &step.closed {
            total_count += u.aggs[0].count;
        }
        closed_groups += step.closed.len();
        max_state = max_state.max(df.state_size());
        max_open = max_open.max(df.open_groups());
        max_ratio = max_ratio.max(df.state_size() as f64 / df.open_groups().max(1) as f64);
        assert!(
            df.state_size() <= bound,
            "state {} > bound {} after batch {}",
            df.state_size(),
            bound,
            b
        );
    }
    let step = df.advance_to(EventTime::MAX).expect("finish");
    for u in &step.closed {
        total_count += u.aggs[0].count;
    }
    closed_groups += step.closed.len();
    let elapsed = start.elapsed();
    // Every row was counted once per window it belongs to that had not closed.
    assert!(total_count as u64 > ROWS * 3, "count {total_count}");
    assert!(total_count as u64 <= ROWS * 4, "count {total_count}");
    // Many more groups went through than the state ever held.
    assert!(
        closed_groups > 10 * bound,
        "closed {closed_groups} vs bound {bound}"
    );
    eprintln!(
        "bounded_state: {ROWS} rows in {:.2?} ({:.2} M rows/s end to end, {:.2} M rows/s in the \
         dataflow); max state {max_state} records (bound {bound}); max open groups {max_open}, \
         max state/open {max_ratio:.2}; {closed_groups} groups closed",
        elapsed,
        ROWS as f64 / elapsed.as_secs_f64() / 1e6,
        ROWS as f64 / in_dataflow.as_secs_f64() / 1e6,
    );
}
