//! The one way a sidecar is started, for the wrapper, for pid 1 and for the Rust guard
//! ([`Spawn::launch`]): `sandguard watch --detached` started by the platform's detached start
//! (`crate::unix::spawn_detached`): in its own session (`setsid`, so the terminal's Ctrl-C
//! and hang-up never reach it), nobody's child (the process between is reaped here, so the
//! caller, and the program it may exec, inherits no child), in `/`, stdio away from the
//! terminal, the control pipe's read end at descriptor [`CONTROL_FD`], the owner's identity
//! pinned with `--owner-start`. Then either its one typed [`ReadyLine`] is waited for, at
//! most [`READY_TIMEOUT`] ([`Spawn::start`]), or, when the wrapper made the session itself
//! and hands it over ([`Spawn::start_handed`], one typed [`Handoff`]), nothing is.
//!
//! The SDKs in other languages start `watch --daemonize` with their own process APIs; that
//! sidecar forks itself away instead (`crate::cli::watch`).

use std::io::{IsTerminal, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::handoff::Handoff;
use crate::config::ProxyMode;
use crate::identity::Identity;
use crate::protocol::ReadyLine;
use crate::unix;

/// The descriptor number the sidecar reads control lines from.
pub(crate) const CONTROL_FD: i32 = 3;

/// How long whoever starts a sidecar waits for its `ready` line.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a sidecar could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot make the {what} pipe: {source}")]
    Pipe {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the sidecar {binary}: {source}")]
    Start {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make a session id: {0}")]
    SessionId(#[source] std::io::Error),
    #[error("the sidecar was not ready within {READY_TIMEOUT:?}")]
    Timeout,
    #[error("cannot read from the sidecar: {0}")]
    Read(#[source] std::io::Error),
    #[error("the sidecar failed to start: {0}")]
    NotReady(String),
}

/// What to start.
#[derive(Debug, Clone)]
pub(crate) struct Spawn {
    /// The `sandguard` binary.
    pub binary: PathBuf,
    /// `--config`, when the caller's settings came from a file.
    pub config: Option<PathBuf>,
    /// The session id to use (`None`: a new random one). It is on the sidecar's command line
    /// (`--session`), so `ps` shows which sidecar guards which session.
    pub session: Option<String>,
    /// The process to guard.
    pub owner: Identity,
    /// `--grace`, when the caller overrides the config's.
    pub grace: Option<Duration>,
    /// `--max-sandboxes`, `--max-creates`: each limit set, over the config's.
    pub limits: crate::budget::Limits,
    /// Serve a Docker API proxy: `--docker-proxy` (on) or `--docker-proxy=auto`.
    pub docker_proxy: ProxyMode,
    /// Serve the cloud API proxy (E2B, Daytona), likewise.
    pub cloud_proxy: ProxyMode,
    /// The sidecar's stderr is the caller's (the wrapper's), for its warnings at start and
    /// its word at the end ([`Report`]); `None`: `/dev/null`, as for the SDKs' sidecars,
    /// whose helpers report through the ready and outcome lines.
    pub report: Option<Report>,
}

/// How the sidecar talks to the terminal the wrapper was started from (`watch --report`).
///
/// Its warnings at start (a proxy on by default that cannot be served, a Docker daemon that
/// does not answer) go to that stderr before `ready`, so they are printed before CMD's first
/// word. After `ready` it keeps that stderr only when it is a terminal and the wrapper was not
/// `--quiet`: one line then says what the reclaim at CMD's end removed or left. A stderr that
/// is a pipe or a file is closed at `ready`, so whoever reads it to its end (a CI job, `$(…)`)
/// sees the end when CMD's own last descriptor closes, not after the reclaim.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Report {
    /// `--quiet`: no line at the end.
    pub quiet: bool,
}

/// A sidecar that said `ready`, and the write end of its control pipe.
#[derive(Debug)]
pub(crate) struct Ready {
    pub session: String,
    /// What the program gets from the sidecar's proxies (`DOCKER_HOST`, `E2B_API_URL`, …).
    pub env: Vec<(String, String)>,
    /// The control pipe's write end (close-on-exec; the wrapper clears that before exec).
    pub control: OwnedFd,
    /// The read end of the sidecar's stdout, past the ready line: after `bye` it carries the
    /// outcome line ([`crate::protocol::ByeOutcome`]), which the Rust guard reads.
    pub stdout: OwnedFd,
}

impl Spawn {
    /// Starts the sidecar and waits for its `ready` line.
    pub(crate) fn start(&self) -> Result<Ready, SpawnError> {
        let control = unix::pipe().map_err(|source| SpawnError::Pipe {
            what: "control",
            source,
        })?;
        self.start_on(control)
    }

    /// [`Spawn::start`] with a control pipe (read end, write end) the caller made: sandguard
    /// as pid 1 makes it before it forks the program, which must inherit the write end.
    pub(crate) fn start_on(&self, control: (OwnedFd, OwnedFd)) -> Result<Ready, SpawnError> {
        let (control_r, control_w) = control;
        let (ready_r, ready_w) = unix::pipe().map_err(|source| SpawnError::Pipe {
            what: "ready",
            source,
        })?;
        let session = match &self.session {
            Some(s) => s.clone(),
            None => super::new_id().map_err(SpawnError::SessionId)?,
        };
        self.launch(&session, control_r, None, ready_w)?;
        // `launch` closed its copy of the ready pipe's write end: EOF means the sidecar died.
        match ReadyLine::parse(&read_ready(&ready_r)?) {
            ReadyLine::Ready { session: said, env } if said == session => Ok(Ready {
                session,
                env,
                control: control_w,
                stdout: ready_r,
            }),
            ReadyLine::Ready { session: said, .. } => Err(SpawnError::NotReady(format!(
                "it answered for session {said:?}, not {session:?}"
            ))),
            ReadyLine::Error(reason) => Err(SpawnError::NotReady(reason)),
        }
    }

    /// Starts the sidecar of the session the wrapper made (`session`, with what `handoff`
    /// lends: `crate::watch::start::handoff`) and does not wait for it: returns as soon as it
    /// is started, so the caller can exec the program right away. The sidecar reads control
    /// lines from `control`; its stdout is `/dev/null` (no ready line: the wrapper made the
    /// session itself).
    pub(crate) fn start_handed(
        &self,
        session: &str,
        control: OwnedFd,
        handoff: Handoff<BorrowedFd<'_>>,
    ) -> Result<(), SpawnError> {
        let stdout = null(true).map_err(|source| self.start_error(source))?;
        self.launch(session, control, Some(handoff), stdout)
    }

    /// The one way a sidecar is started, for both of the above: the platform's detached start
    /// ([`unix::spawn_detached`]: nobody's child, in `/`, in a new session, nothing waited for
    /// but the process between), `watch --detached` with `stdout` (the ready pipe, or
    /// `/dev/null` after a handoff), the control pipe at [`CONTROL_FD`], and `handoff`'s
    /// descriptors open at the numbers its one argument names. Its stderr is the caller's for
    /// a [`Report`]: always without a handoff (its warnings at start are the caller's to see),
    /// and after a handoff only when that stderr is a terminal and the end's line is wanted
    /// (the wrapper printed the warnings itself).
    fn launch(
        &self,
        session: &str,
        control: OwnedFd,
        handoff: Option<Handoff<BorrowedFd<'_>>>,
        stdout: OwnedFd,
    ) -> Result<(), SpawnError> {
        let mut args = self.args(session);
        // Each descriptor handed over is passed under a number of its own, 10 or above, so
        // that moving stdio and the control pipe (0 to 3) cannot land on one of them.
        let dup = |fd: BorrowedFd<'_>| {
            unix::dup_above(fd, 10).map_err(|source| SpawnError::Pipe {
                what: "handoff",
                source,
            })
        };
        let kept = handoff.map(|h| h.try_map(|fd, _| dup(fd))).transpose()?;
        if let Some(kept) = &kept {
            let value = kept.raw().encode().map_err(SpawnError::NotReady)?;
            args.push("--handoff".into());
            args.push(value.into());
        }
        let caller = || std::io::stderr().as_fd().try_clone_to_owned().ok();
        let stderr = match self.report {
            Some(report) if kept.is_none() => {
                args.push("--report".into());
                if report.quiet {
                    args.push("--quiet".into());
                }
                caller()
            }
            Some(report) if !report.quiet && std::io::stderr().is_terminal() => {
                args.push("--report".into());
                caller()
            }
            _ => None,
        };
        let stderr = match stderr {
            Some(fd) => fd,
            None => null(true).map_err(|source| self.start_error(source))?,
        };
        let stdin = null(false).map_err(|source| self.start_error(source))?;
        // The sources of stdio and of the control pipe too are 10 or above: with a standard
        // descriptor closed when the caller started, one of them could otherwise be 0 to 3
        // and be overwritten by another's move before its own.
        let [stdin, stdout, stderr, control] =
            [stdin, stdout, stderr, control].map(|fd| dup(fd.as_fd()));
        let (stdin, stdout, stderr, control) = (stdin?, stdout?, stderr?, control?);
        let raw: Vec<i32> = kept
            .iter()
            .flat_map(|k| k.each().map(AsRawFd::as_raw_fd))
            .collect();
        unix::spawn_detached(
            &self.binary,
            &args,
            [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()],
            (control.as_raw_fd(), CONTROL_FD),
            &raw,
        )
        .map_err(|source| self.start_error(source))
    }

    /// `[--config F] watch --detached …` for `session`, without its handoff nor its stdio.
    fn args(&self, session: &str) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(config) = &self.config {
            // Absolute: a handed-over sidecar starts in `/`.
            let config = std::path::absolute(config).unwrap_or_else(|_| config.clone());
            args.push("--config".into());
            args.push(config.into());
        }
        for arg in [
            "watch",
            "--control-fd",
            &CONTROL_FD.to_string(),
            "--owner-pid",
            &self.owner.pid.to_string(),
            "--owner-start",
            &self.owner.start_time.to_string(),
            "--session",
            session,
        ] {
            args.push(arg.into());
        }
        for (flag, mode) in [
            ("--docker-proxy", self.docker_proxy),
            ("--cloud-proxy", self.cloud_proxy),
        ] {
            match mode {
                ProxyMode::On => args.push(flag.into()),
                ProxyMode::Auto => args.push(format!("{flag}=auto").into()),
                ProxyMode::Off => {}
            }
        }
        if let Some(grace) = self.grace {
            args.push("--grace".into());
            args.push(format!("{}ms", grace.as_millis()).into());
        }
        for (flag, limit) in [
            ("--max-sandboxes", self.limits.sandboxes),
            ("--max-creates", self.limits.creates),
        ] {
            if let Some(n) = limit {
                args.push(flag.into());
                args.push(n.to_string().into());
            }
        }
        if let Some(lifetime) = self.limits.lifetime {
            args.push("--max-lifetime".into());
            args.push(format!("{}ms", lifetime.as_millis()).into());
        }
        if let Some(spend) = self.limits.spend {
            args.push("--max-spend".into());
            args.push(
                match spend {
                    crate::budget::Spend::Time(d) => format!("{}ms", d.as_millis()),
                    crate::budget::Spend::Cost(c) => format!("${c}"),
                }
                .into(),
            );
        }
        if let Some(on_spend) = self.limits.on_spend {
            args.push("--on-spend".into());
            args.push(
                match on_spend {
                    crate::budget::OnSpend::Refuse => "refuse",
                    crate::budget::OnSpend::Reclaim => "reclaim",
                }
                .into(),
            );
        }
        args.push("--detached".into());
        // It starts in `/`: its `.env` files are the caller's directory's, as the caller's.
        if let Ok(dir) = std::env::current_dir() {
            args.push("--dotenv-dir".into());
            args.push(dir.into());
        }
        args
    }

    fn start_error(&self, source: std::io::Error) -> SpawnError {
        SpawnError::Start {
            binary: self.binary.display().to_string(),
            source,
        }
    }
}

/// `/dev/null`, for reading or for writing.
fn null(write: bool) -> std::io::Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .open("/dev/null")
        .map(OwnedFd::from)
}

/// The first line the sidecar writes, waited for at most [`READY_TIMEOUT`].
fn read_ready(ready: &OwnedFd) -> Result<String, SpawnError> {
    read_line(ready, READY_TIMEOUT)
        .map_err(SpawnError::Read)?
        .ok_or(SpawnError::Timeout)
}

/// One line the sidecar writes on its stdout (`""` at EOF), without its `\n`; `None` when
/// none came within `timeout`. Also read by the Rust guard for the word after `bye`.
pub(super) fn read_line(fd: &OwnedFd, timeout: Duration) -> std::io::Result<Option<String>> {
    let deadline = Instant::now() + timeout;
    let mut file = std::fs::File::from(fd.try_clone()?);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 256];
    while !buf.contains(&b'\n') && buf.len() <= 4096 {
        let left = deadline.saturating_duration_since(Instant::now());
        if !unix::wait_readable(file.as_fd(), left)? {
            return Ok(None);
        }
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(Some(text.lines().next().unwrap_or("").to_string()))
}
