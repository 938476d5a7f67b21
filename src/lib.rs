//! Þund (`thund`): an embeddable incremental view maintainer over event streams.
//!
//! ```text
//!          Arrow RecordBatches (push / push_at)                        thund (this crate)
//!                         │
//!                         ▼
//!  engine/   Engine ── views, triggers, reports, explain ── WatermarkTracker (watermark.rs)
//!     │        │  input: source schemas, batch checks; window/: windows and the late rule
//!     │        ▼
//!     │   plan/   DataFusion LogicalPlan ──► ViewPlan: Incremental(compiled aggregate)
//!     │                                       or Recompute { FallbackReason }
//!     │        │
//!     │        ▼  paths/: one ViewRuntime trait (classify · step · export · import · stats)
//!     │   ┌────────────────────────────┬───────────────────────────────────┐
//!     │   │ paths/incremental          │ paths/recompute                   │
//!     │   │ physical exprs → (window,  │ rows by pane / session →          │
//!     │   │ key) updates → dataflow ───┼─► thund-dataflows (timely +       │
//!     │   │ (event-time frontier)      │   differential; knows no SQL)     │
//!     │   │ → decode, HAVING, SELECT   │ DataFusion per dirty / closing    │
//!     │   │                            │ window (the oracle: any SQL)      │
//!     │   └────────────────────────────┴───────────────────────────────────┘
//!     │        │ export / import (each path owns its format)
//!     ▼        ▼
//!  state/  sidecar thread ──► thund-checkpoint (Parquet epochs + manifest on
//!          (writes off the        object_store; knows no timely)
//!          trigger thread)
//!  io/     CSV / Parquet inputs and sinks        cli/ (feature `cli`): thund demo | run | explain | inspect
//! ```
//!
//! A program declares SQL views over event streams — an event-time window, a
//! watermark, an output mode — pushes Arrow batches, and at every trigger
//! gets the windows that closed, exactly once.
//!
//! The semantics contract (design §1) is the same on every path: a row is
//! late iff every window it belongs to had closed at the watermark in force
//! when its trigger started; a window `[s, e)` closes when `W ≥ e`; the
//! view's SQL is evaluated per window over that window's non-late rows, and
//! each output row is prefixed by `window_start, window_end`.
//!
//! The `thund` binary and its dependencies sit behind the default `cli`
//! feature; `thund = { default-features = false }` builds the library alone.
//!
//! See [`Engine`] for a runnable example.

#[cfg(feature = "cli")]
pub mod cli;
mod engine;
mod error;
pub mod io;
pub mod live;
mod paths;
pub mod plan;
pub mod spec;
pub mod state;
pub mod table;
pub mod time;
pub mod watermark;
pub mod window;

pub use engine::{
    Engine, EngineBuilder, InvalidRow, Recovery, TriggerReport, ViewCounters, ViewReport,
    WindowColumns, DEFAULT_REJECTED_RETENTION,
};
pub use error::{Error, Result};
pub use plan::{FallbackReason, PathKind, ViewPlan};
pub use spec::{
    ExecMode, OutputMode, Retention, SourceSpec, ViewSpec, WatermarkSpec, WindowKind, WindowSpec,
};
pub use state::sidecar::{CheckpointOutcome, CheckpointStats};
pub use state::StateWarning;
pub use table::{Change, Subscription, Tables};
pub use watermark::{Clock, ManualClock, SystemClock, WatermarkTracker};

/// The README's Rust examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
