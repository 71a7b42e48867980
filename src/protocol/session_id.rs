//! The session id: [`SessionId`], the one rule every id given by a user, an SDK or a file name
//! is checked against, once, where it is made.
//!
//! It lives with the protocol, a leaf, because every layer carries it: the ready line and the
//! sidecar's flags, the ledger's file names, the labels on every sandbox. [`crate::session`]
//! re-exports it where it was first defined.
//!
//! Decisions (the one session-id rule):
//! - Every command that names a session takes the same ids, through [`SessionId::parse`]:
//!   `watch --session` (the sidecar), `ps --session`, `stop --all --session`, `sessions show`
//!   and the ledger's file names. What one of them can create, every other one can name.
//! - A new id is 128 random bits written as 32 lower-case hex digits ([`SessionId::random`]).
//! - The rule is 1 to 64 characters of `[0-9a-z_-]`, the first a letter or digit. Lower case
//!   and digits are what the sidecar's random ids are made of; `-` and `_` let a name a
//!   person chose (`my-session`, as README's labelling example writes it; a Kubernetes pod's
//!   uid as it is) be used as typed. Each is safe as a file name (no `.`, no `/`), as a label
//!   or tag value on every provider (Tenki's tags take `[a-z0-9:_.-]`), and cannot be read as
//!   a flag (no leading `-`). Anything else (`a b`, `S1`, `x/y`, `..`, an empty string) is
//!   refused as bad usage (exit 2) by every command, with [`InvalidSessionId`]'s message.

/// A session id: [`SessionId::RULE`] (it becomes a file name and a label value).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SessionId(String);

/// A string that is not a session id (quoted safely in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid session id \"{0}\": expected {rule}", rule = SessionId::RULE)]
pub(crate) struct InvalidSessionId(String);

impl SessionId {
    /// The rule, in the words every refusal uses.
    pub(crate) const RULE: &'static str =
        "1 to 64 characters of [0-9a-z_-], the first a letter or a digit";

    /// A new random id: 128 bits from the kernel, as 32 hex digits.
    pub(crate) fn random() -> std::io::Result<SessionId> {
        Ok(SessionId(crate::unix::random_hex(16)?))
    }

    /// Checks an id given by a user, an SDK or a file name.
    pub(crate) fn parse(id: &str) -> Result<SessionId, InvalidSessionId> {
        let word = |b: u8| b.is_ascii_digit() || b.is_ascii_lowercase();
        let ok = (1..=64).contains(&id.len())
            && id.bytes().next().is_some_and(word)
            && id.bytes().all(|b| word(b) || b == b'-' || b == b'_');
        if ok {
            Ok(SessionId(id.to_string()))
        } else {
            Err(InvalidSessionId(super::echo(id.as_bytes())))
        }
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_random_and_valid() {
        let (a, b) = (SessionId::random().unwrap(), SessionId::random().unwrap());
        assert_eq!(a.to_string().len(), 32);
        assert_ne!(a, b);
        assert_eq!(SessionId::parse(&a.to_string()).unwrap(), a);
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
}
