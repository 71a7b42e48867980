//! The operating system's calls, behind safe functions grouped by what they touch: [`fd`]
//! (descriptors), [`process`] (processes and their groups), [`signal`] (dispositions, masks,
//! pid 1's signals, SIGPIPE-free writes), `host.rs` (this machine's, boot's and pid namespace's
//! ids, read from the files the OS keeps), and here the rest (random bytes, the boot clock,
//! file locks, the user).
//!
//! The calls go through crates, not libc by hand: `nix` for what it wraps (signals and sigsets,
//! fork, setsid, kill, pipe2, fcntl, fstat, poll, the clocks, tcsetpgrp); `rustix` for three
//! calls nix lacks or gets wrong for us: `pidfd_open` (not in nix), `waitpid` (nix's
//! `WaitStatus` refuses a child killed by a realtime signal, after reaping it) and `flock`
//! (nix's only undeprecated form is a guard that unlocks on drop, where our locks last until the
//! file closes); `signal-hook` for pid 1's signals, outside tokio; `getrandom` (ring's) for
//! random bytes.
//!
//! This is still the only module allowed `unsafe`, kept for what no safe wrapper does: `fork`,
//! a `pre_exec` hook, setting a signal disposition (nix's `signal` is `unsafe fn` even for
//! `SIG_IGN`), `sigpending` and `sigtimedwait` (not in nix), the `PIDFD_GET_INFO` ioctl,
//! `madvise`, tokio's `AsyncFd` registration, and taking ownership of an inherited descriptor
//! number. Those blocks sit in [`fd`], [`process`] and [`signal`], the only files that allow
//! `unsafe` (this one and the tests do not), each with a `SAFETY:` comment; the rest of the
//! crate calls the safe wrappers here.

mod fd;
mod host;
mod process;
mod signal;

pub use fd::*;
pub(crate) use host::*;
pub use process::*;
pub use signal::*;

use rustix::fs::FlockOperation;
use std::io;
use std::time::Duration;

/// Fills `buf` with random bytes from the kernel (`getrandom(2)`, through the `getrandom`
/// crate, which retries on `EINTR` and short reads), for session ids and jitter.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    getrandom::getrandom(buf).map_err(|e| match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::other(e.to_string()),
    })
}

/// `n` random bytes from the kernel as `2n` lower-case hex digits: session ids, lock tokens,
/// socket names no one can guess.
pub fn random_hex(n: usize) -> io::Result<String> {
    let mut buf = vec![0u8; n];
    random_bytes(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// `CLOCK_BOOTTIME`: monotonic, and unlike `CLOCK_MONOTONIC` it keeps counting while the
/// machine is suspended, which is what a lease grace must measure. It exists on every Linux
/// since 2.6.39, so the call cannot fail; zero if it ever did.
pub(crate) fn boottime() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

/// Tries to take an exclusive `flock(2)` on `file` without waiting. `Ok(false)` when another
/// open file description (another process, or another `open` of the same file in this one)
/// holds a conflicting lock. The lock lasts until the descriptor is closed; std opens files
/// with `O_CLOEXEC`, so an exec'd child never inherits it.
pub fn try_lock_exclusive(file: &std::fs::File) -> io::Result<bool> {
    try_flock(file, FlockOperation::NonBlockingLockExclusive)
}

/// Like [`try_lock_exclusive`], but shared: probes that only want to know whether someone
/// holds the exclusive lock do not collide with each other.
pub(crate) fn try_lock_shared(file: &std::fs::File) -> io::Result<bool> {
    try_flock(file, FlockOperation::NonBlockingLockShared)
}

fn try_flock(file: &std::fs::File, op: FlockOperation) -> io::Result<bool> {
    loop {
        match rustix::fs::flock(file, op) {
            Ok(()) => return Ok(true),
            Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
            // Interrupted by a signal: try again.
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The effective user id of this process: the owner the state directory must have.
pub fn geteuid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Takes an exclusive `flock(2)` on `file`, waiting for it as long as it takes (a blocking
/// call: run it off the async runtime's thread).
pub(crate) fn lock_exclusive(file: &std::fs::File) -> io::Result<()> {
    loop {
        match rustix::fs::flock(file, FlockOperation::LockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
