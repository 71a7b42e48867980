//! Spend in the fleet store, through the real binary: two hosts (two state directories, two
//! host ids, one Redis) each guard a program that holds E2B sandboxes (the emulator), and one
//! `report --fleet` on either host covers both, with each host's local figures; `sessions
//! --fleet` shows each session's spend while it runs; a fleet sweep that reclaims a dead
//! host's session closes its figures; and `--fleet` without a store is refused.

use super::*;

fn report(host: &Host, args: &[&str]) -> serde_json::Value {
    let out = run(host.cmd().arg("report").args(args).arg("--json"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out.stdout)
}

fn seconds(v: &serde_json::Value) -> f64 {
    v["seconds"]
        .as_f64()
        .unwrap_or_else(|| panic!("seconds in {v}"))
}

/// `sessions --fleet --json`'s row of `session`, if listed.
fn fleet_row(host: &Host, session: &str) -> Option<serde_json::Value> {
    let out = run(host.cmd().args(["sessions", "--fleet", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out.stdout)["sessions"]
        .as_array()?
        .iter()
        .find(|r| r["session"] == session)
        .cloned()
}

/// Until host `host`'s own ledger says `session` is `state`.
fn local_state(host: &Host, session: &str, state: &str) {
    eventually(Duration::from_secs(20), "the session ends", || {
        let out = run(host.cmd().args(["sessions", "--json"]));
        json(&out.stdout)["sessions"].as_array().is_some_and(|v| {
            v.iter()
                .any(|r| r["session"] == session && r["state"] == state)
        })
    });
}

#[test]
fn one_fleet_report_covers_every_host_as_their_own_reports_count_them() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
    );
    let sandboxes: Vec<String> = (0..3)
        .map(|i| format!("sb-spend{i}-{}", unique()))
        .collect();
    sandboxes.iter().for_each(|id| e2b.insert(id, &[]));
    let mut on_a = a.owner(&[&sandboxes[0], &sandboxes[1]]);
    let mut on_b = b.owner(&[&sandboxes[2]]);
    registered(&redis, &on_a.session, &[&sandboxes[0], &sandboxes[1]]);
    registered(&redis, &on_b.session, &[&sandboxes[2]]);

    // While they run, every host sees each session's sandboxes alive in the store, their
    // time growing, with the host's own words in SPEND.
    eventually(Duration::from_secs(10), "alive spend in the store", || {
        let (row_a, row_b) = (fleet_row(&b, &on_a.session), fleet_row(&a, &on_b.session));
        row_a.is_some_and(|r| r["spend"]["alive"] == 2 && seconds(&r["spend"]) >= 1.0)
            && row_b.is_some_and(|r| r["spend"]["by_provider"]["e2b"]["sandboxes"] == 1)
    });
    let table = run(a.cmd().args(["sessions", "--fleet"]));
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(table.stdout.contains("SPEND"), "{}", table.stdout);
    assert!(table.stdout.contains("(2 alive)"), "{}", table.stdout);
    let alive = report(&b, &["--fleet"]);
    assert_eq!(alive["total"]["alive"], 3, "{alive}");

    // Both owners die; their sidecars remove the sandboxes and write their last figures.
    on_a.kill_owner();
    on_b.kill_owner();
    local_state(&a, &on_a.session, "reclaimed");
    local_state(&b, &on_b.session, "reclaimed");
    assert!(sandboxes.iter().all(|id| !e2b.exists(id)));

    let (local_a, local_b) = (report(&a, &[]), report(&b, &[]));
    for (host, local) in [("host-a", &local_a), ("host-b", &local_b)] {
        assert_eq!(local["total"]["alive"], 0, "{host}: {local}");
        assert!(seconds(&local["total"]) > 0.0, "{host}: {local}");
    }
    let sum = seconds(&local_a["total"]) + seconds(&local_b["total"]);
    for on in [&a, &b] {
        let fleet = report(on, &["--fleet", "--by", "session"]);
        assert_eq!(fleet["by"], "session");
        assert_eq!(
            (&fleet["sessions"], &fleet["hosts"]),
            (&2.into(), &2.into()),
            "{fleet}"
        );
        let total = &fleet["total"];
        assert!(
            (seconds(total) - sum).abs() <= 3.0,
            "the fleet counts {} s, the hosts {sum} s: {fleet}",
            seconds(total)
        );
        assert_eq!(
            (&total["sandboxes"], &total["alive"]),
            (&3.into(), &0.into())
        );
        let keys: Vec<&str> = fleet["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["key"].as_str())
            .collect();
        assert!(
            keys.contains(&on_a.session.as_str()) && keys.contains(&on_b.session.as_str()),
            "{fleet}"
        );
    }
    // By host: each host's row is that host's own report.
    let by_host = report(&a, &["--fleet", "--by", "host"]);
    for (host, local, n) in [("host-a", &local_a, 2.0), ("host-b", &local_b, 1.0)] {
        let row = by_host["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == host)
            .unwrap_or_else(|| panic!("{host} in {by_host}"));
        assert!(
            (seconds(row) - seconds(&local["total"])).abs() <= n,
            "{host}: {row} against {local}"
        );
        assert_eq!(row["sandboxes"], local["total"]["sandboxes"], "{host}");
    }
    let by_day = report(&b, &["--fleet", "--by", "day", "--since", "1h"]);
    assert!(
        by_day["since"]
            .as_str()
            .is_some_and(|s| s.ends_with("T00:00:00Z")),
        "{by_day}"
    );
    assert_eq!(by_day["total"]["sandboxes"], 3, "{by_day}");
    let table = run(b.cmd().args(["report", "--fleet", "--by", "host"]));
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(
        table
            .stdout
            .starts_with("Sandbox time in the fleet store, by host:\nHOST"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("\nhost-a ") && table.stdout.contains("\nhost-b "));
    assert!(
        table.stdout.contains("From the fleet store: 2 host(s)"),
        "{}",
        table.stdout
    );
    assert!(!table.stdout.contains(PASSWORD) && !table.stderr.contains(PASSWORD));
}

/// A host dies whole holding a sandbox: a fleet sweep elsewhere reclaims it and closes the
/// session's figures: nothing of it is alive any more, and its time is what its sidecar last
/// wrote, never more than the sandbox lived.
#[test]
fn a_fleet_sweep_closes_the_figures_of_a_dead_hosts_session() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
    );
    let sandbox = format!("sb-dead-{}", unique());
    e2b.insert(&sandbox, &[]);
    let claimed_at = std::time::Instant::now();
    let mut dead = a.owner(&[&sandbox]);
    registered(&redis, &dead.session, &[&sandbox]);
    eventually(Duration::from_secs(10), "alive spend in the store", || {
        fleet_row(&b, &dead.session)
            .is_some_and(|r| r["spend"]["alive"] == 1 && seconds(&r["spend"]) >= 1.0)
    });
    dead.kill_host();
    lease_expired(&redis, &dead.session);
    let out = b.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!e2b.exists(&sandbox), "{}", out.stdout);
    let lived = claimed_at.elapsed().as_secs_f64();

    let fleet = report(&b, &["--fleet", "--by", "host"]);
    let total = &fleet["total"];
    assert_eq!(
        (&total["sandboxes"], &total["alive"]),
        (&1.into(), &0.into()),
        "{fleet}"
    );
    assert_eq!(total["alive_seconds"], 0.0, "{fleet}");
    assert!(
        seconds(total) >= 1.0 && seconds(total) <= lived,
        "{} s counted, the sandbox lived {lived:.3} s: {fleet}",
        seconds(total)
    );
    assert_eq!(fleet["rows"][0]["key"], "host-a", "{fleet}");
}

/// `--fleet` needs a store; `--by host` needs `--fleet`; a store that cannot be read fails
/// the report (exit 1) without showing its password.
#[test]
fn report_fleet_refuses_without_a_store_and_fails_on_one_it_cannot_read() {
    let s = Scratch::new("fleet-report-bad");
    let out = run(sandguard(&s).args(["report", "--fleet"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--fleet needs a fleet store"),
        "{}",
        out.stderr
    );
    let out = run(sandguard(&s).args(["report", "--by", "host"]));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("--by host needs --fleet"),
        "{}",
        out.stderr
    );

    let mut redis = Redis::start();
    let url = redis.url();
    redis.stop();
    let out = run(sandguard(&s)
        .env("SANDGUARD_FLEET_STORE", &url)
        .args(["report", "--fleet", "--json"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("fleet store"), "{}", out.stderr);
    assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
}
