//! The documentation's code blocks, run as written: the snippets are read out of README.md and
//! the book's chapters (book/src/*.md) themselves, so the documentation and what the tests run
//! cannot drift apart.
//!
//! Every fenced block in README.md and in every chapter is preceded by a marker line:
//! `<!-- readme: run NAME -->` (a test here, or in tests/python/test_readme.py,
//! tests/node/readme.test.mjs and the tests that call [`block`], runs it) or `<!-- readme: not
//! run (reason) -->`. A block without a marker fails [`every_block_is_run_or_says_why_not`], so
//! a new snippet cannot slip in untested by accident; a name used twice, in one file or across
//! files, fails [`every_run_name_is_used_once`].
//!
//! The snippets run the test image, `sandguard-test/busybox` ([`IMAGE`], made by
//! tests/engine.sh: nothing is pulled), as a reader runs them
//! ([`the_examples_run_the_test_image_which_is_never_pulled`]).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::path_with_sandguard;

/// The documentation, in a fixed order: README.md, then every `book/src/*.md` by file name.
/// Each as (its path in the repository, its text).
pub(crate) fn docs() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut chapters: Vec<String> = std::fs::read_dir(root.join("book/src"))
        .expect("the book's chapters, book/src/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .collect();
    chapters.sort();
    std::iter::once("README.md".to_string())
        .chain(chapters.into_iter().map(|name| format!("book/src/{name}")))
        .map(|rel| {
            let text = std::fs::read_to_string(root.join(&rel)).unwrap();
            (rel, text)
        })
        .collect()
}

/// Every fenced block: (the marker line before it, its language, its body).
pub(crate) fn blocks(text: &str) -> Vec<(Option<String>, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(lang) = lines[i].strip_prefix("```") {
            let marker = i
                .checked_sub(1)
                .map(|j| lines[j].trim())
                .filter(|l| l.starts_with("<!-- readme:"))
                .map(str::to_string);
            let end = (i + 1..lines.len())
                .find(|&j| lines[j].starts_with("```"))
                .expect("every fence is closed");
            out.push((marker, lang.to_string(), lines[i + 1..end].join("\n")));
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// The NAME of a `<!-- readme: run NAME … -->` marker (`None` for `not run` and the rest).
fn run_name(marker: &str) -> Option<&str> {
    let rest = marker.strip_prefix("<!-- readme: run ")?;
    rest.split(|c: char| c.is_whitespace()).next()
}

/// The body of the block marked `<!-- readme: run NAME … -->`, in README.md or a chapter.
pub(crate) fn block(name: &str) -> String {
    docs()
        .iter()
        .flat_map(|(_, text)| blocks(text))
        .find(|(m, _, _)| m.as_deref().and_then(run_name) == Some(name))
        .map_or_else(
            || panic!("neither README.md nor book/src/*.md has a block marked `<!-- readme: run {name} -->`"),
            |(_, _, body)| body,
        )
}

#[test]
fn every_block_is_run_or_says_why_not() {
    let docs = docs();
    assert!(
        docs.iter().any(|(path, _)| path == "book/src/SUMMARY.md"),
        "the book is there: {:?}",
        docs.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for (path, text) in &docs {
        for (marker, lang, body) in blocks(text) {
            let first = body.lines().next().unwrap_or("");
            let marker = marker.unwrap_or_else(|| panic!(
                "a ```{lang} block in {path} (starting {first:?}) has no `<!-- readme: run NAME -->` or `<!-- readme: not run (why) -->` line before it"
            ));
            assert!(
                run_name(&marker).is_some_and(|n| !n.is_empty() && n != "-->")
                    || marker.starts_with("<!-- readme: not run ("),
                "a ```{lang} block in {path} (starting {first:?}) has a marker that is neither `run NAME` nor `not run (why)`: {marker}"
            );
        }
    }
}

/// Every example that starts a container names the image `tests/engine.sh` makes
/// (`sandguard-test/busybox`, imported, never pulled), so that it runs as written on a machine
/// with no registry: a bare `busybox` is Docker Hub's, which an offline machine cannot pull.
#[test]
fn the_examples_run_the_test_image_which_is_never_pulled() {
    let mut pulled = Vec::new();
    for (path, text) in docs() {
        for (_, _, body) in blocks(&text) {
            for line in body.lines() {
                let bare = line
                    .match_indices("busybox")
                    .any(|(at, _)| !line[..at].ends_with("sandguard-test/"));
                if bare {
                    pulled.push(format!("{path}: {}", line.trim()));
                }
            }
        }
    }
    assert!(
        pulled.is_empty(),
        "examples that name an image to pull, not sandguard-test/busybox:\n{}",
        pulled.join("\n")
    );
}

/// README's "Clients tried" names every client the tests install at the version they install:
/// the vendors' Python SDKs (tests/run.sh's `SDK_PINS`), the npm packages tests/run.sh adds
/// to the Node tests' project (its `NPM_PINS`, `name@version`), and docker-py
/// (tests/python/conftest.py), each pinned (`==`, `@`), never a range; and it never says a
/// version is unrecorded where the tests record it.
#[test]
fn readme_names_the_clients_at_the_versions_the_tests_install() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    let (runner, conftest, readme) = (
        read("tests/run.sh"),
        read("tests/python/conftest.py"),
        read("README.md"),
    );
    let tried = readme
        .split_once("## Clients tried")
        .and_then(|(_, rest)| rest.split("\n## ").next())
        .expect("README has a section \"Clients tried\"");
    let quoted = |line: &str| -> Vec<String> {
        line.split(['\'', '"'])
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut pins: Vec<String> = runner
        .lines()
        .find(|l| l.starts_with("SDK_PINS=("))
        .map(quoted)
        .expect("tests/run.sh pins the vendors' SDKs in SDK_PINS");
    pins.extend(
        runner
            .lines()
            .find(|l| l.starts_with("NPM_PINS=("))
            .map(quoted)
            .expect("tests/run.sh pins the Node tests' packages in NPM_PINS"),
    );
    pins.extend(
        conftest
            .lines()
            .filter(|l| l.contains("\"docker"))
            .flat_map(quoted)
            .filter(|w| w.starts_with("docker") && w.contains(['=', '<', '>', '~'])),
    );
    assert!(pins.len() >= 6, "the pins found: {pins:?}");
    let mut wrong: Vec<String> = pins
        .iter()
        .filter_map(|pin| match () {
            _ if !pin.contains("==") && !pin.contains('@') => Some(format!("{pin}: a range")),
            _ if !tried.contains(pin.as_str()) => Some(format!("{pin}: not in README")),
            _ => None,
        })
        .collect();
    if tried.contains("not recorded") {
        wrong.push("README says versions were \"not recorded\"".into());
    }
    assert!(
        wrong.is_empty(),
        "README's Clients tried:\n{}",
        wrong.join("\n")
    );
}

/// A `run NAME` marker names one block among README.md and every chapter: [`block`] takes the
/// first, so a second of the same name would never run.
#[test]
fn every_run_name_is_used_once() {
    let mut seen = std::collections::HashMap::new();
    for (path, text) in docs() {
        for (marker, _, _) in blocks(&text) {
            if let Some(name) = marker.as_deref().and_then(run_name) {
                if let Some(first) = seen.insert(name.to_string(), path.clone()) {
                    panic!("`<!-- readme: run {name} -->` is in {first} and in {path}");
                }
            }
        }
    }
    // The names the tests read: here, tests/proxy/cloud.rs, tests/fleet/deploy.rs,
    // tests/python/test_readme.py and tests/node/readme.test.mjs.
    for name in [
        "quick-start",
        "claim",
        "labels-by-hand",
        "plugin-config",
        "plugin-script",
        "cloud_agent",
        "fleet-config",
        "python-guard",
        "node-guard",
    ] {
        assert!(seen.contains_key(name), "no block is marked `run {name}`");
    }
}

/// Quick start: `sandguard -- sh -c 'docker run -d sandguard-test/busybox …; sleep 3'`; the
/// container is gone once the program has exited. `cargo run --release --` stands for the
/// binary this test was built with; the block's other command (`tests/run.sh`) is what runs
/// this test.
#[test]
fn the_quick_start_guards_a_program() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("readme-quick");
    let text = block("quick-start");
    let line = text
        .lines()
        .find(|l| l.starts_with("tests/engine.sh && cargo run --release -- "))
        .expect("the quick start runs `tests/engine.sh && cargo run --release -- …`");
    // The set-up half is tests/run.sh's own (it ran before this test, and CI runs the whole
    // line as written on its clean clone); the rest is run here.
    let command = line.replacen("tests/engine.sh && cargo run --release --", "sandguard", 1);
    // The README's command itself, as a user types it (stderr a pipe here: no closing line).
    let out = run(Command::new("sh")
        .env("PATH", path_with_sandguard())
        .env("HOME", s.path())
        .env("XDG_STATE_HOME", s.path().join("state"))
        .env("XDG_CONFIG_HOME", s.path().join("config"))
        .env_remove("SANDGUARD_CONFIG")
        .args(["-c", &command]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = out.stdout.trim().to_string();
    assert!(!id.is_empty(), "docker run printed the container's id");
    eventually(
        Duration::from_secs(10),
        "the container is reclaimed, though nothing labelled it",
        || !container_exists(&id),
    );
    let comment = text
        .lines()
        .find(|l| l.starts_with("# sandguard: "))
        .expect("the quick start shows what the terminal is told");
    // What the terminal shows, the time aside (README shows a run of about 3 s): the shape
    // tests/proxy/defaults.rs reads off a pseudo-terminal (there: 2 of 2).
    let said = comment
        .strip_prefix("# sandguard: removed 1 sandbox the program left; ")
        .unwrap_or_else(|| panic!("README's closing line: {comment:?}"));
    let used = crate::support::terminal::used(said)
        .unwrap_or_else(|| panic!("README's closing line says what the run used: {comment:?}"));
    assert!((3.0..4.0).contains(&used.seconds), "{comment:?}");
    assert_eq!(used.by_provider, [("docker".to_string(), used.seconds)]);
}

/// Claiming what cannot carry labels, in a shell script under a session: the claimed
/// container is reclaimed when the script is killed.
#[test]
fn the_claim_snippet_claims_an_unlabelled_container() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("readme-claim");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{}\necho \"$id\" > {ids}.tmp; mv {ids}.tmp {ids}\nexec sleep 600",
        block("claim"),
        ids = ids.display()
    );
    let mut owner = crate::watch::wrapper::guarded(&s, &script);
    let id = crate::watch::wrapper::wait_for_file(&ids, &mut owner).remove(0);
    let mut r = Resources::default();
    r.adopt_container(&id);
    assert!(container_exists(&id));
    crate::watch::wrapper::unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    eventually(
        Duration::from_secs(10),
        "the claimed container is reclaimed",
        || !container_exists(&id),
    );
}

/// Guarding a container by hand with a label, then `ps` and `stop --all --session`.
#[test]
fn guarding_a_container_by_hand_with_a_label() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("readme-labels");
    let mut script = block("labels-by-hand");
    // A session name of this run's own, so parallel runs cannot meet.
    let session = format!("my-session-{}", unique());
    script = script.replace("my-session", &session);
    let out = Command::new("sh")
        .args(["-ec", &script])
        .envs(sandguard(&s).get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("PATH", path_with_sandguard())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&session),
        "`sandguard ps` shows the container:\n{stdout}"
    );
    assert!(stdout.contains("1 stopped."), "{stdout}");
    assert!(session_containers(&session).is_empty());
}

/// The plugin script, installed as `sandguard-provider-acme`, and the config table that
/// names a plugin's command: both work as README says.
#[test]
fn the_plugin_example_and_its_config_work() {
    let s = Scratch::new("readme-plugin");
    let bin = s.path().join("bin");
    let dir = s.path().join("acme");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    let script = bin.join("acme-sandguard");
    std::fs::write(&script, block("plugin-script")).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.join("sb-1.json"),
        r#"{"id":"sb-1","status":"running","labels":{"sandguard.session":"abc"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("other.json"), r#"{"id":"other","labels":{}}"#).unwrap();
    // The config block as README writes it, with the command pointed at this copy.
    let config = s.path().join("acme.toml");
    let table = block("plugin-config").replace(
        "/usr/local/bin/acme-sandguard",
        &script.display().to_string(),
    );
    std::fs::write(
        &config,
        format!("{table}\n[providers.docker]\nenabled = false\n"),
    )
    .unwrap();
    let sg = || {
        let mut c = sandguard(&s);
        c.env("SANDGUARD_CONFIG", &config).env("ACME_DIR", &dir);
        c
    };
    let out = run(sg().args(["ps", "--json", "--provider", "acme"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let ids: Vec<&str> = v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["instance_id"].as_str())
        .collect();
    assert_eq!(ids, ["sb-1"], "{v}");
    let out = run(sg().args(["stop", "--all", "--session", "abc", "--provider", "acme"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!dir.join("sb-1.json").exists(), "the plugin removed sb-1");
    assert!(
        dir.join("other.json").exists(),
        "an unlabelled sandbox is never touched"
    );
}

/// The Budgets chapter's limit, as written: the second `docker run` is refused with the
/// proxy's message, and the session made exactly one container.
#[test]
fn the_budget_snippet_refuses_the_second_run() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("readme-budget");
    let out = Command::new("sh")
        .args(["-c", &block("budget-flags")])
        .envs(sandguard(&s).get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("PATH", path_with_sandguard())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sandguard: limit `sandboxes` reached"),
        "the docker CLI shows the limit:\n{stderr}"
    );
    let made = String::from_utf8_lossy(&out.stdout);
    assert_eq!(made.lines().count(), 1, "one container was made: {made}");
    let id = made.trim();
    eventually(
        Duration::from_secs(10),
        "the one container is reclaimed when the program ends",
        || !container_exists(id),
    );
}
