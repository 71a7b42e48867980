//! How the sidecar sees its owner die: by events, not by polling.
//!
//! - A pidfd on the owner (`pidfd_open`, Linux ≥ 5.3) becomes readable the moment the process
//!   exits; tokio's `AsyncFd` waits on it with no timer.
//! - The identity is re-read *after* the pidfd is open: if the pid already belongs to another
//!   process (the owner died and the pid was reused before we looked), the start time differs
//!   and the owner is judged dead at once. A pidfd refers to one process for good, so after
//!   that check no reuse can fool it.
//! - Where `pidfd_open` is unavailable (old kernels, seccomp), `/proc/PID/stat` is polled
//!   every [`POLL_EVERY`] as the fallback, with a warning.
//! - Only a proven death counts ([`Liveness::Dead`]): an owner whose identity cannot be
//!   checked (its `/proc` entry hidden) is watched on, never taken for gone.

use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::identity::{Identity, Liveness};

/// The fallback's polling interval.
pub const POLL_EVERY: Duration = Duration::from_millis(250);

/// Why the owner is considered gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// The process exited (seen by its pidfd or by polling).
    Exited,
    /// It was already gone, or the pid belongs to another process, when the watch began.
    GoneAtStart,
}

/// Prepared death source: call [`OwnerWatch::wait`] to wait for the owner's end.
pub enum OwnerWatch {
    Pidfd(AsyncFd<std::os::fd::OwnedFd>, Identity),
    Poll(Identity),
    AlreadyGone,
}

impl OwnerWatch {
    /// Opens the best death source for `owner`. Must run inside a tokio runtime.
    pub fn open(owner: &Identity) -> OwnerWatch {
        match crate::unix::pidfd_open(owner.pid) {
            Ok(fd) => {
                // Re-read after opening: the pidfd now pins one process; make sure it is ours.
                if owner.liveness() == Liveness::Dead {
                    return OwnerWatch::AlreadyGone;
                }
                match crate::unix::async_pidfd(fd) {
                    Ok(afd) => OwnerWatch::Pidfd(afd, owner.clone()),
                    Err(e) => {
                        tracing::warn!(
                            "cannot watch the owner's pidfd ({e}); polling /proc instead"
                        );
                        OwnerWatch::Poll(owner.clone())
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => OwnerWatch::AlreadyGone,
            Err(e) => {
                tracing::warn!(
                    "pidfd_open is unavailable ({e}); polling /proc every {POLL_EVERY:?} instead"
                );
                if owner.liveness() == Liveness::Dead {
                    OwnerWatch::AlreadyGone
                } else {
                    OwnerWatch::Poll(owner.clone())
                }
            }
        }
    }

    /// Resolves when the owner is gone.
    pub async fn wait(&mut self) -> Gone {
        match self {
            OwnerWatch::AlreadyGone => Gone::GoneAtStart,
            OwnerWatch::Pidfd(afd, owner) => match afd.readable().await {
                // Readable means exited; the guard is dropped without clearing readiness, so a
                // second call returns at once too.
                Ok(_) => Gone::Exited,
                Err(e) => {
                    tracing::warn!(
                        "waiting on the owner's pidfd failed ({e}); polling /proc instead"
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
        assert!(matches!(watch, OwnerWatch::Pidfd(..)));
        let gone = tokio::time::timeout(Duration::from_secs(5), watch.wait())
            .await
            .unwrap();
        assert_eq!(gone, Gone::Exited);
        child.wait().unwrap();
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
