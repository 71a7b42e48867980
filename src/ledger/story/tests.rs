//! Unit tests of `story`. The journals of the first tests are in the old format (a
//! `reclaim_start` without its cause): they check the inference kept for such journals; the
//! last ones check that a journaled cause tells the same story, and wins.

use super::*;

const START: &str = r#"{"t":1,"ev":"start","owner":"o","pid":7,"grace_ms":5}"#;

fn story(lines: &[&str]) -> Story {
    let mut text = std::iter::once(START)
        .chain(lines.iter().copied())
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    tell(text.as_bytes(), b"")
}

fn fates(s: &Story) -> Vec<(&str, Origin, Fate)> {
    s.sandboxes
        .iter()
        .map(|s| (s.target.id.as_str(), s.origin, s.fate.clone()))
        .collect()
}

#[test]
fn an_owner_death_tells_each_sandbox_with_its_origin() {
    let s = story(&[
        r#"{"t":2,"ev":"claim","provider":"docker","id":"a"}"#,
        r#"{"t":3,"ev":"claim","provider":"docker","id":"b"}"#,
        r#"{"t":4,"ev":"detach","provider":"docker","id":"b"}"#,
        r#"{"t":5,"ev":"claim","provider":"docker","id":"c"}"#,
        r#"{"t":6,"ev":"release","provider":"docker","id":"c"}"#,
        r#"{"t":7,"ev":"owner_dead","reason":"exited"}"#,
        r#"{"t":8,"ev":"reclaim_start"}"#,
        r#"{"t":9,"ev":"removed","provider":"docker","id":"a","outcome":"removed"}"#,
        r#"{"t":10,"ev":"removed","provider":"docker","id":"d","outcome":"gone"}"#,
        r#"{"t":11,"ev":"end","state":"reclaimed"}"#,
        // Learned once the owner's parent reaped it, after the reclaim ended.
        r#"{"t":12,"ev":"owner_exit","signal":9}"#,
    ]);
    let dead = Why::Cause {
        cause: EndCause::OwnerExited,
        exit: Some(Exit::Signal(9)),
    };
    assert_eq!(dead.words(), "owner killed by SIGKILL");
    assert_eq!(s.ending, Some(dead.clone()));
    assert_eq!(
        fates(&s),
        [
            (
                "a",
                Origin::Claimed,
                Fate::Removed {
                    ending: dead.clone(),
                    gone: false
                }
            ),
            ("b", Origin::Claimed, Fate::Detached),
            ("c", Origin::Claimed, Fate::Released),
            (
                "d",
                Origin::Labelled,
                Fate::Removed {
                    ending: dead,
                    gone: true
                }
            ),
        ]
    );
}

#[test]
fn bye_sweeps_leases_and_pending_work_are_told_apart() {
    let removed = |id: &str, t: u8| {
        format!(r#"{{"t":{t},"ev":"removed","provider":"e2b","id":"{id}","outcome":"removed"}}"#)
    };
    let bye = story(&[
        r#"{"t":2,"ev":"reclaim_start"}"#,
        &removed("a", 3),
        r#"{"t":4,"ev":"end","state":"clean"}"#,
    ]);
    assert_eq!(bye.ending, Some(Why::cause(EndCause::Bye)));
    let sweep = story(&[
        r#"{"t":2,"ev":"reclaim_start"}"#,
        r#"{"t":3,"ev":"failed","provider":"e2b","id":"a","error":"down","pending":true}"#,
        r#"{"t":4,"ev":"end","state":"pending"}"#,
    ]);
    assert_eq!(sweep.ending, Some(Why::cause(EndCause::Sweep)));
    assert_eq!(sweep.sandboxes[0].fate, Fate::Pending("down".into()));
    let finished = story(&[
        r#"{"t":2,"ev":"lease_expired"}"#,
        r#"{"t":3,"ev":"reclaim_start"}"#,
        r#"{"t":4,"ev":"failed","provider":"e2b","id":"a","error":"down","pending":true}"#,
        r#"{"t":5,"ev":"end","state":"pending"}"#,
        &removed("a", 6),
        r#"{"t":7,"ev":"end","state":"reclaimed"}"#,
    ]);
    // The session ended because its lease expired; a sweep finished the work.
    assert_eq!(finished.ending, Some(Why::cause(EndCause::LeaseExpired)));
    assert_eq!(
        finished.sandboxes[0].fate,
        Fate::Removed {
            ending: Why::FinishedPending,
            gone: false
        }
    );
    let active = story(&[r#"{"t":2,"ev":"claim","provider":"e2b","id":"a"}"#]);
    assert_eq!(active.ending, None);
    assert_eq!(active.sandboxes[0].fate, Fate::Claimed);
}

#[test]
fn a_resume_starts_a_new_life_that_keeps_what_the_session_held() {
    let resume = |t: u8, pid: u8| {
        format!(r#"{{"t":{t},"ev":"resume","owner":"o{pid}","pid":{pid},"grace_ms":5}}"#)
    };
    let first_life = [
        r#"{"t":2,"ev":"claim","provider":"docker","id":"a"}"#,
        r#"{"t":3,"ev":"claim","provider":"docker","id":"b"}"#,
        r#"{"t":4,"ev":"claim","provider":"docker","id":"c"}"#,
        r#"{"t":5,"ev":"owner_dead","reason":"exited"}"#,
        r#"{"t":6,"ev":"reclaim_start"}"#,
        r#"{"t":7,"ev":"removed","provider":"docker","id":"a","outcome":"removed"}"#,
        r#"{"t":8,"ev":"failed","provider":"docker","id":"c","error":"busy","pending":true}"#,
        r#"{"t":9,"ev":"end","state":"pending"}"#,
    ];
    let dead = Why::Cause {
        cause: EndCause::OwnerExited,
        exit: None,
    };
    let resume_8 = resume(10, 8);
    let resumed = [&first_life[..], &[resume_8.as_str()]].concat();
    let s = story(&resumed);
    // Active again: no reclaim of this life yet, so no ending to tell.
    assert_eq!(s.ending, None);
    assert_eq!(
        s.resumes,
        [Resumed {
            at_ms: 10,
            pid: 8,
            after: SessionState::Pending
        }]
    );
    let removed = |ending: &Why| Fate::Removed {
        ending: ending.clone(),
        gone: false,
    };
    assert_eq!(
        fates(&s),
        [
            ("a", Origin::Claimed, removed(&dead)),
            ("b", Origin::Claimed, Fate::Claimed),
            // Pending work is held by the new sidecar, as a claim.
            ("c", Origin::Claimed, Fate::Claimed),
        ]
    );
    let second_life = [
        r#"{"t":11,"ev":"lease_expired"}"#,
        r#"{"t":12,"ev":"reclaim_start"}"#,
        r#"{"t":13,"ev":"removed","provider":"docker","id":"b","outcome":"removed"}"#,
        r#"{"t":13,"ev":"removed","provider":"docker","id":"c","outcome":"removed"}"#,
        r#"{"t":14,"ev":"end","state":"reclaimed"}"#,
    ];
    let s = story(&[&resumed[..], &second_life[..]].concat());
    assert_eq!(s.ending, Some(Why::cause(EndCause::LeaseExpired)));
    assert_eq!(
        fates(&s),
        [
            ("a", Origin::Claimed, removed(&dead)),
            (
                "b",
                Origin::Claimed,
                removed(&Why::cause(EndCause::LeaseExpired))
            ),
            (
                "c",
                Origin::Claimed,
                removed(&Why::cause(EndCause::LeaseExpired))
            ),
        ]
    );
    // A sidecar that died while its owner lived: resumed from an active session.
    let s = story(&[
        r#"{"t":2,"ev":"claim","provider":"docker","id":"a"}"#,
        &resume(3, 9),
    ]);
    assert_eq!(s.resumes[0].after, SessionState::Active);
    assert_eq!(fates(&s), [("a", Origin::Claimed, Fate::Claimed)]);
}

#[test]
fn stops_by_hand_are_merged_in_by_time_and_a_later_reclaim_keeps_them() {
    let journal = [
        START,
        r#"{"t":2,"ev":"claim","provider":"docker","id":"a"}"#,
        r#"{"t":3,"ev":"claim","provider":"docker","id":"b"}"#,
        r#"{"t":6,"ev":"owner_dead","reason":"exited"}"#,
        r#"{"t":7,"ev":"reclaim_start"}"#,
        r#"{"t":8,"ev":"removed","provider":"docker","id":"a","outcome":"gone"}"#,
        r#"{"t":8,"ev":"removed","provider":"docker","id":"b","outcome":"removed"}"#,
        r#"{"t":9,"ev":"end","state":"reclaimed"}"#,
        "",
    ]
    .join("\n");
    let stops = [
        r#"{"t":4,"ev":"stopped","provider":"docker","id":"a","outcome":"removed"}"#,
        r#"{"t":5,"ev":"stopped","provider":"e2b","id":"x","outcome":"gone"}"#,
        // Any other kind in the side file is ignored: it holds stops only.
        r#"{"t":5,"ev":"claim","provider":"docker","id":"z"}"#,
        "",
    ]
    .join("\n");
    let s = tell(journal.as_bytes(), stops.as_bytes());
    let dead = Why::Cause {
        cause: EndCause::OwnerExited,
        exit: None,
    };
    // A journal from before sandguard read the status: nothing is made up.
    assert_eq!(dead.words(), "owner exited");
    assert_eq!(s.ending, Some(dead.clone()));
    assert_eq!(
        fates(&s),
        [
            ("a", Origin::Claimed, Fate::Stopped { gone: false }),
            (
                "b",
                Origin::Claimed,
                Fate::Removed {
                    ending: dead,
                    gone: false
                }
            ),
            ("x", Origin::Labelled, Fate::Stopped { gone: true }),
        ]
    );
    // Without its side file the same journal tells `a` as gone at the reclaim.
    let bare = tell(journal.as_bytes(), b"");
    assert!(matches!(
        bare.sandboxes[0].fate,
        Fate::Removed { gone: true, .. }
    ));
}

/// `stop` removes a claimed container while its owner lives; the daemon's `destroy` event
/// makes the sidecar journal it `vanished`, before or after the stop's record: either way it
/// is told as stopped by hand, its time ended at the removal (a race
/// `cli::edges::sessions_show_tells_what_sandguard_stop_removed_by_hand` lost 4 times in 10).
#[test]
fn a_stop_by_hand_is_told_whichever_comes_first_its_record_or_the_event() {
    for vanished_at in [4, 6] {
        let journal = [
            START,
            r#"{"t":2,"ev":"claim","provider":"docker","id":"a"}"#,
            &format!(
                r#"{{"t":{vanished_at},"ev":"vanished","provider":"docker","id":"a","at":4}}"#
            ),
            "",
        ]
        .join("\n");
        let stops = r#"{"t":5,"ev":"stopped","provider":"docker","id":"a","outcome":"removed"}"#;
        let s = tell(journal.as_bytes(), format!("{stops}\n").as_bytes());
        assert_eq!(
            fates(&s),
            [("a", Origin::Claimed, Fate::Stopped { gone: false })],
            "vanished at {vanished_at}"
        );
        let held = &s.sandboxes[0].held;
        assert_eq!(held.len(), 1);
        assert!(held[0].to_ms.is_some_and(|t| t <= 5), "{held:?}");
    }
}

/// What sandguard writes now: the cause on `reclaim_start`, beside the facts older readers
/// tell it by. The story is the same as the old format's for the same history.
#[test]
fn a_journaled_cause_tells_the_same_story_as_the_old_inference() {
    let removed = r#"{"t":4,"ev":"removed","provider":"e2b","id":"a","outcome":"removed"}"#;
    let told = |lines: &[&str]| story(lines).sandboxes[0].fate.clone();
    let cases: [(&[&str], &[&str], Why); 4] = [
        (
            &[
                r#"{"t":2,"ev":"owner_dead","reason":"exited"}"#,
                r#"{"t":3,"ev":"reclaim_start","cause":"owner_exited"}"#,
            ],
            &[
                r#"{"t":2,"ev":"owner_dead","reason":"exited"}"#,
                r#"{"t":3,"ev":"reclaim_start"}"#,
            ],
            Why::cause(EndCause::OwnerExited),
        ),
        (
            &[
                r#"{"t":2,"ev":"lease_expired"}"#,
                r#"{"t":3,"ev":"reclaim_start","cause":"lease_expired"}"#,
            ],
            &[
                r#"{"t":2,"ev":"lease_expired"}"#,
                r#"{"t":3,"ev":"reclaim_start"}"#,
            ],
            Why::cause(EndCause::LeaseExpired),
        ),
        (
            &[r#"{"t":3,"ev":"reclaim_start","cause":"bye"}"#],
            &[r#"{"t":3,"ev":"reclaim_start"}"#],
            Why::cause(EndCause::Bye),
        ),
        (
            &[r#"{"t":3,"ev":"reclaim_start","cause":"sweep"}"#],
            &[r#"{"t":3,"ev":"reclaim_start"}"#],
            Why::cause(EndCause::Sweep),
        ),
    ];
    for (new, old, why) in cases {
        let end = match why {
            Why::Cause {
                cause: EndCause::Bye,
                ..
            } => r#"{"t":5,"ev":"end","state":"clean"}"#,
            _ => r#"{"t":5,"ev":"end","state":"reclaimed"}"#,
        };
        let new = [new, &[removed, end]].concat();
        let old = [old, &[removed, end]].concat();
        assert_eq!(story(&new), story(&old), "{why:?}");
        assert_eq!(story(&new).ending, Some(why.clone()));
        assert_eq!(
            told(&new),
            Fate::Removed {
                ending: why,
                gone: false
            }
        );
    }
}

#[test]
fn a_journaled_cause_wins_over_the_inference_and_keeps_the_exit() {
    // A `bye` whose reclaim left work pending: the old format could only call it a sweep's.
    let s = story(&[
        r#"{"t":3,"ev":"reclaim_start","cause":"bye"}"#,
        r#"{"t":4,"ev":"failed","provider":"e2b","id":"a","error":"down","pending":true}"#,
        r#"{"t":5,"ev":"end","state":"pending"}"#,
    ]);
    assert_eq!(s.ending, Some(Why::cause(EndCause::Bye)));
    let s = story(&[
        r#"{"t":2,"ev":"owner_dead","reason":"gone when the watch began"}"#,
        r#"{"t":3,"ev":"reclaim_start","cause":"owner_gone_at_start"}"#,
        r#"{"t":5,"ev":"end","state":"reclaimed"}"#,
        r#"{"t":6,"ev":"owner_exit","code":3}"#,
    ]);
    let why = s.ending.unwrap();
    assert_eq!(why.words(), "owner was already gone when the watch began");
    assert_eq!(why.as_str(), "owner_dead");
    let s = story(&[
        r#"{"t":2,"ev":"owner_dead","reason":"exited"}"#,
        r#"{"t":3,"ev":"reclaim_start","cause":"owner_exited"}"#,
        r#"{"t":5,"ev":"end","state":"reclaimed"}"#,
        r#"{"t":6,"ev":"owner_exit","code":3}"#,
    ]);
    assert_eq!(s.ending.unwrap().words(), "owner exited with status 3");
}

#[test]
fn a_release_of_an_id_ends_the_claim_pinned_to_it() {
    let s = story(&[
        r#"{"t":2,"ev":"claim","provider":"docker","id":"volume/v1@100"}"#,
        r#"{"t":3,"ev":"claim","provider":"docker","id":"volume/v2@100"}"#,
        r#"{"t":4,"ev":"release","provider":"docker","id":"volume/v1"}"#,
        r#"{"t":5,"ev":"detach","provider":"docker","id":"volume/v2"}"#,
    ]);
    assert_eq!(
        fates(&s),
        [
            ("volume/v1@100", Origin::Claimed, Fate::Released),
            ("volume/v2@100", Origin::Claimed, Fate::Detached),
        ]
    );
    let view = crate::ledger::fold_journal(
        "s",
        format!(
            "{START}\n{}\n{}\n",
            r#"{"t":2,"ev":"claim","provider":"docker","id":"volume/v1@100"}"#,
            r#"{"t":4,"ev":"release","provider":"docker","id":"volume/v1"}"#
        )
        .as_bytes(),
    )
    .unwrap();
    assert!(view.claims.is_empty(), "{:?}", view.claims);
}

#[test]
fn a_limits_removal_is_told_as_the_limit_and_a_later_reclaim_does_not_retell_it() {
    let s = story(&[
        r#"{"t":2,"ev":"claim","provider":"docker","id":"a"}"#,
        r#"{"t":3,"ev":"claim","provider":"docker","id":"b"}"#,
        r#"{"t":4,"ev":"removed","provider":"docker","id":"a","outcome":"removed","limit":"lifetime"}"#,
        r#"{"t":5,"ev":"owner_dead","reason":"exited"}"#,
        r#"{"t":6,"ev":"reclaim_start","cause":"owner_exited"}"#,
        r#"{"t":7,"ev":"removed","provider":"docker","id":"b","outcome":"removed"}"#,
        r#"{"t":8,"ev":"end","state":"reclaimed"}"#,
    ]);
    let limit = Why::Limit(Limit::Lifetime);
    assert_eq!(limit.as_str(), "lifetime");
    assert_eq!(
        fates(&s),
        [
            (
                "a",
                Origin::Claimed,
                Fate::Removed {
                    ending: limit,
                    gone: false
                }
            ),
            (
                "b",
                Origin::Claimed,
                Fate::Removed {
                    ending: Why::cause(EndCause::OwnerExited),
                    gone: false
                }
            ),
        ]
    );
}
