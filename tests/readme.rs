//! README's code blocks, run as written: the snippets are read out of README.md itself, so the
//! documentation and what the tests run cannot drift apart.
//!
//! Every fenced block in README.md is preceded by a marker line: `<!-- readme: run NAME -->`
//! (a test here, or in tests/python/test_readme.py, runs it) or `<!-- readme: not run
//! (reason) -->`. A block without a marker fails [`every_block_is_run_or_says_why_not`], so a
//! new snippet cannot slip in untested by accident.
//!
//! The snippets use the image name `busybox`; the daemon has only the test image, which these
//! tests tag as `busybox:latest` (a local tag, nothing is pulled).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;
use crate::wrapper::path_with_sandguard;

/// The README's text.
fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
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

/// The body of the block marked `<!-- readme: run NAME … -->`.
pub(crate) fn block(name: &str) -> String {
    let want = format!("<!-- readme: run {name}");
    blocks(&readme())
        .into_iter()
        .find(|(m, _, _)| m.as_deref().is_some_and(|m| m.starts_with(&want)))
        .map_or_else(
            || panic!("README has no block marked `{want} -->`"),
            |(_, _, body)| body,
        )
}

/// `busybox:latest` as a local tag of the test image.
fn busybox() {
    require_docker();
    let ok = Command::new("docker")
        .args(["tag", IMAGE, "busybox:latest"])
        .status()
        .unwrap()
        .success();
    assert!(ok, "docker tag {IMAGE} busybox:latest");
}

/// The ids of running containers labelled `sandguard.session=SESSION`.
fn labelled(session: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter"])
        .arg(format!("label=sandguard.session={session}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_block_is_run_or_says_why_not() {
    for (marker, lang, body) in blocks(&readme()) {
        let first = body.lines().next().unwrap_or("");
        assert!(
            marker.is_some(),
            "a ```{lang} block in README.md (starting {first:?}) has no `<!-- readme: run NAME -->` or `<!-- readme: not run (why) -->` line before it"
        );
    }
}

/// Quick start: `sandguard -- sh -c 'docker run -d sandguard-test/busybox …; sleep 3'`; the
/// container is gone once the program has exited. `cargo run --release --` stands for the
/// binary this test was built with; the block's other command (`tests/run.sh`) is what runs
/// this test.
#[test]
fn the_quick_start_guards_a_program() {
    busybox();
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
    assert_eq!(
        comment, "# sandguard: removed 1 sandbox the program left (docker 1)",
        "what README shows is what tests/zero_code.rs sees on a terminal (there: 2 of 2)"
    );
}

/// Claiming what cannot carry labels, in a shell script under a session: the claimed
/// container is reclaimed when the script is killed.
#[test]
fn the_claim_snippet_claims_an_unlabelled_container() {
    busybox();
    let _g = shared();
    let s = Scratch::new("readme-claim");
    let ids = s.path().join("ids");
    let script = format!(
        "set -e\n{}\necho \"$id\" > {ids}.tmp; mv {ids}.tmp {ids}\nexec sleep 600",
        block("claim"),
        ids = ids.display()
    );
    let mut owner = crate::wrapper::guarded(&s, &script);
    let id = crate::wrapper::wait_for_file(&ids, &mut owner).remove(0);
    let mut r = Resources::default();
    r.adopt_container(&id);
    assert!(container_exists(&id));
    crate::wrapper::unsafe_kill(owner.id() as i32, libc::SIGKILL);
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
    busybox();
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
    assert!(labelled(&session).is_empty());
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
