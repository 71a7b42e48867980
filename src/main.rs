//! The `sandguard` binary: parse the command line, set up logging, hand over to
//! [`sandguard::cli::run`], and exit with the code it returns.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = sandguard::cli::run(std::env::args_os().collect());
    ExitCode::from(code)
}
