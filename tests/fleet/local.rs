//! A machine's own sweep tells the store of the sessions it ends, so the fleet sees them ended
//! and no fleet sweep reclaims them a second time.

use super::*;

/// The sidecar dies on a machine that lives on (its owner too): the machine's own `sweep`
/// (no `--fleet`) proves the owner dead and reclaims the session, and the store then says
/// `reclaimed` and drops the session from its index, before its lease would have expired.
#[test]
fn a_local_sweep_tells_the_store_of_the_session_it_ended() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    // A lease far longer than the test: only being told can take the session out.
    let a = Host::with_lease("host-a", &redis.url(), &emu.url, "10m");
    let mut owner = a.owner(&[]);
    registered(&redis, &owner.session, &[]);
    // Labelled as its real owner on this machine, so the local pass can prove it dead.
    let labelled = format!("sb-local-{}", unique());
    let labels: Vec<(&str, &str)> = owner
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    e2b.insert(&labelled, &labels);
    owner.kill_host();

    let out = run(a.cmd().arg("sweep"));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!e2b.exists(&labelled), "{}", out.stdout);
    let key = format!("sandguard:session:{}", owner.session);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(
        redis
            .cli(&["ZSCORE", "sandguard:sessions", &owner.session])
            .trim(),
        "",
        "the session left the store's index"
    );
    let out = run(a.cmd().args(["sessions", "--fleet", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        !out.stdout.contains(&owner.session),
        "sessions --fleet lists only what is not over: {}",
        out.stdout
    );
}

/// Issue 22 point 7: proof of life beats an expired lease. The sidecar dies while its owner
/// lives, the lease expires (and, the other way there, the lease key is deleted by hand while
/// a sidecar lives): a fleet sweep on the owner's own machine leaves the session, and its
/// sandboxes, to that machine's sweep, which adopts it.
#[test]
fn a_fleet_sweep_never_reclaims_an_owner_it_sees_alive() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let a = Host::new("host-a", &redis.url(), &emu.url);
    let owner = a.owner(&[]);
    registered(&redis, &owner.session, &[]);
    let labels: Vec<(&str, &str)> = owner
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let sandbox = format!("sb-alive-{}", unique());
    e2b.insert(&sandbox, &labels);
    // The sidecar dies; the owner lives on.
    let sidecar = owner.sidecar();
    unsafe_kill(sidecar as i32, libc::SIGKILL);
    eventually(Duration::from_secs(5), "the sidecar is gone", || {
        !std::path::Path::new(&format!("/proc/{sidecar}")).exists()
    });
    lease_expired(&redis, &owner.session);

    let out = a.sweep(&["--json"]);
    let v = json(&out.stdout);
    assert!(
        e2b.exists(&sandbox),
        "a live owner's sandbox was reclaimed: {v}"
    );
    let fleet = v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["session"] == owner.session.as_str())
        .map(|d| (d["verdict"].clone(), d["reason"].clone()))
        .collect::<Vec<_>>();
    assert!(
        fleet.iter().all(|(verdict, _)| verdict != "reclaim"),
        "{fleet:?}"
    );
    assert!(
        fleet
            .iter()
            .any(|(_, reason)| reason.as_str().is_some_and(|r| r.contains("lives"))),
        "{fleet:?}"
    );
    let key = format!("sandguard:session:{}", owner.session);
    assert_ne!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
}
