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
//!   [`Asker::Renew`]): the session's own sandboxes and claims, never a detached one (by the
//!   `detach` command or the `sandguard.detached=true` label: their own TTL is what should end
//!   them), never one whose `sandguard.expires` passed, and nothing after the owner's death.
//! - The keeper stops the moment the watch ends: the sidecar turns `ending` and then waits
//!   for a batch of renewal calls already in flight (at most [`HALT_WAIT`]) before its reclaim
//!   starts ([`Halting`]); the keeper checks again before each call. A reclaim whose removals
//!   fail does not keep a dead owner's sandboxes alive, and no renewal lands after the first
//!   removal.
//! - A provider's renew never shortens a longer lifetime (the drivers check first).
//! - No TTL-capable provider configured: no keeper, no timer, no wake-ups.
//! - Failures are logged and retried on the next round; they never touch the watch loop,
//!   which runs apart from this task.
//! - The owner's claims reach the keeper through [`SharedHoldings`], which the loop updates
//!   in place (O(log n) a claim) and the keeper copies once a round: a claim never copies the
//!   whole set.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use crate::identity::Liveness;
use crate::labels::Selector;
use crate::ownership::{self, Asker, Facts, Verdict};
use crate::providers::{Provider, ProviderError, Sandbox};

/// What the owner holds, as the sidecar last saw it (the same type the fleet store mirrors).
pub use crate::fleet::Holdings;

/// The holdings, shared between the watch loop (which changes them) and the keeper (which
/// reads them once a round). The lock is never held across an await.
pub type SharedHoldings = Arc<std::sync::Mutex<Holdings>>;

/// When the first round runs.
pub const FIRST_ROUND: Duration = Duration::from_secs(5);

/// Renewals in flight at once, per provider.
const CONCURRENCY: usize = 8;

pub struct Keeper {
    providers: Vec<Arc<dyn Provider>>,
    session: String,
    ttl: Duration,
    every: Duration,
    holdings: SharedHoldings,
    /// How the watch stops it (the owner's death, `bye`, an expired lease), before the
    /// reclaim starts: it renews nothing after that.
    halt: Halt,
}

/// How long a sidecar whose watch ended waits for a batch of renewals already in flight
/// before its reclaim starts anyway (a renewal call is bounded by its client's timeouts).
pub const HALT_WAIT: Duration = Duration::from_secs(1);

/// The keeper's half of its stop: `ending` turns `true` when the watch ends; the keeper holds
/// `calls` around each batch of renewal calls, checking `ending` once it has it.
#[derive(Clone)]
pub struct Halt {
    ending: tokio::sync::watch::Receiver<bool>,
    calls: Arc<tokio::sync::Mutex<()>>,
}

impl Halt {
    /// Whether the watch has ended.
    pub fn is_ending(&self) -> bool {
        *self.ending.borrow()
    }

    /// Until the watch has ended.
    #[cfg(test)]
    pub async fn ended(&mut self) {
        let _ = self.ending.wait_for(|e| *e).await;
    }
}

/// The sidecar's half: [`Halting::stop`] turns `ending` and then takes `calls`, so that no
/// renewal call is made once the reclaim has begun (a check-then-call on another thread could
/// otherwise land after the first removal).
pub struct Halting {
    ending: tokio::sync::watch::Sender<bool>,
    calls: Arc<tokio::sync::Mutex<()>>,
}

impl Default for Halting {
    fn default() -> Halting {
        Halting {
            ending: tokio::sync::watch::channel(false).0,
            calls: Arc::default(),
        }
    }
}

impl Halting {
    /// What a keeper is handed.
    pub fn halt(&self) -> Halt {
        Halt {
            ending: self.ending.subscribe(),
            calls: self.calls.clone(),
        }
    }

    /// Stops the keeper: from now on it calls nothing; a batch in flight is waited for (at
    /// most [`HALT_WAIT`]).
    pub async fn stop(&self) {
        self.ending.send_replace(true);
        let _ = tokio::time::timeout(HALT_WAIT, self.calls.lock()).await;
    }
}

impl Keeper {
    /// A keeper for the TTL-capable providers among `providers`, or `None` if there are none.
    pub fn new(
        providers: &[Arc<dyn Provider>],
        session: &str,
        grace: Duration,
        every: Duration,
        holdings: SharedHoldings,
        halt: Halt,
    ) -> Option<Keeper> {
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
        })
    }

    /// Renews [`FIRST_ROUND`] after start (not at once: the guarded program is starting on the
    /// same cores, and has created nothing yet), then every `renew_every`, until the watch
    /// ends (or it is aborted).
    pub async fn run(mut self) {
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
        let claims: Vec<_> = holdings
            .claims
            .iter()
            .filter(|t| t.provider == provider.name())
            .collect();
        // With claims, every managed label is listed, so that a claim is judged by the labels
        // its sandbox carries (another session's sandbox is not this one's to renew).
        let selector = if claims.is_empty() {
            Selector::session(&self.session)
        } else {
            Selector::managed()
        };
        let (mut targets, failures) =
            crate::reclaim::list_all(std::slice::from_ref(provider), &selector).await;
        for f in &failures {
            tracing::warn!("cannot list {} to renew TTLs: {}", f.provider, f.error);
        }
        let provider = provider.as_ref();
        for claim in claims {
            // A claim that names nothing listed carries no sandguard label; unjudged while
            // the listing failed.
            if failures.is_empty() && !targets.iter().any(|s| s.id == claim.id) {
                if let Ok(mut s) = provider.parse_claim(&claim.id) {
                    s.provider = claim.provider.clone();
                    targets.push(s);
                }
            }
        }
        // The one judgement decides each renewal, with the owner as the watch last saw it.
        let owner = if self.halt.is_ending() {
            Liveness::Dead
        } else {
            Liveness::Alive
        };
        let names = |t: &crate::protocol::Target, s: &Sandbox| {
            t.provider == s.provider
                && (t.id == s.id
                    || provider
                        .parse_claim(&t.id)
                        .is_ok_and(|named| provider.names(&named, s)))
        };
        targets.retain(|s| {
            let mut facts = Facts::of(s);
            facts.detached = holdings.detached.iter().any(|t| names(t, s));
            if holdings.claims.iter().any(|t| names(t, s)) {
                facts
                    .claimed_by
                    .push((&self.session, ownership::Session::UNKNOWN));
            }
            let asker = Asker::Renew {
                session: &self.session,
                owner,
            };
            ownership::judge(asker, &facts).verdict == Verdict::Renew
        });
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

/// Whether `s` is still the session's to renew by what the owner holds now: not detached
/// since, and, unless it carries the session's own label, still claimed.
fn still_held(
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
mod tests {
    use super::*;
    use crate::protocol::Target;
    use crate::providers::{Capabilities, Kind};
    use std::sync::Mutex;

    /// A TTL-capable provider that records renewals.
    struct Ttl {
        listed: Vec<Sandbox>,
        renewed: Mutex<Vec<(String, Duration)>>,
    }

    #[async_trait::async_trait]
    impl Provider for Ttl {
        fn name(&self) -> &str {
            "fake"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                labels: true,
                ttl: true,
                pagination: false,
            }
        }
        async fn list(&self, s: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
            Ok(self
                .listed
                .iter()
                .filter(|x| s.matches(&x.labels))
                .cloned()
                .collect())
        }
        async fn remove(&self, _: &Sandbox) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn check(&self) -> Result<String, ProviderError> {
            Ok("fake".into())
        }
        async fn renew(&self, s: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
            self.renewed.lock().unwrap().push((s.id.clone(), ttl));
            Ok(())
        }
    }

    /// A keeper of session `s` over `p` (grace 10 min, every minute), stopped by `halting`.
    fn keeper(p: &Arc<Ttl>, holdings: Holdings, halting: &Halting) -> Keeper {
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        Keeper::new(
            &providers,
            "s",
            Duration::from_secs(600),
            Duration::from_secs(60),
            Arc::new(std::sync::Mutex::new(holdings)),
            halting.halt(),
        )
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn labelled_and_claimed_sandboxes_are_renewed_detached_ones_are_not() {
        use crate::providers::fake::sandbox;
        let mut labelled_detached = sandbox("ld", Kind::Instance, Some("s"));
        labelled_detached
            .labels
            .insert(crate::labels::DETACHED.into(), "true".into());
        let p = Arc::new(Ttl {
            listed: vec![
                sandbox("l1", Kind::Instance, Some("s")),
                sandbox("cmd", Kind::Instance, Some("s")),
                labelled_detached,
                sandbox("x", Kind::Instance, Some("other")),
            ],
            renewed: Mutex::new(vec![]),
        });
        let holdings = Holdings {
            claims: [Target {
                provider: "fake".into(),
                id: "c1".into(),
            }]
            .into(),
            detached: [Target {
                provider: "fake".into(),
                id: "cmd".into(),
            }]
            .into(),
        };
        let halting = Halting::default();
        let keeper = keeper(&p, holdings, &halting);
        let task = tokio::spawn(keeper.run());
        tokio::time::sleep(FIRST_ROUND + Duration::from_secs(61)).await;
        task.abort();
        let renewed = p.renewed.lock().unwrap().clone();
        let mut ids: Vec<&str> = renewed.iter().map(|(id, _)| id.as_str()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids, vec!["c1", "l1"]);
        assert!(renewed
            .iter()
            .all(|(_, ttl)| *ttl == Duration::from_secs(720)));
        assert_eq!(
            renewed.len(),
            4,
            "renewed after FIRST_ROUND and after one interval"
        );
    }

    /// Issue 22 point 8: once the watch ends the keeper renews nothing and returns.
    #[tokio::test(start_paused = true)]
    async fn nothing_is_renewed_once_the_watch_ended() {
        use crate::providers::fake::sandbox;
        let p = Arc::new(Ttl {
            listed: vec![sandbox("l1", Kind::Instance, Some("s"))],
            renewed: Mutex::new(vec![]),
        });
        let halting = Halting::default();
        let keeper = keeper(&p, Holdings::default(), &halting);
        let task = tokio::spawn(keeper.run());
        tokio::time::sleep(FIRST_ROUND + Duration::from_secs(1)).await;
        assert_eq!(p.renewed.lock().unwrap().len(), 1);
        halting.stop().await;
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("the keeper returns once the watch ended")
            .unwrap();
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(
            p.renewed.lock().unwrap().len(),
            1,
            "renewed after the death"
        );
    }

    #[test]
    fn no_ttl_provider_means_no_keeper() {
        let providers: Vec<Arc<dyn Provider>> = vec![crate::providers::fake::Fake::holding(vec![])];
        let rx = SharedHoldings::default();
        assert!(Keeper::new(
            &providers,
            "s",
            Duration::from_secs(600),
            Duration::from_secs(60),
            rx,
            Halting::default().halt(),
        )
        .is_none());
    }
}
