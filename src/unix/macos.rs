//! macOS's half of the platform layer, the same names as `linux.rs` ([`super`] says what each
//! is for). No Mac runs this crate's tests: each function here is small, written against
//! Apple's manual pages (cited in its docs) and type-checked and linted for
//! `aarch64-apple-darwin` and `x86_64-apple-darwin` on every CI run; everything above it is the
//! code Linux runs. Where a reading is uncertain, the answer is the one that keeps a guarded
//! program's sandboxes: unknown, never dead.
//!
//! - The owner's exit: a kqueue with one `EVFILT_PROC` / `NOTE_EXIT` filter on its pid
//!   (kqueue(2)); the kqueue's descriptor is readable while an event is pending, so tokio waits
//!   on it as on Linux's pidfd. No exit status: kqueue(2) gives `NOTE_EXITSTATUS` for a child
//!   only, and the sidecar is not the owner's parent.
//! - Processes: `proc_pidinfo(PROC_PIDTBSDINFO)` (libproc.h): the state and the start time.
//! - This host: `gethostuuid(2)` (the machine), `kern.bootsessionuuid` (this boot, sysctl(3));
//!   no pid namespaces.
//! - The clock that counts sleep: `CLOCK_MONOTONIC` (clock_gettime(3) on macOS: it "will
//!   continue to increment while the system is asleep"; `CLOCK_UPTIME_RAW`, behind
//!   `mach_absolute_time` and Rust's `Instant`, stops).
//! - The detached start: `fork` of the single-threaded wrapper for the process between, which
//!   starts the sidecar with `posix_spawn(2)`.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::sys::event::{EvFlags, EventFilter, FilterFlag, KEvent, Kqueue};

use super::ProcStat;

/// The platform, for what is not a call but a convention (where engines put their sockets).
pub(crate) const PLATFORM: super::Platform = super::Platform::MacOs;

/// The longest path a Unix socket can be bound at, in bytes: `sun_path` of `struct
/// sockaddr_un` (104 bytes, unix(4), `<sys/un.h>`) less the NUL that ends it.
pub(crate) const MAX_SOCKET_PATH: usize = 104 - 1;

/// What the exit watch is called in warnings.
pub(crate) const EXIT_WATCH: &str = "kqueue EVFILT_PROC";
/// What the fallback polls, in the same warnings.
pub(crate) const POLLED: &str = "proc_pidinfo";

/// A descriptor that becomes readable the moment `pid` exits: a new kqueue holding one
/// `EVFILT_PROC` filter for `NOTE_EXIT` on `pid`. kqueue(2): the filter is attached to the
/// process itself, so a later reuse of the pid does not reach it; registering on a process
/// that has already exited (a zombie included) fails with `ESRCH`, which the caller takes as
/// "gone". As with a pidfd, the caller re-reads the start time after this returns, so a pid
/// reused before the registration is caught.
pub(crate) fn watch_exit(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let queue = Kqueue::new()?;
    let exit = KEvent::new(
        pid as libc::uintptr_t,
        EventFilter::EVFILT_PROC,
        EvFlags::EV_ADD | EvFlags::EV_RECEIPT,
        FilterFlag::NOTE_EXIT,
        0,
        0,
    );
    // EV_RECEIPT: the registration's outcome comes back as one event with EV_ERROR set and
    // the error number (0 for success) in `data`, and no pending event is taken off the queue.
    let mut receipt = [exit];
    queue.kevent(&[exit], &mut receipt, None)?;
    let answer = receipt[0];
    if answer.flags().contains(EvFlags::EV_ERROR) && answer.data() != 0 {
        return Err(io::Error::from_raw_os_error(answer.data() as i32));
    }
    // A kqueue is close-on-exec by nature: kqueue(2) says it is not inherited by a child
    // created with fork, so it cannot leak into a program the sidecar starts.
    Ok(OwnedFd::from(queue))
}

/// None: a kqueue cannot be handed to another process (kqueue(2): not inherited by fork's
/// child), so the sidecar registers on the owner's pid itself and checks the start time after.
pub(crate) fn watch_self() -> Option<OwnedFd> {
    None
}

/// Unknown on macOS: `NOTE_EXITSTATUS` is for the watcher's own children only (kqueue(2)),
/// and the sidecar is nobody's parent. The owner "exited", with no status or signal.
pub(crate) fn exit_status(_watch: BorrowedFd<'_>) -> io::Result<Option<i32>> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// `pbi_status` of a process that has exited and waits for its parent to reap it (`SZOMB` in
/// `<sys/proc.h>`).
const SZOMB: u32 = 5;

/// The state and start time of `pid`, from `proc_pidinfo(pid, PROC_PIDTBSDINFO)`: the start
/// time is `pbi_start_tvsec` and `pbi_start_tvusec` as microseconds since the epoch (set once
/// when the process is made, never changed after). `None` when it cannot be read (no such
/// process; another user's that this one may not inspect): the caller then asks `kill(pid,
/// 0)`, and only `ESRCH` there is taken as gone.
pub(crate) fn process_stat(pid: u32) -> Option<ProcStat> {
    let info = bsd_info(pid)?;
    Some(ProcStat {
        exited: info.pbi_status == SZOMB,
        start_time: info
            .pbi_start_tvsec
            .saturating_mul(1_000_000)
            .saturating_add(info.pbi_start_tvusec),
    })
}

/// The user `pid` runs as: its real uid, `pbi_ruid` of `proc_pidinfo(pid, PROC_PIDTBSDINFO)`
/// (libproc.h), the user who started it (a set-user-id program keeps it). `None` when it
/// cannot be read.
pub(crate) fn process_uid(pid: u32) -> Option<u32> {
    bsd_info(pid).map(|info| info.pbi_ruid)
}

/// `proc_pidinfo(pid, PROC_PIDTBSDINFO)`: the process's BSD info (libproc.h); `None` when it
/// cannot be read (no such process; another user's that this one may not inspect).
fn bsd_info(pid: u32) -> Option<libc::proc_bsdinfo> {
    let pid = libc::c_int::try_from(pid).ok()?;
    // SAFETY: `proc_bsdinfo` is plain old data; all zeroes is a valid value of it.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: `info` is a live, writable buffer of `size` bytes; the kernel writes at most
    // that many and keeps no pointer to it.
    let wrote = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            std::ptr::addr_of_mut!(info).cast(),
            size,
        )
    };
    // proc_pidinfo returns the bytes written; anything short of the whole struct is no answer.
    (wrote == size).then_some(info)
}

/// This machine's id: `gethostuuid(2)`, the hardware UUID (the one System Information shows),
/// as hex digits. Waits at most a second for it.
pub(crate) fn machine_id() -> Option<String> {
    let mut uuid = [0u8; 16];
    let wait = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    // SAFETY: `uuid` is the 16 writable bytes gethostuuid(2) fills; `wait` lives across the call.
    let r = unsafe { libc::gethostuuid(uuid.as_mut_ptr(), &wait) };
    (r == 0 && uuid != [0; 16]).then(|| uuid.iter().map(|b| format!("{b:02x}")).collect())
}

/// This boot's id: `kern.bootsessionuuid`, a UUID the kernel makes at each boot (sysctl(3)).
pub(crate) fn boot_id() -> Option<String> {
    let mut buf = [0u8; 64];
    let mut len = buf.len();
    // SAFETY: the name is NUL-terminated; `buf` is `len` writable bytes, and the kernel writes
    // at most `len` and stores the length it wrote back in `len`.
    let r = unsafe {
        libc::sysctlbyname(
            c"kern.bootsessionuuid".as_ptr(),
            buf.as_mut_ptr().cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if r != 0 {
        return None;
    }
    let text = &buf[..len.min(buf.len())];
    Some(
        String::from_utf8_lossy(text)
            .trim_end_matches('\0')
            .to_string(),
    )
}

/// macOS has no pid namespaces: every process on the machine shares one pid space, named 0 so
/// that an owner recorded here compares equal to this machine's (the identity's label then
/// ends in `-0`).
pub(crate) fn pid_namespace() -> Option<u64> {
    Some(0)
}

/// `CLOCK_MONOTONIC`, which on macOS keeps counting while the machine sleeps (see the module
/// docs); zero if the call ever failed.
pub(crate) fn sleep_counting_clock() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(Duration::from)
        .unwrap_or_default()
}

/// A pipe whose two ends are close-on-exec: macOS has no `pipe2`, so the flag is set right
/// after `pipe`. A child that another thread forks in between could inherit the ends; the
/// processes that make pipes here (the wrapper, pid 1, the guard's caller before it starts
/// the sidecar) run no other thread that starts programs.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe()?;
    super::set_cloexec(r.as_fd(), true)?;
    super::set_cloexec(w.as_fd(), true)?;
    Ok((r, w))
}

/// The descriptors open in this process, from `/dev/fd` (fd(4): one entry per open
/// descriptor of the process reading it); `None` when it cannot be read.
pub(crate) fn open_descriptors() -> Option<Vec<RawFd>> {
    let dir = std::fs::read_dir("/dev/fd").ok()?;
    Some(
        dir.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

/// macOS has signals 1 to 31 (`NSIG` is 32) and no realtime ones.
pub(crate) fn signals_end() -> libc::c_int {
    32
}

/// None are kept by the C library.
pub(crate) fn reserved_signal(_signal: libc::c_int) -> bool {
    false
}

/// Starts the process between of a detached start by `fork(2)`: the wrapper is
/// single-threaded here, so the child's copy is consistent; it runs `between(arg)`, exits with
/// its result, and the caller waits for it. (`stack` is Linux's need: a fork has its own.)
///
/// # Safety
/// No other thread may run; `between` must only make system calls.
pub(super) unsafe fn start_between(
    between: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    _stack: *mut libc::c_void,
) -> io::Result<i32> {
    // SAFETY: as the caller guarantees, no other thread exists, so the child may run on.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        // SAFETY: the child runs `between` on its own copy of `arg`, then exits at once.
        0 => unsafe { libc::_exit(between(arg)) },
        pid => Ok(pid),
    }
}

/// In the process between, a fork with memory of its own: its signals put back
/// ([`super::process::reset_signals`]), then `posix_spawn(2)` of `path` with `argv` and this
/// process's environment, which inherits that mask and those dispositions. Whether it started.
///
/// # Safety
/// Called only in the process between, on NUL-terminated strings and a NULL-terminated
/// `argv` that live until it returns.
pub(super) unsafe fn start_last(
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
) -> bool {
    let mut pid: libc::pid_t = 0;
    // SAFETY: as the caller guarantees; `_NSGetEnviron` is this process's environment (crt_externs.h),
    // which posix_spawn only reads; no file actions nor attributes are passed.
    unsafe {
        super::process::reset_signals();
        libc::posix_spawn(
            &mut pid,
            path,
            std::ptr::null(),
            std::ptr::null(),
            argv as *const *mut libc::c_char,
            *libc::_NSGetEnviron() as *const *mut libc::c_char,
        ) == 0
    }
}

/// Nothing to hand back: the page release reads Linux's `/proc/self/smaps`. The sidecar keeps
/// the pages its start-up touched, which only its resident size shows.
pub(crate) fn release_startup_pages() -> usize {
    0
}
