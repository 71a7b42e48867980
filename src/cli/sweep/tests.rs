//! What `sweep` prints: news across passes, a watcher's report, a held fleet lease.

use super::*;

fn pass(decisions: &[(&str, SessionVerdict, &str)]) -> Pass {
    Pass {
        decisions: decisions
            .iter()
            .map(|(id, verdict, reason)| Decision {
                session: "s".into(),
                sandbox: Some(SandboxKey {
                    provider: "docker".into(),
                    id: id.to_string(),
                }),
                verdict: *verdict,
                reason: reason.to_string(),
                lease_left: None,
            })
            .collect(),
        ..Pass::default()
    }
}

#[test]
fn a_watchers_report_says_whose_it_is_and_every_removal() {
    use crate::providers::fake::sandbox;
    use crate::reclaim::{Outcome, Removal};
    let mut watched = pass(&[]);
    watched.decisions.push(Decision {
        session: "s".into(),
        sandbox: None,
        verdict: SessionVerdict::Reclaim,
        reason: "its owner (pid 7) died while this sweep watched it".into(),
        lease_left: None,
    });
    watched.removals.push(Removal {
        at_ms: None,
        sandbox: sandbox("c1", crate::providers::Kind::Instance, Some("s")),
        outcome: Outcome::Removed,
        attempts: 1,
    });
    let args = Args {
        every: None,
        dry_run: false,
        json: false,
        provider: None,
        fleet: false,
        metrics: None,
    };
    let out = text(&args, &watched, &[true], Some("s"));
    assert_eq!(
        out,
        "reclaim session s: its owner (pid 7) died while this sweep watched it\n\
         removed fake c1\n\
         Sweep (watcher of session s): 1 to reclaim, 0 adopted, 0 left alone; 1 removed, 0 could not be removed.\n"
    );
}

#[test]
fn a_held_lease_is_said_once_with_its_time_left_and_not_again_as_it_counts_down() {
    let held = |ms| Pass {
        decisions: vec![Decision {
            session: "f".into(),
            sandbox: None,
            verdict: SessionVerdict::Leave,
            reason: "its fleet lease is held by host a".into(),
            lease_left: Some(std::time::Duration::from_millis(ms)),
        }],
        ..Pass::default()
    };
    let mut seen = Seen::default();
    let first = held(29_712);
    let news = seen.news(&first);
    assert_eq!(news, [true]);
    let args = Args {
        every: None,
        dry_run: false,
        json: false,
        provider: None,
        fleet: true,
        metrics: None,
    };
    assert!(
        text(&args, &first, &news, None).starts_with(
            "leave session f: its fleet lease is held by host a (the lease runs out in 29.7 s unless renewed)\n"
        ),
        "{}",
        text(&args, &first, &news, None)
    );
    let later = held(19_002);
    let news = seen.news(&later);
    assert_eq!(news, [false]);
    assert!(text(&args, &later, &news, None)
        .starts_with("Sweep: 0 to reclaim, 0 adopted, 1 left alone (1 unchanged"));
}

#[test]
fn a_verdict_is_news_when_new_changed_or_back_after_a_pass_without_it() {
    let mut seen = Seen::default();
    let (leave, lives) = (SessionVerdict::Leave, "its owner lives");
    assert_eq!(seen.news(&pass(&[("a", leave, lives)])), [true]);
    assert_eq!(seen.news(&pass(&[("a", leave, lives)])), [false]);
    let both = pass(&[("a", SessionVerdict::Reclaim, "dead"), ("b", leave, lives)]);
    assert_eq!(seen.news(&both), [true, true]);
    assert_eq!(seen.news(&pass(&[("b", leave, "detached")])), [true]);
    assert_eq!(seen.news(&pass(&[])), Vec::<bool>::new());
    assert_eq!(seen.news(&pass(&[("b", leave, "detached")])), [true]);
}
