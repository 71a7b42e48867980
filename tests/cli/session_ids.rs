//! Honest answers to what the user named, through the real binary. Providers are the
//! shell-script plugin ([`crate::support::plugin::Plugin`]) with Docker switched off,
//! so nothing here touches the shared daemon, and hand-written journals where only the ledger
//! matters.
//!
//! - One session-id rule: `ps --session`, `stop --all --session`, `sessions show` and the
//!   sidecar's `watch --session` all take `my-session` (README's own example) and all refuse
//!   `'a b'` with exit 2; `sessions show` takes a unique prefix, an ambiguous one is exit 2
//!   naming the candidates (as an ambiguous `stop ID` now is), none is exit 1.
//! - `sandguard detach` of what the session does not own exits 1 and says so; the control
//!   line `detach` of it is logged as refused by the sidecar and journaled not at all.
//! - `sessions show` never promises a TTL on Docker.
//! - The `sessions` table says what its claims column counts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandguard::labels::SESSION;

use crate::support::journal::write_journal;
use crate::support::plugin::{cmd, config, Plugin};
use crate::support::*;

/// A pid that no process has any more.
fn dead_pid() -> String {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid.to_string()
}

/// Runs a sidecar for `session` whose owner is already dead: it journals the session, reclaims
/// it at once and exits.
fn dead_session(s: &Scratch, config: &Path, session: &str) -> Run {
    run(cmd(s, config).args(["watch", "--owner-pid", &dead_pid(), "--session", session]))
}

fn refused_as_bad_usage(out: &Run, what: &str) {
    assert_eq!(out.code, 2, "{what}: {}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("invalid session id \"a b\""),
        "{what}: {}",
        out.stderr
    );
}

#[test]
fn every_command_that_names_a_session_takes_the_same_ids() {
    let s = Scratch::new("ans-ids");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "5s", &[&acme]);
    let session = format!("my-session-{}", unique());
    acme.insert("mine-1", &[(SESSION, session.as_str())]);

    let ps = run(cmd(&s, &config).args(["ps", "--json", "--session", &session]));
    assert_eq!(ps.code, 0, "{}{}", ps.stdout, ps.stderr);
    assert_eq!(json(&ps.stdout)["sandboxes"][0]["instance_id"], "mine-1");
    let dry = run(cmd(&s, &config).args([
        "stop",
        "--all",
        "--session",
        &session,
        "--dry-run",
        "--json",
    ]));
    assert_eq!(dry.code, 0, "{}{}", dry.stdout, dry.stderr);
    assert_eq!(json(&dry.stdout)["results"][0]["outcome"], "would_remove");
    // The sidecar takes the id too, and reclaims what carries it.
    let watch = dead_session(&s, &config, &session);
    assert_eq!(watch.code, 0, "{}{}", watch.stdout, watch.stderr);
    assert!(!acme.exists("mine-1"));
    let show = run(cmd(&s, &config).args(["sessions", "show", &session, "--json"]));
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert_eq!(json(&show.stdout)["session"], session.as_str());

    for (what, args) in [
        ("ps", &["ps", "--session", "a b"][..]),
        ("stop --all", &["stop", "--all", "--session", "a b"]),
        ("stop ID", &["stop", "mine", "--session", "a b"]),
        ("sessions show", &["sessions", "show", "a b"]),
    ] {
        refused_as_bad_usage(&run(cmd(&s, &config).args(args)), what);
    }
}

#[test]
fn sessions_show_takes_a_unique_prefix_and_names_the_candidates_of_an_ambiguous_one() {
    let s = Scratch::new("ans-prefix");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "5s", &[&acme]);
    let u = unique();
    let [a1, a2, b9] = [format!("px{u}a1"), format!("px{u}a2"), format!("px{u}b9")];
    for id in [&a1, &a2, &b9] {
        let out = dead_session(&s, &config, id);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    }
    let show = |id: &str| run(cmd(&s, &config).args(["sessions", "show", id, "--json"]));

    let unique_prefix = show(&format!("px{u}b"));
    assert_eq!(unique_prefix.code, 0, "{}", unique_prefix.stderr);
    assert_eq!(json(&unique_prefix.stdout)["session"], b9.as_str());
    let exact = show(&a1);
    assert_eq!(exact.code, 0, "{}", exact.stderr);
    assert_eq!(json(&exact.stdout)["session"], a1.as_str());

    let ambiguous = show(&format!("px{u}a"));
    assert_eq!(ambiguous.code, 2, "{}", ambiguous.stderr);
    assert!(
        ambiguous.stderr.contains("ambiguous")
            && ambiguous.stderr.contains(&a1)
            && ambiguous.stderr.contains(&a2),
        "{}",
        ambiguous.stderr
    );
    let none = show(&format!("px{u}z"));
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert!(none.stderr.contains("no session"), "{}", none.stderr);

    // `stop ID` says the same of an ambiguous sandbox id, and touches nothing.
    let session = format!("st{u}");
    acme.insert(&format!("dup{u}-one"), &[(SESSION, session.as_str())]);
    acme.insert(&format!("dup{u}-two"), &[(SESSION, session.as_str())]);
    let stop = run(cmd(&s, &config).args(["stop", &format!("dup{u}")]));
    assert_eq!(stop.code, 2, "{}{}", stop.stdout, stop.stderr);
    assert!(stop.stderr.contains("ambiguous"), "{}", stop.stderr);
    assert!(acme.exists(&format!("dup{u}-one")) && acme.exists(&format!("dup{u}-two")));
    let missing = run(cmd(&s, &config).args(["stop", &format!("nothing{u}")]));
    assert_eq!(missing.code, 1, "{}{}", missing.stdout, missing.stderr);
}

/// The state directory the scratch's commands use.
fn state_dir(s: &Scratch) -> PathBuf {
    s.path().join("state").join("sandguard")
}

fn journal(s: &Scratch, session: &str) -> String {
    let path = state_dir(s).join(format!("sessions/{session}.journal"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_detach_of_what_the_session_does_not_own_is_refused_and_never_journaled() {
    let s = Scratch::new("ans-detach");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "5s", &[&acme]);
    let u = unique();
    let (mine, stranger, by_line) = (
        format!("mine{u}"),
        format!("stranger{u}"),
        format!("byline{u}"),
    );
    for id in [&mine, &stranger, &by_line] {
        acme.insert(id, &[]);
    }
    let out_file = s.path().join("out");
    // The detach line written by hand comes before a claim: once the claim is confirmed, the
    // sidecar has read the detach too (lines are applied in order).
    let script = format!(
        r#"
sandguard claim acme {mine} || exit 10
sandguard detach acme {mine} || exit 11
sandguard detach acme {stranger} 2> {o}.err
echo "$?" > {o}.code
printf 'detach acme {by_line}\n' >&"$SANDGUARD_FD"
sandguard claim acme {by_line} || exit 12
echo "$SANDGUARD_SESSION" > {o}
"#,
        o = out_file.display()
    );
    let out = cmd(&s, &config)
        .env("PATH", crate::watch::wrapper::path_with_sandguard())
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let read = |ext: &str| {
        std::fs::read_to_string(out_file.with_extension(ext))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let session = std::fs::read_to_string(&out_file)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(
        read("code"),
        "1",
        "sandguard detach of a stranger's sandbox"
    );
    let err = read("err");
    assert!(
        err.contains(&format!(
            "acme {stranger} is not owned by session {session}"
        )) && err.contains("nothing was detached"),
        "{err}"
    );
    let text = journal(&s, &session);
    assert!(text.contains(&format!(r#""ev":"detach","provider":"acme","id":"{mine}""#)));
    for id in [&stranger, &by_line] {
        assert!(
            !text.contains(&format!(r#""ev":"detach","provider":"acme","id":"{id}""#)),
            "{id} was journaled as detached:\n{text}"
        );
    }
    let log = std::fs::read_to_string(state_dir(&s).join(format!("sessions/{session}.log")))
        .unwrap_or_default();
    assert!(
        log.contains(&format!("refused detach: acme {by_line} is not owned")),
        "the sidecar logs the refusal:\n{log}"
    );
}

#[test]
fn sessions_show_promises_no_ttl_on_docker_and_the_table_says_what_it_counts() {
    let s = Scratch::new("ans-ttl");
    let session = format!("ttl{}", unique());
    // An owner on another machine: it cannot be judged from here.
    let owner = "0123456789abcdef-0123456789abcdef-4242-1-4026531836";
    let start = format!(
        r#"{{"t":1000,"ev":"start","owner":"{owner}","pid":4242,"grace_ms":600000,"labels":{{}}}}"#
    );
    let event = |ev: &str, provider: &str, id: &str| {
        format!(r#"{{"t":1001,"ev":"{ev}","provider":"{provider}","id":"{id}"}}"#)
    };
    write_journal(
        &s,
        &session,
        &[
            start,
            event("claim", "docker", "3f2a9c0e11b2"),
            event("detach", "docker", "3f2a9c0e11b2"),
            event("claim", "docker", "77a0c3d91e5f"),
            event("claim", "e2b", "sbx-e2b-1"),
        ],
    );
    let out = run(sandguard(&s).args(["sessions", "show", &session, "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    let words = |id: &str| -> String {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {v}"))["words"]
            .as_str()
            .unwrap()
            .to_string()
    };
    for id in ["3f2a9c0e11b2", "77a0c3d91e5f"] {
        let w = words(id);
        assert!(w.contains("docker has no TTL"), "{id}: {w}");
        assert!(!w.contains("TTL ends"), "{id}: {w}");
    }
    assert!(words("sbx-e2b-1").contains("only its e2b timeout ends it"));

    let table = run(sandguard(&s).args(["sessions"]));
    assert_eq!(table.code, 0, "{}", table.stderr);
    let header = table.stdout.lines().next().unwrap_or_default();
    assert!(
        header.contains("HELD") && !header.contains("CLAIMS"),
        "{}",
        table.stdout
    );
    let row = table
        .stdout
        .lines()
        .find(|l| l.starts_with(&session))
        .unwrap();
    // Two claims held: the detached one is not counted.
    assert_eq!(row.split_whitespace().nth(4), Some("2"), "{}", table.stdout);
    assert!(
        table
            .stdout
            .contains("HELD: claims the session still holds"),
        "{}",
        table.stdout
    );
}
