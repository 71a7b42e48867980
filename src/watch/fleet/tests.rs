//! The registrar against the in-memory store, on paused time: registration, renewals,
//! mirrored claims, a store that was down or lost its data, a resumed session, and when the
//! session's spend is written.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use crate::fleet::memory::MemoryStore;
use crate::ledger::spend::daily::DayShare;
use crate::protocol::Target;

fn registration(store: Arc<MemoryStore>) -> Registration {
    Registration {
        store,
        record: SessionRecord {
            id: "s1".into(),
            host: "a".into(),
            owner: "o".into(),
            pid: 1,
            labels: Default::default(),
            providers: vec!["docker".into()],
            started_ms: 1,
        },
        lease: Duration::from_secs(3),
        tally: None,
    }
}

fn claim(id: &str) -> Target {
    Target {
        provider: "docker".into(),
        id: id.into(),
    }
}

#[tokio::test(start_paused = true)]
async fn registers_renews_within_the_lease_and_mirrors_claims_at_once() {
    let store = Arc::new(MemoryStore::default());
    let holdings = SharedHoldings::default();
    let changed = Arc::new(Notify::new());
    let task = tokio::spawn(
        Registrar::new(
            registration(store.clone()),
            holdings.clone(),
            changed.clone(),
        )
        .run(),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(store
        .peek("s1")
        .is_some_and(|(s, alive, _)| s == SessionState::Active && alive));
    // Ten leases later it still holds the lease: renewed every lease / 3.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(store.peek("s1").unwrap().1, "the lease was not renewed");
    let calls = store.calls.load(std::sync::atomic::Ordering::SeqCst);
    // One round trip per renewal, three renewals a lease (and the registration).
    assert!(
        (30..=32).contains(&calls),
        "{calls} round trips in 10 leases"
    );
    holdings.lock().unwrap().claims.insert(claim("c1"));
    changed.notify_one();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(store.peek("s1").unwrap().2.claims.contains(&claim("c1")));
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_store_that_was_down_or_lost_its_data_gets_the_session_again() {
    let store = Arc::new(MemoryStore::default());
    store.set_down(true);
    let holdings = SharedHoldings::default();
    holdings.lock().unwrap().claims.insert(claim("c1"));
    let task = tokio::spawn(
        Registrar::new(
            registration(store.clone()),
            holdings.clone(),
            Arc::new(Notify::new()),
        )
        .run(),
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(store.peek("s1").is_none());
    store.set_down(false);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (state, alive, mirrored) = store.peek("s1").expect("registered once back");
    assert!(state == SessionState::Active && alive);
    assert!(mirrored.claims.contains(&claim("c1")));
    // Redis restarted empty: the next renewal finds no record and registers again.
    store.flush();
    tokio::time::sleep(Duration::from_secs(1) + Duration::from_millis(10)).await;
    let (_, alive, mirrored) = store.peek("s1").expect("registered again within a renewal");
    assert!(alive && mirrored.claims.contains(&claim("c1")));
    task.abort();
}

#[tokio::test(start_paused = true)]
async fn a_resumed_session_registers_again_under_its_id_with_its_new_owner() {
    let store = Arc::new(MemoryStore::default());
    let holdings = SharedHoldings::default();
    holdings.lock().unwrap().claims.insert(claim("c1"));
    let first = tokio::spawn(
        Registrar::new(
            registration(store.clone()),
            holdings,
            Arc::new(Notify::new()),
        )
        .run(),
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The first sidecar dies (no end written); then the ended case: its end written.
    first.abort();
    for ended in [None, Some(SessionState::Reclaimed.into())] {
        if let Some(state) = ended {
            finish(store.as_ref(), "s1", state).await;
        }
        let mut resumed = registration(store.clone());
        resumed.record.owner = "o2".into();
        resumed.record.pid = 2;
        let seeded = SharedHoldings::default();
        seeded
            .lock()
            .unwrap()
            .claims
            .extend([claim("c1"), claim("c2")]);
        let second = tokio::spawn(Registrar::new(resumed, seeded, Arc::new(Notify::new())).run());
        tokio::time::sleep(Duration::from_millis(10)).await;
        let (state, alive, mirrored) = store.peek("s1").expect("registered again");
        assert!(
            state == SessionState::Active && alive,
            "{ended:?}: {state:?}"
        );
        assert_eq!(mirrored.claims.len(), 2, "{ended:?}");
        let listed = store.sessions().await.unwrap();
        assert!(
            listed
                .iter()
                .any(|s| s.record.id == "s1" && s.record.owner == "o2"),
            "{ended:?}"
        );
        second.abort();
    }
}

/// A tally that counts its reads and says one docker sandbox, alive while `alive` is.
fn counting_tally(reads: Arc<AtomicUsize>, alive: Arc<AtomicBool>) -> Tally {
    Arc::new(move |now_ms| {
        let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
        let alive = usize::from(alive.load(Ordering::SeqCst));
        let mut days = Days::new();
        let share = crate::ledger::spend::Share {
            time: Duration::from_secs(n as u64),
            sandboxes: 1,
            alive,
            ..Default::default()
        };
        let day = crate::ledger::spend::daily::day(now_ms);
        days.insert((day, "docker".into()), DayShare { share, first: 1 });
        Ok(days)
    })
}

/// The seconds the store holds for the session (the tally's read count when written).
async fn stored(store: &MemoryStore) -> Option<u64> {
    let now = crate::ledger::now_ms();
    let entries = store
        .spend(crate::fleet::spend::days(Some(now), now))
        .await
        .unwrap();
    entries
        .iter()
        .find(|e| e.session == "s1")
        .map(|e| e.figures.time.as_secs())
}

#[tokio::test(start_paused = true)]
async fn spend_is_written_at_registration_then_at_a_timed_renewal_when_due_and_at_the_end() {
    let store = Arc::new(MemoryStore::default());
    let (reads, alive) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut p = registration(store.clone());
    p.tally = Some(counting_tally(reads.clone(), alive.clone()));
    let last = p.last();
    let holdings = SharedHoldings::default();
    let changed = Arc::new(Notify::new());
    let task = tokio::spawn(Registrar::new(p, holdings.clone(), changed.clone()).run());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(stored(&store).await, Some(1), "written at registration");
    // Ten leases of renewals with nothing changed and nothing alive: no read, no write.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    // A claim is mirrored at once; its figures go with the next timed renewal (lease / 3).
    holdings.lock().unwrap().claims.insert(claim("c1"));
    alive.store(true, Ordering::SeqCst);
    changed.notify_one();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(store.peek("s1").unwrap().2.claims.contains(&claim("c1")));
    assert_eq!(reads.load(Ordering::SeqCst), 1, "a poke reads no journal");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(stored(&store).await, Some(2));
    // Alive: its growing time is written again at each timed renewal, and only there.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let n = reads.load(Ordering::SeqCst);
    assert!((31..=33).contains(&n), "{n} reads in 30 renewals");
    // Nothing alive any more, nothing changed: one write says so, then none.
    alive.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(reads.load(Ordering::SeqCst), n + 1);
    let n = n + 1;
    task.abort();
    last.write(SessionState::Reclaimed.into()).await;
    assert_eq!(
        stored(&store).await,
        Some(n as u64 + 1),
        "written at the end"
    );
    assert_eq!(store.peek("s1").unwrap().0, SessionState::Reclaimed);
}

#[test]
fn a_sidecar_stopped_while_its_owner_lives_is_not_left_for_a_fleet_sweep() {
    assert_eq!(end_state(None, SessionState::Active), FleetState::Stopped);
    assert_eq!(
        end_state(Some(EndCause::Bye), SessionState::Clean),
        SessionState::Clean
    );
    assert_eq!(
        end_state(Some(EndCause::LeaseExpired), SessionState::Pending),
        SessionState::Pending
    );
}
