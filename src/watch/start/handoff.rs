//! What the wrapper makes itself before it execs the program, so that the program starts
//! without waiting for its sidecar (issue 25: `sandguard -- CMD` within 2× of `tini`).
//!
//! A sidecar an SDK starts says `ready` once its session's journal is on disk and its
//! proxies listen, and the SDK waits for that line. The wrapper cannot afford the wait: a
//! second start of the binary, its runtime, two disk flushes and the plugin scan took 5–6 ms
//! before the program could run. So the wrapper does the part the program depends on, and
//! hands it over ([`prepare`], then `crate::session::spawn::Spawn::start_handed` with the one
//! typed value `crate::session::handoff::Handoff`):
//!
//! - **The journal**, created under the session's name with its `start` record, its lock
//!   held, written but not synced ([`crate::ledger::StateDir::create_session_unsynced`]):
//!   `sessions`, sweeps and `sandguard claim` find the session at once, and no other process
//!   can take it. The sidecar syncs it before anything else.
//! - **The proxies' listeners**, decided, warned about and bound as a sidecar would
//!   ([`super::proxies::bind`]): the program's variables point at them, and a connection it
//!   makes before the sidecar serves waits in the listen backlog.
//! - Warnings go to the wrapper's stderr directly, before the program's first word.
//!
//! Decisions:
//! - What fails here is the wrapper's failure (exit 125, the program not run), the journal and
//!   the proxy directory taken back ([`Handoff::abandon`]). What fails in the sidecar after the
//!   program started is logged beside the journal; the session is left as it stands, and a
//!   sweep judges its owner like any whose sidecar is gone (unknown is not dead).
//! - The sidecar starts in `/` (it must never hold the user's directory), and is told the
//!   wrapper's directory for the `.env` files its settings read (`watch --dotenv-dir`), so
//!   both find the same credentials.
//! - The owner is this process, and it hands the sidecar an exit watch of itself
//!   (`crate::unix::watch_self`, a pidfd on Linux): the sidecar watches that very process (an
//!   owner that exited before the sidecar watches is an exit, reclaimed at once, its status
//!   still readable after its parent reaped it). Where there is none (a kernel without
//!   pidfds; macOS, whose kqueues cannot be handed over) the sidecar opens its own watch on the
//!   pid and judges the start time, as always.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::session::handoff::Handoff;

use super::proxies::{self, Bound};
use super::Failure;
use crate::config::{ProxyMode, Settings};
use crate::identity::Identity;
use crate::ledger::{Journal, Record, StateDir};
use crate::session;

/// A new session made by the wrapper, not yet handed to a sidecar.
pub(crate) struct Made {
    pub session: String,
    journal: Journal,
    bound: Bound,
    /// An exit watch of this process (the owner), so the sidecar watches the very process
    /// that handed over and can read how it exited even once its parent reaped it (`None`
    /// where the platform has none to hand: the sidecar judges the pid and start time then).
    owner_exit: Option<OwnedFd>,
}

/// Creates the session's journal and binds its proxies (see the module docs); `warn` hears
/// each warning.
pub(crate) fn prepare(
    settings: &Settings,
    owner: &Identity,
    grace: std::time::Duration,
    modes: (ProxyMode, ProxyMode),
    warn: &mut dyn FnMut(&str),
) -> Result<Made, Failure> {
    let session = session::new_id().map_err(Failure::SessionId)?;
    let state = StateDir::open(&settings.state_dir)?;
    let start = Record::Start {
        owner: owner.to_label(),
        pid: owner.pid,
        grace_ms: grace.as_millis() as u64,
        labels: session::labels(&session, owner),
    };
    let journal = state.create_session_unsynced(&session, start)?;
    // The Docker daemon is looked at even with its proxy off: the wrapper's user hears.
    match proxies::bind(settings, modes, (&session, journal.path()), true, warn) {
        Ok(bound) => Ok(Made {
            session,
            journal,
            bound,
            owner_exit: crate::unix::watch_self(),
        }),
        Err(e) => {
            super::begin::take_back(journal.path());
            Err(e.into())
        }
    }
}

impl Made {
    /// What the program gets from the proxies (`DOCKER_HOST`, …).
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        self.bound.env()
    }

    /// What to hand over, lent: the journal, the owner's exit watch, the proxies'
    /// listeners.
    pub(crate) fn handoff(&self) -> Handoff<BorrowedFd<'_>> {
        Handoff {
            journal: self.journal.file().as_fd(),
            docker: self
                .bound
                .docker
                .as_ref()
                .map(|d| (d.listener.as_fd(), d.dir.socket().to_path_buf())),
            cloud: self
                .bound
                .cloud
                .iter()
                .map(|c| (c.api, c.listener.as_fd()))
                .collect(),
            owner_exit: self.owner_exit.as_ref().map(AsFd::as_fd),
        }
    }

    /// The sidecar has it all: this process's copies are closed (the journal's lock stays
    /// with the sidecar's, the same open file) and the proxy directory is left to the
    /// sidecar to remove.
    pub(crate) fn handed(self) {
        let Made { journal, bound, .. } = self;
        drop(journal);
        if let Some(docker) = bound.docker {
            std::mem::forget(docker.dir);
        }
    }

    /// No sidecar took it: the journal and the proxy directory are removed (nobody was told
    /// the session's labels).
    pub(crate) fn abandon(self) {
        super::begin::take_back(self.journal.path());
        drop(self.bound);
    }
}
