//! Descriptors: pipes, close-on-exec, waiting for readability, taking inherited ones, and
//! closing every inherited one a daemon must not keep.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

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

/// Closes every descriptor from 3 up except `keep`: a daemonized sidecar must not hold the
/// wrapper's other pipes open (a parent waiting for their EOF would hang until the reclaim
/// ends) nor anything else it inherited.
pub fn close_descriptors_except(keep: &[RawFd]) {
    let mut open: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => (3..1024).collect(),
    };
    open.retain(|fd| *fd > 2 && !keep.contains(fd));
    for fd in open {
        // SAFETY: closing a descriptor number this process does not use anywhere (the
        // sidecar calls this before it opens anything of its own); EBADF for the directory
        // listing's own descriptor, already closed, is harmless.
        unsafe { libc::close(fd) };
    }
}
