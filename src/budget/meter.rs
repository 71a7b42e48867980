//! The sandbox time a session has used so far, kept by its sidecar as its holdings change:
//! what the `spend` limit is decided by ([`super::Slots::take`], and when it is reached,
//! [`Meter::reached_in`]).
//!
//! Decisions:
//! - **The same stretches as the ledger's spend** (`crate::ledger::spend`): a sandbox's time
//!   runs from its claim (or detach) to its release or removal; a detached sandbox keeps
//!   running, and so keeps counting. A resumed session starts from what its journal's story
//!   says ([`Meter::resumed`]), so a restart loses nothing.
//! - **Sandboxes only**: a Docker network or volume costs no sandbox time (the caller passes
//!   only what is a sandbox, as the `sandboxes` limit counts).
//! - **Measured from when the sidecar applied the claim** (its clock, in unix milliseconds),
//!   which is when the journal records it.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::protocol::Target;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Meter {
    /// Held now: since when (unix ms).
    open: BTreeMap<Target, u64>,
    /// The sum of `open`'s starts, so that the time used is O(1) however much is held.
    starts: u128,
    /// The time of every stretch that ended, per provider.
    closed: BTreeMap<String, Duration>,
}

impl Meter {
    /// A meter that starts from stretches already told: `(target, from_ms, to_ms)`, `to_ms`
    /// `None` for one still held.
    pub(crate) fn resumed(
        stretches: impl IntoIterator<Item = (Target, u64, Option<u64>)>,
    ) -> Meter {
        let mut meter = Meter::default();
        for (target, from, to) in stretches {
            match to {
                Some(to) => {
                    *meter.closed.entry(target.provider).or_default() +=
                        Duration::from_millis(to.saturating_sub(from));
                }
                None => meter.held(&target, from),
            }
        }
        meter
    }

    /// `target` is held from `at_ms` (a claim or a detach); one held already keeps its start.
    pub(crate) fn held(&mut self, target: &Target, at_ms: u64) {
        if !self.open.contains_key(target) {
            self.open.insert(target.clone(), at_ms);
            self.starts += u128::from(at_ms);
        }
    }

    /// What `ended` answers for is no longer held from `at_ms` (a release, a removal).
    pub(crate) fn ended(&mut self, ended: impl Fn(&Target) -> bool, at_ms: u64) {
        let (closed, starts) = (&mut self.closed, &mut self.starts);
        self.open.retain(|t, from| {
            if ended(t) {
                *closed.entry(t.provider.clone()).or_default() +=
                    Duration::from_millis(at_ms.saturating_sub(*from));
                *starts -= u128::from(*from);
                false
            } else {
                true
            }
        });
    }

    /// The sandbox time used until `now_ms`, in all (O(1) however much is held) or of one
    /// provider's sandboxes.
    pub(crate) fn used(&self, provider: Option<&str>, now_ms: u64) -> Duration {
        let Some(p) = provider else {
            let running =
                (self.open.len() as u128 * u128::from(now_ms)).saturating_sub(self.starts);
            return self.closed.values().sum::<Duration>()
                + Duration::from_millis(u64::try_from(running).unwrap_or(u64::MAX));
        };
        let mine = self.open.iter().filter(|(t, _)| t.provider == p);
        self.closed.get(p).copied().unwrap_or_default()
            + mine
                .map(|(_, from)| Duration::from_millis(now_ms.saturating_sub(*from)))
                .sum::<Duration>()
    }

    /// How many sandboxes run, in all or of one provider.
    fn running(&self, provider: Option<&str>) -> usize {
        match provider {
            None => self.open.len(),
            Some(p) => self.open.keys().filter(|t| t.provider == p).count(),
        }
    }

    /// How long from `now_ms` until `limit` is reached (in all, or by one provider's
    /// sandboxes) if nothing changes: zero when it is already, `None` when nothing of it is
    /// held (its time no longer grows).
    pub(crate) fn reached_in(
        &self,
        limit: Duration,
        provider: Option<&str>,
        now_ms: u64,
    ) -> Option<Duration> {
        let left = limit
            .checked_sub(self.used(provider, now_ms))
            .unwrap_or_default();
        if left.is_zero() {
            return Some(Duration::ZERO);
        }
        let running = u32::try_from(self.running(provider))
            .ok()
            .filter(|n| *n > 0)?;
        Some(left / running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(id: &str) -> Target {
        Target {
            provider: "docker".into(),
            id: id.into(),
        }
    }

    #[test]
    fn time_runs_while_held_and_stops_at_the_end() {
        let mut m = Meter::default();
        m.held(&t("a"), 1_000);
        m.held(&t("b"), 2_000);
        m.held(&t("a"), 5_000); // a detach of what was claimed: the stretch goes on
        assert_eq!(m.used(None, 3_000), Duration::from_millis(3_000));
        m.ended(|x| x.id == "a", 4_000);
        assert_eq!(m.used(None, 6_000), Duration::from_millis(3_000 + 4_000));
        // 10 s limit, 7 s used, one running: 3 s to go; two running: half that.
        assert_eq!(
            m.reached_in(Duration::from_secs(10), None, 6_000),
            Some(Duration::from_secs(3))
        );
        m.held(&t("c"), 6_000);
        assert_eq!(
            m.reached_in(Duration::from_secs(10), None, 6_000),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(
            m.reached_in(Duration::from_secs(5), None, 6_000),
            Some(Duration::ZERO)
        );
        m.ended(|_| true, 6_000);
        assert_eq!(
            m.reached_in(Duration::from_secs(10), None, 6_000),
            None,
            "nothing runs"
        );
    }

    #[test]
    fn a_resumed_meter_counts_what_the_journal_told() {
        let mut e2b = t("c");
        e2b.provider = "e2b".into();
        let m = Meter::resumed([
            (t("a"), 0, Some(2_000)),
            (t("b"), 1_000, None),
            (e2b, 2_000, None),
        ]);
        assert_eq!(
            m.used(None, 3_000),
            Duration::from_millis(2_000 + 2_000 + 1_000)
        );
        assert_eq!(m.used(Some("docker"), 3_000), Duration::from_millis(4_000));
        assert_eq!(m.used(Some("e2b"), 3_000), Duration::from_millis(1_000));
        assert_eq!(
            m.reached_in(Duration::from_secs(2), Some("e2b"), 3_000),
            Some(Duration::from_secs(1))
        );
    }
}
