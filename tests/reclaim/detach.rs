//! Detach, end to end on the real daemon. A guarded script starts three containers
//! of its session and detaches two with `sandguard detach` (one by the 12-character prefix
//! `docker ps` shows, one carrying a `sandguard.expires` already past). The owner is
//! SIGKILLed: the sidecar reclaims only the third. Then real sweeps: the detached container
//! without an expiry survives every one of them; the expired one goes (its TTL still applies).
//!
//! The container kept carries the session label only, not the owner's: a sweep of another
//! ledger on the same daemon (another test process) knows nothing of this session's detach and
//! would judge an owner label it found dead; without one it leaves the container (TTL only).
//! This ledger's sweeps judge it by its session, whose owner is dead: only the detach keeps it.

use std::time::Duration;

use sandguard::labels::{EXPIRES, SESSION};

use crate::support::plugin::session_row;
use crate::support::*;
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};

/// The sweep's decision about one container, as `(verdict, reason)`.
fn decision(v: &serde_json::Value, id: &str) -> Option<(String, String)> {
    v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["instance_id"] == id)
        .map(|d| {
            let text = |k: &str| d[k].as_str().unwrap_or_default().to_string();
            (text("verdict"), text("reason"))
        })
}

#[test]
fn a_detached_container_survives_its_owners_sigkill_and_every_sweep_until_its_ttl() {
    require_docker();
    // Real sweeps of the shared daemon: no other test of this process runs meanwhile; only
    // this test's own containers are asserted on.
    let _g = exclusive();
    let s = Scratch::new("p12-detach");
    let ids = s.path().join("ids");
    let past = sandguard::testing::timefmt::now_unix() - 60;
    let script = format!(
        r#"set -e
L=$(echo "$SANDGUARD_LABELS" | sed 's/^/--label /; s/,/ --label /g')
plain=$(docker run -d --network none $L {IMAGE} sleep 3600)
kept=$(docker run -d --network none --label {SESSION}="$SANDGUARD_SESSION" {IMAGE} sleep 3600)
expired=$(docker run -d --network none $L --label {EXPIRES}={past} {IMAGE} sleep 3600)
sandguard detach docker "$(echo "$kept" | cut -c1-12)"
sandguard detach docker "$expired"
printf '%s\n' "$plain" "$kept" "$expired" "$SANDGUARD_SESSION" > {ids}.tmp
mv {ids}.tmp {ids}
exec sleep 3600
"#,
        ids = ids.display()
    );
    // Without the Docker proxy: through it every container would carry the owner's label too,
    // and this test's premise is a container that carries the session's label only.
    let mut owner = guarded_with(&s, &["--no-docker-proxy"], &script);
    let got = wait_for_file(&ids, &mut owner);
    let [plain, kept, expired, session] = <[String; 4]>::try_from(got).unwrap();
    let mut r = Resources::default();
    for c in [&plain, &kept, &expired] {
        r.adopt_container(c);
    }

    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    eventually(Duration::from_secs(15), "the session ends", || {
        session_row(&mut sandguard(&s), &session)["state"] == "reclaimed"
    });
    // What the sidecar removed is in the journal (another process's sweep may remove the
    // expired one, or the plain one, from the daemon too: that is their TTL and their owner).
    let journal = std::fs::read_to_string(
        s.path()
            .join("state/sandguard/sessions")
            .join(format!("{session}.journal")),
    )
    .unwrap();
    let removed = |id: &str| {
        journal.contains(&format!(
            "\"ev\":\"removed\",\"provider\":\"docker\",\"id\":\"{id}\""
        ))
    };
    assert!(
        removed(&plain),
        "the sidecar reclaims the undetached one: {journal}"
    );
    assert!(!container_exists(&plain));
    assert!(
        !removed(&kept) && !removed(&expired),
        "the sidecar leaves the detached ones: {journal}"
    );
    assert!(container_exists(&kept), "detached: the sidecar leaves it");

    let sweep = || json(&run(sandguard(&s).args(["sweep", "--json"])).stdout);
    let v = sweep();
    let (verdict, reason) = decision(&v, &kept).unwrap_or_else(|| panic!("{v}"));
    assert_eq!(verdict, "leave", "{v}");
    assert!(reason.contains("detached by its owner"), "{reason}");
    if let Some((verdict, reason)) = decision(&v, &expired) {
        assert_eq!(verdict, "reclaim", "{v}");
        assert!(reason.contains("sandguard.expires has passed"), "{reason}");
    }
    assert!(!container_exists(&expired), "its TTL ended it: {v}");
    assert!(container_exists(&kept), "{v}");

    // Another sweep, same verdict: only a TTL would end it.
    let v = sweep();
    assert_eq!(
        decision(&v, &kept).map(|d| d.0).as_deref(),
        Some("leave"),
        "{v}"
    );
    assert!(container_exists(&kept));
}

/// A guarded script that claims two E2B sandboxes it did not create and sleeps: `kept`, whose
/// metadata carries `sandguard.detached=true` and no session, and `plain`, with none.
struct TwoClaims {
    emu: crate::support::emu::Emulator,
    e2b: std::sync::Arc<crate::support::e2b::State>,
    s: Scratch,
    kept: String,
    plain: String,
    owner: crate::watch::wrapper::Job,
    session: String,
}

fn two_claims(name: &str, config: &str) -> TwoClaims {
    const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";
    let (emu, e2b) = crate::support::e2b::start(KEY);
    let s = Scratch::new(name);
    let config = cloud_config(&s, config);
    let u = unique();
    let (kept, plain) = (format!("sbkept{u}"), format!("sbplain{u}"));
    e2b.insert(&kept, &[(sandguard::labels::DETACHED, "true")]);
    e2b.insert(&plain, &[]);
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\nsandguard claim e2b {kept}\nsandguard claim e2b {plain}\necho \"$SANDGUARD_SESSION\" > {ids}.tmp\nmv {ids}.tmp {ids}\nexec sleep 3600\n",
        ids = ids.display()
    );
    let env = [
        ("SANDGUARD_CONFIG", config.to_str().unwrap()),
        ("E2B_API_KEY", KEY),
        ("E2B_API_URL", emu.url.as_str()),
    ];
    let mut owner = crate::watch::wrapper::guarded_env(&s, &env, &[], &script);
    let session = wait_for_file(&ids, &mut owner)[0].clone();
    TwoClaims {
        emu,
        e2b,
        s,
        kept,
        plain,
        owner,
        session,
    }
}

/// A claimed E2B sandbox whose metadata carries `sandguard.detached=true` and no session
/// survives its owner's SIGKILL. The E2B driver cannot look up one sandbox, and a listing by
/// session label never finds one without a session label, so the reclaim judged the claim
/// without its metadata and removed it; now such claims are read from one whole listing.
#[test]
fn a_claimed_e2b_sandbox_labelled_detached_alone_survives_its_owner() {
    let _g = shared();
    let mut t = two_claims("p12-e2b-detached", "");
    unsafe_kill(t.owner.id() as i32, libc::SIGKILL);
    let _ = t.owner.wait();
    eventually(Duration::from_secs(15), "the session ends", || {
        session_row(&mut sandguard(&t.s), &t.session)["state"] == "reclaimed"
    });
    assert!(!t.e2b.exists(&t.plain), "the plain claim was not reclaimed");
    assert!(
        t.e2b.exists(&t.kept),
        "a claimed sandbox whose metadata says detached was removed"
    );
}

/// The TTL keeper reads a claim as the reclaim does: a claimed E2B sandbox whose metadata
/// carries `sandguard.detached=true` and no session is never renewed (its own timeout is what
/// should end it), while a plain claimed one is. The keeper renewed both: a listing by session
/// label never finds the detached one, and the claim was renewed as a sandbox without labels.
#[test]
fn a_claimed_e2b_sandbox_labelled_detached_alone_is_never_renewed() {
    let _g = shared();
    let mut t = two_claims("p12-e2b-renew", "\n[watch]\nrenew_every = \"1s\"\n");
    let renewals = |id: &str| {
        let path = format!("/sandboxes/{id}/timeout");
        t.emu
            .hits()
            .iter()
            .filter(|h| h.method == "POST" && h.path == path)
            .count()
    };
    eventually(
        Duration::from_secs(15),
        "the plain claim is renewed twice",
        || renewals(&t.plain) >= 2,
    );
    assert_eq!(
        renewals(&t.kept),
        0,
        "a claimed sandbox whose metadata says detached was renewed"
    );
    unsafe_kill(t.owner.id() as i32, libc::SIGKILL);
    let _ = t.owner.wait();
}
