//! The keeper against a fake TTL-capable provider: what it renews, and that it stops.

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
fn keeper(p: Arc<dyn Provider>, holdings: Holdings, halting: &Halting) -> Keeper {
    let providers = vec![p];
    Keeper::new(
        &providers,
        "s",
        Duration::from_secs(600),
        Duration::from_secs(60),
        Arc::new(std::sync::Mutex::new(holdings)),
        link(halting.halt(), &providers),
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
    let keeper = keeper(p.clone(), holdings, &halting);
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
    let keeper = keeper(p.clone(), Holdings::default(), &halting);
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
        link(Halting::default().halt(), &providers),
    )
    .is_none());
}

/// A claim pinned to its object's identity (`ID@IDENTITY`, where ids are names) is matched to
/// the sandbox listed under the bare id, so that the labels it carries are judged: one that
/// carries `sandguard.detached=true` is not renewed, one without labels is.
#[tokio::test(start_paused = true)]
async fn a_pinned_claim_is_judged_by_the_labels_of_the_sandbox_it_names() {
    use crate::providers::fake::{sandbox, Fake};
    let mut detached = sandbox("d", Kind::Instance, Some("dead"));
    detached.identity = Some("1".into());
    detached
        .labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    let mut plain = sandbox("p", Kind::Instance, None);
    plain.identity = Some("2".into());
    let fake = Arc::new(Fake {
        sandboxes: Mutex::new(vec![detached, plain]),
        ttl: true,
        reuses_ids: true,
        ..Default::default()
    });
    let claim = |id: &str| Target {
        provider: "fake".into(),
        id: id.into(),
    };
    let holdings = Holdings {
        claims: [claim("d@1"), claim("p@2")].into(),
        detached: Default::default(),
    };
    let halting = Halting::default();
    let keeper = keeper(fake.clone(), holdings, &halting);
    let task = tokio::spawn(keeper.run());
    tokio::time::sleep(FIRST_ROUND + Duration::from_secs(1)).await;
    task.abort();
    let renewed: Vec<String> = fake
        .renewals
        .lock()
        .unwrap()
        .iter()
        .map(|(id, identity, _)| format!("{id}@{}", identity.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(renewed, vec!["p@2"]);
}

/// What the keeper takes from a sidecar of session `s` without a ledger.
fn link(halt: super::super::ttl::Halt, providers: &[Arc<dyn Provider>]) -> super::super::Link {
    super::super::Link {
        halt,
        facts: crate::ownership::known::Source::new(None, "s", providers),
        gone: tokio::sync::mpsc::unbounded_channel().0,
    }
}
