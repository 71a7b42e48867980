//! Processes, the same on Linux and macOS: the detached start (its two platform steps in
//! `linux.rs` and `macos.rs`), forking, new sessions and process groups, the terminal's
//! foreground group, reaping, signalling, and probing whether a pid exists.
//!
//! nix for most; rustix for `waitpid` (nix turns the status of a child killed by a realtime
//! signal into `EINVAL`, after the child is reaped, so pid 1 would lose CMD's end). Signals are passed as numbers (what signal-hook hands pid 1); one that
//! nix's `Signal` does not name (a realtime one) is not sent, and no caller sends one.

#![allow(unsafe_code)]

use libc::c_int;
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;
use std::io;
use std::os::fd::{OwnedFd, RawFd};

/// `pid` as nix's `Pid`, for a positive pid that fits.
fn nix_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .map(Pid::from_raw)
}

/// Registers an exit watch ([`super::watch_exit`]) with tokio's reactor so it can be awaited
/// for readability (the owner's exit). Must run inside a tokio runtime.
pub(crate) fn async_exit_watch(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the descriptor stays open and
    // refers to the same pidfd or kqueue for the AsyncFd's whole life, and
    // OwnedFd::as_raw_fd always returns that one descriptor.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// `setsid(2)`: a new session and process group, so the terminal's Ctrl-C and hang-up do
/// not reach the caller. Allocates nothing: a `pre_exec` hook may call it.
pub(crate) fn setsid() -> io::Result<()> {
    nix::unistd::setsid()?;
    Ok(())
}

/// What `fork` returned to this process.
pub(crate) enum Forked {
    /// The parent, with the child's pid.
    Parent(u32),
    Child,
}

/// `fork(2)`. Only for a process that has not started any thread yet (the sidecar forks
/// once at start-up, before its runtime exists, so that it is nobody's child).
pub(crate) fn fork_single_threaded() -> io::Result<Forked> {
    // SAFETY: the caller guarantees no other thread exists, so the child's copy of memory
    // (locks included) is consistent and it may go on running ordinary code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child.as_raw() as u32)),
    }
}

/// Spawns `cmd` (`watch --daemonize …`) as the SDKs in other languages start a sidecar
/// (Python's `start_new_session` with `pass_fds`, Node's `detached` with a descriptor in
/// `stdio`): in a new session, with `control` placed at descriptor `target` and left open
/// across its exec. The crate itself starts sidecars one way only (`crate::session::spawn`);
/// this is kept for the tests and benchmarks that start one as an SDK does.
pub fn spawn_in_new_session(
    cmd: &mut std::process::Command,
    control: RawFd,
    target: RawFd,
) -> io::Result<std::process::Child> {
    use std::os::fd::BorrowedFd;
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec in the child, so it must be
    // async-signal-safe: it calls setsid, fcntl and dup2 and allocates nothing (nix's
    // wrappers are thin, and its errors, like `io::Error::from_raw_os_error`, are plain
    // numbers). `control` is open in the parent for the whole spawn, hence in the child; and
    // no safe dup2 exists onto a descriptor number that nothing owns yet.
    unsafe {
        cmd.pre_exec(move || {
            setsid()?;
            if control == target {
                // dup2 onto itself keeps FD_CLOEXEC: clear it by hand.
                super::set_cloexec(BorrowedFd::borrow_raw(target), false)?;
            } else {
                Errno::result(libc::dup2(control, target))?;
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// What the process between ([`spawn_detached`]) does, all prepared before it exists.
struct Detach {
    path: std::ffi::CString,
    argv: Vec<*const libc::c_char>,
    stdio: [RawFd; 3],
    control: (RawFd, RawFd),
    keep: Vec<RawFd>,
    root: std::ffi::CString,
}

/// Starts `program` with `args` detached, and waits only for the process between: that one
/// (on Linux it shares this process's memory, `clone(CLONE_VM | CLONE_VFORK)`, as glibc's
/// posix_spawn does: no copy of the address space to make, none to tear down; on macOS a
/// `fork` of this single-threaded process) makes a new session (`setsid`),
/// puts `stdio` at 0 to 2 and `control.0` at `control.1`, leaves `keep` open across exec
/// (their close-on-exec flag cleared in it only) and moves to `/`; then starts the last
/// process (Linux: a raw fork that execs; macOS: `posix_spawn`), which runs `program` with
/// this process's environment, and exits. This process resumes when it has exited and reaps
/// it, so the sidecar is nobody's child and the caller, about to exec the guarded program,
/// inherits none.
///
/// Signals: every one is blocked in the calling thread while the process between exists, so
/// no handler of this process (pid 1's, a library user's) ever runs in a process that shares
/// its memory; the program starts with every signal unblocked, SIGPIPE at its default (as
/// std's spawn does) and every caught signal back at its default (`reset_signals`, as
/// glibc's posix_spawn does), set where the memory is no longer shared. So this is also sound
/// for a caller with other threads (the Rust guard in someone's program, pid 1): the process
/// between only makes system calls on what was prepared here, and on macOS, where it is a
/// `fork` of such a caller, the same holds (no lock, no allocation in it).
///
/// Unlike std's spawn, nothing waits for the exec: the wrapper's program starts while the
/// sidecar's binary is still loading. A failed exec ends the last process with status 127
/// unseen; `program` is this very binary (`current_exe`), checked executable just before.
pub fn spawn_detached(
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    stdio: [RawFd; 3],
    control: (RawFd, RawFd),
    keep: &[RawFd],
) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &std::ffi::OsStr| {
        CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let path = c(program.as_os_str())?;
    let mut argv_owned = vec![path.clone()];
    for a in args {
        argv_owned.push(c(a)?);
    }
    let mut argv: Vec<*const libc::c_char> = argv_owned.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    nix::unistd::access(path.as_c_str(), nix::unistd::AccessFlags::X_OK)?;
    let detach = Detach {
        path,
        argv,
        stdio,
        control,
        keep: keep.to_vec(),
        root: c(std::ffi::OsStr::new("/"))?,
    };
    // The process between runs on a stack of its own where it shares this memory (Linux).
    let mut stack = vec![0u8; 64 * 1024];
    // Its top (one past its end), aligned down to 16 bytes as the ABI wants.
    let top = stack.as_mut_ptr_range().end;
    let top = ((top as usize) & !15) as *mut libc::c_void;
    let unblocked = SigSet::all().thread_swap_mask(SigmaskHow::SIG_SETMASK)?;
    // SAFETY: `between` only reads `detach` and makes system calls, with every signal blocked;
    // `detach` and `stack` live until the process between has exited (waited for below, or,
    // on Linux, before `start_between` returns).
    let started = unsafe {
        super::os::start_between(
            between,
            std::ptr::addr_of!(detach) as *mut libc::c_void,
            top,
        )
    };
    let _ = unblocked.thread_set_mask();
    let pid = started?;
    drop(argv_owned);
    let pid = nix_pid(pid as u32).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => return Ok(()),
            Ok(status) => {
                return Err(io::Error::other(format!(
                    "the process starting it failed ({status:?})"
                )))
            }
        }
    }
}

/// The process between of [`spawn_detached`]: exits 0 once the last process is forked, 127
/// when a step failed.
extern "C" fn between(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Detach` that `spawn_detached` keeps alive while this runs; every
    // call below is a system call on prepared descriptors and strings, none allocates, and
    // the forked last process only execs or exits.
    unsafe {
        let d = &*(arg as *const Detach);
        if libc::setsid() < 0 {
            return 127;
        }
        for (fd, target) in d.stdio.iter().zip(0..) {
            if libc::dup2(*fd, target) < 0 {
                return 127;
            }
        }
        let (from, to) = d.control;
        let moved = if from == to {
            libc::fcntl(
                to,
                libc::F_SETFD,
                libc::fcntl(to, libc::F_GETFD) & !libc::FD_CLOEXEC,
            )
        } else {
            libc::dup2(from, to)
        };
        if moved < 0 {
            return 127;
        }
        for &fd in &d.keep {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return 127;
            }
        }
        if libc::chdir(d.root.as_ptr()) < 0 {
            return 127;
        }
        match super::os::start_last(d.path.as_ptr(), d.argv.as_ptr()) {
            true => 0,
            false => 127,
        }
    }
}

/// In a process about to exec (or, on macOS, to `posix_spawn`) the sidecar, in memory of its
/// own: every caught signal back at its default, SIGPIPE too, then every signal unblocked. The
/// exec would reset the caught ones anyway; doing it first means a signal pending since the
/// start cannot run the caller's handler here. Only `sigaction` and `sigprocmask` calls.
///
/// # Safety
/// Only in a child process between its fork and its exec.
pub(super) unsafe fn reset_signals() {
    // SAFETY: plain system calls on stack values; signal numbers the system does not have
    // are refused with EINVAL and skipped.
    unsafe {
        for signal in 1..65 {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if signal == libc::SIGPIPE
                || (old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN)
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// Sends `SIGKILL` to every process in the process group `pgid` (a plugin and whatever it
/// started). An already empty group is not an error.
pub(crate) fn kill_process_group(pgid: u32) -> io::Result<()> {
    let Some(pgid) = nix_pid(pgid).filter(|p| p.as_raw() > 1) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    match nix::sys::signal::killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What `kill(pid, 0)` says about a pid whose `/proc` entry cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `ESRCH`: no such process in this namespace.
    NoSuchProcess,
    /// It exists (or may: `EPERM`), but cannot be inspected.
    Hidden,
}

/// Whether a pid exists in this pid namespace, for an owner whose `/proc` entry cannot be read
/// (`hidepid=2`, another user): `kill(pid, 0)` sends nothing and only checks. `ESRCH` proves
/// there is no such process; anything else (success, `EPERM`) says it may exist.
pub(crate) fn probe_pid(pid: u32) -> Probe {
    let Ok(pid) = i32::try_from(pid) else {
        return Probe::NoSuchProcess;
    };
    if pid <= 0 {
        return Probe::Hidden;
    }
    // No signal: only the existence and permission checks.
    match nix::sys::signal::kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => Probe::NoSuchProcess,
        _ => Probe::Hidden,
    }
}

/// Puts process `pid` (0: this one) into a process group of its own.
pub(crate) fn own_process_group(pid: u32) {
    let pid = Pid::from_raw(pid as i32);
    // Failure (the child already exec'd, or is gone) only leaves the group as it was.
    let _ = nix::unistd::setpgid(pid, pid);
}

/// Makes process group `pgid` the terminal's foreground group when stdin is a terminal, so a
/// Ctrl-C reaches the guarded program and not its init. `SIGTTOU` is blocked for the call: a
/// caller in the background that catches it would otherwise be sent it, and retry, forever.
/// A failure changes nothing.
pub(crate) fn give_terminal_to(pgid: u32) {
    let stdin = std::io::stdin();
    if !nix::unistd::isatty(&stdin).unwrap_or(false) {
        return;
    }
    let Ok(old) = SigSet::from(Signal::SIGTTOU).thread_swap_mask(SigmaskHow::SIG_BLOCK) else {
        return;
    };
    let _ = nix::unistd::tcsetpgrp(&stdin, Pid::from_raw(pgid as i32));
    let _ = old.thread_set_mask();
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    Code(i32),
    Signal(i32),
}

/// Reaps every child that has ended, without waiting: `(pid, status)` for each.
pub(crate) fn reap_children() -> Vec<(u32, ExitStatus)> {
    use rustix::process::{wait, WaitOptions};
    let mut out = Vec::new();
    // `wait` is `waitpid(-1)`, any child (rustix's `waitpid(None)` is `waitpid(0)`, only
    // this process group's). None: no child has ended; Err: no child at all (ECHILD).
    while let Ok(Some((pid, status))) = wait(WaitOptions::NOHANG) {
        let how = match status.terminating_signal() {
            Some(signal) => ExitStatus::Signal(signal),
            None => ExitStatus::Code(status.exit_status().unwrap_or(0)),
        };
        out.push((pid.as_raw_nonzero().get() as u32, how));
    }
    out
}

/// Sends `signal` to process `pid`; a process already gone is not an error.
pub(crate) fn send_signal(pid: u32, signal: c_int) {
    if let (Some(pid), Ok(signal)) = (nix_pid(pid), Signal::try_from(signal)) {
        let _ = nix::sys::signal::kill(pid, signal);
    }
}
