//! How the sidecar sees its owner die: by events, not by polling. The event source is the
//! platform's exit watch (`crate::unix::watch_exit`: a pidfd on Linux ≥ 5.3, a kqueue
//! `EVFILT_PROC` filter on macOS), a descriptor that becomes readable the moment the process
//! exits; tokio's `AsyncFd` waits on it with no timer. Everything here is the same on both.
//!
//! - The identity is re-read *after* the watch is open: if the pid already belongs to another
//!   process (the owner died and the pid was reused before we looked), the start time differs
//!   and the owner is judged dead at once. The watch refers to one process for good, so after
//!   that check no reuse can fool it.
//! - Where the watch is unavailable (Linux before 5.3, a seccomp profile that refuses
//!   `pidfd_open`), the process table (`/proc/PID/stat`; `proc_pidinfo` on macOS) is polled
//!   every [`POLL_EVERY`] as the fallback, with a warning.
//! - Only a proven death counts ([`Liveness::Dead`]): an owner whose identity cannot be
//!   checked (its `/proc` entry hidden, another user's process on macOS) is watched on, never
//!   taken for gone.
//! - How the owner ended ([`Exit`]: its status, or the signal that killed it) is read from the
//!   watch by an [`ExitProbe`] (Linux ≥ 6.15: `PIDFD_INFO_EXIT`), which needs no parent: the
//!   sidecar is not the owner's parent. The kernel tells it only once the owner's parent has
//!   reaped it, which a shell or a supervisor does at once but which comes after the watch
//!   woke the sidecar. So the death is acted on at once and the status is learned beside the
//!   reclaim, never before it: the probe asks every [`PROBE_EVERY`] for at most
//!   [`PROBE_FOR`]. On an older kernel, on macOS (whose kqueue tells a parent only), by
//!   polling, for an owner gone before the watch began, or for a zombie nobody reaps in time,
//!   it is not known, and nothing is guessed: the owner "exited".

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::identity::{Identity, Liveness};
use crate::unix::{EXIT_WATCH, POLLED};

/// The fallback's polling interval.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(250);
/// How often an [`ExitProbe`] asks, and for how long at most.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(5);
pub(crate) const PROBE_FOR: Duration = Duration::from_secs(1);

/// How a process ended, as `waitpid(2)` would have told its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl Exit {
    /// Decodes a wait status; `None` for one that is neither an exit nor a kill.
    pub fn from_wait_status(status: i32) -> Option<Exit> {
        if libc::WIFEXITED(status) {
            Some(Exit::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(Exit::Signal(libc::WTERMSIG(status)))
        } else {
            None
        }
    }

    /// As the journal holds it: `(code, signal)`, one of them set.
    pub fn parts(self) -> (Option<i32>, Option<i32>) {
        match self {
            Exit::Code(code) => (Some(code), None),
            Exit::Signal(signal) => (None, Some(signal)),
        }
    }

    /// From the journal's `(code, signal)`; a signal wins, as only one is ever written.
    pub fn from_parts(code: Option<i32>, signal: Option<i32>) -> Option<Exit> {
        signal.map(Exit::Signal).or(code.map(Exit::Code))
    }

    /// What an owner that ended this way did, in plain words: `owner exited with status 3`,
    /// `owner killed by SIGKILL`; `owner exited` when it is not known.
    pub fn owner_words(exit: Option<Exit>) -> String {
        match exit {
            None => "owner exited".into(),
            Some(Exit::Code(code)) => format!("owner exited with status {code}"),
            Some(Exit::Signal(signal)) => match signal_name(signal) {
                Some(name) => format!("owner killed by {name}"),
                None => format!("owner killed by signal {signal}"),
            },
        }
    }
}

/// The name of a standard Linux signal (`SIGKILL`); `None` for a real-time or unknown one.
fn signal_name(signal: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(signal)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

/// Why the owner is considered gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The process exited (seen by its exit watch or by polling).
    Exited,
    /// It was already gone, or the pid belongs to another process, when the watch began.
    GoneAtStart,
}

/// Learns how the owner ended, from an exit watch of its own (see the module docs).
#[derive(Debug)]
pub(crate) struct ExitProbe(OwnedFd);

impl ExitProbe {
    /// How the owner ended, once its parent has reaped it; `None` when the kernel cannot
    /// tell, or has not within `within`.
    pub(crate) async fn wait(self, within: Duration) -> Option<Exit> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match crate::unix::exit_status(self.0.as_fd()) {
                Ok(Some(status)) => return Exit::from_wait_status(status),
                Err(_) => return None,
                Ok(None) if tokio::time::Instant::now() >= deadline => return None,
                Ok(None) => tokio::time::sleep(PROBE_EVERY).await,
            }
        }
    }
}

/// Prepared death source: call [`OwnerWatch::wait`] to wait for the owner's end.
pub(crate) enum OwnerWatch {
    /// The platform's exit watch, registered with tokio.
    Event(AsyncFd<std::os::fd::OwnedFd>, Identity),
    Poll(Identity),
    AlreadyGone,
}

impl OwnerWatch {
    /// Opens the best death source for `owner`. Must run inside a tokio runtime.
    pub(crate) fn open(owner: &Identity) -> OwnerWatch {
        match crate::unix::watch_exit(owner.pid) {
            Ok(fd) => {
                // Re-read after opening: the watch now pins one process; make sure it is ours.
                if owner.liveness() == Liveness::Dead {
                    return OwnerWatch::AlreadyGone;
                }
                match crate::unix::async_exit_watch(fd) {
                    Ok(afd) => OwnerWatch::Event(afd, owner.clone()),
                    Err(e) => {
                        tracing::warn!(
                            "cannot wait on the owner's {EXIT_WATCH} ({e}); polling {POLLED} instead"
                        );
                        OwnerWatch::Poll(owner.clone())
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => OwnerWatch::AlreadyGone,
            Err(e) => {
                tracing::warn!(
                    "{EXIT_WATCH} is unavailable ({e}); polling {POLLED} every {POLL_EVERY:?} instead"
                );
                if owner.liveness() == Liveness::Dead {
                    OwnerWatch::AlreadyGone
                } else {
                    OwnerWatch::Poll(owner.clone())
                }
            }
        }
    }

    /// Watches `owner` through `watch`, an exit watch the owner opened of itself and handed
    /// over (the wrapper's, `crate::watch::start::handoff`; `crate::unix::watch_self`, a pidfd,
    /// so Linux only): it names that very process whatever
    /// became of its pid since, so no identity check is needed, and how it exited can still be
    /// read after its parent reaped it.
    pub(crate) fn open_handed(watch: std::os::fd::OwnedFd, owner: &Identity) -> OwnerWatch {
        match crate::unix::async_exit_watch(watch) {
            Ok(afd) => OwnerWatch::Event(afd, owner.clone()),
            Err(e) => {
                tracing::warn!(
                    "cannot wait on the owner's {EXIT_WATCH} ({e}); watching its pid instead"
                );
                OwnerWatch::open(owner)
            }
        }
    }

    /// A probe of how the owner ends, where an exit watch watches it (a second descriptor of
    /// the same watch, so the watch can be moved into its own future).
    pub(crate) fn exit_probe(&self) -> Option<ExitProbe> {
        match self {
            OwnerWatch::Event(afd, _) => afd.get_ref().try_clone().ok().map(ExitProbe),
            _ => None,
        }
    }

    /// Resolves when the owner is gone.
    pub(crate) async fn wait(&mut self) -> Gone {
        match self {
            OwnerWatch::AlreadyGone => Gone::GoneAtStart,
            OwnerWatch::Event(afd, owner) => match afd.readable().await {
                // Readable means exited; the guard is dropped without clearing readiness, so a
                // second call returns at once too.
                Ok(_) => Gone::Exited,
                Err(e) => {
                    tracing::warn!(
                        "waiting on the owner's {EXIT_WATCH} failed ({e}); polling {POLLED} instead"
                    );
                    poll_until_gone(owner).await
                }
            },
            OwnerWatch::Poll(owner) => poll_until_gone(owner).await,
        }
    }
}

async fn poll_until_gone(owner: &Identity) -> Gone {
    let mut tick = tokio::time::interval(POLL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if owner.liveness() == Liveness::Dead {
            return Gone::Exited;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_that_exits_is_seen_by_its_pidfd() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let owner = Identity::of_pid(child.id()).unwrap();
        let mut watch = OwnerWatch::open(&owner);
        assert!(matches!(watch, OwnerWatch::Event(..)));
        let gone = tokio::time::timeout(Duration::from_secs(5), watch.wait())
            .await
            .unwrap();
        assert_eq!(gone, Gone::Exited);
        child.wait().unwrap();
    }

    /// Whether this kernel tells a pidfd's holder the exit status (`PIDFD_INFO_EXIT`, Linux
    /// 6.15), judged by its release, apart from the code under test.
    fn exit_status_supported() -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut numbers = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let (major, minor) = (numbers.next().unwrap(), numbers.next().unwrap());
        (major, minor) >= (6, 15)
    }

    /// Runs `script` as a child watched as an owner (killed, with `kill`), reaps it
    /// `reap_after` ms after its death (past the bound, for `None`), and returns what the probe
    /// learned within `within` ms.
    async fn probed(
        script: &str,
        kill: bool,
        reap_after: Option<u64>,
        within: u64,
    ) -> Option<Exit> {
        // The script waits for its stdin to close, so it is alive while the watch opens.
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("read _ ; {script}")])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let owner = Identity::of_pid(child.id()).unwrap();
        let mut watch = OwnerWatch::open(&owner);
        let probe = watch.exit_probe().expect("a pidfd watch has a probe");
        drop(child.stdin.take());
        if kill {
            child.kill().unwrap();
        }
        assert_eq!(watch.wait().await, Gone::Exited);
        let reaper = std::thread::spawn(move || {
            let ms = reap_after.unwrap_or(within + 100);
            std::thread::sleep(Duration::from_millis(ms));
            child.wait().unwrap();
        });
        let exit = probe.wait(Duration::from_millis(within)).await;
        reaper.join().unwrap();
        exit
    }

    #[tokio::test]
    async fn the_probe_learns_the_status_or_the_signal_once_the_parent_reaps() {
        let supported = exit_status_supported();
        let exited = probed("exit 3", false, Some(50), 1000).await;
        let killed = probed("sleep 60", true, Some(0), 1000).await;
        // A zombie nobody reaps within the bound: not known, and the probe gives up.
        let zombie = probed("exit 4", false, None, 100).await;
        if supported {
            assert_eq!(exited, Some(Exit::Code(3)));
            assert_eq!(killed, Some(Exit::Signal(libc::SIGKILL)));
        } else {
            assert_eq!((exited, killed), (None, None));
        }
        assert_eq!(zombie, None);
    }

    #[test]
    fn wait_statuses_are_told_in_plain_words() {
        let words = |s| Exit::owner_words(Exit::from_wait_status(s));
        assert_eq!(words(3 << 8), "owner exited with status 3");
        assert_eq!(words(0), "owner exited with status 0");
        assert_eq!(words(9), "owner killed by SIGKILL");
        assert_eq!(words(15 | 0x80), "owner killed by SIGTERM", "core dumped");
        assert_eq!(words(34), "owner killed by signal 34");
        assert_eq!(Exit::owner_words(None), "owner exited");
        // Stopped (0x7f) is neither an exit nor a kill.
        assert_eq!(Exit::from_wait_status((19 << 8) | 0x7f), None);
    }

    #[tokio::test]
    async fn a_reused_pid_is_not_the_owner() {
        let me = Identity::current().unwrap();
        let impostor = Identity {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(matches!(
            OwnerWatch::open(&impostor),
            OwnerWatch::AlreadyGone
        ));
    }

    #[tokio::test]
    async fn a_pid_that_does_not_exist_is_gone() {
        let me = Identity::current().unwrap();
        let ghost = Identity {
            pid: 4_194_303,
            ..me
        };
        let mut w = OwnerWatch::open(&ghost);
        assert_eq!(w.wait().await, Gone::GoneAtStart);
    }
}
