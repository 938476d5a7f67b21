//! Rendering: one file per operator family, each building its dataflow in one worker from
//! what the host hands it (no decisions are taken here).

pub(crate) mod aggregate;
