//! Rule 8, one standing at a time: what `stop --all` takes when asked for all, for the user's
//! own and the orphaned (the answer "no"), and for the orphaned alone (`--dead`).

use super::*;
use crate::ownership::{judge, Asker, Lease, Session};
use crate::providers::{fake, Kind, Sandbox};

const NOT_HERE_ALIVE: Session = Session {
    owner: Liveness::Alive,
    sidecar: Sidecar::NotHere,
    ended_at: None,
    lease: Lease::None,
};

fn facts<'a>(s: &'a Sandbox, session: Option<Session>, user: User) -> Facts<'a> {
    Facts {
        sandbox: s,
        labelled: session.map(|standing| ("a", standing)),
        inherited: false,
        claimed_by: Vec::new(),
        detached: false,
        owner_user: user,
        now: 2_000,
    }
}

/// What each of the three askings answers: taken or kept, and the reason.
fn answers(f: &Facts<'_>) -> [(bool, Reason); 3] {
    [Only::All, Only::OwnOrDead, Only::Dead].map(|only| {
        let j = judge(Asker::StopAll { only }, f);
        (j.removes(), j.reason)
    })
}

#[test]
fn the_orphaned_are_taken_however_stop_all_is_asked() {
    let s = fake::sandbox("x", Kind::Instance, Some("a"));
    let dead = Session {
        owner: Liveness::Dead,
        ..NOT_HERE_ALIVE
    };
    // Over in this ledger, its sidecar gone: nobody guards what it left, even if its owner
    // (a program that said bye) lives on.
    let over = Session {
        sidecar: Sidecar::Gone,
        ended_at: Some(1_000),
        ..NOT_HERE_ALIVE
    };
    for (standing, why) in [(dead, Reason::OwnerDead), (over, Reason::SessionOver)] {
        let f = facts(&s, Some(standing), User::Unknown);
        for (taken, reason) in answers(&f) {
            assert!(taken, "{standing:?}");
            assert_eq!(reason, why);
        }
    }
}

#[test]
fn the_users_own_are_kept_by_dead_alone() {
    let s = fake::sandbox("x", Kind::Instance, Some("a"));
    let in_ledger = |sidecar| Session {
        sidecar,
        ..NOT_HERE_ALIVE
    };
    // A session whose owner died with its sidecar still at work: its reclaim's to finish.
    let reclaiming = Session {
        owner: Liveness::Dead,
        ended_at: Some(1_000),
        ..in_ledger(Sidecar::Alive)
    };
    let unjudged_here = Session {
        owner: Liveness::Unknown,
        ..in_ledger(Sidecar::Gone)
    };
    for (standing, user, why) in [
        (
            in_ledger(Sidecar::Alive),
            User::Unknown,
            Reason::SidecarAlive,
        ),
        (reclaiming, User::Unknown, Reason::SidecarAlive),
        (in_ledger(Sidecar::Gone), User::Unknown, Reason::OwnerLives),
        (unjudged_here, User::Unknown, Reason::OwnerUnknown),
        (NOT_HERE_ALIVE, User::Yours, Reason::OwnerLives),
    ] {
        let f = facts(&s, Some(standing), user);
        let [all, own, dead] = answers(&f);
        assert!(all.0 && own.0, "{standing:?}");
        assert_eq!(dead, (false, why), "{standing:?}");
    }
    // A live session's claim keeps a dead owner's sandbox from `--dead`.
    let dead_owner = Session {
        owner: Liveness::Dead,
        ..NOT_HERE_ALIVE
    };
    let mut f = facts(&s, Some(dead_owner), User::Unknown);
    f.claimed_by = vec![("b", in_ledger(Sidecar::Alive))];
    let [all, own, dead] = answers(&f);
    assert!(all.0 && own.0);
    assert_eq!(dead, (false, Reason::ClaimLives { by: "b".into() }));
}

/// Another user's live owner, and every owner that cannot be judged from here (unknown is
/// not dead, and may be anybody's): taken by all alone, kept by the answer "no" and `--dead`.
#[test]
fn theirs_and_the_unjudged_are_taken_only_when_all_is_asked_for() {
    let s = fake::sandbox("x", Kind::Instance, Some("a"));
    let unknown = Session {
        owner: Liveness::Unknown,
        ..NOT_HERE_ALIVE
    };
    let bare = fake::sandbox("y", Kind::Instance, None);
    for (f, why) in [
        (
            facts(&s, Some(NOT_HERE_ALIVE), User::Other(65534)),
            Reason::NotYours { uid: 65534 },
        ),
        (
            facts(&s, Some(NOT_HERE_ALIVE), User::Unknown),
            Reason::UserUnknown,
        ),
        (
            facts(&s, Some(unknown), User::Unknown),
            Reason::OwnerUnknown,
        ),
        (facts(&bare, None, User::Unknown), Reason::NoOwner),
    ] {
        let [all, own, dead] = answers(&f);
        assert_eq!(all, (true, Reason::Named));
        assert_eq!(own, (false, why.clone()));
        assert_eq!(dead, (false, why));
    }
}

/// An expiry ends what is owned (rule 1) when all is asked for; it proves no owner dead, so
/// neither the answer "no" nor `--dead` takes another user's for it.
#[test]
fn an_expiry_is_taken_by_all_alone() {
    let mut s = fake::sandbox("x", Kind::Instance, Some("a"));
    s.labels
        .insert(crate::labels::EXPIRES.into(), "1999".into());
    let f = facts(&s, Some(NOT_HERE_ALIVE), User::Other(1000));
    let [all, own, dead] = answers(&f);
    assert_eq!(all, (true, Reason::Expired));
    assert_eq!(own, (false, Reason::NotYours { uid: 1000 }));
    assert_eq!(dead, (false, Reason::NotYours { uid: 1000 }));
}
