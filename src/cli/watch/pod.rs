//! What a Kubernetes pod can hand a native sidecar without a shell: the owner's pid in a file
//! on a shared volume (`--owner-pid-file`), and the pod's uid as the session (`--session
//! $(POD_UID)`, which the kubelet expands). The sidecar image is FROM scratch, so the
//! `until [ -s FILE ]; do sleep 0.1; done` and `tr -d -` it used to need are done here.
//!
//! Decisions:
//! - The file is polled every [`POLL`] until it holds a pid, with no deadline: the agent's
//!   container starts after the sidecar, and its image may take minutes to pull. Until then
//!   no session exists and nothing is guarded, and SIGTERM (the pod's end) still stops the
//!   sidecar at once (its handler is installed after). It is read once; polling costs
//!   nothing here and keeps the unsafe inotify calls out.
//! - Missing or empty: not written yet, wait. One line of decimal digits (surrounding
//!   whitespace ignored; `echo $$ > FILE` writes it in one write): the pid. Anything else,
//!   or a file that cannot be read: an error (exit 2), not a wait that would never end.
//! - A UUID (8-4-4-4-12 hex digits, as `metadata.uid` is) given to `--session` is taken
//!   lowercased and without its dashes, as the agent's `tr -d -` makes it. Any other value is
//!   left to the session id's own rule (1–64 characters of `[0-9a-z]`).

use std::path::Path;
use std::time::Duration;

use super::StartError;

/// How often the pid file is looked at until it holds a pid.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Waits until `file` holds a pid and returns it.
pub(super) async fn wait_for_pid(file: &Path) -> Result<u32, StartError> {
    let mut said = false;
    loop {
        match read_pid(file)? {
            Some(pid) => return Ok(pid),
            None if !said => {
                tracing::info!("waiting for {} to hold the owner's pid", file.display());
                said = true;
            }
            None => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The pid in `file`; `None` while it is missing or empty.
fn read_pid(file: &Path) -> Result<Option<u32>, StartError> {
    let usage = |m: String| StartError::Usage(format!("--owner-pid-file {}: {m}", file.display()));
    let text = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(usage(format!("cannot read it: {e}"))),
    };
    let text = String::from_utf8_lossy(&text);
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(pid) if pid > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(pid)),
        _ => Err(usage(format!(
            "{} is not a pid",
            crate::protocol::echo(text.as_bytes())
        ))),
    }
}

/// `--session`'s parser: a UUID loses its dashes (see the module docs), anything else is kept
/// for the session id's rule to judge.
pub(super) fn session_arg(value: &str) -> Result<String, std::convert::Infallible> {
    let groups: Vec<&str> = value.split('-').collect();
    let uuid = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    Ok(match uuid {
        true => groups.concat().to_ascii_lowercase(),
        false => value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uuid_session_loses_its_dashes_and_anything_else_is_kept() {
        let uid = "3F2A9C1E-0b7d-4e21-9a5c-1d2e3f4a5b6c";
        assert_eq!(
            session_arg(uid).unwrap(),
            "3f2a9c1e0b7d4e219a5c1d2e3f4a5b6c"
        );
        for kept in [
            "abc",
            "a-b",
            "3f2a9c1e-0b7d-4e21-9a5c",
            "3f2a9c1e-0b7d-4e21-9a5c-1d2e3f4a5b6g",
        ] {
            assert_eq!(session_arg(kept).unwrap(), kept);
        }
    }

    #[test]
    fn the_pid_file_is_waited_for_while_missing_or_empty_and_refused_when_not_a_pid() {
        let dir = std::env::temp_dir().join(format!("sandguard-pod-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("owner.pid");
        assert!(matches!(read_pid(&file), Ok(None)));
        std::fs::write(&file, "").unwrap();
        assert!(matches!(read_pid(&file), Ok(None)));
        std::fs::write(&file, " 4242\n").unwrap();
        assert!(matches!(read_pid(&file), Ok(Some(4242))));
        for bad in ["0\n", "-1\n", "+7\n", "12 34\n", "pid\n"] {
            std::fs::write(&file, bad).unwrap();
            match read_pid(&file) {
                Err(StartError::Usage(m)) => assert!(m.contains("is not a pid"), "{m}"),
                _ => panic!("{bad:?} is not a pid"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_the_pid_is_written() {
        let dir = std::env::temp_dir().join(format!("sandguard-pod-wait-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("owner.pid");
        let _ = std::fs::remove_file(&file);
        let wait = wait_for_pid(&file);
        tokio::pin!(wait);
        // Ten polls find nothing; then the agent writes its pid.
        let nothing = tokio::time::timeout(POLL * 10, &mut wait).await;
        assert!(nothing.is_err());
        std::fs::write(&file, "77\n").unwrap();
        let pid = tokio::time::timeout(POLL * 2, wait).await;
        assert!(matches!(pid, Ok(Ok(77))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
