//! State types: aggregate states, the difference type that carries them, the worker's table
//! of open windows, the host's pre-aggregation, and a worker's part of a windowed join.

pub(crate) mod agg;
pub(crate) mod diff;
pub(crate) mod join;
pub(crate) mod open;
pub(crate) mod preagg;
