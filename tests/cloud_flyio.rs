//! The Fly.io Machines driver through the real binary, against the emulator in
//! `support/flyio.rs`: `ps`, `stop`, reclaim on owner death, a large unpaged app, 429 storms
//! with and without `Retry-After`, 5xx, latency, dropped connections, an outage longer than
//! the deadline, and a leased machine that is waited out rather than fought.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::support::emu::Faults;
use crate::support::flyio::Fly;
use crate::support::*;
use sandguard::labels::{OWNER, SESSION};

const APP: &str = "sg-test-app";
const TOKEN: &str = "fo1_sandguard-test-7f3c9a";

struct Setup {
    scratch: Scratch,
    fly: Fly,
    config: std::path::PathBuf,
}

/// An emulator and a scratch dir with a config: Docker off, short reclaim limits.
fn setup(tag: &str, deadline: &str) -> Setup {
    setup_with(tag, deadline, TOKEN)
}

fn setup_with(tag: &str, deadline: &str, token: &str) -> Setup {
    let scratch = Scratch::new(tag);
    let fly = Fly::start(APP, token);
    let config = scratch.path().join("sandguard.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"{deadline}\"\n\
             retry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0\"\n"
        ),
    )
    .unwrap();
    Setup {
        scratch,
        fly,
        config,
    }
}

impl Setup {
    /// `sandguard` pointed at the emulator with the right credential.
    fn cmd(&self) -> Command {
        self.cmd_with(TOKEN, APP)
    }

    fn cmd_with(&self, token: &str, app: &str) -> Command {
        let mut cmd = sandguard(&self.scratch);
        cmd.env("SANDGUARD_CONFIG", &self.config)
            .env("FLY_API_TOKEN", token)
            .env("FLY_APP_NAME", app)
            .env("FLY_API_HOSTNAME", &self.fly.url);
        cmd
    }

    fn stop_session(&self, session: &str) -> Run {
        run(self
            .cmd()
            .args(["stop", "--all", "--provider", "flyio", "--session", session]))
    }
}

fn labels(session: &str) -> Vec<(&'static str, String)> {
    vec![(SESSION, session.to_string()), (OWNER, live_owner_label())]
}

fn insert(fly: &Fly, labels: &[(&str, String)]) -> String {
    let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fly.insert(&pairs)
}

/// Polls until `check` holds, for at most `limit`.
fn eventually(limit: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn ps_lists_labelled_machines_with_their_session_and_nothing_else() {
    let s = setup("flyps", "3s");
    let session = format!("fp{}", unique());
    let a = insert(&s.fly, &labels(&session));
    let b = s.fly.insert_in_state(
        &[(SESSION, &session), (OWNER, &dead_owner_label())],
        "stopped",
    );
    let stranger = s.fly.insert(&[("app", "web")]);
    let lookalike = s.fly.insert(&[("sandguard.sessionx", &session)]);
    let gone = s.fly.insert_in_state(&[(SESSION, &session)], "destroyed");

    let out = run(s.cmd().args(["ps", "--provider", "flyio"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |id: &str| {
        out.stdout
            .lines()
            .find(|l| l.contains(id))
            .map(str::to_string)
    };
    let la = line(&a).expect("the started machine is listed");
    assert!(la.contains("flyio") && la.contains("started") && la.contains(&session));
    assert!(line(&b)
        .expect("the stopped machine is listed")
        .contains("stopped"));
    for id in [&stranger, &lookalike, &gone] {
        assert!(
            line(id).is_none(),
            "{id} must not be listed: {}",
            out.stdout
        );
    }

    let out = run(s.cmd().args(["ps", "--json", "--provider", "flyio"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let list = v["sandboxes"].as_array().unwrap();
    let mut ids: Vec<&str> = list
        .iter()
        .map(|x| x["instance_id"].as_str().unwrap())
        .collect();
    ids.sort();
    let mut want = vec![a.as_str(), b.as_str()];
    want.sort();
    assert_eq!(ids, want);
    let first = list
        .iter()
        .find(|x| x["instance_id"] == a.as_str())
        .unwrap();
    assert_eq!(first["provider"], "flyio");
    assert_eq!(first["session"], session.as_str());
    assert_eq!(first["owner_alive"], true);
    assert_eq!(
        first["image"],
        "registry-1.docker.io/library/busybox:latest"
    );
    assert_eq!(first["labels"][SESSION], session.as_str());
}

#[test]
fn a_flyv1_token_is_sent_as_is() {
    let token = "FlyV1 fm2_lJPECAAAAAAAAA,fm2_sandguardtest";
    let s = setup_with("flyv1", "3s", token);
    let id = insert(&s.fly, &labels(&format!("fv{}", unique())));
    let out = run(s
        .cmd_with(token, APP)
        .args(["ps", "--json", "--provider", "flyio"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        json(&out.stdout)["sandboxes"][0]["instance_id"],
        id.as_str()
    );
}

#[test]
fn a_wrong_token_or_app_is_an_error_and_the_token_never_shows() {
    let s = setup("flyauth", "3s");
    insert(&s.fly, &labels(&format!("fa{}", unique())));
    let wrong = "fo1_wrong-secret-d00d";
    for args in [
        &["ps", "--provider", "flyio"][..],
        &["ps", "--json", "--provider", "flyio"],
    ] {
        let out = run(s.cmd_with(wrong, APP).args(args));
        assert_eq!(out.code, 1, "{}", out.stdout);
        for text in [&out.stdout, &out.stderr] {
            assert!(!text.contains("wrong-secret"), "the token leaked: {text}");
        }
        if args.contains(&"--json") {
            let v = json(&out.stdout);
            assert_eq!(v["errors"][0]["provider"], "flyio");
            let err = v["errors"][0]["error"].as_str().unwrap();
            assert!(err.contains("HTTP 401"), "{err}");
        }
    }
    let out = run(s
        .cmd_with(TOKEN, "no-such-app")
        .args(["ps", "--json", "--provider", "flyio"]));
    assert_eq!(out.code, 1);
    let err = json(&out.stdout)["errors"][0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(err.contains("app not found"), "{err}");
}

#[test]
fn stop_removes_exactly_its_targets() {
    let s = setup("flystop", "3s");
    let (sa, sb) = (format!("sa{}", unique()), format!("sb{}", unique()));
    let a1 = insert(&s.fly, &labels(&sa));
    let a2 = insert(&s.fly, &labels(&sa));
    let b1 = insert(&s.fly, &labels(&sb));
    let stranger = s.fly.insert(&[("app", "web")]);

    let out = run(s.cmd().args(["stop", &a1]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!s.fly.exists(&a1));
    assert!(s.fly.exists(&a2) && s.fly.exists(&b1) && s.fly.exists(&stranger));

    let out = s.stop_session(&sa);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!s.fly.exists(&a2));
    assert!(s.fly.exists(&b1) && s.fly.exists(&stranger));

    let out = run(s.cmd().args(["stop", "--all", "--provider", "flyio"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(s.fly.remaining(), vec![stranger.clone()]);

    let out = run(s.cmd().args(["stop", &stranger]));
    assert_eq!(
        out.code, 1,
        "an unlabelled machine is not found, never removed"
    );
    assert!(s.fly.exists(&stranger));
}

#[test]
fn a_large_app_is_listed_whole_from_one_unpaged_answer() {
    let s = setup("flybig", "3s");
    let session = format!("fb{}", unique());
    let l = labels(&session);
    let ids: Vec<String> = (0..600).map(|_| insert(&s.fly, &l)).collect();
    for _ in 0..50 {
        s.fly.insert(&[("app", "web")]);
    }
    let out = run(s.cmd().args(["ps", "--json", "--provider", "flyio"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["sandboxes"].as_array().unwrap().len(), ids.len());
    let lists = s.fly.hits().iter().filter(|h| h.method == "GET").count();
    assert_eq!(lists, 1, "one request lists the whole app");
}

/// The three sandboxes a guarded program would have created, plus two bystanders.
struct Owned {
    job: Job,
    session: String,
    /// `SANDGUARD_LABELS` as the program saw it.
    labels: Vec<(String, String)>,
    ours: Vec<String>,
    other: String,
    stranger: String,
}

fn guarded_with_machines(s: &Setup) -> Owned {
    use std::os::unix::process::CommandExt;
    let file = s.scratch.path().join("session");
    let script = format!(
        "printf '%s\\n%s\\n' \"$SANDGUARD_SESSION\" \"$SANDGUARD_LABELS\" > {f}.tmp; \
         mv {f}.tmp {f}; exec sleep 600",
        f = file.display()
    );
    let child = s
        .cmd()
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sandguard");
    let mut job = Job(child);
    let text = wait_for_file(&file, &mut job.0);
    let mut lines = text.lines();
    let session = lines.next().unwrap().to_string();
    let labels: Vec<(&str, &str)> = lines
        .next()
        .unwrap()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert!(labels.contains(&(SESSION, session.as_str())), "{labels:?}");
    let ours = (0..3).map(|_| s.fly.insert(&labels)).collect();
    let other = insert(&s.fly, &labels_of_other());
    let stranger = s.fly.insert(&[("app", "web")]);
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Owned {
        job,
        session,
        labels,
        ours,
        other,
        stranger,
    }
}

fn labels_of_other() -> Vec<(&'static str, String)> {
    labels(&format!("other{}", unique()))
}

fn wait_for_file(path: &std::path::Path, child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the guarded program ended early ({status})");
        }
        assert!(
            Instant::now() < deadline,
            "the guarded program did not start"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A guarded job in its own process group; the group is killed when it drops.
struct Job(Child);

impl Job {
    fn sigkill(&mut self) {
        let status = Command::new("kill")
            .args(["-KILL", "--", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.0.wait().unwrap();
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

#[test]
fn the_owners_death_reclaims_its_machines_and_only_those() {
    let s = setup("flydeath", "3s");
    let mut owned = guarded_with_machines(&s);
    owned.job.sigkill();
    eventually(
        Duration::from_secs(5),
        "the dead owner's machines are gone",
        || owned.ours.iter().all(|id| !s.fly.exists(id)),
    );
    assert!(
        s.fly.exists(&owned.other),
        "another session's machine survives"
    );
    assert!(
        s.fly.exists(&owned.stranger),
        "an unlabelled machine survives"
    );
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
    let s = setup("flylease", "10s");
    s.fly.set_lease_expiry_in_errors(expiry_in_errors);
    let mut owned = guarded_with_machines(&s);
    // A stopped one too: at rest or not, the driver must not send a DELETE into a lease.
    let pairs: Vec<(&str, &str)> = owned
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    owned.ours.push(s.fly.insert_in_state(&pairs, "stopped"));
    let leased = [owned.ours[0].clone(), owned.ours[3].clone()];
    let expiry = leased
        .iter()
        .map(|id| s.fly.lease(id, Duration::from_secs(2)))
        .max()
        .unwrap();
    owned.job.sigkill();
    eventually(
        Duration::from_secs(12),
        "every machine is gone, the leased ones after their lease",
        || owned.ours.iter().all(|id| !s.fly.exists(id)),
    );
    assert!(SystemTime::now() >= expiry);
    let hits = s.fly.hits();
    for id in &leased {
        let deletes = s.fly.deletes_of(id);
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
    assert!(s.fly.exists(&owned.other) && s.fly.exists(&owned.stranger));
}

fn storm(retry_after_header: bool) {
    let s = setup("flystorm", "20s");
    s.fly.set_retry_after_header(retry_after_header);
    let session = format!("fs{}", unique());
    let ours: Vec<String> = (0..4).map(|_| insert(&s.fly, &labels(&session))).collect();
    let other = insert(&s.fly, &labels_of_other());
    s.fly.set_faults(Faults {
        throttle_rate: 0.5,
        retry_after_secs: 1,
        ..Faults::default()
    });
    let out = s.stop_session(&session);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(ours.iter().all(|id| !s.fly.exists(id)));
    assert!(s.fly.exists(&other));
    let hits = s.fly.hits();
    assert!(hits.iter().any(|h| h.status == 429), "the storm never hit");
    // Without a hint, the shared listing retry keeps its own short backoff; removals wait the
    // 1 s Fly documents per action and machine.
    let early = hits
        .iter()
        .filter(|h| h.early && (retry_after_header || h.method != "GET"))
        .count();
    assert_eq!(early, 0, "requests sent before the 429's wait elapsed");
}

#[test]
fn a_429_storm_with_retry_after_is_waited_out() {
    storm(true);
}

#[test]
fn a_429_storm_without_retry_after_is_waited_out() {
    storm(false);
}

#[test]
fn server_errors_are_retried_until_everything_is_removed() {
    let s = setup("fly5xx", "15s");
    let session = format!("fe{}", unique());
    let ours: Vec<String> = (0..5).map(|_| insert(&s.fly, &labels(&session))).collect();
    let stranger = s.fly.insert(&[("app", "web")]);
    s.fly.set_faults(Faults {
        error_rate: 0.3,
        ..Faults::default()
    });
    let out = s.stop_session(&session);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(ours.iter().all(|id| !s.fly.exists(id)));
    assert!(s.fly.exists(&stranger));
    assert!(s.fly.hits().iter().any(|h| h.status == 503));
}

/// A fault that slows or breaks requests without refusing them: `stop` still removes every
/// machine of the session, and nothing else.
fn stop_under(tag: &str, faults: Faults) -> Setup {
    let s = setup(tag, "15s");
    let session = format!("ff{}", unique());
    let ours: Vec<String> = (0..8).map(|_| insert(&s.fly, &labels(&session))).collect();
    let stranger = s.fly.insert(&[("app", "web")]);
    s.fly.set_faults(faults);
    let out = s.stop_session(&session);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(ours.iter().all(|id| !s.fly.exists(id)));
    assert!(s.fly.exists(&stranger));
    s
}

#[test]
fn a_slow_provider_is_waited_for_not_given_up_on() {
    stop_under(
        "flyslow",
        Faults {
            latency: Duration::from_millis(150),
            ..Faults::default()
        },
    );
}

#[test]
fn dropped_connections_are_retried_until_everything_is_removed() {
    let s = stop_under(
        "flydrop",
        Faults {
            drop_rate: 0.25,
            ..Faults::default()
        },
    );
    assert!(
        s.fly.hits().iter().any(|h| h.status == 0),
        "no connection was dropped"
    );
}

#[test]
fn an_outage_longer_than_the_deadline_leaves_the_session_pending_until_stop() {
    let s = setup("flyout", "2s");
    let mut owned = guarded_with_machines(&s);
    s.fly.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    owned.job.sigkill();
    let pending = || {
        let out = run(s.cmd().args(["sessions", "--json"]));
        json(&out.stdout)["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["session"] == owned.session.as_str() && x["state"] == "pending")
    };
    eventually(Duration::from_secs(15), "the session is pending", pending);
    assert!(owned.ours.iter().all(|id| s.fly.exists(id)));

    s.fly.set_faults(Faults::default());
    let out = s.stop_session(&owned.session);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(owned.ours.iter().all(|id| !s.fly.exists(id)));
    assert!(s.fly.exists(&owned.other) && s.fly.exists(&owned.stranger));
}

#[test]
fn providers_says_what_is_missing_and_checks_the_app() {
    let s = setup("flyprov", "3s");
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
    let p = flyio(s.cmd().env_remove("FLY_APP_NAME"));
    assert_eq!(p["configured"], false);
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("FLY_APP_NAME is not set"),
        "{p}"
    );
    let p = flyio(s.cmd().env_remove("FLY_API_TOKEN"));
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("FLY_API_TOKEN is not set"),
        "{p}"
    );

    let p = flyio(&mut s.cmd());
    assert_eq!(p["configured"], true);
    assert_eq!(p["reachable"], true, "{p}");
    assert_eq!(p["capabilities"]["ttl"], false);
    assert!(p["detail"].as_str().unwrap().contains(&s.fly.url), "{p}");
    let p = flyio(&mut s.cmd_with(TOKEN, "no-such-app"));
    assert_eq!(p["reachable"], false, "{p}");
}
