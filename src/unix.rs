//! The only module that calls libc directly. Every `unsafe` block carries a `SAFETY:` comment;
//! the rest of the crate calls the safe wrappers here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Fills `buf` with random bytes from the kernel (`getrandom(2)`), for session ids and jitter.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe `rest`, a live, writable slice we own.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += n as usize;
    }
    Ok(())
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits. `Err` with
/// `ENOSYS` on kernels before 5.3, `ESRCH` when there is no such process.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall with integer arguments; on success it returns a new descriptor
    // that nothing else owns, which OwnedFd then closes exactly once.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Registers a pidfd with tokio's reactor so it can be awaited for readability (the owner's
/// exit). Must run inside a tokio runtime.
pub fn async_pidfd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the descriptor stays open and
    // refers to the same pidfd for the AsyncFd's whole life, and OwnedFd::as_raw_fd always
    // returns that one descriptor.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// A pipe whose both ends are close-on-exec: `(read, write)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sets or clears `FD_CLOEXEC`: the wrapper leaves the control pipe's write end open across
/// the exec of the guarded program.
pub fn set_cloexec(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: F_GETFD/F_SETFD on a descriptor the caller keeps open for the call.
    unsafe {
        let flags = libc::fcntl(raw, libc::F_GETFD);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::FD_CLOEXEC
        } else {
            flags & !libc::FD_CLOEXEC
        };
        if libc::fcntl(raw, libc::F_SETFD, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Duplicates `fd` onto descriptor number `target` (`dup2`), clearing close-on-exec there.
/// Only called between fork and exec, where it must stay async-signal-safe.
pub fn dup_onto(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 on integer descriptors; async-signal-safe, allocates nothing.
    if unsafe { libc::dup2(fd, target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `setsid(2)`: a new session and process group, so the terminal's Ctrl-C and hang-up do
/// not reach the caller. Called between fork and exec: async-signal-safe.
pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid takes no arguments and touches no memory of ours.
    if unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What `fork` returned to this process.
pub enum Forked {
    /// The parent, with the child's pid.
    Parent(u32),
    Child,
}

/// `fork(2)`. Only for a process that has not started any thread yet (the sidecar forks
/// once at start-up, before its runtime exists, so that it is nobody's child).
pub fn fork_single_threaded() -> io::Result<Forked> {
    // SAFETY: the caller guarantees no other thread exists, so the child's copy of memory
    // (locks included) is consistent.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid as u32)),
    }
}

/// `CLOCK_BOOTTIME`: monotonic, and unlike `CLOCK_MONOTONIC` it keeps counting while the
/// machine is suspended, which is what a lease grace must measure.
pub fn boottime() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the kernel to fill; CLOCK_BOOTTIME exists on
    // every Linux since 2.6.39, so the call cannot fail with valid arguments.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Waits up to `timeout` for `fd` to become readable (or hung up). `Ok(false)` on timeout.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: one valid pollfd, and its count.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(n > 0);
    }
}

/// Whether `fd` is an open pipe (FIFO): `sandguard claim` checks `$SANDGUARD_FD` before
/// writing to it.
pub fn is_fifo(fd: RawFd) -> bool {
    // SAFETY: an all-zero stat is a valid value for fstat to overwrite; fstat on any integer
    // only reads the descriptor table.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer.
    let ok = unsafe { libc::fstat(fd, &mut st) } == 0;
    ok && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
}

/// Ignores a signal for good (`SIG_IGN`): the sidecar ignores SIGINT and SIGHUP so a
/// terminal's Ctrl-C or hang-up cannot end it even if it shares a process group.
pub fn ignore_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: installing SIG_IGN involves no handler code of ours.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes ownership of an inherited descriptor number (`--control-fd N`, `$SANDGUARD_FD`),
/// after checking that it is open.
pub fn take_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only queries the descriptor table.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("file descriptor {fd} is not open"),
        ));
    }
    // SAFETY: the descriptor is open and was handed to this process to own (inherited for
    // this purpose); nothing else in the process refers to it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Spawns `cmd` as the sidecar: in a new session (`setsid`, so the terminal's Ctrl-C and
/// hang-up never reach it), with `control` placed at descriptor `target` and left open across
/// its exec.
pub fn spawn_in_new_session(
    cmd: &mut std::process::Command,
    control: RawFd,
    target: RawFd,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec in the child and calls only
    // async-signal-safe functions (setsid, dup2, fcntl); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if control == target {
                // dup2 onto itself keeps FD_CLOEXEC: clear it by hand.
                let flags = libc::fcntl(target, libc::F_GETFD);
                if flags < 0 || libc::fcntl(target, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(control, target) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Whether file descriptor 1 (stdout) is a terminal.
pub fn stdout_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor number; no memory is passed.
    unsafe { libc::isatty(1) == 1 }
}

/// Tries to take an exclusive `flock(2)` on `file` without waiting. `Ok(false)` when another
/// open file description (another process, or another `open` of the same file in this one)
/// holds a conflicting lock. The lock lasts until the descriptor is closed; std opens files
/// with `O_CLOEXEC`, so an exec'd child never inherits it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    try_flock(file, libc::LOCK_EX)
}

/// Like [`try_lock_exclusive`], but shared: probes that only want to know whether someone
/// holds the exclusive lock do not collide with each other.
pub fn try_lock_shared(file: &std::fs::File) -> io::Result<bool> {
    try_flock(file, libc::LOCK_SH)
}

fn try_flock(file: &std::fs::File, op: libc::c_int) -> io::Result<bool> {
    use std::os::unix::io::AsRawFd;
    loop {
        // SAFETY: flock only takes a descriptor number and flags; `file` borrows an open
        // descriptor for the whole call, so it cannot be closed or reused underneath us.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(err),
        }
    }
}

/// The effective user id of this process: the owner the state directory must have.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
}

/// Sends `SIGKILL` to every process in the process group `pgid` (a plugin and whatever it
/// started). An already empty group is not an error.
pub fn kill_process_group(pgid: u32) -> io::Result<()> {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    if pgid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: a plain syscall with integer arguments; a negative pid names a process group.
    let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

/// Whether a pid exists in this pid namespace, for an owner whose `/proc` entry cannot be read
/// (`hidepid=2`, another user): `kill(pid, 0)` sends nothing and only checks. `ESRCH` proves
/// there is no such process; anything else (success, `EPERM`) says it may exist.
pub fn probe_pid(pid: u32) -> crate::identity::Probe {
    use crate::identity::Probe;
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Probe::NoSuchProcess;
    };
    if pid <= 0 {
        return Probe::Hidden;
    }
    // SAFETY: signal 0 performs only the existence and permission checks; nothing is sent.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        Probe::NoSuchProcess
    } else {
        Probe::Hidden
    }
}

/// Whether the pipe whose write end is `fd` has lost its last reader (`poll` reports
/// `POLLERR` on a write end then): `sandguard claim` stops waiting for a sidecar that died.
pub fn pipe_has_no_reader(fd: BorrowedFd<'_>) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, and its count; a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & libc::POLLERR != 0
}

/// The signals an init process forwards to its child: every catchable one but `SIGCHLD`
/// (which it handles itself).
fn forwarded_signals() -> impl Iterator<Item = libc::c_int> {
    (1..libc::SIGRTMIN()).filter(|&s| {
        !matches!(s, libc::SIGKILL | libc::SIGSTOP | libc::SIGCHLD) && s != 32 && s != 33
    })
}

/// Blocks every forwarded signal and `SIGCHLD` in this (single-threaded) process, so that
/// [`next_signal`] receives them instead of their default actions. For sandguard as pid 1.
pub fn block_init_signals() -> io::Result<()> {
    // SAFETY: `set` is a valid sigset_t that sigemptyset initialises before any other use;
    // sigprocmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in forwarded_signals().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, s);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Unblocks every signal: a forked child undoes [`block_init_signals`] before its exec.
/// Async-signal-safe.
pub fn unblock_all_signals() -> io::Result<()> {
    // SAFETY: as in block_init_signals; sigemptyset makes an empty set, which SETMASK installs.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Waits up to `timeout` for one of the signals blocked by [`block_init_signals`].
pub fn next_signal(timeout: Duration) -> Option<libc::c_int> {
    // SAFETY: `set` is initialised by sigemptyset before use; `ts` is a valid timespec;
    // sigtimedwait writes no siginfo when given a null pointer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in forwarded_signals().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, s);
        }
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        let s = libc::sigtimedwait(&set, std::ptr::null_mut(), &ts);
        (s > 0).then_some(s)
    }
}

/// Sends `signal` to process `pid`; a process already gone is not an error.
pub fn send_signal(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: a plain syscall with integer arguments.
        unsafe { libc::kill(pid, signal) };
    }
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
}

/// Reaps every child that has ended, without waiting: `(pid, status)` for each.
pub fn reap_children() -> Vec<(u32, ExitStatus)> {
    let mut out = Vec::new();
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid int for the kernel to fill.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return out;
        }
        let how = if libc::WIFSIGNALED(status) {
            ExitStatus::Signal(libc::WTERMSIG(status))
        } else {
            ExitStatus::Code(libc::WEXITSTATUS(status))
        };
        out.push((pid as u32, how));
    }
}

/// Closes every descriptor from 3 up except `keep`: a daemonized sidecar must not hold the
/// wrapper's other pipes open (a parent waiting for their EOF would hang until the reclaim
/// ends) nor anything else it inherited.
pub fn close_descriptors_except(keep: Option<RawFd>) {
    let mut open: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => (3..1024).collect(),
    };
    open.retain(|&fd| fd > 2 && Some(fd) != keep);
    for fd in open {
        // SAFETY: closing a descriptor number this process does not use anywhere (the
        // sidecar calls this before it opens anything of its own); EBADF for the directory
        // listing's own descriptor, already closed, is harmless.
        unsafe { libc::close(fd) };
    }
}

/// Puts process `pid` (0: this one) into a process group of its own.
pub fn own_process_group(pid: u32) {
    // SAFETY: a plain syscall with integer arguments; failure (the child already exec'd, or
    // is gone) only leaves the group as it was.
    unsafe { libc::setpgid(pid as libc::pid_t, pid as libc::pid_t) };
}

/// Makes process group `pgid` the terminal's foreground group when stdin is a terminal, so a
/// Ctrl-C reaches the guarded program and not its init. Call with `SIGTTOU` blocked.
pub fn give_terminal_to(pgid: u32) {
    // SAFETY: isatty and tcsetpgrp take integers only; a failure changes nothing.
    unsafe {
        if libc::isatty(0) == 1 {
            libc::tcsetpgrp(0, pgid as libc::pid_t);
        }
    }
}

/// Restores a signal's default disposition (`SIG_DFL`). Rust programs start with SIGPIPE
/// ignored; a program (or a test of one) that wants the C default back calls this.
pub fn default_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: installing SIG_DFL involves no handler code of ours.
    if unsafe { libc::signal(signal, libc::SIG_DFL) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Writes all of `bytes` to `fd` without ever raising SIGPIPE, whatever the program's SIGPIPE
/// disposition (a C program, or Rust that reset it, dies of it by default): a pipe without a
/// reader is the error `EPIPE` (`ErrorKind::BrokenPipe`), nothing else.
///
/// SIGPIPE is blocked in the calling thread for the write (the kernel sends it to the writing
/// thread); if the write failed with `EPIPE`, the SIGPIPE it raised is taken off the pending
/// set (`sigtimedwait` with a zero timeout) before the old mask comes back. A SIGPIPE that was
/// already pending before the call is left for the program. A write of at most `PIPE_BUF`
/// bytes to a pipe is still one atomic `write`.
pub fn write_without_sigpipe(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: an all-zero sigset_t is a valid value for sigemptyset to initialise.
    let mut pipe_only: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pthread_sigmask and sigpending overwrite it.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigemptyset/sigaddset only write the set we own; SIGPIPE is a valid signal.
    unsafe {
        libc::sigemptyset(&mut pipe_only);
        libc::sigaddset(&mut pipe_only, libc::SIGPIPE);
    }
    // SAFETY: both pointers are valid sigsets of ours; this changes the calling thread's mask
    // only, and it is restored below on every path.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &pipe_only, &mut old) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: `pending` is a valid sigset for the kernel to fill.
    let was_pending = unsafe { libc::sigpending(&mut pending) } == 0
        // SAFETY: sigismember only reads the set we own.
        && unsafe { libc::sigismember(&pending, libc::SIGPIPE) } == 1;
    let result = write_all_raw(fd.as_raw_fd(), bytes);
    if !was_pending && matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EPIPE)) {
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        loop {
            // SAFETY: a valid set and timeout of ours; a null siginfo pointer is allowed.
            let taken = unsafe { libc::sigtimedwait(&pipe_only, std::ptr::null_mut(), &zero) };
            // EAGAIN: nothing pending (already taken); EINTR: another signal came first.
            if taken >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
    }
    // SAFETY: `old` holds the mask saved above; restoring it touches only this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    result
}

/// `write(2)` until everything is written, retrying on `EINTR`.
fn write_all_raw(fd: RawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe `bytes`, a live slice; `fd` is borrowed
        // open for the call by the caller.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::WriteZero));
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Takes an exclusive `flock(2)` on `file`, waiting for it as long as it takes (a blocking
/// call: run it off the async runtime's thread).
pub fn lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    use std::os::unix::io::AsRawFd;
    loop {
        // SAFETY: flock takes a descriptor number and flags; `file` keeps it open for the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// SIGPIPE in this thread's blocked set (`SIG_BLOCK` with an empty set reads the mask) and
    /// in the pending set.
    fn sigpipe_blocked_and_pending() -> (bool, bool) {
        // SAFETY: zeroed sigsets are valid for the calls below to overwrite; an empty set with
        // SIG_BLOCK changes nothing and only reads the mask back.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            let mut mask: libc::sigset_t = std::mem::zeroed();
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::pthread_sigmask(libc::SIG_BLOCK, &empty, &mut mask);
            libc::sigpending(&mut pending);
            (
                libc::sigismember(&mask, libc::SIGPIPE) == 1,
                libc::sigismember(&pending, libc::SIGPIPE) == 1,
            )
        }
    }

    fn block_sigpipe() {
        // SAFETY: a zeroed sigset is valid for sigemptyset; this changes the calling thread's
        // mask only (the test's own thread).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
    }

    #[test]
    fn a_pipe_without_a_reader_is_epipe_and_leaves_no_sigpipe_behind() {
        // A thread of its own: the signal mask is per thread.
        std::thread::spawn(|| {
            let (r, w) = pipe().unwrap();
            write_without_sigpipe(w.as_fd(), b"renew\n").unwrap();
            drop(r);
            let err = write_without_sigpipe(w.as_fd(), b"renew\n").unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
            assert_eq!(
                sigpipe_blocked_and_pending(),
                (false, false),
                "mask restored"
            );
            // With SIGPIPE blocked by the caller, the signal the write raised would stay
            // pending (Rust's SIG_IGN discards only unblocked ones): it must have been taken.
            block_sigpipe();
            let err = write_without_sigpipe(w.as_fd(), b"renew\n").unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
            assert_eq!(sigpipe_blocked_and_pending(), (true, false));
        })
        .join()
        .unwrap();
    }
}
