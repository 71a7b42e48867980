//! Listing providers: once (for `ps`, `stop` and a sweep's look over every provider), or, in a
//! reclaim, again and again until the listing succeeds or the deadline comes.
//!
//! A reclaim's listing is cut like its removals ([`super::cutoff`]): a cut listing failed.
//!
//! A listing failure is never an empty list: it comes back as a [`ListFailure`] beside what
//! was found, so the caller can say that sandboxes may still be running. What a provider could
//! list is kept even when another part of its listing failed ([`Provider::list_parts`]).

use std::sync::Arc;

use tokio::time::Instant;

use super::pace::Pace;
use super::remove::backoff;
use super::{Failure, ListFailure, Options};
use crate::labels::Selector;
use crate::providers::{Listing, Provider, ProviderError, Sandbox};

/// Lists `selector` on every provider at once, one attempt each. Failures are returned
/// beside the results, never folded into an empty list.
pub(crate) async fn list_all(
    providers: &[Arc<dyn Provider>],
    selector: &Selector,
) -> (Vec<Sandbox>, Vec<ListFailure>) {
    let results = futures_util::future::join_all(
        providers
            .iter()
            .map(|p| async move { (p.name().to_string(), p.list_parts(selector).await) }),
    )
    .await;
    let mut found = Vec::new();
    let mut failures = Vec::new();
    for (provider, listing) in results {
        found.extend(matching(listing.found, selector));
        if let Some(failure) = failure(&provider, &listing.errors) {
            failures.push(failure);
        }
    }
    (found, failures)
}

/// One listing attempt of one provider, as a reclaim sees it.
pub(super) struct Attempt {
    pub found: Vec<Sandbox>,
    /// `None`: everything was listed. `Some(Ok(delay))`: worth trying again after `delay`.
    /// `Some(Err(failure))`: given up (a fatal error, or no time left before the deadline).
    pub retry: Option<Result<std::time::Duration, ListFailure>>,
}

/// Lists one provider once for a reclaim and says whether (and when) to try again: transient
/// failures are retried with the removal path's backoff, `Retry-After` honoured through the
/// provider's pace, until `deadline`. The listing holds a place in the pace's window (it is
/// one call, or one call per page, like a removal), so a throttled listing slows the
/// provider's removals too.
pub(super) async fn attempt(
    provider: &dyn Provider,
    selector: &Selector,
    options: &Options,
    deadline: Instant,
    pace: &Pace,
    tries: u32,
) -> Attempt {
    // A place in the pace's window like a removal's: with a pace shared by several reclaims,
    // their listings are calls to the provider like any other, under the same gate and cap.
    let cut = || Attempt {
        found: Vec::new(),
        retry: Some(Err(ListFailure {
            provider: provider.name().to_string(),
            error: super::cutoff::cut_short().into(),
        })),
    };
    let Some(slot) = options.cutoff.or(pace.slot()).await else {
        return cut();
    };
    let Some(Listing { found, errors }) = options.cutoff.or(provider.list_parts(selector)).await
    else {
        return cut();
    };
    let found: Vec<Sandbox> = matching(found, selector).collect();
    let Some(failure) = failure(provider.name(), &errors) else {
        slot.succeeded();
        return Attempt { found, retry: None };
    };
    if errors.iter().any(super::remove::is_throttled) {
        slot.throttled();
    } else {
        drop(slot);
    }
    let mut delay = backoff(options, tries);
    for e in &errors {
        match e {
            ProviderError::Transient {
                retry_after: Some(pause),
                ..
            } => {
                pace.close_for(*pause);
                delay = delay.max(*pause);
            }
            ProviderError::Transient { .. } => {}
            // Gone is not an answer a listing can give; anything else will not get better.
            _ => {
                return Attempt {
                    found,
                    retry: Some(Err(failure)),
                }
            }
        }
    }
    let retry = if Instant::now() + delay >= deadline || options.cutoff.is_cut() {
        Err(failure)
    } else {
        tracing::debug!(
            provider = provider.name(),
            attempt = tries,
            "listing again in {delay:?}: {}",
            failure.error
        );
        Ok(delay)
    };
    Attempt {
        found,
        retry: Some(retry),
    }
}

/// What was found that the selector really asks for: a provider that ignored the filter still
/// cannot lead sandguard to a stranger.
fn matching(found: Vec<Sandbox>, selector: &Selector) -> impl Iterator<Item = Sandbox> + '_ {
    found.into_iter().filter(|s| selector.matches(&s.labels))
}

/// The errors of one listing as one failure ([`Failure::joined`]), or `None` when there were none.
fn failure(provider: &str, errors: &[ProviderError]) -> Option<ListFailure> {
    if errors.is_empty() {
        return None;
    }
    Some(ListFailure {
        provider: provider.to_string(),
        error: Failure::joined(errors),
    })
}
