//! The lifetime keeper: a session's `lifetime` limit ([`crate::budget::Limits::lifetime`]) kept
//! while its owner lives. Every round it lists what the session holds on every provider (its
//! label, and its claims looked up, as the TTL keeper does: [`Held`]), and asks the one
//! judgement ([`Asker::Lifetime`]) of each sandbox; what the judgement removes, it removes,
//! and tells the watch loop ([`Aged`]), which journals the removal with its cause (a
//! `removed` record with `limit: lifetime`), drops it from the holdings and says so on the
//! terminal the session was started from.
//!
//! Decisions:
//! - **A sandbox's age is the provider's**: from the creation time its listing gives
//!   ([`Sandbox::created_at`]). A provider that gives none: from the first round that saw it
//!   (a claim arriving between rounds is seen by the next), never guessed older, so such a
//!   sandbox may live up to one round longer than the limit, never shorter (unknown is not
//!   dead).
//! - **Rounds every tenth of the limit, between 1 s and 60 s**: a sandbox is removed within
//!   that of reaching its age. The keeper runs only when a `lifetime` is set (a sidecar
//!   without one keeps its zero wake-ups).
//! - **Only the session's own sandbox, and not a detached one** (the judgement's rule 7):
//!   a stranger's container, however old, is never touched; a detach wins, as everywhere. A
//!   Docker network or volume is not aged: it is reclaimed with the session.
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
use crate::ownership::{Asker, Verdict};
use crate::protocol::Target;
use crate::providers::{Provider, ProviderError, Sandbox, SandboxKey};

/// Removals in flight at once, per provider.
const CONCURRENCY: usize = 8;

/// The shortest and longest time between two rounds.
const ROUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// A sandbox the keeper removed for its age: what the watch loop journals and tells.
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
    pub limit: Duration,
}

pub(crate) struct Keeper {
    providers: Vec<Arc<dyn Provider>>,
    session: String,
    limit: Duration,
    every: Duration,
    holdings: SharedHoldings,
    halt: Halt,
    aged: mpsc::UnboundedSender<Aged>,
    /// When each sandbox whose provider gives no creation time was first seen (unix seconds).
    first_seen: HashMap<SandboxKey, i64>,
}

impl Keeper {
    pub(crate) fn new(
        providers: &[Arc<dyn Provider>],
        session: &str,
        limit: Duration,
        holdings: SharedHoldings,
        halt: Halt,
        aged: mpsc::UnboundedSender<Aged>,
    ) -> Keeper {
        Keeper {
            providers: providers.to_vec(),
            session: session.to_string(),
            limit,
            every: (limit / 10).clamp(ROUNDS.0, ROUNDS.1),
            holdings,
            halt,
            aged,
            first_seen: HashMap::new(),
        }
    }

    /// A round every [`Keeper::every`], from one after start, until the watch ends.
    pub(crate) async fn run(mut self) {
        let first = tokio::time::Instant::now() + self.every;
        let mut tick = tokio::time::interval_at(first, self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.halt.is_ending() {
                return;
            }
            tokio::select! {
                _ = tick.tick() => {}
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
        let held = Held::on(provider, &providers, &self.session, holdings).await;
        let now = crate::timefmt::now_unix();
        let mut old = Vec::new();
        for s in &held.sandboxes {
            let born = match s.created_at {
                Some(t) => t,
                None => *self.first_seen.entry(s.key()).or_insert(now),
            };
            let age = Duration::from_secs(u64::try_from(now - born).unwrap_or(0));
            let asker = Asker::Lifetime {
                session: &self.session,
                limit: self.limit,
                age: Some(age),
            };
            if held.judge(asker, s) == Verdict::Remove {
                old.push((s.clone(), age));
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
        let (session, limit, aged) = (&self.session, self.limit, &self.aged);
        let names = |t: &Target, s: &Sandbox| held.names(t, s);
        let providers = &providers;
        // Held while the calls are made: a sidecar whose watch ends waits for them before its
        // reclaim (see [`Halt`]).
        let _calls = halt.calls.lock().await;
        stream::iter(old)
            .for_each_concurrent(CONCURRENCY, |(s, age)| async move {
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
                            "cannot remove {} {}, past the lifetime limit: {e}; trying again next round",
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

#[cfg(test)]
mod tests;
