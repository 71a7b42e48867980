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

/// The sidecar starts with every signal unblocked and none caught, whatever the caller had:
/// pid 1 and a Rust guard's program catch and block signals, and the detached start runs
/// while they do. Read back from the started program's own `/proc/self/status`.
#[test]
#[cfg(target_os = "linux")]
fn a_detached_start_hands_over_no_mask_and_no_handler() {
    use std::os::fd::AsRawFd;
    let dir = std::env::temp_dir().join(format!("sandguard-detach-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("status");
    let written = out.clone();
    std::thread::spawn(move || {
        // The caller's state: SIGUSR1 caught, SIGUSR2 blocked, SIGPIPE ignored (as Rust does).
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let id = signal_hook::flag::register(libc::SIGUSR1, flag).unwrap();
        SigSet::from(Signal::SIGUSR2).thread_block().unwrap();
        let file = std::fs::File::create(&written).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let script = "grep -E '^(SigBlk|SigCgt|SigIgn)' /proc/self/status";
        spawn_detached(
            std::path::Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            [null.as_raw_fd(), file.as_raw_fd(), file.as_raw_fd()],
            (null.as_raw_fd(), 3),
            &[],
        )
        .unwrap();
        signal_hook::low_level::unregister(id);
        let mask = SigSet::thread_get_mask().unwrap();
        assert!(
            mask.contains(Signal::SIGUSR2),
            "the caller's mask is its own again"
        );
        assert!(!mask.contains(Signal::SIGUSR1));
    })
    .join()
    .unwrap();
    let mut text = String::new();
    for _ in 0..200 {
        text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.lines().count() == 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let field = |name: &str| {
        let hex = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text:?}"));
        u64::from_str_radix(hex.trim(), 16).unwrap()
    };
    let bit = |s: Signal| 1u64 << (s as i32 - 1);
    assert_eq!(
        field("SigBlk:"),
        0,
        "nothing blocked in the program: {text}"
    );
    assert_eq!(
        field("SigCgt:") & bit(Signal::SIGUSR1),
        0,
        "no handler handed: {text}"
    );
    assert_eq!(
        field("SigIgn:") & bit(Signal::SIGPIPE),
        0,
        "SIGPIPE at its default: {text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
