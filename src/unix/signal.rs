//! Signals: ignoring or restoring a disposition, pid 1's signals ([`InitSignals`]), and
//! writing to a pipe without ever raising SIGPIPE.
//!
//! Masks and sets go through nix. pid 1's signals go through signal-hook (its handlers write
//! to a socket pair that the init loop polls with a timeout) rather than the block-everything
//! and `sigtimedwait` of tini: signal-hook is the crate the design names for signals outside
//! tokio, and nix has no `sigtimedwait`. What that changes, and how it is kept from mattering,
//! is on [`InitSignals`]. `sigpending` remains a raw call in [`write_without_sigpipe`], for
//! want of any wrapper.

#![allow(unsafe_code)]

use libc::c_int;
use nix::errno::Errno;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal};
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Ignores a signal for good (`SIG_IGN`): the sidecar ignores SIGINT and SIGHUP so a
/// terminal's Ctrl-C or hang-up cannot end it even if it shares a process group.
pub(crate) fn ignore_signal(signal: c_int) -> io::Result<()> {
    set_disposition(signal, SigHandler::SigIgn)
}

/// Restores a signal's default disposition (`SIG_DFL`). Rust programs start with SIGPIPE
/// ignored; a program (or a test of one) that wants the C default back calls this.
pub fn default_signal(signal: c_int) -> io::Result<()> {
    set_disposition(signal, SigHandler::SigDfl)
}

fn set_disposition(signal: c_int, handler: SigHandler) -> io::Result<()> {
    let signal = Signal::try_from(signal)?;
    // SAFETY: nix's `signal` is `unsafe fn` for the sake of handler functions, which must be
    // async-signal-safe; SIG_IGN and SIG_DFL run no code of ours.
    unsafe { nix::sys::signal::signal(signal, handler) }?;
    Ok(())
}

/// The signals signal-hook refuses to handle (`signal_hook::consts::FORBIDDEN` less SIGKILL
/// and SIGSTOP, which nothing can catch): the faults a program raises on itself.
const FAULTS: [Signal; 3] = [Signal::SIGILL, Signal::SIGFPE, Signal::SIGSEGV];

/// The signals an init process forwards to its child: every catchable one below the realtime
/// range (Linux; macOS has none) but `SIGCHLD` (which it handles itself), the [`FAULTS`] and
/// those the C library keeps for itself.
fn forwarded_signals() -> impl Iterator<Item = c_int> {
    (1..super::os::signals_end()).filter(|&s| {
        !matches!(s, libc::SIGKILL | libc::SIGSTOP | libc::SIGCHLD)
            && !super::os::reserved_signal(s)
            && !FAULTS.iter().any(|f| *f as c_int == s)
    })
}

/// pid 1's signals, for sandguard as the init of a pid namespace: every forwarded signal and
/// `SIGCHLD` is caught (signal-hook) from [`InitSignals::take_over`] on, and [`wait`] hands
/// them over.
///
/// Caught, not blocked as tini does; kept equivalent where it could differ:
/// - the kernel drops a signal that pid 1 leaves at `SIG_DFL` when it comes from inside the
///   namespace; a handler, like a blocked signal, lets it through;
/// - handlers are reset by `exec`, so neither CMD (forked before) nor the sidecar (spawned
///   after) inherits them; signal-hook's socket pair is close-on-exec;
/// - a process in the background that touches the terminal with `SIGTTOU` caught would get
///   the signal and retry forever: [`give_terminal_to`](super::give_terminal_to) blocks it
///   around `tcsetpgrp` itself;
/// - signal-hook refuses SIGILL, SIGFPE and SIGSEGV: they stay blocked as before (so a
///   `docker kill -s SEGV` cannot end pid 1 and cut a reclaim short), but are no longer
///   forwarded to CMD.
///
/// [`wait`]: InitSignals::wait
pub(crate) struct InitSignals {
    delivery: SignalDelivery<UnixStream, SignalOnly>,
}

impl InitSignals {
    /// Installs the handlers (and blocks the [`FAULTS`]) in this process.
    pub(crate) fn take_over() -> io::Result<Self> {
        FAULTS.into_iter().collect::<SigSet>().thread_block()?;
        let (read, write) = UnixStream::pair()?;
        let signals = forwarded_signals().chain([libc::SIGCHLD]);
        let delivery = SignalDelivery::with_pipe(read, write, SignalOnly, signals)?;
        Ok(InitSignals { delivery })
    }

    /// Waits up to `timeout` for signals, and returns those that came (each once, however
    /// often it came; maybe none, on a timeout).
    pub(crate) fn wait(&mut self, timeout: Duration) -> Vec<c_int> {
        // An error of poll's is only an early return: the loop calls again.
        let _ = super::wait_readable(self.delivery.get_read().as_fd(), timeout);
        self.delivery.pending().collect()
    }
}

/// Writes all of `bytes` to `fd` without ever raising SIGPIPE, whatever the program's SIGPIPE
/// disposition (a C program, or Rust that reset it, dies of it by default): a pipe without a
/// reader is the error `EPIPE` (`ErrorKind::BrokenPipe`), nothing else.
///
/// SIGPIPE is blocked in the calling thread for the write (the kernel sends it to the writing
/// thread); if the write failed with `EPIPE`, the SIGPIPE it raised is taken off the pending
/// set ([`take_pending`]) before the old mask comes back. A SIGPIPE that was
/// already pending before the call is left for the program. A write of at most `PIPE_BUF`
/// bytes to a pipe is still one atomic `write`.
pub(crate) fn write_without_sigpipe(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<()> {
    let pipe_only = SigSet::from(Signal::SIGPIPE);
    // Restored below on every path; it changes this thread's mask only.
    let old = pipe_only.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
    let was_pending = is_pending(Signal::SIGPIPE);
    let result = write_all(fd, bytes);
    if !was_pending && matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EPIPE)) {
        take_pending(Signal::SIGPIPE);
    }
    let _ = old.thread_set_mask();
    result
}

/// Whether `signal` is pending for this thread or the process (`sigpending(2)`).
pub(super) fn is_pending(signal: Signal) -> bool {
    // SAFETY: an all-zero sigset_t is a valid set for sigpending to overwrite, and sigismember
    // only reads it. (nix has no sigpending.)
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, signal as c_int) == 1
    }
}

/// Takes the pending `signal` (blocked in this thread) off the pending set, if it is there,
/// without waiting: `sigwait(3)` returns at once for a signal already pending, and is only
/// called when `sigpending` says it is. (Linux's `sigtimedwait` with a zero timeout would do
/// it in one call, but macOS has none; this form is POSIX and safe through nix.)
fn take_pending(signal: Signal) {
    if is_pending(signal) {
        let _ = SigSet::from(signal).wait();
    }
}

/// `write(2)` until everything is written, retrying on `EINTR`.
fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
