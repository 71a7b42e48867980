//! The wrapper: `sandguard -- CMD…` and `sandguard run [--grace D] -- CMD…`.
//!
//! 1. Resolve the config; make a session id; read this process's own identity.
//! 2. Create the session's journal (its `start` record written, its lock held) and decide and
//!    bind the proxies, printing their warnings ([`crate::watch::start::handoff`]).
//! 3. Make the control pipe; spawn `sandguard watch --daemonize` in its own session, detached,
//!    the pipe's read end at descriptor 3, the journal and the listeners handed over, told
//!    this process's identity (which CMD will keep: exec changes neither the pid nor the start
//!    time). The wrapper does not wait for the sidecar's `ready`: the sidecar makes the journal
//!    durable and serves the listeners while CMD starts (a connection CMD makes first waits in
//!    the backlog, a control line in the pipe), and judges this pid and start time when it
//!    watches, so a CMD that already ended is reclaimed at once. Nothing CMD creates can be
//!    missed: the labels it is given are the journal's. A failure up to here is exit 125.
//! 4. Export `SANDGUARD_SESSION`, `SANDGUARD_LABELS` (`k=v,k=v`) and `SANDGUARD_FD` (the pipe's
//!    write end, left open across exec), then exec CMD: it keeps the pid, the terminal, the
//!    signals, and its exit status is the shell's. Exit 127 if CMD is not found, 126 if it
//!    cannot be executed (after telling the sidecar `bye`, so the session ends clean). Every
//!    failure before CMD ran, a bad config included, is exit 125 ([`Error::BeforeCommand`]).
//!
//! With `--docker-proxy` (or `[watch] docker_proxy = true`) the sidecar also serves a Docker
//! API proxy, and with `--cloud-proxy` (or `[watch] cloud_proxy = true`) the cloud API proxy
//! (E2B, Daytona: [`crate::proxy::cloud`]); each variable CMD gets from them
//! (`DOCKER_HOST`, `E2B_API_URL`, `DAYTONA_API_URL`) is exported, the same `NAME=VALUE`s an
//! SDK's sidecar puts on its `ready` line.
//!
//! The wrapper does nothing else on this path: it runs before every guarded program.
//!
//! **When the wrapper is pid 1** of its pid namespace (a container's entrypoint,
//! `ENTRYPOINT ["sandguard", "--"]`, or `unshare -p`), it does not exec: when pid 1 exits the
//! kernel kills every process of the namespace, the sidecar included, before it could
//! reclaim. It stays as init instead ([`super::init`]): CMD runs as its child (and is the
//! session's owner), signals are forwarded to it, orphans are reaped, and the wrapper exits
//! with CMD's status only once the sidecar has finished reclaiming.
//!
//! When it read a config file, the wrapper exports `SANDGUARD_CONFIG` too, so that a
//! `sandguard claim` inside CMD finds the session's state directory.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::{Error, Exit};
use crate::config::{ConfigError, HumanDuration, ProxyMode, Settings};
use crate::identity::Identity;
use crate::session::{
    self,
    spawn::{self, Report, Spawn},
};
use crate::unix;
use crate::watch::start::handoff;

/// What `run` and the short form `sandguard [OPTIONS] -- CMD` take.
#[derive(Debug, Clone, Default, clap::Args)]
pub(super) struct Options {
    /// Lease grace once heartbeats start (default 10m)
    #[arg(long, value_name = "D")]
    pub grace: Option<HumanDuration>,
    /// Serve CMD a Docker API proxy (DOCKER_HOST) that labels and claims every container,
    /// network and volume it creates, and fail if that cannot be done (default: on when a
    /// Docker daemon is reachable; [watch] docker_proxy)
    #[arg(long, overrides_with = "no_docker_proxy")]
    pub docker_proxy: bool,
    /// Do not serve the Docker API proxy
    #[arg(long, overrides_with = "docker_proxy")]
    pub no_docker_proxy: bool,
    /// Serve CMD the cloud API proxy (E2B_API_URL / DAYTONA_API_URL) that labels and claims
    /// every sandbox the E2B and Daytona SDKs create, and fail if neither is configured
    /// (default: on for each whose credentials are found; [watch] cloud_proxy)
    #[arg(long, overrides_with = "no_cloud_proxy")]
    pub cloud_proxy: bool,
    /// Do not serve the cloud API proxy
    #[arg(long, overrides_with = "cloud_proxy")]
    pub no_cloud_proxy: bool,
    /// Say nothing on the terminal when CMD ends (warnings at start are still printed)
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl Options {
    /// Whether any option was given (the short form's options before a subcommand are a
    /// usage error, not silently dropped).
    pub(super) fn is_given(&self) -> bool {
        self.grace.is_some()
            || self.docker_proxy
            || self.no_docker_proxy
            || self.cloud_proxy
            || self.no_cloud_proxy
            || self.quiet
    }

    /// The Docker proxy's mode: the flag, else the config's (auto by default).
    pub(super) fn docker_proxy(&self, settings: &Settings) -> ProxyMode {
        mode(
            self.docker_proxy,
            self.no_docker_proxy,
            settings.watch.docker_proxy,
        )
    }

    /// The cloud proxy's mode: the flag, else the config's (auto by default).
    pub(super) fn cloud_proxy(&self, settings: &Settings) -> ProxyMode {
        mode(
            self.cloud_proxy,
            self.no_cloud_proxy,
            settings.watch.cloud_proxy,
        )
    }
}

fn mode(on: bool, off: bool, config: ProxyMode) -> ProxyMode {
    match (on, off) {
        (true, _) => ProxyMode::On,
        (_, true) => ProxyMode::Off,
        _ => config,
    }
}

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    pub options: Options,
    /// The program to guard, and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Runs CMD under a new session: returns only when CMD could not be run (or, as pid 1, when
/// it ended: [`super::init`]).
pub(super) fn run(args: Args, settings: Result<Settings, ConfigError>) -> Result<Exit, Error> {
    let settings = settings.map_err(Error::before_command)?;
    if std::process::id() == 1 {
        return super::init::run(args, &settings);
    }
    let me = Identity::current()
        .ok_or_else(|| own_failure("cannot read this process's identity from /proc"))?;
    let handed = hand_off(&args, &settings, &me)?;
    let announced = (handed.session.as_str(), handed.env.as_slice());
    let err = exec(&args.command, announced, &handed.control, &me, &settings);
    say_bye(handed.control);
    Err(err)
}

/// A session its sidecar took over: what CMD is told, and the control pipe's write end.
struct TakenOver {
    session: String,
    env: Vec<(String, String)>,
    control: OwnedFd,
}

/// Makes the session and starts its sidecar without waiting for it
/// ([`crate::watch::start::handoff`]): the session id, what the program gets from the
/// proxies, and the control pipe's write end.
fn hand_off(args: &Args, settings: &Settings, me: &Identity) -> Result<TakenOver, Error> {
    let modes = (
        args.options.docker_proxy(settings),
        args.options.cloud_proxy(settings),
    );
    let grace = args.options.grace.map_or(settings.watch.grace, |g| g.0);
    let mut stderr = std::io::stderr();
    let mut warn = |w: &str| {
        let _ = writeln!(stderr, "sandguard: warning: {w}");
    };
    let handoff = handoff::prepare(settings, me, grace, modes, &mut warn)
        .map_err(|e| own_failure(e.to_string()))?;
    let spawn = sidecar_spawn(args, settings, me)?;
    let (control_r, control_w) = match unix::pipe() {
        Ok(pipe) => pipe,
        Err(e) => {
            handoff.abandon();
            return Err(own_failure(format!("cannot make the control pipe: {e}")));
        }
    };
    match spawn.start_handed(&handoff.session, control_r, handoff.handoff()) {
        Ok(()) => {
            let handed = TakenOver {
                session: handoff.session.clone(),
                env: handoff.env(),
                control: control_w,
            };
            handoff.handed();
            Ok(handed)
        }
        Err(e) => {
            handoff.abandon();
            Err(own_failure(e.to_string()))
        }
    }
}

/// A failure of the wrapper before CMD ran (exit 125).
pub(super) fn own_failure(message: impl Into<String>) -> Error {
    Error::before_command(Error::Failed(message.into()))
}

/// How the sidecar of a new session guarding `owner` is started.
fn sidecar_spawn(args: &Args, settings: &Settings, owner: &Identity) -> Result<Spawn, Error> {
    let binary = std::env::current_exe()
        .map_err(|e| own_failure(format!("cannot find the sandguard binary: {e}")))?;
    Ok(Spawn {
        binary,
        config: settings.source.clone(),
        session: None,
        owner: owner.clone(),
        grace: args.options.grace.map(|g| g.0),
        docker_proxy: args.options.docker_proxy(settings),
        cloud_proxy: args.options.cloud_proxy(settings),
        report: Some(Report {
            quiet: args.options.quiet,
        }),
    })
}

/// Starts the sidecar of a new session guarding `owner` (on the control pipe given, else a
/// new one) and waits for its `ready` (pid 1's way: [`super::init`]).
pub(super) fn start_sidecar(
    args: &Args,
    settings: &Settings,
    owner: &Identity,
    control: Option<(OwnedFd, OwnedFd)>,
) -> Result<spawn::Ready, Error> {
    let spawn = sidecar_spawn(args, settings, owner)?;
    match control {
        Some(pipe) => spawn.start_on(pipe),
        None => spawn.start(),
    }
    .map_err(|e| own_failure(e.to_string()))
}

/// Replaces this process with CMD, with what the sidecar's `ready` announced (the session and
/// its variables), the labels of `me`, this process (the owner: exec keeps the pid and the
/// start time), the control
/// pipe's write end at `SANDGUARD_FD` and, when the settings came from a file, that file.
/// Returns only if the exec failed, with why (its exit code: [`Error::exit`]); the caller then
/// tells the sidecar `bye` (CMD never ran).
pub(super) fn exec(
    command: &[OsString],
    (session, env): (&str, &[(String, String)]),
    control: &OwnedFd,
    me: &Identity,
    settings: &Settings,
) -> Error {
    if let Err(e) = unix::set_cloexec(control.as_fd(), false) {
        return own_failure(format!("cannot pass the control pipe on: {e}"));
    }
    let labels = session::labels_env(&session::labels(session, me));
    let Some((program, rest)) = command.split_first() else {
        return own_failure("no command given");
    };
    let mut command = Command::new(program);
    command.envs(env.iter().map(|(k, v)| (k, v)));
    if let Some(config) = &settings.source {
        command.env(
            "SANDGUARD_CONFIG",
            std::path::absolute(config).unwrap_or_else(|_| config.clone()),
        );
    }
    let err = command
        .args(rest)
        .env("SANDGUARD_SESSION", session)
        .env("SANDGUARD_LABELS", &labels)
        .env("SANDGUARD_FD", control.as_raw_fd().to_string())
        .exec();
    let program = program.to_string_lossy().into_owned();
    match err.kind() {
        std::io::ErrorKind::NotFound => Error::CommandNotFound(program),
        _ => Error::CannotExecute {
            program,
            source: err,
        },
    }
}

/// CMD never ran: tell the sidecar to end the session clean rather than report a death.
pub(super) fn say_bye(control: OwnedFd) {
    let mut pipe = std::fs::File::from(control);
    let _ = pipe.write_all(crate::protocol::Command::Bye.to_line().as_bytes());
}
