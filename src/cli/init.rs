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
//!    lock on its journal is free), and exits with CMD's status (128+N for a death by signal
//!    N), so the reclaim is never cut short by the namespace's end.
//!
//! What cannot be helped: a container SIGKILLed as a whole (`docker kill`, or `docker stop`
//! after its timeout, an OOM kill of the whole cgroup) takes the sidecar with it. Its
//! sandboxes are then left to `sandguard sweep` elsewhere and to their TTLs.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::time::Duration;

use super::run::{exec, own_failure, start_sidecar, Args};
use super::{Error, Exit};
use crate::config::Settings;
use crate::identity::Identity;
use crate::ledger::StateDir;
use crate::protocol::ReadyLine;
use crate::unix::{self, ExitStatus, Forked, InitSignals};

/// How often pid 1 looks at the sidecar's lock once CMD has ended.
const POLL: Duration = Duration::from_millis(50);

pub(super) fn run(args: Args, settings: &Settings) -> Result<Exit, Error> {
    let pipes = unix::pipe().and_then(|go| Ok((go, unix::pipe()?)));
    let ((go_r, go_w), control) =
        pipes.map_err(|e| own_failure(format!("cannot make a pipe: {e}")))?;
    match unix::fork_single_threaded() {
        Err(e) => Err(own_failure(format!("cannot fork: {e}"))),
        Ok(Forked::Child) => {
            drop(go_w);
            drop(control.0);
            // The child returns through `main` like any command: its code is CMD's exec
            // failure (it has no other way back).
            child(&args, settings, go_r, control.1)
        }
        Ok(Forked::Parent(pid)) => {
            drop(go_r);
            parent(&args, settings, pid, go_w, control)
        }
    }
}

/// CMD's side: a process group of its own, then wait for the sidecar's `ready` line, passed on
/// by pid 1 as the sidecar wrote it, then exec. Nothing (EOF) means the sidecar did not start,
/// and pid 1 has said so: exit 125 without a word more.
fn child(args: &Args, settings: &Settings, go: OwnedFd, control: OwnedFd) -> Result<Exit, Error> {
    unix::own_process_group(0);
    let mut message = String::new();
    if std::fs::File::from(go)
        .read_to_string(&mut message)
        .is_err()
    {
        return Ok(Exit::OwnFailure);
    }
    let ReadyLine::Ready { session, env } = ReadyLine::parse(&message) else {
        return Ok(Exit::OwnFailure);
    };
    let me = Identity::current()
        .ok_or_else(|| own_failure("cannot read this process's identity from /proc"))?;
    Err(exec(
        &args.command,
        (&session, &env),
        &control,
        &me,
        settings,
    ))
}

fn parent(
    args: &Args,
    settings: &Settings,
    pid: u32,
    go: OwnedFd,
    control: (OwnedFd, OwnedFd),
) -> Result<Exit, Error> {
    unix::own_process_group(pid);
    let mut signals = match InitSignals::take_over() {
        Ok(s) => s,
        Err(e) => {
            unix::send_signal(pid, libc::SIGKILL);
            return Err(own_failure(format!(
                "cannot take over signals as pid 1: {e}"
            )));
        }
    };
    unix::give_terminal_to(pid);
    let ready = Identity::of_pid(pid)
        .ok_or_else(|| own_failure("cannot read the program's identity from /proc"))
        .and_then(|owner| start_sidecar(args, settings, &owner, Some(control)));
    let ready = match ready {
        Ok(r) => r,
        Err(e) => {
            drop(go);
            let _ = wait_for(&mut signals, pid, None);
            return Err(e);
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
    Ok(Exit::Wrapped(
        match wait_for(&mut signals, pid, journal.as_deref()) {
            ExitStatus::Code(c) => u8::try_from(c).unwrap_or(1),
            ExitStatus::Signal(n) => 128u8.saturating_add(n as u8),
        },
    ))
}

/// Forwards signals to `pid` and reaps orphans until it has ended and the sidecar that
/// journals in `journal` has let go of its lock.
fn wait_for(signals: &mut InitSignals, pid: u32, journal: Option<&std::path::Path>) -> ExitStatus {
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
fn sidecar_done(journal: &std::path::Path) -> bool {
    match std::fs::File::open(journal) {
        Ok(f) => unix::try_lock_shared(&f).unwrap_or(true),
        Err(_) => true,
    }
}
