//! The store is never on the critical path and never a verdict: down, restarted empty, or
//! named wrong.

use super::*;

/// (b) Redis stopped: the sidecar still reclaims on its owner's death; a fleet sweep exits 1
/// and removes nothing.
#[test]
fn without_the_store_sidecars_still_reclaim_and_a_fleet_sweep_makes_no_verdict() {
    let _g = shared();
    let mut redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
    );
    let mut owner = a.owner(&[]);
    let mine = format!("sb-a-{}", unique());
    e2b.insert(&mine, &owner.label_refs());
    // A session of a host that died earlier, known to the store.
    let mut gone = a.owner(&[]);
    let theirs = format!("sb-gone-{}", unique());
    e2b.insert(&theirs, &gone.label_refs());
    registered(&redis, &owner.session, &[]);
    registered(&redis, &gone.session, &[]);
    gone.kill_host();
    lease_expired(&redis, &gone.session);

    redis.stop();
    owner.kill_owner();
    eventually(
        Duration::from_secs(15),
        "the sidecar reclaims locally",
        || !e2b.exists(&mine),
    );
    let out = b.sweep(&[]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(all.contains("fleet store"), "{all}");
    assert!(all.contains("no fleet verdict"), "{all}");
    assert!(!all.contains(PASSWORD), "{all}");
    assert!(
        e2b.exists(&theirs),
        "no store, no fleet verdict: nothing removed"
    );
}

/// (d) A malformed store URL is a config error naming the key (exit 2); a wrong password is a
/// failed connection (exit 1) with no verdict, and the password is never printed.
#[test]
fn a_bad_store_is_named_and_a_wrong_password_is_no_verdict() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let b = Host::new("host-b", &redis.url(), &emu.url);
    let config = b.scratch.path().join("bad.toml");
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = false\n\n[fleet]\nstore = \"localhost:6379\"\n",
    )
    .unwrap();
    let out = run(b
        .cmd()
        .env("SANDGUARD_CONFIG", &config)
        .env_remove("SANDGUARD_FLEET_STORE")
        .args(["sweep", "--fleet"]));
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("key `fleet.store`"), "{}", out.stderr);

    let out = run(b
        .cmd()
        .env_remove("SANDGUARD_FLEET_STORE")
        .args(["sweep", "--fleet"]));
    assert_eq!(out.code, 2, "--fleet without a store: {}", out.stderr);

    // A dead session in the store, which a sweep that cannot log in must not judge.
    let dead_session = format!("d{}", unique());
    let sb = format!("sb-{}", unique());
    e2b.insert(&sb, &[(SESSION, &dead_session)]);
    let wrong = "not-the-password-93f1";
    let out = run(b
        .cmd()
        .env(
            "SANDGUARD_FLEET_STORE",
            format!("redis://:{wrong}@127.0.0.1:{}", redis.port),
        )
        .args(["sweep", "--fleet", "--json"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(!all.contains(wrong), "{all}");
    assert!(all.contains("authentication failed"), "{all}");
    let v = json(&out.stdout);
    assert_eq!(v["clean"], false);
    assert!(e2b.exists(&sb));
    // The password from the environment wins over the URL's, and is never shown either.
    let out = run(b
        .cmd()
        .env(
            "SANDGUARD_FLEET_STORE",
            format!("redis://127.0.0.1:{}", redis.port),
        )
        .env("SANDGUARD_FLEET_PASSWORD", wrong)
        .args(["sweep", "--fleet"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(!format!("{}{}", out.stdout, out.stderr).contains(wrong));
}

/// Redis restarted empty: a live sidecar registers again within a renewal or two, and a
/// fleet sweep in the gap removes nothing.
#[test]
fn a_store_restarted_empty_gets_the_live_sessions_back() {
    let _g = shared();
    let mut redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
    );
    let claimed = format!("sb-claimed-{}", unique());
    e2b.insert(&claimed, &[]);
    let owner = a.owner(&[&claimed]);
    let labelled = format!("sb-a-{}", unique());
    e2b.insert(&labelled, &owner.label_refs());
    registered(&redis, &owner.session, &[&claimed]);
    let port = redis.port;
    redis.stop();
    eventually(
        Duration::from_secs(10),
        "the sidecar has let go of the stopped store",
        || !connected_to(port),
    );
    let redis = Redis::start_on(port);
    let gap = b.sweep(&["--json"]);
    assert_eq!(gap.code, 0, "{}{}", gap.stdout, gap.stderr);
    assert!(
        e2b.exists(&labelled) && e2b.exists(&claimed),
        "{}",
        gap.stdout
    );
    // Registered again, claims and all, well within the lease.
    let started = Instant::now();
    registered(&redis, &owner.session, &[&claimed]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "registered again after {:?}",
        started.elapsed()
    );
    let key = format!("sandguard:session:{}", owner.session);
    assert_eq!(redis.cli(&["HGET", &key, "host"]).trim(), "host-a");
    // Data lost without a broken connection (a FLUSHALL, a failover to an empty replica): the
    // next renewal finds no record and registers again.
    assert_eq!(redis.cli(&["FLUSHALL"]).trim(), "OK");
    let started = Instant::now();
    registered(&redis, &owner.session, &[&claimed]);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "registered again after {:?}",
        started.elapsed()
    );
    assert_eq!(redis.cli(&["HGET", &key, "host"]).trim(), "host-a");
}

/// Whether a TCP connection to 127.0.0.1:`port` is open on this machine (established, or
/// closed by the server and not yet by the client): a client that still holds its connection
/// to a store that went away has not noticed yet.
fn connected_to(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let remote_port = fields
            .get(2)
            .and_then(|a| a.split_once(':'))
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        // 01 ESTABLISHED, 08 CLOSE_WAIT.
        remote_port == Some(port) && matches!(fields.get(3), Some(&"01" | &"08"))
    })
}
