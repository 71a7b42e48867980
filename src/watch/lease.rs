//! The lease: an owner that sends heartbeats (`renew`) is alive while they keep coming within
//! the grace.
//!
//! - Heartbeats are optional: until the first `renew` there is no lease, and no timer either
//!   (an idle sidecar wakes for nothing but events).
//! - The grace is measured on `CLOCK_BOOTTIME`, which keeps counting while the machine is
//!   suspended; tokio's timers run on `CLOCK_MONOTONIC`, which stops. So the timer only says
//!   *when to look*, at most every [`CHECK_EVERY`] of awake time, and the boot clock decides.
//!   A laptop that slept past the grace reclaims within that interval of waking.
//! - An expired lease stays expired: a late heartbeat does not revive it.
//! - The clock is injected ([`Clock`]) so tests cover expiry and suspend without waiting.

use std::time::Duration;

/// How often, at most, a running lease looks at the boot clock.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(5);

/// A clock that counts suspended time.
pub(crate) trait Clock: Send + Sync {
    /// Time since an arbitrary fixed point, including time spent suspended.
    fn now(&self) -> Duration;
}

/// The real `CLOCK_BOOTTIME`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BootClock;

impl Clock for BootClock {
    fn now(&self) -> Duration {
        crate::unix::sleep_counting_clock()
    }
}

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseState {
    /// No heartbeat yet: the owner is judged by its process alone.
    Off,
    /// Renewed last at this boot-clock time.
    Running { renewed_at: Duration },
    /// Expired; final.
    Expired,
}

/// The owner's lease.
pub(crate) struct Lease<C> {
    clock: C,
    grace: Duration,
    state: LeaseState,
}

impl<C: Clock> Lease<C> {
    pub(crate) fn new(clock: C, grace: Duration) -> Self {
        Lease {
            clock,
            grace,
            state: LeaseState::Off,
        }
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> LeaseState {
        self.state
    }

    /// Whether a timer is needed at all.
    pub(crate) fn is_running(&self) -> bool {
        matches!(self.state, LeaseState::Running { .. })
    }

    /// A heartbeat. Returns false (and changes nothing) when the lease has already expired.
    pub(crate) fn renew(&mut self) -> bool {
        if self.check_expired() {
            return false;
        }
        self.state = LeaseState::Running {
            renewed_at: self.clock.now(),
        };
        true
    }

    /// Looks at the clock; latches `Expired` once the grace has passed.
    pub(crate) fn check_expired(&mut self) -> bool {
        if let LeaseState::Running { renewed_at } = self.state {
            if self.clock.now().saturating_sub(renewed_at) >= self.grace {
                self.state = LeaseState::Expired;
            }
        }
        self.state == LeaseState::Expired
    }

    /// How long to sleep (in awake time) before looking again.
    pub(crate) fn next_check(&self) -> Duration {
        match self.state {
            LeaseState::Running { renewed_at } => {
                let left = (renewed_at + self.grace).saturating_sub(self.clock.now());
                left.min(CHECK_EVERY)
            }
            LeaseState::Off | LeaseState::Expired => CHECK_EVERY,
        }
    }
}

/// A clock tests move by hand, shared between the test and the lease.
#[cfg(test)]
#[derive(Debug, Clone, Default)]
pub(crate) struct ManualClock(std::sync::Arc<std::sync::atomic::AtomicU64>);

#[cfg(test)]
impl ManualClock {
    /// Moves the clock forward, as a suspend (or plain time passing) would.
    pub(crate) fn advance(&self, by: Duration) {
        self.0
            .fetch_add(by.as_nanos() as u64, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_heartbeat_no_lease() {
        let clock = ManualClock::default();
        let mut lease = Lease::new(clock.clone(), Duration::from_secs(600));
        clock.advance(Duration::from_secs(86_400));
        assert!(!lease.check_expired());
        assert!(!lease.is_running());
    }

    #[test]
    fn heartbeats_keep_it_and_silence_ends_it_for_good() {
        let clock = ManualClock::default();
        let mut lease = Lease::new(clock.clone(), Duration::from_secs(600));
        assert!(lease.renew());
        clock.advance(Duration::from_secs(599));
        assert!(!lease.check_expired());
        assert!(lease.renew());
        clock.advance(Duration::from_secs(599));
        assert!(!lease.check_expired());
        assert_eq!(lease.next_check(), Duration::from_secs(1));
        clock.advance(Duration::from_secs(1));
        assert!(lease.check_expired());
        assert!(!lease.renew(), "an expired lease stays expired");
        assert_eq!(lease.state(), LeaseState::Expired);
    }

    #[test]
    fn a_suspend_past_the_grace_expires_at_the_next_look() {
        let clock = ManualClock::default();
        let mut lease = Lease::new(clock.clone(), Duration::from_secs(600));
        lease.renew();
        assert_eq!(lease.next_check(), CHECK_EVERY);
        // The machine sleeps for an hour: no awake time passes, the boot clock jumps.
        clock.advance(Duration::from_secs(3600));
        assert!(lease.check_expired());
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = BootClock.now();
        let b = BootClock.now();
        assert!(b >= a && a > Duration::ZERO);
    }
}
