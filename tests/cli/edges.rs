//! The rough edges a newcomer meets, through the real binary and the real Docker daemon:
//! `ps --session/--state`, `sessions show ID` (networks and volumes included), the reclaim
//! summary's log level, and `sweep --every` printing a verdict only when it changes.

use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};
use sandguard::labels::{OWNER, SESSION};

/// The rows of a `ps` table (without its header and count line) that belong to `ids`.
fn rows_of<'a>(stdout: &'a str, ids: &[&String]) -> Vec<&'a str> {
    stdout
        .lines()
        .filter(|l| ids.iter().any(|id| l.starts_with(&id[..12])))
        .collect()
}

#[test]
fn ps_narrows_to_a_session_and_a_state_and_counts_what_it_shows() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("psnarrow");
    let (mine, other) = (format!("pn{}", unique()), format!("po{}", unique()));
    let mut r = Resources::default();
    let running = r.container(&[(SESSION, &mine)]);
    let created = r.created_container(&[(SESSION, &mine)]);
    let elsewhere = r.container(&[(SESSION, &other)]);
    let all = [&running, &created, &elsewhere];

    let out = run(sandguard(&s).args(["ps", "--session", &mine]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(rows_of(&out.stdout, &all).len(), 2, "{}", out.stdout);
    assert!(!out.stdout.contains(&elsewhere[..12]), "{}", out.stdout);
    assert_eq!(
        out.stdout.lines().count(),
        4,
        "header, 2 rows, count: {}",
        out.stdout
    );
    assert!(
        out.stdout
            .ends_with("1 running, 1 created. Stop with: sandguard stop <instance-id>\n"),
        "{}",
        out.stdout
    );

    let out = run(sandguard(&s).args(["ps", "--session", &mine, "--state", "created"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        rows_of(&out.stdout, &all),
        rows_of(&out.stdout, &[&created])
    );
    assert_eq!(rows_of(&out.stdout, &all).len(), 1, "{}", out.stdout);
    assert!(
        out.stdout.contains("0 running, 1 created."),
        "{}",
        out.stdout
    );

    let out = run(sandguard(&s).args(["ps", "--state", "CREATED", "--session", &mine, "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let ids: Vec<&str> = v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [created.as_str()]);
    assert_eq!(v["counts"], serde_json::json!({"running": 0, "created": 1}));

    let out = run(sandguard(&s).args(["ps", "--session", &mine, "--state", "exited"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!("No sandboxes of session {mine} in state exited.\n")
    );

    // Bad input: a clear error on stderr, nothing on stdout.
    let bad = run(sandguard(&s).args(["ps", "--session", "Not-An-Id"]));
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stdout.is_empty() && bad.stderr.contains("invalid session id"),
        "{}",
        bad.stderr
    );
    let nobody = format!("zz{}", unique());
    let unknown = run(sandguard(&s).args(["ps", "--session", &nobody]));
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
    assert!(
        unknown.stdout.is_empty() && unknown.stderr.contains(&format!("no session {nobody}")),
        "{}",
        unknown.stderr
    );
    let state = run(sandguard(&s).args(["ps", "--state", "sleeping"]));
    assert_eq!(state.code, 2, "{}", state.stderr);
    assert!(
        state.stdout.is_empty()
            && state.stderr.contains("unknown state \"sleeping\"")
            && state
                .stderr
                .contains("running, created, restarting, paused, exited"),
        "{}",
        state.stderr
    );
}

/// One `sessions show --json` sandbox: (id, kind, fate, cause, words).
type Row = (String, String, String, String, String);

/// The row of sandbox `id`.
fn find(rows: &[Row], id: &str) -> Row {
    rows.iter()
        .find(|x| x.0 == id)
        .unwrap_or_else(|| panic!("{id} in {rows:?}"))
        .clone()
}

/// The `sessions show ID --json` sandboxes, as [`Row`]s.
fn fates(s: &Scratch, session: &str) -> Vec<Row> {
    let out = run(sandguard(s).args(["sessions", "show", session, "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(
        v["session"], session,
        "the sessions --json row is kept: {v}"
    );
    let text = |b: &serde_json::Value, k: &str| b[k].as_str().unwrap_or("-").to_string();
    v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                text(b, "id"),
                text(b, "kind"),
                text(b, "fate"),
                text(b, "cause"),
                text(b, "words"),
            )
        })
        .collect()
}

/// Whether the kernel tells a pidfd's holder how its process ended (`PIDFD_INFO_EXIT`, Linux
/// 6.15), judged by its release, apart from sandguard's code: where it does not, `sessions
/// show` can only say that the owner exited.
fn kernel_tells_exit_status() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (numbers.next().unwrap(), numbers.next().unwrap()) >= (6, 15)
}

/// How `sessions show` tells an owner killed by SIGKILL.
fn killed_owner() -> &'static str {
    match kernel_tells_exit_status() {
        true => "owner killed by SIGKILL",
        false => "owner exited",
    }
}

#[test]
fn sessions_show_tells_what_became_of_each_container_network_and_volume() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("show");
    let out = s.path().join("ids");
    let u = unique();
    let script = format!(
        r#"set -e
c=$(docker run -d --network none {IMAGE} sleep 3600)
kept=$(docker run -d --network none {IMAGE} sleep 3600)
sandguard detach docker "$kept"
net=$(docker network create --internal sg-show-{u})
vol=$(docker volume create sg-show-{u})
printf '%s\n' "$SANDGUARD_SESSION" "$c" "$kept" "$net" "$vol" > {f}.tmp
mv {f}.tmp {f}
exec sleep 3600
"#,
        f = out.display()
    );
    let mut child = guarded_with(&s, &["run", "--docker-proxy"], &script);
    let ids = wait_for_file(&out, &mut child);
    let [session, c, kept, net, vol] = <[String; 5]>::try_from(ids).unwrap();
    let mut r = Resources::default();
    r.adopt_container(&kept);
    let net_claim = format!("network/{net}");

    // While the owner lives: everything claimed, watched by the sidecar, the detached one left.
    let alive = fates(&s, &session);
    // The volume's claim is pinned to the volume the proxy made: `volume/NAME@CREATED`.
    let vol_claim = alive
        .iter()
        .map(|row| row.0.clone())
        .find(|id| {
            id.strip_prefix(&format!("volume/{vol}@"))
                .is_some_and(|t| t.parse::<i64>().is_ok())
        })
        .unwrap_or_else(|| panic!("no pinned claim of volume {vol} in {alive:?}"));
    for (id, kind) in [
        (&c, "instance"),
        (&net_claim, "network"),
        (&vol_claim, "volume"),
    ] {
        let (_, k, fate, _, words) = find(&alive, id);
        assert_eq!((k.as_str(), fate.as_str()), (kind, "claimed"));
        assert_eq!(words, "left: claimed, owner alive, its sidecar watches");
    }
    assert_eq!(
        find(&alive, &kept).4,
        "left: detached by the program; docker has no TTL: it runs until removed (sandguard \
         stop, or a sweep once a sandguard.expires label on it has passed)"
    );

    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    // Its sidecar gone too: it learns how the owner ended beside the reclaim.
    eventually(Duration::from_secs(15), "the session is reclaimed", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["state"] == "reclaimed" && v["sessions"][0]["sidecar_alive"] == false
    });
    let after = fates(&s, &session);
    for id in [&c, &net_claim, &vol_claim] {
        let (_, _, fate, cause, words) = find(&after, id);
        assert_eq!((fate.as_str(), cause.as_str()), ("removed", "owner_dead"));
        assert_eq!(words, format!("removed: {} (claimed)", killed_owner()));
    }
    assert_eq!(find(&after, &kept).2, "detached");
    assert!(container_exists(&kept) && !network_exists(&net) && !volume_exists(&vol));

    let text = run(sandguard(&s).args(["sessions", "show", &session]));
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(
        text.stdout.starts_with(&format!(
            "Session {session}: reclaimed: {}. Owner dead",
            killed_owner()
        )),
        "{}",
        text.stdout
    );
    let line = |needle: &str| {
        text.stdout
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle} in {}", text.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        line(&format!("network/{}", &net[..12])),
        format!(
            "docker network network/{} removed: {} (claimed)",
            &net[..12],
            killed_owner()
        )
    );
    assert_eq!(
        line(&vol_claim),
        format!(
            "docker volume {vol_claim} removed: {} (claimed)",
            killed_owner()
        )
    );
    assert_eq!(
        line(&c[..12]),
        format!(
            "docker instance {} removed: {} (claimed)",
            &c[..12],
            killed_owner()
        )
    );

    let bad = run(sandguard(&s).args(["sessions", "show", "../etc"]));
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("invalid session id"), "{}", bad.stderr);
    let none = run(sandguard(&s).args(["sessions", "show", "abc123"]));
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert!(none.stderr.contains("no session abc123"), "{}", none.stderr);
}

#[test]
fn sessions_show_tells_what_sandguard_stop_removed_by_hand() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("showstop");
    let out = s.path().join("ids");
    let script = format!(
        r#"set -e
a=$(docker run -d --network none {IMAGE} sleep 3600)
b=$(docker run -d --network none {IMAGE} sleep 3600)
printf '%s\n' "$SANDGUARD_SESSION" "$a" "$b" > {f}.tmp
mv {f}.tmp {f}
exec sleep 3600
"#,
        f = out.display()
    );
    let mut child = guarded_with(&s, &["run", "--docker-proxy"], &script);
    let ids = wait_for_file(&out, &mut child);
    let [session, a, b] = <[String; 3]>::try_from(ids).unwrap();

    // Stopped by hand while the owner lives, by the prefix `ps` shows.
    let stop = run(sandguard(&s).args(["stop", &a[..12]]));
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    assert!(!container_exists(&a) && container_exists(&b));
    let alive = fates(&s, &session);
    assert_eq!(alive.len(), 2, "one line per container: {alive:?}");
    let (_, _, fate, cause, words) = find(&alive, &a);
    assert_eq!((fate.as_str(), cause.as_str()), ("stopped", "-"));
    assert_eq!(words, "removed by hand (sandguard stop) (claimed)");
    assert_eq!(find(&alive, &b).2, "claimed");
    // `sessions` no longer counts what was stopped as held: only `b` is.
    let held = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let claims: Vec<&str> = held["sessions"][0]["claims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        claims.len() == 1 && b.starts_with(claims[0]) && claims[0].len() >= 12,
        "{held}"
    );
    let table = run(sandguard(&s).arg("sessions")).stdout;
    let row = table.lines().find(|l| l.starts_with(&session)).unwrap();
    assert_eq!(row.split_whitespace().nth(4), Some("1"), "HELD: {table}");

    // The owner dies: the reclaim finds `a` gone, and it is still told as stopped by hand.
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    // Its sidecar gone too: it learns how the owner ended beside the reclaim.
    eventually(Duration::from_secs(15), "the session is reclaimed", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["state"] == "reclaimed" && v["sessions"][0]["sidecar_alive"] == false
    });
    assert!(!container_exists(&b));
    let after = fates(&s, &session);
    assert_eq!(
        find(&after, &a).4,
        "removed by hand (sandguard stop) (claimed)"
    );
    assert_eq!(
        find(&after, &b).4,
        format!("removed: {} (claimed)", killed_owner())
    );

    // The record lives beside the journal, private like it; a stop of nothing adds nothing.
    let journal = s
        .path()
        .join("state/sandguard/sessions")
        .join(format!("{session}.journal"));
    let side = journal.with_extension("stopped");
    let meta = std::fs::metadata(&side).unwrap_or_else(|e| panic!("{}: {e}", side.display()));
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    let before = std::fs::read(&side).unwrap();
    let none = run(sandguard(&s).args(["stop", &a]));
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert_eq!(std::fs::read(&side).unwrap(), before);
    let journal_text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        !journal_text.contains("\"stopped\""),
        "stops never go to the journal: {journal_text}"
    );
}

#[test]
fn sessions_show_tells_the_status_the_owner_exited_with() {
    let s = Scratch::new("showexit");
    let out = run(sandguard(&s).args(["--", "sh", "-c", "echo $SANDGUARD_SESSION; exit 3"]));
    assert_eq!(out.code, 3, "{}", out.stderr);
    let session = out.stdout.trim().to_string();
    eventually(Duration::from_secs(15), "the session is over", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["state"] == "reclaimed" && v["sessions"][0]["sidecar_alive"] == false
    });
    let show = run(sandguard(&s).args(["sessions", "show", &session, "--json"]));
    assert_eq!(show.code, 0, "{}", show.stderr);
    let v = json(&show.stdout);
    let words = match kernel_tells_exit_status() {
        true => "owner exited with status 3",
        false => "owner exited",
    };
    assert_eq!(
        v["ending"],
        serde_json::json!({"cause": "owner_dead", "words": words})
    );
}

/// Runs a guarded program that creates nothing, with `env`, and returns the session's log
/// once the session is in `state` with its sidecar gone.
fn log_of_a_reclaim(s: &Scratch, env: &[(&str, &str)], state: &str) -> String {
    let out = run(sandguard(s).envs(env.iter().copied()).args([
        "--",
        "sh",
        "-c",
        "echo $SANDGUARD_SESSION",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let session = out.stdout.trim().to_string();
    eventually(Duration::from_secs(15), "the session is reclaimed", || {
        let v = json(&run(sandguard(s).args(["sessions", "--json"])).stdout);
        v["sessions"].as_array().unwrap().iter().any(|v| {
            v["session"] == session.as_str() && v["state"] == state && v["sidecar_alive"] == false
        })
    });
    let log = s
        .path()
        .join("state/sandguard/sessions")
        .join(format!("{session}.log"));
    std::fs::read_to_string(log).unwrap_or_default()
}

#[test]
fn a_reclaim_that_left_nothing_is_logged_at_info_and_one_that_left_some_at_warn() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("quiet");
    let quiet = log_of_a_reclaim(&s, &[], "reclaimed");
    assert!(
        !quiet.contains("reclaimed"),
        "nothing to warn about at the default level: {quiet}"
    );
    let info = log_of_a_reclaim(&s, &[("SANDGUARD_LOG", "info")], "reclaimed");
    let line = info
        .lines()
        .find(|l| l.contains("owner exited; reclaimed"))
        .unwrap_or_else(|| panic!("the summary at info: {info}"));
    assert!(line.contains("INFO") && !line.contains("WARN"), "{line}");
    // What is left behind is still a warning at the default level: Docker never answers.
    let config = s.file("short.toml", "[reclaim]\ndeadline = \"2s\"\nsettle = \"0\"\nretry_initial = \"100ms\"\nretry_max = \"500ms\"\n");
    let config = config.to_str().unwrap();
    let env = [
        ("SANDGUARD_CONFIG", config),
        ("DOCKER_HOST", "tcp://127.0.0.1:1"),
    ];
    let left = log_of_a_reclaim(&s, &env, "pending");
    let line = left
        .lines()
        .find(|l| l.contains("owner exited; some sandboxes could not be removed"))
        .unwrap_or_else(|| panic!("the pending summary at warn: {left}"));
    assert!(
        line.contains("WARN") && line.contains("docker: not listed"),
        "{line}"
    );
}

/// One `sweep --every 1s` run: a container it leaves from the start, a dead owner's container
/// added after two passes, two passes more. Returns the sweep's stdout and both ids, or `None`
/// when the left container vanished meanwhile (another test binary on the same daemon ran
/// `stop --all`): then the run proves nothing.
fn quiet_sweep(s: &Scratch) -> Option<(String, String, String)> {
    let mut r = Resources::default();
    let alive = live_owner_label();
    let left = r.container(&[(SESSION, &format!("sq{}", unique())), (OWNER, &alive)]);
    let stdout = s.path().join(format!("sweep-{}.out", unique()));
    let mut sweep = sandguard(s)
        .args(["sweep", "--every", "1s", "--provider", "docker"])
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let text = || std::fs::read_to_string(&stdout).unwrap_or_default();
    let passes = || text().lines().filter(|l| l.starts_with("Sweep:")).count();
    eventually(Duration::from_secs(60), "two passes", || passes() >= 2);
    // A dead owner's container appears between passes: news, then removed.
    let dead = r.container(&[
        (SESSION, &format!("sd{}", unique())),
        (OWNER, &dead_owner_label()),
    ]);
    eventually(
        Duration::from_secs(60),
        "the dead owner's container is removed",
        || !container_exists(&dead),
    );
    let seen = passes();
    eventually(Duration::from_secs(60), "two more passes", || {
        passes() >= seen + 2
    });
    unsafe_kill(sweep.id() as i32, libc::SIGTERM);
    sweep.wait().unwrap();
    container_exists(&left).then(|| (text(), left, dead))
}

#[test]
fn sweep_every_prints_a_verdict_only_when_it_changes() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweepquiet");
    let (out, left, dead) = (0..3)
        .find_map(|_| quiet_sweep(&s))
        .expect("the left container survived one of three runs");
    let count = |prefix: &str| out.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count(&format!("leave docker {left}")), 1, "{out}");
    assert_eq!(count(&format!("reclaim docker {dead}")), 1, "{out}");
    assert_eq!(count(&format!("removed docker {dead}")), 1, "{out}");
    assert!(
        out.lines().any(|l| l.starts_with("Sweep:")
            && l.contains("unchanged since the last pass, not repeated")),
        "{out}"
    );
}

#[test]
fn sessions_are_listed_newest_first_bounded_and_filtered_by_state() {
    let _g = shared();
    let s = Scratch::new("sessions-limit");
    let mut made = Vec::new();
    for _ in 0..3 {
        let out = run(sandguard(&s).args([
            "--no-docker-proxy",
            "--no-cloud-proxy",
            "--",
            "sh",
            "-c",
            "echo $SANDGUARD_SESSION",
        ]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        made.push(out.stdout.trim().to_string());
        std::thread::sleep(Duration::from_millis(20));
    }
    let listed = |args: &[&str]| {
        let out = run(sandguard(&s).args(["sessions", "--json"]).args(args));
        assert_eq!(out.code, 0, "{}", out.stderr);
        let v = json(&out.stdout);
        let ids: Vec<String> = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["session"].as_str().unwrap().to_string())
            .collect();
        (ids, v["not_shown"].as_u64().unwrap())
    };
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(
        listed(&[]),
        (newest_first.clone(), 0),
        "all, the newest first"
    );
    assert_eq!(listed(&["--limit", "2"]), (newest_first[..2].to_vec(), 1));
    assert_eq!(listed(&["--limit", "0"]).0, newest_first);
    eventually(Duration::from_secs(10), "every session ended", || {
        listed(&["--state", "active"]).0.is_empty()
    });
    let ended = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let state = ended["sessions"][0]["state"].as_str().unwrap().to_string();
    assert_eq!(listed(&["--state", &state]).0, newest_first);

    // The table says what it left out.
    let table = run(sandguard(&s).args(["sessions", "--limit", "1"]));
    assert!(table.stdout.contains(&made[2]) && !table.stdout.contains(&made[0]));
    assert!(
        table
            .stdout
            .contains("2 older session(s) not shown (--limit 0 shows all)"),
        "{}",
        table.stdout
    );
    let none = run(sandguard(&s).args(["sessions", "--state", "pending"]));
    assert_eq!(none.stdout, "No sessions in that state.\n");
    let bad = run(sandguard(&s).args(["sessions", "--state", "dead"]));
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("unknown state \"dead\""),
        "{}",
        bad.stderr
    );
}
