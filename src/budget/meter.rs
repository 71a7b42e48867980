//! What a session has spent so far, kept by its sidecar as its holdings change: the sandbox
//! time, and its estimated cost where prices are set. What the `spend` limit is decided by
//! ([`super::Slots::take`], and when it is reached, [`Meter::reached_in`]).
//!
//! Decisions:
//! - **The same stretches as the ledger's spend** (`crate::ledger::spend`): a sandbox's time
//!   runs from its claim (or detach) to its release or removal; a detached sandbox keeps
//!   running, and so keeps counting. A resumed session starts from what its journal's story
//!   says ([`Meter::resumed`]), so a restart loses nothing.
//! - **The same prices as the reports** (`crate::ledger::price`): each sandbox is priced when
//!   it is first held, by its provider and the size its create named; one with no price costs
//!   nothing toward a money limit (its time still counts toward a time limit).
//! - **Sandboxes only**: a Docker network or volume costs no sandbox time (the caller passes
//!   only what is a sandbox, as the `sandboxes` limit counts).
//! - **Measured from when the sidecar applied the claim** (its clock, in unix milliseconds),
//!   which is when the journal records it.
//! - **Time is O(1) to read, money O(held)**: the sum of the starts is kept for time; money
//!   is summed over what is held, read only under a money limit.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Spend;
use crate::ledger::price::Money;
use crate::protocol::Target;

/// One sandbox held now: since when (unix ms), and its price per hour, if it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Open {
    from: u64,
    per_hour: Option<f64>,
}

/// What ended, per provider.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Closed {
    time: Duration,
    cost: Money,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Meter {
    open: BTreeMap<Target, Open>,
    /// The sum of `open`'s starts, so that the time used is O(1) however much is held.
    starts: u128,
    closed: BTreeMap<String, Closed>,
}

/// One stretch a journal told: its sandbox, its price per hour, from and (if it ended) to,
/// unix ms.
pub(crate) type Told = (Target, Option<f64>, u64, Option<u64>);

impl Meter {
    /// A meter that starts from stretches already told.
    pub(crate) fn resumed(stretches: impl IntoIterator<Item = Told>) -> Meter {
        let mut meter = Meter::default();
        for (target, per_hour, from, to) in stretches {
            match to {
                Some(to) => {
                    let time = Duration::from_millis(to.saturating_sub(from));
                    let closed = meter.closed.entry(target.provider).or_default();
                    closed.time += time;
                    closed.cost += per_hour.map(|p| Money::of(p, time)).unwrap_or_default();
                }
                None => meter.held(&target, from, per_hour),
            }
        }
        meter
    }

    /// `target` is held from `at_ms` at `per_hour` (a claim or a detach); one held already
    /// keeps its start and price.
    pub(crate) fn held(&mut self, target: &Target, at_ms: u64, per_hour: Option<f64>) {
        if !self.open.contains_key(target) {
            let open = Open {
                from: at_ms,
                per_hour,
            };
            self.open.insert(target.clone(), open);
            self.starts += u128::from(at_ms);
        }
    }

    /// What `ended` answers for is no longer held from `at_ms` (a release, a removal).
    pub(crate) fn ended(&mut self, ended: impl Fn(&Target) -> bool, at_ms: u64) {
        let (closed, starts) = (&mut self.closed, &mut self.starts);
        self.open.retain(|t, open| {
            if !ended(t) {
                return true;
            }
            let time = Duration::from_millis(at_ms.saturating_sub(open.from));
            let c = closed.entry(t.provider.clone()).or_default();
            c.time += time;
            c.cost += open
                .per_hour
                .map(|p| Money::of(p, time))
                .unwrap_or_default();
            *starts -= u128::from(open.from);
            false
        });
    }

    /// What was spent until `now_ms`, in all or by one provider's sandboxes, measured as
    /// `like` is (time, or money).
    pub(crate) fn used(&self, like: Spend, provider: Option<&str>, now_ms: u64) -> Spend {
        match like {
            Spend::Time(_) => Spend::Time(self.time(provider, now_ms)),
            Spend::Cost(_) => Spend::Cost(self.cost(provider, now_ms).amount()),
        }
    }

    fn time(&self, provider: Option<&str>, now_ms: u64) -> Duration {
        let closed = self.closed_of(provider).map(|c| c.time).sum::<Duration>();
        let Some(p) = provider else {
            let running =
                (self.open.len() as u128 * u128::from(now_ms)).saturating_sub(self.starts);
            return closed + Duration::from_millis(u64::try_from(running).unwrap_or(u64::MAX));
        };
        closed
            + self
                .open_of(Some(p))
                .map(|o| Duration::from_millis(now_ms.saturating_sub(o.from)))
                .sum::<Duration>()
    }

    fn cost(&self, provider: Option<&str>, now_ms: u64) -> Money {
        let mut cost = Money::default();
        for c in self.closed_of(provider) {
            cost += c.cost;
        }
        for o in self.open_of(provider) {
            if let Some(p) = o.per_hour {
                cost += Money::of(p, Duration::from_millis(now_ms.saturating_sub(o.from)));
            }
        }
        cost
    }

    fn closed_of<'a>(&'a self, provider: Option<&'a str>) -> impl Iterator<Item = &'a Closed> {
        self.closed
            .iter()
            .filter(move |(p, _)| provider.is_none_or(|x| x == p.as_str()))
            .map(|(_, c)| c)
    }

    fn open_of<'a>(&'a self, provider: Option<&'a str>) -> impl Iterator<Item = &'a Open> {
        self.open
            .iter()
            .filter(move |(t, _)| provider.is_none_or(|x| x == t.provider))
            .map(|(_, o)| o)
    }

    /// How long from `now_ms` until `limit` is reached (in all, or by one provider's
    /// sandboxes) if nothing changes: zero when it is already, `None` when nothing held
    /// makes it grow (nothing of it is held, or, for money, nothing held has a price).
    pub(crate) fn reached_in(
        &self,
        limit: Spend,
        provider: Option<&str>,
        now_ms: u64,
    ) -> Option<Duration> {
        match limit {
            Spend::Time(limit) => {
                let left = limit
                    .checked_sub(self.time(provider, now_ms))
                    .unwrap_or_default();
                if left.is_zero() {
                    return Some(Duration::ZERO);
                }
                let running = u32::try_from(self.open_of(provider).count())
                    .ok()
                    .filter(|n| *n > 0)?;
                Some(left / running)
            }
            Spend::Cost(limit) => {
                let left = limit - self.cost(provider, now_ms).amount();
                if left <= 0.0 {
                    return Some(Duration::ZERO);
                }
                let per_hour: f64 = self.open_of(provider).filter_map(|o| o.per_hour).sum();
                (per_hour > 0.0).then(|| Duration::from_secs_f64(left / per_hour * 3600.0))
            }
        }
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

    const TIME: Spend = Spend::Time(Duration::ZERO);

    fn secs(m: &Meter, provider: Option<&str>, now: u64) -> Duration {
        match m.used(TIME, provider, now) {
            Spend::Time(d) => d,
            Spend::Cost(_) => unreachable!(),
        }
    }

    #[test]
    fn time_runs_while_held_and_stops_at_the_end() {
        let mut m = Meter::default();
        m.held(&t("a"), 1_000, None);
        m.held(&t("b"), 2_000, None);
        m.held(&t("a"), 5_000, None); // a detach of what was claimed: the stretch goes on
        assert_eq!(secs(&m, None, 3_000), Duration::from_millis(3_000));
        m.ended(|x| x.id == "a", 4_000);
        assert_eq!(secs(&m, None, 6_000), Duration::from_millis(3_000 + 4_000));
        // 10 s limit, 7 s used, one running: 3 s to go; two running: half that.
        let ten = Spend::Time(Duration::from_secs(10));
        assert_eq!(m.reached_in(ten, None, 6_000), Some(Duration::from_secs(3)));
        m.held(&t("c"), 6_000, None);
        assert_eq!(
            m.reached_in(ten, None, 6_000),
            Some(Duration::from_millis(1_500))
        );
        let five = Spend::Time(Duration::from_secs(5));
        assert_eq!(m.reached_in(five, None, 6_000), Some(Duration::ZERO));
        m.ended(|_| true, 6_000);
        assert_eq!(m.reached_in(ten, None, 6_000), None, "nothing runs");
    }

    #[test]
    fn money_counts_what_has_a_price_and_when_it_runs_out() {
        let mut m = Meter::default();
        m.held(&t("priced"), 0, Some(3.6)); // a thousandth of the currency a second
        m.held(&t("free"), 0, None);
        assert_eq!(m.used(Spend::Cost(0.0), None, 10_000), Spend::Cost(0.01));
        let cent = Spend::Cost(0.02);
        assert_eq!(
            m.reached_in(cent, None, 10_000),
            Some(Duration::from_secs(10))
        );
        m.ended(|x| x.id == "priced", 10_000);
        assert_eq!(
            m.reached_in(cent, None, 20_000),
            None,
            "nothing held has a price"
        );
        assert_eq!(m.used(Spend::Cost(0.0), None, 20_000), Spend::Cost(0.01));
        assert_eq!(secs(&m, None, 20_000), Duration::from_secs(10 + 20));
    }

    #[test]
    fn a_resumed_meter_counts_what_the_journal_told() {
        let mut e2b = t("c");
        e2b.provider = "e2b".into();
        let m = Meter::resumed([
            (t("a"), None, 0, Some(2_000)),
            (t("b"), None, 1_000, None),
            (e2b, Some(3.6), 2_000, None),
        ]);
        assert_eq!(
            secs(&m, None, 3_000),
            Duration::from_millis(2_000 + 2_000 + 1_000)
        );
        assert_eq!(
            secs(&m, Some("docker"), 3_000),
            Duration::from_millis(4_000)
        );
        assert_eq!(secs(&m, Some("e2b"), 3_000), Duration::from_millis(1_000));
        let two = Spend::Time(Duration::from_secs(2));
        assert_eq!(
            m.reached_in(two, Some("e2b"), 3_000),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            m.used(Spend::Cost(0.0), Some("e2b"), 3_000),
            Spend::Cost(0.001)
        );
    }
}
