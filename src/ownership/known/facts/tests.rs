//! What the ledger is asked for the facts, and what it is not: a session's own records settle
//! its own label; another session's label, claims and detaches are read for what it claimed.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Known, Own};
use crate::identity::{Judge, Liveness};
use crate::ledger::SessionView;
use crate::ownership::{Session, Sidecar, User};
use crate::protocol::Target;
use crate::providers::fake::{self, Fake};
use crate::providers::{Kind, Provider};

const ALIVE: Session = Session {
    owner: Liveness::Alive,
    sidecar: Sidecar::Alive,
    ended_at: None,
    lease: crate::ownership::Lease::None,
};

/// A ledger where session `other` claimed `x` and then detached it.
fn known() -> Known {
    let x = Target::new("fake", "x").unwrap();
    let other = SessionView {
        claims: [x.clone()].into(),
        detached: [x.clone()].into(),
        detached_claims: [x].into(),
        ..SessionView::blank("other")
    };
    let providers: Vec<Arc<dyn Provider>> = vec![Arc::new(Fake::default())];
    Known::of(vec![other], Judge::new(BTreeSet::new()), &providers)
}

fn own(standing: Session, claimed: bool) -> Own<'static> {
    Own {
        session: "me",
        standing,
        claimed,
        detached: false,
    }
}

#[test]
fn a_live_session_is_told_its_own_label_by_its_own_records() {
    let known = known();
    let mine = fake::sandbox("x", Kind::Instance, Some("me"));
    let facts = known.facts_for(&mine, own(ALIVE, true));
    assert_eq!(facts.labelled, Some(("me", ALIVE)));
    assert_eq!(facts.claimed_by, vec![("me", Session::UNKNOWN)]);
    assert!(
        !facts.detached,
        "a live sidecar's sandbox was adopted by nobody"
    );

    // Over: another session may have adopted and detached it.
    let over = Session {
        sidecar: Sidecar::Gone,
        ..ALIVE
    };
    assert!(known.facts_for(&mine, own(over, false)).detached);
}

#[test]
fn a_claim_of_another_sessions_sandbox_is_told_what_the_ledger_says() {
    let known = known();
    let theirs = fake::sandbox("x", Kind::Instance, Some("other"));
    let facts = known.facts_for(&theirs, own(ALIVE, true));
    let (id, standing) = facts.labelled.unwrap();
    assert_eq!((id, standing.sidecar), ("other", Sidecar::Gone));
    let by: Vec<&str> = facts.claimed_by.iter().map(|(id, _)| *id).collect();
    assert_eq!(by, ["me", "other"]);
    assert!(facts.detached, "detach wins over any claim");

    // Not claimed: not the session's, and nothing is read.
    let facts = known.facts_for(&theirs, own(ALIVE, false));
    assert_eq!(facts.labelled, Some(("other", Session::UNKNOWN)));
    assert!(facts.claimed_by.is_empty() && !facts.detached);
}

#[test]
fn an_arriving_claim_is_told_other_sessions_holds_and_not_its_own() {
    let known = known();
    let mine = fake::sandbox("x", Kind::Instance, Some("me"));
    let facts = known.claim_facts(&mine, "me");
    assert_eq!(facts.labelled, Some(("me", Session::UNKNOWN)));
    let by: Vec<&str> = facts.claimed_by.iter().map(|(id, _)| *id).collect();
    assert_eq!(by, ["other"]);
    assert!(known.claim_facts(&mine, "other").claimed_by.is_empty());
}

/// Without a ledger (a fleet sweep on another host), nothing but the asker's own records and
/// the sandbox's owner label is known: no other session's claim or detach is seen, and the
/// owner label says how its session stands.
#[test]
fn without_a_ledger_the_owner_label_says_how_a_session_stands() {
    let mut theirs = fake::sandbox("x", Kind::Instance, Some("other"));
    let me = crate::identity::Identity::current();
    if let Some(me) = &me {
        theirs
            .labels
            .insert(crate::labels::OWNER.to_string(), me.to_label());
    }
    let no_ledger = Known::lazy(None, &[]);
    let facts = no_ledger.facts_for(&theirs, own(ALIVE, true));
    assert_eq!(facts.claimed_by, vec![("me", Session::UNKNOWN)]);
    assert!(!facts.detached);
    if me.is_some() {
        let owner = Known::lazy(None, &[])
            .facts(&theirs)
            .labelled
            .unwrap()
            .1
            .owner;
        assert_eq!(owner, Liveness::Alive);
    }
}

/// Which user a live owner runs as is read for an owner alive here whose session the ledger
/// does not have (rule 8), and only for such an owner.
#[test]
fn a_live_owners_user_is_read_only_outside_the_ledger() {
    let me = crate::identity::Identity::current().expect("this process's identity");
    let with_owner = |session: &str, owner: &str| {
        let mut s = fake::sandbox("x", Kind::Instance, Some(session));
        s.labels
            .insert(crate::labels::OWNER.to_string(), owner.to_string());
        s
    };
    let known = known();
    let here = with_owner("elsewhere", &me.to_label());
    assert_eq!(known.facts(&here).owner_user, User::Yours);
    // The ledger's own session: the user's, nothing to read.
    let in_ledger = with_owner("other", &me.to_label());
    assert_eq!(known.facts(&in_ledger).owner_user, User::Unknown);
    // Not alive here: another machine's owner, a dead one.
    let elsewhere = crate::identity::Identity {
        machine: "1111111111111111".into(),
        ..me.clone()
    };
    let dead = crate::identity::Identity {
        start_time: me.start_time + 1,
        ..me
    };
    for owner in [elsewhere, dead] {
        let s = with_owner("elsewhere", &owner.to_label());
        assert_eq!(known.facts(&s).owner_user, User::Unknown, "{owner}");
    }
}
