//! A host dies whole: its sessions are reclaimed by a fleet sweep elsewhere, once each, also
//! when sweepers race, die half way, or meet a provider's rate limits.

use super::*;

/// (a) A host dies whole: a fleet sweep on another host reclaims its labelled and its
/// claimed-only sandboxes after the lease; a live host's session and a stranger stay.
#[test]
fn a_dead_hosts_sandboxes_are_reclaimed_by_a_sweep_elsewhere() {
    let _g = shared();
    let mut redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    // A's lease is long enough that the sweep right after its death surely falls within it,
    // on a loaded machine too.
    let (a, b, c) = (
        Host::with_lease("host-a", &redis.url(), &emu.url, "6s"),
        Host::new("host-b", &redis.url(), &emu.url),
        Host::with_lease("host-c", &redis.url(), &emu.url, "6s"),
    );
    let claimed = format!("sb-claimed-{}", unique());
    e2b.insert(&claimed, &[]);
    let mut dead = a.owner(&[&claimed]);
    let live = c.owner(&[]);
    let labelled = format!("sb-a-{}", unique());
    e2b.insert(&labelled, &dead.label_refs());
    let alive = format!("sb-c-{}", unique());
    e2b.insert(&alive, &live.label_refs());
    let stranger = format!("sb-x-{}", unique());
    e2b.insert(
        &stranger,
        &[(SESSION, "nobody"), (OWNER, "0000000000000000-1-1-1")],
    );
    registered(&redis, &dead.session, &[&claimed]);
    registered(&redis, &live.session, &[]);
    // Every machine sees the fleet: sessions with their hosts, leases and claims, and the
    // host of each sandbox in `ps`.
    let out = run(b.cmd().args(["sessions", "--fleet", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let row = |id: &str| {
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["session"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in {v}"))
    };
    let ra = row(&dead.session);
    assert_eq!(
        (&ra["host"], &ra["state"]),
        (&"host-a".into(), &"active".into())
    );
    assert!(
        ra["lease_left_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{ra}"
    );
    assert_eq!(ra["claims"][0]["id"], claimed.as_str());
    assert_eq!(row(&live.session)["host"], "host-c");
    let out = run(b.cmd().args(["ps", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let host_of = |id: &str| {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["instance_id"] == id)
            .map(|r| r["host"].clone())
    };
    assert_eq!(host_of(&labelled), Some("host-a".into()), "{v}");
    assert_eq!(host_of(&alive), Some("host-c".into()), "{v}");
    assert_eq!(host_of(&stranger), Some(serde_json::Value::Null), "{v}");

    dead.kill_host();
    // Before the lease runs out, host A is not judged dead.
    let early = b.sweep(&["--json"]);
    assert_eq!(early.code, 0, "{}{}", early.stdout, early.stderr);
    assert!(
        e2b.exists(&labelled) && e2b.exists(&claimed),
        "{}",
        early.stdout
    );

    lease_expired(&redis, &dead.session);
    let dry = b.sweep(&["--dry-run"]);
    assert_eq!(dry.code, 0, "{}{}", dry.stdout, dry.stderr);
    assert!(
        dry.stdout
            .contains(&format!("would reclaim session {}", dead.session)),
        "{}",
        dry.stdout
    );
    assert!(
        e2b.exists(&labelled) && e2b.exists(&claimed),
        "a dry run touches nothing"
    );
    let out = b.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], true, "{v}");
    assert!(!e2b.exists(&labelled), "A's labelled sandbox: reclaimed");
    assert!(!e2b.exists(&claimed), "A's claimed-only sandbox: reclaimed");
    assert!(e2b.exists(&alive), "C's live session: untouched");
    assert!(e2b.exists(&stranger), "a stranger: untouched");
    let key = format!("sandguard:session:{}", dead.session);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(redis.cli(&["HGET", &key, "reclaimed_by"]).trim(), "host-b");
    assert_eq!(redis.cli(&["HGET", &key, "host"]).trim(), "host-a");
    let v = json(&run(b.cmd().args(["sessions", "--fleet", "--json"])).stdout);
    let ids: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["session"].as_str())
        .collect();
    assert_eq!(
        ids,
        [live.session.as_str()],
        "a final session leaves the index"
    );
    drop(live);
    redis.stop();
}

/// (a) with Docker: host A's owner runs a labelled container and claims an unlabelled one it
/// started; the host dies whole; a fleet sweep on host B (same daemon, another state
/// directory and host id) reclaims both after the lease, and leaves an unlabelled container
/// nobody claimed. The labelled container names an owner on another machine, so only the
/// fleet can judge it.
#[test]
fn a_dead_hosts_docker_containers_are_reclaimed_by_a_sweep_elsewhere() {
    let _g = shared();
    require_docker();
    let mut res = Resources::default();
    let redis = Redis::start();
    let (emu, _e2b) = sandguard_e2b();
    let docker_hosts = |id: &'static str| {
        let h = Host::new(id, &redis.url(), &emu.url);
        let config = format!(
            "[reclaim]\ndeadline = \"10s\"\nsettle = \"0\"\n[fleet]\nlease = \"{LEASE}\"\n"
        );
        std::fs::write(&h.config, config).unwrap();
        h
    };
    let (a, b) = (docker_hosts("host-a"), docker_hosts("host-b"));
    let ids = a.scratch.path().join(format!("ids-{}", unique()));
    let bin = env!("CARGO_BIN_EXE_sandguard");
    let first = format!(
        "set -e; \
         docker run -d --network none --label {SESSION}=\"$SANDGUARD_SESSION\" --label {OWNER}={ELSEWHERE} {IMAGE} sleep 600 > {ids}.tmp; \
         c=$(docker run -d --network none {IMAGE} sleep 600); echo \"$c\" >> {ids}.tmp; \
         {bin} claim docker \"$c\"; mv {ids}.tmp {ids}; set +e; ",
        ids = ids.display()
    );
    let mut dead = a.owner_running(&first);
    let text = std::fs::read_to_string(&ids).expect("the owner started its containers");
    let made: Vec<String> = text.lines().map(str::to_string).collect();
    for c in &made {
        res.adopt_container(c);
    }
    let (labelled, claimed) = (made[0].clone(), made[1].clone());
    let stranger = res.container(&[]);
    eventually(
        Duration::from_secs(10),
        "the claim is mirrored in the store",
        || {
            redis
                .cli(&["SMEMBERS", &format!("sandguard:claims:{}", dead.session)])
                .lines()
                .any(|m| m.starts_with("docker:") && claimed.starts_with(&m["docker:".len()..]))
        },
    );
    dead.kill_host();
    assert!(container_exists(&labelled) && container_exists(&claimed));
    lease_expired(&redis, &dead.session);
    let out = b.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        !container_exists(&labelled),
        "A's labelled container: reclaimed"
    );
    assert!(
        !container_exists(&claimed),
        "A's claimed-only container: reclaimed"
    );
    assert!(
        container_exists(&stranger),
        "an unlabelled container: untouched"
    );
    let key = format!("sandguard:session:{}", dead.session);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(redis.cli(&["HGET", &key, "reclaimed_by"]).trim(), "host-b");
}

/// (c) Two fleet sweeps at once: each dead session is reclaimed exactly once.
#[test]
fn two_fleet_sweeps_at_once_reclaim_each_dead_session_once() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let a = Host::new("host-a", &redis.url(), &emu.url);
    let sweepers = [
        Host::new("host-b", &redis.url(), &emu.url),
        Host::new("host-d", &redis.url(), &emu.url),
    ];
    let mut owners: Vec<FleetOwner> = (0..3).map(|_| a.owner(&[])).collect();
    let mut boxes = Vec::new();
    for o in &owners {
        for _ in 0..3 {
            let id = format!("sb-{}", unique());
            e2b.insert(&id, &o.label_refs());
            boxes.push(id);
        }
        registered(&redis, &o.session, &[]);
    }
    for o in &mut owners {
        o.kill_host();
    }
    for o in &owners {
        lease_expired(&redis, &o.session);
    }
    let children: Vec<Child> = sweepers
        .iter()
        .map(|h| {
            h.cmd()
                .args(["sweep", "--fleet", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(boxes.iter().all(|b| !e2b.exists(b)), "everything reclaimed");
    for o in &owners {
        let key = format!("sandguard:session:{}", o.session);
        assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
        assert_eq!(
            redis.cli(&["HGET", &key, "reclaims"]).trim(),
            "1",
            "session {} reclaimed once",
            o.session
        );
    }
}

/// A sweeper SIGKILLed in the middle of a reclaim leaves the session `reclaiming` and its
/// lock to expire: the next sweep, on another host, finishes it.
#[test]
fn a_sweeper_killed_mid_reclaim_is_finished_by_the_next() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let (a, b, d) = (
        Host::new("host-a", &redis.url(), &emu.url),
        Host::new("host-b", &redis.url(), &emu.url),
        Host::new("host-d", &redis.url(), &emu.url),
    );
    let mut dead = a.owner(&[]);
    let sb = format!("sb-a-{}", unique());
    e2b.insert(&sb, &dead.label_refs());
    registered(&redis, &dead.session, &[]);
    dead.kill_host();
    lease_expired(&redis, &dead.session);
    // E2B down: the first sweeper retries until its deadline; it is killed before.
    emu.set_faults(crate::support::emu::Faults {
        outage: true,
        ..Default::default()
    });
    let mut sweeper = b
        .cmd()
        .args(["sweep", "--fleet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let key = format!("sandguard:session:{}", dead.session);
    eventually(
        Duration::from_secs(10),
        "the first sweeper reclaims",
        || redis.cli(&["HGET", &key, "state"]).trim() == "reclaiming",
    );
    let _ = sweeper.kill();
    let _ = sweeper.wait();
    emu.set_faults(crate::support::emu::Faults::default());
    assert!(e2b.exists(&sb));
    // Its lock outlives it by at most the lease; then the next sweep finishes the session.
    eventually(
        Duration::from_secs(10),
        "the dead sweeper's lock expires",
        || {
            redis
                .cli(&["EXISTS", &format!("sandguard:lock:{}", dead.session)])
                .trim()
                == "0"
        },
    );
    let out = d.sweep(&["--json"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!e2b.exists(&sb), "{}", out.stdout);
    assert_eq!(redis.cli(&["HGET", &key, "state"]).trim(), "reclaimed");
    assert_eq!(redis.cli(&["HGET", &key, "reclaims"]).trim(), "2");
    assert_eq!(redis.cli(&["HGET", &key, "reclaimed_by"]).trim(), "host-d");
}

/// A fleet sweep reclaims many dead sessions at once, but every session's calls to a provider
/// go through one pace for the whole pass: a 429's Retry-After holds back the calls of every
/// session, not only of the one that got it. (With a pace per session, the other sessions'
/// deletes and listings reached the throttled route within its Retry-After.)
#[test]
fn a_fleet_sweep_of_many_sessions_waits_out_every_retry_after() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let b = Host::new("host-b", &redis.url(), &emu.url);
    // Four sessions at a time, so that sessions start while others wait out a pause; time
    // enough for every session's removal to wait out the pauses of all the others.
    let config = std::fs::read_to_string(&b.config)
        .unwrap()
        .replace("deadline = \"4s\"", "deadline = \"60s\"\nconcurrency = 4");
    std::fs::write(&b.config, config).unwrap();
    let boxes = dead_sessions(&redis, &e2b, 24);
    emu.set_faults(crate::support::emu::Faults {
        throttle_rate: 0.15,
        retry_after_secs: 1,
        ..Default::default()
    });
    let out = b.sweep(&["--json"]);
    emu.set_faults(crate::support::emu::Faults::default());
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(boxes.iter().all(|sb| !e2b.exists(sb)), "{}", out.stdout);
    let hits = emu.hits();
    let throttled = hits.iter().filter(|h| h.status == 429).count();
    assert!(throttled > 0, "the faults throttled nothing: {hits:?}");
    let early: Vec<_> = hits.iter().filter(|h| h.early).collect();
    assert!(
        early.is_empty(),
        "{} of {} requests before their Retry-After: {early:?}",
        early.len(),
        hits.len()
    );
}
