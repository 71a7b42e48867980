//! A session: one guarded owner. [`spawn`] starts its sidecar (for the wrapper and every SDK
//! helper) and [`guard`] is the Rust SDK helper built on it.
//!
//! A session's id ([`SessionId`]) follows one rule, checked once where it is made; the type
//! lives in [`crate::protocol`] (a leaf: the ledger and the labels carry it too) and is
//! re-exported here. Its labels are what the owner stamps on every sandbox it creates.

pub(crate) mod confirm;
pub(crate) mod guard;
pub(crate) mod handoff;
pub(crate) mod spawn;

use std::collections::BTreeMap;

use crate::identity::Identity;
use crate::labels;

pub(crate) use crate::protocol::SessionId;

/// A new random session id as a string.
pub(crate) fn new_id() -> std::io::Result<String> {
    SessionId::random().map(|s| s.to_string())
}

/// The labels every sandbox of the session carries.
pub(crate) fn labels(session: &str, owner: &Identity) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::SESSION.to_string(), session.to_string()),
        (labels::OWNER.to_string(), owner.to_label()),
    ])
}

/// The labels as `SANDGUARD_LABELS` carries them: `k=v,k=v`.
pub(crate) fn labels_env(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_long_random_and_valid() {
        let (a, b) = (new_id().unwrap(), new_id().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert_eq!(SessionId::parse(&a).unwrap().to_string(), a);
    }

    #[test]
    fn labels_are_written_k_equals_v() {
        let id = Identity {
            machine: "0123456789abcdef".into(),
            boot: "0123456789abcdef".into(),
            pid: 1,
            start_time: 2,
            pidns: Some(3),
        };
        let l = labels("s1", &id);
        assert_eq!(
            labels_env(&l),
            "sandguard.owner=0123456789abcdef-0123456789abcdef-1-2-3,sandguard.session=s1"
        );
    }
}
