//! The wrapper, `sandguard -- CMD…`, as a library service: [`run`] takes what the command line
//! resolved ([`Wrap`]) and either becomes CMD (exec) or, as pid 1, stays its init ([`init`]).
//! `crate::cli::run` only parses, calls this and maps the [`WrapError`] to an exit code.
//!
//! 1. Read this process's own identity (the settings and the session's options come resolved).
//! 2. Create the session's journal (its `start` record written, its lock held) and decide and
//!    bind the proxies, each warning handed to the caller ([`crate::watch::start::handoff`]).
//! 3. Make the control pipe; spawn `sandguard watch --detached` in its own session, nobody's
//!    child ([`crate::session::spawn`]), the pipe's read end at descriptor 3, the journal and
//!    the listeners handed over, told this process's identity (which CMD will keep: exec
//!    changes neither the pid nor the start time). The wrapper does not wait for the sidecar's
//!    `ready`: the sidecar makes the journal durable and serves the listeners while CMD starts
//!    (a connection CMD makes first waits in the backlog, a control line in the pipe), and
//!    judges this pid and start time when it watches, so a CMD that already ended is
//!    reclaimed at once. Nothing CMD creates can be missed: the labels it is given are the
//!    journal's. A failure up to here is [`WrapError::BeforeCommand`] (exit 125).
//! 4. Export `SANDGUARD_SESSION`, `SANDGUARD_LABELS` (`k=v,k=v`) and `SANDGUARD_FD` (the pipe's
//!    write end, left open across exec), then exec CMD ([`exec`]): it keeps the pid, the
//!    terminal, the signals, and its exit status is the shell's. CMD not found is
//!    [`WrapError::CommandNotFound`] (127), not executable [`WrapError::CannotExecute`] (126),
//!    each after telling the sidecar `bye`, so the session ends clean.
//!
//! With the Docker proxy (`--docker-proxy`, `[watch] docker_proxy`) or the cloud API proxy
//! (E2B, Daytona: [`crate::proxy::cloud`]) on, each variable CMD gets from them
//! (`DOCKER_HOST`, `E2B_API_URL`, `DAYTONA_API_URL`) is exported, the same `NAME=VALUE`s an
//! SDK's sidecar puts on its `ready` line. When the settings came from a file, the wrapper
//! exports `SANDGUARD_CONFIG` too, so that a `sandguard claim` inside CMD finds the session's
//! state directory.
//!
//! The wrapper does nothing else on this path: it runs before every guarded program.
//!
//! **When the wrapper is pid 1** of its pid namespace (a container's entrypoint,
//! `ENTRYPOINT ["sandguard", "--"]`, or `unshare -p`), it does not exec: when pid 1 exits the
//! kernel kills every process of the namespace, the sidecar included, before it could
//! reclaim. It stays as init instead ([`init`]): CMD runs as its child (and is the session's
//! owner), signals are forwarded to it, orphans are reaped, and the wrapper returns CMD's
//! status ([`Wrapped::Ended`]) only once the sidecar has finished reclaiming.

mod init;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use crate::config::{ConfigError, ProxyMode, Settings};
use crate::identity::Identity;
use crate::session::{
    self,
    spawn::{Report, Spawn, SpawnError},
};
use crate::unix;
use crate::watch::start::{handoff, StartError};

/// What to run and how, as the command line resolved it (no clap types here).
#[derive(Debug, Clone)]
pub(crate) struct Wrap {
    /// CMD and its arguments.
    pub command: Vec<OsString>,
    /// `--grace`, when given (the settings' otherwise).
    pub grace: Option<Duration>,
    /// The Docker proxy's mode, the flag's or the config's.
    pub docker_proxy: ProxyMode,
    /// The cloud API proxy's mode, likewise.
    pub cloud_proxy: ProxyMode,
    /// `--quiet`: no word on the terminal when CMD ends.
    pub quiet: bool,
}

/// How the wrapper came back without a [`WrapError`]: only as pid 1 (otherwise it became CMD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrapped {
    /// CMD ended and the sidecar has finished: CMD's status (128+N for a death by signal N).
    Ended(u8),
    /// In CMD's process, before its exec: the sidecar never became ready, which pid 1 has
    /// reported. Exit 125 without a word more.
    Abandoned,
}

/// Why CMD did not run (or, as pid 1, could not be seen to its end).
#[derive(Debug, thiserror::Error)]
pub(crate) enum WrapError {
    /// The wrapper itself failed before CMD ran (exit 125, whatever the step).
    #[error(transparent)]
    BeforeCommand(#[from] Failure),
    /// CMD does not exist (exit 127).
    #[error("{0}: command not found")]
    CommandNotFound(String),
    /// CMD exists but cannot be executed (exit 126).
    #[error("{program}: cannot execute: {source}")]
    CannotExecute {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// The step of the wrapper that failed before CMD ran.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The configuration (file, environment or flags) is bad: exit 125 here, not 2, like any
    /// failure before CMD ran.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read this process's identity from /proc")]
    OwnIdentity,
    #[error("cannot read the program's identity from /proc")]
    ProgramIdentity,
    /// The session's journal or its proxies ([`handoff::prepare`]).
    #[error(transparent)]
    Prepare(StartError),
    #[error("cannot find the sandguard binary: {0}")]
    Binary(#[source] std::io::Error),
    #[error("cannot make the control pipe: {0}")]
    ControlPipe(#[source] std::io::Error),
    /// The sidecar could not be started, or (pid 1) did not say `ready`.
    #[error(transparent)]
    Spawn(SpawnError),
    #[error("cannot make a pipe: {0}")]
    Pipe(#[source] std::io::Error),
    #[error("cannot fork: {0}")]
    Fork(#[source] std::io::Error),
    #[error("cannot take over signals as pid 1: {0}")]
    Signals(#[source] std::io::Error),
    #[error("cannot pass the control pipe on: {0}")]
    PassControl(#[source] std::io::Error),
    #[error("no command given")]
    NoCommand,
}

/// Runs `wrap.command` under a new session (module docs); `warn` hears each warning of the
/// session's start (the caller prints them before CMD's first word). Returns only when CMD
/// could not be run or, as pid 1, when it ended.
pub(crate) fn run(
    wrap: &Wrap,
    settings: &Settings,
    warn: &mut dyn FnMut(&str),
) -> Result<Wrapped, WrapError> {
    if std::process::id() == 1 {
        return init::run(wrap, settings);
    }
    let me = Identity::current().ok_or(Failure::OwnIdentity)?;
    let handed = hand_off(wrap, settings, &me, warn)?;
    let announced = (handed.session.as_str(), handed.env.as_slice());
    let err = exec(&wrap.command, announced, &handed.control, &me, settings);
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
fn hand_off(
    wrap: &Wrap,
    settings: &Settings,
    me: &Identity,
    warn: &mut dyn FnMut(&str),
) -> Result<TakenOver, Failure> {
    let modes = (wrap.docker_proxy, wrap.cloud_proxy);
    let grace = wrap.grace.unwrap_or(settings.watch.grace);
    // The sidecar's binary is found before the session is prepared: a failure there then
    // leaves no journal behind to abandon.
    let spawn = sidecar(wrap, settings, me)?;
    let handoff = handoff::prepare(settings, me, grace, modes, warn)
        .map_err(|e| Failure::Prepare(e.into()))?;
    let (control_r, control_w) = match unix::pipe() {
        Ok(pipe) => pipe,
        Err(e) => {
            handoff.abandon();
            return Err(Failure::ControlPipe(e));
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
            Err(Failure::Spawn(e))
        }
    }
}

/// How the sidecar of a new session guarding `owner` is started: from this very binary, its
/// stderr the wrapper's ([`Report`]).
fn sidecar(wrap: &Wrap, settings: &Settings, owner: &Identity) -> Result<Spawn, Failure> {
    let binary = std::env::current_exe().map_err(Failure::Binary)?;
    Ok(Spawn {
        binary,
        config: settings.source.clone(),
        session: None,
        owner: owner.clone(),
        grace: wrap.grace,
        limits: settings.limits,
        docker_proxy: wrap.docker_proxy,
        cloud_proxy: wrap.cloud_proxy,
        report: Some(Report { quiet: wrap.quiet }),
    })
}

/// Replaces this process with CMD, with what the sidecar's `ready` announced (the session and
/// its variables), the labels of `me`, this process (the owner: exec keeps the pid and the
/// start time), the control pipe's write end at `SANDGUARD_FD` and, when the settings came
/// from a file, that file. Returns only if the exec failed, with why; the caller then tells
/// the sidecar `bye` (CMD never ran).
fn exec(
    command: &[OsString],
    (session, env): (&str, &[(String, String)]),
    control: &OwnedFd,
    me: &Identity,
    settings: &Settings,
) -> WrapError {
    if let Err(e) = unix::set_cloexec(control.as_fd(), false) {
        return Failure::PassControl(e).into();
    }
    let labels = session::labels_env(&session::labels(session, me));
    let Some((program, rest)) = command.split_first() else {
        return Failure::NoCommand.into();
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
        std::io::ErrorKind::NotFound => WrapError::CommandNotFound(program),
        _ => WrapError::CannotExecute {
            program,
            source: err,
        },
    }
}

/// CMD never ran: tell the sidecar to end the session clean rather than report a death.
fn say_bye(control: OwnedFd) {
    let mut pipe = std::fs::File::from(control);
    let _ = pipe.write_all(crate::protocol::Command::Bye.to_line().as_bytes());
}
