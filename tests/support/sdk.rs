//! The vendors' own Python SDKs (`e2b`, `daytona`, `modal`, pinned in tests/run.sh), run
//! against the project's emulators: a client nobody here wrote checks each emulator's wire.
//!
//! tests/run.sh installs them into a venv of their own and exports its interpreter as
//! `SANDGUARD_SDK_PYTHON`. A test that needs them fails loudly, with instructions, when it is
//! missing: never a skip.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The interpreter that has the vendors' SDKs.
pub fn python() -> PathBuf {
    let python = std::env::var_os("SANDGUARD_SDK_PYTHON").map(PathBuf::from);
    match python {
        Some(p) if p.exists() => p,
        _ => panic!(
            "these tests drive the emulators with the vendors' SDKs: run tests/run.sh (it \
             installs e2b, daytona and modal into target/sdk-venv and exports \
             SANDGUARD_SDK_PYTHON), or set SANDGUARD_SDK_PYTHON to a python that has them"
        ),
    }
}

/// Runs `script` with the SDKs' interpreter and `env`; the caller asserts on the output.
pub fn run(script: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(python());
    cmd.arg("-c").arg(script);
    // No user configuration of the SDKs may leak in (~/.modal.toml, a real key).
    for var in [
        "E2B_API_KEY",
        "E2B_DOMAIN",
        "E2B_API_URL",
        "DAYTONA_API_KEY",
        "DAYTONA_API_URL",
        "DAYTONA_JWT_TOKEN",
        "DAYTONA_ORGANIZATION_ID",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
        "MODAL_SERVER_URL",
        "MODAL_PROFILE",
        "MODAL_ENVIRONMENT",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", std::env::temp_dir());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the SDKs' python runs")
}

/// `run`, asserting it succeeded; returns its stdout.
pub fn ok(script: &str, env: &[(&str, &str)]) -> String {
    let out = run(script, env);
    assert!(
        out.status.success(),
        "the SDK script failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
