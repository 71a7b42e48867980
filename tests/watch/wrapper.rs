//! The wrapper and the sidecar, for real: `sandguard -- sh -c '…'` creates containers on the
//! real daemon, dies by a real signal, and its sandboxes must be gone within 5 s, while a
//! second live session's and an unlabelled container survive.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

/// The script every kill test runs: three labelled containers, one merely claimed (no
/// labels at all), then it writes its ids and waits to be killed (or exits, per `end`).
pub(crate) fn script(ids: &std::path::Path, end: &str) -> String {
    format!(
        r#"set -e
ulimit -c 0
L=$(echo "$SANDGUARD_LABELS" | sed 's/^/--label /; s/,/ --label /g')
for i in 1 2 3; do docker run -d --network none $L {IMAGE} sleep 3600 >> {ids}.tmp; done
c=$(docker run -d --network none {IMAGE} sleep 3600)
echo "$c" >> {ids}.tmp
sandguard claim docker "$c"
mv {ids}.tmp {ids}
{end}
"#,
        ids = ids.display()
    )
}

pub(crate) fn path_with_sandguard() -> String {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_sandguard"))
        .parent()
        .unwrap()
        .to_path_buf();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `sandguard -- sh -c SCRIPT` in its own process group, as a shell would run a job. The
/// group (the script and whatever it started) is killed when the guard drops, so no test
/// leaves processes behind; stdio goes nowhere, so no orphan holds the harness's pipes.
pub(crate) fn guarded(s: &Scratch, script: &str) -> Job {
    guarded_with(s, &[], script)
}

/// [`guarded`] with arguments before the `--` (such as `run --docker-proxy`).
pub(crate) fn guarded_with(s: &Scratch, args: &[&str], script: &str) -> Job {
    guarded_env(s, &[], args, script)
}

/// [`guarded_with`] with more variables (such as `SANDGUARD_LOG=debug`).
pub(crate) fn guarded_env(s: &Scratch, env: &[(&str, &str)], args: &[&str], script: &str) -> Job {
    use std::os::unix::process::CommandExt;
    let child = sandguard(s)
        .env("PATH", path_with_sandguard())
        .envs(env.iter().copied())
        .args(args)
        .args(["--", "sh", "-c", script])
        .quiet()
        .process_group(0)
        .spawn()
        .expect("spawn sandguard");
    Job(child)
}

pub(crate) struct Job(pub(crate) Child);

impl std::ops::Deref for Job {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Job {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

pub(crate) fn wait_for_file(path: &std::path::Path, child: &mut Child) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text.lines().map(str::to_string).collect();
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the guarded script ended early ({status}) before creating its containers");
        }
        assert!(
            Instant::now() < deadline,
            "the guarded script did not create its containers in time"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

enum Death {
    Signal(i32),
    GroupSignal(i32),
    Exit0,
    /// An exec (no death: checked), then a SIGKILL of the exec'd program.
    ExecThenKill,
}

fn kill_and_check(death: Death) {
    require_docker();
    let _g = shared();
    let s = Scratch::new("kill");
    let mut bystanders = Resources::default();
    let stranger = bystanders.container(&[]);

    // A second session that stays alive throughout.
    let other_ids = s.path().join("other");
    let mut other = guarded(&s, &script(&other_ids, "exec sleep 3600"));
    let other_containers = wait_for_file(&other_ids, &mut other);

    let ids = s.path().join("ids");
    let exec_done = s.path().join("exec-done");
    let end = match death {
        Death::Exit0 => "exit 0".to_string(),
        Death::ExecThenKill => crate::watch::reliability::exec_into(&exec_done),
        _ => "sleep 3600".to_string(),
    };
    let mut child = guarded(&s, &script(&ids, &end));
    let mut containers = wait_for_file(&ids, &mut child);
    assert_eq!(containers.len(), 4);
    if !matches!(death, Death::Exit0) {
        // (A script that exits at once may already have been reclaimed by now.)
        assert!(containers.iter().all(|c| container_exists(c)));
    }
    if let Death::ExecThenKill = death {
        let what = "exec";
        let fifth =
            crate::watch::reliability::survive_exec(&s, what, &exec_done, &mut child, &containers);
        containers.push(fifth);
    }

    let pid = child.id() as i32;
    match death {
        Death::Signal(sig) => unsafe_kill(pid, sig),
        Death::GroupSignal(sig) => unsafe_kill(-pid, sig),
        Death::ExecThenKill => unsafe_kill(pid, libc::SIGKILL),
        Death::Exit0 => {}
    }
    let status = child.wait().unwrap();
    if let Death::Exit0 = death {
        assert_eq!(status.code(), Some(0));
    }
    eventually(
        Duration::from_secs(5),
        "all the containers of the dead owner are gone",
        || containers.iter().all(|c| !container_exists(c)),
    );
    assert!(
        container_exists(&stranger),
        "an unlabelled container must survive"
    );
    assert!(
        other_containers.iter().all(|c| container_exists(c)),
        "another live session's containers must survive"
    );

    unsafe_kill(other.id() as i32, libc::SIGKILL);
    other.wait().unwrap();
    eventually(
        Duration::from_secs(5),
        "the second session is reclaimed when its owner dies",
        || other_containers.iter().all(|c| !container_exists(c)),
    );
}

pub(crate) fn unsafe_kill(pid: i32, sig: i32) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg("--")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{sig} {pid} failed");
}

#[test]
fn sigkill_of_the_owner_reclaims_everything() {
    kill_and_check(Death::Signal(libc::SIGKILL));
}

#[test]
fn sigterm_of_the_owner_reclaims_everything() {
    kill_and_check(Death::Signal(libc::SIGTERM));
}

#[test]
fn sigint_to_the_process_group_reclaims_everything() {
    kill_and_check(Death::GroupSignal(libc::SIGINT));
}

#[test]
fn a_hang_up_to_the_process_group_reclaims_everything() {
    kill_and_check(Death::GroupSignal(libc::SIGHUP));
}

#[test]
fn sigsegv_of_the_owner_reclaims_everything() {
    kill_and_check(Death::Signal(libc::SIGSEGV));
}

#[test]
fn a_plain_exit_without_cleanup_reclaims_everything() {
    kill_and_check(Death::Exit0);
}

#[test]
fn an_exec_is_no_death_and_the_exec_d_programs_death_reclaims_everything() {
    kill_and_check(Death::ExecThenKill);
}

#[test]
fn exit_statuses_pass_through() {
    let s = Scratch::new("status");
    let code = |args: &[&str]| {
        sandguard(&s)
            .args(args)
            .stderr(Stdio::null())
            .status()
            .unwrap()
    };
    assert_eq!(code(&["--", "sh", "-c", "exit 7"]).code(), Some(7));
    assert_eq!(code(&["run", "--", "true"]).code(), Some(0));
    assert_eq!(code(&["--", "no-such-command-sandguard"]).code(), Some(127));
    let not_executable = s.file("data.txt", "just data");
    assert_eq!(
        code(&["--", not_executable.to_str().unwrap()]).code(),
        Some(126)
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        code(&["--", "sh", "-c", "kill -TERM $$"]).signal(),
        Some(libc::SIGTERM)
    );
}

#[test]
fn the_session_is_in_the_environment_and_claim_outside_a_session_fails() {
    let s = Scratch::new("env");
    let out = run(sandguard(&s).args([
        "--",
        "sh",
        "-c",
        "echo $SANDGUARD_SESSION; echo $SANDGUARD_LABELS; echo $SANDGUARD_FD",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0].len(), 32, "{lines:?}");
    assert!(
        lines[1].contains(&format!("sandguard.session={}", lines[0]))
            && lines[1].contains("sandguard.owner="),
        "{lines:?}"
    );
    assert!(lines[2].parse::<i32>().is_ok(), "{lines:?}");

    let out = run(sandguard(&s)
        .env_remove("SANDGUARD_FD")
        .args(["claim", "docker", "abc"]));
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("not inside a sandguard session"),
        "{}",
        out.stderr
    );
}

/// The SDKs in other languages label their sandboxes with the owner label
/// `sandguard identity --pid` prints where they cannot read `/proc` themselves (macOS): it
/// must be, to the character, the one the wrapper gives its program, or the sidecar would
/// take those sandboxes for someone else's.
#[test]
fn the_identity_the_sdks_ask_for_is_the_owner_label_the_wrapper_gives() {
    let s = Scratch::new("identity");
    let exe = env!("CARGO_BIN_EXE_sandguard");
    let script = format!("echo $SANDGUARD_LABELS; {exe} identity --pid $$");
    let out = run(sandguard(&s).args(["--", "sh", "-c", &script]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let given = lines[0]
        .split(',')
        .find_map(|l| l.strip_prefix("sandguard.owner="))
        .unwrap_or_else(|| panic!("no owner label in {lines:?}"));
    assert_eq!(lines.get(1), Some(&given), "{lines:?}");

    let out = run(sandguard(&s).args(["identity", "--pid", "4194304"]));
    assert_eq!(out.code, 1, "no such process: {}", out.stderr);
    assert!(out.stdout.is_empty() && out.stderr.contains("no process 4194304"));
}

#[test]
fn malformed_and_oversized_control_lines_change_nothing() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("garbage");
    let mut r = Resources::default();
    let claimed = r.container(&[]);
    let done = s.path().join("done");
    // The owner lives until the test lets it go: it waits on this fifo.
    let gate = fifo::Gate::new(s.path(), "release");
    let script = format!(
        r#"printf 'bogus line\n' >&$SANDGUARD_FD
printf 'claim\n' >&$SANDGUARD_FD
printf 'claim docker a b c\n' >&$SANDGUARD_FD
printf 'bye now\n' >&$SANDGUARD_FD
head -c 100000 /dev/zero | tr '\0' 'a' >&$SANDGUARD_FD
printf '\nclaim docker {claimed}\n' >&$SANDGUARD_FD
touch {done}
read go < {release}
"#,
        done = done.display(),
        release = gate.path().display()
    );
    let mut child = guarded(&s, &script);
    eventually(
        Duration::from_secs(20),
        "the script wrote its lines",
        || done.exists(),
    );
    // The owner lives: nothing was reclaimed by the garbage, and the session is active.
    assert!(container_exists(&claimed));
    let sessions = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let session = &sessions["sessions"][0];
    assert_eq!(session["state"], "active", "{sessions}");
    assert_eq!(session["sidecar_alive"], true);
    gate.release();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    // The valid claim after the garbage still counted.
    eventually(
        Duration::from_secs(5),
        "the claimed container is reclaimed",
        || !container_exists(&claimed),
    );
}

#[test]
fn watch_with_an_owner_already_dead_reclaims_at_once() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("deadowner");
    let session = format!("dead{}", unique());
    let mut r = Resources::default();
    let c = r.container(&[(sandguard::labels::SESSION, &session)]);
    let mut dead = Command::new("true").spawn().unwrap();
    let pid = dead.id();
    dead.wait().unwrap();
    let out = run(sandguard(&s).args([
        "watch",
        "--owner-pid",
        &pid.to_string(),
        "--session",
        &session,
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("ready {session}\n"));
    assert!(!container_exists(&c));
    let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    assert_eq!(v["sessions"][0]["state"], "reclaimed", "{v}");
    assert_eq!(v["sessions"][0]["sidecar_alive"], false);
}

#[test]
fn an_owner_whose_start_time_does_not_match_is_judged_dead() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("reused");
    let session = format!("reused{}", unique());
    let mut r = Resources::default();
    let c = r.container(&[(sandguard::labels::SESSION, &session)]);
    // This test process is alive, but not with this start time: a reused pid.
    let me = sandguard::testing::identity::Identity::current().unwrap();
    let out = run(sandguard(&s).args([
        "watch",
        "--owner-pid",
        &me.pid.to_string(),
        "--owner-start",
        &(me.start_time + 1).to_string(),
        "--session",
        &session,
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!container_exists(&c));
}

#[test]
fn sigterm_to_the_sidecar_never_reclaims_a_live_owners_sandboxes() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("termsidecar");
    let ids = s.path().join("ids");
    let mut child = guarded(&s, &script(&ids, "sleep 3600"));
    let containers = wait_for_file(&ids, &mut child);
    let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let session = v["sessions"][0]["session"].as_str().unwrap().to_string();
    let sidecar = find_process(&format!("--session {session}")).expect("the sidecar runs");
    // Ctrl-C and hang-up to the owner's group do not reach the sidecar (own session) …
    assert_ne!(sidecar_session_id(sidecar), child.id());
    // … and SIGTERM to the sidecar stops it without touching the owner's sandboxes.
    unsafe_kill(sidecar as i32, libc::SIGTERM);
    eventually(
        Duration::from_secs(5),
        "the sidecar exits on SIGTERM",
        || !std::path::Path::new(&format!("/proc/{sidecar}")).exists(),
    );
    assert!(
        containers.iter().all(|c| container_exists(c)),
        "a stopped sidecar must not reclaim"
    );
    let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    assert_eq!(v["sessions"][0]["state"], "active");
    assert_eq!(v["sessions"][0]["sidecar_alive"], false);
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    let out = run(sandguard(&s).args(["stop", "--all", "--session", &session]));
    assert_eq!(out.code, 0, "{}", out.stdout);
    // The merely claimed container carries no labels: only its (stopped) sidecar knew it.
    let _ = Command::new("docker")
        .args(["rm", "-f", &containers[3]])
        .output();
}

/// The pid of the process whose command line contains `needle`.
/// The sidecar of `session`, waited for (at most 10 s): the wrapper execs its program without
/// waiting for the sidecar, which may still be starting when the program has already run.
pub(crate) fn sidecar_pid(session: &str) -> u32 {
    let needle = format!("--session {session}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = find_process(&needle) {
            return pid;
        }
        assert!(Instant::now() < deadline, "the sidecar of {session} runs");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn find_process(needle: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        text.contains(needle).then_some(pid)
    })
}

/// Field 6 of /proc/PID/stat: the session id.
fn sidecar_session_id(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(3).unwrap().parse().unwrap()
}
