//! Fly.io Machines in the conformance suite: the adapter for `support/flyio.rs` (labels are
//! `config.metadata`, one app listed in one unpaged answer, no server-side TTL), and Fly's
//! quirks: the `Authorization` scheme chosen by the token (a macaroon as `FlyV1`, anything
//! else as `Bearer`, a pasted scheme stripped first), a destroy that asks to kill, the 412 of a
//! machine still stopping, a stop refused to a machine at rest, a wrong app, machines at rest
//! or destroyed, leases waited out rather than fought, 429s without a `Retry-After`, and what
//! `providers` says of a missing app.

use std::process::Command;
use std::time::{Duration, SystemTime};

use super::{kill_alone, pairs, session_id, Cloud, Config, Rig, Support};
use crate::support::emu::{Faults, Hit};
use crate::support::flyio::Fly;
use crate::support::{dead_owner_label, eventually, json, run, Run};
use sandguard::labels::{OWNER, SESSION};

const APP: &str = "sg-test-app";
const TOKEN: &str = "fo1_sandguard-test-7f3c9a";

/// The emulator and what `FLY_API_TOKEN` is set to (a quirk test may paste it otherwise).
pub struct Flyio {
    fly: Fly,
    env_token: &'static str,
}

impl Flyio {
    /// The service issued `issued`; the user put `env_token` in `FLY_API_TOKEN`.
    fn with_token(issued: &str, env_token: &'static str) -> Flyio {
        Flyio {
            fly: Fly::start(APP, issued),
            env_token,
        }
    }
}

impl Cloud for Flyio {
    const NAME: &'static str = "flyio";
    const PAGE: Option<usize> = None;
    /// A stop, a destroy answered 412 while the machine is still stopping, the destroy again.
    const CALLS_PER_REMOVAL: usize = 3;
    const UNAUTHORIZED: &'static str = "HTTP 401";
    const RUNNING: &'static str = "started";
    const IMAGE: &'static str = "registry-1.docker.io/library/busybox:latest";
    const CREDENTIAL_VAR: &'static str = "FLY_API_TOKEN";
    const DROPPED_CONNECTIONS: Support = Support::Yes;
    const SERVER_TTL: Support = Support::No(
        "a Fly Machine has no lifetime of its own to renew: it runs until it is stopped",
    );

    fn start() -> Flyio {
        Flyio::with_token(TOKEN, TOKEN)
    }

    fn configure(&self, cmd: &mut Command) {
        cmd.env("FLY_API_TOKEN", self.env_token)
            .env("FLY_APP_NAME", APP)
            .env("FLY_API_HOSTNAME", &self.fly.url);
    }

    fn wrong_credential(cmd: &mut Command) -> &'static str {
        let wrong = "fo1_wrong-secret-d00d";
        cmd.env("FLY_API_TOKEN", wrong);
        wrong
    }

    fn secrets() -> &'static [&'static str] {
        &[TOKEN]
    }

    fn detail(&self) -> String {
        format!("flyio API at {} (app {APP})", self.fly.url)
    }

    fn insert(&self, labels: &[(&str, &str)]) -> String {
        self.fly.insert(labels)
    }

    /// Not destroyed.
    fn exists(&self, id: &str) -> bool {
        self.fly.exists(id)
    }

    fn set_faults(&self, faults: Faults) {
        self.fly.set_faults(faults);
    }

    fn hits(&self) -> Vec<Hit> {
        self.fly.hits()
    }

    fn is_listing(hit: &Hit) -> bool {
        hit.method == "GET" && hit.path == format!("/v1/apps/{APP}/machines")
    }
}

// No `server_ttl`: see `SERVER_TTL` above.
conformance!(Flyio; dropped_connections);

/// A reclaim of one session's machines with `rig`'s token: every machine gone, the command
/// clean, and every request sent with `scheme`.
fn reclaims_with_scheme(rig: &Rig<Flyio>, scheme: &str) -> Run {
    let session = session_id();
    let ours = rig.many(&session, 2);
    let other = rig.labelled(&session_id());
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&ours), "{}", out.stdout);
    assert!(rig.cloud.fly.exists(&other));
    let schemes = rig.cloud.fly.schemes();
    assert!(
        !schemes.is_empty() && schemes.iter().all(|s| s == scheme),
        "token {:?}: schemes sent {schemes:?}, want {scheme}",
        rig.cloud.env_token
    );
    out
}

/// No run of 12 characters of `secret` appears in `text`.
fn assert_not_printed(text: &str, secret: &str) {
    let chars: Vec<char> = secret.chars().collect();
    for window in chars.windows(12.min(chars.len())) {
        let part: String = window.iter().collect();
        assert!(
            !text.contains(&part),
            "{part:?} of the token was printed:\n{text}"
        );
    }
}

#[test]
fn a_bare_macaroon_token_is_sent_as_flyv1_and_its_machines_are_reclaimed() {
    let token = "fm2_lJPECAAAAAAAAbareMacaroon0000";
    let rig = Rig::around(Flyio::with_token(token, token), Config::deadline(5));
    let out = reclaims_with_scheme(&rig, "FlyV1");
    assert_not_printed(&format!("{}{}", out.stdout, out.stderr), token);
}

#[test]
fn a_token_pasted_with_a_scheme_is_stripped_and_sent_with_the_scheme_its_parts_call_for() {
    let cases: [(&str, &'static str, &str); 5] = [
        // As `fly tokens create` prints it: a permission token and its discharge.
        (
            "fm2_lJPECAAAAAAAAA,fm2_discharge",
            "FlyV1 fm2_lJPECAAAAAAAAA,fm2_discharge",
            "FlyV1",
        ),
        ("fo1_personal0000", "Bearer fo1_personal0000", "Bearer"),
        ("fm2_pastedAsBearer", "Bearer fm2_pastedAsBearer", "FlyV1"),
        ("fm1r_readOnly", "  bearer FlyV1 fm1r_readOnly ", "FlyV1"),
        // A user token beside a macaroon: only the macaroon goes out, as fly-go sends it.
        (
            "fm2_orgMacaroon",
            "FlyV1 fm2_orgMacaroon,fo1_userToken",
            "FlyV1",
        ),
    ];
    for (issued, pasted, scheme) in cases {
        let rig = Rig::around(Flyio::with_token(issued, pasted), Config::deadline(5));
        let out = reclaims_with_scheme(&rig, scheme);
        for part in pasted.split([' ', ',']).filter(|p| p.contains('_')) {
            assert_not_printed(&format!("{}{}", out.stdout, out.stderr), part);
        }
    }
}

#[test]
fn a_destroy_asks_to_kill_as_fly_go_does_and_to_force_as_the_docs_do() {
    let rig = Rig::<Flyio>::new(Config::deadline(5));
    reclaims_with_scheme(&rig, "Bearer");
    let deletes = rig.cloud.fly.deletes();
    assert!(!deletes.is_empty());
    for d in &deletes {
        assert_eq!(
            (d.asks("kill"), d.asks("force")),
            (Some("true"), Some("true")),
            "DELETE of {} asked {:?}",
            d.id,
            d.query
        );
    }
}

#[test]
fn a_destroy_refused_412_while_the_machine_is_still_stopping_is_retried_until_it_is_gone() {
    let rig = Rig::<Flyio>::new(Config::deadline(10));
    rig.cloud.fly.set_stop_takes(Duration::from_millis(1200));
    let session = session_id();
    let ours = rig.many(&session, 3);
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&ours), "{}", out.stdout);
    let refusals = rig
        .cloud
        .hits()
        .iter()
        .filter(|h| h.method == "DELETE" && h.status == 412)
        .count();
    assert!(
        refusals >= ours.len(),
        "the machines were never met stopping"
    );
}

#[test]
fn a_machine_that_stays_stopping_is_reported_not_removed_and_the_token_is_never_printed() {
    let token = "fm2_stillStoppingToken0000";
    let rig = Rig::around(Flyio::with_token(token, token), Config::deadline(3));
    rig.cloud.fly.set_stop_takes(Duration::from_secs(3600));
    // Every error answer quotes the request's Authorization header back.
    rig.cloud.set_faults(Faults {
        echo_auth: true,
        ..Faults::default()
    });
    let session = session_id();
    let id = rig.labelled(&session);
    let out = rig.run(&[
        "stop",
        "--all",
        "--json",
        "--provider",
        "flyio",
        "--session",
        &session,
    ]);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    assert!(
        rig.cloud.exists(&id),
        "a machine still stopping was taken for gone"
    );
    let v = json(&out.stdout);
    assert_eq!(v["clean"], false, "{v}");
    let result = &v["results"][0];
    assert_eq!(result["outcome"], "unfinished", "{v}");
    let error = result["error"].as_str().unwrap_or_default();
    assert!(error.contains("HTTP 412"), "{v}");
    assert!(result["attempts"].as_u64().unwrap() >= 2, "{v}");
    assert_not_printed(&format!("{}{}", out.stdout, out.stderr), token);
}

#[test]
fn a_machine_at_rest_whose_stop_is_refused_is_destroyed() {
    let rig = Rig::<Flyio>::new(Config::deadline(5));
    let session = session_id();
    let labels = [(SESSION, session.as_str()), (OWNER, &dead_owner_label())];
    let at_rest: Vec<String> = ["stopped", "suspended", "created"]
        .iter()
        .map(|state| rig.cloud.fly.insert_in_state(&labels, state))
        .collect();
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&at_rest), "{}", out.stdout);
    let refused = rig
        .cloud
        .hits()
        .iter()
        .filter(|h| h.path.ends_with("/stop") && h.status == 409)
        .count();
    assert_eq!(
        refused,
        at_rest.len(),
        "each stop is refused once, then the destroy decides"
    );
}

#[test]
fn a_wrong_app_is_an_error_and_providers_says_what_is_missing() {
    let rig = Rig::<Flyio>::new(Config::deadline(3));
    rig.labelled(&session_id());
    let out = run(rig.cmd().env("FLY_APP_NAME", "no-such-app").args([
        "ps",
        "--json",
        "--provider",
        "flyio",
    ]));
    assert_eq!(out.code, 1);
    let err = json(&out.stdout)["errors"][0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(err.contains("app not found"), "{err}");

    let flyio = |cmd: &mut Command| {
        let out = run(cmd.args(["providers", "--json"]));
        json(&out.stdout)["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "flyio")
            .cloned()
            .expect("flyio is registered")
    };
    let p = flyio(rig.cmd().env_remove("FLY_APP_NAME"));
    assert_eq!(p["configured"], false);
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains("FLY_APP_NAME is not set"), "{p}");
    let p = flyio(rig.cmd().env("FLY_APP_NAME", "no-such-app"));
    assert_eq!(p["reachable"], false, "{p}");
}

#[test]
fn a_stopped_machine_is_listed_and_a_destroyed_one_is_not() {
    let rig = Rig::<Flyio>::new(Config::deadline(3));
    let session = session_id();
    let started = rig.labelled(&session);
    let stopped = rig.cloud.fly.insert_in_state(
        &[(SESSION, &session), (OWNER, &dead_owner_label())],
        "stopped",
    );
    let gone = rig
        .cloud
        .fly
        .insert_in_state(&[(SESSION, &session)], "destroyed");
    let out = rig.run(&["ps", "--provider", "flyio"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out.stdout.lines().find(|l| l.contains(stopped.as_str()));
    assert!(line
        .expect("the stopped machine is listed")
        .contains("stopped"));
    assert!(!out.stdout.contains(gone.as_str()), "{}", out.stdout);

    let out = rig.run(&["ps", "--json", "--provider", "flyio"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let mut ids: Vec<&str> = v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["instance_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![started.as_str(), stopped.as_str()];
    want.sort();
    assert_eq!(ids, want);
}

#[test]
fn a_leased_machine_is_removed_only_after_its_lease_ends() {
    leased_machines(true);
}

#[test]
fn a_lease_whose_error_names_no_expiry_is_read_and_waited_out() {
    leased_machines(false);
}

fn leased_machines(expiry_in_errors: bool) {
    let rig = Rig::<Flyio>::new(Config::deadline(10));
    let fly = &rig.cloud.fly;
    fly.set_lease_expiry_in_errors(expiry_in_errors);
    let (mut owner, mut ours) = rig.owner_with(3);
    let other = rig.labelled(&session_id());
    let stranger = rig.stranger();
    // A stopped one too: at rest or not, the driver must not send a DELETE into a lease.
    ours.push(fly.insert_in_state(&pairs(&owner.label_pairs()), "stopped"));
    let leased = [ours[0].clone(), ours[3].clone()];
    let expiry = leased
        .iter()
        .map(|id| fly.lease(id, Duration::from_secs(2)))
        .max()
        .unwrap();
    kill_alone(&mut owner);
    eventually(
        Duration::from_secs(12),
        "every machine is gone, the leased ones after their lease",
        || rig.all_gone(&ours),
    );
    assert!(SystemTime::now() >= expiry);
    let hits = fly.hits();
    for id in &leased {
        let deletes = fly.deletes_of(id);
        assert!(!deletes.is_empty());
        assert!(
            deletes.iter().all(|at| *at >= expiry),
            "a DELETE reached leased machine {id} before its lease ended"
        );
        let conflicts = hits
            .iter()
            .filter(|h| h.status == 409 && h.path.contains(id.as_str()))
            .count();
        assert!(
            (1..=2).contains(&conflicts),
            "machine {id}: {conflicts} refusals; the lease must be met once and waited out"
        );
    }
    let lease_reads = hits.iter().filter(|h| h.path.ends_with("/lease")).count();
    if expiry_in_errors {
        assert_eq!(lease_reads, 0, "the expiry was in the message");
    } else {
        assert!(
            lease_reads >= 1,
            "the driver never asked when the lease ends"
        );
    }
    assert!(fly.exists(&other) && fly.exists(&stranger));
}

#[test]
fn a_429_storm_without_retry_after_is_waited_out() {
    let rig = Rig::<Flyio>::new(Config::deadline(20));
    rig.cloud.fly.set_retry_after_header(false);
    let session = session_id();
    let ours = rig.many(&session, 4);
    let other = rig.labelled(&session_id());
    rig.cloud.set_faults(Faults {
        throttle_rate: 0.5,
        retry_after_secs: 1,
        ..Faults::default()
    });
    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&ours));
    assert!(rig.cloud.exists(&other));
    let hits = rig.cloud.hits();
    assert!(hits.iter().any(|h| h.status == 429), "the storm never hit");
    // Without a hint, the shared listing retry keeps its own short backoff; removals wait the
    // 1 s Fly documents per action and machine.
    let early = hits.iter().filter(|h| h.early && h.method != "GET").count();
    assert_eq!(early, 0, "requests sent before the 429's wait elapsed");
}
