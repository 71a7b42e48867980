//! The one backoff: how long to wait before trying again, for every retry in sandguard (a
//! removal or a listing in a reclaim, a provider's read, the sidecar's fleet store, a claim
//! polling its journal).
//!
//! Decisions:
//! - **Exponential, capped**: `initial * 2^(attempt-1)`, at most `max`; attempt 1 waits
//!   `initial`. The doubling stops growing after 20 attempts (no overflow, whatever the cap).
//! - **Jitter only where many callers retry at once** ([`Backoff::jittered`]: "equal jitter",
//!   a uniform pick in `[d/2, d]`): the reclaim path, where a fleet of sidecars and sweeps hit
//!   one provider after the same outage. A single caller's own wait (a read, a poll) is
//!   exact, so its tests can count on it.
//! - A provider's own hint (`Retry-After`) is not this module's: the caller weighs it against
//!   the backoff, since each one decides differently (a reclaim waits the longer of the two, a
//!   read the hint, capped).

use std::time::Duration;

/// A backoff schedule; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub max: Duration,
    pub jitter: bool,
}

impl Backoff {
    /// Doubling from `initial`, capped at `max`, exact.
    pub(crate) const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            jitter: false,
        }
    }

    /// The same, with equal jitter.
    pub(crate) const fn jittered(self) -> Backoff {
        Backoff {
            jitter: true,
            ..self
        }
    }

    /// How long to wait after failed attempt `attempt` (counting from 1).
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << (attempt.max(1) - 1).min(20));
        let capped = exp.min(self.max);
        if !self.jitter {
            return capped;
        }
        let half = capped / 2;
        half + half.mul_f64(uniform())
    }
}

/// A uniform number in `[0, 1)` from the kernel's random source (`0.5` if it cannot be read).
fn uniform() -> f64 {
    let mut b = [0u8; 8];
    if crate::unix::random_bytes(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn it_doubles_from_initial_and_stops_at_the_cap() {
        let b = Backoff::new(Duration::from_millis(250), Duration::from_secs(1));
        let got: Vec<u128> = (1..=5).map(|a| b.delay(a).as_millis()).collect();
        assert_eq!(got, [250, 500, 1000, 1000, 1000]);
        assert_eq!(b.delay(0), Duration::from_millis(250));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_in_the_upper_half_and_varies() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).jittered();
        for attempt in 1..40 {
            let exact = Backoff { jitter: false, ..b }.delay(attempt);
            let d = b.delay(attempt);
            assert!(d >= exact / 2 && d <= exact, "attempt {attempt}: {d:?}");
        }
        let draws: HashSet<Duration> = (0..50).map(|_| b.delay(10)).collect();
        assert!(draws.len() > 10, "no jitter: {draws:?}");
    }
}
