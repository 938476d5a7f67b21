//! Þund's timely/differential-dataflow core: windowed grouped aggregates, maintained
//! incrementally, with event time as the dataflow's time. It knows no SQL and no Arrow.
//!
//! ```text
//!  host (root crate)                         each timely worker (thread)
//!  ─────────────────                         ───────────────────────────
//!  Updates ─insert─► folded by (window, key) ─step─► InputSession (at the current time)
//!                                              │  (window, key) -> Acc{n, states}
//!                                              ▼
//!                                            evict: + retraction at window.end
//!                                              │
//!                                              ▼
//!                                            arrange by (window, key)  ── trace ─► snapshot
//!                                              │  (exchanged by hash; compacted to W)
//!                                              ▼
//!  Step{closed, changed} ◄── advance_to(W) ── collect into the open-window table;
//!                                             close windows with end <= W
//! ```
//!
//! * **Time.** The host computes the watermark `W` and advances every worker's input to it
//!   ([`WindowedAggregate::advance_to`]); a window `[s, e)` closes when the output frontier
//!   reaches `e`, and its final state is its accumulation at times before `e`.
//! * **State in the difference.** Each `(window, key)` record carries its aggregate states
//!   in the diff (COUNT and SUM add, MIN and MAX are semilattices), so the arrangement holds
//!   about one record per open `(window, key)`, not one per row or per distinct value.
//!   Eviction retracts every contribution at its window's end; the diff's contribution
//!   count makes that retraction exact even for MIN, MAX and float sums (see the `diff`
//!   module).
//! * **Checkpoints.** Rows enter at the current time with the window in the key, so every
//!   open window is in the trace: [`WindowedAggregate::snapshot`] reads it, and
//!   [`WindowedAggregate::restore`] re-inserts it at the restored watermark, with any
//!   number of workers.
//! * **Pre-aggregation.** [`WindowedAggregate::insert`] folds its updates by
//!   `(window, key)` until the next step (a [`PreAggregator`] does the same on the caller's
//!   side), so the dataflow's per-update cost is paid once per group and step, not per row.
//!   Measured (`examples/throughput.rs`, release, 1 worker, 1 000 keys, 1 s tumbling windows,
//!   COUNT/SUM/MIN/MAX): 2.5 M rows/s with 10 rows per group and 7 M rows/s with 100.
//!
//! What it does not do: callers cannot retract a contribution (only the eviction at a
//! window's end retracts, which is what keeps MIN/MAX exact without storing values);
//! float sums round in an unspecified order (exact whenever the partial sums are exactly
//! representable); session windows, whose windows merge, are not supported here.
//!
//! ```
//! use thund_dataflows::{AggKind, AggState, Config, PreAggregator, Value, WindowedAggregate, Window};
//!
//! let kinds = vec![AggKind::Count, AggKind::MinFloat];
//! let mut df = WindowedAggregate::spawn(Config::new(kinds.clone()).with_workers(2))?;
//! let mut pre = PreAggregator::new(kinds.clone());
//! for (t, x) in [(1, 2.5), (4, -1.0), (12, 7.0)] {
//!     let window = Window::new(t / 10 * 10, t / 10 * 10 + 10); // 10 ms tumbling windows
//!     let states = kinds.iter().map(|&k| AggState::from_value(k, Value::Float(x))).collect();
//!     pre.add(window, Vec::new(), states)?;
//! }
//! df.insert(pre.drain())?;
//! let step = df.advance_to(10)?;
//! assert_eq!(df.frontier(), 10);
//! assert_eq!(step.closed.len(), 1);
//! assert_eq!(step.closed[0].aggs[0].count, 2);
//! assert_eq!(step.closed[0].aggs[1].value, Value::Float(-1.0));
//! # Ok::<(), thund_dataflows::Error>(())
//! ```

#![warn(missing_docs)]

mod agg;
mod diff;
mod error;
mod handle;
mod open;
mod operators;
mod preagg;
mod render;
mod time;
mod typedefs;
mod worker;

pub use agg::{AggKind, AggState, EventTime, Key, Update, Value, Window};
pub use error::{Error, Result};
pub use handle::{ArrangementSize, Config, Step, WindowedAggregate};
pub use preagg::PreAggregator;
