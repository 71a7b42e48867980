//! Signals: ignoring or restoring a disposition, the set an init forwards, waiting for one,
//! and writing to a pipe without ever raising SIGPIPE.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// Ignores a signal for good (`SIG_IGN`): the sidecar ignores SIGINT and SIGHUP so a
/// terminal's Ctrl-C or hang-up cannot end it even if it shares a process group.
pub fn ignore_signal(signal: libc::c_int) -> io::Result<()> {
    // SAFETY: installing SIG_IGN involves no handler code of ours.
    if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
