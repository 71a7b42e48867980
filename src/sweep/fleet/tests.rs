//! The fleet pass against the in-memory store and the fake provider.

use super::*;
use crate::fleet::memory::MemoryStore;
use crate::fleet::{Holdings, SessionRecord};
use crate::ledger::StateDir;
use crate::protocol::Target;
use crate::providers::fake::{sandbox, Fake};
use crate::providers::Kind;

fn record(id: &str) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        host: "a".into(),
        owner: "o".into(),
        pid: 1,
        labels: Default::default(),
        providers: vec!["fake".into()],
        started_ms: 1,
    }
}

/// What a sidecar of host `a` wrote of session `id` today: one fake sandbox, alive, 90 s.
fn alive_spend(id: &str) -> crate::fleet::SessionSpend {
    let day = crate::ledger::spend::daily::day(crate::ledger::now_ms());
    let figures = crate::fleet::spend::Figures {
        time: Duration::from_secs(90),
        alive_time: Duration::from_secs(90),
        sandboxes: 1,
        first: 1,
        alive: 1,
        untimed: 0,
    };
    crate::fleet::SessionSpend {
        host: "a".into(),
        session: id.into(),
        started_ms: 1,
        days: [((day, "fake".to_string()), figures)].into(),
    }
}

/// A machine's own sweep ends a session of its ledger: the store gets its end and its
/// figures from the journal, which replace what its sidecar last wrote.
#[tokio::test]
async fn a_local_end_writes_the_journals_figures_with_the_end() {
    let store = MemoryStore::default();
    store
        .register(
            &record("ended"),
            &Holdings::default(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    store.put_spend(&alive_spend("ended")).await.unwrap();
    let dir = crate::ledger::testutil::TempDir::new("tell-ended");
    let ledger = StateDir::open(dir.path()).unwrap();
    let t = crate::ledger::now_ms() - 60_000;
    let journal = [
        format!(r#"{{"t":{t},"ev":"start","owner":"o","pid":7,"grace_ms":5}}"#),
        format!(r#"{{"t":{t},"ev":"claim","provider":"fake","id":"c1"}}"#),
        format!(
            r#"{{"t":{},"ev":"removed","provider":"fake","id":"c1","outcome":"removed"}}"#,
            t + 42_000
        ),
        format!(r#"{{"t":{},"ev":"end","state":"reclaimed"}}"#, t + 43_000),
    ];
    std::fs::write(
        dir.path().join("sessions/ended.journal"),
        journal.join("\n") + "\n",
    )
    .unwrap();
    tell_ended(&store, &ledger, "ended", SessionState::Reclaimed).await;
    assert_eq!(
        store.session("ended").await.unwrap().unwrap().state,
        SessionState::Reclaimed
    );
    let now = crate::ledger::now_ms();
    let spend = store
        .spend(crate::fleet::spend::days(Some(t), now))
        .await
        .unwrap();
    // (Two days' figures when the minute crossed midnight.)
    let time: Duration = spend.iter().map(|e| e.figures.time).sum();
    assert_eq!(time, Duration::from_secs(42), "{spend:?}");
    assert!(spend.iter().all(|e| e.figures.alive == 0), "{spend:?}");
}

fn options() -> Options {
    Options {
        concurrency: 4,
        deadline: Duration::from_secs(5),
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(100),
        settle: None,
        rates: Default::default(),
        paces: Default::default(),
        cutoff: Default::default(),
        windows: Default::default(),
    }
}

#[tokio::test]
async fn expired_leases_are_reclaimed_once_and_live_stopped_or_locked_ones_left() {
    let store = Arc::new(MemoryStore::default());
    let claimed = Target {
        provider: "fake".into(),
        id: "c1".into(),
    };
    let short = Duration::from_millis(1);
    let holdings = Holdings {
        claims: [claimed].into(),
        ..Default::default()
    };
    store
        .register(&record("dead"), &holdings, short)
        .await
        .unwrap();
    store
        .register(&record("stopped"), &Holdings::default(), short)
        .await
        .unwrap();
    store.finish("stopped", FleetState::Stopped).await.unwrap();
    store
        .register(&record("busy"), &Holdings::default(), short)
        .await
        .unwrap();
    assert!(matches!(
        store
            .lock("busy", "other", Duration::from_secs(60))
            .await
            .unwrap(),
        Lock::Held(Some(_))
    ));
    store
        .register(
            &record("alive"),
            &Holdings::default(),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let fake = Fake::holding(vec![
        sandbox("l1", Kind::Instance, Some("dead")),
        sandbox("c1", Kind::Instance, None),
        sandbox("s1", Kind::Instance, Some("stopped")),
        sandbox("b1", Kind::Instance, Some("busy")),
        sandbox("a1", Kind::Instance, Some("alive")),
    ]);
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    // What the dead and the live sidecars last wrote: one alive sandbox each.
    for id in ["dead", "alive"] {
        store.put_spend(&alive_spend(id)).await.unwrap();
    }
    let fleet = FleetSweep {
        store: store.clone(),
        host: "b".into(),
        lease: Duration::from_secs(3),
        ledger: None,
    };
    let pass = pass(&fleet, &providers, &options(), false).await;
    assert!(pass.list_failures.is_empty(), "{:?}", pass.list_failures);
    // The dead session's figures are closed (its time kept), the live one's left alone.
    let now = crate::ledger::now_ms();
    let spend = store
        .spend(crate::fleet::spend::days(Some(now), now))
        .await
        .unwrap();
    let of = |id: &str| spend.iter().find(|e| e.session == id).unwrap().figures;
    assert_eq!(
        (of("dead").alive, of("dead").time),
        (0, Duration::from_secs(90))
    );
    assert_eq!(of("alive").alive, 1);
    assert_eq!(fake.remaining(), ["a1", "b1", "s1"]);
    let verdict = |id: &str| {
        pass.decisions
            .iter()
            .find(|d| d.session == id)
            .map(|d| d.verdict)
    };
    assert_eq!(verdict("dead"), Some(SessionVerdict::Reclaim));
    assert_eq!(verdict("alive"), Some(SessionVerdict::Leave));
    assert_eq!(verdict("stopped"), Some(SessionVerdict::Leave));
    assert_eq!(verdict("busy"), Some(SessionVerdict::Leave));
    let dead = store.session("dead").await.unwrap().unwrap();
    assert_eq!(
        (dead.state, dead.reclaims),
        (SessionState::Reclaimed.into(), 1)
    );
    // A second pass finds it over: nothing reclaimed twice.
    let again = super::pass(&fleet, &providers, &options(), false).await;
    assert_eq!(again.removals.len(), 0);
    assert_eq!(store.session("dead").await.unwrap().unwrap().reclaims, 1);
}

/// Issue 22 point 7: on the owner's own machine, an expired fleet lease (a dead sidecar,
/// or a lease key deleted by hand) never outweighs an owner this machine sees alive.
#[tokio::test]
async fn an_owner_seen_alive_here_is_never_reclaimed_for_an_expired_lease() {
    let store = Arc::new(MemoryStore::default());
    let me = crate::identity::Identity::current().unwrap();
    let alive = SessionRecord {
        owner: me.to_label(),
        ..record("alive")
    };
    let short = Duration::from_millis(1);
    store
        .register(&alive, &Holdings::default(), short)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let fake = Fake::holding(vec![sandbox("a1", Kind::Instance, Some("alive"))]);
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    let fleet = FleetSweep {
        store: store.clone(),
        host: "a".into(),
        lease: Duration::from_secs(3),
        ledger: None,
    };
    let pass = pass(&fleet, &providers, &options(), false).await;
    assert_eq!(fake.remaining(), ["a1"]);
    let decision = pass
        .decisions
        .iter()
        .find(|d| d.session == "alive")
        .unwrap();
    assert_eq!(decision.verdict, SessionVerdict::Leave);
    assert!(
        decision.reason.contains("lives on this machine"),
        "{}",
        decision.reason
    );
    let s = store.session("alive").await.unwrap().unwrap();
    assert_eq!(s.reclaims, 0);
}

#[tokio::test]
async fn a_store_that_cannot_be_read_makes_no_verdict() {
    let store = Arc::new(MemoryStore::default());
    store.set_down(true);
    let fake = Fake::holding(vec![sandbox("l1", Kind::Instance, Some("dead"))]);
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    let fleet = FleetSweep {
        store,
        host: "b".into(),
        lease: Duration::from_secs(3),
        ledger: None,
    };
    let pass = pass(&fleet, &providers, &options(), false).await;
    assert!(pass.decisions.is_empty());
    assert!(pass.list_failures.is_empty(), "the store is no provider");
    assert_eq!(pass.store_failures.len(), 1);
    assert_eq!(pass.store_failures[0].store, crate::sweep::StoreKind::Fleet);
    assert!(!pass.is_clean());
    assert_eq!(fake.remaining(), ["l1"]);
}

/// Issue 23: the time a held lease has left moves on every pass; the verdict's reason must
/// not, or `sweep --every` says the same thing again on every pass.
#[test]
fn a_held_lease_gives_one_reason_whatever_its_time_left() {
    let owner = Judge::new(Default::default());
    let held = |ms| FleetSession {
        record: record("s"),
        state: SessionState::Active.into(),
        lease_left: Some(Duration::from_millis(ms)),
        holdings: Holdings::default(),
        reclaims: 0,
    };
    let (first, later) = (judge(&held(2747), &owner), judge(&held(1000), &owner));
    assert_eq!(first, later);
    assert_eq!(
        first,
        (
            SessionVerdict::Leave,
            "its fleet lease is held by host a".into()
        )
    );
    let d = decision(&held(2747), first.0, first.1);
    assert_eq!(d.lease_left, Some(Duration::from_millis(2747)));
}
