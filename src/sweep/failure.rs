//! What a sweep pass could not do with its own stores: the local ledger and the fleet store.
//!
//! Decision: **a store is not a provider.** A ledger that cannot be read, a fleet store that
//! does not answer, a session one of them could not give up for reclaiming are
//! [`StoreFailure`]s, kept apart from the providers that could not be listed
//! ([`crate::reclaim::ListFailure`]): a plugin provider named `ledger` or `fleet` can never be
//! mistaken for them. The text output words them as it always did (`error: could not query
//! ledger: …`); `sweep --json` lists them under `store_errors`, not `errors`.

use crate::fleet::FleetError;
use crate::ledger::LedgerError;

/// Which of the pass's stores failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StoreKind {
    /// This machine's state directory.
    Ledger,
    /// The fleet lease store (`sweep --fleet`).
    Fleet,
}

impl StoreKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StoreKind::Ledger => "ledger",
            StoreKind::Fleet => "fleet",
        }
    }
}

/// The error a store gave.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Fleet(#[from] FleetError),
}

/// One failure of a store; see the module docs.
#[derive(Debug, thiserror::Error)]
pub(crate) struct StoreFailure {
    pub store: StoreKind,
    /// The session that was not reclaimed; `None` when the store could not be read at all
    /// (then no verdict was made from it).
    pub session: Option<String>,
    pub error: StoreError,
}

impl StoreFailure {
    /// The store could not be read: nothing of it was judged.
    pub(crate) fn unread(store: StoreKind, error: impl Into<StoreError>) -> StoreFailure {
        StoreFailure {
            store,
            session: None,
            error: error.into(),
        }
    }

    /// Session `id` of `store` was not reclaimed.
    pub(crate) fn not_reclaimed(
        store: StoreKind,
        id: &str,
        error: impl Into<StoreError>,
    ) -> StoreFailure {
        StoreFailure {
            store,
            session: Some(id.to_string()),
            error: error.into(),
        }
    }
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.session, self.store) {
            (Some(id), _) => write!(f, "session {id} was not reclaimed: {}", self.error),
            (None, StoreKind::Ledger) => write!(f, "{}", self.error),
            (None, StoreKind::Fleet) => write!(f, "{}: no fleet verdict was made", self.error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are the ones the fake providers `ledger` and `fleet` used to carry.
    #[test]
    fn store_failures_read_as_they_always_did() {
        let lost = LedgerError::LockLost {
            what: "the fleet lock of s1".into(),
        };
        let f = StoreFailure::not_reclaimed(StoreKind::Fleet, "s1", lost);
        assert_eq!(
            f.to_string(),
            "session s1 was not reclaimed: failed to keep the fleet lock of s1: the lock was lost"
        );
        let down = FleetError {
            store: "redis://127.0.0.1:1".into(),
            message: "connection refused".into(),
        };
        let f = StoreFailure::unread(StoreKind::Fleet, down);
        assert_eq!(
            f.to_string(),
            "fleet store redis://127.0.0.1:1: connection refused: no fleet verdict was made"
        );
        let f = StoreFailure::unread(StoreKind::Ledger, LedgerError::NotStart);
        assert_eq!(f.to_string(), "a session must begin with a start record");
        assert_eq!(f.store.as_str(), "ledger");
    }
}
