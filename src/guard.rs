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
//! [`Guard::start`] spawns `sandguard watch --daemonize` for this process (its own session, stdio
//! away from the terminal, the control pipe's read end at descriptor 3, this process's identity
//! pinned with `--owner-start`), waits for `ready SESSION`, and keeps the write end. If the
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
use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::identity::Identity;
use crate::protocol::{self, Target};

/// Why a guard could not start or a line could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("cannot read this process's identity from /proc")]
    Identity,
    #[error("cannot start the sidecar {binary}: {source}")]
    Spawn {
        binary: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sidecar failed to start: {0}")]
    NotReady(String),
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
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("sandguard"));
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
        let spawn_err = |source| GuardError::Spawn {
            binary: self.binary.display().to_string(),
            source,
        };
        let (control_r, control_w) = crate::unix::pipe().map_err(spawn_err)?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(["watch", "--daemonize", "--control-fd", "3"])
            .args([
                "--owner-pid",
                &me.pid.to_string(),
                "--owner-start",
                &me.start_time.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(g) = self.grace {
            cmd.args(["--grace", &format!("{}ms", g.as_millis())]);
        }
        let mut child = crate::unix::spawn_in_new_session(&mut cmd, control_r.as_raw_fd(), 3)
            .map_err(spawn_err)?;
        drop(control_r);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| GuardError::NotReady("no stdout".into()))?;
        // The sidecar forks away at once; reap the intermediate so it leaves no zombie.
        let _ = child.wait();
        let session = read_ready(stdout)?;
        let labels = crate::session::labels(&session, &me);
        let control = Arc::new(Mutex::new(std::fs::File::from(control_w)));
        let heartbeat = self
            .heartbeat
            .map(|every| Heartbeat::start(control.clone(), every));
        Ok(Guard {
            session,
            labels,
            control,
            heartbeat,
        })
    }
}

fn read_ready(stdout: std::process::ChildStdout) -> Result<String, GuardError> {
    let (tx, rx) = mpsc::channel();
    // A thread, so a sidecar that never answers cannot block us past the timeout.
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(crate::session::READY_TIMEOUT)
        .map_err(|_| GuardError::NotReady("no answer within 10 s".into()))?;
    let line = line.trim();
    match (line.strip_prefix("ready "), line.strip_prefix("error ")) {
        // Later words (the Docker proxy's address) are for the wrapper.
        (Some(rest), _) => Ok(rest.split_whitespace().next().unwrap_or("").to_string()),
        (_, Some(reason)) => Err(GuardError::NotReady(reason.to_string())),
        _ if line.is_empty() => Err(GuardError::NotReady(
            "the sidecar exited before it was ready".into(),
        )),
        _ => Err(GuardError::NotReady(format!("unexpected answer {line:?}"))),
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
    let file = control.lock().unwrap_or_else(|e| e.into_inner());
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
