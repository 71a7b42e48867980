//! Prices: what a sandbox's time is estimated to cost, from `[providers.NAME] price_per_hour`
//! and `[providers.NAME.prices]` (a price per hour for each size a create can name). Spend
//! ([`super::spend`]) multiplies each sandbox's time by its price; this module says which price
//! that is.
//!
//! Decisions:
//! - **Estimates, never bills.** A provider bills by its own meter (per second or per minute,
//!   CPU and memory apart, with free tiers and discounts); sandguard knows only how long each
//!   sandbox was held, from its claim to its removal. Every output that shows money says so:
//!   `~$0.07` in tables and lines, `estimate` in `--json`.
//! - **Read at report time.** Prices are not journaled: `sessions`, `sessions show`, `report`
//!   and the end-of-run line apply the prices of the configuration they run with to the whole
//!   of the time they count. A price changed today re-prices last week's sessions too: the
//!   estimate always says what that time costs at today's prices, and a session's journal
//!   stays a record of facts (times, sizes), never of tariffs.
//! - **The size, when the create named one.** The cloud proxy reads a sandbox's size from its
//!   create body (E2B: `templateID`; Daytona: `snapshot`; see `crate::proxy::cloud`) and the
//!   claim journals it (`size` on `claim`/`detach`). A sandbox whose size has a price in
//!   `[providers.NAME.prices]` costs that price; any other (no size known: claimed by
//!   `sandguard claim`, an SDK helper, the Docker proxy or another provider; or a size with no
//!   price listed) costs `price_per_hour`. A sandbox with neither has no price: its time is
//!   counted, and no money is made up for it ([`Prices::per_hour`] is `None`).
//! - **One currency, printed as `$`.** A price is a number per sandbox-hour in the currency
//!   the provider bills in; all six built-in providers bill in US dollars, so money prints
//!   with `$`. sandguard never converts.
//! - **Counted in billionths.** [`Money`] is a whole number of billionths of the currency,
//!   so adding never drifts and equal sums compare equal; each stretch of time is priced and
//!   rounded once, to the nearest billionth (a million stretches are off by a thousandth of a
//!   cent at most).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The prices of one provider.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProviderPrices {
    /// `price_per_hour`: the price of a sandbox whose size has none of its own.
    pub per_hour: Option<f64>,
    /// `[providers.NAME.prices]`: a price per hour for each size (template, snapshot, class).
    pub sizes: BTreeMap<String, f64>,
}

/// Every provider's prices, by provider name (plugins included).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prices {
    by_provider: BTreeMap<String, ProviderPrices>,
}

impl Prices {
    /// From each provider's prices; a provider with none is left out.
    pub(crate) fn new(by_provider: impl IntoIterator<Item = (String, ProviderPrices)>) -> Prices {
        Prices {
            by_provider: by_provider
                .into_iter()
                .filter(|(_, p)| p.per_hour.is_some() || !p.sizes.is_empty())
                .collect(),
        }
    }

    /// Whether any price is set: for `provider`, or (`None`) for any provider.
    pub(crate) fn any(&self, provider: Option<&str>) -> bool {
        match provider {
            None => !self.by_provider.is_empty(),
            Some(p) => self.by_provider.contains_key(p),
        }
    }

    /// The price per hour of a sandbox of `provider` of `size` (see the module docs): the
    /// size's own, else the provider's `price_per_hour`; `None`: it has no price.
    pub(crate) fn per_hour(&self, provider: &str, size: Option<&str>) -> Option<f64> {
        let p = self.by_provider.get(provider)?;
        size.and_then(|s| p.sizes.get(s).copied()).or(p.per_hour)
    }
}

/// An amount of money, in billionths of the currency (see the module docs).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Money(u64);

const NANOS: f64 = 1e9;

impl Money {
    /// `time` at `per_hour`, rounded to the nearest billionth.
    pub(crate) fn of(per_hour: f64, time: Duration) -> Money {
        let hours = time.as_secs_f64() / 3600.0;
        Money((per_hour * hours * NANOS).round() as u64)
    }

    /// As a number of the currency, for `--json`.
    pub(crate) fn amount(self) -> f64 {
        self.0 as f64 / NANOS
    }
}

impl std::ops::AddAssign for Money {
    fn add_assign(&mut self, other: Money) {
        self.0 = self.0.saturating_add(other.0);
    }
}

/// `~$0.07`: cents, an estimate's tilde before it; less than a cent but more than nothing is
/// `~<$0.01`, so a short run never reads as free.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cents = (self.amount() * 100.0).round() as u64;
        if cents == 0 && self.0 > 0 {
            return f.write_str("~<$0.01");
        }
        write!(f, "~${}.{:02}", cents / 100, cents % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prices() -> Prices {
        Prices::new([
            (
                "e2b".to_string(),
                ProviderPrices {
                    per_hour: Some(0.05),
                    sizes: [("gpu".to_string(), 2.0)].into(),
                },
            ),
            (
                "daytona".to_string(),
                ProviderPrices {
                    per_hour: None,
                    sizes: [("big".to_string(), 0.5)].into(),
                },
            ),
            ("docker".to_string(), ProviderPrices::default()),
        ])
    }

    #[test]
    fn a_size_has_its_own_price_else_the_providers() {
        let p = prices();
        assert_eq!(p.per_hour("e2b", Some("gpu")), Some(2.0));
        assert_eq!(
            p.per_hour("e2b", Some("base")),
            Some(0.05),
            "no price listed"
        );
        assert_eq!(p.per_hour("e2b", None), Some(0.05), "no size known");
        assert_eq!(p.per_hour("daytona", Some("big")), Some(0.5));
        assert_eq!(p.per_hour("daytona", None), None, "no price_per_hour");
        assert_eq!(p.per_hour("docker", None), None);
        assert_eq!(p.per_hour("modal", Some("gpu")), None);
        assert_ne!(p, Prices::default());
        assert_eq!(
            Prices::new([("docker".to_string(), ProviderPrices::default())]),
            Prices::default(),
            "a provider without prices is left out"
        );
    }

    #[test]
    fn money_is_exact_in_sums_and_prints_as_an_estimate() {
        let hour = Money::of(0.05, Duration::from_secs(3600));
        assert_eq!(hour.amount(), 0.05);
        let mut sum = Money::default();
        for _ in 0..60 {
            sum += Money::of(0.05, Duration::from_secs(60));
        }
        assert!(
            hour.0.abs_diff(sum.0) <= 60,
            "sixty minutes are an hour, each off by half a billionth at most: {sum:?}"
        );
        assert_eq!(
            Money::of(0.05, Duration::from_secs(5040)).to_string(),
            "~$0.07"
        );
        assert_eq!(
            Money::of(12.5, Duration::from_secs(3600)).to_string(),
            "~$12.50"
        );
        assert_eq!(
            Money::of(0.05, Duration::from_secs(3)).to_string(),
            "~<$0.01"
        );
        assert_eq!(Money::default().to_string(), "~$0.00");
        assert_eq!(Money::of(0.0, Duration::from_secs(3600)), Money::default());
    }
}
