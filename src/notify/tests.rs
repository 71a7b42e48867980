//! Unit tests of the events: their shapes, their redaction, and the tracker's memory.

use std::collections::BTreeMap;
use std::time::Duration;

use super::sweep::Tracker;
use super::*;
use crate::providers::{Kind as SandboxKind, Sandbox};
use crate::reclaim::{Failure, ListFailure, Outcome, Removal};
use crate::sweep::Pass;

fn sandbox(id: &str, session: &str) -> Sandbox {
    let mut s = Sandbox::claimed("docker", SandboxKind::Instance, id);
    s.labels = BTreeMap::from([(crate::labels::SESSION.to_string(), session.to_string())]);
    s
}

fn removal(id: &str, session: &str, outcome: Outcome) -> Removal {
    Removal {
        sandbox: sandbox(id, session),
        outcome,
        attempts: 1,
        at_ms: None,
    }
}

#[test]
fn a_payload_carries_no_secret_anywhere() {
    let secret = Secret::new("e2b_0123456789abcdef");
    let event = Event::new(
        Kind::SweeperFailing,
        "listing said key e2b_0123456789abcdef",
    )
    .with(
        "failures",
        serde_json::json!([{"error": "Bearer abc.def token=xyz"}]),
    );
    let text = event.payload("h1", &[secret]).to_string();
    assert!(!text.contains("e2b_0123456789abcdef"), "{text}");
    assert!(!text.contains("abc.def") && !text.contains("xyz"), "{text}");
    let v = Event { at: 0, ..event }.payload("h1", &[]);
    assert_eq!(v["event"], "sweeper_failing");
    assert_eq!(v["host"], "h1");
    assert_eq!(v["at"], "1970-01-01T00:00:00Z");
    assert!(v["text"].as_str().unwrap().starts_with("sandguard on h1: "));
}

#[test]
fn a_flood_is_one_event_with_a_count() {
    let mut pass = Pass::default();
    for n in 0..1000 {
        pass.removals.push(removal(
            &format!("c{n}"),
            &format!("s{}", n % 50),
            Outcome::Removed,
        ));
    }
    let events = Tracker::new(None).pass(&pass, 0);
    assert_eq!(events.len(), 1);
    let v = events[0].payload("h", &[]);
    assert_eq!(v["event"], "orphans_reclaimed");
    assert_eq!(v["count"], 1000);
    assert_eq!(v["providers"]["docker"], 1000);
    assert_eq!(v["sessions"].as_array().unwrap().len(), NAMED);
    assert_eq!(v["more"], 50 - NAMED);
}

#[test]
fn a_pending_sandbox_is_told_once_and_its_finish_once() {
    let mut t = Tracker::new(None);
    let failed = || {
        removal(
            "c1",
            "s1",
            Outcome::Unfinished(Failure::new("daemon unreachable")),
        )
    };
    let pass = Pass {
        removals: vec![failed()],
        ..Pass::default()
    };
    let kinds = |e: Vec<Event>| e.iter().map(|e| e.kind).collect::<Vec<_>>();
    assert_eq!(kinds(t.pass(&pass, 0)), [Kind::ReclaimPending]);
    assert!(t.pass(&pass, 0).is_empty(), "told once");
    let done = Pass {
        removals: vec![removal("c1", "s1", Outcome::Removed)],
        finishing: vec!["s1".into()],
        ended: vec![("s1".into(), crate::ledger::SessionState::Reclaimed)],
        ..Pass::default()
    };
    assert_eq!(kinds(t.pass(&done, 0)), [Kind::PendingFinished]);
}

#[test]
fn failing_is_told_on_the_second_pass_in_a_row_once_and_then_its_recovery() {
    let mut t = Tracker::new(None);
    let bad = Pass {
        list_failures: vec![ListFailure {
            provider: "e2b".into(),
            error: Failure::new("503"),
        }],
        ..Pass::default()
    };
    let good = Pass::default();
    assert!(t.pass(&bad, 0).is_empty(), "one failed pass is a blip");
    assert!(t.pass(&good, 0).is_empty());
    assert!(t.pass(&bad, 0).is_empty());
    let e = t.pass(&bad, 0);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].kind, Kind::SweeperFailing);
    assert!(t.pass(&bad, 0).is_empty(), "once per streak");
    let e = t.pass(&good, 0);
    assert_eq!(e[0].kind, Kind::SweeperRecovered);
    assert_eq!(e[0].fields["passes"], 3);
}

#[test]
fn a_detached_sandbox_is_told_when_old_enough_and_once() {
    let mut t = Tracker::new(Some(Duration::from_secs(60)));
    let mut young = sandbox("d1", "s1");
    young.created_at = Some(1000);
    let pass = Pass {
        detached: vec![young],
        ..Pass::default()
    };
    assert!(t.pass(&pass, 1030).is_empty());
    let e = t.pass(&pass, 1060);
    assert_eq!(e[0].kind, Kind::DetachedAlive);
    assert_eq!(e[0].fields["sandboxes"][0]["age_s"], 60);
    assert!(t.pass(&pass, 2000).is_empty());
    assert!(
        Tracker::new(None).pass(&pass, 5000).is_empty(),
        "unset: never"
    );
}

#[test]
fn a_sandbox_pending_again_after_its_removal_is_told_again() {
    let mut t = Tracker::new(None);
    let pending = Pass {
        removals: vec![removal(
            "c1",
            "s1",
            Outcome::Unfinished(Failure::new("busy")),
        )],
        ..Pass::default()
    };
    let removed = Pass {
        removals: vec![removal("c1", "s1", Outcome::Removed)],
        ..Pass::default()
    };
    assert_eq!(t.pass(&pending, 0).len(), 1);
    assert!(t.pass(&pending, 0).is_empty());
    t.pass(&removed, 0);
    assert_eq!(t.pass(&pending, 0).len(), 1, "forgotten once removed");
}
