//! Tenki through the real binary, against the Tenki emulator: `ps`, `stop`, reclaim when the
//! owner is SIGKILLed, paging, a 429 storm, 5xx, latency, dropped connections, and an outage
//! longer than the deadline. The sandboxes carry what a program stamps on Tenki: the
//! `sandguard:<session>` tag, and the labels in `metadata`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::emu::Faults;
use crate::support::tenki::{Tenki, TOKEN};
use crate::support::*;
use sandguard::labels::{OWNER, SESSION};
use sandguard::providers::tenki::session_tag;

/// The config every test runs with: no Docker, short reclaim limits, and `extra` lines for
/// `[reclaim]`.
fn config(s: &Scratch, deadline: &str, extra: &str) -> PathBuf {
    let path = s
        .path()
        .join(format!("config-{deadline}-{}.toml", extra.len()));
    std::fs::write(
        &path,
        format!(
            "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"{deadline}\"\n\
             retry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0\"\n{extra}\n"
        ),
    )
    .unwrap();
    path
}

/// `sandguard` talking to the emulator with `token`.
fn cmd(s: &Scratch, t: &Tenki, token: &str, deadline: &str) -> Command {
    cmd_with(s, t, token, deadline, "")
}

fn cmd_with(s: &Scratch, t: &Tenki, token: &str, deadline: &str, extra: &str) -> Command {
    let mut c = sandguard(s);
    c.env("SANDGUARD_CONFIG", config(s, deadline, extra))
        .env("TENKI_API_KEY", token)
        .env("TENKI_API_URL", t.url())
        .env_remove("TENKI_AUTH_TOKEN")
        .env_remove("TENKI_API_ENDPOINT")
        .env_remove("DOCKER_HOST");
    c
}

fn tenki(s: &Scratch, t: &Tenki) -> Command {
    cmd(s, t, TOKEN, "3s")
}

/// A random 32-hex session id, as `sandguard --` makes them.
fn session_id() -> String {
    format!("{}{}{}", unique(), unique(), unique())[..32].to_string()
}

/// A sandbox as a program of `session` creates it: the tag, and the labels as metadata.
fn labelled(t: &Tenki, session: &str) -> String {
    t.insert(
        &[&session_tag(session), "app:test"],
        &[(SESSION, session), (OWNER, &live_owner_label())],
    )
}

fn eventually(limit: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["instance_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn ps_lists_tagged_sandboxes_and_only_those() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-ps");
    let session = session_id();
    let full = labelled(&t, &session);
    let tag_only = t.insert(&[&session_tag(&session)], &[]);
    let untagged = t.insert(&["app:test"], &[(SESSION, &session)]);
    let stranger = t.insert(&["sandguard.session", "ci"], &[]);

    let out = run(tenki(&s, &t).args(["ps", "--json", "--provider", "tenki"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let listed = ids(&v);
    assert!(listed.contains(&full) && listed.contains(&tag_only), "{v}");
    assert!(
        !listed.contains(&untagged) && !listed.contains(&stranger),
        "{v}"
    );
    let entry = |id: &str| {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["instance_id"] == id)
            .unwrap()
            .clone()
    };
    let e = entry(&full);
    assert_eq!(e["provider"], "tenki");
    assert_eq!(e["status"], "running");
    assert_eq!(e["session"], session.as_str());
    assert_eq!(e["owner"], live_owner_label().as_str());
    // Without metadata a listing of every session sees the start of the id the tag holds.
    assert_eq!(entry(&tag_only)["session"], &session[..22]);

    let out = run(tenki(&s, &t).args(["ps", "--provider", "tenki"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains(&full[..8]))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    assert!(line.contains("tenki") && line.contains(&session), "{line}");
    assert!(!out.stdout.contains(&untagged[..8]), "{}", out.stdout);
}

#[test]
fn a_wrong_credential_is_an_error_and_never_printed() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-cred");
    labelled(&t, &session_id());
    let secret = "tk_wrong_0a1b2c3d4e5f";
    let out = run(cmd(&s, &t, secret, "3s").args(["ps", "--json", "--provider", "tenki"]));
    assert_eq!(out.code, 1, "{}", out.stdout);
    let v = json(&out.stdout);
    assert_eq!(v["errors"][0]["provider"], "tenki", "{v}");
    assert!(
        v["errors"][0]["error"].as_str().unwrap().contains("401"),
        "{v}"
    );
    let out_text = run(cmd(&s, &t, secret, "3s").args(["ps", "--provider", "tenki"]));
    assert_eq!(out_text.code, 1);
    for o in [&out, &out_text] {
        assert!(!o.stdout.contains(secret) && !o.stderr.contains(secret));
    }
}

#[test]
fn stop_removes_exactly_its_targets() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-stop");
    let (s1, s2) = (session_id(), session_id());
    let one = labelled(&t, &s1);
    let two = labelled(&t, &s1);
    let other = labelled(&t, &s2);
    let stranger = t.insert(&["app:test"], &[]);

    let out = run(tenki(&s, &t).args(["stop", &one]));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!t.alive(&one) && t.alive(&two) && t.alive(&other) && t.alive(&stranger));

    let out = run(tenki(&s, &t).args(["stop", "--all", "--session", &s1]));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!t.alive(&two) && t.alive(&other) && t.alive(&stranger));

    let out = run(tenki(&s, &t).args(["stop", "--all", "--provider", "tenki"]));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!t.alive(&other) && t.alive(&stranger));
    // The session's listing filtered on Tenki's side by its tag.
    assert!(t.calls("ListWorkspaceSandboxes") >= 3);
}

#[test]
fn listings_walk_every_page() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-pages");
    let session = session_id();
    let mine: Vec<String> = (0..230).map(|_| labelled(&t, &session)).collect();
    let others: Vec<String> = (0..5).map(|_| labelled(&t, &session_id())).collect();

    let out = run(tenki(&s, &t).args(["ps", "--json", "--provider", "tenki"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(ids(&json(&out.stdout)).len(), 235);
    assert_eq!(t.calls("ListWorkspaceSandboxes"), 3, "100 per page");

    let out = run(cmd(&s, &t, TOKEN, "20s").args(["stop", "--all", "--session", &session]));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(mine.iter().all(|id| !t.alive(id)));
    assert!(others.iter().all(|id| t.alive(id)));
}

#[test]
fn a_429_storm_is_waited_out() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-429");
    let session = session_id();
    let mine: Vec<String> = (0..8).map(|_| labelled(&t, &session)).collect();
    let other = labelled(&t, &session_id());
    t.emu.set_faults(Faults {
        throttle_rate: 0.5,
        retry_after_secs: 1,
        ..Faults::default()
    });
    // At the default concurrency: requests merely in flight when a 429 was sent do not count
    // as early (see `emu::IN_FLIGHT`).
    let out =
        run(cmd_with(&s, &t, TOKEN, "15s", "").args(["stop", "--all", "--session", &session]));
    t.emu.set_faults(Faults::default());
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(mine.iter().all(|id| !t.alive(id)));
    assert!(t.alive(&other));
    assert!(t.emu.hits().iter().any(|h| h.status == 429));
    assert_eq!(t.emu.early_hits(), 0, "a request ignored Retry-After");
}

#[test]
fn server_errors_are_retried() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-5xx");
    let session = session_id();
    let mine: Vec<String> = (0..10).map(|_| labelled(&t, &session)).collect();
    t.emu.set_faults(Faults {
        error_rate: 0.3,
        ..Faults::default()
    });
    let out = run(cmd(&s, &t, TOKEN, "10s").args(["stop", "--all", "--session", &session]));
    t.emu.set_faults(Faults::default());
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(mine.iter().all(|id| !t.alive(id)));
    assert!(t.emu.hits().iter().any(|h| h.status == 503));
}

/// A fault that slows or breaks requests without refusing them: `stop` still removes every
/// sandbox of the session, and nothing else.
fn stop_under(tag: &str, faults: Faults) -> Tenki {
    let t = Tenki::start();
    let s = Scratch::new(tag);
    let session = session_id();
    let mine: Vec<String> = (0..8).map(|_| labelled(&t, &session)).collect();
    let other = labelled(&t, &session_id());
    t.emu.set_faults(faults);
    let out = run(cmd(&s, &t, TOKEN, "15s").args(["stop", "--all", "--session", &session]));
    t.emu.set_faults(Faults::default());
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(mine.iter().all(|id| !t.alive(id)));
    assert!(t.alive(&other));
    t
}

#[test]
fn a_slow_provider_is_waited_for_not_given_up_on() {
    stop_under(
        "tenki-slow",
        Faults {
            latency: Duration::from_millis(150),
            ..Faults::default()
        },
    );
}

#[test]
fn dropped_connections_are_retried_until_everything_is_removed() {
    let t = stop_under(
        "tenki-drop",
        Faults {
            drop_rate: 0.25,
            ..Faults::default()
        },
    );
    assert!(
        t.emu.hits().iter().any(|h| h.status == 0),
        "no connection was dropped"
    );
}

/// `sandguard -- sh -c …` in its own process group, killed with its group on drop.
struct Owner(Child);

impl Owner {
    fn start(c: &mut Command, session_file: &Path) -> (Owner, String) {
        use std::os::unix::process::CommandExt;
        let script = format!(
            "echo \"$SANDGUARD_SESSION\" > {f}.tmp; mv {f}.tmp {f}; exec sleep 600",
            f = session_file.display()
        );
        let child = c
            .args(["--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn sandguard");
        let mut owner = Owner(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let session = loop {
            if let Ok(text) = std::fs::read_to_string(session_file) {
                break text.trim().to_string();
            }
            if let Ok(Some(status)) = owner.0.try_wait() {
                panic!("the guarded owner ended early: {status}");
            }
            assert!(Instant::now() < deadline, "the owner never started");
            std::thread::sleep(Duration::from_millis(25));
        };
        assert_eq!(session.len(), 32, "{session:?}");
        (owner, session)
    }

    fn sigkill(&mut self) {
        let status = Command::new("kill")
            .args(["-KILL", &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.0.wait().unwrap();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

#[test]
fn the_owners_death_reclaims_its_sandboxes() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-kill");
    let (mut owner, session) = Owner::start(&mut tenki(&s, &t), &s.path().join("session"));
    let mine: Vec<String> = (0..3).map(|_| labelled(&t, &session)).collect();
    let other = labelled(&t, &session_id());
    let stranger = t.insert(&["app:test"], &[]);
    owner.sigkill();
    eventually(
        Duration::from_secs(5),
        "the dead owner's three sandboxes are terminated",
        || mine.iter().all(|id| !t.alive(id)),
    );
    assert!(t.alive(&other), "another session's sandbox must survive");
    assert!(t.alive(&stranger), "an untagged sandbox must survive");
}

#[test]
fn an_outage_leaves_the_session_pending_until_stop() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-outage");
    let (mut owner, session) =
        Owner::start(&mut cmd(&s, &t, TOKEN, "1s"), &s.path().join("session"));
    let mine: Vec<String> = (0..3).map(|_| labelled(&t, &session)).collect();
    t.emu.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    owner.sigkill();
    let state = || {
        let out = run(tenki(&s, &t).args(["sessions", "--json"]));
        let v = json(&out.stdout);
        v["sessions"]
            .as_array()
            .and_then(|all| all.iter().find(|x| x["session"] == session.as_str()))
            .map(|x| x["state"].as_str().unwrap_or_default().to_string())
    };
    eventually(Duration::from_secs(15), "the session is pending", || {
        state().as_deref() == Some("pending")
    });
    assert!(mine.iter().all(|id| t.alive(id)));

    t.emu.set_faults(Faults::default());
    let out = run(tenki(&s, &t).args([
        "stop",
        "--all",
        "--provider",
        "tenki",
        "--session",
        &session,
    ]));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(mine.iter().all(|id| !t.alive(id)));
}

#[test]
fn renew_keeps_the_timeout_a_ttl_from_now() {
    use sandguard::config::{CloudSettings, Secret};
    use sandguard::labels::Selector;
    use sandguard::providers::{tenki::TenkiProvider, Provider};

    let t = Tenki::start();
    let session = session_id();
    let id = labelled(&t, &session);
    let settings = CloudSettings {
        rate: None,
        token: Some(Secret::new(TOKEN)),
        secret: None,
        url: t.url().to_string(),
        app: None,
        timeout: Duration::from_secs(5),
    };
    let p = TenkiProvider::new(&settings, settings.token.as_ref().unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let found = p.list(&Selector::session(&session)).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].session(), Some(session.as_str()));
        let before = t.timeout_at(&id).unwrap();
        p.renew(&found[0], Duration::from_secs(7200)).await.unwrap();
        let after = t.timeout_at(&id).unwrap();
        let now = sandguard::timefmt::now_unix();
        assert!(
            (now + 7195..=now + 7205).contains(&after),
            "{before} → {after}"
        );
        // Already two hours out: a shorter renewal asks for nothing.
        p.renew(&found[0], Duration::from_secs(600)).await.unwrap();
        assert_eq!(t.calls("ExtendSession"), 1);
        assert_eq!(t.timeout_at(&id), Some(after));
        p.remove(&found[0]).await.unwrap();
        let again = p.remove(&found[0]).await;
        assert!(
            matches!(again, Err(sandguard::providers::ProviderError::Gone(_))),
            "{again:?}"
        );
        let unknown = sandguard::providers::Sandbox {
            id: "00000000-0000-4000-8000-000000000000".into(),
            ..found[0].clone()
        };
        assert!(matches!(
            p.remove(&unknown).await,
            Err(sandguard::providers::ProviderError::Gone(_))
        ));
    });
}

#[test]
fn providers_checks_tenki_with_one_cheap_call() {
    let t = Tenki::start();
    let s = Scratch::new("tenki-providers");
    let out = run(tenki(&s, &t).args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let entry = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tenki")
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(entry["configured"], true, "{entry}");
    assert_eq!(entry["reachable"], true, "{entry}");
    assert_eq!(entry["detail"], format!("Tenki API at {}", t.url()));
    assert_eq!(entry["capabilities"]["ttl"], true);
    assert_eq!(t.calls("ListWorkspaceSandboxes"), 1);

    let mut unset = sandguard(&s);
    unset
        .env("SANDGUARD_CONFIG", config(&s, "3s", ""))
        .env_remove("TENKI_API_KEY")
        .env_remove("TENKI_AUTH_TOKEN");
    let v = json(&run(unset.args(["providers", "--json"])).stdout);
    let entry = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "tenki")
        .unwrap()
        .clone();
    assert_eq!(entry["configured"], false);
    assert!(
        entry["detail"].as_str().unwrap().contains("TENKI_API_KEY"),
        "{entry}"
    );
}
