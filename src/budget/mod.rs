//! Budgets: the limits a session carries, and the one decision whether a create may go ahead
//! (DESIGN's "Budgets"). This module is the decision and its bookkeeping only, no I/O: the
//! sidecar holds a session's [`Slots`] (folded from its journal on resume,
//! [`crate::ledger::SessionView::slots`]), and the proxies' create pipeline asks it at its
//! *decide* step (`crate::proxy::create`), before the create reaches the provider.
//!
//! A create that a limit counts takes a **slot** first ([`Slots::take`]): decided against the
//! limits and the sandboxes the session holds now, and journaled (`slot`, with the slot's
//! number) before the create is forwarded. Its end is journaled too (`slot_done`): `made`
//! when the provider made the sandbox (its claim is then journaled as any proxy claim), not
//! made when the create failed, which gives the slot back.
//!
//! Decisions:
//! - **A slot is written before the create is forwarded, made durable with its claim**: the
//!   `slot` record is in the journal file before the answer (a sidecar that is killed keeps
//!   it, the kernel has it), and the claim's fdatasync after the create covers it. Only a
//!   machine that crashes in between loses it, and with it the program that asked, whose
//!   session is then over: a sync of its own would add an fdatasync to every limited create
//!   and protect nothing a later decision reads.
//! - **`sandboxes` counts what the session holds now plus the slots still open**: two
//!   concurrent creates racing for the last slot cannot both pass, since each takes its slot
//!   before either is forwarded, one decision at a time.
//! - **`creates` counts every slot that made a sandbox, and every slot still open**: a failed
//!   create gives its slot back and does not count; a looping agent is bounded by what it
//!   made.
//! - **A slot left open by a crash** (the sidecar died between the decision and the create's
//!   answer) counts as one create made and one sandbox alive until the session ends: whether
//!   the create happened is unknown, and over-counting by one is the safe side of a budget
//!   (the count is never lost across a restart).
//! - **A refusal is on the record, without a sync of its own**: a create a limit refuses is
//!   counted per provider and limit ([`Refused`], in the slots, so a resumed sidecar counts
//!   on) and journaled (`create_refused`) at each doubling of its count and at the session's
//!   end ([`refusals`] says why not each). Its record is written before the refusal is
//!   answered and made durable by the next sync (a claim's, a control batch's, the end's):
//!   refusals come in floods, an fdatasync each would make an agent's retry loop cost a disk
//!   flush per retry, and the count is history that no later decision reads.
//! - **A limit never removes anything here**: a refusal creates nothing and claims nothing.
//!   Two limits remove, elsewhere, and only while the owner lives and only what the session
//!   owns (the judgement's rule 7): `lifetime` (a sandbox that old, `crate::watch::limits`)
//!   and `spend` with `on_spend = "reclaim"` (every sandbox the session holds, once its
//!   sandbox time reaches the limit). Neither removes a detached sandbox.
//! - **`spend` counts sandbox time** ([`Meter`]: from claim to release or removal, detached
//!   sandboxes included, as `sandguard report` counts it). At the limit every create a
//!   limit counts is refused, in either mode; `on_spend = "reclaim"` also removes what the
//!   session holds. The sidecar says so once on the terminal when it is reached.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

mod exceeded;
mod meter;
mod refusals;

pub(crate) use exceeded::{Exceeded, Over};
pub(crate) use meter::Meter;
pub(crate) use refusals::journals;
pub(crate) use refusals::Refused;

/// The limits of one session; `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// At most this many sandboxes alive at once.
    pub sandboxes: Option<u32>,
    /// At most this many sandboxes created over the session's life.
    pub creates: Option<u32>,
    /// No sandbox older than this: at that age the session's own sandbox is removed even
    /// though its owner lives ([`crate::watch::limits`]), and the providers' TTLs are
    /// stamped no later (see the module docs).
    pub lifetime: Option<Duration>,
    /// At most this much spent over the session's life: sandbox time, or estimated money.
    pub spend: Option<Spend>,
    /// What reaching `spend` does besides refusing creates (`None`: as said, refuse only).
    pub on_spend: Option<OnSpend>,
}

/// A session's limits: its own (`[limits]`, the flags), and each provider's over that
/// provider's sandboxes alone (`[providers.NAME.limits]`). A create, a sandbox's age and its
/// time are held to both: the stricter decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Budget {
    pub session: Limits,
    pub providers: BTreeMap<String, Limits>,
    /// What a sandbox costs, for a money `spend` (`[providers.NAME] price_per_hour`).
    pub prices: crate::ledger::price::Prices,
}

impl From<Limits> for Budget {
    fn from(session: Limits) -> Budget {
        Budget {
            session,
            ..Budget::default()
        }
    }
}

/// A money `spend` limit with nothing to price by: no price is set where it counts.
#[derive(Debug, thiserror::Error)]
#[error(
    "limit `{key}` is money ({limit}) but no price is set to count it by: give the providers \
     a price_per_hour (book/src/budgets.md, \"Prices\"), or make the limit sandbox time \
     (\"20h\")"
)]
pub struct Unpriced {
    key: String,
    limit: Spend,
}

impl Budget {
    /// Whether a limit the create path decides is set anywhere.
    pub(crate) fn any(&self) -> bool {
        self.session.any() || self.providers.values().any(Limits::any)
    }

    /// The lifetime limit of `provider`'s sandboxes: the shorter of the session's and the
    /// provider's.
    pub(crate) fn lifetime(&self, provider: &str) -> Option<Duration> {
        let own = self.providers.get(provider).and_then(|l| l.lifetime);
        match (self.session.lifetime, own) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether any sandbox has a lifetime limit.
    pub(crate) fn ages(&self) -> bool {
        self.session.lifetime.is_some() || self.providers.values().any(|l| l.lifetime.is_some())
    }

    /// A money `spend` that nothing could count (no price where it applies), if there is one.
    pub(crate) fn unpriced(&self) -> Option<Unpriced> {
        self.spends()
            .filter(|(_, limit)| matches!(limit, Spend::Cost(_)))
            .find(|(scope, _)| !self.prices.any(*scope))
            .map(|(scope, limit)| Unpriced {
                key: match scope {
                    None => "spend".into(),
                    Some(p) => format!("providers.{p}.limits.spend"),
                },
                limit,
            })
    }

    /// Every spend limit: the session's (`None`) and each provider's.
    pub(crate) fn spends(&self) -> impl Iterator<Item = (Option<&str>, Spend)> {
        self.session.spend.map(|l| (None, l)).into_iter().chain(
            self.providers
                .iter()
                .filter_map(|(p, l)| Some((Some(p.as_str()), l.spend?))),
        )
    }

    /// Whether reaching a spend limit removes what it covers (`on_spend = "reclaim"`, the
    /// session's word for its own limit and each provider's).
    pub(crate) fn reclaims(&self) -> bool {
        self.session.on_spend == Some(OnSpend::Reclaim)
    }

    /// The limits that hold a create of `provider`: the session's, then the provider's.
    fn scopes<'a>(
        &'a self,
        provider: &'a str,
    ) -> impl Iterator<Item = (Option<&'a str>, &'a Limits)> {
        std::iter::once((None, &self.session))
            .chain(self.providers.get(provider).map(|l| (Some(provider), l)))
    }
}

/// A `spend` limit, or an amount spent: sandbox time (`"20h"`), or money at the configured
/// prices (`"$5"`, an estimate: `crate::ledger::price`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spend {
    Time(Duration),
    /// In the currency the prices are in.
    Cost(f64),
}

impl Spend {
    /// Whether `self`, an amount spent, has reached `limit` (measured alike).
    pub(crate) fn reached(self, limit: Spend) -> bool {
        match (self, limit) {
            (Spend::Time(used), Spend::Time(limit)) => used >= limit,
            (Spend::Cost(used), Spend::Cost(limit)) => used >= limit,
            _ => false,
        }
    }
}

impl fmt::Display for Spend {
    /// `20h of sandbox time`, `$5.00 estimated`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spend::Time(d) => write!(f, "{} of sandbox time", crate::timefmt::format_span(*d)),
            Spend::Cost(c) => write!(f, "${c:.2} estimated"),
        }
    }
}

/// What reaching the `spend` limit does (`on_spend`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OnSpend {
    /// New creates are refused; what runs, runs on.
    #[default]
    Refuse,
    /// New creates are refused, and every sandbox the session holds is removed.
    Reclaim,
}

impl Limits {
    /// Whether a limit the create path decides is set: without one, creates take no slot
    /// at all (`lifetime` is not decided at create: it is kept by the sidecar's rounds and
    /// stamped into the create).
    pub(crate) fn any(&self) -> bool {
        self.sandboxes.is_some() || self.creates.is_some() || self.spend.is_some()
    }

    /// Whether any limit at all is set (for the command line: options given or not).
    pub(crate) fn given(&self) -> bool {
        self.any() || self.lifetime.is_some() || self.on_spend.is_some()
    }
}

/// A limit that removes while the owner lives, as the journal names it (the `limit` of a
/// `removed` record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The sandbox reached the session's `lifetime`.
    Lifetime,
    /// The session's sandbox time reached its `spend`, with `on_spend = "reclaim"`.
    Spend,
}

/// What a session holds and used, as the sidecar counts it, in one scope: all of it (`None`)
/// or one provider's.
pub(crate) trait Usage {
    /// Sandboxes held now (claimed or detached, not counting open slots).
    fn held(&self, provider: Option<&str>) -> u64;
    /// What was spent so far, measured as `like` is ([`Meter::used`]).
    fn used(&self, provider: Option<&str>, like: Spend) -> Spend;
}

/// A session's create slots, as its journal tells them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Slots {
    /// The number the next slot takes (one more than the last taken).
    pub next: u64,
    /// Slots taken and not yet done: number → the provider of the create.
    pub open: BTreeMap<u64, String>,
    /// Slots done with a sandbox made.
    pub made: u64,
    /// The same, per provider.
    pub made_by: BTreeMap<String, u64>,
    /// The creates each limit refused, per provider ([`Refused`]).
    pub refused: Refused,
}

impl Slots {
    /// Takes a slot for a create of `provider`'s sandbox, or says which limit refuses it: the
    /// session's first, then the provider's, each against what `usage` counts in its scope.
    pub(crate) fn take(
        &mut self,
        budget: &Budget,
        provider: &str,
        usage: &dyn Usage,
    ) -> Result<u64, Exceeded> {
        for (scope, limits) in budget.scopes(provider) {
            self.check(limits, scope, usage).map_err(|over| Exceeded {
                provider: scope.map(str::to_string),
                over,
            })?;
        }
        let n = self.next;
        self.taken(n, provider);
        Ok(n)
    }

    /// Whether `limits` let one more create through in `scope`.
    fn check(&self, limits: &Limits, scope: Option<&str>, usage: &dyn Usage) -> Result<(), Over> {
        if let Some(limit) = limits.spend {
            let used = usage.used(scope, limit);
            if used.reached(limit) {
                return Err(Over::Spend { limit, used });
            }
        }
        let open = self
            .open
            .values()
            .filter(|p| scope.is_none_or(|s| s == p.as_str()))
            .count() as u64;
        if let Some(limit) = limits.sandboxes {
            let alive = usage.held(scope) + open;
            if alive >= u64::from(limit) {
                return Err(Over::Sandboxes { limit, alive });
            }
        }
        if let Some(limit) = limits.creates {
            let made = match scope {
                None => self.made,
                Some(p) => self.made_by.get(p).copied().unwrap_or(0),
            } + open;
            if made >= u64::from(limit) {
                return Err(Over::Creates { limit, made });
            }
        }
        Ok(())
    }

    /// Slot `n` was taken (as the journal's `slot` record says).
    pub(crate) fn taken(&mut self, n: u64, provider: &str) {
        self.open.insert(n, provider.to_string());
        self.next = self.next.max(n + 1);
    }

    /// Slot `n` is done (`slot_done`): `made` when its create made a sandbox. A slot not open
    /// (done twice, or never taken) changes nothing.
    pub(crate) fn done(&mut self, n: u64, made: bool) {
        if let Some(provider) = self.open.remove(&n).filter(|_| made) {
            self.made += 1;
            *self.made_by.entry(provider).or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests;
