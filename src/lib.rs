//! Þund (`thund`): an embeddable incremental view maintainer over event streams.
//!
//! A program declares SQL views over event streams — an event-time window, a
//! watermark, an output mode — pushes Arrow batches, and at every trigger
//! gets the windows that closed, exactly once.
//!
//! ```text
//!   Arrow RecordBatches ──push──► Engine ──trigger──► TriggerReport (per view: W, emitted rows, late rows, path)
//!                                   │
//!                                   ├── WatermarkTracker   W = min over non-idle sources (max − lateness), monotone
//!                                   ├── plan               which path runs the view, and why
//!                                   └── recompute          DataFusion per dirty / closing window (the oracle path)
//! ```
//!
//! The semantics contract (design §1) is the same on every path: a row is
//! late iff every window it belongs to had closed at the watermark in force
//! when its trigger started; a window `[s, e)` closes when `W ≥ e`; the
//! view's SQL is evaluated per window over that window's non-late rows, and
//! each output row is prefixed by `window_start, window_end`.
//!
//! See [`Engine`] for a runnable example.

pub mod cli;
pub mod demo;
mod engine;
mod error;
mod incremental;
pub mod io;
pub mod plan;
mod recompute;
mod sidecar;
pub mod spec;
pub mod time;
pub mod watermark;
pub mod window;

pub use engine::{Engine, EngineBuilder, Recovery, TriggerReport, ViewCounters, ViewReport};
pub use error::{Error, Result};
pub use plan::{PathKind, ViewPlan};
pub use sidecar::{CheckpointOutcome, CheckpointStats};
pub use spec::{ExecMode, OutputMode, SourceSpec, ViewSpec, WatermarkSpec, WindowKind, WindowSpec};
pub use watermark::{Clock, ManualClock, SystemClock, WatermarkTracker};

/// The README's Rust examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
