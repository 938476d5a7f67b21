//! Integration tests of the windowed-aggregate dataflow: the law against an oracle, bounded
//! state, snapshot/restore across worker counts, and errors.

mod bounded_state;
mod common;
mod errors;
mod law;
mod panes;
mod snapshot_restore;
