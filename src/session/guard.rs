//! The Rust SDK helper: guard the current process from inside it.
//!
//! ```no_run
//! let guard = sandguard::Guard::start()?;
//! // Stamp `guard.labels()` on everything you create (Docker `--label k=v`, E2B metadata, …),
//! // and claim what cannot carry labels:
//! guard.claim("docker", "3f2a…")?;
//! // Dropping the guard says `bye`: what is still owned is reclaimed now, the session ends clean.
//! # Ok::<(), sandguard::guard::GuardError>(())
//! ```
//!
//! [`Guard::start`] starts the sidecar for this process through the one spawn builder
//! ([`super::spawn::Spawn`], the same as the wrapper's), and keeps the control pipe's write end. If the
//! process dies in any way, the pipe closes and the sidecar's pidfd fires: the sidecar
//! reclaims. While the guard lives a thread sends `renew` every 5 s (the lease); dropping the
//! guard stops it and sends `bye`.
//!
//! Once the sidecar is gone (it ended the session, or was killed), every call returns
//! [`GuardError::SidecarGone`] and the heartbeat thread stops quietly. No write to the pipe
//! ever raises SIGPIPE, even in a program whose SIGPIPE disposition is the default.
//!
//! The binary is `$SANDGUARD_BIN`, else `sandguard` on `PATH` ([`GuardBuilder::binary`]
//! overrides both).

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::spawn::{Spawn, SpawnError};
use crate::identity::Identity;
use crate::protocol::{self, Target};

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
    /// session. Never a SIGPIPE: see [`crate::unix::write_without_sigpipe`].
    #[error("the session's sidecar is gone; nothing was recorded")]
    SidecarGone,
    #[error("cannot write to the sidecar: {0}")]
    Write(#[source] std::io::Error),
}

/// Options for [`Guard`].
#[derive(Debug, Clone)]
pub struct GuardBuilder {
    binary: PathBuf,
    grace: Option<Duration>,
    heartbeat: Option<Duration>,
}

impl Default for GuardBuilder {
    fn default() -> Self {
        let binary = std::env::var_os("SANDGUARD_BIN")
            .map_or_else(|| PathBuf::from("sandguard"), PathBuf::from);
        GuardBuilder {
            binary,
            grace: None,
            heartbeat: Some(Duration::from_secs(5)),
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

    pub fn start(self) -> Result<Guard, GuardError> {
        let me = Identity::current().ok_or(GuardError::Identity)?;
        let ready = Spawn {
            binary: self.binary,
            config: None,
            session: None,
            owner: me.clone(),
            grace: self.grace,
            docker_proxy: false,
            cloud_proxy: false,
        }
        .start()?;
        let labels = crate::session::labels(&ready.session, &me);
        let control = Arc::new(Mutex::new(std::fs::File::from(ready.control)));
        let heartbeat = self
            .heartbeat
            .map(|every| Heartbeat::start(control.clone(), every));
        Ok(Guard {
            session: ready.session,
            labels,
            control,
            heartbeat,
        })
    }
}

/// A guarded session for the current process. Dropping it says `bye`.
pub struct Guard {
    session: String,
    labels: BTreeMap<String, String>,
    control: Arc<Mutex<std::fs::File>>,
    heartbeat: Option<Heartbeat>,
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

    /// This sandbox is ours (for sandboxes that cannot carry labels).
    pub fn claim(&self, provider: &str, id: &str) -> Result<(), GuardError> {
        self.send(&protocol::Command::Claim(Target::new(provider, id)?))
    }

    /// We removed it ourselves; forget it.
    pub fn release(&self, provider: &str, id: &str) -> Result<(), GuardError> {
        self.send(&protocol::Command::Release(Target::new(provider, id)?))
    }

    /// It should outlive us (its TTL still applies).
    pub fn detach(&self, provider: &str, id: &str) -> Result<(), GuardError> {
        self.send(&protocol::Command::Detach(Target::new(provider, id)?))
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
        if let Some(h) = self.heartbeat.take() {
            h.stop();
        }
        let _ = send_line(&self.control, &protocol::Command::Bye.to_line());
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
