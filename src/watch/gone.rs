//! What the provider says went by itself while the owner lives: released, from the provider's
//! own word (DESIGN's "A removal is what the provider confirmed", issue 55).
//!
//! A sandbox the session holds (claimed or detached) may go without sandguard or the proxy
//! removing it: the daemon removes a `docker run --rm` container once it exits (the commonest
//! agent pattern), a cloud sandbox's own timeout ends it, someone removes it past the proxy.
//! Until it is seen gone it stays held: it takes a slot under `sandboxes` and its time counts
//! toward `spend`. It is seen gone three ways, each the provider's confirmation, never a
//! request's word:
//!
//! - **An event**: a provider that follows the session ([`crate::providers::Provider::follow`],
//!   Docker's `destroy`) tells it at once ([`Gone`], timed by the event);
//! - **A keeper's look-up**: the TTL keeper and the limit keeper describe the claims their
//!   listing did not answer for (`super::ttl::claimed`); one the provider says is gone (or
//!   whose id names another object now) is told here;
//! - **Before a refusal** ([`Sidecar::confirm_held`]): a create that would pass `sandboxes`
//!   is refused only after the provider was asked whether what the session holds there still
//!   exists (a `docker run --rm` whose `destroy` event is a few milliseconds behind the next
//!   create must not be refused for it).
//!
//! Each is journaled `vanished` (with when the provider said so), dropped from the holdings
//! (its slot freed) and ended in the meter at that time. What no event and no look-up says
//! is gone stays held: unknown is not gone. A provider that can neither follow nor look one
//! sandbox up (a plugin without `describe`) frees its slots at the session's end, as before.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use super::lease::Clock;
use super::Sidecar;
use crate::ledger::Record;
use crate::protocol::Target;
use crate::providers::{Described, Gone, ProviderError, Sandbox};

/// Look-ups in flight at once before a refusal.
const CONCURRENCY: usize = 8;

/// How long a refusal waits for the provider to say what still exists, at most.
const CONFIRM_FOR: Duration = super::CLAIM_LOOKUP;

impl<C: Clock> Sidecar<C> {
    /// `gone` went by itself, as its provider said: what the owner held of it is released,
    /// journaled `vanished` and synced, its slot freed and its time ended then.
    pub(super) fn on_gone(&mut self, gone: Gone) {
        let held: Vec<Target> = {
            let h = self.held();
            naming(&h.claims, &gone.sandbox)
                .chain(naming(&h.detached, &gone.sandbox))
                .filter(|t| gone.sandbox.named_by(&self.providers, t))
                .cloned()
                .collect()
        };
        if held.is_empty() {
            return;
        }
        for t in &held {
            tracing::info!(
                "{} {} is gone (its provider says so): released",
                t.provider,
                crate::protocol::echo(t.id.as_bytes())
            );
            self.write(&Record::Vanished {
                provider: t.provider.clone(),
                id: t.id.clone(),
                at: gone.at_ms,
            });
        }
        self.sync();
        self.share(|h| {
            h.claims.retain(|c| !held.contains(c));
            h.detached.retain(|d| !held.contains(d));
        });
        self.meter.ended(|c| held.contains(c), gone.at_ms);
    }

    /// Asks `provider` whether the sandboxes the session holds there still exist, releasing
    /// each it says is gone ([`Sidecar::on_gone`]); whether any was. Asked before a create is
    /// refused for `sandboxes` (see the module docs), within [`CONFIRM_FOR`]: a look-up that
    /// fails or does not answer in time releases nothing.
    pub(super) async fn confirm_held(&mut self, provider: &str) -> bool {
        let Some(p) = crate::providers::by_name(&self.providers, provider).cloned() else {
            return false;
        };
        let held: Vec<Sandbox> = {
            let h = self.held();
            h.claims
                .iter()
                .chain(h.detached.iter())
                .filter(|t| t.provider == provider)
                .filter_map(|t| Sandbox::from_claim(&self.providers, t).ok())
                .collect()
        };
        let p = p.as_ref();
        let looked = stream::iter(held)
            .map(|s| async move {
                let answer = p.describe(&s).await;
                (s, answer)
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>();
        let Ok(described) = tokio::time::timeout(CONFIRM_FOR, looked).await else {
            tracing::warn!("{provider} did not say in time what the session still holds");
            return false;
        };
        let at_ms = crate::ledger::now_ms();
        let mut any = false;
        for (s, answer) in described {
            let went = match answer {
                Ok(Described::Gone) | Err(ProviderError::Gone(_)) => true,
                // Its id names another object now: the one held is gone.
                Ok(Described::Found(now)) => !s.names(p, &now),
                Ok(Described::Unsupported) | Err(_) => false,
            };
            if went {
                any = true;
                self.on_gone(Gone { sandbox: s, at_ms });
            }
        }
        any
    }
}

/// The targets of `held` that may name `s`, found by what a claim of it can be (its id, a
/// prefix of it where ids are matched by prefix, or it pinned, `ID@IDENTITY`), not by walking
/// every claim: a `destroy` of each of a session's containers must not cost what it holds
/// (a sidecar may hold 100 000 claims). [`Sandbox::named_by`] then decides.
fn naming<'a>(held: &'a BTreeSet<Target>, s: &'a Sandbox) -> impl Iterator<Item = &'a Target> {
    let prefixes = (1..=s.id.len())
        .filter(|&end| s.id.is_char_boundary(end))
        .filter_map(move |end| {
            held.get(&Target {
                provider: s.provider.clone(),
                id: s.id[..end].to_string(),
            })
        });
    let pin = format!("{}@", s.id);
    let from = Target {
        provider: s.provider.clone(),
        id: pin.clone(),
    };
    let pinned = held
        .range(from..)
        .take_while(move |t| t.provider == s.provider && t.id.starts_with(&pin));
    prefixes.chain(pinned)
}
