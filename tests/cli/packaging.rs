//! The packaging files are checked by the tools that will read them: the systemd units by
//! `systemd-analyze verify` (Debian's systemd; tests/run.sh installs it), the launchd agent by
//! a plist parser (Python's `plistlib`) and its command by `/bin/sh`, as launchd would run it;
//! they run the sweep the README says they run, from where README's Install puts the binary. The
//! man page packagers install (`sandguard man`) names no page that does not exist and has
//! EXIT STATUS and ENVIRONMENT; `--version` names the commit of a git checkout.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{run, sandguard, write_executable, Scratch};

fn packaging(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(rel)
}

const LAUNCHD_AGENT: &str = "launchd/io.github.sandguard.sweep.plist";

/// A plist as JSON, parsed by Python's `plistlib` (expat underneath: a malformed file, an XML
/// comment with `--` in it included, fails here as it would fail launchd).
fn plist(path: &Path) -> serde_json::Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, plistlib, sys; print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))",
        ])
        .arg(path)
        .output()
        .expect("python3 (tests/run.sh installs it)");
    assert!(
        out.status.success(),
        "{} is not a valid plist: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The launchd agent's `/bin/sh -c COMMAND`: the COMMAND.
fn launchd_command(agent: &serde_json::Value) -> String {
    let argv: Vec<&str> = agent["ProgramArguments"]
        .as_array()
        .expect("ProgramArguments is an array")
        .iter()
        .map(|a| a.as_str().expect("ProgramArguments holds strings"))
        .collect();
    match argv.as_slice() {
        ["/bin/sh", "-c", command] => (*command).to_string(),
        _ => panic!("ProgramArguments is not /bin/sh -c COMMAND: {argv:?}"),
    }
}

/// The agent parses and keeps the sweep running, and its command, run by `/bin/sh` in an
/// environment like launchd's (HOME, a system PATH, nothing else), runs
/// `~/.cargo/bin/sandguard sweep --every 5m` (a stub there that records its arguments) and
/// appends what it prints to `~/Library/Logs`.
#[test]
fn the_launchd_agent_parses_and_its_command_runs_the_sweep_from_cargo_bin() {
    let agent = plist(&packaging(LAUNCHD_AGENT));
    assert_eq!(agent["Label"], "io.github.sandguard.sweep");
    assert_eq!(agent["RunAtLoad"], true);
    assert_eq!(agent["KeepAlive"], true);
    assert_eq!(agent["ProcessType"], "Background");
    assert!(
        agent["ThrottleInterval"].as_u64().is_some_and(|t| t >= 10),
        "ThrottleInterval: {}",
        agent["ThrottleInterval"]
    );
    let command = launchd_command(&agent);

    let s = Scratch::new("launchd");
    let home = s.path().join("home");
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    // Every Mac has it; the agent does not make it.
    std::fs::create_dir_all(home.join("Library/Logs")).unwrap();
    let args = s.path().join("args");
    let stub = bin.join("sandguard");
    write_executable(
        &stub,
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho 'a verdict on stdout'\necho 'a warning on stderr' >&2\n",
            args.display()
        ),
    );

    let out = Command::new("/bin/sh")
        .args(["-c", &command])
        .env_clear()
        .env("HOME", &home)
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The shell's own complaint (no such file) goes to the log too: the redirection comes first.
    let log = std::fs::read_to_string(home.join("Library/Logs/sandguard-sweep.log"));
    assert!(
        out.status.success(),
        "{command}: {:?}\n{said}\nlog: {log:?}",
        out.status
    );
    assert!(said.is_empty(), "everything goes to the log:\n{said}");
    let ran = std::fs::read_to_string(&args)
        .unwrap_or_else(|e| panic!("{command} did not run {}: {e}", stub.display()));
    assert_eq!(ran.lines().collect::<Vec<_>>(), ["sweep", "--every", "5m"]);
    assert_eq!(log.unwrap(), "a verdict on stdout\na warning on stderr\n");
}

#[test]
fn the_systemd_units_verify_clean_and_have_no_ordering_cycle() {
    let units = [
        "sandguard-sweep.service",
        "sandguard-sweep.timer",
        "sandguard-sweep-once.service",
    ];
    let s = Scratch::new("systemd-verify");
    // The units run %h/.cargo/bin/sandguard, where `cargo install` puts it (README.md,
    // "Install"): give `verify` a home where it exists.
    let home = s.path().join("home");
    std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_sandguard"),
        home.join(".cargo/bin/sandguard"),
    )
    .unwrap();
    let runtime = s.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    let dir = packaging("systemd");
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .args(units.iter().map(|u| dir.join(u)))
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("systemd-analyze (Debian's systemd; tests/run.sh installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    // verify prints problems it tolerates (an unknown key, a bad value) but still exits 0.
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify complained:\n{said}"
    );
    // What verify cannot see without enabling the unit: a unit WantedBy= a target and
    // After= it is an ordering cycle (a target is ordered after the units it wants).
    for unit in units {
        let text = std::fs::read_to_string(dir.join(unit)).unwrap();
        let values = |key: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix(key))
                .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .collect()
        };
        for target in values("WantedBy=") {
            assert!(
                !values("After=").contains(&target),
                "{unit}: After={target} with WantedBy={target} is an ordering cycle"
            );
        }
    }
}

#[test]
fn the_man_page_names_no_missing_page_and_has_exit_status_and_environment() {
    let s = Scratch::new("man");
    let out = run(sandguard(&s).arg("man"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let page = &out.stdout;
    for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH SUBCOMMANDS"] {
        assert!(page.contains(section), "missing {section}");
    }
    for code in ["125", "126", "127", "128+N"] {
        assert!(page.contains(code), "the wrapper's {code}");
    }
    // Every variable the config reads is named (the dash-escaped form roff shows).
    for var in [
        "SANDGUARD_CONFIG",
        "SANDGUARD_STATE_DIR",
        "SANDGUARD_LOG",
        "SANDGUARD_GRACE",
        "SANDGUARD_FLEET_STORE",
        "SANDGUARD_HOST_ID",
        "DOCKER_HOST",
        "DOCKER_CONTEXT",
        "DOCKER_CONFIG",
        "DOCKER_API_VERSION",
        "E2B_API_KEY",
        "DAYTONA_API_KEY",
        "FLY_API_TOKEN",
        "MODAL_TOKEN_ID",
        "TENKI_API_KEY",
    ] {
        assert!(page.contains(var), "ENVIRONMENT names {var}");
    }
    // A page reference is `name(N)`; the only page sandguard installs is sandguard(1).
    let mut rest = page.as_str();
    while let Some(at) = rest.find("(1)") {
        let before = &rest[..at];
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '\\' || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        assert_eq!(
            name, "sandguard",
            "a reference to a page that does not exist: {name}(1)"
        );
        rest = &rest[at + 3..];
    }
    assert!(
        !page.contains("sandguard\\-run"),
        "no sandguard-run(1) and the like"
    );
    // Every subcommand is described in this one page.
    for sub in [
        "run",
        "watch",
        "ps",
        "stop",
        "providers",
        "sessions",
        "sweep",
        "claim",
    ] {
        assert!(page.contains(&format!(".SS \"sandguard {sub}\"")), "{sub}");
    }
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let root = env!("CARGO_MANIFEST_DIR");
    let head = Command::new("git")
        .args(["-C", root, "rev-parse", "--short=12", "HEAD"])
        .output()
        .expect("git, to know which commit this checkout is at");
    let head = String::from_utf8(head.stdout).unwrap();
    let head = head.trim();
    assert_eq!(head.len(), 12, "this test runs in a git checkout: {head:?}");
    let s = Scratch::new("version");
    let out = run(sandguard(&s).arg("--version"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        format!("sandguard {} ({head})", env!("CARGO_PKG_VERSION"))
    );
}

/// Every packaging file runs the binary from where README's Install puts it: `cargo install`'s
/// `~/.cargo/bin` for the systemd units, the launchd agent and the cron line, the image's
/// `/usr/local/bin` (its entrypoint) for the Kubernetes manifests.
#[test]
fn the_packaging_files_run_the_binary_where_the_install_puts_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    // README's Install section and the book's Install chapter both carry the table.
    let readme = read("README.md");
    let install = readme
        .split("\n## Install\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("README.md has an Install section");
    let chapter = read("book/src/install.md");
    for (what, install) in [
        ("README.md's Install", install),
        ("book/src/install.md", &chapter),
    ] {
        assert!(
            install.contains(
                "| `cargo install --locked --path .` (this checkout) | `~/.cargo/bin/` |"
            ),
            "{what}"
        );
        assert!(install.contains("`/usr/local/bin/` in the image"), "{what}");
        assert!(install.contains("the launchd agent"), "{what}");
    }
    for unit in ["sandguard-sweep.service", "sandguard-sweep-once.service"] {
        let text = std::fs::read_to_string(packaging("systemd").join(unit)).unwrap();
        let exec = text.lines().find_map(|l| l.strip_prefix("ExecStart="));
        assert!(
            exec.is_some_and(|e| e.starts_with("%h/.cargo/bin/sandguard ")),
            "{unit}: {exec:?}"
        );
    }
    assert!(read("packaging/README.md").contains("* * * * $HOME/.cargo/bin/sandguard sweep"));
    assert!(read("packaging/container/Containerfile")
        .contains(r#"ENTRYPOINT ["/usr/local/bin/sandguard"]"#));
    assert!(read("packaging/container/build.sh").contains(r#""$root/usr/local/bin/sandguard""#));
    let agent = launchd_command(&plist(&packaging(LAUNCHD_AGENT)));
    assert!(
        agent.starts_with(r#"exec "$HOME/.cargo/bin/sandguard" "#),
        "{LAUNCHD_AGENT}: {agent}"
    );
}
