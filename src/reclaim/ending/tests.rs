//! Unit tests of `reclaim::ending`.

use std::time::Duration;

use super::*;
use crate::ledger::testutil::TempDir;
use crate::ledger::{decode_line, StateDir};
use crate::providers::fake::{self, Fake};
use crate::providers::Kind;
use crate::reclaim::{Failure, ListFailure, Removal};

fn removal(id: &str, outcome: Outcome) -> Removal {
    Removal {
        at_ms: None,
        sandbox: Sandbox::claimed("fake", crate::providers::Kind::Instance, id),
        outcome,
        attempts: 1,
    }
}

#[test]
fn an_unchanged_failure_is_not_journaled_again() {
    let t = Target {
        provider: "fake".into(),
        id: "a".into(),
    };
    let before = Before {
        state: Some(SessionState::Pending),
        pending: [(t, "boom".to_string())].into(),
        unlisted: [("acme".to_string(), "down".to_string())].into(),
        providers: None,
    };
    let report = Report {
        removals: vec![
            removal("a", Outcome::Failed(Failure::new("boom"))),
            removal("b", Outcome::Failed(Failure::new("boom"))),
            removal("c", Outcome::Removed),
        ],
        list_failures: vec![ListFailure {
            provider: "acme".into(),
            error: Failure::new("down"),
        }],
        listed: vec!["fake".into()],
    };
    let got = records(&before, &report, &BTreeMap::new(), &[]);
    let kinds: Vec<String> = got
        .iter()
        .map(|r| serde_json::to_value(r).unwrap()["ev"].to_string())
        .collect();
    assert_eq!(kinds, ["\"failed\"", "\"removed\""], "{got:?}");
}

#[test]
fn a_provider_the_reclaim_did_not_list_keeps_the_session_pending() {
    let before = Before {
        providers: Some(vec!["fake".into(), "acme".into()]),
        ..Default::default()
    };
    let report = Report {
        listed: vec!["fake".into()],
        ..Default::default()
    };
    let fake: Arc<dyn Provider> = crate::providers::fake::Fake::holding(vec![]);
    let left = uncovered(&before, &report, &[fake]);
    assert_eq!(left.keys().collect::<Vec<_>>(), ["acme"]);
}

/// A pending session owes only what its reclaim left (its unlisted providers, those it left
/// sandboxes pending on): a reclaim with only those ends it, and says what is left, and
/// where, without "could not be removed" when nothing failed.
#[test]
fn a_pending_session_owes_only_what_its_reclaim_left() {
    let t = Target {
        provider: "e2b".into(),
        id: "i1".into(),
    };
    let before = Before {
        state: Some(SessionState::Pending),
        pending: [(t, "HTTP 503".to_string())].into(),
        unlisted: [("acme".to_string(), "down".to_string())].into(),
        providers: Some(vec!["docker".into(), "e2b".into(), "acme".into()]),
    };
    let owed: Vec<String> = before.owed().into_iter().collect();
    assert_eq!(owed, ["acme", "e2b"], "docker's part was done");
    let fresh = Before {
        state: Some(SessionState::Active),
        ..before.clone()
    };
    assert_eq!(
        fresh.owed().len(),
        3,
        "not yet reclaimed: it owes every provider"
    );

    let e2b: Arc<dyn Provider> = Arc::new(Fake {
        name: Some("e2b".into()),
        ..Fake::default()
    });
    let report = Report {
        listed: vec!["e2b".into()],
        ..Default::default()
    };
    let left = uncovered(&before, &report, &[e2b]);
    assert_eq!(left.keys().collect::<Vec<_>>(), ["acme"]);
    let said = describe(SessionState::Pending, &report, &left);
    assert!(
        said.starts_with("done with what it has; pending on acme"),
        "{said}"
    );
    assert!(!said.contains("could not be removed"), "{said}");
    let failed = Report {
        list_failures: vec![ListFailure {
            provider: "e2b".into(),
            error: Failure::new("HTTP 503"),
        }],
        ..Default::default()
    };
    let said = describe(SessionState::Pending, &failed, &left);
    assert!(
        said.starts_with("some sandboxes could not be removed"),
        "{said}"
    );
    assert!(
        said.ends_with(
            "acme is left to a sweep that has it (not selected, or not configured here)"
        ),
        "{said}"
    );
}

fn options() -> Options {
    Options {
        concurrency: 4,
        deadline: Duration::from_secs(10),
        retry_initial: Duration::from_millis(10),
        retry_max: Duration::from_millis(100),
        settle: None,
        rates: Default::default(),
        paces: Default::default(),
        cutoff: Default::default(),
        windows: Default::default(),
    }
}

/// Ends session `s1`, holding one labelled sandbox, for `cause`, journaled (`journaled`) or
/// not: the state it ended in, what is left, and the records written after the start.
async fn end_for(cause: EndCause, journaled: bool) -> (SessionState, Vec<String>, Vec<Record>) {
    let dir = TempDir::new("session-ending");
    let start = Record::Start {
        owner: "o".into(),
        pid: 1,
        grace_ms: 5,
        labels: Default::default(),
    };
    let journal = StateDir::open(dir.path())
        .unwrap()
        .create_session("s1", start)
        .unwrap();
    let path = journal.path().to_path_buf();
    let journal: SharedJournal = Arc::new(Mutex::new(journal));
    let fake = Fake::holding(vec![fake::sandbox("a", Kind::Instance, Some("s1"))]);
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
    let known = Arc::new(crate::ownership::known::Known::lazy(None, &providers));
    let plan = Plan::for_session("s1", &providers, ([], []), known);
    let ending = Ending {
        journal: journaled.then_some(&journal),
        providers: &providers,
        plan: &plan,
        options: &options(),
        before: &Before::default(),
        cause,
    };
    let (state, _) = ending.run().await;
    let text = std::fs::read(path).unwrap();
    let records = text
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .skip(1)
        .map(|l| decode_line(l).unwrap())
        .map(|r| match r {
            // When it was removed is the clock's; that it is journaled is tested below.
            Record::Removed {
                provider,
                id,
                outcome,
                at,
                limit,
            } => {
                assert!(at.is_some(), "a removal is journaled with its time");
                Record::Removed {
                    provider,
                    id,
                    outcome,
                    at: None,
                    limit,
                }
            }
            other => other,
        })
        .collect();
    (state, fake.remaining(), records)
}

#[tokio::test]
async fn the_cause_is_journaled_on_reclaim_start_after_the_fact_older_readers_read() {
    let removed = Record::Removed {
        provider: "fake".into(),
        id: "a".into(),
        outcome: "removed".into(),
        at: None,
        limit: None,
    };
    let start = |cause| Record::ReclaimStart { cause: Some(cause) };
    let end = |state| Record::End { state };
    let (state, left, records) = end_for(EndCause::LeaseExpired, true).await;
    assert_eq!((state, left), (SessionState::Reclaimed, vec![]));
    let lease = [
        Record::LeaseExpired,
        start(EndCause::LeaseExpired),
        removed.clone(),
        end(SessionState::Reclaimed),
    ];
    assert_eq!(records, lease);
    // `bye` rests on no fact of its own, and is the one cause that ends clean.
    let (state, _, records) = end_for(EndCause::Bye, true).await;
    assert_eq!(state, SessionState::Clean);
    let bye = [start(EndCause::Bye), removed, end(SessionState::Clean)];
    assert_eq!(records, bye);
}

/// A fleet sweep's session has no journal here: the same reclaim, nothing written.
#[tokio::test]
async fn an_ending_without_a_journal_reclaims_and_writes_nothing() {
    let (state, left, records) = end_for(EndCause::Sweep, false).await;
    assert_eq!(
        (state, left, records),
        (SessionState::Reclaimed, vec![], vec![])
    );
}
