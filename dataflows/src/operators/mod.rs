//! The operators of the windowed-aggregate dataflow, one per file.

pub(crate) mod collect;

pub(crate) use collect::{collect_changes, fold_changes};
