//! Becoming a sidecar process: what `sandguard watch` does before anything else, so that the
//! process outlives its spawner and holds nothing of it.
//!
//! - `--daemonize` (the SDKs' way) forks once: the parent returns at once (its caller, the
//!   SDK, waits for `ready` on the pipe, not for this process) and the child goes on; the
//!   fork happens while the process is still single-threaded (`unix::fork_single_threaded`).
//! - `--detached` (the wrapper's way, `crate::session::spawn`) was made nobody's child by its
//!   spawner already: no fork.
//! - Either then closes every descriptor but stdin, stdout (the ready line), stderr and those
//!   it was handed (the control pipe, the terminal it reports to, the hand-over's listeners
//!   and journal), so a parent waiting for EOF on a pipe the wrapper had does not wait for
//!   the reclaim, and moves to `/`, so its working directory keeps no filesystem busy.
//! - SIGINT and SIGHUP are ignored in every case: Ctrl-C and a closed terminal are the
//!   owner's, not the sidecar's (it must outlive them to reclaim).

use super::start::StartError;
use crate::unix::{self, Forked};

/// Which side of [`daemonize`] this process is on.
pub(crate) enum Became {
    /// The parent of a `--daemonize` fork: its work is done.
    Parent,
    /// The sidecar.
    Sidecar,
}

/// Forks when `fork`, then (in the sidecar) closes every descriptor but `keep` and moves to
/// `/` (module docs).
pub(crate) fn daemonize(fork: bool, keep: &[i32]) -> Result<Became, StartError> {
    if fork {
        match unix::fork_single_threaded() {
            Ok(Forked::Parent(_)) => return Ok(Became::Parent),
            Ok(Forked::Child) => {}
            Err(e) => return Err(StartError::Failed(format!("cannot fork: {e}"))),
        }
    }
    unix::close_descriptors_except(keep);
    std::env::set_current_dir("/")
        .map_err(|e| StartError::Failed(format!("cannot change to /: {e}")))?;
    Ok(Became::Sidecar)
}

/// Ignores SIGINT and SIGHUP (module docs).
pub(crate) fn ignore_terminal_signals() -> Result<(), StartError> {
    for signal in [libc::SIGINT, libc::SIGHUP] {
        unix::ignore_signal(signal)
            .map_err(|e| StartError::Failed(format!("cannot ignore signal {signal}: {e}")))?;
    }
    Ok(())
}
