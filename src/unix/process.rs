//! Processes: pidfds, forking, new sessions and process groups, the terminal's foreground
//! group, reaping, signalling, and probing whether a pid exists.
//!
//! nix for most; rustix for `pidfd_open` (nix has none) and `waitpid` (nix turns the status of
//! a child killed by a realtime signal into `EINVAL`, after the child is reaped, so pid 1 would
//! lose CMD's end). `PIDFD_GET_INFO` has no wrapper anywhere: a raw ioctl, with nix computing
//! its request number. Signals are passed as numbers (what signal-hook hands pid 1); one that
//! nix's `Signal` does not name (a realtime one) is not sent, and no caller sends one.

#![allow(unsafe_code)]

use libc::c_int;
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::Pid;
use std::io;
use std::os::fd::{OwnedFd, RawFd};

/// `pid` as nix's `Pid`, for a positive pid that fits.
fn nix_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .map(Pid::from_raw)
}

/// `pidfd_open(2)`: a descriptor that becomes readable when `pid` exits. `Err` with
/// `ENOSYS` on kernels before 5.3, `ESRCH` when there is no such process.
pub(crate) fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// `struct pidfd_info` as Linux 6.13 defined it (`PIDFD_INFO_SIZE_VER0`, 64 bytes); later
/// kernels accept this size and fill what fits, `exit_code` included.
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    /// `pid`, `tgid`, `ppid`, `ruid`, `rgid`, `euid`, `egid`, `suid`, `sgid`, `fsuid`, `fsgid`.
    ids: [u32; 11],
    exit_code: i32,
}

const _: () = assert!(std::mem::size_of::<PidfdInfo>() == 64);

/// `PIDFD_INFO_EXIT`: ask for (and, in the answer's mask, got) the exit status.
const PIDFD_INFO_EXIT: u64 = 1 << 3;
/// `PIDFD_GET_INFO`: `_IOWR(PIDFS_IOCTL_MAGIC = 0xFF, 11, struct pidfd_info)`.
const PIDFD_GET_INFO: libc::Ioctl =
    nix::request_code_readwrite!(0xFF, 11, std::mem::size_of::<PidfdInfo>()) as libc::Ioctl;
const _: () = assert!(
    PIDFD_GET_INFO as u32 == 0xC040_FF0B,
    "the number Linux 6.13 defines"
);

/// The wait status (as `waitpid(2)` encodes it) of the process `pidfd` refers to:
/// `PIDFD_GET_INFO` asking for `PIDFD_INFO_EXIT` (Linux ≥ 6.15). Whoever holds the pidfd may
/// read it, not only the parent, but only once the parent has reaped the process:
/// `Ok(None)` while it runs or is a zombie. `Err` where the kernel cannot tell: no
/// `PIDFD_GET_INFO` (`ENOTTY`, `EINVAL`), or a kernel without the exit information whose
/// process was reaped (`ESRCH`).
pub(crate) fn pidfd_exit_status(pidfd: std::os::fd::BorrowedFd<'_>) -> io::Result<Option<i32>> {
    use std::os::fd::AsRawFd;
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: `info` is a live, writable `struct pidfd_info` of the size the request number
    // encodes; the kernel writes at most that many bytes into it and keeps no pointer to it.
    let r = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO,
            std::ptr::addr_of_mut!(info),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code))
}

/// Registers a pidfd with tokio's reactor so it can be awaited for readability (the owner's
/// exit). Must run inside a tokio runtime.
pub(crate) fn async_pidfd(fd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the AsyncFd takes ownership of the OwnedFd, so the descriptor stays open and
    // refers to the same pidfd for the AsyncFd's whole life, and OwnedFd::as_raw_fd always
    // returns that one descriptor.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// `setsid(2)`: a new session and process group, so the terminal's Ctrl-C and hang-up do
/// not reach the caller. Allocates nothing: a `pre_exec` hook may call it.
pub(crate) fn setsid() -> io::Result<()> {
    nix::unistd::setsid()?;
    Ok(())
}

/// What `fork` returned to this process.
pub(crate) enum Forked {
    /// The parent, with the child's pid.
    Parent(u32),
    Child,
}

/// `fork(2)`. Only for a process that has not started any thread yet (the sidecar forks
/// once at start-up, before its runtime exists, so that it is nobody's child).
pub(crate) fn fork_single_threaded() -> io::Result<Forked> {
    // SAFETY: the caller guarantees no other thread exists, so the child's copy of memory
    // (locks included) is consistent and it may go on running ordinary code.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child.as_raw() as u32)),
    }
}

/// Spawns `cmd` as the sidecar: in a new session (`setsid`, so the terminal's Ctrl-C and
/// hang-up never reach it), with `control` placed at descriptor `target` and left open across
/// its exec.
pub fn spawn_in_new_session(
    cmd: &mut std::process::Command,
    control: RawFd,
    target: RawFd,
) -> io::Result<std::process::Child> {
    use std::os::fd::BorrowedFd;
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec in the child, so it must be
    // async-signal-safe: it calls setsid, fcntl and dup2 and allocates nothing (nix's
    // wrappers are thin, and its errors, like `io::Error::from_raw_os_error`, are plain
    // numbers). `control` is open in the parent for the whole spawn, hence in the child; and
    // no safe dup2 exists onto a descriptor number that nothing owns yet.
    unsafe {
        cmd.pre_exec(move || {
            setsid()?;
            if control == target {
                // dup2 onto itself keeps FD_CLOEXEC: clear it by hand.
                super::set_cloexec(BorrowedFd::borrow_raw(target), false)?;
            } else {
                Errno::result(libc::dup2(control, target))?;
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// What the process between ([`spawn_detached`]) does, all prepared before it exists.
struct Detach {
    path: std::ffi::CString,
    argv: Vec<*const libc::c_char>,
    stdio: [RawFd; 3],
    control: (RawFd, RawFd),
    keep: Vec<RawFd>,
    root: std::ffi::CString,
}

/// Starts `program` with `args` detached, and waits only for the process between: that one
/// shares this process's memory (`clone(CLONE_VM | CLONE_VFORK)`, as posix_spawn does: no
/// copy of the address space to make, none to tear down), makes a new session (`setsid`),
/// puts `stdio` at 0 to 2 and `control.0` at `control.1`, leaves `keep` open across exec
/// (their close-on-exec flag cleared in it only), moves to `/`, unblocks every signal and
/// puts SIGPIPE back to its default (as std's spawn does); then forks the last process, which
/// execs `program` (the environment is this process's), and exits. This process resumes when
/// it has exited and reaps it, so the sidecar is nobody's child and the caller, about to exec
/// the guarded program, inherits none.
///
/// Unlike std's spawn, nothing waits for the exec: the wrapper's program starts while the
/// sidecar's binary is still loading. A failed exec ends the last process with status 127
/// unseen; `program` is this very binary (`current_exe`), checked executable just before.
pub(crate) fn spawn_detached(
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    stdio: [RawFd; 3],
    control: (RawFd, RawFd),
    keep: &[RawFd],
) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |s: &std::ffi::OsStr| {
        CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
    };
    let path = c(program.as_os_str())?;
    let mut argv_owned = vec![path.clone()];
    for a in args {
        argv_owned.push(c(a)?);
    }
    let mut argv: Vec<*const libc::c_char> = argv_owned.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: `path` is a NUL-terminated string that lives across the call.
    if unsafe { libc::access(path.as_ptr(), libc::X_OK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let detach = Detach {
        path,
        argv,
        stdio,
        control,
        keep: keep.to_vec(),
        root: c(std::ffi::OsStr::new("/"))?,
    };
    // The process between runs on a stack of its own, in this memory.
    let mut stack = vec![0u8; 64 * 1024];
    // SAFETY: the top of a live allocation, aligned down to 16 bytes as the ABI wants.
    let top = unsafe { stack.as_mut_ptr().add(stack.len()) };
    let top = ((top as usize) & !15) as *mut libc::c_void;
    // SAFETY: `between` only reads `detach` (alive until this returns: CLONE_VFORK suspends
    // this thread until the process between has exited) and makes system calls; the wrapper
    // runs no other thread. Its stack is `stack`, which outlives it for the same reason.
    let pid = unsafe {
        libc::clone(
            between,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::addr_of!(detach) as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    drop(argv_owned);
    let pid = nix_pid(pid as u32).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
            Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => return Ok(()),
            Ok(status) => {
                return Err(io::Error::other(format!(
                    "the process starting it failed ({status:?})"
                )))
            }
        }
    }
}

/// The process between of [`spawn_detached`]: exits 0 once the last process is forked, 127
/// when a step failed.
extern "C" fn between(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Detach` that `spawn_detached` keeps alive while this runs; every
    // call below is a system call on prepared descriptors and strings, none allocates, and
    // the forked last process only execs or exits.
    unsafe {
        let d = &*(arg as *const Detach);
        if libc::setsid() < 0 {
            return 127;
        }
        for (fd, target) in d.stdio.iter().zip(0..) {
            if libc::dup2(*fd, target) < 0 {
                return 127;
            }
        }
        let (from, to) = d.control;
        let moved = if from == to {
            libc::fcntl(
                to,
                libc::F_SETFD,
                libc::fcntl(to, libc::F_GETFD) & !libc::FD_CLOEXEC,
            )
        } else {
            libc::dup2(from, to)
        };
        if moved < 0 {
            return 127;
        }
        for &fd in &d.keep {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return 127;
            }
        }
        if libc::chdir(d.root.as_ptr()) < 0 {
            return 127;
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // A plain fork by system call (no library fork handlers in a process sharing its
        // parent's memory): the last process gets its own copy, and only execs.
        match libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) {
            0 => {
                libc::execv(d.path.as_ptr(), d.argv.as_ptr());
                libc::_exit(127)
            }
            n if n < 0 => 127,
            _ => 0,
        }
    }
}

/// Sends `SIGKILL` to every process in the process group `pgid` (a plugin and whatever it
/// started). An already empty group is not an error.
pub(crate) fn kill_process_group(pgid: u32) -> io::Result<()> {
    let Some(pgid) = nix_pid(pgid).filter(|p| p.as_raw() > 1) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    match nix::sys::signal::killpg(pgid, Signal::SIGKILL) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What `kill(pid, 0)` says about a pid whose `/proc` entry cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// `ESRCH`: no such process in this namespace.
    NoSuchProcess,
    /// It exists (or may: `EPERM`), but cannot be inspected.
    Hidden,
}

/// Whether a pid exists in this pid namespace, for an owner whose `/proc` entry cannot be read
/// (`hidepid=2`, another user): `kill(pid, 0)` sends nothing and only checks. `ESRCH` proves
/// there is no such process; anything else (success, `EPERM`) says it may exist.
pub(crate) fn probe_pid(pid: u32) -> Probe {
    let Ok(pid) = i32::try_from(pid) else {
        return Probe::NoSuchProcess;
    };
    if pid <= 0 {
        return Probe::Hidden;
    }
    // No signal: only the existence and permission checks.
    match nix::sys::signal::kill(Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => Probe::NoSuchProcess,
        _ => Probe::Hidden,
    }
}

/// Puts process `pid` (0: this one) into a process group of its own.
pub(crate) fn own_process_group(pid: u32) {
    let pid = Pid::from_raw(pid as i32);
    // Failure (the child already exec'd, or is gone) only leaves the group as it was.
    let _ = nix::unistd::setpgid(pid, pid);
}

/// Makes process group `pgid` the terminal's foreground group when stdin is a terminal, so a
/// Ctrl-C reaches the guarded program and not its init. `SIGTTOU` is blocked for the call: a
/// caller in the background that catches it would otherwise be sent it, and retry, forever.
/// A failure changes nothing.
pub(crate) fn give_terminal_to(pgid: u32) {
    let stdin = std::io::stdin();
    if !nix::unistd::isatty(&stdin).unwrap_or(false) {
        return;
    }
    let Ok(old) = SigSet::from(Signal::SIGTTOU).thread_swap_mask(SigmaskHow::SIG_BLOCK) else {
        return;
    };
    let _ = nix::unistd::tcsetpgrp(&stdin, Pid::from_raw(pgid as i32));
    let _ = old.thread_set_mask();
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitStatus {
    Code(i32),
    Signal(i32),
}

/// Reaps every child that has ended, without waiting: `(pid, status)` for each.
pub(crate) fn reap_children() -> Vec<(u32, ExitStatus)> {
    use rustix::process::{wait, WaitOptions};
    let mut out = Vec::new();
    // `wait` is `waitpid(-1)`, any child (rustix's `waitpid(None)` is `waitpid(0)`, only
    // this process group's). None: no child has ended; Err: no child at all (ECHILD).
    while let Ok(Some((pid, status))) = wait(WaitOptions::NOHANG) {
        let how = match status.terminating_signal() {
            Some(signal) => ExitStatus::Signal(signal),
            None => ExitStatus::Code(status.exit_status().unwrap_or(0)),
        };
        out.push((pid.as_raw_nonzero().get() as u32, how));
    }
    out
}

/// Sends `signal` to process `pid`; a process already gone is not an error.
pub(crate) fn send_signal(pid: u32, signal: c_int) {
    if let (Some(pid), Ok(signal)) = (nix_pid(pid), Signal::try_from(signal)) {
        let _ = nix::sys::signal::kill(pid, signal);
    }
}

/// Hands back the pages of this program's own read-only mappings (its code and constants)
/// that start-up touched: they are clean copies of the executable, which the kernel re-reads
/// from the page cache if they are ever needed again. A long-lived idle process (the sidecar)
/// then holds only what it uses, not everything its start-up ran through (the command-line
/// parser, the config reader). Only mappings with no private copy in them are touched: never
/// a writable one, nor a read-only one that was written before it was sealed (the relocated
/// RELRO data). Returns the bytes released.
pub(crate) fn release_startup_pages() -> usize {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return 0;
    };
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (range, anonymous) in clean_mappings(&smaps, &exe) {
        if anonymous != 0 {
            continue;
        }
        let (start, end) = range;
        // SAFETY: the range is one whole mapping of this process, read from /proc/self/smaps:
        // the executable's, private, read-only and without a single private (written) page,
        // so MADV_DONTNEED only drops clean pages and the next access re-reads them, unchanged,
        // from the file. No memory anyone holds a reference into changes.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc == 0 {
            released += end - start;
        }
    }
    released
}

/// The executable's read-only mappings in `smaps`: each one's range and its `Anonymous:` size
/// (the pages that are private copies, not the file's).
fn clean_mappings(smaps: &str, exe: &std::path::Path) -> Vec<((usize, usize), u64)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some((start, end)) = first.split_once('-') {
            // A mapping's header: `start-end perms offset dev inode path`.
            let perms = fields.next().unwrap_or("");
            let path = fields.nth(3).unwrap_or("");
            current = match (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) {
                (Ok(s), Ok(e)) if std::path::Path::new(path) == exe && !perms.contains('w') => {
                    Some((s, e))
                }
                _ => None,
            };
        } else if first == "Anonymous:" {
            if let Some(range) = current.take() {
                let kib = fields
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(u64::MAX);
                out.push((range, kib));
            }
        }
    }
    out
}
