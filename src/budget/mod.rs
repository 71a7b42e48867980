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

mod meter;

pub(crate) use meter::Meter;

/// The limits of one session; `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// At most this many sandboxes alive at once.
    pub sandboxes: Option<u32>,
    /// At most this many sandboxes created over the session's life.
    pub creates: Option<u32>,
    /// No sandbox older than this: at that age the session's own sandbox is removed even
    /// though its owner lives ([`crate::watch::limits`]), and the providers' TTLs are
    /// stamped no later (see the module docs).
    pub lifetime: Option<Duration>,
    /// At most this much sandbox time over the session's life.
    pub spend: Option<Duration>,
    /// What reaching `spend` does besides refusing creates (`None`: as said, refuse only).
    pub on_spend: Option<OnSpend>,
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

/// Why a create was refused: the limit it would pass, and the count that reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exceeded {
    /// `sandboxes`: `alive` sandboxes (held, or being created) already.
    Sandboxes { limit: u32, alive: u64 },
    /// `creates`: `made` sandboxes created (or being created) already.
    Creates { limit: u32, made: u64 },
    /// `spend`: `used` sandbox time already.
    Spend { limit: Duration, used: Duration },
}

impl fmt::Display for Exceeded {
    /// The reason, without the `sandguard:` each proxy puts before it; it names the limit as
    /// the config and the command line name it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceeded::Sandboxes { limit, alive } => write!(
                f,
                "limit `sandboxes` reached (at most {limit} alive at once; this session has \
                 {alive}); nothing was created"
            ),
            Exceeded::Creates { limit, made } => write!(
                f,
                "limit `creates` reached (at most {limit} over the session; this session \
                 created {made}); nothing was created"
            ),
            Exceeded::Spend { limit, used } => write!(
                f,
                "limit `spend` reached (at most {} of sandbox time; this session used {}); \
                 nothing was created",
                crate::timefmt::format_span(*limit),
                crate::timefmt::format_span(*used),
            ),
        }
    }
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
}

impl Slots {
    /// Takes a slot for a create, or says which limit refuses it. `held` is how many
    /// sandboxes the session holds now (claimed or detached, not counting open slots), `used`
    /// the sandbox time it used so far ([`Meter::used`]).
    pub(crate) fn take(
        &mut self,
        limits: &Limits,
        provider: &str,
        held: u64,
        used: Duration,
    ) -> Result<u64, Exceeded> {
        if let Some(limit) = limits.spend.filter(|l| used >= *l) {
            return Err(Exceeded::Spend { limit, used });
        }
        let open = self.open.len() as u64;
        if let Some(limit) = limits.sandboxes {
            let alive = held + open;
            if alive >= u64::from(limit) {
                return Err(Exceeded::Sandboxes { limit, alive });
            }
        }
        if let Some(limit) = limits.creates {
            let made = self.made + open;
            if made >= u64::from(limit) {
                return Err(Exceeded::Creates { limit, made });
            }
        }
        let n = self.next;
        self.taken(n, provider);
        Ok(n)
    }

    /// Slot `n` was taken (as the journal's `slot` record says).
    pub(crate) fn taken(&mut self, n: u64, provider: &str) {
        self.open.insert(n, provider.to_string());
        self.next = self.next.max(n + 1);
    }

    /// Slot `n` is done (`slot_done`): `made` when its create made a sandbox. A slot not open
    /// (done twice, or never taken) changes nothing.
    pub(crate) fn done(&mut self, n: u64, made: bool) {
        if self.open.remove(&n).is_some() && made {
            self.made += 1;
        }
    }
}

#[cfg(test)]
mod tests;
