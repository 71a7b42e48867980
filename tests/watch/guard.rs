//! The Rust SDK helper (`sandguard::Guard`) through `examples/guarded.rs`, a real program
//! using it against the real daemon: killed, or ending cleanly, its containers are reclaimed;
//! `Guard::close` returns the sidecar's word on that reclaim (clean, or what was left).

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn example(s: &Scratch, seconds: &str) -> (Child, Vec<String>) {
    let (child, got, _) = example_with(s, &[seconds], None);
    (child, got)
}

/// What the example printed after its first three lines, once it has exited.
fn rest(child: &mut Child, lines: Lines<BufReader<ChildStdout>>) -> String {
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success(), "{rest:?}");
    rest.join("\n")
}

/// The example with `args`, its sidecar configured by `config` (`SANDGUARD_CONFIG`) when given.
fn example_with(
    s: &Scratch,
    args: &[&str],
    config: Option<&std::path::Path>,
) -> (Child, Vec<String>, Lines<BufReader<ChildStdout>>) {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_sandguard"));
    let example = bin.parent().unwrap().join("examples/guarded");
    assert!(
        example.exists(),
        "cargo test builds the examples: {} is missing",
        example.display()
    );
    let mut cmd = Command::new(example);
    if let Some(config) = config {
        cmd.env("SANDGUARD_CONFIG", config)
            .env_remove("DOCKER_HOST");
    }
    let mut child = cmd
        .args(args)
        .env("SANDGUARD_BIN", bin)
        .env("IMAGE", IMAGE)
        .env("XDG_STATE_HOME", s.path().join("state"))
        .env("HOME", s.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let got: Vec<String> = (0..3).map(|_| lines.next().unwrap().unwrap()).collect();
    (child, got, lines)
}

#[test]
fn a_killed_guarded_program_loses_its_containers() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("guard-kill");
    let (mut child, got) = example(&s, "600");
    let containers = &got[1..];
    assert!(containers.iter().all(|c| container_exists(c)));
    let ps = json(&run(sandguard(&s).args(["ps", "--json", "--provider", "docker"])).stdout);
    let mine = ps["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["instance_id"] == got[1].as_str())
        .unwrap()
        .clone();
    assert_eq!(mine["session"], got[0].as_str());
    assert_eq!(
        mine["owner_alive"], true,
        "the owner label names the guarded program itself"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    eventually(
        Duration::from_secs(5),
        "both containers are reclaimed",
        || containers.iter().all(|c| !container_exists(c)),
    );
}

#[test]
fn a_clean_exit_says_bye_and_reclaims() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("guard-bye");
    let (mut child, got, lines) = example_with(&s, &["0"], None);
    let rest = rest(&mut child, lines);
    assert_eq!(
        rest, "ended clean",
        "Guard::close returned the sidecar's word"
    );
    assert!(
        got[1..].iter().all(|c| !container_exists(c)),
        "gone by the time close returned"
    );
    eventually(
        Duration::from_secs(5),
        "both containers are reclaimed",
        || got[1..].iter().all(|c| !container_exists(c)),
    );
    eventually(Duration::from_secs(5), "the session ended clean", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["state"] == "clean"
    });
}

/// A reclaim after `bye` that cannot finish (the sidecar's Docker daemon is
/// a dead socket, while the program's `docker` CLI works) is reported by `Guard::close`: the
/// claimed container it could not remove, and the provider it could not list.
#[test]
fn close_reports_what_the_reclaim_left() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("guard-left");
    let (mut child, got, lines) = example_with(&s, &["0"], Some(&dead_docker_config(&s)));
    let mut left = Resources::default();
    for c in &got[1..] {
        left.adopt_container(c);
    }
    let rest = rest(&mut child, lines);
    let outcome = sandguard::testing::protocol::ByeOutcome::parse(&rest).expect(&rest);
    let sandguard::testing::protocol::ByeOutcome::Left { count, items } = outcome else {
        panic!("{rest}")
    };
    assert_eq!(count, 2, "{rest}");
    let named: Vec<(&str, &str)> = items
        .iter()
        .map(|l| (l.provider.as_str(), l.id.as_str()))
        .collect();
    assert!(named.contains(&("docker", "*")), "{rest}");
    assert!(named.contains(&("docker", got[2].as_str())), "{rest}");
    assert!(got[1..].iter().all(|c| container_exists(c)));
    // `sessions show` tells the reclaim as the bye's, though it left work pending: the cause
    // is journaled (a journal without it was told as a sweep's reclaim).
    let show = || json(&run(sandguard(&s).args(["sessions", "show", &got[0], "--json"])).stdout);
    eventually(Duration::from_secs(5), "the session ended pending", || {
        show()["state"] == "pending"
    });
    let ending = &show()["ending"];
    assert_eq!(ending["cause"], "bye", "{ending}");
    assert_eq!(ending["words"], "the program ended its session (bye)");
}

/// The same reclaim, the guard dropped instead of closed: its log says what was left.
#[test]
fn a_dropped_guard_logs_what_the_reclaim_left() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("guard-drop-left");
    let config = dead_docker_config(&s);
    let (mut child, got, lines) = example_with(&s, &["0", "drop"], Some(&config));
    let mut left = Resources::default();
    for c in &got[1..] {
        left.adopt_container(c);
    }
    assert_eq!(rest(&mut child, lines), "");
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(
        log.contains("WARN")
            && log.contains(&format!("session {}: after bye, ended left 2:", got[0]))
            && log.contains("docker/*"),
        "{log}"
    );
}

/// A config whose Docker daemon is a dead socket (the example's own `docker` CLI still uses
/// the real one): the sidecar can neither list nor remove.
fn dead_docker_config(s: &Scratch) -> std::path::PathBuf {
    let config = s.path().join("sandguard.toml");
    let dead = s.path().join("dead.sock");
    let text = format!(
        "[providers.docker]\nhost = \"unix://{}\"\n\n[reclaim]\ndeadline = \"1s\"\nretry_initial = \"50ms\"\nsettle = \"0\"\n",
        dead.display()
    );
    std::fs::write(&config, text).unwrap();
    config
}

/// An owner whose SIGPIPE is the default (a C program, or Rust that reset
/// it) outlives its SIGKILLed sidecar. Its heartbeats, its claim and its `bye` meet a pipe
/// without a reader: the claim is an error, and the program is never killed by SIGPIPE.
#[test]
fn a_guard_whose_sidecar_is_gone_returns_errors_instead_of_dying_of_sigpipe() {
    use std::io::Write;
    use std::os::unix::process::ExitStatusExt;
    let s = Scratch::new("guard-sigpipe");
    // No provider at all: the sidecar has nothing to list, and the daemon is not involved.
    let config = cloud_config(&s, "");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_sandguard"));
    let example = bin.parent().unwrap().join("examples/sigpipe");
    assert!(
        example.exists(),
        "cargo test builds the examples: {example:?} is missing"
    );
    let mut child = Command::new(example)
        .env("SANDGUARD_BIN", bin)
        .env("SANDGUARD_CONFIG", &config)
        .env("XDG_STATE_HOME", s.path().join("state"))
        .env("HOME", s.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().unwrap().unwrap();
    let pid: u32 = ready.split_whitespace().nth(2).unwrap().parse().unwrap();
    let sidecar = crate::watch::wrapper::find_process(&format!("--owner-pid {pid} --owner-start"))
        .expect("the guard's sidecar runs");
    crate::watch::wrapper::unsafe_kill(sidecar as i32, libc::SIGKILL);
    eventually(Duration::from_secs(5), "the sidecar is dead", || {
        std::fs::read_to_string(format!("/proc/{sidecar}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    });
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(
        status.signal(),
        None,
        "the program was killed by signal {:?} (13 is SIGPIPE); stdout {rest:?}, stderr {stderr}",
        status.signal()
    );
    assert_eq!(status.code(), Some(0), "stdout {rest:?}, stderr {stderr}");
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert!(
        rest[0].starts_with("claim failed: ") && rest[0].contains("the session's sidecar is gone"),
        "{rest:?}"
    );
}
