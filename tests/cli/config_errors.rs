//! Bad configuration is refused with exit 2, naming the file, the line and the key, and
//! changes nothing.

use crate::support::{run, sandguard, Scratch};

#[test]
fn an_unknown_key_exits_2_naming_file_line_and_key() {
    let s = Scratch::new("cfg");
    let file = s.file(
        "bad.toml",
        "log_level = \"warn\"\n\n[reclaim]\nconcurrency = 4\ndeadlin = \"2m\"\n",
    );
    let r = run(sandguard(&s).arg("--config").arg(&file).arg("ps"));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("{}:5:", file.display())),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("reclaim.deadlin"), "{}", r.stderr);
    assert!(r.stdout.is_empty());
}

#[test]
fn a_bad_duration_exits_2_naming_the_key() {
    let s = Scratch::new("cfg");
    let file = s.file("bad.toml", "[watch]\ngrace = \"ten minutes\"\n");
    let r = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &file)
        .arg("providers"));
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(":2:") && r.stderr.contains("watch.grace"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_xdg_config_is_found_and_a_missing_explicit_one_is_an_error() {
    let s = Scratch::new("cfg");
    let dir = s.path().join("config/sandguard");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[providers.docker]\nenabled = false\n",
    )
    .unwrap();
    // Docker switched off by the XDG config: nothing configured, so nothing to list.
    let r = run(sandguard(&s).arg("ps"));
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "No running sandboxes.\n"),
        "{}",
        r.stderr
    );
    let r = run(sandguard(&s).arg("providers"));
    assert!(
        r.stdout.contains("not configured") && r.stdout.contains("enabled = false"),
        "{}",
        r.stdout
    );

    let r = run(sandguard(&s)
        .arg("--config")
        .arg(s.path().join("nope.toml"))
        .arg("ps"));
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("nope.toml") && r.stderr.contains("cannot read"),
        "{}",
        r.stderr
    );
}

#[test]
fn the_documented_example_config_is_accepted() {
    // No cloud credentials in the environment, and the real Docker daemon: with the example
    // config, Docker is configured and answers, every cloud provider is left unconfigured,
    // and `providers` exits 0.
    crate::support::require_docker();
    let s = Scratch::new("cfg");
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/sandguard.toml");
    let mut cmd = sandguard(&s);
    for var in [
        "DOCKER_HOST",
        "E2B_API_KEY",
        "DAYTONA_API_KEY",
        "FLY_API_TOKEN",
        "TENKI_API_KEY",
        "TENKI_AUTH_TOKEN",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
    ] {
        cmd.env_remove(var);
    }
    let r = run(cmd.args(["--config", example, "providers", "--json"]));
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let v = crate::support::json(&r.stdout);
    let builtin = ["docker", "e2b", "daytona", "flyio", "tenki", "modal"];
    let rows = v["providers"].as_array().unwrap();
    for name in builtin {
        let row = rows
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {v}"));
        let expected = if name == "docker" {
            (true, serde_json::json!(true))
        } else {
            (false, serde_json::Value::Null)
        };
        assert_eq!(
            (row["configured"] == true, row["reachable"].clone()),
            expected,
            "{row}"
        );
    }
}

#[test]
fn bad_usage_exits_2() {
    let s = Scratch::new("cfg");
    assert_eq!(run(sandguard(&s).args(["stop"])).code, 2);
    assert_eq!(run(sandguard(&s).args(["stop", "abc", "--all"])).code, 2);
    assert_eq!(run(sandguard(&s).args(["frobnicate"])).code, 2);
    assert_eq!(run(sandguard(&s).args(["--help"])).code, 0);
}

#[test]
fn completions_and_the_man_page_come_from_the_cli() {
    let s = Scratch::new("docs");
    for shell in ["bash", "zsh", "fish"] {
        let out = run(sandguard(&s).args(["completions", shell]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stdout.contains("sweep") && out.stdout.contains("dry-run"),
            "{shell}"
        );
    }
    let out = run(sandguard(&s).arg("man"));
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains(".TH sandguard 1"));
    assert_eq!(run(sandguard(&s).args(["completions", "tcsh"])).code, 2);
}

#[test]
fn the_service_units_run_commands_the_cli_accepts() {
    // Each unit's command line, less the binary, must parse (checked with --help appended).
    let s = Scratch::new("units");
    let root = env!("CARGO_MANIFEST_DIR");
    for unit in [
        "packaging/systemd/sandguard-sweep.service",
        "packaging/systemd/sandguard-sweep-once.service",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{unit}")).unwrap();
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .expect("ExecStart");
        let args: Vec<&str> = exec.split_whitespace().skip(1).collect();
        let out = run(sandguard(&s).args(&args).arg("--help"));
        assert_eq!(out.code, 0, "{unit}: {args:?}: {}", out.stderr);
    }
}
