//! Descriptors: pipes, close-on-exec, redirecting stdout and stderr, waiting for readability,
//! taking inherited ones, and closing every inherited one a daemon must not keep.
//!
//! nix takes descriptors as `AsFd`, so a bare number (`--control-fd N`, `$SANDGUARD_FD`) is
//! checked with one raw `fcntl` before it becomes an `OwnedFd`; everything after goes through
//! nix on the owned or borrowed descriptor.

#![allow(unsafe_code)]

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub use super::os::pipe;

/// Sets or clears `FD_CLOEXEC`: the wrapper leaves the control pipe's write end open across
/// the exec of the guarded program. Allocates nothing (nix's errors are plain numbers), so a
/// `pre_exec` hook may call it.
pub(crate) fn set_cloexec(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    let mut flags = FdFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFD)?);
    flags.set(FdFlag::FD_CLOEXEC, on);
    fcntl(fd, FcntlArg::F_SETFD(flags))?;
    Ok(())
}

/// A close-on-exec copy of `fd` under the lowest free number at or above `min`
/// (`F_DUPFD_CLOEXEC`): a descriptor handed to a child under a number no `dup2` of the
/// child's fixed descriptors (0 to 3) can land on.
pub(crate) fn dup_above(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // rustix's form hands the new descriptor back owned (nix's returns a bare number).
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, min)?)
}

/// Makes `fd` this process's stdout (`dup2` onto descriptor 1).
pub(crate) fn redirect_stdout(fd: impl AsFd) -> io::Result<()> {
    Ok(nix::unistd::dup2_stdout(fd)?)
}

/// Makes `fd` this process's stderr (`dup2` onto descriptor 2).
pub(crate) fn redirect_stderr(fd: impl AsFd) -> io::Result<()> {
    Ok(nix::unistd::dup2_stderr(fd)?)
}

/// Waits up to `timeout` for `fd` to become readable (or hung up). `Ok(false)` on timeout.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    loop {
        match nix::poll::poll(&mut [PollFd::new(fd, PollFlags::POLLIN)], timeout) {
            Ok(n) => return Ok(n > 0),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `fd` is an open pipe (FIFO): `sandguard claim` checks `$SANDGUARD_FD` before
/// writing to it.
pub(crate) fn is_fifo(fd: BorrowedFd<'_>) -> bool {
    nix::sys::stat::fstat(fd).is_ok_and(|st| {
        nix::sys::stat::SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT)
            == nix::sys::stat::SFlag::S_IFIFO
    })
}

/// Takes ownership of an inherited descriptor number (`--control-fd N`, `$SANDGUARD_FD`),
/// after checking that it is open.
pub(crate) fn take_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD on any integer only queries the descriptor table; no memory is passed.
    // (nix's fcntl wants a BorrowedFd, which may only be made for a descriptor known open.)
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

/// Whether the pipe whose write end is `fd` has lost its last reader (`poll` reports
/// `POLLERR` on a write end then on Linux; `POLLHUP` is taken too, which is how a BSD-derived
/// kernel such as macOS's may say it): `sandguard claim` stops waiting for a sidecar that died.
pub(crate) fn pipe_has_no_reader(fd: BorrowedFd<'_>) -> bool {
    let mut pfd = [PollFd::new(fd, PollFlags::empty())];
    let n = nix::poll::poll(&mut pfd, PollTimeout::ZERO).unwrap_or(0);
    n > 0
        && pfd[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

/// Closes every descriptor from 3 up except `keep`: a daemonized sidecar must not hold the
/// wrapper's other pipes open (a parent waiting for their EOF would hang until the reclaim
/// ends) nor anything else it inherited.
pub(crate) fn close_descriptors_except(keep: &[RawFd]) {
    let mut open: Vec<RawFd> = super::os::open_descriptors().unwrap_or_else(|| (3..1024).collect());
    open.retain(|fd| *fd > 2 && !keep.contains(fd));
    for fd in open {
        // Sound although nix takes the bare number: no descriptor of this process's own is
        // open yet (the sidecar calls this right after its fork, before it opens anything),
        // so every one closed here is an inherited one nothing refers to. EBADF for the
        // directory listing's own descriptor, already closed, is harmless.
        let _ = nix::unistd::close(fd);
    }
}
