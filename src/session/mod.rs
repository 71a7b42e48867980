//! A session: one guarded owner. [`spawn`] starts its sidecar (for the wrapper and every SDK
//! helper) and [`guard`] is the Rust SDK helper built on it.
//!
//! A session's id ([`SessionId`]) is 128 random bits written as 32 lower-case hex digits (safe
//! as a file name, a label value and a tag on every provider); ids given by users or SDKs
//! follow [`SessionId::RULE`], checked once where they are made. Its labels are what the owner
//! stamps on every sandbox it creates.
//!
//! Decisions (the one session-id rule):
//! - Every command that names a session takes the same ids, through [`SessionId::parse`]:
//!   `watch --session` (the sidecar), `ps --session`, `stop --all --session`, `sessions show`
//!   and the ledger's file names. What one of them can create, every other one can name.
//! - The rule is 1 to 64 characters of `[0-9a-z_-]`, the first a letter or digit. Lower case
//!   and digits are what the sidecar's random ids are made of; `-` and `_` let a name a
//!   person chose (`my-session`, as README's labelling example writes it; a Kubernetes pod's
//!   uid as it is) be used as typed. Each is safe as a file name (no `.`, no `/`), as a label
//!   or tag value on every provider (Tenki's tags take `[a-z0-9:_.-]`), and cannot be read as
//!   a flag (no leading `-`). Anything else (`a b`, `S1`, `x/y`, `..`, an empty string) is
//!   refused as bad usage (exit 2) by every command, with [`InvalidSessionId`]'s message.

pub mod confirm;
pub mod guard;
pub mod spawn;

use std::collections::BTreeMap;

use crate::identity::Identity;
use crate::labels;

/// A session id: [`SessionId::RULE`] (it becomes a file name and a label value).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(String);

/// A string that is not a session id (quoted safely in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id \"{0}\": expected {rule}", rule = SessionId::RULE)]
pub struct InvalidSessionId(String);

impl SessionId {
    /// The rule, in the words every refusal uses.
    pub const RULE: &'static str =
        "1 to 64 characters of [0-9a-z_-], the first a letter or a digit";

    /// A new random id: 128 bits from the kernel, as 32 hex digits.
    pub fn random() -> std::io::Result<SessionId> {
        Ok(SessionId(crate::unix::random_hex(16)?))
    }

    /// Checks an id given by a user, an SDK or a file name.
    pub fn parse(id: &str) -> Result<SessionId, InvalidSessionId> {
        let word = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase();
        let ok = (1..=64).contains(&id.len())
            && id.bytes().next().is_some_and(word)
            && id.bytes().all(|b| word(b) || b == b'-' || b == b'_');
        if ok {
            Ok(SessionId(id.to_string()))
        } else {
            Err(InvalidSessionId(crate::protocol::echo(id.as_bytes())))
        }
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A new random session id as a string.
pub fn new_id() -> std::io::Result<String> {
    SessionId::random().map(|s| s.0)
}

/// The labels every sandbox of the session carries.
pub fn labels(session: &str, owner: &Identity) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::SESSION.to_string(), session.to_string()),
        (labels::OWNER.to_string(), owner.to_label()),
    ])
}

/// The labels as `SANDGUARD_LABELS` carries them: `k=v,k=v`.
pub fn labels_env(labels: &BTreeMap<String, String>) -> String {
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
    fn ids_are_long_random_and_valid() {
        let (a, b) = (new_id().unwrap(), new_id().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert_eq!(SessionId::parse(&a).unwrap().to_string(), a);
        for bad in [
            "",
            "ABC",
            "a/b",
            "../x",
            "a b",
            "-x",
            "_x",
            "a.b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(SessionId::parse(bad).is_err(), "{bad}");
        }
        for good in [
            "my-session",
            "a_b",
            "0",
            "5d1c3f2a-9b1e-4c6a-8d2e-0f1a2b3c4d5e",
        ] {
            assert_eq!(SessionId::parse(good).unwrap().to_string(), good);
        }
        assert!(SessionId::parse(&"a".repeat(64)).is_ok());
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
