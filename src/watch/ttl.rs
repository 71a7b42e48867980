//! The server-side TTL keeper: defence in depth for the case sandguard itself cannot act.
//!
//! While the owner lives, every `renew_every` the keeper lists the session's sandboxes on each
//! provider that has a server-side lifetime ([`crate::providers::Capabilities::ttl`]: E2B's
//! timeout, Tenki's session timeout, Daytona's absolute TTL), adds the owner's claims on those
//! providers, and asks each provider to keep them alive for `ttl` from now, where
//! `ttl = grace + 2 × renew_every`. If the whole machine sleeps, dies or loses its network,
//! nothing renews, and the provider itself ends the sandboxes a little after the grace.
//!
//! - Detached sandboxes (by the `detach` command or the `sandguard.detached=true` label) are
//!   not renewed: their own TTL is what should end them.
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

use crate::labels::Selector;
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
}

impl Keeper {
    /// A keeper for the TTL-capable providers among `providers`, or `None` if there are none.
    pub fn new(
        providers: &[Arc<dyn Provider>],
        session: &str,
        grace: Duration,
        every: Duration,
        holdings: SharedHoldings,
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
        })
    }

    /// Renews [`FIRST_ROUND`] after start (not at once: the guarded program is starting on the
    /// same cores, and has created nothing yet), then every `renew_every`, until aborted.
    pub async fn run(self) {
        let first = tokio::time::Instant::now() + FIRST_ROUND.min(self.every);
        let mut tick = tokio::time::interval_at(first, self.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
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
        let selector = Selector::session(&self.session);
        let (mut targets, failures) =
            crate::reclaim::list_all(std::slice::from_ref(provider), &selector).await;
        for f in failures {
            tracing::warn!("cannot list {} to renew TTLs: {}", f.provider, f.error);
        }
        let provider = provider.as_ref();
        let is_detached = |s: &Sandbox| {
            s.is_detached()
                || holdings
                    .detached
                    .iter()
                    .any(|t| t.provider == s.provider && t.id == s.id)
        };
        targets.retain(|s| !is_detached(s));
        for claim in holdings
            .claims
            .iter()
            .filter(|t| t.provider == provider.name())
        {
            if !targets.iter().any(|s| s.id == claim.id) {
                if let Ok(mut s) = provider.parse_claim(&claim.id) {
                    s.provider = claim.provider.clone();
                    targets.push(s);
                }
            }
        }
        let ttl = self.ttl;
        stream::iter(targets)
            .for_each_concurrent(CONCURRENCY, |s| async move {
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
        let rx = Arc::new(std::sync::Mutex::new(holdings));
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        let keeper = Keeper::new(
            &providers,
            "s",
            Duration::from_secs(600),
            Duration::from_secs(60),
            rx,
        )
        .unwrap();
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

    #[test]
    fn no_ttl_provider_means_no_keeper() {
        let providers: Vec<Arc<dyn Provider>> = vec![crate::providers::fake::Fake::holding(vec![])];
        let rx = SharedHoldings::default();
        assert!(Keeper::new(
            &providers,
            "s",
            Duration::from_secs(600),
            Duration::from_secs(60),
            rx
        )
        .is_none());
    }
}
