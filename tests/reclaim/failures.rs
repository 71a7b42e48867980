//! A removal that fails for good (`failed`) or is still failing at the reclaim
//! deadline (`unfinished`) makes `stop --all --session` and `sweep` exit 1 with
//! `"clean": false`, each result saying what happened; a provider that cannot be listed (a
//! plugin's error reply, the E2B emulator in an outage) makes `sweep` exit 1 with an entry
//! under `errors`, while the other providers are swept as usual.

use sandguard::labels::{OWNER, SESSION};

use crate::support::emu::Faults;
use crate::support::plugin::{cmd, config, kill_sidecar, pairs, result_of, session_row, Plugin};
use crate::support::*;

#[test]
fn stop_exits_1_and_is_not_clean_when_a_removal_fails_or_stays_unfinished() {
    let s = Scratch::new("p11-stop");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "2s", &[&acme]);
    for id in ["ok", "refuses", "busy"] {
        acme.insert(id, &[(SESSION, "s11")]);
    }
    acme.set_mode("refuses", Some("fatal"));
    acme.set_mode("busy", Some("busy"));

    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "s11", "--json"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], false, "{v}");
    assert_eq!(
        v["errors"].as_array().unwrap().len(),
        0,
        "every listing answered: {v}"
    );
    assert_eq!(result_of(&v, "ok")["outcome"], "removed", "{v}");
    let refused = result_of(&v, "refuses");
    assert_eq!(refused["outcome"], "failed", "{v}");
    assert!(
        refused["error"].as_str().unwrap().contains("quota says no"),
        "{v}"
    );
    let busy = result_of(&v, "busy");
    assert_eq!(busy["outcome"], "unfinished", "{v}");
    assert!(
        busy["error"].as_str().unwrap().contains("busy, try again"),
        "{v}"
    );
    assert_eq!(
        acme.calls("remove", "refuses").len(),
        1,
        "a final failure is not retried"
    );
    assert!(
        acme.calls("remove", "busy").len() > 1,
        "a transient one is retried"
    );
    assert!(!acme.exists("ok") && acme.exists("refuses") && acme.exists("busy"));

    // The text form says the same with its exit code.
    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "s11"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains("could not be removed and may still be running"),
        "{}",
        out.stdout
    );
}

#[test]
fn sweep_exits_1_and_is_not_clean_when_a_dead_owners_removals_fail() {
    let s = Scratch::new("p11-sweep");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "2s", &[&acme]);
    let mut owner = Owner::start(cmd(&s, &config), &s);
    let labels = owner.label_pairs();
    for id in ["ok", "refuses", "busy"] {
        acme.insert(id, &pairs(&labels));
    }
    acme.set_mode("refuses", Some("fatal"));
    acme.set_mode("busy", Some("busy"));
    // Nobody watches the owner any more when it dies: only a sweep can reclaim.
    kill_sidecar(&owner.session);
    owner.kill();
    assert!(acme.exists("ok"), "nothing reclaimed without a sidecar");

    let out = run(cmd(&s, &config).args(["sweep", "--json"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], false, "{v}");
    let decided = v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["session"] == owner.session.as_str() && d["verdict"] == "reclaim");
    assert!(decided, "the dead owner's session is reclaimed: {v}");
    assert_eq!(result_of(&v, "ok")["outcome"], "removed", "{v}");
    assert_eq!(result_of(&v, "refuses")["outcome"], "failed", "{v}");
    assert_eq!(result_of(&v, "busy")["outcome"], "unfinished", "{v}");
    assert!(!acme.exists("ok") && acme.exists("refuses") && acme.exists("busy"));

    let row = session_row(&mut cmd(&s, &config), &owner.session);
    assert_eq!(row["state"], "pending", "{row}");
    let mut pending: Vec<&str> = row["pending"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    pending.sort_unstable();
    assert_eq!(pending, ["busy", "refuses"], "{row}");
}

#[test]
fn sweep_exits_1_when_a_provider_cannot_be_listed() {
    const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
    let s = Scratch::new("p11-unlisted");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "2s", &[&acme]);
    let (emu, e2b_state) = e2b::start(KEY);
    let sweep = || {
        let out = run(cmd(&s, &config)
            .env("E2B_API_KEY", KEY)
            .env("E2B_API_URL", &emu.url)
            .args(["sweep", "--json"]));
        (out.code, json(&out.stdout), out.stderr)
    };
    let error_of = |v: &serde_json::Value, provider: &str| -> String {
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["provider"] == provider)
            .unwrap_or_else(|| panic!("no error entry for {provider}: {v}"))["error"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let dead = dead_owner_label();
    let orphan = [(SESSION, "gone"), (OWNER, dead.as_str())];

    // A plugin whose `list` fails; E2B answers, and its orphan is swept.
    acme.set_list(Some("down"));
    e2b_state.insert("e-orphan", &orphan);
    let (code, v, stderr) = sweep();
    assert_eq!(code, 1, "{v}{stderr}");
    assert_eq!(v["clean"], false, "{v}");
    assert!(error_of(&v, "acme").contains("the acme API is down"), "{v}");
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
    assert!(
        !e2b_state.exists("e-orphan"),
        "the provider that answered is swept: {v}"
    );

    // E2B in an outage; the plugin answers again, and its orphan is swept.
    acme.set_list(None);
    acme.insert("a-orphan", &orphan);
    e2b_state.insert("e-survivor", &orphan);
    emu.set_faults(Faults {
        outage: true,
        ..Default::default()
    });
    let (code, v, stderr) = sweep();
    assert_eq!(code, 1, "{v}{stderr}");
    assert_eq!(v["clean"], false, "{v}");
    error_of(&v, "e2b");
    assert_eq!(v["errors"].as_array().unwrap().len(), 1, "{v}");
    assert!(!acme.exists("a-orphan"), "{v}");
    assert!(
        e2b_state.exists("e-survivor"),
        "nothing is decided on a failed listing"
    );

    // Everything answers: exit 0.
    emu.set_faults(Faults::default());
    let (code, v, stderr) = sweep();
    assert_eq!(code, 0, "{v}{stderr}");
    assert_eq!(v["clean"], true, "{v}");
    assert!(!e2b_state.exists("e-survivor"));
}
