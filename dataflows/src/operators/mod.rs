//! The operators of the windowed-aggregate dataflow, one per file.

pub(crate) mod collect;
pub(crate) mod evict;

pub(crate) use collect::collect_changes;
pub(crate) use evict::evict_at_expiry;
