//! The limit keeper: the limits that remove while the owner lives ([`crate::budget`]), kept by
//! the sidecar: `lifetime` (a sandbox that old) and `spend` with `on_spend = "reclaim"` (every
//! sandbox the session holds, once its sandbox time reached the limit: the watch loop, which
//! meters it, says when through [`Spent`]). Every round it lists what the session holds on
//! every provider (its label, and its claims looked up, as the TTL keeper does: [`Held`]),
//! and asks the one judgement ([`Asker::Lifetime`], [`Asker::Spent`]) of each sandbox; what
//! the judgement removes, it removes, and tells the watch loop ([`Aged`]), which journals the
//! removal with its cause (a `removed` record with `limit: lifetime` or `spend`), drops it
//! from the holdings and says so on the terminal the session was started from.
//!
//! Decisions:
//! - **A sandbox's age is the provider's**: from the creation time its listing gives
//!   ([`Sandbox::created_at`]). A provider that gives none: from the first round that saw it
//!   (a claim arriving between rounds is seen by the next), never guessed older, so such a
//!   sandbox may live up to one round longer than the limit, never shorter (unknown is not
//!   dead).
//! - **Rounds every tenth of the limit, between 1 s and 60 s**: a sandbox is removed within
//!   that of reaching its age. With only a spend limit, rounds start when it is reached (at
//!   once, then every [`SPENT_ROUNDS`], for what is made past it by the label path). The
//!   keeper runs only when such a limit is set (a sidecar without one keeps its zero
//!   wake-ups).
//! - **Only the session's own sandbox, and not a detached one** (the judgement's rule 7), on
//!   the facts every judge of the sidecar is told ([`Source`]: the ledger, every session's
//!   journal): a stranger's container, however old, is never touched; a detach wins, as
//!   everywhere, whichever session that owned the sandbox detached it (one another session
//!   detached stays so when this session claims it later). A Docker network or volume is
//!   not aged: it is reclaimed with the session.
//! - **A failed removal is retried next round** (logged); one that finds the sandbox gone is
//!   journaled `gone`, as a reclaim's is.
//! - **It stops with the watch**, as the TTL keeper does ([`Halt`]): nothing is removed by it
//!   once the session's reclaim has begun (that reclaim removes everything anyway).
//! - The provider TTLs are capped by the limit elsewhere: the TTL keeper never renews past
//!   `created + lifetime`, and the proxies stamp the limit into each create (Docker's
//!   `sandguard.expires` label, E2B's `timeout`), so the limit holds if sandguard dies.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::sync::mpsc;

use super::ttl::{still_held, Halt, Held, SharedHoldings};
use crate::budget::{Budget, Limit};
use crate::ownership::known::Source;
use crate::ownership::{Asker, Verdict};
use crate::protocol::Target;
use crate::providers::{Provider, ProviderError, Sandbox, SandboxKey};

/// Removals in flight at once, per provider.
const CONCURRENCY: usize = 8;

/// The shortest and longest time between two rounds.
const ROUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// The time between two rounds once the spend limit is reached, without a lifetime limit.
pub(crate) const SPENT_ROUNDS: Duration = Duration::from_secs(5);

/// The spend limits the watch loop found reached, when they say to reclaim: `None` the
/// session's (all its sandboxes), `Some(provider)` that provider's. It only grows.
pub(crate) type Spent = tokio::sync::watch::Receiver<std::collections::BTreeSet<Option<String>>>;

/// A sandbox the keeper removed for a limit: what the watch loop journals and tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Aged {
    /// As the ledger names it ([`crate::reclaim::ledger_target`]).
    pub target: Target,
    /// The provider no longer had it.
    pub gone: bool,
    /// Unix milliseconds when the provider answered.
    pub at_ms: u64,
    /// How old it was.
    pub age: Duration,
    /// Which limit, and the limit as written (`2h`, `20h of sandbox time`, `$5.00
    /// estimated`).
    pub limit: (Limit, String),
}

pub(crate) struct Keeper {
    providers: Vec<Arc<dyn Provider>>,
    session: String,
    /// The session's limits (each provider's lifetime and spend).
    budget: Budget,
    /// Which spend limits the loop said are reached (when reaching one reclaims).
    spent: Option<Spent>,
    every: Duration,
    holdings: SharedHoldings,
    halt: Halt,
    /// Where each round's facts come from (the sidecar's own), and where it tells what its
    /// look-ups found gone.
    facts: Source,
    gone: crate::providers::GoneTx,
    aged: mpsc::UnboundedSender<Aged>,
    /// When each sandbox whose provider gives no creation time was first seen (unix seconds).
    first_seen: HashMap<SandboxKey, i64>,
}

impl Keeper {
    /// A keeper of `budget`'s lifetimes, and of its spend limits when `spent` (the loop's
    /// word that one is reached) is given.
    pub(crate) fn new(
        providers: &[Arc<dyn Provider>],
        session: &str,
        (budget, spent): (Budget, Option<Spent>),
        holdings: SharedHoldings,
        link: super::Link,
        aged: mpsc::UnboundedSender<Aged>,
    ) -> Keeper {
        let super::Link { halt, facts, gone } = link;
        let shortest = std::iter::once(budget.session.lifetime)
            .chain(budget.providers.values().map(|l| l.lifetime))
            .flatten()
            .min();
        Keeper {
            providers: providers.to_vec(),
            session: session.to_string(),
            every: shortest.map_or(SPENT_ROUNDS, |l| (l / 10).clamp(ROUNDS.0, ROUNDS.1)),
            budget,
            spent,
            holdings,
            halt,
            facts,
            gone,
            aged,
            first_seen: HashMap::new(),
        }
    }

    /// Rounds every `every` instead of as its limits say (the model test's).
    pub(crate) fn every(mut self, every: Duration) -> Keeper {
        self.every = every;
        self
    }

    /// A round every [`Keeper::every`], from one after start (with a lifetime limit), and at
    /// once when the spend limit is reached, until the watch ends.
    pub(crate) async fn run(mut self) {
        let first = tokio::time::Instant::now() + self.every;
        let mut tick = tokio::time::interval_at(first, self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.halt.is_ending() {
                return;
            }
            let ticking = self.budget.ages() || self.spent_any();
            tokio::select! {
                _ = tick.tick(), if ticking => {}
                // A spend limit reached: a round at once.
                r = changed(&mut self.spent), if self.spent.is_some() => {
                    if r.is_err() {
                        self.spent = None;
                        continue;
                    }
                    tick.reset_immediately();
                    continue;
                }
                // A closed channel means the sidecar is gone: stop too.
                r = self.halt.ending.changed() => {
                    if r.is_err() {
                        return;
                    }
                    continue;
                }
            }
            let holdings = self
                .holdings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            for p in self.providers.clone() {
                self.round_on(&p, &holdings).await;
            }
        }
    }

    async fn round_on(&mut self, provider: &Arc<dyn Provider>, holdings: &super::ttl::Holdings) {
        let providers = self.providers.clone();
        let known = self.facts.known();
        let held = Held::on(provider, &providers, &self.session, holdings, known).await;
        held.tell_gone(&self.gone);
        let now = crate::timefmt::now_unix();
        let spent = self
            .spent
            .as_ref()
            .map(|s| s.borrow().clone())
            .unwrap_or_default();
        let mut old = Vec::new();
        for s in &held.sandboxes {
            let born = match s.created_at {
                Some(t) => t,
                None => *self.first_seen.entry(s.key()).or_insert(now),
            };
            let age = Duration::from_secs(u64::try_from(now - born).unwrap_or(0));
            // The session's spend, else its provider's, when reached.
            let scope = [None, Some(s.provider.clone())]
                .into_iter()
                .find(|scope| spent.contains(scope));
            let spend = scope.and_then(|scope| {
                let limit = match &scope {
                    None => self.budget.session.spend,
                    Some(p) => self.budget.providers.get(p).and_then(|l| l.spend),
                }?;
                let asker = Asker::Spent {
                    session: &self.session,
                    limit,
                };
                Some(((Limit::Spend, limit.to_string()), held.judge(asker, s)))
            });
            let lifetime = self.budget.lifetime(&s.provider).map(|limit| {
                let asker = Asker::Lifetime {
                    session: &self.session,
                    limit,
                    age: Some(age),
                };
                let text = crate::timefmt::format_span(limit);
                ((Limit::Lifetime, text), held.judge(asker, s))
            });
            if let Some((limit, _)) = [spend, lifetime]
                .into_iter()
                .flatten()
                .find(|(_, v)| *v == Verdict::Remove)
            {
                old.push((s.clone(), age, limit));
            }
        }
        // What is no longer listed is forgotten.
        let listed: Vec<SandboxKey> = held.sandboxes.iter().map(Sandbox::key).collect();
        self.first_seen
            .retain(|k, _| k.provider != provider.name() || listed.contains(k));
        if old.is_empty() {
            return;
        }
        let provider = provider.as_ref();
        let halt = &self.halt;
        let shared = &self.holdings;
        let (session, aged) = (&self.session, &self.aged);
        let names = |t: &Target, s: &Sandbox| held.names(t, s);
        let providers = &providers;
        // Held while the calls are made: a sidecar whose watch ends waits for them before its
        // reclaim (see [`Halt`]).
        let _calls = halt.calls.lock().await;
        stream::iter(old)
            .for_each_concurrent(CONCURRENCY, |(s, age, limit)| async move {
                // Asked again at each call: the owner may have died during the round, or
                // released or detached what this round listed.
                if halt.is_ending() || !still_held(shared, session, &s, &names) {
                    return;
                }
                let gone = match provider.remove(&s).await {
                    Ok(()) => false,
                    Err(ProviderError::Gone(_)) => true,
                    Err(e) => {
                        tracing::warn!(
                            "cannot remove {} {}, past a limit: {e}; trying again next round",
                            s.provider,
                            s.id
                        );
                        return;
                    }
                };
                let target = crate::reclaim::ledger_target(providers, &s, &holdings.claims);
                let _ = aged.send(Aged {
                    target,
                    gone,
                    at_ms: crate::ledger::now_ms(),
                    age,
                    limit,
                });
            })
            .await;
    }
}

impl Keeper {
    /// Whether the loop said a spend limit is reached.
    fn spent_any(&self) -> bool {
        self.spent.as_ref().is_some_and(|s| !s.borrow().is_empty())
    }
}

/// Until the loop says another spend limit is reached (never, without any); `Err` when the
/// loop is gone.
async fn changed(spent: &mut Option<Spent>) -> Result<(), tokio::sync::watch::error::RecvError> {
    match spent {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
