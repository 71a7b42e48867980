//! The command line: clap types live here and nowhere else. Each subcommand has its own file
//! that resolves what the user typed into library calls and turns the results into output and
//! an exit code.
//!
//! Exit codes for `ps`, `stop` and `providers`: 0 clean; 1 a provider could not be queried, a
//! target was not found or something could not be removed; 2 bad usage or bad config. The
//! wrapper exits with CMD's own status, or 125/126/127 (see [`run`]).

mod claim;
mod docs;
mod init;
mod output;
mod providers;
mod ps;
mod run;
mod sessions;
mod stop;
mod sweep;
mod watch;

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
    disable_help_subcommand = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    /// Config file (default: $SANDGUARD_CONFIG, $XDG_CONFIG_HOME/sandguard/config.toml,
    /// /etc/sandguard/config.toml)
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,

    #[command(subcommand)]
    command: Option<Command>,

    /// `sandguard -- CMD…`: run CMD under a new session (same as `sandguard run -- CMD…`)
    #[arg(last = true, value_name = "CMD")]
    wrapped: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run CMD under a new session: its sandboxes are reclaimed when it dies
    Run(run::Args),
    /// The sidecar itself, for SDKs: guard the process --owner-pid
    Watch(watch::Args),
    /// List every managed sandbox on every configured provider
    Ps(ps::Args),
    /// Remove one sandbox, or all managed sandboxes, now
    Stop(stop::Args),
    /// Show every provider sandguard knows: configured or not, reachable or not, and why
    Providers(providers::Args),
    /// Show the sessions in the local ledger
    Sessions(sessions::Args),
    /// Find and reclaim what escaped: dead owners, dead sidecars, expired TTLs, pending work
    Sweep(sweep::Args),
    /// Tell this session's sidecar that a sandbox is ours (inside `sandguard -- CMD`)
    Claim(claim::Args),
    /// Tell this session's sidecar that we removed a sandbox ourselves
    Release(claim::Args),
    /// Tell this session's sidecar that a sandbox should outlive us (its TTL still applies)
    Detach(claim::Args),
    /// Print shell completions
    Completions(docs::CompletionArgs),
    /// Print the man page (roff)
    Man,
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
    let command = match (cli.command, cli.wrapped) {
        (Some(c), _) => c,
        (None, wrapped) if !wrapped.is_empty() => Command::Run(run::Args {
            grace: None,
            docker_proxy: false,
            command: wrapped,
        }),
        (None, _) => {
            eprintln!("sandguard: nothing to do; try `sandguard -- CMD…` or `sandguard --help`");
            return Exit::Usage.code();
        }
    };
    let grace = match &command {
        Command::Run(a) => a.grace.map(|g| g.0),
        Command::Watch(a) => a.grace.map(|g| g.0),
        _ => None,
    };
    let overrides = Overrides {
        config: cli.config.clone(),
        grace,
        ..Default::default()
    };
    let settings = Settings::resolve(&overrides, &ProcessEnv).map_err(|e| e.to_string());
    if let Ok(s) = &settings {
        init_logging(s.log_level);
    }
    // The wrapper and the sidecar handle their own start-up failures (exit 125, an `error`
    // line); they also must not start a runtime here: the sidecar forks first.
    let command = match command {
        Command::Run(args) => return run::main(args, settings),
        Command::Watch(args) => return watch::main(args, settings).code(),
        Command::Claim(args) => return claim::main(claim::Verb::Claim, args, settings).code(),
        Command::Release(args) => return claim::main(claim::Verb::Release, args, settings).code(),
        Command::Detach(args) => return claim::main(claim::Verb::Detach, args, settings).code(),
        Command::Completions(args) => return docs::completions(args).code(),
        Command::Man => return docs::man().code(),
        other => other,
    };
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandguard: {e}");
            return Exit::Usage.code();
        }
    };
    if let Command::Sessions(args) = command {
        return sessions::main(args, &settings).code();
    }
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
        match command {
            Command::Ps(args) => ps::run(args, &registry).await,
            Command::Stop(args) => stop::run(args, &settings, &registry).await,
            Command::Providers(args) => providers::run(args, &registry).await,
            Command::Sweep(args) => sweep::run(args, &settings, &registry).await,
            _ => Exit::Usage,
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
