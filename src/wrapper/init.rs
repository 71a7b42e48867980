//! The wrapper as pid 1 of its pid namespace (a container's entrypoint, `unshare -p`).
//!
//! When pid 1 exits, the kernel kills every process in its namespace, the sidecar included:
//! an `exec` into CMD would take the sidecar down with CMD, before it could reclaim. So as pid
//! 1 the wrapper stays, like tini:
//!
//! 1. CMD is forked first, in a process group of its own (the terminal's foreground group when
//!    there is one, so a Ctrl-C reaches CMD, not its init), and waits on a pipe.
//! 2. The sidecar is started for CMD's identity (CMD is the session's owner, not pid 1); once
//!    it is ready, CMD is told the session and execs, with the control pipe at
//!    `SANDGUARD_FD` as under the ordinary wrapper.
//! 3. pid 1 then forwards every signal it gets to CMD (`docker stop`'s SIGTERM included), and
//!    reaps every orphan that the namespace hands it. The signals are caught from before the
//!    sidecar starts, through signal-hook ([`unix::InitSignals`], which says what catching
//!    rather than blocking them changes), and waited for with a timeout that lets the loop
//!    look at the sidecar's lock.
//! 4. When CMD has ended, it waits until the sidecar has finished reclaiming (the sidecar's
//!    lock on its journal is free), and returns CMD's status (128+N for a death by signal N)
//!    for the process to exit with, so the reclaim is never cut short by the namespace's end.
//!
//! What cannot be helped: a container SIGKILLed as a whole (`docker kill`, or `docker stop`
//! after its timeout, an OOM kill of the whole cgroup) takes the sidecar with it. Its
//! sandboxes are then left to `sandguard sweep` elsewhere and to their TTLs.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use super::{exec, sidecar, Failure, Wrap, WrapError, Wrapped};
use crate::config::Settings;
use crate::identity::Identity;
use crate::ledger::StateDir;
use crate::protocol::ReadyLine;
use crate::unix::{self, ExitStatus, Forked, InitSignals};

/// How often pid 1 looks at the sidecar's lock once CMD has ended.
const POLL: Duration = Duration::from_millis(50);

/// Runs `wrap.command` as pid 1's child (module docs). Returns in both processes: in pid 1
/// when CMD has ended and the sidecar has finished; in CMD's process only when its exec
/// failed or the sidecar never became ready.
pub(super) fn run(wrap: &Wrap, settings: &Settings) -> Result<Wrapped, WrapError> {
    let pipes = unix::pipe().and_then(|go| Ok((go, unix::pipe()?)));
    let ((go_r, go_w), control) = pipes.map_err(Failure::Pipe)?;
    match unix::fork_single_threaded() {
        Err(e) => Err(Failure::Fork(e).into()),
        Ok(Forked::Child) => {
            drop(go_w);
            drop(control.0);
            // The child returns through the caller to `main` like any command: its code is
            // CMD's exec failure (it has no other way back).
            child(wrap, settings, go_r, control.1)
        }
        Ok(Forked::Parent(pid)) => {
            drop(go_r);
            parent(wrap, settings, pid, go_w, control)
        }
    }
}

/// CMD's side: a process group of its own, then wait for the sidecar's `ready` line, passed on
/// by pid 1 as the sidecar wrote it, then exec. Nothing (EOF) means the sidecar did not start,
/// and pid 1 has said so: [`Wrapped::Abandoned`].
fn child(
    wrap: &Wrap,
    settings: &Settings,
    go: OwnedFd,
    control: OwnedFd,
) -> Result<Wrapped, WrapError> {
    unix::own_process_group(0);
    let mut message = String::new();
    if std::fs::File::from(go)
        .read_to_string(&mut message)
        .is_err()
    {
        return Ok(Wrapped::Abandoned);
    }
    let ReadyLine::Ready { session, env } = ReadyLine::parse(&message) else {
        return Ok(Wrapped::Abandoned);
    };
    let me = Identity::current().ok_or(Failure::OwnIdentity)?;
    Err(exec(
        &wrap.command,
        (&session, &env),
        &control,
        &me,
        settings,
    ))
}

fn parent(
    wrap: &Wrap,
    settings: &Settings,
    pid: u32,
    go: OwnedFd,
    control: (OwnedFd, OwnedFd),
) -> Result<Wrapped, WrapError> {
    unix::own_process_group(pid);
    let mut signals = match InitSignals::take_over() {
        Ok(s) => s,
        Err(e) => {
            unix::send_signal(pid, libc::SIGKILL);
            return Err(Failure::Signals(e).into());
        }
    };
    unix::give_terminal_to(pid);
    let ready = Identity::of_pid(pid)
        .ok_or(Failure::ProgramIdentity)
        .and_then(|owner| sidecar(wrap, settings, &owner))
        .and_then(|spawn| spawn.start_on(control).map_err(Failure::Spawn));
    let ready = match ready {
        Ok(r) => r,
        Err(e) => {
            drop(go);
            let _ = wait_for(&mut signals, pid, None);
            return Err(e.into());
        }
    };
    let message = ReadyLine::Ready {
        session: ready.session.clone(),
        env: ready.env.clone(),
    };
    let message = format!("{message}\n");
    let _ = std::fs::File::from(go).write_all(message.as_bytes());
    let journal = StateDir::open(&settings.state_dir)
        .and_then(|s| s.journal_file(&ready.session))
        .ok();
    // Only CMD (and what it starts) may hold the pipe's write end: its EOF is a wake-up.
    drop(ready.control);
    Ok(Wrapped::Ended(
        match wait_for(&mut signals, pid, journal.as_deref()) {
            ExitStatus::Code(c) => u8::try_from(c).unwrap_or(1),
            ExitStatus::Signal(n) => 128u8.saturating_add(n as u8),
        },
    ))
}

/// Forwards signals to `pid` and reaps orphans until it has ended and the sidecar that
/// journals in `journal` has let go of its lock.
fn wait_for(signals: &mut InitSignals, pid: u32, journal: Option<&Path>) -> ExitStatus {
    let mut status = None;
    loop {
        for signal in signals.wait(POLL) {
            if signal != libc::SIGCHLD && status.is_none() {
                unix::send_signal(pid, signal);
            }
        }
        for (reaped, how) in unix::reap_children() {
            if reaped == pid {
                status = Some(how);
            }
        }
        if let Some(how) = status {
            if journal.is_none_or(sidecar_done) {
                return how;
            }
        }
    }
}

/// Whether nobody holds the journal's exclusive lock any more (the sidecar has exited).
fn sidecar_done(journal: &Path) -> bool {
    match std::fs::File::open(journal) {
        Ok(f) => unix::try_lock_shared(&f).unwrap_or(true),
        Err(_) => true,
    }
}
