//! The command line: clap types live here and nowhere else. Each subcommand has its own file
//! that resolves what the user typed into library calls and turns the results into output and
//! an exit code.
//!
//! Exit codes for `ps`, `stop`, `sweep`, `sessions`, `report` and `providers`: 0 clean; 1 a provider
//! could not be queried, a target was not found or something could not be removed; 2 bad
//! usage or bad config. Every subcommand returns `Result<Exit, Error>` and [`Error::exit`] is
//! the one mapping from an error to a code. The wrapper exits with CMD's own status, or
//! 125/126/127 (see `run.rs`); the sidecar also reports start-up failures on its `ready` line.

mod claim;
mod docs;
mod error;
mod fast;
mod fleet;
mod output;
mod providers;
mod ps;
mod report;
mod run;
mod sessions;
mod show;
mod stop;
mod sweep;
mod watch;

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::dotenv::WithDotenv;
use crate::config::{Overrides, ProcessEnv, Settings};
use crate::providers::Registry;

pub(crate) use error::Error;
pub(crate) use output::Exit;

#[derive(Debug, Parser)]
#[command(
    name = "sandguard",
    version = env!("SANDGUARD_VERSION"),
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

    /// `sandguard [OPTIONS] -- CMD…` takes `run`'s options
    #[command(flatten)]
    run: run::Options,

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
    /// Sandbox time spent across the local ledger, with the sandboxes still alive
    Report(report::Args),
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
    /// Print the owner label (`sandguard.owner`) of process PID as sandguard computes it, for
    /// the SDKs in other languages where they cannot read it themselves (macOS: no `/proc`)
    #[command(hide = true)]
    Identity {
        /// The process
        #[arg(long, value_name = "PID")]
        pid: u32,
    },
}

/// A parsed command line with its settings resolved (or the reason they could not be).
pub struct Invocation {
    command: Command,
    settings: Result<Settings, crate::config::ConfigError>,
}

impl Invocation {
    /// Parses the command line `args` (program name first) and resolves the settings once.
    /// `Err` carries the exit code of a command line that was help, a version, or bad usage
    /// (clap has printed it).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Invocation, u8> {
        let args: Vec<OsString> = args.into_iter().collect();
        if let Some((config, args)) = fast::wrapper(&args) {
            return Ok(Invocation::resolved(config, Command::Run(args)));
        }
        let cli = match Cli::try_parse_from(args) {
            Ok(cli) => cli,
            Err(e) => {
                if !e.use_stderr() {
                    let _ = e.print();
                    return Err(Exit::Ok.code());
                }
                eprint!("{}", without_dash_dash_tip(&e.render().to_string()));
                return Err(Exit::Usage.code());
            }
        };
        let command = match (cli.command, cli.wrapped) {
            (Some(_), _) if cli.run.is_given() => {
                eprintln!(
                    "sandguard: the run options (--grace, --docker-proxy, --quiet, …) go \
                     before `--` in the short form `sandguard [OPTIONS] -- CMD…`, or after \
                     `run`; not before another subcommand"
                );
                return Err(Exit::Usage.code());
            }
            (Some(c), _) => c,
            (None, wrapped) if !wrapped.is_empty() => Command::Run(run::Args {
                options: cli.run,
                command: wrapped,
            }),
            (None, _) => {
                eprintln!(
                    "sandguard: nothing to do; try `sandguard -- CMD…` or `sandguard --help`"
                );
                return Err(Exit::Usage.code());
            }
        };
        Ok(Invocation::resolved(cli.config, command))
    }

    /// `command` with the settings resolved once: `--config`, and the grace its options give.
    fn resolved(config: Option<PathBuf>, command: Command) -> Invocation {
        let (grace, limits) = match &command {
            Command::Run(a) => (a.options.grace.map(|g| g.0), a.options.limits.given()),
            Command::Watch(a) => (a.grace.map(|g| g.0), a.limits.given()),
            _ => (None, Default::default()),
        };
        let overrides = Overrides {
            config,
            grace,
            limits,
            ..Default::default()
        };
        // A handed-over sidecar starts in `/`: its wrapper names the directory whose `.env`
        // files the wrapper's settings read (`watch --dotenv-dir`), so both read the same.
        let settings = match &command {
            Command::Watch(watch::Args {
                dotenv_dir: Some(dir),
                ..
            }) => Settings::resolve(&overrides, &WithDotenv::new(&ProcessEnv, dir)),
            _ => Settings::resolve(&overrides, &WithDotenv::here(&ProcessEnv)),
        };
        Invocation { command, settings }
    }

    /// The level diagnostics are logged at: the settings', or `warn` when they are bad (the
    /// error itself is reported by the command).
    pub fn log_level(&self) -> tracing::Level {
        self.settings
            .as_ref()
            .map_or(tracing::Level::WARN, |s| s.log_level)
    }

    /// Runs the command; returns the process exit code. Every command reports through
    /// [`Error`]: this is the one place an error is printed and mapped to a code.
    pub fn run(self) -> u8 {
        let settings = self.settings;
        // The wrapper, the sidecar and the claim commands take the settings as they came: the
        // wrapper fails 125 on a bad config, the sidecar says it on its `error` line, and a
        // claim is sent all the same. The sidecar also must not start a runtime here: it
        // forks first.
        let result = match self.command {
            Command::Run(args) => run::run(args, settings),
            Command::Watch(args) => watch::run(args, settings),
            Command::Claim(args) => claim::run(claim::Verb::Claim, args, settings),
            Command::Release(args) => claim::run(claim::Verb::Release, args, settings),
            Command::Detach(args) => claim::run(claim::Verb::Detach, args, settings),
            other => settings
                .map_err(Error::from)
                .and_then(|settings| dispatch(other, &settings)),
        };
        match result {
            Ok(exit) => exit.code(),
            Err(e) => {
                eprintln!("sandguard: {e}");
                e.exit().code()
            }
        }
    }
}

/// clap's error without its tip "to pass '--x' as a value, use '-- --x'": with `CMD` as the
/// trailing argument, that advice would run `--x` as the program. An option sandguard does
/// not know is only that.
fn without_dash_dash_tip(rendered: &str) -> String {
    let mut out = String::with_capacity(rendered.len());
    let mut lines = rendered.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        let next_is_tip = lines
            .peek()
            .is_some_and(|l| l.trim_start().starts_with("tip: to pass"));
        if line.trim_start().starts_with("tip: to pass") || (line.trim().is_empty() && next_is_tip)
        {
            continue;
        }
        out.push_str(line);
    }
    out
}

/// Runs a command that reports through [`Error`].
fn dispatch(command: Command, settings: &Settings) -> Result<Exit, Error> {
    match command {
        Command::Completions(args) => return docs::completions(args),
        Command::Man => return docs::man(),
        Command::Identity { pid } => {
            return match crate::identity::Identity::of_pid(pid) {
                Some(id) => {
                    println!("{}", id.to_label());
                    Ok(Exit::Ok)
                }
                None => Err(Error::Failed(format!("no process {pid} can be read here"))),
            }
        }
        Command::Sessions(args) => return sessions::run(args, settings),
        Command::Report(args) => return report::run(args, settings),
        _ => {}
    }
    let registry = Registry::from_settings(settings);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        match command {
            Command::Ps(args) => ps::run(args, settings, &registry).await,
            Command::Stop(args) => stop::run(args, settings, &registry).await,
            Command::Providers(args) => providers::run(args, &registry).await,
            Command::Sweep(args) => sweep::run(args, settings, &registry).await,
            _ => Err(Error::Usage("not a command".into())),
        }
    })
}

/// Diagnostics go to stderr, coloured only on a terminal and never with `NO_COLOR`: the one
/// rule of [`output::colour`], for stderr.
pub fn init_logging(level: tracing::Level) {
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(output::colour::Paint::stderr().is_on())
        .with_target(false)
        .try_init();
}
