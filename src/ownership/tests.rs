//! The judgement's rules, one branch at a time. (The model test, `crate::model`, checks them
//! across random histories of the real paths.)

use super::*;
use crate::providers::fake;
use crate::providers::Kind;

const DEAD_OVER: Session = Session {
    owner: Liveness::Dead,
    sidecar: Sidecar::Gone,
    ended_at: Some(1_000),
    lease: Lease::None,
};
const LIVE: Session = Session {
    owner: Liveness::Alive,
    sidecar: Sidecar::Alive,
    ended_at: None,
    lease: Lease::None,
};

fn labelled(session: &str) -> Sandbox {
    fake::sandbox("x", Kind::Instance, Some(session))
}

fn facts<'a>(s: &'a Sandbox, label: Option<(&'a str, Session)>) -> Facts<'a> {
    Facts {
        sandbox: s,
        labelled: label,
        inherited: false,
        claimed_by: Vec::new(),
        detached: false,
        owner_user: User::Unknown,
        now: 2_000,
    }
}

#[test]
fn a_session_removes_what_carries_its_label_and_nothing_else() {
    let s = labelled("a");
    let f = facts(&s, Some(("a", LIVE)));
    assert!(judge(Asker::Reclaim { session: "a" }, &f).removes());
    assert_eq!(
        judge(Asker::Reclaim { session: "b" }, &f).reason,
        Reason::NotOurs
    );
}

#[test]
fn a_claim_adopts_an_unlabelled_or_orphaned_sandbox_and_never_steals() {
    let bare = fake::sandbox("x", Kind::Instance, None);
    let mut f = facts(&bare, None);
    f.claimed_by = vec![("a", LIVE)];
    assert_eq!(
        judge(Asker::Reclaim { session: "a" }, &f).reason,
        Reason::Claimed
    );

    let theirs = labelled("b");
    for (b, removes) in [
        (LIVE, false),
        (
            Session {
                sidecar: Sidecar::Gone,
                ..LIVE
            },
            false,
        ),
        (
            Session {
                owner: Liveness::Unknown,
                sidecar: Sidecar::NotHere,
                ..LIVE
            },
            false,
        ),
        (DEAD_OVER, true),
    ] {
        let mut f = facts(&theirs, Some(("b", b)));
        f.claimed_by = vec![("a", LIVE)];
        assert_eq!(
            judge(Asker::Reclaim { session: "a" }, &f).removes(),
            removes,
            "{b:?}"
        );
    }

    // Claimed by another session that may live: not adopted either.
    let mut f = facts(&bare, None);
    f.claimed_by = vec![("a", LIVE), ("c", LIVE)];
    assert!(matches!(
        judge(Asker::Reclaim { session: "a" }, &f).reason,
        Reason::ClaimedElsewhere { .. }
    ));
}

#[test]
fn detach_wins_over_labels_claims_and_stop_all_but_not_over_a_ttl_or_a_named_stop() {
    let mut s = labelled("a");
    s.labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    let mut f = facts(&s, Some(("a", DEAD_OVER)));
    f.claimed_by = vec![("a", DEAD_OVER)];
    for asker in [
        Asker::Reclaim { session: "a" },
        Asker::StopAll { only: Only::All },
        Asker::StopAll { only: Only::Dead },
        Asker::Sweep,
    ] {
        assert_eq!(judge(asker, &f).reason, Reason::Detached, "{asker:?}");
        let bare = labelled("a");
        let mut by_owner = facts(&bare, Some(("a", DEAD_OVER)));
        by_owner.detached = true;
        assert_eq!(
            judge(asker, &by_owner).reason,
            Reason::DetachedByOwner,
            "{asker:?}"
        );
    }
    assert!(judge(Asker::StopNamed, &f).removes());
    s.labels
        .insert(crate::labels::EXPIRES.into(), "1999".into());
    let f = facts(&s, Some(("a", LIVE)));
    assert_eq!(judge(Asker::Sweep, &f).reason, Reason::Expired);
    assert_eq!(
        judge(
            Asker::Renew {
                session: "a",
                owner: Liveness::Alive
            },
            &f
        )
        .verdict,
        Verdict::Keep
    );
}

/// Ownership before age: an expiry ends what a session owns (its label counts, or its creator
/// set the expiry and a session claimed it), and only a sandbox itself.
#[test]
fn an_expiry_ends_only_what_is_owned_and_only_a_sandbox() {
    let expiring = |kind, session: Option<&str>| {
        let mut s = fake::sandbox("x", kind, session);
        s.created_at = Some(1_001);
        s.labels
            .insert(crate::labels::EXPIRES.into(), "1999".into());
        s
    };
    let owned = expiring(Kind::Instance, Some("a"));
    const ALL: Asker = Asker::StopAll { only: Only::All };
    for asker in [Asker::Sweep, ALL] {
        let f = facts(&owned, Some(("a", LIVE)));
        assert_eq!(judge(asker, &f).reason, Reason::Expired, "{asker:?}");
        // A stranger made from the image of a session that ended before it: the inherited
        // session label does not count, nor the expiry inherited with it.
        let stranger = Facts {
            inherited: true,
            ..facts(&owned, Some(("a", DEAD_OVER)))
        };
        assert_ne!(judge(asker, &stranger).reason, Reason::Expired, "{asker:?}");
        assert!(!judge(asker, &stranger).removes() || asker == ALL);
        // ... and a claim does not make an inherited expiry the claimer's.
        let claimed = Facts {
            claimed_by: vec![("b", LIVE)],
            ..stranger.clone()
        };
        assert_ne!(judge(asker, &claimed).reason, Reason::Expired, "{asker:?}");
        // An expiry its creator set on an unlabelled sandbox a session claimed: owned.
        let bare = expiring(Kind::Instance, None);
        let mut f = facts(&bare, None);
        assert_ne!(
            judge(asker, &f).reason,
            Reason::Expired,
            "nobody's: {asker:?}"
        );
        f.claimed_by = vec![("b", LIVE)];
        assert_eq!(judge(asker, &f).reason, Reason::Expired, "{asker:?}");
        // A session's network or volume goes with the session, never by an expiry.
        for kind in [Kind::Network, Kind::Volume] {
            let other = expiring(kind, Some("a"));
            let f = facts(&other, Some(("a", LIVE)));
            assert_ne!(judge(asker, &f).reason, Reason::Expired, "{kind:?}");
        }
    }
    assert_eq!(
        judge(Asker::Sweep, &facts(&owned, Some(("a", LIVE)))).verdict,
        Verdict::Remove
    );
}

#[test]
fn an_inherited_label_counts_only_for_a_sandbox_created_while_its_session_lived() {
    let created = |at| Sandbox {
        created_at: Some(at),
        ..labelled("a")
    };
    let (before, later) = (created(999), created(1_001));
    let inherited = |s, session| Facts {
        inherited: true,
        ..facts(s, Some(("a", session)))
    };
    let reclaim = Asker::Reclaim { session: "a" };
    assert!(judge(reclaim, &inherited(&before, DEAD_OVER)).removes());
    assert_eq!(
        judge(reclaim, &inherited(&later, DEAD_OVER)).reason,
        Reason::NotOurs
    );
    assert_eq!(
        judge(Asker::Sweep, &inherited(&later, DEAD_OVER)).reason,
        Reason::NoOwner
    );
    assert!(judge(reclaim, &inherited(&later, LIVE)).removes());
}

#[test]
fn proof_of_life_beats_an_expired_lease_and_unknown_is_not_dead() {
    let alive_expired = Session {
        owner: Liveness::Alive,
        sidecar: Sidecar::Gone,
        ended_at: None,
        lease: Lease::Expired,
    };
    assert_eq!(judge_session(&alive_expired).0, SessionVerdict::Adopt);
    let unknown = Session {
        owner: Liveness::Unknown,
        ..alive_expired
    };
    assert_eq!(judge_session(&unknown).0, SessionVerdict::Reclaim);
    let unknown_renewed = Session {
        sidecar: Sidecar::Alive,
        ..unknown
    };
    assert_eq!(judge_session(&unknown_renewed).0, SessionVerdict::Leave);
    let no_lease = Session {
        lease: Lease::None,
        ..unknown
    };
    assert_eq!(judge_session(&no_lease).0, SessionVerdict::Leave);
    assert_eq!(judge_session(&DEAD_OVER).0, SessionVerdict::Reclaim);
    assert_eq!(judge_session(&LIVE).0, SessionVerdict::Leave);
}

/// A pending reclaim is finished whatever the owner, by a sweep that has a provider it owes;
/// one that owes only providers the sweep lacks is left to a sweep that has them.
#[test]
fn a_pending_reclaim_is_finished_unless_it_owes_only_providers_the_sweep_lacks() {
    use crate::ledger::SessionState;
    let at = |elsewhere| Found {
        session: DEAD_OVER,
        place: Place::Ledger {
            state: SessionState::Pending,
            pid: 7,
            elsewhere,
        },
    };
    assert_eq!(
        judge_session(at(None)),
        (SessionVerdict::Reclaim, Reason::ReclaimPending)
    );
    let (verdict, why) = judge_session(at(Some("docker")));
    assert_eq!(verdict, SessionVerdict::Leave);
    assert_eq!(
        why.to_string(),
        "its reclaim is pending on docker only, which this sweep does not have: a sweep that has it will finish it"
    );
}

#[test]
fn nothing_is_renewed_after_a_death_or_for_another_session() {
    let s = labelled("a");
    let f = facts(&s, Some(("a", LIVE)));
    let renew = |owner| {
        judge(
            Asker::Renew {
                session: "a",
                owner,
            },
            &f,
        )
    };
    assert_eq!(renew(Liveness::Alive).verdict, Verdict::Renew);
    assert_eq!(renew(Liveness::Dead).reason, Reason::AfterDeath);
    assert_eq!(renew(Liveness::Unknown).reason, Reason::AfterDeath);
    assert_eq!(
        judge(
            Asker::Renew {
                session: "b",
                owner: Liveness::Alive
            },
            &f
        )
        .reason,
        Reason::NotOurs
    );
}

/// `Known::claimers` looks claims up by the prefixes of a sandbox's id; in random ledgers it
/// answers exactly what walking every claim and asking `names` answers: Docker's prefixes,
/// kinds and `network/` claims, exact-id providers, and claims of a provider not configured.
#[test]
fn the_claim_index_finds_what_walking_every_claim_finds() {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use crate::config::DockerSettings;
    use crate::identity::Judge;
    use crate::ledger::SessionView;
    use crate::model::Rng;
    use crate::ownership::known::Known;
    use crate::protocol::Target;

    let docker: Arc<dyn crate::providers::Provider> =
        Arc::new(crate::providers::docker::DockerProvider::new(
            Ok(crate::config::docker::DaemonAddress::new(
                "unix:///nonexistent.sock",
            )),
            &DockerSettings {
                enabled: Some(true),
                host: None,
                api_version: None,
                timeout: std::time::Duration::from_secs(1),
            },
        ));
    let exact: Arc<dyn crate::providers::Provider> = Arc::new(fake::Fake::default());
    let providers = vec![docker, exact];
    let hex = |rng: &mut Rng, len: usize| -> String {
        (0..len)
            .map(|_| char::from(b"0a1b"[rng.below(4)]))
            .collect()
    };
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        // Few distinct digits, so prefixes collide often.
        let fulls: Vec<String> = (0..6).map(|_| hex(&mut rng, 64)).collect();
        let views: Vec<SessionView> = (0..4)
            .map(|n| {
                let claims: BTreeSet<Target> = (0..rng.below(8))
                    .map(|_| {
                        let full = &fulls[rng.below(fulls.len())];
                        let (provider, id) = match rng.below(6) {
                            0 => ("docker", full[..12 + rng.below(53)].to_string()),
                            1 => ("docker", format!("network/{}", &full[..12 + rng.below(53)])),
                            2 => ("docker", full[..rng.below(12)].to_string()),
                            3 => ("fake", full[..60 + rng.below(5)].to_string()),
                            4 => ("e2b", full.clone()),
                            _ => ("docker", full.clone()),
                        };
                        Target {
                            provider: provider.into(),
                            id,
                        }
                    })
                    .collect();
                SessionView {
                    claims,
                    ..SessionView::blank(&format!("s{n}"))
                }
            })
            .collect();
        let known = Known::of(views.clone(), Judge::new(BTreeSet::new()), &providers);
        for full in &fulls {
            for (provider, kind) in [
                ("docker", Kind::Instance),
                ("docker", Kind::Network),
                ("fake", Kind::Instance),
                ("e2b", Kind::Instance),
            ] {
                let mut sandbox = fake::sandbox(full, kind, None);
                sandbox.provider = provider.into();
                let but = format!("s{}", rng.below(5));
                let walked: Vec<&str> = views
                    .iter()
                    .filter(|v| v.id != but && v.claims.iter().any(|t| known.names(t, &sandbox)))
                    .map(|v| v.id.as_str())
                    .collect();
                let indexed: Vec<&str> = known
                    .claimers(&sandbox, &but)
                    .into_iter()
                    .map(|(id, _)| id)
                    .collect();
                assert_eq!(indexed, walked, "seed {seed}: {provider} {kind:?} {full}");
            }
        }
    }
}

#[test]
fn a_lifetime_limit_removes_only_the_sessions_own_old_sandbox() {
    let limit = std::time::Duration::from_secs(60);
    let ask = |age: Option<u64>| Asker::Lifetime {
        session: "a",
        limit,
        age: age.map(std::time::Duration::from_secs),
    };
    let ours = labelled("a");
    let f = facts(&ours, Some(("a", LIVE)));
    assert_eq!(
        judge(ask(Some(60)), &f).reason,
        Reason::Lifetime { limit: "1m".into() }
    );
    assert!(judge(ask(Some(60)), &f).removes());
    for young in [Some(59), None] {
        assert_eq!(judge(ask(young), &f).reason, Reason::Young, "{young:?}");
    }

    // A stranger's, however old, and another live session's: never.
    let bare = fake::sandbox("x", Kind::Instance, None);
    assert_eq!(
        judge(ask(Some(600)), &facts(&bare, None)).reason,
        Reason::NotOurs
    );
    let theirs = labelled("b");
    assert!(!judge(ask(Some(600)), &facts(&theirs, Some(("b", LIVE)))).removes());

    // Detach wins, by label or by the owner; an expired TTL changes nothing here.
    let mut detached = labelled("a");
    detached
        .labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    assert_eq!(
        judge(ask(Some(600)), &facts(&detached, Some(("a", LIVE)))).reason,
        Reason::Detached
    );
    let mut by_owner = facts(&ours, Some(("a", LIVE)));
    by_owner.detached = true;
    assert_eq!(
        judge(ask(Some(600)), &by_owner).reason,
        Reason::DetachedByOwner
    );

    // A network is reclaimed with the session, not aged.
    let network = fake::sandbox("n", Kind::Network, Some("a"));
    assert_eq!(
        judge(ask(Some(600)), &facts(&network, Some(("a", LIVE)))).reason,
        Reason::NotAged
    );
}
