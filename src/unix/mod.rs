//! The only module that calls libc directly (and the only one allowed `unsafe`). Every
//! `unsafe` block carries a `SAFETY:` comment; the rest of the crate calls the safe wrappers
//! here, grouped by what they touch: [`fd`] (descriptors), [`process`] (processes and their
//! groups), [`signal`] (dispositions, masks, SIGPIPE-free writes), and here the rest (random
//! bytes, the boot clock, file locks, the user).

#![allow(unsafe_code)]

mod fd;
mod process;
mod signal;

pub use fd::*;
pub use process::*;
pub use signal::*;

use std::io;
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
            // Interrupted by a signal: try again.
            Some(libc::EINTR) => {}
            _ => return Err(err),
        }
    }
}

/// The effective user id of this process: the owner the state directory must have.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid takes no arguments, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
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
mod tests;
