//! The integration tests, in one binary: each module is one concern (laws,
//! recovery, crashes, hostile input, the CLI). One binary links DataFusion
//! once instead of once per file, which keeps a cold `./test.sh` within a CI
//! machine's disk (each test binary is ~250 MB at opt-level 0).
//!
//! `tests/one_cluster.rs` stays a binary of its own: it counts the process's
//! timely threads, which the tests here would start beside it.

mod common;

mod arithmetic;
mod bad_input;
mod boundaries;
mod checkpoint_misuse;
mod cli;
mod crash;
mod ddl;
mod encodings;
mod expressions;
mod generated;
mod generated_text;
mod hostile_input;
mod incremental_state;
mod late_and_idle;
mod law_incremental;
mod law_join;
mod law_recompute;
mod law_special_values;
mod live;
mod nexmark;
mod ordered_types;
mod recovery;
mod routing;
mod sessions;
mod sinks;
mod sql_shapes;
mod tables;
mod window_sql;
