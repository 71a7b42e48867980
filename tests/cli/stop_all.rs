//! `stop --all` on a shared engine, through the real binary on the real daemon: on a terminal
//! it says how many of the sandboxes belong to live owners that are not the user's (or to
//! owners that cannot be judged from here) and asks before taking them; `--yes` skips the
//! question; without a terminal it keeps its contract (it stops all) and says so; `--dead`
//! takes only what dead owners left, and composes with `--session` and `--provider`.
//!
//! Another user's live owner is a process run as uid 65534 (`nobody`) by `setpriv`: only
//! root can start one, so those tests are ignored in a plain `cargo test` and run by
//! tests/run.sh (as root, with `--include-ignored`), failing loudly, never passing silently,
//! when run without root.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::terminal::Terminal;
use crate::support::*;
use sandguard::labels::{OWNER, SESSION};

const ROOT: &str =
    "only root can run an owner as another user: run this test as root (tests/run.sh does)";

/// An owner label naming a process of another machine: it cannot be judged from here.
const ELSEWHERE: &str = "abcdefabcdefabcd-0123456789abcdef-42-4242-4026531836";

/// A live process of uid 65534, whose identity is an owner label: what carries it belongs
/// to a live owner that is not the test's. Killed on drop.
struct Stranger {
    child: Child,
    label: String,
}

impl Stranger {
    fn start() -> Stranger {
        assert_eq!(sandguard::testing::unix::geteuid(), 0, "{ROOT}");
        let child = Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .args(["sleep", "600"])
            .quiet()
            .spawn()
            .expect("setpriv");
        let pid = child.id();
        // Its start time is its own from the fork on; its uid only once setpriv has run.
        eventually(
            Duration::from_secs(10),
            "the stranger runs as 65534",
            || {
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:\t65534\t")))
            },
        );
        let label = sandguard::testing::identity::Identity::of_pid(pid)
            .expect("the stranger lives")
            .to_label();
        Stranger { child, label }
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sandbox of each kind of owner, each in a session of its own that this machine's
/// ledger does not have: another user's live owner, an owner elsewhere, a dead owner, and a
/// live owner of the test's own user (the test process itself).
struct Four {
    theirs: String,
    elsewhere: String,
    dead: String,
    mine: String,
    _stranger: Stranger,
    _r: Resources,
}

impl Four {
    fn make() -> Four {
        let stranger = Stranger::start();
        let mut r = Resources::default();
        let mut one =
            |owner: &str| r.container(&[(SESSION, &format!("sa{}", unique())), (OWNER, owner)]);
        Four {
            theirs: one(&stranger.label),
            elsewhere: one(ELSEWHERE),
            dead: one(&dead_owner_label()),
            mine: one(&live_owner_label()),
            _stranger: stranger,
            _r: r,
        }
    }
}

/// `sandguard stop ARGS` with the terminal as its stdin and stderr (stdout captured).
fn on_terminal(s: &Scratch, terminal: &mut Terminal, args: &[&str]) -> Child {
    let (stdin, stderr) = terminal.stdin_and_stderr();
    sandguard(s)
        .arg("stop")
        .args(args)
        .stdin(stdin)
        .stderr(stderr)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn sandguard")
}

/// The exit code of `child`, which must end within `limit` (killed otherwise).
fn exit_within(child: &mut Child, limit: Duration, what: &str) -> i32 {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("not within {limit:?}: {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const QUESTION: &str = "[y/N]";
const THEIRS_COUNTED: &str = "1 belongs to a live owner that is not you";
const ELSEWHERE_COUNTED: &str = "1 to an owner that cannot be judged from here";

#[test]
#[ignore = "needs root to run an owner as another user; tests/run.sh runs ignored tests as root"]
fn stop_all_on_a_terminal_asks_before_taking_other_owners_sandboxes_and_no_keeps_them() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("stopask");
    let four = Four::make();
    let mut terminal = Terminal::open();
    let mut child = on_terminal(&s, &mut terminal, &["--all"]);
    let Some(asked) = terminal.wait_for(QUESTION, Duration::from_secs(30)) else {
        let _ = child.kill();
        panic!("stop --all did not ask: {}", terminal.text());
    };
    assert!(
        asked.contains(THEIRS_COUNTED) && asked.contains(ELSEWHERE_COUNTED),
        "{asked}"
    );
    assert!(
        [&four.theirs, &four.elsewhere, &four.dead, &four.mine]
            .iter()
            .all(|c| container_exists(c)),
        "nothing is removed before the answer"
    );
    terminal.type_line("n");
    let code = exit_within(&mut child, Duration::from_secs(60), "stop --all ends");
    let said = terminal.text();
    assert_eq!(code, 0, "answering no is no failure: {said}");
    assert!(container_exists(&four.theirs) && container_exists(&four.elsewhere));
    assert!(!container_exists(&four.dead) && !container_exists(&four.mine));
    assert!(
        said.contains(&format!("kept docker instance {}", &four.theirs[..12]))
            && said.contains("uid 65534"),
        "{said}"
    );
}

#[test]
#[ignore = "needs root to run an owner as another user; tests/run.sh runs ignored tests as root"]
fn stop_all_yes_takes_every_sandbox_without_asking() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("stopyes");
    let four = Four::make();
    let mut terminal = Terminal::open();
    let mut child = on_terminal(&s, &mut terminal, &["--all", "--yes"]);
    let code = exit_within(&mut child, Duration::from_secs(60), "stop --all --yes ends");
    let said = terminal.text();
    assert_eq!(code, 0, "{said}");
    assert!(!said.contains(QUESTION), "--yes asks nothing: {said}");
    for c in [&four.theirs, &four.elsewhere, &four.dead, &four.mine] {
        assert!(!container_exists(c), "{c} is stopped: {said}");
    }
}

#[test]
#[ignore = "needs root to run an owner as another user; tests/run.sh runs ignored tests as root"]
fn stop_all_without_a_terminal_keeps_the_contract_and_says_so() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("stoppiped");
    let four = Four::make();
    let out = run(sandguard(&s).args(["stop", "--all"]).stdin(Stdio::null()));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    for c in [&four.theirs, &four.elsewhere, &four.dead, &four.mine] {
        assert!(!container_exists(c), "{c} is stopped: {}", out.stderr);
    }
    assert!(
        out.stderr.contains(THEIRS_COUNTED)
            && out.stderr.contains(ELSEWHERE_COUNTED)
            && out.stderr.contains("nobody was asked")
            && out.stderr.contains("--dead"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(QUESTION), "{}", out.stderr);
}

/// `stop --json` as documented (book/src/ps-stop.md), read back into types: a renamed or
/// retyped field fails here.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Stopped {
    dry_run: bool,
    results: Vec<Stop>,
    errors: Vec<serde_json::Value>,
    clean: bool,
}

#[derive(Debug, serde::Deserialize)]
struct Stop {
    provider: String,
    instance_id: String,
    session: Option<String>,
    owner_alive: Option<bool>,
    outcome: String,
    error: Option<String>,
    attempts: u32,
}

impl Stopped {
    fn outcome(&self, id: &str) -> (&str, Option<&str>) {
        let r = self
            .results
            .iter()
            .find(|r| r.instance_id == id)
            .unwrap_or_else(|| panic!("{id} in {self:?}"));
        (r.outcome.as_str(), r.error.as_deref())
    }
}

#[test]
#[ignore = "needs root to run an owner as another user; tests/run.sh runs ignored tests as root"]
fn stop_all_dead_takes_only_what_dead_owners_left() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("stopdead");
    let four = Four::make();
    // On a terminal too: --dead takes nothing a question would be about.
    let mut terminal = Terminal::open();
    let mut child = on_terminal(&s, &mut terminal, &["--all", "--dead", "--json"]);
    let code = exit_within(
        &mut child,
        Duration::from_secs(60),
        "stop --all --dead ends",
    );
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let said = terminal.text();
    assert_eq!(code, 0, "{stdout} {said}");
    assert!(!said.contains(QUESTION), "{said}");
    let v: Stopped = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(!v.dry_run && v.clean && v.errors.is_empty(), "{v:?}");
    assert_eq!(v.outcome(&four.dead).0, "removed");
    for (id, why) in [
        (&four.theirs, "not you"),
        (&four.elsewhere, "cannot be judged"),
        (&four.mine, "lives"),
    ] {
        let (outcome, error) = v.outcome(id);
        assert_eq!(outcome, "kept", "{v:?}");
        assert!(error.is_some_and(|e| e.contains(why)), "{id}: {error:?}");
    }
    assert!(!container_exists(&four.dead));
    for c in [&four.theirs, &four.elsewhere, &four.mine] {
        assert!(container_exists(c), "{c} is kept");
    }
    let dead = v
        .results
        .iter()
        .find(|r| r.instance_id == four.dead)
        .unwrap();
    assert_eq!(
        (dead.provider.as_str(), dead.owner_alive, dead.attempts > 0),
        ("docker", Some(false), true)
    );
    assert!(dead.session.is_some());
}

#[test]
fn stop_all_dead_composes_with_session_and_provider() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("stopdeadsession");
    let (one, other) = (format!("sd{}", unique()), format!("se{}", unique()));
    let mut r = Resources::default();
    let dead = r.container(&[(SESSION, &one), (OWNER, &dead_owner_label())]);
    let alive = r.container(&[(SESSION, &one), (OWNER, &live_owner_label())]);
    let elsewhere = r.container(&[(SESSION, &one), (OWNER, ELSEWHERE)]);
    let other_dead = r.container(&[(SESSION, &other), (OWNER, &dead_owner_label())]);

    let args = [
        "stop",
        "--all",
        "--dead",
        "--session",
        &one,
        "--provider",
        "docker",
    ];
    let dry = run(sandguard(&s).args(args).args(["--dry-run", "--json"]));
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let v: Stopped = serde_json::from_str(&dry.stdout).unwrap();
    assert!(v.dry_run);
    assert_eq!(v.outcome(&dead).0, "would_remove");
    assert_eq!(v.outcome(&alive).0, "kept");
    assert_eq!(v.results.len(), 3, "only the session's: {v:?}");
    assert!(container_exists(&dead), "a dry run touches nothing");

    let out = run(sandguard(&s).args(args));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!container_exists(&dead));
    assert!(container_exists(&alive) && container_exists(&elsewhere));
    assert!(
        container_exists(&other_dead),
        "another session's is not asked for"
    );
    assert_eq!(
        out.stdout.lines().last(),
        Some("1 stopped."),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr
            .contains(&format!("kept docker instance {}", &alive[..12])),
        "{}",
        out.stderr
    );

    // --dead and --yes only narrow or answer `--all`.
    for flag in ["--dead", "--yes"] {
        let bad = run(sandguard(&s).args(["stop", &alive, flag]));
        assert_eq!(bad.code, 2, "stop ID {flag}: {}", bad.stderr);
    }
    assert!(container_exists(&alive));
}
