//! The `thund` binary: see `thund --help`.

use std::process::ExitCode;

// many small rows are allocated and freed per trigger: glibc's malloc and
// free were a third of a Nexmark q19 trigger's samples
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    match thund::cli::main_from_args() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
