//! State types: aggregate states, the difference type that carries them, the worker's table
//! of open windows, and the host's pre-aggregation.

pub(crate) mod agg;
pub(crate) mod diff;
pub(crate) mod open;
pub(crate) mod preagg;
