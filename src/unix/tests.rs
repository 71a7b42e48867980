//! Unit tests of the libc wrappers.

#![allow(unsafe_code)]

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
