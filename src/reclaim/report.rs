//! What one reclaim did: an [`Outcome`] per sandbox, the providers that could not be listed,
//! and the [`Report`] that gathers them.

use std::collections::BTreeMap;

use crate::providers::Sandbox;

/// What happened to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// sandguard removed it.
    Removed,
    /// It was already gone (or being removed by someone else).
    Gone,
    /// The provider refused for good; retrying would not help. It may still exist.
    Failed(String),
    /// Still failing transiently when the deadline came: may still exist.
    Unfinished(String),
    /// sandguard will never act on it (it does not name a sandbox of ours): final, and not
    /// a failure of the reclaim.
    Refused(String),
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Removed | Outcome::Gone)
    }
    /// Nothing is left to do: removed, gone, or refused for good.
    pub fn is_final(&self) -> bool {
        self.is_success() || matches!(self, Outcome::Refused(_))
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Removed => "removed",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "failed",
            Outcome::Unfinished(_) => "unfinished",
            Outcome::Refused(_) => "refused",
        }
    }
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Failed(e) | Outcome::Unfinished(e) | Outcome::Refused(e) => Some(e),
            _ => None,
        }
    }
}

/// One target and its outcome.
#[derive(Debug, Clone)]
pub struct Removal {
    pub sandbox: Sandbox,
    pub outcome: Outcome,
    pub attempts: u32,
}

/// A provider that could not be listed: its sandboxes may still be running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFailure {
    pub provider: String,
    pub error: String,
}

/// Everything one reclaim did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub removals: Vec<Removal>,
    pub list_failures: Vec<ListFailure>,
    /// The providers whose (last) listing succeeded.
    pub listed: Vec<String>,
}

impl Report {
    /// Every target removed (or refused for good) and every provider answered.
    pub fn is_clean(&self) -> bool {
        self.list_failures.is_empty() && self.removals.iter().all(|r| r.outcome.is_final())
    }

    /// One line with counts per provider: `docker: 3 removed, 1 gone, 0 failed; e2b: …`.
    pub fn summary(&self) -> String {
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
