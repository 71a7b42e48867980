//! Which ledger target names a sandbox: one answer for every record that names a sandbox the
//! reclaim path touched (the session ending's `removed`, `failed` and `refused`, and the
//! `stopped` notes `sandguard stop` leaves in a session's side file).
//!
//! Decision: **a sandbox is named as its claim named it.** When the session holds a claim (or
//! a detach) that names the sandbox as its provider matches ids (a Docker id prefix, say), the
//! record uses that claim's id, so the session's story has one line for it. Otherwise the
//! provider's claim form ([`Provider::claim_id`]: Docker's `network/ID`, never a bare id a
//! sweep would take for a container), so that a removal clears the claim that named it and a
//! pending sandbox is read back as what it is. A sandbox of a provider not configured here is
//! named by its id as it was listed. Whether a claim names a sandbox is
//! [`Sandbox::named_by`]'s to say, as for the ownership judgement.

use std::sync::Arc;

use crate::protocol::Target;
use crate::providers::{Provider, Sandbox};

/// The ledger's name for `sandbox`, given what the session holds (`held`: its claims and
/// detaches; empty when the caller has none to match); see the module docs.
pub(crate) fn ledger_target<'a>(
    providers: &[Arc<dyn Provider>],
    sandbox: &Sandbox,
    held: impl IntoIterator<Item = &'a Target>,
) -> Target {
    let id = match held.into_iter().find(|t| sandbox.named_by(providers, t)) {
        Some(claim) => claim.id.clone(),
        None => crate::providers::by_name(providers, &sandbox.provider)
            .map_or_else(|| sandbox.id.clone(), |p| p.claim_id(sandbox)),
    };
    Target {
        provider: sandbox.provider.clone(),
        id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::fake::Fake;
    use crate::providers::Kind;

    #[test]
    fn a_claim_names_it_else_the_provider_else_its_id() {
        let fake: Arc<dyn Provider> = Fake::holding(vec![]);
        let providers = [fake];
        let listed = Sandbox::claimed("fake", Kind::Instance, "abc");
        let claim = Target {
            provider: "fake".into(),
            id: "abc".into(),
        };
        let other = Target {
            provider: "fake".into(),
            id: "xyz".into(),
        };
        assert_eq!(ledger_target(&providers, &listed, [&other, &claim]), claim);
        assert_eq!(ledger_target(&providers, &listed, []).id, "abc");
        let elsewhere = Sandbox::claimed("acme", Kind::Instance, "q");
        assert_eq!(ledger_target(&providers, &elsewhere, [&claim]).id, "q");
    }
}
