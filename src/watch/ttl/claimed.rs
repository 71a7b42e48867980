//! The claims a keeper's listing by label did not answer for, looked up before they are
//! judged: a listing by label finds only what carries a session label, so a claimed sandbox
//! labelled `sandguard.detached=true` alone (or another session's, under a spelling the
//! listing does not match) is seen only here. The same look-up the reclaim makes
//! (`crate::reclaim`'s `Judged::describe`), so that renewal and removal judge a claim by the
//! same facts:
//!
//! - each claim is described ([`Provider::describe`]) and judged as the provider shows it,
//!   only while it still is the object claimed ([`Provider::names`]);
//! - a provider that cannot look one up is listed once, whole ([`Selector::anything`],
//!   read-only), for all of them; a claim not found there is judged as it stands (its renewal
//!   says whether it exists);
//! - one that is gone, or whose id now names another object, is not renewed, and is given
//!   back as gone: the keeper tells the sidecar, which releases it (`crate::watch::gone`);
//! - one whose look-up failed is not renewed this round (logged): nobody can tell what it
//!   carries, and the next round asks again (a TTL is `grace + 2 × renew_every`, so one missed
//!   round ends nothing).

use futures_util::stream::{self, StreamExt};

use crate::labels::Selector;
use crate::providers::{Described, Provider, ProviderError, Sandbox};

/// `claims` as `provider` shows them now: what the keeper's judgement reads; and the claims
/// the provider said are gone (or whose id names another object now).
pub(super) async fn look_up(
    provider: &dyn Provider,
    claims: Vec<Sandbox>,
) -> (Vec<Sandbox>, Vec<Sandbox>) {
    let described: Vec<(Sandbox, Result<Described, ProviderError>)> = stream::iter(claims)
        .map(|c| async move {
            let d = provider.describe(&c).await;
            (c, d)
        })
        .buffer_unordered(super::CONCURRENCY)
        .collect()
        .await;
    let mut found = Vec::new();
    let mut gone = Vec::new();
    let mut unsupported = Vec::new();
    for (claim, answer) in described {
        match answer {
            Ok(Described::Found(s)) if claim.names(provider, &s) => found.push(s),
            Ok(Described::Found(_) | Described::Gone) | Err(ProviderError::Gone(_)) => {
                gone.push(claim);
            }
            Ok(Described::Unsupported) => unsupported.push(claim),
            Err(e) => tracing::warn!(
                "cannot look up {} {} to renew its TTL: {e}",
                claim.provider,
                claim.id
            ),
        }
    }
    if unsupported.is_empty() {
        return (found, gone);
    }
    match provider.list(&Selector::anything()).await {
        Ok(all) => found.extend(unsupported.into_iter().map(|c| {
            all.iter()
                .find(|s| c.names(provider, s))
                .cloned()
                .unwrap_or(c)
        })),
        Err(e) => tracing::warn!(
            "cannot list {} to read what its claims carry before renewing them: {e}",
            provider.name()
        ),
    }
    (found, gone)
}
