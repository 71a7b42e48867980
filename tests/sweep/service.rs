//! `sandguard sweep --every D` adopts a session whose sidecar died while its owner
//! lives (its `--metrics` count the owner adopted and watched), and on SIGTERM it stops at once and *releases* it: nothing is reclaimed, the
//! session's lock is free (the ledger shows no live sidecar), and the next sweep adopts it
//! again, or reclaims it once the owner has died.

use std::time::{Duration, Instant};

use crate::support::plugin::{cmd, config, kill_sidecar, pairs, session_row, Plugin};
use crate::support::*;
use crate::sweep::metrics::{scrape, value};

#[test]
fn sweep_every_releases_what_it_adopted_on_sigterm() {
    let s = Scratch::new("p16-every");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "5s", &[&acme]);
    let mut owner = Owner::start(cmd(&s, &config), &s);
    acme.insert("kept", &pairs(&owner.label_pairs()));
    kill_sidecar(&owner.session);
    let session = owner.session.clone();
    let row = || session_row(&mut cmd(&s, &config), &session);

    let sock = s.path().join("metrics.sock");
    let mut service = Background::start(
        cmd(&s, &config)
            .args(["sweep", "--every", "1s", "--metrics"])
            .arg(&sock),
    );
    eventually(
        Duration::from_secs(10),
        "the service adopts the session (it holds its lock)",
        || row()["sidecar_alive"] == true,
    );
    // Its metrics say so: one owner adopted, and watched.
    eventually(
        Duration::from_secs(10),
        "the metrics show the adoption",
        || {
            let body = scrape(&sock).2;
            value(&body, "sandguard_sessions_watched", &[]) == Some(1.0)
                && value(&body, "sandguard_sessions_adopted_total", &[]) == Some(1.0)
        },
    );

    crate::watch::wrapper::unsafe_kill(service.0.id() as i32, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = service.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the service did not stop within 5 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    assert!(status.success(), "{status}");
    let after = row();
    assert_eq!(
        after["sidecar_alive"], false,
        "the lock is released: {after}"
    );
    assert_eq!(after["state"], "active", "nothing was reclaimed: {after}");
    assert_eq!(after["owner_alive"], true, "{after}");
    assert!(acme.exists("kept"), "the live owner's sandbox survives");

    // The next sweep can take the session again: it adopts it while the owner lives…
    let out = run(cmd(&s, &config).args(["sweep", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let verdict = |v: &serde_json::Value| {
        v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["session"] == session.as_str() && d["instance_id"].is_null())
            .map(|d| d["verdict"].as_str().unwrap().to_string())
    };
    assert_eq!(verdict(&v).as_deref(), Some("adopt"), "{v}");
    assert!(acme.exists("kept"));
    // …and reclaims it once the owner is dead.
    owner.kill();
    let out = run(cmd(&s, &config).args(["sweep", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(verdict(&v).as_deref(), Some("reclaim"), "{v}");
    assert!(!acme.exists("kept"));
    assert_eq!(row()["state"], "reclaimed");
}
