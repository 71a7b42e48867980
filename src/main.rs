//! The `sandguard` binary: parse the command line, set up logging, hand over to
//! [`sandguard::testing::cli::Invocation::run`], and exit with the code it returns.

use std::process::ExitCode;

fn main() -> ExitCode {
    let invocation = match sandguard::testing::cli::Invocation::parse(std::env::args_os()) {
        Ok(i) => i,
        Err(code) => return ExitCode::from(code),
    };
    sandguard::testing::cli::init_logging(invocation.log_level());
    ExitCode::from(invocation.run())
}
