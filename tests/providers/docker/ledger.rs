//! The ledger names a Docker network or volume as its claim does (`network/ID`,
//! `volume/NAME`): a removal clears the claim, and a pending network is read back by the next
//! sweep as a network, never as a bare id a sweep would look up as a container.

use std::process::Command;
use std::time::Duration;

use super::docker_ok;
use crate::support::*;
use crate::watch::wrapper::{guarded, unsafe_kill, wait_for_file};

/// The session's `claims` and `pending` ids, as `sessions --json` shows them.
fn ledger(s: &Scratch) -> (String, Vec<String>, Vec<String>) {
    let v = json(&run(sandguard(s).args(["sessions", "--json"])).stdout);
    let session = &v["sessions"][0];
    let ids = |key: &str| -> Vec<String> {
        let mut ids: Vec<String> = session[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} in {v}"))
            .iter()
            .map(|c| c["id"].as_str().unwrap_or_default().to_string())
            .collect();
        ids.sort();
        ids
    };
    let state = session["state"].as_str().unwrap_or_default().to_string();
    (state, ids("claims"), ids("pending"))
}

#[test]
fn claimed_networks_and_volumes_are_cleared_and_a_pending_network_is_swept_as_one() {
    require_docker();
    // Exclusive: its sweep covers all of Docker, so it would reclaim another test's sandboxes
    // whose owner is dead and whose detach is only in that test's ledger (seen under load:
    // cli_edges' detached container gone).
    let _g = exclusive();
    let s = Scratch::new("td-ledger");
    let config = s.path().join("config/sandguard");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[reclaim]\ndeadline = \"2s\"\nretry_initial = \"100ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n",
    )
    .unwrap();
    let u = unique();
    let (held, free, vol) = (
        format!("sg-it-held-{u}"),
        format!("sg-it-free-{u}"),
        format!("sg-it-vol-{u}"),
    );
    let mut cleanup = Resources::default();
    let ids = s.path().join("ids");
    // No labels anywhere: only the claims make these the session's.
    let script = format!(
        r#"set -e
h=$(docker network create --internal {held})
f=$(docker network create --internal {free})
docker volume create {vol} >/dev/null
sandguard claim docker "network/$h"
sandguard claim docker "network/$f"
sandguard claim docker "volume/{vol}"
printf "%s\n%s\n" "$h" "$f" > {ids}.tmp && mv {ids}.tmp {ids}
exec sleep 3600
"#,
        ids = ids.display()
    );
    let mut job = guarded(&s, &script);
    let got = wait_for_file(&ids, &mut job);
    let (held_id, free_id) = (got[0].clone(), got[1].clone());
    // A stranger holds one network: its removal fails until the stranger leaves.
    let stranger = cleanup.container_with(&[], &["--network", &held_id]);
    unsafe_kill(job.id() as i32, libc::SIGKILL);
    let _ = job.wait();

    eventually(Duration::from_secs(15), "the session goes pending", || {
        ledger(&s).0 == "pending"
    });
    assert!(!network_exists(&free_id) && !volume_exists(&vol));
    assert!(network_exists(&held_id) && container_exists(&stranger));
    let (_, claims, pending) = ledger(&s);
    let held_claim = format!("network/{held_id}");
    assert_eq!(
        claims,
        vec![held_claim.clone()],
        "the removed network and volume still count as claimed"
    );
    assert_eq!(
        pending,
        vec![held_claim],
        "the pending network is named as a network"
    );

    docker_ok(&["network", "disconnect", &held_id, &stranger]);
    let out = run(sandguard(&s).arg("sweep"));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        !network_exists(&held_id),
        "the sweep left the pending network:\n{}",
        out.stdout
    );
    assert!(container_exists(&stranger), "the stranger was removed");
    assert_eq!(ledger(&s), ("reclaimed".into(), vec![], vec![]));
    let _ = Command::new("docker")
        .args(["network", "rm", &held_id])
        .output();
}
