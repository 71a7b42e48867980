//! The server-side TTL keeper: defence in depth for the case sandguard itself cannot act.
//!
//! While the owner lives, every `renew_every` the keeper lists the session's sandboxes on each
//! provider that has a server-side lifetime ([`crate::providers::Capabilities::ttl`]: E2B's
//! timeout, Tenki's session timeout, Daytona's absolute TTL), adds the owner's claims on those
//! providers, and asks each provider to keep them alive for `ttl` from now, where
//! `ttl = grace + 2 × renew_every`. If the whole machine sleeps, dies or loses its network,
//! nothing renews, and the provider itself ends the sandboxes a little after the grace.
//!
//! - What is renewed is the one ownership judgement's to say ([`crate::ownership`], as
//!   [`Asker::Renew`]), on the facts every judge of the sidecar is told
//!   ([`crate::ownership::known::Source`]: the ledger, every session's journal): the
//!   session's own sandboxes and claims, never a detached one (by the `detach` command of
//!   any session that owned it, or the `sandguard.detached=true` label: their own TTL is
//!   what should end them; one another session detached stays so when this session claims
//!   it later), never one whose `sandguard.expires` passed, and nothing after the owner's
//!   death.
//! - The keeper stops the moment the watch ends: the sidecar turns `ending` and then waits
//!   for a batch of renewal calls already in flight (at most [`halt::HALT_WAIT`]) before its
//!   reclaim starts ([`Halting`]); the keeper checks again before each call. A reclaim whose removals
//!   fail does not keep a dead owner's sandboxes alive, and no renewal lands after the first
//!   removal.
//! - A provider's renew never shortens a longer lifetime (the drivers check first).
//! - No TTL-capable provider configured: no keeper, no timer, no wake-ups.
//! - Failures are logged and retried on the next round; they never touch the watch loop,
//!   which runs apart from this task.
//! - A claim no listing by label answered for is looked up as the reclaim looks it up
//!   ([`claimed`]), so that the judgement reads the labels it carries.
//! - The owner's claims reach the keeper through [`SharedHoldings`], which the loop updates
//!   in place (O(log n) a claim) and the keeper copies once a round: a claim never copies the
//!   whole set.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use crate::identity::Liveness;
use crate::labels::Selector;
use crate::ownership::known::{Known, Own, Source};
use crate::ownership::{self, Asker, Verdict};
use crate::providers::{Provider, ProviderError, Sandbox};

mod claimed;
mod halt;

pub(crate) use halt::{Halt, Halting, HALT_WAIT};

/// What the owner holds, as the sidecar last saw it (the same type the fleet store mirrors).
pub(crate) use crate::fleet::Holdings;

/// The holdings, shared between the watch loop (which changes them) and the keeper (which
/// reads them once a round). The lock is never held across an await.
pub(crate) type SharedHoldings = Arc<std::sync::Mutex<Holdings>>;

/// When the first round runs.
pub(crate) const FIRST_ROUND: Duration = Duration::from_secs(5);

/// Renewals in flight at once, per provider.
const CONCURRENCY: usize = 8;

pub(crate) struct Keeper {
    providers: Vec<Arc<dyn Provider>>,
    session: String,
    ttl: Duration,
    every: Duration,
    holdings: SharedHoldings,
    /// How the watch stops it (the owner's death, `bye`, an expired lease), before the
    /// reclaim starts: it renews nothing after that.
    halt: Halt,
    /// The session's limits: no sandbox is renewed past its creation plus its lifetime
    /// limit ([`Keeper::capped`]).
    limits: crate::budget::Budget,
    /// Where each round's facts come from: the sidecar's own ([`Source`]).
    facts: Source,
    /// Where it tells what its look-ups found gone (`crate::watch::gone`).
    gone: crate::providers::GoneTx,
}

impl Keeper {
    /// A keeper for the TTL-capable providers among `providers`, or `None` if there are none.
    pub(crate) fn new(
        providers: &[Arc<dyn Provider>],
        session: &str,
        grace: Duration,
        every: Duration,
        holdings: SharedHoldings,
        link: super::Link,
    ) -> Option<Keeper> {
        let super::Link { halt, facts, gone } = link;
        let providers: Vec<Arc<dyn Provider>> = providers
            .iter()
            .filter(|p| p.capabilities().ttl)
            .cloned()
            .collect();
        if providers.is_empty() || every.is_zero() {
            return None;
        }
        Some(Keeper {
            providers,
            session: session.to_string(),
            ttl: grace + every * 2,
            every,
            holdings,
            halt,
            limits: Default::default(),
            facts,
            gone,
        })
    }

    /// Renews no sandbox past its creation plus its lifetime limit (the session's, or its
    /// provider's): its TTL is cut to what is left of it, so the provider ends it at the
    /// limit if sandguard is gone; one past it is not renewed (the limit keeper removes it).
    /// A provider that gives no creation time is renewed as without a limit.
    pub(crate) fn capped(mut self, limits: crate::budget::Budget) -> Keeper {
        self.limits = limits;
        self
    }

    /// Renews [`FIRST_ROUND`] after start (not at once: the guarded program is starting on the
    /// same cores, and has created nothing yet), then every `renew_every`, until the watch
    /// ends (or it is aborted).
    pub(crate) async fn run(mut self) {
        let first = tokio::time::Instant::now() + FIRST_ROUND.min(self.every);
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
            // Asked each round: a plugin's capabilities are known only once it has answered
            // `describe`, which may be after this keeper was set up.
            for p in self.providers.iter().filter(|p| p.capabilities().ttl) {
                self.renew_on(p, &holdings).await;
            }
        }
    }

    async fn renew_on(&self, provider: &Arc<dyn Provider>, holdings: &Holdings) {
        let known = self.facts.known();
        let held = Held::on(provider, &self.providers, &self.session, holdings, known).await;
        held.tell_gone(&self.gone);
        let provider = provider.as_ref();
        // The one judgement decides each renewal, with the owner as the watch last saw it.
        let owner = if self.halt.is_ending() {
            Liveness::Dead
        } else {
            Liveness::Alive
        };
        let asker = Asker::Renew {
            session: &self.session,
            owner,
        };
        let targets = held.judged(asker, Verdict::Renew);
        let names = |t: &crate::protocol::Target, s: &Sandbox| held.names(t, s);
        let ttl = self.ttl;
        let halt = &self.halt;
        let shared = &self.holdings;
        // Held while the calls are made: a sidecar whose watch ends waits for them before its
        // reclaim (see [`Halting`]).
        let _calls = halt.calls.lock().await;
        stream::iter(targets)
            .for_each_concurrent(CONCURRENCY, |s| async move {
                // Asked again at each call: the owner may have died during the round, or
                // released or detached what this round listed.
                if halt.is_ending() || !still_held(shared, &self.session, &s, &names) {
                    return;
                }
                let ttl = match (self.limits.lifetime(&s.provider), s.created_at) {
                    (Some(limit), Some(born)) => {
                        let end =
                            born.saturating_add(i64::try_from(limit.as_secs()).unwrap_or(i64::MAX));
                        match u64::try_from(end - crate::timefmt::now_unix()) {
                            Ok(left) if left > 0 => ttl.min(Duration::from_secs(left)),
                            _ => return,
                        }
                    }
                    _ => ttl,
                };
                match provider.renew(&s, ttl).await {
                    Ok(()) | Err(ProviderError::Gone(_)) => {}
                    Err(e) => {
                        tracing::warn!("cannot renew the TTL of {} {}: {e}", s.provider, s.id);
                    }
                }
            })
            .await;
    }
}

/// What a session holds on one provider as a keeper sees it (the TTL keeper's renewals, the
/// limit keeper's removals): the sandboxes its label is on, and its claims as the provider
/// shows them, each with what the owner's holdings say of it.
pub(crate) struct Held<'a> {
    providers: &'a [Arc<dyn Provider>],
    session: &'a str,
    holdings: &'a Holdings,
    /// Listed by label, and the claims looked up.
    pub sandboxes: Vec<Sandbox>,
    /// The claims the provider said are gone when looked up ([`claimed::look_up`]).
    gone: Vec<Sandbox>,
    /// What else the round is told: the ledger, as every judge of the sidecar is
    /// ([`Source::known`]).
    known: Known,
}

impl<'a> Held<'a> {
    /// Lists `provider` for what `session` holds.
    pub(crate) async fn on(
        provider: &Arc<dyn Provider>,
        providers: &'a [Arc<dyn Provider>],
        session: &'a str,
        holdings: &'a Holdings,
        known: Known,
    ) -> Held<'a> {
        let claims: Vec<_> = holdings
            .claims
            .iter()
            .filter(|t| t.provider == provider.name())
            .collect();
        // With claims, every managed label is listed, so that a claim is judged by the labels
        // its sandbox carries (another session's sandbox is not this one's to renew).
        let selector = if claims.is_empty() {
            Selector::session(session)
        } else {
            Selector::managed()
        };
        let (mut sandboxes, failures) =
            crate::reclaim::list_all(std::slice::from_ref(provider), &selector).await;
        for f in &failures {
            tracing::warn!(
                "cannot list {} to judge its sandboxes: {}",
                f.provider,
                f.error
            );
        }
        let mut held = Held {
            providers,
            session,
            holdings,
            sandboxes: Vec::new(),
            gone: Vec::new(),
            known,
        };
        // The claims nothing listed answered for (unjudged while the listing failed), looked
        // up as the reclaim looks them up ([`claimed`]), so that the judgement reads what
        // they carry. Matched as the provider names, not by the claim's spelling: a pinned
        // claim compared as a string named nothing listed (found by the model, seed
        // 922308247), and an unlisted claim was renewed as a sandbox without labels,
        // `sandguard.detached=true` unseen (seed 301994710).
        if failures.is_empty() {
            let provider = provider.as_ref();
            let unlisted: Vec<Sandbox> = claims
                .iter()
                .filter(|claim| !sandboxes.iter().any(|s| held.names(claim, s)))
                .filter_map(|claim| {
                    let mut s = provider.parse_claim(&claim.id).ok()?;
                    s.provider = claim.provider.clone();
                    Some(s)
                })
                .collect();
            let (found, gone) = claimed::look_up(provider, unlisted).await;
            sandboxes.extend(found);
            held.gone = gone;
        }
        held.sandboxes = sandboxes;
        held
    }

    /// Tells the sidecar what the round's look-ups found gone (`crate::watch::gone`): it
    /// releases what it still holds of them.
    pub(crate) fn tell_gone(&self, to: &crate::providers::GoneTx) {
        let at_ms = crate::ledger::now_ms();
        for s in &self.gone {
            let _ = to.send(crate::providers::Gone {
                sandbox: s.clone(),
                at_ms,
            });
        }
    }

    /// Whether claim (or detach) `t` names listed `s`: the one answer
    /// ([`Sandbox::named_by`]: a claim pinned to an identity (`ID@IDENTITY`) or made by an
    /// id prefix names a sandbox listed under another spelling), or the id as written.
    pub(crate) fn names(&self, t: &crate::protocol::Target, s: &Sandbox) -> bool {
        (t.provider == s.provider && t.id == s.id) || s.named_by(self.providers, t)
    }

    /// The sandboxes the one judgement, asked by `asker`, answers `verdict` for.
    pub(crate) fn judged(&self, asker: Asker<'_>, verdict: Verdict) -> Vec<Sandbox> {
        self.sandboxes
            .iter()
            .filter(|s| self.judge(asker, s) == verdict)
            .cloned()
            .collect()
    }

    /// The one judgement on `s`, asked by `asker`, with what the holdings say of it.
    pub(crate) fn judge(&self, asker: Asker<'_>, s: &Sandbox) -> Verdict {
        let own = Own {
            session: self.session,
            // As its reclaim's plan stands ([`ownership::Session::GUARDED`]): a label of its
            // session that the sandbox inherited counts while the session lives, for the
            // keeper as for the reclaim (the same facts for every judge).
            standing: ownership::Session::GUARDED,
            claimed: self.holdings.claims.iter().any(|t| self.names(t, s)),
            detached: self.holdings.detached.iter().any(|t| self.names(t, s)),
        };
        ownership::judge(asker, &self.known.facts_for(s, own)).verdict
    }
}

/// Whether `s` is still the session's to renew by what the owner holds now: not detached
/// since, and, unless it carries the session's own label, still claimed.
pub(crate) fn still_held(
    holdings: &SharedHoldings,
    session: &str,
    s: &Sandbox,
    names: &impl Fn(&crate::protocol::Target, &Sandbox) -> bool,
) -> bool {
    let now = holdings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let labelled = s.session() == Some(session);
    !now.detached.iter().any(|t| names(t, s))
        && (labelled || now.claims.iter().any(|t| names(t, s)))
}

#[cfg(test)]
mod tests;
