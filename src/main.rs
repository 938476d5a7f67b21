//! The `thund` binary: see `thund --help`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match thund::cli::main_from_args() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
