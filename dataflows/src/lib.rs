//! ```text
//!  Þund, end to end (the double box is this crate)
//!
//!              Arrow RecordBatches (push)  /  replayable Source (offsets)
//!                                 │
//!                                 ▼
//!  src/ (crate `thund`) ── Engine: views, triggers, WatermarkTracker, sinks, CLI
//!     │  plan/: DataFusion LogicalPlan ──► the view's plan (Þund's own IR):
//!     │         a supported shape, or Recompute { reason }
//!     │  WHERE and scalar expressions: DataFusion on Arrow batches, before rows
//!     │  enter either path and after results leave it
//!     │
//!     ├─ incremental ──► ╔═ dataflows/ (crate `thund-dataflows`) ═════════════════╗
//!     │  path            ║ timely + differential dataflow; knows no SQL, no Arrow ║
//!     │  (supported      ║ timestamps are event time: a window closes when the    ║
//!     │   shapes)        ║ frontier passes its end                                ║
//!     │                  ║ in: Updates (window, encoded key, aggregate states)    ║
//!     │                  ║ out: closed windows' final states, changed open ones   ║
//!     │                  ╚════════════════════════════════════════════════════════╝
//!     ├─ recompute ────► recompute (in src/): DataFusion over the buffered rows of
//!     │  path            open / dirty windows; every other shape, and the tests' oracle
//!     │
//!     └─ sidecar ──────► checkpoint/ (crate `thund-checkpoint`): Parquet epochs and
//!                        a manifest on object_store; knows no timely. The root crate
//!                        stores WindowedAggregate::snapshot() there, and restores
//!                        from it with WindowedAggregate::restore()
//! ```
//!
//! This crate is the incremental path: windowed grouped aggregates maintained incrementally
//! on timely/differential dataflow, with event time as the dataflow's time, and windowed
//! equi-joins ([`WindowedJoin`]), a symmetric hash join on the same worker threads. It renders what
//! the root crate hands it, and knows no SQL and no Arrow. Inside it:
//!
//! ```text
//!  host: the caller's thread                  each timely worker (thread)
//!  (host/handle.rs, state/preagg.rs)          (host/worker.rs, render/aggregate.rs)
//!  ─────────────────────────────────          ─────────────────────────────────────
//!  Updates ─insert─► folded by (window, key) ─step─► InputSession (at the current time)
//!                                              │  (window, key) -> Acc{n, states}
//!                                              ▼      ▲
//!                                            arrange  │ evict: Acc{-n} for each closed
//!                                              │      │ (window, key), at the current time
//!                                              │  by (window, key) ── trace ─► snapshot
//!                                              │  (exchanged by hash; compacted to W)
//!                                              ▼      │
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
//!   When a window closes, its worker retracts its `n` contributions at the current time;
//!   the diff's contribution count makes that retraction exact even for MIN, MAX and float
//!   sums (see `state/diff.rs`), and no update waits in the arrangement for a future time,
//!   so a step costs what changed, not the open state.
//! * **Checkpoints.** Rows enter at the current time with the window in the key, so every
//!   open window is in the trace: [`WindowedAggregate::snapshot`] reads it, and
//!   [`WindowedAggregate::restore`] re-inserts it at the restored watermark, with any
//!   number of workers.
//! * **Pre-aggregation.** The caller folds its rows by `(window, key)` before
//!   [`WindowedAggregate::insert`] (with a [`PreAggregator`], or column-wise as the root
//!   crate does), so the dataflow's per-update cost is paid once per group and step, not
//!   per row; updates of one `(window, key)` that still meet are summed by the arrangement.
//!   Measured (`examples/throughput.rs`, release, 1 worker, 1 000 keys, 1 s tumbling windows,
//!   COUNT/SUM/MIN/MAX, 2 M rows, 2026-11-30): 3.1 M rows/s with 10 rows per group and
//!   7.6 M rows/s with 100; one update per row runs at 1.0 M updates/s.
//!
//! What it does not do: callers cannot retract a contribution (only the eviction at a
//! window's end retracts, which is what keeps MIN/MAX exact without storing values);
//! float sums round in an unspecified order (exact whenever the partial sums are exactly
//! representable); session windows, whose windows merge, are not windows here: the
//! root crate holds a session's rows in fixed windows (panes of one gap, kept three
//! gaps, re-inserted forward while their session lasts) and chains them into sessions.
//!
//! The source is laid out by concept:
//!
//! * `host/`: the handles the root crate drives ([`WindowedAggregate`], `host/handle.rs`;
//!   [`WindowedJoin`], `host/join.rs`) and the worker threads' command loop
//!   (`host/worker.rs`);
//! * `render/`: one file per operator family, building its dataflow in a worker
//!   (`render/aggregate.rs`: the windowed aggregate);
//! * `operators/`: the dataflow's operators, one per file (`collect.rs`);
//! * `state/`: the state types: aggregate kinds and states (`agg.rs`), the difference type
//!   (`diff.rs`), the worker's open-window table (`open.rs`), pre-aggregation
//!   (`preagg.rs`), and a worker's part of the windowed inner equi-join of two inputs by
//!   `(window, join key)`, a symmetric hash join whose closed windows are dropped whole
//!   (`join.rs`: rows only enter open windows, so no arrangement is needed);
//! * at the top: event time, windows and keys (`window.rs`), the dataflow timestamp
//!   (`time.rs`), spine and trace aliases and the arrangement wrapper (`typedefs.rs`), and
//!   the error type (`error.rs`).
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
//!     pre.add(window, 0, states)?; // one group: key 0
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

mod error;
mod host;
mod operators;
mod render;
mod state;
mod time;
mod typedefs;
mod window;

/// A seeded stream of pseudo-random numbers below each bound asked (a
/// linear congruential generator), for the tests' random streams.
#[cfg(test)]
pub(crate) fn numbers_below(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    }
}

pub use error::{Error, Result};
pub use host::cluster::{Cluster, MAX_WORKERS};
pub use host::handle::{ArrangementSize, Config, PendingSnapshot, Step, WindowedAggregate};
pub use host::join::{JoinRow, JoinStep, Side, WindowedJoin};
pub use state::agg::{AggKind, AggState, Update, Value};
pub use state::join::Pair;
pub use state::preagg::PreAggregator;
pub use window::{EventTime, Key, Panes, Window};
