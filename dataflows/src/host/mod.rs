//! The host side: the handles the root crate drives, and the timely worker threads they
//! command (one [`cluster::Cluster`] of threads hosts every dataflow built on it).

pub(crate) mod cluster;
pub(crate) mod handle;
pub(crate) mod join;
mod worker;
