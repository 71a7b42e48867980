//! The sweep's events: a flood of orphans as one `orphans_reclaimed`; a reclaim the sidecar
//! left pending (`reclaim_pending`) and the sweep that finishes it (`pending_finished`); a
//! detached sandbox alive too long (`detached_alive`); a listing that fails pass after pass
//! (`sweeper_failing`, then `sweeper_recovered`). Each is sent once, to the webhook and the
//! command alike.

use std::time::Duration;

use sandguard::labels::{DETACHED, OWNER, SESSION};

use super::*;
use crate::support::plugin::{cmd, pairs, Plugin};

/// `sandguard sweep --every 300ms` with `config`, killed on drop.
fn service(s: &Scratch, config: &Path) -> Background {
    Background::start(cmd(s, config).args(["sweep", "--every", "300ms"]))
}

#[test]
fn a_flood_of_thirty_orphans_is_one_event_with_its_count_to_the_webhook_and_the_command() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("notify-flood");
    let hook = Hook::start(Answer::Ok);
    let sink = Sink::new(&s);
    let table = notify_table(&format!("{}webhook = \"{}\"\n", sink.command(), hook.url()));
    let config = s.file("sandguard.toml", table);
    let mut r = Resources::default();
    let session = format!("flood{}", unique());
    let dead = dead_owner_label();
    let ids: Vec<String> = (0..30)
        .map(|_| r.container(&[(SESSION, &session), (OWNER, &dead)]))
        .collect();
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .env("SANDGUARD_LOG", "debug")
        .args(["sweep", "--provider", "docker"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(ids.iter().all(|c| !container_exists(c)), "all 30 reclaimed");
    // A one-shot sweep waits for its events before it exits.
    let hooked = hook.events();
    assert_eq!(hooked.len(), 1, "one event for the flood: {hooked:?}");
    let e = &hooked[0];
    check_common(e, "orphans_reclaimed");
    assert_eq!(e["count"], 30, "{e}");
    assert_eq!(e["providers"], serde_json::json!({"docker": 30}), "{e}");
    assert_eq!(e["sessions"], serde_json::json!([session]), "{e}");
    assert_eq!(e["more"], 0, "{e}");
    assert_eq!(e["by"], "sweep", "{e}");
    let text = e["text"].as_str().unwrap();
    assert!(
        text.ends_with(&format!(
            ": reclaimed 30 sandboxes of dead owners (docker 30), session {session}"
        )),
        "{text}"
    );
    assert_eq!(sink.events(), hooked, "the command got the same one event");
    assert!(!out.stderr.contains(TOKEN), "{}", out.stderr);
}

#[test]
fn a_reclaim_left_pending_is_told_by_the_sidecar_and_its_finish_by_the_next_sweep() {
    let (s, acme, config) = acme_rig("notify-pending");
    let hook = Hook::start(Answer::Ok);
    let sink = Sink::new(&s);
    with_notify(
        &config,
        &format!("{}webhook = \"{}\"\n", sink.command(), hook.url()),
    );
    let mut owner = Owner::start(cmd(&s, &config), &s);
    let labels = owner.label_pairs();
    acme.insert("ok", &pairs(&labels));
    acme.insert("busy", &pairs(&labels));
    acme.set_mode("busy", Some("busy"));
    let sidecar = crate::watch::wrapper::sidecar_pid(&owner.session);
    owner.kill();
    eventually(
        Duration::from_secs(30),
        "the sidecar reclaims, tells and exits",
        || !Path::new(&format!("/proc/{sidecar}")).exists(),
    );
    assert!(!acme.exists("ok") && acme.exists("busy"));
    let pending = hook.of("reclaim_pending");
    assert_eq!(pending.len(), 1, "{:?}", hook.events());
    let e = &pending[0];
    check_common(e, "reclaim_pending");
    assert_eq!(e["source"], "sidecar", "{e}");
    assert_eq!(e["count"], 1, "{e}");
    assert_eq!(e["providers"], serde_json::json!({"acme": 1}), "{e}");
    assert_eq!(e["sessions"], serde_json::json!([owner.session]), "{e}");
    let left = &e["sandboxes"][0];
    assert_eq!(
        (&left["provider"], &left["id"]),
        (&"acme".into(), &"busy".into())
    );
    assert!(left["error"].as_str().unwrap().contains("busy"), "{e}");
    assert_eq!(hook.events().len(), 1, "nothing else: {:?}", hook.events());

    acme.set_mode("busy", None);
    let out = run(cmd(&s, &config)
        .env("SANDGUARD_LOG", "debug")
        .args(["sweep"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!acme.exists("busy"));
    let finished = hook.of("pending_finished");
    let state = run(cmd(&s, &config).args(["sessions", "--json"])).stdout;
    assert_eq!(
        finished.len(),
        1,
        "{:?}\n{}{}{state}",
        hook.events(),
        out.stdout,
        out.stderr
    );
    let e = &finished[0];
    check_common(e, "pending_finished");
    assert_eq!(e["count"], 1, "{e}");
    assert_eq!(e["removed"], 1, "{e}");
    assert_eq!(e["providers"], serde_json::json!({"acme": 1}), "{e}");
    assert_eq!(e["sessions"], serde_json::json!([owner.session]), "{e}");
    assert!(
        hook.of("orphans_reclaimed").is_empty(),
        "what a pending session left is its finish, not an orphan: {:?}",
        hook.events()
    );
    assert_eq!(hook.events().len(), 2);
    assert_eq!(
        sink.events(),
        hook.events(),
        "the command got the same events"
    );
}

#[test]
fn a_detached_sandbox_alive_longer_than_detached_after_is_told_once_by_the_service() {
    let (s, acme, config, sink) = detached_rig("notify-detached");
    let now = sandguard::testing::timefmt::now_unix();
    let dead = dead_owner_label();
    let old = [(SESSION, "sd1"), (OWNER, dead.as_str()), (DETACHED, "true")];
    acme.insert_created("old", &old, now - 7200);
    acme.insert_created("young", &old, now - 60);
    let service = service(&s, &config);
    eventually(Duration::from_secs(20), "the old one is told", || {
        !sink.events().is_empty()
    });
    let passes = acme.calls("list", "").len();
    eventually(Duration::from_secs(20), "three more passes", || {
        acme.calls("list", "").len() >= passes + 3
    });
    drop(service);
    let told = sink.events();
    assert_eq!(told.len(), 1, "{told:?}");
    let e = &told[0];
    check_common(e, "detached_alive");
    assert_eq!(e["count"], 1, "{e}");
    assert_eq!(e["detached_after_s"], 3600, "{e}");
    let old = &e["sandboxes"][0];
    assert_eq!(
        (&old["provider"], &old["id"]),
        (&"acme".into(), &"old".into())
    );
    assert_eq!(old["session"], "sd1");
    assert!(old["age_s"].as_i64().unwrap() >= 7200, "{e}");
    assert!(acme.exists("old") && acme.exists("young"), "detached: left");
}

#[test]
fn a_listing_that_fails_two_passes_in_a_row_is_told_once_and_so_is_its_recovery() {
    let (s, acme, config) = acme_rig("notify-failing");
    let hook = Hook::start(Answer::Ok);
    with_notify(&config, &format!("webhook = \"{}\"\n", hook.url()));
    acme.set_list(Some("down"));
    let service = service(&s, &config);
    eventually(Duration::from_secs(20), "the failure is told", || {
        !hook.of("sweeper_failing").is_empty()
    });
    let passes = acme.calls("list", "").len();
    eventually(Duration::from_secs(20), "three more failed passes", || {
        acme.calls("list", "").len() >= passes + 3
    });
    let failing = hook.of("sweeper_failing");
    assert_eq!(failing.len(), 1, "once per streak: {failing:?}");
    let e = &failing[0];
    check_common(e, "sweeper_failing");
    assert_eq!(e["passes"], 2, "{e}");
    let f = &e["failures"][0];
    assert_eq!(
        (&f["source"], &f["name"]),
        (&"provider".into(), &"acme".into())
    );
    assert!(
        f["error"]
            .as_str()
            .unwrap()
            .contains("the acme API is down"),
        "{e}"
    );
    acme.set_list(None);
    eventually(Duration::from_secs(20), "the recovery is told", || {
        !hook.of("sweeper_recovered").is_empty()
    });
    let passes = acme.calls("list", "").len();
    eventually(Duration::from_secs(20), "two more good passes", || {
        acme.calls("list", "").len() >= passes + 2
    });
    drop(service);
    let recovered = hook.of("sweeper_recovered");
    assert_eq!(recovered.len(), 1, "{:?}", hook.events());
    check_common(&recovered[0], "sweeper_recovered");
    assert!(recovered[0]["passes"].as_u64().unwrap() >= 2);
    assert_eq!(hook.events().len(), 2, "{:?}", hook.events());
}

#[test]
fn sweeps_from_cron_tell_a_detached_sandbox_once_across_runs() {
    let (s, acme, config, sink) = detached_rig("notify-detached-cron");
    let now = sandguard::testing::timefmt::now_unix();
    let dead = dead_owner_label();
    let labels = [(SESSION, "sd2"), (OWNER, dead.as_str()), (DETACHED, "true")];
    acme.insert_created("old", &labels, now - 7200);
    for _ in 0..3 {
        let out = run(cmd(&s, &config).args(["sweep"]));
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    }
    assert_eq!(sink.of("detached_alive").len(), 1, "{:?}", sink.events());
    acme.insert_created("older", &labels, now - 9000);
    let out = run(cmd(&s, &config).args(["sweep"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let told = sink.of("detached_alive");
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!(told[1]["count"], 1, "only the new one: {}", told[1]);
    assert_eq!(told[1]["sandboxes"][0]["id"], "older");
}

/// An acme rig whose `[notify]` tells a command (the returned sink) of detached sandboxes
/// alive longer than an hour.
fn detached_rig(name: &str) -> (Scratch, Plugin, PathBuf, Sink) {
    let (s, acme, config) = acme_rig(name);
    let sink = Sink::new(&s);
    with_notify(
        &config,
        &format!("{}detached_after = \"1h\"\n", sink.command()),
    );
    (s, acme, config, sink)
}
