//! What one reclaim did: an [`Outcome`] per sandbox, the providers that could not be listed,
//! and the [`Report`] that gathers them.
//!
//! Decisions:
//! - **A failure stays typed until it is printed.** A removal that failed or was unfinished,
//!   and a listing that failed, carry a [`Failure`]: the provider's words (redacted by the
//!   driver, as every [`ProviderError`] is), the HTTP status they came with and the provider's
//!   `Retry-After` hint. The words are what `ps`, `stop`, `sweep`, the sidecar's end line and
//!   the journal print, unchanged; the status and the hint travel beside them for whoever
//!   decides, and `--json` adds them (`status`, `retry_after_ms`) when the provider gave them.
//! - **A refusal is sandguard's own word**, never a provider's: a [`Refusal`] (the claim can
//!   never name a sandbox of ours, or the ownership judgement will not honour it).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::providers::{ProviderError, Refusal, Sandbox};

/// Why something was not done, as the provider said it (or, with no status, as sandguard
/// says it: a provider that is not configured, a claim no listing answered for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Failure {
    /// The words every output prints (already redacted: secrets never reach them).
    pub message: String,
    /// The HTTP status the failure came with, when it came over HTTP.
    pub status: Option<u16>,
    /// The provider's own hint of when to call again (`Retry-After`, gRPC's `retry_after`, a
    /// plugin's `retry_after_secs`).
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// sandguard's own words: no status, no hint.
    pub(crate) fn new(message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }

    /// The failures of one listing as one: their words joined with `; ` (in the order the
    /// provider gave them), the first status given, and the longest hint.
    pub(crate) fn joined(errors: &[ProviderError]) -> Failure {
        Failure {
            message: errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
            status: errors.iter().find_map(ProviderError::status),
            retry_after: errors.iter().filter_map(retry_after).max(),
        }
    }
}

fn retry_after(e: &ProviderError) -> Option<Duration> {
    match e {
        ProviderError::Transient { retry_after, .. } => *retry_after,
        _ => None,
    }
}

impl From<&ProviderError> for Failure {
    fn from(e: &ProviderError) -> Failure {
        Failure {
            message: e.to_string(),
            status: e.status(),
            retry_after: retry_after(e),
        }
    }
}

impl From<ProviderError> for Failure {
    fn from(e: ProviderError) -> Failure {
        Failure::from(&e)
    }
}

/// What happened to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// sandguard removed it.
    Removed,
    /// It was already gone (or being removed by someone else).
    Gone,
    /// The provider refused for good; retrying would not help. It may still exist.
    Failed(Failure),
    /// Still failing transiently when the deadline came: may still exist.
    Unfinished(Failure),
    /// sandguard will never act on it (it does not name a sandbox of ours): final, and not
    /// a failure of the reclaim.
    Refused(Refusal),
}

impl Outcome {
    pub(crate) fn is_success(&self) -> bool {
        matches!(self, Outcome::Removed | Outcome::Gone)
    }
    /// Nothing is left to do: removed, gone, or refused for good.
    pub(crate) fn is_final(&self) -> bool {
        self.is_success() || matches!(self, Outcome::Refused(_))
    }
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Outcome::Removed => "removed",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "failed",
            Outcome::Unfinished(_) => "unfinished",
            Outcome::Refused(_) => "refused",
        }
    }
    /// The words to print: the failure's, or the refusal's reason.
    pub(crate) fn error(&self) -> Option<&str> {
        match self {
            Outcome::Failed(f) | Outcome::Unfinished(f) => Some(&f.message),
            Outcome::Refused(r) => Some(&r.0),
            _ => None,
        }
    }
    /// What the provider said, for a removal that failed or was unfinished.
    pub(crate) fn failure(&self) -> Option<&Failure> {
        match self {
            Outcome::Failed(f) | Outcome::Unfinished(f) => Some(f),
            _ => None,
        }
    }
}

/// One target and its outcome.
#[derive(Debug, Clone)]
pub(crate) struct Removal {
    pub sandbox: Sandbox,
    pub outcome: Outcome,
    pub attempts: u32,
    /// Unix milliseconds when the provider said it was removed (or gone): journaled with the
    /// `removed` record, which is written only once the whole reclaim (its settle pass
    /// included) is over, so that spend counts a sandbox's time to its removal, not to the
    /// reclaim's end. `None` where no removal was attempted.
    pub at_ms: Option<u64>,
}

/// A provider that could not be listed: its sandboxes may still be running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListFailure {
    pub provider: String,
    pub error: Failure,
}

/// Everything one reclaim did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    pub removals: Vec<Removal>,
    pub list_failures: Vec<ListFailure>,
    /// The providers whose (last) listing succeeded.
    pub listed: Vec<String>,
}

impl Report {
    /// Every target removed (or refused for good) and every provider answered.
    pub(crate) fn is_clean(&self) -> bool {
        self.list_failures.is_empty() && self.removals.iter().all(|r| r.outcome.is_final())
    }

    /// One line with counts per provider: `docker: 3 removed, 1 gone, 0 failed; e2b: …`.
    pub(crate) fn summary(&self) -> String {
        let mut per: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
        for r in &self.removals {
            let slot = per.entry(r.sandbox.provider.as_str()).or_default();
            match r.outcome {
                Outcome::Removed => slot[0] += 1,
                Outcome::Gone => slot[1] += 1,
                Outcome::Failed(_) | Outcome::Unfinished(_) => slot[2] += 1,
                Outcome::Refused(_) => slot[3] += 1,
            }
        }
        let mut parts: Vec<String> = per
            .iter()
            .map(|(p, [r, g, f, n])| {
                let refused = if *n > 0 {
                    format!(", {n} refused")
                } else {
                    String::new()
                };
                format!("{p}: {r} removed, {g} already gone, {f} failed{refused}")
            })
            .collect();
        parts.extend(
            self.list_failures
                .iter()
                .map(|f| format!("{}: not listed", f.provider)),
        );
        if parts.is_empty() {
            "nothing to reclaim".to_string()
        } else {
            parts.join("; ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Detail;

    #[test]
    fn a_failure_keeps_the_status_and_the_hint_and_prints_the_words() {
        let throttled = ProviderError::Transient {
            message: Detail::http("e2b: HTTP 429: slow down", 429),
            retry_after: Some(Duration::from_secs(7)),
        };
        let f = Failure::from(&throttled);
        assert_eq!(f.to_string(), "e2b: HTTP 429: slow down");
        assert_eq!(
            (f.status, f.retry_after),
            (Some(429), Some(Duration::from_secs(7)))
        );
        let parts = [
            ProviderError::fatal("volumes: plugin down"),
            throttled,
            ProviderError::Transient {
                message: "networks: timeout".into(),
                retry_after: Some(Duration::from_secs(2)),
            },
        ];
        let joined = Failure::joined(&parts);
        assert_eq!(
            joined.message,
            "volumes: plugin down; e2b: HTTP 429: slow down; networks: timeout"
        );
        assert_eq!(joined.status, Some(429));
        assert_eq!(joined.retry_after, Some(Duration::from_secs(7)));
        let outcome = Outcome::Unfinished(f);
        assert_eq!(outcome.error(), Some("e2b: HTTP 429: slow down"));
        assert_eq!(outcome.failure().and_then(|f| f.status), Some(429));
    }
}
