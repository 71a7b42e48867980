//! `sandguard sweep --every D` adopts a session whose sidecar died while its owner
//! lives (its `--metrics` count the owner adopted and watched), and on SIGTERM it stops at once and *releases* it: nothing is reclaimed, the
//! session's lock is free (the ledger shows no live sidecar), and the next sweep adopts it
//! again, or reclaims it once the owner has died. A pass at work when SIGTERM comes (E2B
//! down, a reclaim retrying it) is cut short: the service stops within seconds, and what it
//! did not finish stays pending in a journal that reads whole.

use std::time::{Duration, Instant};

use std::path::Path;

use crate::support::e2b;
use crate::support::emu::Faults;
use crate::support::plugin::{cmd, config, kill_sidecar, pairs, session_row, Plugin};
use crate::support::*;
use crate::sweep::metrics::{scrape, value};
use crate::watch::sidecar::journal;
use crate::watch::wrapper::unsafe_kill;

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

/// E2B is down and a session is pending there. A service whose reclaims would retry E2B for
/// ten minutes is SIGTERMed while its pass is at work on that session: it stops within a few
/// seconds, the session is still pending (what the pass did not finish is left to the next
/// sweep), every line of its journal reads. The same with E2B hanging (a call in flight at
/// the signal). The next sweep finishes the session.
#[test]
fn sweep_every_stops_mid_pass_on_sigterm_and_leaves_the_session_pending() {
    const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
    let s = Scratch::new("sweep-sigterm");
    let (emu, e2b) = e2b::start(KEY);
    // The sidecar gives up on E2B after 4 s; the service would keep at it for ten minutes.
    let short = cloud_config(&s, "");
    let long = s.file(
        "service.toml",
        "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"10m\"\nretry_initial = \"2s\"\nretry_max = \"30s\"\nsettle = \"0\"\n",
    );
    let with = |config: &Path| {
        let mut c = sandguard(&s);
        c.env("SANDGUARD_CONFIG", config)
            .env("E2B_API_KEY", KEY)
            .env("E2B_API_URL", &emu.url);
        c
    };
    let mut owner = Owner::start(with(&short), &s);
    let session = owner.session.clone();
    let sandbox = format!("i{}", unique());
    e2b.insert(&sandbox, &pairs(&owner.label_pairs()));
    emu.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    owner.kill();
    let row = || session_row(&mut with(&short), &session);
    eventually(
        Duration::from_secs(30),
        "the sidecar leaves the session pending on E2B",
        || {
            let r = row();
            r["state"] == "pending" && r["sidecar_alive"] == false
        },
    );

    let before = emu.hits().len();
    let mut service =
        Background::start(with(&long).args(["sweep", "--every", "1s", "--provider", "e2b"]));
    // Its listing of E2B gave up (four tries); its reclaim of the session is at work.
    eventually(
        Duration::from_secs(30),
        "the pass is at work on the session",
        || emu.hits().len() >= before + 6,
    );
    terminated(&mut service, "retrying a refusing E2B");
    let clean = || {
        let text = std::fs::read_to_string(journal(&s, &session)).unwrap();
        for line in text.lines() {
            let parsed = serde_json::from_str::<serde_json::Value>(line);
            assert!(parsed.is_ok(), "a torn journal line: {line:?}\n{text}");
        }
        let shown = shown(&mut with(&short), &session);
        assert_eq!(shown["state"], "pending", "{shown}");
        assert_eq!(row()["sidecar_alive"], false);
        assert!(e2b.exists(&sandbox));
    };
    clean();

    // E2B hanging rather than refusing (two seconds before each 503): a call in flight is cut
    // as well.
    emu.set_faults(Faults {
        outage: true,
        latency: Duration::from_secs(2),
        ..Faults::default()
    });
    let before = emu.hits().len();
    let mut service =
        Background::start(with(&long).args(["sweep", "--every", "1s", "--provider", "e2b"]));
    eventually(
        Duration::from_secs(30),
        "a call answered, the next one hangs",
        || emu.hits().len() > before,
    );
    terminated(&mut service, "waiting on a hanging E2B");
    clean();

    // The next sweep, with E2B back, finishes it.
    emu.set_faults(Faults::default());
    let out = run(with(&short).args(["sweep", "--provider", "e2b"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!e2b.exists(&sandbox));
    assert_eq!(row()["state"], "reclaimed");
}

/// SIGTERMs the service and waits for it to exit, at most 5 s; how long it took is printed
/// with `doing` (what it was at).
fn terminated(service: &mut Background, doing: &str) {
    let asked = Instant::now();
    unsafe_kill(service.0.id() as i32, libc::SIGTERM);
    let child = std::cell::RefCell::new(&mut service.0);
    eventually(
        Duration::from_secs(5),
        "the service stops within 5 s of SIGTERM",
        || matches!(child.borrow_mut().try_wait(), Ok(Some(_))),
    );
    let took = asked.elapsed();
    eprintln!("the sweep service, {doing}, stopped {took:?} after SIGTERM");
    let status = child.borrow_mut().wait().unwrap();
    assert!(status.success(), "{status}");
}
