//! The command line: clap types live here and nowhere else. Each subcommand has its own file
//! that resolves what the user typed into library calls and turns the results into output and
//! an exit code.
//!
//! Exit codes for `ps`, `stop` and `providers`: 0 clean; 1 a provider could not be queried, a
//! target was not found or something could not be removed; 2 bad usage or bad config.

mod output;
mod providers;
mod ps;
mod stop;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{Overrides, ProcessEnv, Settings};
use crate::providers::Registry;

pub use output::Exit;

#[derive(Debug, Parser)]
#[command(
    name = "sandguard",
    version,
    about = "Makes sure no sandbox outlives the program that owns it",
    long_about = "sandguard watches the program that owns Docker containers and cloud sandboxes, and \
                  reclaims every one of them the moment that program is gone.",
    disable_help_subcommand = true
)]
struct Cli {
    /// Config file (default: $SANDGUARD_CONFIG, $XDG_CONFIG_HOME/sandguard/config.toml,
    /// /etc/sandguard/config.toml)
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List every managed sandbox on every configured provider
    Ps(ps::Args),
    /// Remove one sandbox, or all managed sandboxes, now
    Stop(stop::Args),
    /// Show every provider sandguard knows: configured or not, reachable or not, and why
    Providers(providers::Args),
}

/// Runs the command line `args` (program name first) and returns the process exit code.
pub fn run(args: Vec<OsString>) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = e.print();
            return code.code();
        }
    };
    let overrides = Overrides {
        config: cli.config.clone(),
        ..Default::default()
    };
    let settings = match Settings::resolve(&overrides, &ProcessEnv) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandguard: {e}");
            return Exit::Usage.code();
        }
    };
    init_logging(settings.log_level);
    let registry = Registry::from_settings(&settings);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandguard: cannot start the async runtime: {e}");
            return Exit::Failure.code();
        }
    };
    let exit = runtime.block_on(async {
        match cli.command {
            Command::Ps(args) => ps::run(args, &registry).await,
            Command::Stop(args) => stop::run(args, &settings, &registry).await,
            Command::Providers(args) => providers::run(args, &registry).await,
        }
    });
    exit.code()
}

/// Diagnostics go to stderr, coloured only on a terminal and never with `NO_COLOR`.
fn init_logging(level: tracing::Level) {
    let colour = std::env::var_os("NO_COLOR").is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .try_init();
}
