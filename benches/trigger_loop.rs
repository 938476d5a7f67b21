//! The throughput bench's engine loop alone, once, for a profiler: push a
//! batch, trigger, repeat. Under `valgrind --tool=callgrind` it counts
//! instructions, which (unlike time on a shared machine) repeat exactly, so
//! two builds compare to the instruction:
//!
//! ```text
//! cargo bench --bench trigger_loop --no-run
//! THUND_LOOP_BATCHES=30 valgrind --tool=callgrind target/release/deps/trigger_loop-<hash>
//! ```
//!
//! `THUND_LOOP_BATCHES` (default 100) batches of 10 000 rows, `THUND_LOOP_WORKERS`
//! (default 1) workers; prints the number of output rows.

#![allow(missing_docs)]

mod common;

fn main() {
    let batches: Vec<_> = (0..common::env("THUND_LOOP_BATCHES", 100))
        .map(common::batch)
        .collect();
    let rows = common::engine_run_on(&batches, common::env("THUND_LOOP_WORKERS", 1));
    println!("{rows}");
}
