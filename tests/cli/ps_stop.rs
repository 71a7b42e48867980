//! `ps`, `stop` and `providers` against the real Docker daemon, through the real binary.

use crate::support::*;
use sandguard::labels::{OWNER, SESSION};

#[test]
fn ps_lists_managed_containers_in_every_state_and_only_those() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("ps");
    let session = format!("ps{}", unique());
    let mut r = Resources::default();
    let (alive, dead) = (live_owner_label(), dead_owner_label());
    let running = r.container(&[(SESSION, &session), (OWNER, &alive)]);
    let created = r.created_container(&[(SESSION, &session), (OWNER, &dead)]);
    let stranger = r.container(&[("sandguard.sessionx", &session)]);

    let out = run(sandguard(&s).arg("ps"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let header = out.stdout.lines().next().unwrap();
    for col in [
        "INSTANCE ID",
        "PROVIDER",
        "STATUS",
        "UPTIME",
        "IMAGE",
        "SESSION",
        "OWNER",
    ] {
        assert!(header.contains(col), "missing column {col}: {header}");
    }
    let line = |id: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(&id[..12]))
            .map(str::to_string)
    };
    let running_line = line(&running).expect("running container listed");
    assert!(
        running_line.contains("running")
            && running_line.contains(&session)
            && running_line.contains("alive"),
        "{running_line}"
    );
    let created_line = line(&created).expect("created container listed");
    assert!(
        created_line.contains("created") && created_line.contains("dead"),
        "{created_line}"
    );
    assert!(
        line(&stranger).is_none(),
        "an unlabelled container must not be listed"
    );
    // The created container is counted as created, not as running.
    let last = out.stdout.lines().last().unwrap();
    assert!(
        last.ends_with(". Stop with: sandguard stop <instance-id>")
            && last.contains(" running, ")
            && last.contains(" created"),
        "{last}"
    );
}

/// The last line of `ps` as state → count (`3 running, 2 exited.` before "Stop with").
fn counted(last: &str) -> std::collections::BTreeMap<String, usize> {
    let figures = last
        .split_once(". Stop with:")
        .unwrap_or_else(|| panic!("no count line: {last}"))
        .0;
    figures
        .split(", ")
        .map(|part| {
            let (n, state) = part.split_once(' ').unwrap();
            (state.to_string(), n.parse().unwrap())
        })
        .collect()
}

#[test]
fn ps_counts_running_apart_from_exited_and_created() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("pscount");
    let session = format!("pc{}", unique());
    let mut r = Resources::default();
    let running = r.container(&[(SESSION, &session)]);
    let created = r.created_container(&[(SESSION, &session)]);
    let exited = r.container(&[(SESSION, &session)]);
    let killed = std::process::Command::new("docker")
        .args(["kill", &exited])
        .output()
        .unwrap();
    assert!(killed.status.success());
    eventually(
        std::time::Duration::from_secs(10),
        "the container exits",
        || {
            let out = std::process::Command::new("docker")
                .args(["inspect", "-f", "{{.State.Status}}", &exited])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim() == "exited"
        },
    );

    let out = run(sandguard(&s).args(["ps", "--provider", "docker"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let row = |id: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(&id[..12]))
            .unwrap_or_else(|| panic!("{id} listed: {}", out.stdout))
            .split_whitespace()
            .nth(2)
            .unwrap()
            .to_string()
    };
    assert_eq!(row(&running), "running");
    assert_eq!(row(&created), "created");
    assert_eq!(row(&exited), "exited");
    // Other tests may have containers of their own on the daemon: the line must count the
    // rows printed above it, state by state, whatever they are.
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    for line in &lines[1..lines.len() - 1] {
        *tally
            .entry(line.split_whitespace().nth(2).unwrap().to_string())
            .or_default() += 1;
    }
    let last = lines.last().unwrap();
    assert_eq!(counted(last), tally, "{}", out.stdout);
    assert!(
        last.starts_with(&format!("{} running, ", tally["running"])),
        "{last}"
    );

    let out = run(sandguard(&s).args(["ps", "--provider", "docker", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let mut tally = serde_json::Map::new();
    for sb in v["sandboxes"].as_array().unwrap() {
        let state = sb["status"].as_str().unwrap().to_string();
        let n = tally
            .get(&state)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        tally.insert(state, (n + 1).into());
    }
    assert!(tally["exited"].as_u64().unwrap() >= 1 && tally["created"].as_u64().unwrap() >= 1);
    assert_eq!(
        v["counts"],
        serde_json::Value::Object(tally),
        "{}",
        out.stdout
    );
}

#[test]
fn ps_json_is_stable() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("psjson");
    let session = format!("pj{}", unique());
    let mut r = Resources::default();
    let id = r.container(&[
        (SESSION, &session),
        (OWNER, &live_owner_label()),
        ("app", "x"),
    ]);
    let out = run(sandguard(&s).args(["ps", "--json", "--provider", "docker"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let sb = v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["instance_id"] == id.as_str())
        .expect("listed")
        .clone();
    assert_eq!(sb["provider"], "docker");
    assert_eq!(sb["status"], "running");
    // Docker 20.10 reports the image as created ("…:latest"), newer daemons may drop the tag.
    assert!(
        sb["image"]
            .as_str()
            .unwrap()
            .starts_with(IMAGE.trim_end_matches(":latest")),
        "{sb}"
    );
    assert_eq!(sb["session"], session.as_str());
    assert_eq!(sb["owner_alive"], true);
    assert_eq!(sb["labels"]["app"], "x");
    assert!(sb["created_at"].as_str().unwrap().ends_with('Z'));
    assert!(sb["owner"].is_string());
}

#[test]
fn an_unreachable_daemon_is_an_error_never_an_empty_list() {
    let s = Scratch::new("down");
    let out = run(sandguard(&s)
        .env("DOCKER_HOST", "tcp://127.0.0.1:1")
        .arg("ps"));
    assert_eq!(out.code, 1);
    assert!(
        !out.stdout.contains("No running sandboxes.\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .last()
            .unwrap()
            .starts_with("error: could not query docker"),
        "{}",
        out.stdout
    );

    let out = run(sandguard(&s)
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .args(["ps", "--json"]));
    assert_eq!(out.code, 1);
    let v = json(&out.stdout);
    assert_eq!(v["errors"][0]["provider"], "docker");
    assert!(v["errors"][0]["error"]
        .as_str()
        .unwrap()
        .contains("/nonexistent.sock"));

    let out = run(sandguard(&s)
        .env("DOCKER_HOST", "tcp://127.0.0.1:1")
        .args(["stop", "--all"]));
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("may still be running"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("Nothing to stop.\n"), "{}", out.stdout);

    let out = run(sandguard(&s)
        .env("DOCKER_HOST", "tcp://127.0.0.1:1")
        .arg("providers"));
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("unreachable"), "{}", out.stdout);
}

#[test]
fn an_unknown_provider_exits_1_naming_the_known_ones() {
    let s = Scratch::new("unknown");
    for args in [
        &["ps", "--provider", "nope"][..],
        &["stop", "--all", "--provider", "nope"][..],
    ] {
        let out = run(sandguard(&s).args(args));
        assert_eq!(out.code, 1, "{args:?}");
        assert!(
            out.stderr.contains("unknown provider \"nope\"") && out.stderr.contains("docker"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn tcp_docker_host_reaches_the_daemon() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tcp");
    let session = format!("tcp{}", unique());
    let mut r = Resources::default();
    let id = r.container(&[(SESSION, &session)]);
    let host = tcp_to_docker_socket();
    let out = run(sandguard(&s)
        .env("DOCKER_HOST", &host)
        .args(["ps", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains(&id));
    let out = run(sandguard(&s).env("DOCKER_HOST", &host).args(["stop", &id]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!container_exists(&id));
}

#[test]
fn stop_by_id_or_prefix_removes_only_managed_containers() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("stopid");
    let session = format!("si{}", unique());
    let mut r = Resources::default();
    let mine = r.container(&[(SESSION, &session)]);
    let anon = volumes_of(&r.container_with(&[(SESSION, &session)], &["-v", "/data"]));
    let stranger = r.container(&[]);

    let out = run(sandguard(&s).args(["stop", &mine[..12]]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!container_exists(&mine));

    // An unlabelled container cannot be named: it is not ours.
    let out = run(sandguard(&s).args(["stop", &stranger]));
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("no managed sandbox"), "{}", out.stderr);
    assert!(container_exists(&stranger));

    // Removing a container takes its anonymous volume with it.
    assert_eq!(anon.len(), 1);
    assert!(volume_exists(&anon[0]));
    let out = run(sandguard(&s).args(["stop", "--all", "--session", &session]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(
        !volume_exists(&anon[0]),
        "the anonymous volume must go with its container"
    );
}

#[test]
fn stop_all_for_a_session_takes_containers_networks_and_volumes_and_nothing_else() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("stopall");
    let (mine, theirs) = (format!("sa{}", unique()), format!("sb{}", unique()));
    let mut r = Resources::default();
    let net = r.network(&[(SESSION, &mine)]);
    let c1 = r.container_with(&[(SESSION, &mine)], &["--network", &net]);
    let c2 = r.created_container(&[(SESSION, &mine)]);
    let vol = r.volume(&[(SESSION, &mine)]);
    let other = r.container(&[(SESSION, &theirs)]);
    let lookalike = r.container(&[("sandguard.session.x", &mine), ("session", &mine)]);
    let stranger = r.container(&[]);

    let dry = run(sandguard(&s).args(["stop", "--all", "--session", &mine, "--dry-run", "--json"]));
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let v = json(&dry.stdout);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["results"].as_array().unwrap().len(), 4);
    assert!(v["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["outcome"] == "would_remove"));
    assert!(
        container_exists(&c1) && network_exists(&net) && volume_exists(&vol),
        "a dry run touches nothing"
    );

    let out = run(sandguard(&s).args(["stop", "--all", "--session", &mine, "--json"]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], true);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(
        results.iter().all(|r| r["outcome"] == "removed"),
        "{results:?}"
    );
    assert!(!container_exists(&c1) && !container_exists(&c2));
    assert!(!network_exists(&net) && !volume_exists(&vol));
    assert!(
        container_exists(&other) && container_exists(&lookalike) && container_exists(&stranger)
    );

    // A second stop finds nothing and says so.
    let out = run(sandguard(&s).args(["stop", "--all", "--session", &mine]));
    assert_eq!((out.code, out.stdout.as_str()), (0, "Nothing to stop.\n"));
}

#[test]
fn stop_all_takes_every_managed_sandbox_but_no_stranger() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("stopeverything");
    let mut r = Resources::default();
    let a = r.container(&[(SESSION, &format!("e1{}", unique()))]);
    let b = r.created_container(&[(SESSION, &format!("e2{}", unique()))]);
    let stranger = r.container(&[("app", "db")]);
    let out = run(sandguard(&s).args(["stop", "--all"]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(
        out.stdout.lines().last().unwrap().ends_with("stopped."),
        "{}",
        out.stdout
    );
    assert!(!container_exists(&a) && !container_exists(&b));
    assert!(container_exists(&stranger));
    let out = run(sandguard(&s).arg("ps"));
    assert_eq!(out.stdout, "No running sandboxes.\n");
}

#[test]
fn providers_shows_docker_reachable_with_its_version() {
    require_docker();
    let s = Scratch::new("providers");
    let out = run(sandguard(&s).args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let docker = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "docker")
        .unwrap()
        .clone();
    assert_eq!(docker["configured"], true);
    assert_eq!(docker["reachable"], true);
    assert!(
        docker["detail"].as_str().unwrap().contains("API 1."),
        "{docker}"
    );
}
