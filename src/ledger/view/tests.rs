//! Unit tests of `view`.

use super::*;

const START: &str = r#"{"t":10,"ev":"start","owner":"o","pid":7,"grace_ms":5,"labels":{"k":"v"}}"#;

fn view(lines: &[&str]) -> SessionView {
    let mut text = lines.join("\n");
    text.push('\n');
    fold("s1", text.as_bytes()).unwrap()
}

fn t(provider: &str, id: &str) -> Target {
    Target {
        provider: provider.into(),
        id: id.into(),
    }
}

fn set(targets: &[Target]) -> BTreeSet<Target> {
    targets.iter().cloned().collect()
}

#[test]
fn claims_releases_detaches_and_removals_fold_into_sets() {
    let v = view(&[
        START,
        r#"{"t":11,"ev":"claim","provider":"docker","id":"a"}"#,
        r#"{"t":12,"ev":"claim","provider":"docker","id":"b"}"#,
        r#"{"t":13,"ev":"claim","provider":"e2b","id":"c"}"#,
        r#"{"t":14,"ev":"claim","provider":"e2b","id":"d"}"#,
        r#"{"t":15,"ev":"release","provider":"docker","id":"a"}"#,
        r#"{"t":16,"ev":"detach","provider":"e2b","id":"c"}"#,
        r#"{"t":17,"ev":"removed","provider":"docker","id":"b","outcome":"gone"}"#,
        r#"{"t":18,"ev":"failed","provider":"e2b","id":"d","error":"x","pending":true}"#,
        r#"{"t":19,"ev":"failed","provider":"e2b","id":"e","error":"x","pending":true}"#,
        r#"{"t":20,"ev":"failed","provider":"e2b","id":"f","error":"x","pending":false}"#,
        r#"{"t":21,"ev":"removed","provider":"e2b","id":"e","outcome":"removed"}"#,
    ]);
    assert_eq!(v.claims, set(&[t("e2b", "d")]));
    assert_eq!(v.detached, set(&[t("e2b", "c")]));
    assert_eq!(
        v.pending.keys().cloned().collect::<BTreeSet<_>>(),
        set(&[t("e2b", "d")])
    );
    assert_eq!((v.owner.as_str(), v.pid, v.grace_ms), ("o", 7, 5));
    assert_eq!(v.labels.get("k").map(String::as_str), Some("v"));
    assert_eq!((v.started_ms, v.updated_ms), (10, 21));
    assert_eq!(v.corrupt_lines, 0);
}

#[test]
fn refusals_providers_and_unlisted_providers_fold() {
    let v = view(&[
        START,
        r#"{"t":11,"ev":"providers","names":["docker","e2b"]}"#,
        r#"{"t":12,"ev":"claim","provider":"docker","id":"abc"}"#,
        r#"{"t":13,"ev":"refused","provider":"docker","id":"abc","reason":"a name"}"#,
        r#"{"t":14,"ev":"failed","provider":"e2b","id":"*","error":"down","pending":true}"#,
        r#"{"t":15,"ev":"unlisted","provider":"acme","error":"not swept"}"#,
        r#"{"t":16,"ev":"listed","provider":"e2b"}"#,
    ]);
    assert!(v.claims.is_empty() && v.pending.is_empty());
    assert_eq!(
        v.refused.get(&t("docker", "abc")).map(String::as_str),
        Some("a name")
    );
    assert_eq!(v.providers, Some(vec!["docker".into(), "e2b".into()]));
    assert_eq!(v.unlisted.keys().collect::<Vec<_>>(), ["acme"]);
}

#[test]
fn the_state_follows_reclaim_and_end_records() {
    let reclaim = r#"{"t":11,"ev":"reclaim_start"}"#;
    let end = |s: &str| format!(r#"{{"t":12,"ev":"end","state":"{s}"}}"#);
    assert_eq!(view(&[START]).state, SessionState::Active);
    let lease = r#"{"t":11,"ev":"lease_expired"}"#;
    assert_eq!(view(&[START, lease]).state, SessionState::Active);
    assert_eq!(view(&[START, reclaim]).state, SessionState::Reclaiming);
    let pending = end("pending");
    assert_eq!(
        view(&[START, reclaim, &pending]).state,
        SessionState::Pending
    );
    // A later sweep starting again does not hide that work is pending …
    assert_eq!(
        view(&[START, reclaim, &pending, reclaim]).state,
        SessionState::Pending
    );
    // … and a successful one ends it.
    let done = end("reclaimed");
    let v = view(&[START, reclaim, &pending, reclaim, &done]);
    assert_eq!(v.state, SessionState::Reclaimed);
    assert_eq!(view(&[START, &end("clean")]).state, SessionState::Clean);
}

#[test]
fn a_resume_makes_the_session_active_again_under_its_new_owner_keeping_its_holdings() {
    let resume = r#"{"t":30,"ev":"resume","owner":"o2","pid":8,"grace_ms":6,"labels":{"k":"w"}}"#;
    let held = [
        START,
        r#"{"t":11,"ev":"claim","provider":"docker","id":"a"}"#,
        r#"{"t":12,"ev":"claim","provider":"docker","id":"b"}"#,
        r#"{"t":13,"ev":"detach","provider":"docker","id":"b"}"#,
        r#"{"t":14,"ev":"claim","provider":"docker","id":"c"}"#,
    ];
    // The sidecar died while its owner lived: nothing ended, everything is still held.
    let v = view(&[&held[..], &[resume]].concat());
    assert_eq!(v.state, SessionState::Active);
    assert_eq!((v.owner.as_str(), v.pid, v.grace_ms), ("o2", 8, 6));
    assert_eq!(v.labels.get("k").map(String::as_str), Some("w"));
    assert_eq!(v.claims, set(&[t("docker", "a"), t("docker", "c")]));
    assert_eq!(v.detached, set(&[t("docker", "b")]));
    assert_eq!((v.started_ms, v.updated_ms), (10, 30));

    // An ended session (the k8s case: a new owner in the same pod) is active again; what
    // a reclaim left pending becomes the new sidecar's to reclaim; the detach stays.
    let ended = [
        r#"{"t":15,"ev":"owner_dead","reason":"exited"}"#,
        r#"{"t":16,"ev":"reclaim_start"}"#,
        r#"{"t":17,"ev":"removed","provider":"docker","id":"a","outcome":"removed"}"#,
        r#"{"t":18,"ev":"failed","provider":"docker","id":"c","error":"x","pending":true}"#,
        r#"{"t":19,"ev":"end","state":"pending"}"#,
    ];
    let v = view(&[&held[..], &ended[..], &[resume]].concat());
    assert_eq!(v.state, SessionState::Active);
    assert_eq!(v.claims, set(&[t("docker", "c")]));
    assert!(v.pending.is_empty(), "{:?}", v.pending);
    assert_eq!(v.detached, set(&[t("docker", "b")]));
    // The new life's reclaim moves the state again, and its end holds.
    let reclaim = r#"{"t":31,"ev":"reclaim_start"}"#;
    let again = [&held[..], &ended[..], &[resume, reclaim]].concat();
    assert_eq!(view(&again).state, SessionState::Reclaiming);
    let end = r#"{"t":32,"ev":"end","state":"reclaimed"}"#;
    let after = [&held[..], &ended[..], &[resume, reclaim, end]].concat();
    assert_eq!(view(&after).state, SessionState::Reclaimed);
}

#[test]
fn a_torn_last_line_is_ignored_and_middle_corruption_counted() {
    let claim = r#"{"t":11,"ev":"claim","provider":"docker","id":"a"}"#;
    let torn = format!("{START}\n{claim}\n{{\"t\":12,\"ev\":\"rel");
    let v = fold("s1", torn.as_bytes()).unwrap();
    assert_eq!((v.claims.len(), v.corrupt_lines), (1, 0));
    let garbage_last = view(&[START, claim, "{\"t\":12,"]);
    assert_eq!(
        (garbage_last.claims.len(), garbage_last.corrupt_lines),
        (1, 0)
    );
    let v = view(&[START, "not json", claim, "{\"t\":1}", "", claim]);
    assert_eq!((v.claims.len(), v.corrupt_lines), (1, 2));
}

#[test]
fn unknown_kinds_are_skipped_and_a_missing_start_is_unreadable() {
    let v = view(&[START, r#"{"t":11,"ev":"teleport","to":"mars"}"#]);
    assert_eq!((v.corrupt_lines, v.updated_ms), (0, 11));
    assert_eq!(fold("s1", b""), None);
    let no_start = "{\"t\":11,\"ev\":\"reclaim_start\"}\n";
    assert_eq!(fold("s1", no_start.as_bytes()), None);
    // A start record cut short is no start at all.
    assert_eq!(fold("s1", &START.as_bytes()[..20]), None);
}

#[test]
fn create_slots_are_folded_so_a_resumed_sidecar_counts_on_from_them() {
    let v = view(&[
        r#"{"t":1,"ev":"start","owner":"o","pid":1,"grace_ms":1}"#,
        r#"{"t":2,"ev":"slot","provider":"docker","n":0}"#,
        r#"{"t":3,"ev":"slot","provider":"e2b","n":1}"#,
        r#"{"t":4,"ev":"slot_done","n":0,"made":true}"#,
        r#"{"t":5,"ev":"slot","provider":"docker","n":2}"#,
        r#"{"t":6,"ev":"slot_done","n":2,"made":false}"#,
    ]);
    assert_eq!(v.slots.next, 3);
    assert_eq!(v.slots.made, 1);
    // Slot 1 was open when the journal stopped: it still counts.
    assert_eq!(v.slots.open.keys().copied().collect::<Vec<_>>(), [1]);
}

#[test]
fn refused_creates_are_counted_by_the_largest_n_and_move_no_sandbox() {
    let v = view(&[
        r#"{"t":1,"ev":"start","owner":"o","pid":1,"grace_ms":1}"#,
        r#"{"t":2,"ev":"create_refused","provider":"docker","limit":"sandboxes","max":"1","reached":"1","n":1,"at":2,"create":{"image":"busybox"}}"#,
        r#"{"t":3,"ev":"create_refused","provider":"docker","limit":"sandboxes","max":"1","reached":"1","n":8,"at":3}"#,
        r#"{"t":4,"ev":"create_refused","provider":"e2b","limit":"creates","max":"2","reached":"2","n":1,"at":4}"#,
    ]);
    assert_eq!(v.slots.refused.of("docker", "sandboxes"), 8);
    assert_eq!(v.slots.refused.of("e2b", "creates"), 1);
    assert!(v.claims.is_empty() && v.refused.is_empty());
    assert_eq!(v.state, SessionState::Active);
}
