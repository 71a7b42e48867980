//! The keeper against the fake provider: what it removes, what it tells, what it leaves.

use super::*;
use crate::providers::fake::{self, Fake};
use crate::providers::Kind;

fn born(id: &str, session: Option<&str>, ago: i64) -> Sandbox {
    let mut s = fake::sandbox(id, Kind::Instance, session);
    s.created_at = Some(crate::timefmt::now_unix() - ago);
    s
}

#[tokio::test(start_paused = true)]
async fn the_sessions_old_sandbox_is_removed_and_told_and_nothing_else() {
    let mut detached = born("old-detached", Some("s"), 3600);
    detached
        .labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    let fake = Fake::holding(vec![
        born("old", Some("s"), 3600),
        born("young", Some("s"), 10),
        born("stranger", None, 3600),
        born("theirs", Some("t"), 3600),
        detached,
        born("old-claimed", None, 3600),
    ]);
    let mut holdings = super::super::ttl::Holdings::default();
    holdings.claims.insert(Target {
        provider: "fake".into(),
        id: "old-claimed".into(),
    });
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    let halting = super::super::ttl::Halting::default();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let keeper = Keeper::new(
        &providers,
        "s",
        (
            crate::budget::Limits {
                lifetime: Some(Duration::from_secs(60)),
                ..Default::default()
            }
            .into(),
            None,
        ),
        Arc::new(std::sync::Mutex::new(holdings)),
        link(halting.halt(), &providers),
        tx,
    );
    assert_eq!(keeper.every, Duration::from_secs(6), "a tenth of the limit");
    let task = tokio::spawn(keeper.run());
    let mut told = [rx.recv().await.unwrap(), rx.recv().await.unwrap()];
    told.sort_by(|a, b| a.target.id.cmp(&b.target.id));
    assert_eq!(
        told.iter()
            .map(|a| a.target.id.as_str())
            .collect::<Vec<_>>(),
        ["old", "old-claimed"]
    );
    assert!(told
        .iter()
        .all(|a| !a.gone && a.age >= Duration::from_secs(3600)));
    let mut left = fake.remaining();
    left.sort();
    assert_eq!(left, ["old-detached", "stranger", "theirs", "young"]);
    halting.stop().await;
    task.await.unwrap();
}

/// What the keeper takes from a sidecar of session `s` without a ledger.
fn link(halt: super::super::ttl::Halt, providers: &[Arc<dyn Provider>]) -> super::super::Link {
    super::super::Link {
        halt,
        facts: crate::ownership::known::Source::new(None, "s", providers),
        gone: tokio::sync::mpsc::unbounded_channel().0,
    }
}
