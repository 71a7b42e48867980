//! The one reclaim path: `stop`, owner death, lease expiry and sweep all remove sandboxes
//! through [`reclaim_then`] (or its halves, [`list_all`] and [`remove_all`]).
//!
//! - Targets are explicit claims plus every sandbox whose labels match the selector, on every
//!   configured provider, as the one ownership judgement ([`crate::ownership`]) gives them to
//!   the session: nothing else is ever removed, whatever the provider returned.
//! - What the owner detached is never removed, whether it was named by its full id or by a
//!   prefix the provider accepts ([`Provider::names`]), nor anything labelled detached, nor a
//!   claimed sandbox that carries another session's label while that session may live.
//! - What a provider followed of the session while its owner lived ([`Provider::known`]) is
//!   removed first, beside the first listing, which still decides completeness. Where
//!   following is whole ([`Following::whole`]) and a settle pass will list anyway, the first
//!   pass does not list at all: it removes what was followed, and looks up each claim
//!   following does not hold ([`Provider::describe`]); the settle pass's listing finds the
//!   rest (a create still on its way at death, a labelled network or volume made outside
//!   the proxy: neither is followed). A listing beside the removals costs the daemon as much
//!   as a removal's tenth; fifty sidecars dying at once made 150 of them (issue 44).
//! - Providers are worked on concurrently; within one provider removals run with bounded
//!   concurrency, kind by kind (instances, then networks, then volumes): see [`remove`].
//! - A listing that fails transiently is tried again, with the same backoff as removals and
//!   `Retry-After` honoured, until the deadline: a five-second outage of a daemon must not
//!   leave a session pending. What each attempt found is removed at once.
//! - With a settle delay, every provider is listed once more after the first pass, because a
//!   create in flight when the owner died lands after the first listing. The second pass's
//!   listing failures are the ones reported: it is the latest word on each provider.
//! - At the deadline whatever is still failing is reported as [`Outcome::Unfinished`]; under a
//!   session that leaves the session pending for the next sweep.
//! - A cut ([`Options::cutoff`], the sweep service's stop) is the deadline brought forward:
//!   every wait of the reclaim answers at once, and what is left is reported as at the
//!   deadline ([`cutoff`]).

pub(crate) mod cutoff;
pub(crate) mod ending;
mod judged;
mod list;
mod options;
mod pace;
mod plan;
mod remove;
mod report;
pub(crate) mod stop;
mod target;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use crate::labels::Selector;
use futures_util::future::Either;

use crate::providers::{Following, Provider, Sandbox, SandboxKey};
use judged::Judged;

pub(crate) use list::list_all;
pub(crate) use options::Options;
pub(crate) use plan::{Listed, Plan};
pub(crate) use remove::remove_all;
pub(crate) use report::{Failure, ListFailure, Outcome, Removal, Report};
pub(crate) use target::ledger_target;

#[cfg(test)]
/// [`reclaim_then`] without being told of the first pass.
pub(crate) async fn reclaim<F>(
    providers: &[Arc<dyn Provider>],
    plan: &Plan,
    late: F,
    options: &Options,
) -> Report
where
    F: Future<Output = Vec<Sandbox>>,
{
    reclaim_then(providers, plan, late, options, None::<fn(&Report)>).await
}

/// The whole path. Each provider is listed (by every managed label where the session holds
/// claims, so that each claim is judged by the labels its sandbox carries), and what the
/// judgement gives the session goes, claims included.
/// With a settle delay, `late` (claims that arrive while the first pass runs) is collected
/// and the selector listed once more, and whatever is new is removed too.
///
/// `first`, when given, is called with the first pass's report before the settle delay (the
/// sidecar tells its owner how `bye` went without making it wait for the settle pass).
pub(crate) async fn reclaim_then<F, G>(
    providers: &[Arc<dyn Provider>],
    plan: &Plan,
    late: F,
    options: &Options,
    first: Option<G>,
) -> Report
where
    F: Future<Output = Vec<Sandbox>>,
    G: FnOnce(&Report),
{
    let started = Instant::now();
    let deadline = started + options.deadline;
    let (mut removals, mut list_failures) = pass(
        providers,
        plan,
        plan.claims.clone(),
        &HashSet::new(),
        options,
        deadline,
        if options.settle.is_some() {
            Then::SettlePass
        } else {
            Then::Nothing
        },
    )
    .await;
    removals.extend(plan.refused.iter().map(|(sandbox, reason)| Removal {
        at_ms: None,
        sandbox: sandbox.clone(),
        outcome: Outcome::Refused(reason.clone()),
        attempts: 0,
    }));
    if let Some(first) = first {
        first(&report_of(
            providers,
            removals.clone(),
            list_failures.clone(),
        ));
    }
    if let Some(settle) = options.settle {
        let late = late.await;
        // Cut, the second pass still runs: every wait of it answers at once, and the late
        // claims are left unfinished rather than forgotten.
        options
            .cutoff
            .or(tokio::time::sleep_until(started + settle))
            .await;
        let done: HashSet<SandboxKey> = removals
            .iter()
            .filter(|r| r.outcome.is_final())
            .map(|r| key(&r.sandbox))
            .collect();
        let (again, failures) = pass(
            providers,
            plan,
            late,
            &done,
            options,
            deadline,
            Then::Nothing,
        )
        .await;
        removals.extend(again);
        list_failures = failures;
    }
    report_of(providers, removals, list_failures)
}

fn report_of(
    providers: &[Arc<dyn Provider>],
    removals: Vec<Removal>,
    list_failures: Vec<ListFailure>,
) -> Report {
    let listed = providers
        .iter()
        .map(|p| p.name().to_string())
        .filter(|n| !list_failures.iter().any(|f| &f.provider == n))
        .collect();
    Report {
        removals: merge(removals),
        list_failures,
        listed,
    }
}

/// One pass over every provider: `claims` removed at once, the selector listed (again until
/// it answers or the deadline comes) and its wanted matches removed; nothing in `done` twice.
/// `then`: what comes after this pass (a settle pass lists, so a provider whose following is
/// whole need not list now).
async fn pass(
    providers: &[Arc<dyn Provider>],
    plan: &Plan,
    claims: Vec<Sandbox>,
    done: &HashSet<SandboxKey>,
    options: &Options,
    deadline: Instant,
    then: Then,
) -> (Vec<Removal>, Vec<ListFailure>) {
    let (ours, elsewhere): (Vec<Sandbox>, Vec<Sandbox>) = claims
        .into_iter()
        .filter(|c| !done.contains(&key(c)))
        .partition(|c| providers.iter().any(|p| p.name() == c.provider));
    let elsewhere: Vec<Sandbox> = elsewhere
        .into_iter()
        .filter(|c| !plan.keep.iter().any(|k| key(k) == key(c)))
        .collect();
    // Claims on a provider that is not configured here fail with that reason.
    let mut removals = remove::remove_all_by(providers, elsewhere, options, deadline).await;
    let work = providers.iter().map(|p| {
        let claims: Vec<Sandbox> = ours
            .iter()
            .filter(|c| c.provider == p.name() && !plan.keeps(p.as_ref(), c))
            .cloned()
            .collect();
        let followed = plan
            .selector
            .session_id()
            .and_then(|session| p.known(session));
        match followed {
            Some(following) if following.whole && then == Then::SettlePass => Either::Left(
                followed_only(p.as_ref(), plan, claims, following, done, options, deadline),
            ),
            followed => Either::Right(one_provider(
                p.as_ref(),
                plan,
                claims,
                followed.map(|f| f.sandboxes),
                done,
                options,
                deadline,
            )),
        }
    });
    let mut failures = Vec::new();
    for (r, f) in futures_util::future::join_all(work).await {
        removals.extend(r);
        failures.extend(f);
    }
    (removals, failures)
}

/// One provider's share of a pass. Every sandbox listed, and every claim, goes through the
/// judgement ([`Plan::judge`]). A provider that holds claims is listed by every managed label,
/// not only this session's, so that a claim is judged by the labels its sandbox carries (a
/// claim of another live session's sandbox, or of one labelled detached, is refused); a claim
/// that names nothing listed carries no sandguard label and is the session's by its claim.
/// Claims are judged only once a listing answered in full: until then nobody can tell whose
/// they are, and at the deadline they are left unfinished (a sweep finishes them).
/// What the provider already knows of the session ([`Provider::known`]) goes first, judged
/// the same way, while the first listing runs.
async fn one_provider(
    provider: &dyn Provider,
    plan: &Plan,
    claims: Vec<Sandbox>,
    followed: Option<Vec<Sandbox>>,
    done: &HashSet<SandboxKey>,
    options: &Options,
    deadline: Instant,
) -> (Vec<Removal>, Option<ListFailure>) {
    let pace = options.pace(provider.name());
    let pace = pace.as_ref();
    let wide = !claims.is_empty();
    let mut judged = Judged::new(provider, plan, done.clone(), claims);
    let prelisted = plan.listed.as_ref().and_then(|listed| {
        if wide {
            listed.all(provider.name())
        } else {
            listed.of(provider.name(), plan.selector.session_id()?)
        }
    });
    if let Some(found) = prelisted {
        let (mut targets, mut removals) = judged.sort(found, true);
        let (described, refused) = judged.describe(options, deadline, pace).await;
        targets.extend(described);
        removals.extend(refused);
        removals.extend(remove::remove_from(provider, targets, options, deadline, pace).await);
        return (removals, None);
    }
    let selector = if wide {
        Selector::managed()
    } else {
        plan.selector.clone()
    };
    let mut removals = Vec::new();
    // What the provider followed of the session (Docker's event stream) is judged and removed
    // at once, beside the first listing: the first removal does not wait for a listing, and
    // the listing, still made, finds what following missed (already judged ones are skipped).
    let mut known = followed
        .map(|known| {
            let (targets, refused) = judged.sort(known, false);
            tracing::debug!(
                provider = provider.name(),
                "removing {} followed sandboxes beside the first listing",
                targets.len()
            );
            removals.extend(refused);
            targets
        })
        .filter(|targets| !targets.is_empty());
    let mut tries = 0;
    loop {
        tries += 1;
        let listing = list::attempt(provider, &selector, options, deadline, pace, tries);
        let attempt = match known.take() {
            Some(targets) => {
                let removing = remove::remove_from(provider, targets, options, deadline, pace);
                let (removed, attempt) = tokio::join!(removing, listing);
                removals.extend(removed);
                attempt
            }
            None => listing.await,
        };
        let (mut targets, refused) = judged.sort(attempt.found, attempt.retry.is_none());
        removals.extend(refused);
        let (described, refused) = judged.describe(options, deadline, pace).await;
        targets.extend(described);
        removals.extend(refused);
        removals.extend(remove::remove_from(provider, targets, options, deadline, pace).await);
        match attempt.retry {
            None => return (removals, None),
            Some(Err(failure)) => {
                removals.extend(judged.unjudged(&failure));
                return (removals, Some(failure));
            }
            // Cut, the next attempt answers at once with the cut.
            Some(Ok(delay)) => {
                options.cutoff.or(tokio::time::sleep(delay)).await;
            }
        }
    }
}

/// A first pass for a provider whose following is whole, before a settle pass that lists
/// (see the module docs): what was followed is judged and removed at once, each claim
/// following does not hold is looked up and judged by what it carries, and nothing is
/// listed. No listing, so no listing failure: the settle pass's is the one reported.
async fn followed_only(
    provider: &dyn Provider,
    plan: &Plan,
    claims: Vec<Sandbox>,
    followed: Following,
    done: &HashSet<SandboxKey>,
    options: &Options,
    deadline: Instant,
) -> (Vec<Removal>, Option<ListFailure>) {
    let pace = options.pace(provider.name());
    let pace = pace.as_ref();
    let mut judged = Judged::new(provider, plan, done.clone(), claims);
    // As if a listing had answered in full with what was followed: the claims it does not
    // answer for are looked up one by one, beside the first removals.
    let (targets, mut removals) = judged.sort(followed.sandboxes, true);
    tracing::debug!(
        provider = provider.name(),
        "removing {} followed sandboxes; following is whole, the settle pass lists",
        targets.len()
    );
    let removing = remove::remove_from(provider, targets, options, deadline, pace);
    let (removed, (described, refused)) =
        tokio::join!(removing, judged.describe(options, deadline, pace));
    removals.extend(removed);
    removals.extend(refused);
    removals.extend(remove::remove_from(provider, described, options, deadline, pace).await);
    (removals, None)
}

/// What comes after a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// A settle pass that lists every provider: a provider whose following is whole need not
    /// list in this one ([`followed_only`]).
    SettlePass,
    /// Nothing: this pass's listing is the last word.
    Nothing,
}

fn key(s: &Sandbox) -> SandboxKey {
    s.key()
}

/// Keeps one record per sandbox, preferring a final outcome (a second pass that found a
/// sandbox gone after the first pass timed out on it means it is gone). One per *object*:
/// where ids are names, a claim of the object an id named before (refused, final: "now is
/// not the one claimed") and the object the id names now (claimed too, its removal
/// unfinished) are two records; keyed by id alone, the refusal stood for both and the
/// session read `reclaimed` with the second still there (found by the model, seed
/// 499166176: a name is not an identity).
fn merge(removals: Vec<Removal>) -> Vec<Removal> {
    let mut seen: BTreeMap<(SandboxKey, Option<String>), Removal> = BTreeMap::new();
    for r in removals {
        let key = (key(&r.sandbox), r.sandbox.identity.clone());
        match seen.get(&key) {
            Some(existing) if existing.outcome.is_final() || !r.outcome.is_final() => {}
            _ => {
                seen.insert(key, r);
            }
        }
    }
    seen.into_values().collect()
}

#[cfg(test)]
mod tests;
