//! The E2B driver through the real binary, against the E2B emulator.

use std::process::Command;
use std::time::Duration;

use crate::support::emu::Faults;
use crate::support::*;
use sandguard::labels::SESSION;

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

fn cmd(s: &Scratch, url: &str, config: &std::path::Path) -> Command {
    let mut c = sandguard(s);
    c.env("E2B_API_KEY", KEY)
        .env("E2B_API_URL", url)
        .env("SANDGUARD_CONFIG", config);
    c
}

#[test]
fn ps_lists_labelled_sandboxes_and_a_bad_key_is_an_error_without_the_key() {
    let s = Scratch::new("e2b-ps");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    state.insert("sb-mine", &[(SESSION, "s1"), ("app", "x")]);
    state.insert("sb-plain", &[("app", "x")]);

    let out = run(cmd(&s, &emu.url, &config).args(["ps", "--provider", "e2b"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("sb-mine") && out.stdout.contains("s1"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("sb-plain"));
    let v = json(&run(cmd(&s, &emu.url, &config).args(["ps", "--json"])).stdout);
    assert_eq!(v["sandboxes"][0]["instance_id"], "sb-mine");
    assert_eq!(v["sandboxes"][0]["provider"], "e2b");

    let wrong = "e2b_ffffffffffffffffffffffffffffffff";
    let out = run(cmd(&s, &emu.url, &config)
        .env("E2B_API_KEY", wrong)
        .args(["ps", "--json"]));
    assert_eq!(out.code, 1);
    let v = json(&out.stdout);
    assert_eq!(v["errors"][0]["provider"], "e2b");
    assert!(
        v["errors"][0]["error"].as_str().unwrap().contains("401"),
        "{v}"
    );
    assert!(
        !out.stdout.contains(wrong) && !out.stderr.contains(wrong),
        "the key must never be printed"
    );
}

#[test]
fn stop_by_id_all_and_session_touch_only_their_targets() {
    let s = Scratch::new("e2b-stop");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    for (id, session) in [("a1", "sa"), ("a2", "sa"), ("b1", "sb"), ("c1", "sc")] {
        state.insert(id, &[(SESSION, session)]);
    }
    state.insert("plain", &[]);
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "a1"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!state.exists("a1"));
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "--all", "--session", "sa"]));
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(!state.exists("a2") && state.exists("b1") && state.exists("c1"));
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "--all", "--provider", "e2b"]));
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(!state.exists("b1") && !state.exists("c1"));
    assert!(state.exists("plain"), "an unlabelled sandbox survives");
}

#[test]
fn the_owners_death_reclaims_its_sandboxes_only() {
    let s = Scratch::new("e2b-kill");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    let mut owner = Owner::start(cmd(&s, &emu.url, &config), &s);
    let labels = owner.label_pairs();
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for id in ["m1", "m2", "m3"] {
        state.insert(id, &pairs);
    }
    state.insert("other", &[(SESSION, "someoneelse")]);
    state.insert("plain", &[]);
    owner.kill();
    eventually(
        Duration::from_secs(5),
        "the owner's three sandboxes are gone",
        || !state.exists("m1") && !state.exists("m2") && !state.exists("m3"),
    );
    assert!(state.exists("other") && state.exists("plain"));
}

#[test]
fn listing_walks_three_pages() {
    let s = Scratch::new("e2b-pages");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    for i in 0..250 {
        state.insert(&format!("p{i:03}"), &[(SESSION, "paged")]);
    }
    let v = json(&run(cmd(&s, &emu.url, &config).args(["ps", "--json"])).stdout);
    assert_eq!(v["sandboxes"].as_array().unwrap().len(), 250);
    let lists = emu
        .hits()
        .iter()
        .filter(|h| h.path == "/v2/sandboxes")
        .count();
    assert_eq!(lists, 3, "250 sandboxes at 100 a page is three pages");
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "--all", "--session", "paged"]));
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(state.count(), 0);
}

#[test]
fn a_429_storm_is_waited_out_to_the_second() {
    let s = Scratch::new("e2b-429");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    let config_text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("deadline = \"4s\"", "deadline = \"60s\"");
    std::fs::write(&config, config_text).unwrap();
    for i in 0..30 {
        state.insert(&format!("r{i}"), &[(SESSION, "storm")]);
    }
    emu.set_faults(Faults {
        throttle_rate: 0.5,
        retry_after_secs: 1,
        ..Default::default()
    });
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "--all", "--session", "storm"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(state.count(), 0);
    assert!(
        emu.hits().iter().any(|h| h.status == 429),
        "the storm happened"
    );
    assert_eq!(
        emu.early_hits(),
        0,
        "no request before its Retry-After elapsed"
    );
}

#[test]
fn thirty_percent_5xx_and_dropped_connections_still_remove_everything() {
    let s = Scratch::new("e2b-5xx");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    let config_text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("deadline = \"4s\"", "deadline = \"30s\"");
    std::fs::write(&config, config_text).unwrap();
    for i in 0..40 {
        state.insert(&format!("f{i}"), &[(SESSION, "flaky")]);
    }
    emu.set_faults(Faults {
        error_rate: 0.3,
        drop_rate: 0.05,
        ..Default::default()
    });
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "--all", "--session", "flaky"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(state.count(), 0);
    assert!(emu.hits().iter().any(|h| h.status == 503));
}

#[test]
fn an_outage_past_the_deadline_leaves_the_session_pending_until_a_sweep_finishes_it() {
    let s = Scratch::new("e2b-outage");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    let mut owner = Owner::start(cmd(&s, &emu.url, &config), &s);
    let labels = owner.label_pairs();
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    state.insert("o1", &pairs);
    state.insert("o2", &pairs);
    emu.set_faults(Faults {
        outage: true,
        ..Default::default()
    });
    owner.kill();
    let session = owner.session.clone();
    eventually(Duration::from_secs(20), "the session is pending", || {
        let v = json(&run(cmd(&s, &emu.url, &config).args(["sessions", "--json"])).stdout);
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["session"] == session.as_str() && x["state"] == "pending")
    });
    assert!(state.exists("o1") && state.exists("o2"));
    emu.set_faults(Faults::default());
    // The next sweep finishes the pending reclaim and closes the session.
    let out = run(cmd(&s, &emu.url, &config).args(["sweep"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains(&format!("reclaim session {session}: a reclaim is pending")),
        "{}",
        out.stdout
    );
    assert_eq!(state.count(), 0);
    let v = json(&run(cmd(&s, &emu.url, &config).args(["sessions", "--json"])).stdout);
    assert_eq!(v["sessions"][0]["state"], "reclaimed", "{v}");
}

#[test]
fn while_the_owner_lives_its_sandboxes_ttls_are_kept_beyond_the_grace() {
    let s = Scratch::new("e2b-ttl");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "[watch]\ngrace = \"10m\"\nrenew_every = \"1s\"\n");
    let owner = Owner::start(cmd(&s, &emu.url, &config), &s);
    let labels = owner.label_pairs();
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    state.insert("t1", &pairs);
    let mut detached = pairs.clone();
    detached.push(("sandguard.detached", "true"));
    state.insert("t2", &detached);
    let now = sandguard::timefmt::now_unix();
    // Renewed to grace + 2 x renew_every = 602 s from now (from the 300 s it was created with).
    eventually(
        Duration::from_secs(10),
        "the labelled sandbox's TTL is extended past the grace",
        || state.get("t1").is_some_and(|sb| sb.end_at >= now + 600),
    );
    assert!(
        state.get("t2").unwrap().end_at < now + 400,
        "a detached sandbox keeps its own TTL"
    );
    drop(owner);
}

#[test]
fn a_slow_provider_is_waited_for_not_given_up_on() {
    let s = Scratch::new("e2b-latency");
    let (emu, state) = e2b::start(KEY);
    let config = cloud_config(&s, "");
    for i in 0..20 {
        state.insert(&format!("l{i}"), &[(SESSION, "slow")]);
    }
    emu.set_faults(Faults {
        latency: Duration::from_millis(150),
        ..Default::default()
    });
    let out = run(cmd(&s, &emu.url, &config).args(["stop", "--all", "--session", "slow"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(state.count(), 0);
}
