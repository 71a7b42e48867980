//! Whether a `detach` names something its session owns: part of the one judgement (it lives
//! beside `may_claim`), the rule the sidecar (for every
//! `detach` line) and the `sandguard detach` command (before it sends one) both apply.
//!
//! A detach is the owner's "this is mine: let it outlive me". A session owns a sandbox it
//! claimed (or detached before), or one that carries its `sandguard.session` label. A detach
//! of anything else (a stranger's container, another session's unclaimed sandbox, an id that
//! names nothing) would change nothing: the session would never have reclaimed it. Until now
//! the sidecar journaled it anyway, and `sandguard detach` said nothing; both now say so.
//!
//! Decisions:
//! - The sidecar cannot answer on the one-way control pipe, so a detach of what its session
//!   does not own is logged as a refusal (at `warn`, in the session's log) and **nothing is
//!   journaled**: no `detach` (it would claim a hold the session never had) and no `refused`
//!   (which would mark the target refused for good in the session's story, though a later
//!   claim of it may be right).
//! - `sandguard detach PROVIDER ID` can read the ledger and ask the provider, so it applies the
//!   same rule before it writes the line: what its session does not own is refused there with
//!   exit 1 and a message saying so; nothing is sent, nothing is recorded.
//! - Only what can be shown counts as "not owned": when the provider could not be listed in
//!   time, or the id cannot be parsed (the sidecar refuses that with its own reason), the rule
//!   says [`Ownership::Unknown`] and the detach goes ahead as before, so that a sandbox that
//!   carries the session's label is never left to be reclaimed because a listing failed.
//! - A claim names a sandbox the way the provider matches ids (a Docker id prefix names the
//!   container it starts), in either direction: a claim of `3f2a…` owns a detach of the full
//!   id, and a claim of the full id owns a detach of a prefix of it. A claim pinned to an
//!   identity (a Docker volume made then) owns only a detach of that object: the sidecar pins
//!   a detach as it pins a claim, so a name a stranger took again is not the session's.

use crate::protocol::Target;
use crate::providers::{Provider, Sandbox};

/// What the rule says of one detach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ownership {
    /// Claimed or detached before by the session, or carrying its label.
    Owned,
    /// Listed, and neither claimed by the session nor carrying its label.
    NotOwned,
    /// Cannot be shown either way (no listing, an id the provider cannot parse).
    Unknown,
}

/// Whether `session` owns what `target` names on `provider`. `held`: what the session claimed
/// or detached; `listed`: the provider's managed sandboxes, `None` when it did not answer.
pub(crate) fn ownership<'a>(
    provider: &dyn Provider,
    session: &str,
    target: &Target,
    held: impl IntoIterator<Item = &'a Target>,
    listed: Option<&[Sandbox]>,
) -> Ownership {
    let Ok(named) = provider.parse_claim(&target.id) else {
        return Ownership::Unknown;
    };
    let sandbox = listed
        .unwrap_or_default()
        .iter()
        .find(|s| named.names(provider, s));
    if sandbox.is_some_and(|s| s.session() == Some(session)) {
        return Ownership::Owned;
    }
    let it = sandbox.unwrap_or(&named);
    let claimed = held
        .into_iter()
        .filter(|c| c.provider == target.provider)
        .filter_map(|c| provider.parse_claim(&c.id).ok())
        .any(|c| c.names(provider, it) || named.names(provider, &c));
    match (claimed, listed) {
        (true, _) => Ownership::Owned,
        (false, Some(_)) => Ownership::NotOwned,
        (false, None) => Ownership::Unknown,
    }
}

/// The words of a refusal, for the session's log and the command's stderr.
pub(crate) fn not_owned(session: &str, target: &Target) -> String {
    format!(
        "{} {} is not owned by session {session} (it never claimed it, and it carries no label \
         of that session): nothing was detached",
        target.provider,
        crate::protocol::echo(target.id.as_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::fake::Fake;
    use crate::providers::Kind;

    fn t(id: &str) -> Target {
        Target::new("fake", id).unwrap()
    }

    fn labelled(id: &str, session: &str) -> Sandbox {
        let mut s = Sandbox::claimed("fake", Kind::Instance, id);
        s.labels
            .insert(crate::labels::SESSION.to_string(), session.to_string());
        s
    }

    #[test]
    fn a_session_owns_its_claims_and_its_labels_and_nothing_else() {
        let p = Fake::default();
        let listed = [labelled("mine", "s1"), labelled("theirs", "s2")];
        let held = [t("claimed")];
        let own = |id: &str, listed: Option<&[Sandbox]>| ownership(&p, "s1", &t(id), &held, listed);
        assert_eq!(own("mine", Some(&listed)), Ownership::Owned);
        assert_eq!(own("claimed", Some(&listed)), Ownership::Owned);
        assert_eq!(own("theirs", Some(&listed)), Ownership::NotOwned);
        assert_eq!(own("nowhere", Some(&listed)), Ownership::NotOwned);
        // No listing: only the claims can be shown.
        assert_eq!(own("claimed", None), Ownership::Owned);
        assert_eq!(own("theirs", None), Ownership::Unknown);
    }
}
