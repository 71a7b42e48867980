//! Zero code by default, through the real binary: `sandguard -- CMD` with no flags serves the
//! Docker proxy when a daemon answers and the cloud proxy for each of E2B and Daytona whose
//! credentials are found (Daytona's also in `./.env`), so unmodified programs (the docker CLI,
//! the E2B and Daytona SDKs) are guarded and reclaimed after a SIGKILL; it says what it did on
//! the terminal, warns when a default cannot be served, and asked-for but impossible stays an
//! error that leaves no session behind.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::proxy::cloud::{first_line, guarded, kill, DAYTONA_KEY, E2B_KEY};
use crate::support::daytona::Daytona;
use crate::support::terminal::{used, Terminal};
use crate::support::*;
use crate::watch::wrapper::{unsafe_kill, wait_for_file};

/// `sandguard ARGS -- sh -c SCRIPT`, in its own process group, stderr on `terminal`.
pub(crate) fn wrapped(
    s: &Scratch,
    args: &[&str],
    script: &str,
    terminal: &mut Terminal,
) -> std::process::Child {
    sandguard(s)
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(terminal.stderr())
        .process_group(0)
        .spawn()
        .expect("spawn sandguard")
}

/// Two containers made with the plain docker CLI (no labels, no claims), their ids in `ids`.
fn two_plain_containers(ids: &std::path::Path) -> String {
    format!(
        "for i in 1 2; do docker run -d --network none {IMAGE} sleep 600 >> {ids}.tmp; done\n\
         mv {ids}.tmp {ids}\nexec sleep 600",
        ids = ids.display()
    )
}

fn label(id: &str) -> String {
    let out = Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{index .Config.Labels \"sandguard.session\"}}",
            id,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn bystander() -> String {
    let out = Command::new("docker")
        .args(["run", "-d", "--network", "none", IMAGE, "sleep", "600"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn remove(id: &str) {
    let _ = Command::new("docker").args(["rm", "-f", id]).output();
}

#[test]
fn plain_docker_commands_with_no_flags_are_reclaimed_after_a_sigkill_and_the_terminal_is_told() {
    let _g = shared();
    require_docker();
    let s = Scratch::new("zero-docker");
    let stranger = bystander();
    let ids = s.path().join("ids");
    let mut terminal = Terminal::open();
    let mut child = wrapped(&s, &[], &two_plain_containers(&ids), &mut terminal);
    let created = wait_for_file(&ids, &mut child);
    assert_eq!(created.len(), 2, "{created:?}");
    for id in &created {
        assert!(!label(id).is_empty(), "{id} carries the session's label");
    }
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    let _ = child.wait();
    eventually(Duration::from_secs(10), "both containers are gone", || {
        created.iter().all(|id| !container_exists(id))
    });
    let said = "sandguard: removed 2 sandboxes the program left; this run used ";
    eventually(Duration::from_secs(5), "the terminal is told", || {
        terminal.text().ends_with('\n')
    });
    assert!(
        container_exists(&stranger),
        "a container made elsewhere stays"
    );
    remove(&stranger);
    let text = terminal.text();
    assert!(
        text.starts_with(said) && text.lines().count() == 1,
        "one line, and nothing else: {text:?}"
    );
    // What it says the run used is what the ledger counts once the session has ended.
    let line = used(&text).unwrap();
    assert_eq!(line.cost, None, "no prices, no money: {text:?}");
    let session = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout)["sessions"][0]
        ["session"]
        .as_str()
        .unwrap()
        .to_string();
    eventually(Duration::from_secs(10), "the session is reclaimed", || {
        let v = json(&run(sandguard(&s).args(["sessions", "show", &session, "--json"])).stdout);
        v["state"] == "reclaimed"
    });
    let show = json(&run(sandguard(&s).args(["sessions", "show", &session, "--json"])).stdout);
    let counted = show["spend"]["seconds"].as_f64().unwrap();
    assert!(
        (line.seconds - counted).abs() <= line.within + 0.001,
        "the line says {line:?}, the ledger counts {counted} s"
    );
    assert_eq!(line.by_provider.len(), 1, "{text:?}");
    assert_eq!(line.by_provider[0].0, "docker", "{text:?}");
}

#[test]
fn quiet_or_a_stderr_that_is_no_terminal_hears_nothing_at_the_end() {
    let _g = shared();
    require_docker();
    let s = Scratch::new("zero-quiet");
    let ids = s.path().join("ids");
    let mut terminal = Terminal::open();
    let mut child = wrapped(&s, &["--quiet"], &two_plain_containers(&ids), &mut terminal);
    let created = wait_for_file(&ids, &mut child);
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    let _ = child.wait();
    eventually(Duration::from_secs(10), "both containers are gone", || {
        created.iter().all(|id| !container_exists(id))
    });
    // The line would be written right after the first pass; the journal's end is later.
    eventually(Duration::from_secs(5), "the session has ended", || {
        let out = run(sandguard(&s).args(["sessions", "--json"]));
        out.stdout.contains("\"reclaimed\"")
    });
    assert_eq!(terminal.text(), "", "--quiet says nothing");

    // A pipe: the program's output ends when the program does, and no line follows.
    let piped = run(sandguard(&s).args([
        "--",
        "sh",
        "-c",
        &format!("docker run -d --network none {IMAGE} sleep 600"),
    ]));
    assert_eq!(piped.code, 0, "{}", piped.stderr);
    let id = piped.stdout.trim().to_string();
    eventually(Duration::from_secs(10), "its container is gone", || {
        !container_exists(&id)
    });
    assert_eq!(
        piped.stderr, "",
        "nothing on a stderr that is not a terminal"
    );
}

#[test]
fn a_default_that_cannot_be_served_is_one_warning_and_asked_for_it_is_exit_125_leaving_no_session()
{
    let _g = shared();
    let s = Scratch::new("zero-warn");
    let nowhere = "unix:///nonexistent/docker.sock";
    let out = run(sandguard(&s).env("DOCKER_HOST", nowhere).args([
        "--",
        "sh",
        "-c",
        "echo \"$DOCKER_HOST\"",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), nowhere, "no proxy in the program's way");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(
        lines[0].starts_with(&format!(
            "sandguard: warning: no Docker daemon answers at {nowhere} (DOCKER_HOST)"
        )) && lines[0].ends_with("the Docker proxy is off for this program"),
        "{}",
        lines[0]
    );

    // Asked for, a proxy to a daemon that does not answer is not served: exit 125 before the
    // program runs, saying why.
    let marker = s.path().join("ran");
    let asked = run(sandguard(&s).env("DOCKER_HOST", nowhere).args([
        "run",
        "--docker-proxy",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]));
    assert_eq!(asked.code, 125, "{}", asked.stderr);
    assert!(!marker.exists(), "the program ran");
    assert!(
        asked.stderr.starts_with("sandguard: ")
            && asked
                .stderr
                .contains(&format!("no Docker daemon answers at {nowhere}"))
            && asked
                .stderr
                .contains("cannot start the Docker proxy (--docker-proxy"),
        "{}",
        asked.stderr
    );

    // A Docker context that cannot be followed: a warning by default, an error asked for.
    let docker_config = s.path().join("docker-config");
    std::fs::create_dir_all(&docker_config).unwrap();
    let context = |args: &[&str]| {
        run(sandguard(&s)
            .env_remove("DOCKER_HOST")
            .env("DOCKER_CONFIG", &docker_config)
            .env("DOCKER_CONTEXT", "gone")
            .args(args)
            .args(["--", "sh", "-c", "echo ran"]))
    };
    let by_default = context(&[]);
    assert_eq!(
        (by_default.code, by_default.stdout.trim()),
        (0, "ran"),
        "{}",
        by_default.stderr
    );
    assert!(
        by_default.stderr.starts_with("sandguard: warning: Docker")
            && by_default.stderr.contains("\"gone\"")
            && by_default.stderr.lines().count() == 1,
        "{}",
        by_default.stderr
    );
    let asked = context(&["--docker-proxy"]);
    assert_eq!(
        (asked.code, asked.stdout.as_str()),
        (125, ""),
        "{}",
        asked.stderr
    );
    assert!(
        asked.stderr.contains("cannot start the Docker proxy"),
        "{}",
        asked.stderr
    );

    let cloud = run(sandguard(&s)
        .env_remove("E2B_API_KEY")
        .env_remove("DAYTONA_API_KEY")
        .current_dir(s.path())
        .args(["run", "--cloud-proxy", "--", "sh", "-c", "echo ran"]));
    assert_eq!(
        (cloud.code, cloud.stdout.as_str()),
        (125, ""),
        "{}",
        cloud.stderr
    );

    // No failed start left a session behind; the two that ran ended.
    let sessions = run(sandguard(&s).args(["sessions", "--json"]));
    assert_eq!(sessions.code, 0, "{}", sessions.stderr);
    let listed = json(&sessions.stdout)["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed.len(), 2, "{}", sessions.stdout);
    eventually(Duration::from_secs(5), "no session is active", || {
        let now = run(sandguard(&s).args(["sessions", "--json"]));
        !now.stdout.contains("\"active\"")
    });
}

#[test]
fn the_short_form_takes_run_options_and_never_tips_dash_dash() {
    let _g = shared();
    let s = Scratch::new("zero-short");
    let off = run(sandguard(&s)
        .env("DOCKER_HOST", "unix:///elsewhere.sock")
        .args([
            "--no-docker-proxy",
            "--no-cloud-proxy",
            "--grace",
            "1m",
            "--",
            "sh",
            "-c",
            "echo \"$DOCKER_HOST\"",
        ]));
    assert_eq!(off.code, 0, "{}", off.stderr);
    assert_eq!(off.stdout.trim(), "unix:///elsewhere.sock");
    // Opted out of the proxy, Docker is still a configured provider that does not answer.
    assert_eq!(
        off.stderr.lines().collect::<Vec<_>>(),
        ["sandguard: warning: no Docker daemon answers at unix:///elsewhere.sock (DOCKER_HOST): \
          No such file or directory (os error 2)"],
        "one warning, and no word of a proxy"
    );
    for bad in [["--docker-proxi", "--"], ["-x", "--"]] {
        let out = run(sandguard(&s).args(bad).args(["true"]));
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains("unexpected argument"), "{}", out.stderr);
        assert!(
            !out.stderr.contains("-- -"),
            "no advice to run an option: {}",
            out.stderr
        );
    }
}

#[test]
fn an_unmodified_e2b_program_with_no_flags_killed_leaves_no_sandbox() {
    let s = Scratch::new("zero-e2b");
    let config = cloud_config(&s, "");
    let (emu, state) = crate::support::e2b::start(E2B_KEY);
    state.insert("stranger", &[("app", "x")]);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let program = r#"
import json, os, time
from e2b import Sandbox
ids = [Sandbox.create().sandbox_id for _ in range(2)]
print(json.dumps({"ids": ids, "url": os.environ["E2B_API_URL"]}), flush=True)
time.sleep(600)
"#;
    let mut child = guarded(&s, &config, &env, &[], program).spawn().unwrap();
    let said = first_line(&mut child);
    assert_ne!(
        said["url"],
        emu.url.as_str(),
        "the program talks to the proxy"
    );
    let ids: Vec<String> = serde_json::from_value(said["ids"].clone()).unwrap();
    assert!(ids.iter().all(|id| state.exists(id)));
    let stderr = kill(child);
    eventually(Duration::from_secs(10), "both sandboxes are gone", || {
        ids.iter().all(|id| !state.exists(id))
    });
    assert!(state.exists("stranger"));
    assert!(!stderr.contains(E2B_KEY), "{stderr}");
}

#[test]
fn a_daytona_key_in_dot_env_is_found_as_the_sdk_finds_it_and_its_sandboxes_are_reclaimed() {
    let s = Scratch::new("zero-daytona");
    let config = cloud_config(&s, "");
    let cloud = Daytona::start(DAYTONA_KEY);
    let project = s.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join(".env"),
        format!("DAYTONA_API_KEY={DAYTONA_KEY}\nDAYTONA_API_URL=http://127.0.0.1:9/evil\n"),
    )
    .unwrap();
    let url = cloud.api_url();
    // The endpoint comes from the environment (never from the file), the key only from it.
    let env = [("DAYTONA_API_URL", url.as_str()), ("DAYTONA_TARGET", "")];
    let program = r#"
import json, os, time
from daytona import Daytona
d = Daytona()
ids = [d.create().id]
print(json.dumps({"ids": ids, "url": os.environ["DAYTONA_API_URL"]}), flush=True)
time.sleep(600)
"#;
    let mut cmd = guarded(&s, &config, &env, &[], program);
    let mut child = cmd.current_dir(&project).spawn().unwrap();
    let said = first_line(&mut child);
    assert_ne!(said["url"], url.as_str(), "the program talks to the proxy");
    let ids: Vec<String> = serde_json::from_value(said["ids"].clone()).unwrap();
    let stderr = kill(child);
    eventually(Duration::from_secs(10), "its sandbox is gone", || {
        ids.iter().all(|id| !cloud.is_live(id))
    });
    assert!(!stderr.contains(DAYTONA_KEY), "{stderr}");
}

#[test]
fn a_provider_named_but_not_configured_is_exit_2_saying_how_to_configure_it() {
    let s = Scratch::new("zero-unconfigured");
    let config = cloud_config(&s, "");
    for args in [
        vec!["ps", "--provider", "daytona"],
        vec!["stop", "--all", "--provider", "daytona"],
        vec!["sweep", "--provider", "daytona"],
    ] {
        let out = run(sandguard(&s)
            .env("SANDGUARD_CONFIG", &config)
            .env_remove("DAYTONA_API_KEY")
            .env_remove("DAYTONA_JWT_TOKEN")
            .current_dir(s.path())
            .args(&args));
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stderr
                .contains("provider \"daytona\" is not configured")
                && out.stderr.contains("DAYTONA_API_KEY"),
            "{args:?}: {}",
            out.stderr
        );
        assert_eq!(out.stdout, "", "{args:?}");
    }
    let unknown = run(sandguard(&s).args(["ps", "--provider", "dokker"]));
    assert_eq!(unknown.code, 1, "{}", unknown.stderr);
}

/// With the Docker proxy served, the program gets `TESTCONTAINERS_RYUK_DISABLED=true`, so
/// testcontainers starts no Ryuk (an image to pull, the socket mounted into it); a value the
/// user set is left as it is, `keep_ryuk = true` sets nothing, and neither does a run without
/// the proxy.
#[test]
fn the_docker_proxy_turns_ryuk_off_unless_the_user_said_otherwise() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("zero-ryuk");
    let said = |cmd: &mut Command| {
        let out = run(cmd.args(["--", "sh", "-c", "echo \"[$TESTCONTAINERS_RYUK_DISABLED]\""]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout.trim().to_string()
    };
    let plain = || {
        let mut cmd = sandguard(&s);
        cmd.env_remove("TESTCONTAINERS_RYUK_DISABLED")
            .arg("--no-cloud-proxy");
        cmd
    };
    assert_eq!(said(&mut plain()), "[true]");
    assert_eq!(
        said(plain().env("TESTCONTAINERS_RYUK_DISABLED", "false")),
        "[false]"
    );
    assert_eq!(said(plain().arg("--no-docker-proxy")), "[]");
    let config = s.file("keep-ryuk.toml", "[watch]\nkeep_ryuk = true\n");
    assert_eq!(said(plain().env("SANDGUARD_CONFIG", &config)), "[]");
    std::fs::write(&config, "[watch]\nkeep_ryuk = \"yes\"\n").unwrap();
    let bad = run(plain()
        .env("SANDGUARD_CONFIG", &config)
        .args(["--", "true"]));
    assert_eq!(bad.code, 125, "{}", bad.stderr);
    assert!(
        bad.stderr
            .contains("keep-ryuk.toml:2: key `watch.keep_ryuk`"),
        "{}",
        bad.stderr
    );
}
