//! The Rust SDK helper: guard the current process from inside it.
//!
//! ```no_run
//! let guard = sandguard::Guard::start()?;
//! // Stamp `guard.labels()` on everything you create (Docker `--label k=v`, E2B metadata, …),
//! // and claim what cannot carry labels:
//! guard.claim("docker", "3f2a…")?;
//! // `close` (or dropping the guard) says `bye`: what is still owned is reclaimed now.
//! let outcome = guard.close()?;
//! if !outcome.is_clean() {
//!     eprintln!("left behind: {outcome}"); // the session is pending; `sandguard sweep` retries
//! }
//! # Ok::<(), sandguard::GuardError>(())
//! ```
//!
//! [`Guard::start`] starts the sidecar for this process through the one spawn builder
//! ([`super::spawn::Spawn`], the same as the wrapper's), and keeps the control pipe's write end. If the
//! process dies in any way, the pipe closes and the sidecar's pidfd fires: the sidecar
//! reclaims. While the guard lives a thread sends `renew` every 5 s (the lease); dropping the
//! guard stops it and sends `bye`.
//!
//! **The end.** [`Guard::close`] says `bye` and waits (at most [`GuardBuilder::wait`], 30 s by
//! default) for the sidecar's word on the reclaim of what was still owned
//! ([`ByeOutcome`]: clean, or what was left), which it returns. It does not wait for the
//! sidecar's settle pass: that runs after the program has gone, and what it finds is
//! reclaimed and journaled, not reported. Dropping the guard does the same and, having no
//! one to return it to, logs what was left through `tracing::warn!` (decision: a drop never
//! panics; a program that must act on the outcome calls `close`).
//!
//! Once the sidecar is gone (it ended the session, or was killed), every call returns
//! [`GuardError::SidecarGone`] and the heartbeat thread stops quietly. No write to the pipe
//! ever raises SIGPIPE, even in a program whose SIGPIPE disposition is the default.
//!
//! The binary is `$SANDGUARD_BIN`, else `sandguard` on `PATH` ([`GuardBuilder::binary`]
//! overrides both).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::spawn::{Spawn, SpawnError};
use crate::identity::Identity;
use crate::protocol::{self, ByeOutcome, Target};

/// Why a guard could not start or a line could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("cannot read this process's identity from /proc")]
    Identity,
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("invalid claim: {0}")]
    Invalid(#[from] protocol::ProtocolError),
    /// The control pipe has no reader (`EPIPE`): the sidecar died or already ended the
    /// session. Never a SIGPIPE: see `crate::unix::write_without_sigpipe`.
    #[error("the session's sidecar is gone; nothing was recorded")]
    SidecarGone,
    /// A claim, release or detach was not confirmed (`super::confirm`).
    #[error(transparent)]
    Confirm(#[from] super::confirm::ConfirmError),
    /// The settings the sidecar uses cannot be resolved (where its journal is).
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot write to the sidecar: {0}")]
    Write(#[source] std::io::Error),
    /// After `bye` the sidecar did not say how the reclaim went: it was gone, it said
    /// something else, or the wait timed out. Its session's journal still says.
    #[error("the sidecar did not say how bye went: {0}")]
    NoOutcome(String),
}

/// Options for [`Guard`].
#[derive(Debug, Clone)]
pub struct GuardBuilder {
    binary: PathBuf,
    grace: Option<Duration>,
    heartbeat: Option<Duration>,
    wait: Duration,
    limits: crate::budget::Limits,
}

/// How long [`Guard::close`] (or the drop) waits for the sidecar's word after `bye`, by default.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

impl Default for GuardBuilder {
    fn default() -> Self {
        let binary = std::env::var_os("SANDGUARD_BIN")
            .map_or_else(|| PathBuf::from("sandguard"), PathBuf::from);
        GuardBuilder {
            binary,
            grace: None,
            heartbeat: Some(Duration::from_secs(5)),
            wait: WAIT,
            limits: Default::default(),
        }
    }
}

impl GuardBuilder {
    /// The `sandguard` binary to run.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = path.into();
        self
    }
    /// The lease grace (default: the config's, 10 minutes).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }
    /// Heartbeat interval; `None` sends none (the owner is then judged by its process only).
    pub fn heartbeat(mut self, every: Option<Duration>) -> Self {
        self.heartbeat = every;
        self
    }

    /// How long closing waits for the sidecar's word on the reclaim (default `WAIT`).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The session's limits (`[limits]`, the CLI's `--max-*`). A `Guard` serves no proxy, so
    /// nothing is refused at create: `lifetime` is kept (the guard's own sandboxes removed
    /// at that age while the process runs), and `sandboxes` and `creates` are observed on
    /// its claims, the sidecar logging (once each) a count that goes over.
    pub fn limits(mut self, limits: crate::budget::Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn start(self) -> Result<Guard, GuardError> {
        let me = Identity::current().ok_or(GuardError::Identity)?;
        // Where the sidecar will journal, resolved as it resolves it (no `--config`: the
        // environment's and the default file's settings), for the confirmations.
        let env = crate::config::dotenv::WithDotenv::here(&crate::config::ProcessEnv);
        let state = crate::config::Settings::resolve(&Default::default(), &env)?.state_dir;
        let ready = Spawn {
            binary: self.binary,
            config: None,
            session: None,
            owner: me.clone(),
            grace: self.grace,
            limits: self.limits,
            docker_proxy: crate::config::ProxyMode::Off,
            cloud_proxy: crate::config::ProxyMode::Off,
            report: None,
        }
        .start()?;
        let labels = crate::session::labels(&ready.session, &me);
        let journal = crate::ledger::StateDir::open(&state)
            .and_then(|s| s.journal_file(&ready.session))
            .map_err(|e| {
                GuardError::NoOutcome(format!("cannot find the session's journal: {e}"))
            })?;
        let control = Arc::new(Mutex::new(std::fs::File::from(ready.control)));
        let heartbeat = self
            .heartbeat
            .map(|every| Heartbeat::start(control.clone(), every));
        Ok(Guard {
            session: ready.session,
            labels,
            journal,
            control,
            heartbeat,
            stdout: Some(ready.stdout),
            wait: self.wait,
        })
    }
}

/// A guarded session for the current process. [`Guard::close`] (or dropping it) says `bye`.
pub struct Guard {
    session: String,
    labels: BTreeMap<String, String>,
    /// The session's journal, where claims are confirmed.
    journal: std::path::PathBuf,
    control: Arc<Mutex<std::fs::File>>,
    heartbeat: Option<Heartbeat>,
    /// The sidecar's stdout, for its word after `bye`; `None` once closed.
    stdout: Option<OwnedFd>,
    wait: Duration,
}

impl Guard {
    /// Starts a sidecar for this process with the default options.
    pub fn start() -> Result<Guard, GuardError> {
        GuardBuilder::default().start()
    }

    pub fn builder() -> GuardBuilder {
        GuardBuilder::default()
    }

    pub fn session(&self) -> &str {
        &self.session
    }

    /// The labels to stamp on every sandbox this process creates.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// The labels as `docker run` arguments: `--label k=v …`.
    pub fn docker_label_args(&self) -> Vec<String> {
        self.labels
            .iter()
            .flat_map(|(k, v)| ["--label".to_string(), format!("{k}={v}")])
            .collect()
    }

    /// This sandbox is ours (for sandboxes that cannot carry labels). Returns once the
    /// sidecar has journaled it, as `sandguard claim` does (`super::confirm`); a refusal is
    /// an error with the sidecar's reason.
    pub fn claim(&self, provider: &str, id: &str) -> Result<(), GuardError> {
        self.confirmed(&protocol::Command::Claim(Target::new(provider, id)?))
    }

    /// We removed it ourselves; forget it (confirmed, as [`Guard::claim`]).
    pub fn release(&self, provider: &str, id: &str) -> Result<(), GuardError> {
        self.confirmed(&protocol::Command::Release(Target::new(provider, id)?))
    }

    /// It should outlive us (its TTL still applies; confirmed, as [`Guard::claim`]).
    pub fn detach(&self, provider: &str, id: &str) -> Result<(), GuardError> {
        self.confirmed(&protocol::Command::Detach(Target::new(provider, id)?))
    }

    fn confirmed(&self, command: &protocol::Command) -> Result<(), GuardError> {
        let file = self
            .control
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        super::confirm::send(file.as_fd(), &self.journal, command).map_err(|e| match e {
            super::confirm::ConfirmError::Gone => GuardError::SidecarGone,
            other => GuardError::Confirm(other),
        })
    }

    /// Says `bye` and returns the sidecar's word on the reclaim of what was still owned:
    /// see the module docs.
    pub fn close(mut self) -> Result<ByeOutcome, GuardError> {
        self.bye()
    }

    fn bye(&mut self) -> Result<ByeOutcome, GuardError> {
        if let Some(h) = self.heartbeat.take() {
            h.stop();
        }
        let stdout = self
            .stdout
            .take()
            .ok_or_else(|| GuardError::NoOutcome("the guard is closed".into()))?;
        self.send(&protocol::Command::Bye)?;
        let line = super::spawn::read_line(&stdout, self.wait)
            .map_err(|e| GuardError::NoOutcome(e.to_string()))?
            .ok_or_else(|| GuardError::NoOutcome(format!("no word within {:?}", self.wait)))?;
        ByeOutcome::parse(&line).ok_or_else(|| {
            GuardError::NoOutcome(match line.is_empty() {
                true => "it exited without a word".into(),
                false => format!("it said \"{}\"", protocol::echo(line.as_bytes())),
            })
        })
    }

    fn send(&self, command: &protocol::Command) -> Result<(), GuardError> {
        send_line(&self.control, &command.to_line()).map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => GuardError::SidecarGone,
            _ => GuardError::Write(e),
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.stdout.is_none() {
            return; // closed
        }
        match self.bye() {
            Ok(ByeOutcome::Clean) => {}
            Ok(left) => tracing::warn!(
                "session {}: after bye, {left} (the session is pending; `sandguard sweep` retries)",
                self.session
            ),
            Err(e) => tracing::warn!("session {}: {e}", self.session),
        }
    }
}

/// One line in one write: atomic on a pipe (lines are far below PIPE_BUF). A sidecar that is
/// gone makes this `BrokenPipe`, never a SIGPIPE, even where SIGPIPE's disposition is the
/// default (decision: a library must not kill its host program for a closed pipe).
fn send_line(control: &Mutex<std::fs::File>, line: &str) -> std::io::Result<()> {
    let file = control
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    crate::unix::write_without_sigpipe(file.as_fd(), line.as_bytes())
}

/// The thread that sends `renew`; stopped (and joined) by [`Heartbeat::stop`].
struct Heartbeat {
    stop: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Heartbeat {
    fn start(control: Arc<Mutex<std::fs::File>>, every: Duration) -> Heartbeat {
        let (stop, stopped) = mpsc::channel::<()>();
        let line = protocol::Command::Renew.to_line();
        let thread = std::thread::spawn(move || {
            let _ = send_line(&control, &line);
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                if send_line(&control, &line).is_err() {
                    return;
                }
            }
        });
        Heartbeat { stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}
