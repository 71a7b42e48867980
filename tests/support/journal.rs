//! Journals written by hand, as a sidecar would have written them, for tests that need a
//! ledger of exact times and states without running the sessions (`tests/cli/durations.rs`,
//! `tests/cli/colour.rs`, `tests/cli/session_ids.rs`, `tests/sweep/dashboard.rs`).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

use super::Scratch;

/// Writes `lines` as the journal of `session` in the scratch's state directory, as a sidecar
/// would have (mode 0600 in 0700 directories).
pub fn write_journal(s: &Scratch, session: &str, lines: &[String]) {
    let state = s.path().join("state");
    let dir = state.join("sandguard").join("sessions");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap();
    for d in [state.clone(), state.join("sandguard")] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(dir.join(format!("{session}.journal")))
        .unwrap();
    f.write_all(format!("{}\n", lines.join("\n")).as_bytes())
        .unwrap();
}

/// A journal's first record: the session began at `t0` (Unix ms) for `owner`.
pub fn start_line(t0: i64, owner: &str) -> String {
    let start = r#""ev":"start","pid":4242,"grace_ms":600000,"labels":{}"#;
    format!(r#"{{"t":{t0},{start},"owner":"{owner}"}}"#)
}
