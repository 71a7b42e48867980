//! Linux's half of the platform layer ([`super`] says what each call is for; `macos.rs` is the
//! other half, with the same names): the owner's exit by pidfd, processes and this host as
//! `/proc` tells them, `CLOCK_BOOTTIME`, `pipe2`, the detached start by
//! `clone(CLONE_VM | CLONE_VFORK)`, and the start-up pages handed back.
//!
//! rustix for `pidfd_open` (nix has none); `PIDFD_GET_INFO` has no wrapper anywhere: a raw
//! ioctl, with nix computing its request number.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use super::ProcStat;

/// The platform, for what is not a call but a convention (where engines put their sockets).
pub(crate) const PLATFORM: super::Platform = super::Platform::Linux;

/// The longest path a Unix socket can be bound at, in bytes: `sun_path` of `struct
/// sockaddr_un` (108 bytes, unix(7), `UNIX_PATH_MAX`) less the NUL that ends it (std refuses
/// a path that leaves no room for it).
pub(crate) const MAX_SOCKET_PATH: usize = 108 - 1;

/// What the exit watch is called in warnings (`… is unavailable (ENOSYS); polling …`).
pub(crate) const EXIT_WATCH: &str = "pidfd_open";
/// What the fallback polls, in the same warnings.
pub(crate) const POLLED: &str = "/proc";

/// A descriptor that becomes readable the moment `pid` exits: `pidfd_open(2)` (Linux ≥ 5.3).
/// `Err` with `ESRCH` when there is no such process, `ENOSYS` on older kernels. A pidfd names
/// one process for good: once the caller has checked, after opening, that the pid is still
/// its owner's, no reuse of the pid can fool it.
pub(crate) fn watch_exit(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// An exit watch of this very process that another process can be handed: a pidfd of itself.
/// It names this process whatever becomes of its pid, and its exit status stays readable.
pub(crate) fn watch_self() -> Option<OwnedFd> {
    watch_exit(std::process::id()).ok()
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

/// The wait status (as `waitpid(2)` encodes it) of the process an exit watch refers to:
/// `PIDFD_GET_INFO` asking for `PIDFD_INFO_EXIT` (Linux ≥ 6.15). Whoever holds the pidfd may
/// read it, not only the parent, but only once the parent has reaped the process:
/// `Ok(None)` while it runs or is a zombie. `Err` where the kernel cannot tell: no
/// `PIDFD_GET_INFO` (`ENOTTY`, `EINVAL`), or a kernel without the exit information whose
/// process was reaped (`ESRCH`).
pub(crate) fn exit_status(watch: BorrowedFd<'_>) -> io::Result<Option<i32>> {
    use std::os::fd::AsRawFd;
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: `info` is a live, writable `struct pidfd_info` of the size the request number
    // encodes; the kernel writes at most that many bytes into it and keeps no pointer to it.
    let r = unsafe {
        libc::ioctl(
            watch.as_raw_fd(),
            PIDFD_GET_INFO,
            std::ptr::addr_of_mut!(info),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code))
}

/// `/proc/PID/stat`'s state and start time; `None` when it cannot be read (no such process,
/// or hidden by `hidepid`).
pub(crate) fn process_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the fields after the *last* `)`: the command name may itself contain spaces and
/// parentheses. Field 3 is the state (`Z` zombie, `X` dead: exited, not yet reaped), field 22
/// the start time in clock ticks after boot.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3, so field N is at index N - 3.
    let state = fields.first()?.chars().next()?;
    let start_time = fields.get(22 - 3)?.parse().ok()?;
    Some(ProcStat {
        exited: matches!(state, 'Z' | 'X'),
        start_time,
    })
}

/// The user `pid` runs as: its real uid, the first of the four on the `Uid:` line of
/// `/proc/PID/status` (proc(5): real, effective, saved set, filesystem), the user who started
/// it (a set-user-id program keeps it). `None` when it cannot be read (no such process, or
/// hidden by `hidepid`).
pub(crate) fn process_uid(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_uid(&text)
}

/// The real uid in the text of a `/proc/PID/status`.
fn parse_uid(text: &str) -> Option<u32> {
    let ids = text.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    ids.split_whitespace().next()?.parse().ok()
}

/// This machine's id as the OS keeps it: `/etc/machine-id` (systemd's), else D-Bus's copy.
pub(crate) fn machine_id() -> Option<String> {
    ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
}

/// This boot's id: a random UUID the kernel makes at boot.
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()
}

/// The inode of this process's pid namespace; `None` when `/proc/self/ns/pid` cannot be read.
pub(crate) fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// `CLOCK_BOOTTIME`: monotonic, and unlike `CLOCK_MONOTONIC` it keeps counting while the
/// machine is suspended. It exists on every Linux since 2.6.39, so the call cannot fail; zero
/// if it ever did.
pub(crate) fn sleep_counting_clock() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(Duration::from)
        .unwrap_or_default()
}

/// A pipe whose two ends are close-on-exec from birth (`pipe2(O_CLOEXEC)`), so no child
/// started meanwhile by another thread inherits it.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// The descriptors open in this process, from `/proc/self/fd`; `None` when it cannot be read.
pub(crate) fn open_descriptors() -> Option<Vec<RawFd>> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

/// The signals numbered below this one are the classic ones; from it on, the realtime ones,
/// which pid 1 does not forward (nix cannot name them).
pub(crate) fn signals_end() -> libc::c_int {
    libc::SIGRTMIN()
}

/// Signals the C library keeps for itself (glibc's 32 and 33, for threads and `setxid`).
pub(crate) fn reserved_signal(signal: libc::c_int) -> bool {
    matches!(signal, 32 | 33)
}

/// Starts the process between of a detached start (`super::process::spawn_detached`),
/// running `between(arg)` on `stack`, and returns its pid once it has exited: it shares this
/// process's memory (`clone(CLONE_VM | CLONE_VFORK)`, as glibc's posix_spawn does: no copy of
/// the address space to make, none to tear down), and this thread is suspended until it exits.
///
/// # Safety
/// `between` may only make system calls on what `arg` points to, which must stay alive until
/// this returns; no other thread may run meanwhile; `stack` must be the top of a live,
/// writable allocation the caller keeps until this returns.
pub(super) unsafe fn start_between(
    between: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack: *mut libc::c_void,
) -> io::Result<i32> {
    // SAFETY: as the caller guarantees; CLONE_VFORK suspends this thread until the process
    // between has exited, so `arg` and `stack` outlive it.
    let pid = unsafe {
        libc::clone(
            between,
            stack,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// In the process between: starts the last process, which execs `path` with `argv`, and
/// returns whether it started. A plain fork by system call (no library fork handlers in a
/// process sharing its parent's memory): the last process gets its own copy, puts its
/// signals back ([`super::process::reset_signals`]), and only execs or exits 127.
///
/// # Safety
/// Called only in the process between, on strings and pointers that live until it exits.
pub(super) unsafe fn start_last(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> bool {
    // SAFETY: as the caller guarantees; the child only execs or exits.
    unsafe {
        match libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0) {
            0 => {
                super::process::reset_signals();
                libc::execv(path, argv);
                libc::_exit(127)
            }
            n => n > 0,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 120 0 0 0 1 0 0 0 20 0 1 0 987654 1000 100 18446744073709551615";

    #[test]
    fn stat_is_read_after_the_last_parenthesis() {
        assert_eq!(
            parse_stat(STAT),
            Some(ProcStat {
                exited: false,
                start_time: 987654
            })
        );
        let zombie = STAT.replace(") S ", ") Z ");
        assert!(parse_stat(&zombie).unwrap().exited);
        assert!(parse_stat("12 (x) S 1").is_none());
    }

    #[test]
    fn the_real_uid_is_the_first_of_the_uid_line() {
        let status =
            "Name:\tsleep\nUmask:\t0022\nUid:\t65534\t0\t0\t0\nGid:\t65534\t65534\t65534\t65534\n";
        assert_eq!(parse_uid(status), Some(65534));
        assert_eq!(parse_uid("Name:\tx\n"), None);
        assert_eq!(
            process_uid(std::process::id()),
            Some(nix::unistd::getuid().as_raw())
        );
    }
}
