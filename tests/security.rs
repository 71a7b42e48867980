//! Security: secrets never reach output, logs or the ledger; an unsafe state directory is
//! refused; look-alike sandboxes are never removed.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use sandguard::labels::SESSION;

const SECRETS: [(&str, &str); 6] = [
    ("E2B_API_KEY", "e2b_5ec4e75ec4e75ec4e75ec4e7"),
    ("DAYTONA_API_KEY", "dtn_5ecret5ecret5ecret5ecret5ecre"),
    ("FLY_API_TOKEN", "FlyV1 fm2_5ecret5ecret5ecret"),
    ("TENKI_API_KEY", "tk_5ecret5ecret5ecret5ecret"),
    ("MODAL_TOKEN_ID", "ak-5ecret5ecret5ecret"),
    ("MODAL_TOKEN_SECRET", "as-5ecret5ecret5ecret"),
];

/// Every provider configured with a fake secret, every endpoint a closed loopback port, so
/// that every command meets errors (the likeliest place for a secret to leak).
fn with_secrets(s: &Scratch) -> Command {
    let mut cmd = sandguard(s);
    for (var, value) in SECRETS {
        cmd.env(var, value);
    }
    for var in [
        "E2B_API_URL",
        "DAYTONA_API_URL",
        "FLY_API_HOSTNAME",
        "TENKI_API_URL",
        "MODAL_SERVER_URL",
    ] {
        cmd.env(var, "http://127.0.0.1:1");
    }
    cmd.env("FLY_APP_NAME", "app")
        .env("SANDGUARD_LOG", "trace")
        .env("DOCKER_HOST", "tcp://127.0.0.1:1");
    cmd
}

fn assert_no_secret(what: &str, text: &str) {
    for (var, value) in SECRETS {
        let bare = value.trim_start_matches("FlyV1 ");
        assert!(
            !text.contains(bare),
            "{what} contains the value of {var}:\n{text}"
        );
    }
}

#[test]
fn no_command_prints_or_stores_a_secret() {
    let s = Scratch::new("secrets");
    let commands: &[&[&str]] = &[
        &["ps"],
        &["ps", "--json"],
        &["providers"],
        &["providers", "--json"],
        &["stop", "--all"],
        &["stop", "--all", "--json"],
        &["stop", "abc"],
        &["sweep"],
        &["sweep", "--json"],
        &["sessions", "--json"],
        &[
            "--",
            "sh",
            "-c",
            "env | grep -v -e _KEY -e _TOKEN -e _SECRET; exit 3",
        ],
    ];
    for args in commands {
        let out = run(with_secrets(&s).args(*args));
        assert_no_secret(&format!("stdout of {args:?}"), &out.stdout);
        assert_no_secret(&format!("stderr of {args:?}"), &out.stderr);
    }
    // The guarded program's sidecar reclaims after it exits; wait for its log and journal.
    std::thread::sleep(Duration::from_millis(500));
    let mut files = 0;
    for entry in walk(&s.path().join("state")) {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        assert_no_secret(&entry.display().to_string(), &text);
        files += 1;
    }
    assert!(
        files >= 2,
        "the ledger (journal and log) was written and checked"
    );

    // Secrets from the config file are just as private.
    let config = s.path().join("secrets.toml");
    std::fs::write(
        &config,
        "[providers.e2b]\napi_key = \"e2b_f11ef11ef11ef11e\"\napi_url = \"http://127.0.0.1:1\"\n",
    )
    .unwrap();
    let out = run(sandguard(&s)
        .env("SANDGUARD_LOG", "trace")
        .arg("--config")
        .arg(&config)
        .args(["ps", "--json"]));
    assert_eq!(out.code, 1);
    assert!(!out.stdout.contains("f11ef11e") && !out.stderr.contains("f11ef11e"));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn an_unsafe_state_directory_is_refused() {
    let s = Scratch::new("statedir");
    let state = s.path().join("state/sandguard");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run(sandguard(&s).args(["sessions"]));
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("writable"), "{}", out.stderr);
    let out = run(sandguard(&s).args(["--", "true"]));
    assert_eq!(
        out.code, 125,
        "the wrapper refuses to run without a safe ledger: {}",
        out.stderr
    );
    assert!(
        std::fs::read_dir(&state).unwrap().next().is_none(),
        "nothing was written there"
    );

    // Owned by another user (the tests run as root in CI, which can hand it over).
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    if sandguard::unix::geteuid() == 0 {
        let status = Command::new("chown")
            .args(["65534", state.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let out = run(sandguard(&s).args(["sessions"]));
        assert_eq!(out.code, 1);
        assert!(out.stderr.contains("owned by"), "{}", out.stderr);
    }
}

#[test]
fn look_alikes_are_never_removed() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("lookalikes");
    let mut r = Resources::default();
    // A stranger whose *name* looks like a container id the owner claims.
    let fake_id = format!("{}abcdef", &unique()[..6]);
    let named_like_an_id = r.container_with(&[], &["--name", &fake_id]);
    let ids = s.path().join("ids");
    let script = format!(
        "L=$(echo \"$SANDGUARD_LABELS\" | sed 's/^/--label /; s/,/ --label /g')\n\
         docker run -d --network none --name \"sg-$SANDGUARD_SESSION-mine\" $L {IMAGE} sleep 600 > {ids}.tmp\n\
         sandguard claim docker {fake_id}\n\
         echo \"$SANDGUARD_SESSION\" >> {ids}.tmp; mv {ids}.tmp {ids}\n\
         sleep 600",
        ids = ids.display()
    );
    let mut owner = crate::wrapper::guarded(&s, &script);
    let got = crate::wrapper::wait_for_file(&ids, &mut owner);
    let (mine, session) = (got[0].clone(), got[1].clone());
    let same_prefix = r.container_with(&[], &["--name", &format!("sg-{session}-theirs")]);
    let other_value = r.container(&[(SESSION, &format!("{session}x"))]);
    let other_key = r.container(&[("sandguard.session.id", &session), ("session", &session)]);
    crate::wrapper::unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    eventually(
        Duration::from_secs(5),
        "the owner's own container is reclaimed",
        || !container_exists(&mine),
    );
    std::thread::sleep(Duration::from_millis(300));
    for (what, id) in [
        ("a name that looks like a claimed id", &named_like_an_id),
        ("the same name prefix", &same_prefix),
        ("the session key with another value", &other_value),
        ("the session value under another key", &other_key),
    ] {
        assert!(container_exists(id), "a look-alike ({what}) was removed");
    }
}
