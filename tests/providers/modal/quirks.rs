//! Modal's quirks, through the real binary against the emulator: V2 sandboxes (listed through
//! `SandboxListV2`, terminated through `SandboxTerminateV2`, with an auth token fetched once
//! and again before its `exp`), claimed V2 ids, listings that leave the tags out, and
//! `MODAL_ENVIRONMENT`.

use std::time::Duration;

use crate::providers::{session_id, Config, Rig};
use crate::support::modal::{self, path, ModalEmu, DEFAULT_ENVIRONMENT};
use crate::support::{eventually, json, live_owner_label, run, Run};
use sandguard::labels::{OWNER, SESSION};
use tonic::Code;

fn ok(out: &Run) {
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
}

/// The instance ids of a `ps --json` answer, sorted.
fn ids(v: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> = v["sandboxes"]
        .as_array()
        .unwrap_or_else(|| panic!("no sandboxes: {v}"))
        .iter()
        .map(|x| x["instance_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn sorted<const N: usize>(ids: [&String; N]) -> Vec<String> {
    let mut ids: Vec<String> = ids.into_iter().cloned().collect();
    ids.sort();
    ids
}

/// `ps --json --provider modal`: its exit code and answer.
fn ps(rig: &Rig<ModalEmu>, cmd: Option<std::process::Command>) -> (i32, serde_json::Value) {
    let mut cmd = cmd.unwrap_or_else(|| rig.cmd());
    let out = run(cmd.args(["ps", "--json", "--provider", "modal"]));
    (out.code, json(&out.stdout))
}

/// Fails on the V1-only driver: the V2 sandbox was never listed, and the stop reported a
/// clean sweep over it.
#[test]
fn a_v2_sandbox_of_the_session_is_listed_by_ps_and_reclaimed_by_stop() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let session = session_id();
    let owner = live_owner_label();
    let v2 = rig.cloud.insert_v2(&[(SESSION, &session), (OWNER, &owner)]);
    let v1 = rig.cloud.insert(&[(SESSION, &session), (OWNER, &owner)]);
    let other = rig.cloud.insert_v2(&[(SESSION, &session_id())]);
    let stranger = rig.cloud.insert_v2(&[("app", "x")]);

    let out =
        run(rig
            .cmd()
            .env("SANDGUARD_LOG", "trace")
            .args(["ps", "--json", "--provider", "modal"]));
    ok(&out);
    let v = json(&out.stdout);
    assert_eq!(ids(&v), sorted([&v1, &v2, &other]), "{v}");
    let listed = |id: &str| {
        let all = v["sandboxes"].as_array().unwrap();
        all.iter()
            .find(|x| x["instance_id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(listed(&v2)["session"], session.as_str());
    assert_eq!(listed(&v2)["status"], "running");
    let tokens = rig.cloud.issued_tokens();
    assert_eq!(tokens.len(), 1, "one auth token for the listing");
    for token in &tokens {
        assert!(
            !out.stdout.contains(token.as_str()) && !out.stderr.contains(token.as_str()),
            "the auth token was printed"
        );
    }

    ok(&rig.stop_session(&session));
    assert!(!rig.cloud.running(&v2), "the V2 sandbox is reclaimed");
    assert!(!rig.cloud.running(&v1), "the V1 sandbox is reclaimed");
    assert!(rig.cloud.running(&other) && rig.cloud.running(&stranger));
    assert_eq!(rig.cloud.calls(path::SANDBOX_TERMINATE_V2), 1);
    assert_eq!(rig.cloud.calls(path::SANDBOX_TERMINATE), 1);
}

/// A program claims a V2 sandbox and exits. The V1-only driver sent the id to
/// `SandboxTerminate`, took its NOT_FOUND for "gone" and reported the session reclaimed while
/// the sandbox ran on; the id's shape now sends it to `SandboxTerminateV2` alone.
#[test]
fn a_claimed_v2_id_is_terminated_through_v2_never_taken_for_gone_by_v1() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let claimed = rig.cloud.insert_v2(&[("app", "x")]);
    let script = format!("echo \"$SANDGUARD_SESSION\"; sandguard claim modal {claimed}");
    let out = run(rig
        .cmd()
        .env("PATH", crate::watch::wrapper::path_with_sandguard())
        .args(["--", "sh", "-c", &script]));
    ok(&out);
    let session = out.stdout.lines().next().unwrap_or_default().to_string();
    assert_eq!(session.len(), 32, "{}", out.stdout);
    eventually(
        Duration::from_secs(15),
        "the session's reclaim ends",
        || {
            !matches!(
                rig.session_state(&session).as_deref(),
                None | Some("active" | "reclaiming")
            )
        },
    );
    assert_eq!(rig.session_state(&session).as_deref(), Some("reclaimed"));
    assert!(
        !rig.cloud.running(&claimed),
        "the session was reported reclaimed, and the claimed V2 sandbox is still running"
    );
    assert_eq!(rig.cloud.calls(path::SANDBOX_TERMINATE), 0, "no V1 call");
    assert_eq!(rig.cloud.calls(path::SANDBOX_TERMINATE_V2), 1);
}

#[test]
fn the_auth_token_is_fetched_once_for_many_calls() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(5));
    let session = session_id();
    let v2: Vec<String> = (0..12)
        .map(|_| rig.cloud.insert_v2(&[(SESSION, &session)]))
        .collect();
    let v1: Vec<String> = (0..3)
        .map(|_| rig.cloud.insert(&[(SESSION, &session)]))
        .collect();
    ok(&rig.stop_session(&session));
    assert_eq!(
        rig.cloud.count_running(&v2) + rig.cloud.count_running(&v1),
        0
    );
    assert_eq!(rig.cloud.calls(path::SANDBOX_TERMINATE_V2), 12);
    assert!(rig.cloud.calls(path::SANDBOX_LIST_V2) >= 2);
    assert_eq!(
        rig.cloud.calls(path::AUTH_TOKEN_GET),
        1,
        "{:?}",
        rig.cloud.hits()
    );
}

/// Tokens good for two seconds, and a V2 listing of seventeen slow pages that outlasts one: a
/// driver that kept its first token meets UNAUTHENTICATED on the way.
#[test]
fn the_auth_token_is_fetched_again_before_its_exp() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(5));
    let session = session_id();
    let v2: Vec<String> = (0..16)
        .map(|_| rig.cloud.insert_v2(&[(SESSION, &session)]))
        .collect();
    rig.cloud.set_token_lifetime(Duration::from_secs(2));
    rig.cloud.set_page_size(1);
    rig.cloud.set_faults(modal::Faults {
        latency: Duration::from_millis(150),
        ..modal::Faults::default()
    });
    let (code, v) = ps(&rig, None);
    assert_eq!(code, 0, "{v}");
    let want: Vec<String> = {
        let mut v2 = v2.clone();
        v2.sort();
        v2
    };
    assert_eq!(ids(&v), want);
    assert_eq!(rig.cloud.hits_with(Code::Unauthenticated), 0);
    assert!(
        rig.cloud.calls(path::AUTH_TOKEN_GET) >= 2,
        "{} tokens",
        rig.cloud.calls(path::AUTH_TOKEN_GET)
    );
}

/// The listing leaves every sandbox's tags out ("not yet exposed"). The old driver read them
/// only for a session's listing, so `ps` and `stop --all` found nothing of sandguard's.
#[test]
fn untagged_listings_still_show_sandguards_sandboxes_to_ps_and_stop_all() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let (a, b) = (session_id(), session_id());
    let mine_v1 = rig.cloud.insert(&[(SESSION, &a)]);
    let mine_v2 = rig.cloud.insert_v2(&[(SESSION, &a)]);
    let theirs_v2 = rig.cloud.insert_v2(&[(SESSION, &b)]);
    let strangers = [
        rig.cloud.insert_v2(&[("app", "x")]),
        rig.cloud.insert_v2(&[]),
        rig.cloud.insert(&[]),
    ];
    rig.cloud.hide_tags_in_listings();

    let (code, v) = ps(&rig, None);
    assert_eq!(code, 0, "{v}");
    assert_eq!(ids(&v), sorted([&mine_v1, &mine_v2, &theirs_v2]), "{v}");
    // Each untagged sandbox once, through the RPC its id's shape names.
    assert_eq!(rig.cloud.calls(path::SANDBOX_TAGS_GET), 2);
    assert_eq!(rig.cloud.calls(path::SANDBOX_TAGS_GET_V2), 4);

    ok(&rig.run(&["stop", "--all", "--provider", "modal"]));
    for id in [&mine_v1, &mine_v2, &theirs_v2] {
        assert!(!rig.cloud.running(id), "{id} survived stop --all");
    }
    assert_eq!(rig.cloud.count_running(&strangers), 3);
}

#[test]
fn tags_are_read_one_by_one_when_a_filtered_listing_omits_them() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let session = session_id();
    let mine = rig.many(&session, 3);
    let other = rig.labelled(&session_id());
    let stranger = rig.stranger();
    rig.cloud.hide_tags_in_listings();

    let out = rig.stop_session(&session);
    ok(&out);
    assert!(rig.all_gone(&mine));
    assert!(rig.cloud.running(&other) && rig.cloud.running(&stranger));
    let reads =
        rig.cloud.calls(path::SANDBOX_TAGS_GET) + rig.cloud.calls(path::SANDBOX_TAGS_GET_V2);
    assert_eq!(reads, 3, "one tags read per listed sandbox");
}

/// The old driver never sent `environment_name`: it listed the default environment whatever
/// `MODAL_ENVIRONMENT` said.
#[test]
fn modal_environment_reaches_environment_name_of_both_listings() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let session = session_id();
    let tags = [(SESSION, session.as_str())];
    let main = [
        rig.cloud.insert_as(false, DEFAULT_ENVIRONMENT, &tags),
        rig.cloud.insert_as(true, DEFAULT_ENVIRONMENT, &tags),
    ];
    let dev = [
        rig.cloud.insert_as(false, "dev", &tags),
        rig.cloud.insert_as(true, "dev", &tags),
    ];

    let (code, v) = ps(&rig, None);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        ids(&v),
        sorted([&main[0], &main[1]]),
        "unset: the default one"
    );

    let mut cmd = rig.cmd();
    cmd.env("MODAL_ENVIRONMENT", "dev");
    let (code, v) = ps(&rig, Some(cmd));
    assert_eq!(code, 0, "{v}");
    assert_eq!(ids(&v), sorted([&dev[0], &dev[1]]), "MODAL_ENVIRONMENT=dev");

    let config = rig.scratch.path().join("dev.toml");
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = false\n\n[providers.modal]\nenvironment = \"dev\"\n",
    )
    .unwrap();
    let mut cmd = rig.cmd();
    cmd.env("SANDGUARD_CONFIG", &config);
    let (code, v) = ps(&rig, Some(cmd));
    assert_eq!(code, 0, "{v}");
    assert_eq!(ids(&v), sorted([&dev[0], &dev[1]]), "environment = \"dev\"");

    let mut cmd = rig.cmd();
    cmd.env("MODAL_ENVIRONMENT", "nope");
    let (code, v) = ps(&rig, Some(cmd));
    assert_eq!(code, 1, "{v}");
    let error = v["errors"][0]["error"].as_str().unwrap_or_default();
    for part in [
        "SandboxList)",
        "SandboxListV2)",
        "Environment 'nope' not found",
    ] {
        assert!(error.contains(part), "{part}: {error}");
    }

    let mut cmd = rig.cmd();
    cmd.env("MODAL_ENVIRONMENT", "dev");
    ok(&run(cmd.args(["stop", "--all", "--session", &session])));
    assert_eq!(rig.cloud.count_running(&dev), 0);
    assert_eq!(rig.cloud.count_running(&main), 2);
}

/// A V2 listing that fails (here the account is refused auth tokens) is reported, and what
/// the V1 listing found is still shown and still reclaimed.
#[test]
fn a_failing_v2_listing_is_reported_beside_the_v1_results() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(2));
    let session = session_id();
    let v1 = rig.cloud.insert(&[(SESSION, &session)]);
    let v2 = rig.cloud.insert_v2(&[(SESSION, &session)]);
    rig.cloud.set_faults(modal::Faults {
        denied: vec![path::AUTH_TOKEN_GET],
        ..modal::Faults::default()
    });

    let (code, v) = ps(&rig, None);
    assert_eq!(code, 1, "{v}");
    assert_eq!(ids(&v), vec![v1.clone()], "{v}");
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{v}");
    let error = errors[0]["error"].as_str().unwrap();
    assert!(
        error.contains("auth token") && error.contains("PERMISSION_DENIED"),
        "{error}"
    );

    let out = rig.stop_session(&session);
    assert_ne!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!rig.cloud.running(&v1), "the V1 sandbox is reclaimed");
    assert!(rig.cloud.running(&v2), "unreachable, not counted as gone");
}
