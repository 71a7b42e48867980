//! The platform layer: the operating system's calls, behind safe functions the rest of the
//! crate uses without knowing which system it runs on. What differs between Linux and macOS is
//! in one file each, `linux.rs` and `macos.rs`, chosen by `cfg(target_os)` as the private
//! module `os`, with the same names and meanings; nothing outside this module says
//! `target_os`. The rest is POSIX and shared: [`fd`] (descriptors), [`process`] (processes and
//! their groups, the detached start), [`signal`] (dispositions, masks, pid 1's signals,
//! SIGPIPE-free writes), `host.rs` (this machine's, boot's and pid namespace's ids), [`owner`]
//! (whether only this user or root can change a file: the ledger's directory, an engine's
//! socket), and here random bytes, file locks, the user, and the platform's own calls
//! re-exported.
//!
//! The small interface each platform fills ([`os`]'s items, both files):
//! - **the owner's exit**: [`watch_exit`] (a descriptor readable once a pid exits: a pidfd on
//!   Linux, a kqueue with `EVFILT_PROC`/`NOTE_EXIT` on macOS; `ESRCH` when it is gone),
//!   [`watch_self`] (one a process can hand over: Linux only), [`exit_status`] (how it ended:
//!   `PIDFD_GET_INFO` on Linux, unknown on macOS);
//! - **a process's identity**: [`process_stat`] (its start time and whether it has exited:
//!   `/proc/PID/stat`, `proc_pidinfo`), [`process_uid`] (the user it runs as, for `stop
//!   --all`'s question: `/proc/PID/status`, `proc_pidinfo`), and the host's machine, boot and
//!   pid namespace;
//! - **the lease clock**, which counts time asleep: [`sleep_counting_clock`]
//!   (`CLOCK_BOOTTIME`, macOS's `CLOCK_MONOTONIC`);
//! - **the fast detached start**'s two steps (`clone(CLONE_VM | CLONE_VFORK)`; `fork` and
//!   `posix_spawn`), close-on-exec pipes ([`pipe`]), the open descriptors, which signals
//!   exist, and handing back start-up pages ([`release_startup_pages`], Linux only).
//!
//! The calls go through crates, not libc by hand: `nix` for what it wraps (signals and sigsets,
//! fork, setsid, kill, pipes, fcntl, fstat, poll, access, the clocks, tcsetpgrp, kqueue);
//! `rustix` for four calls nix lacks or gets wrong for us: `pidfd_open` (not in nix), `waitpid`
//! (nix's `WaitStatus` refuses a child killed by a realtime signal, after reaping it), `flock`
//! (nix's only undeprecated form is a guard that unlocks on drop, where our locks last until the
//! file closes) and `F_DUPFD_CLOEXEC` (nix returns a bare number, which only `unsafe` could
//! own); `signal-hook` for pid 1's signals, outside tokio; `getrandom` (ring's) for random
//! bytes.
//!
//! This is still the only module allowed `unsafe`, kept for what no safe wrapper does: `fork`,
//! the detached start (and the `pre_exec` hook of the SDKs' start, [`spawn_in_new_session`]),
//! setting a signal disposition (nix's `signal` is `unsafe fn` even for `SIG_IGN`),
//! `sigpending`, the `PIDFD_GET_INFO` ioctl, `proc_pidinfo`, `gethostuuid`, `sysctlbyname`,
//! `madvise`, tokio's `AsyncFd` registration, and taking ownership of an inherited descriptor
//! number. Those blocks sit in the files that say `#![allow(unsafe_code)]` (this one and the
//! tests do not), each with a `SAFETY:` comment; the rest of the crate calls the safe wrappers
//! here.

mod fd;
mod host;
pub(crate) mod owner;
mod process;
mod signal;

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod os;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod os;

pub(crate) use os::{
    exit_status, process_stat, process_uid, release_startup_pages, sleep_counting_clock,
    watch_exit, watch_self, EXIT_WATCH, MAX_SOCKET_PATH, PLATFORM, POLLED,
};

pub use fd::*;
pub(crate) use host::*;
pub use process::*;
pub use signal::*;

use rustix::fs::FlockOperation;
use std::io;

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

/// Which platform this is, for the few conventions that are not calls: where the engines a
/// user runs put their Docker sockets (`crate::config::docker`). Both are always compiled, so
/// each platform's conventions are tested on the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Platform {
    // Each is built on the other platform only by the tests of its conventions.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Linux,
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    MacOs,
}

/// What [`process_stat`] says of a process: whether it has exited (a zombie its parent has not
/// reaped yet) and its start time, which with the pid names one process for good. The start
/// time's unit is the platform's (Linux: clock ticks after boot, field 22 of `/proc/PID/stat`;
/// macOS: microseconds since the epoch): only ever compared with another reading on the same
/// machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub exited: bool,
    pub start_time: u64,
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

/// This machine's host name (`gethostname(3)`), `None` when it is not UTF-8.
pub(crate) fn hostname() -> Option<String> {
    nix::unistd::gethostname()
        .ok()?
        .into_string()
        .ok()
        .map(|h| h.trim().to_string())
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
