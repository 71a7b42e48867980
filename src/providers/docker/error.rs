//! Docker's failures in the terms reclaim decides by ([`ProviderError`]): 404 and "removal
//! already in progress" mean gone, 409/429/5xx and dropped connections are worth retrying,
//! anything else is final.

use bollard::errors::Error as BollardError;

use crate::config::docker::DaemonAddress;
use crate::providers::ProviderError;

/// Maps a bollard error onto the classes reclaim decides by.
pub(super) fn classify(host: &DaemonAddress, doing: &str, err: BollardError) -> ProviderError {
    match err {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => {
            let text = format!("failed to {doing} {host}: {message} (HTTP {status_code})");
            classify_status(status_code, &message, text)
        }
        BollardError::SocketNotFoundError(path) => ProviderError::transient(format!(
            "failed to {doing} {host}: socket {path} does not exist (is dockerd running?)"
        )),
        BollardError::RequestTimeoutError => {
            ProviderError::transient(format!("failed to {doing} {host}: request timed out"))
        }
        other => ProviderError::transient(format!(
            "failed to {doing} {host}: {}",
            crate::providers::retry::error_chain(&other)
        )),
    }
}

pub(super) fn classify_status(status: u16, message: &str, text: String) -> ProviderError {
    let lower = message.to_ascii_lowercase();
    let text = crate::providers::Detail::http(text, status);
    match status {
        404 => ProviderError::gone(text),
        409 if lower.contains("already in progress") => ProviderError::gone(text),
        // Running-without-force, paused, a network with endpoints, a volume in use: the
        // container removal that precedes these is usually still landing.
        409 => ProviderError::transient(text),
        429 | 500..=599 => ProviderError::transient(text),
        _ => ProviderError::fatal(text),
    }
}

/// The first 12 characters of an id, as `docker ps` shows it.
pub(super) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_races_count_as_gone() {
        let gone =
            |s, m: &str| matches!(classify_status(s, m, String::new()), ProviderError::Gone(_));
        assert!(gone(404, "No such container: abc"));
        assert!(gone(409, "removal of container abc is already in progress"));
        assert!(!gone(409, "container is paused and must be unpaused first"));
        assert!(matches!(
            classify_status(500, "boom", String::new()),
            ProviderError::Transient { .. }
        ));
        assert!(matches!(
            classify_status(400, "bad", String::new()),
            ProviderError::Fatal(_)
        ));
    }
}
