//! Unit tests of the syscall wrappers.

use super::*;
use nix::sys::signal::{SigSet, Signal};
use std::os::fd::AsFd;

/// SIGPIPE in this thread's blocked set and in the pending set.
fn sigpipe_blocked_and_pending() -> (bool, bool) {
    let mask = SigSet::thread_get_mask().unwrap();
    (
        mask.contains(Signal::SIGPIPE),
        signal::is_pending(Signal::SIGPIPE),
    )
}

fn block_sigpipe() {
    // The test's own thread only.
    SigSet::from(Signal::SIGPIPE).thread_block().unwrap();
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
