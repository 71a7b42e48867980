//! Removing targets: bounded concurrency per provider, kind by kind, retries with backoff and
//! jitter, and a per-provider gate that honours `Retry-After`.
//!
//! - Transient failures are retried with exponential backoff and "equal jitter" (half the
//!   delay fixed, half random). Each provider is called at its own [`Pace`]: a `Retry-After`
//!   holds every call to it until the hint has elapsed, and a throttled answer slows it down.
//! - "Already gone" counts as removed. A fatal error stops retrying that one sandbox; the pass
//!   goes on and the failure sets the final status. A refusal ([`ProviderError::Refused`]) is
//!   final and leaves nothing pending.
//! - At the deadline whatever is still failing is [`Outcome::Unfinished`]; so is it at a cut
//!   ([`super::cutoff`]), which ends every wait here at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;

use super::pace::Pace;
use super::{Failure, Options, Outcome, Removal};
use crate::backoff::Backoff;
use crate::providers::{Provider, ProviderError, Refusal, Sandbox};

/// Removes every target through its provider, within the options' deadline from now.
/// Targets whose provider is not among `providers` fail with a clear error instead of being
/// dropped.
pub(crate) async fn remove_all(
    providers: &[Arc<dyn Provider>],
    targets: Vec<Sandbox>,
    options: &Options,
) -> Vec<Removal> {
    remove_all_by(
        providers,
        targets,
        options,
        Instant::now() + options.deadline,
    )
    .await
}

/// [`remove_all`], all before `deadline`.
pub(super) async fn remove_all_by(
    providers: &[Arc<dyn Provider>],
    targets: Vec<Sandbox>,
    options: &Options,
    deadline: Instant,
) -> Vec<Removal> {
    let mut by_provider: BTreeMap<String, Vec<Sandbox>> = BTreeMap::new();
    for t in dedup(targets) {
        by_provider.entry(t.provider.clone()).or_default().push(t);
    }
    let work = by_provider.into_iter().map(|(name, targets)| {
        let provider = crate::providers::by_name(providers, &name).cloned();
        async move {
            match provider {
                Some(p) => {
                    let pace = options.pace(p.name());
                    remove_from(p.as_ref(), targets, options, deadline, &pace).await
                }
                None => targets
                    .into_iter()
                    .map(|sandbox| Removal {
                        at_ms: None,
                        outcome: Outcome::Failed(Failure::new(format!(
                            "provider {name:?} is not configured"
                        ))),
                        sandbox,
                        attempts: 0,
                    })
                    .collect(),
            }
        }
    });
    futures_util::future::join_all(work)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn dedup(targets: Vec<Sandbox>) -> Vec<Sandbox> {
    let mut seen = HashSet::new();
    targets
        .into_iter()
        .filter(|t| seen.insert((t.provider.clone(), t.id.clone())))
        .collect()
}

/// Removes targets of one provider, instances before networks before volumes.
pub(super) async fn remove_from(
    provider: &dyn Provider,
    mut targets: Vec<Sandbox>,
    options: &Options,
    deadline: Instant,
    pace: &Pace,
) -> Vec<Removal> {
    targets.sort_by_key(|t| t.kind);
    let mut removals = Vec::with_capacity(targets.len());
    let mut rest = targets.as_slice();
    while let Some(first) = rest.first() {
        let phase_len = rest.iter().take_while(|t| t.kind == first.kind).count();
        let (phase, tail) = rest.split_at(phase_len);
        rest = tail;
        let done: Vec<Removal> = stream::iter(phase.iter().cloned())
            .map(|sandbox| remove_one(provider, sandbox, options, deadline, pace))
            .buffer_unordered(options.window(provider.name()))
            .collect()
            .await;
        removals.extend(done);
    }
    removals
}

async fn remove_one(
    provider: &dyn Provider,
    sandbox: Sandbox,
    options: &Options,
    deadline: Instant,
    pace: &Pace,
) -> Removal {
    let call = || provider.remove(&sandbox);
    let (result, attempts) = retrying(provider, options, deadline, pace, call).await;
    let outcome = match result {
        Ok(()) => Outcome::Removed,
        Err(ProviderError::Gone(_)) => Outcome::Gone,
        Err(e @ ProviderError::Fatal(_)) => Outcome::Failed(e.into()),
        Err(ProviderError::Refused(e)) => Outcome::Refused(Refusal(e)),
        Err(e @ ProviderError::Transient { .. }) => Outcome::Unfinished(e.into()),
    };
    finish(sandbox, outcome, attempts)
}

/// Calls `call` (one request to `provider`) under its pace until it answers, fails for good,
/// or the deadline (or a cut, [`super::cutoff`]) comes: transient failures are retried with
/// [`backoff`], a `Retry-After` honoured (the pace held closed for it, and a throttled answer
/// slows the provider down). The last answer (at the deadline, the last transient failure;
/// cut before any came, [`super::cutoff::cut_short`]) and the attempts made. The one retry
/// loop of a removal, and of the look-up of a claim before it is judged.
pub(super) async fn retrying<T, F, Fut>(
    provider: &dyn Provider,
    options: &Options,
    deadline: Instant,
    pace: &Pace,
    mut call: F,
) -> (Result<T, ProviderError>, u32)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ProviderError>>,
{
    let mut attempts = 0;
    let cut = |attempts| (Err(super::cutoff::cut_short()), attempts);
    loop {
        let Some(slot) = options.cutoff.or(pace.slot()).await else {
            return cut(attempts);
        };
        attempts += 1;
        let Some(answer) = options.cutoff.or(call()).await else {
            return cut(attempts);
        };
        let failure = match answer {
            answer @ (Ok(_) | Err(ProviderError::Gone(_))) => {
                slot.succeeded();
                return (answer, attempts);
            }
            Err(e @ (ProviderError::Fatal(_) | ProviderError::Refused(_))) => {
                return (Err(e), attempts)
            }
            Err(e @ ProviderError::Transient { .. }) => e,
        };
        let retry_after = match &failure {
            ProviderError::Transient { retry_after, .. } => *retry_after,
            _ => None,
        };
        if is_throttled(&failure) {
            slot.throttled();
        } else {
            drop(slot);
        }
        if let Some(pause) = retry_after {
            pace.close_for(pause);
        }
        let delay = backoff(options, attempts).max(retry_after.unwrap_or_default());
        if Instant::now() + delay >= deadline {
            return (Err(failure), attempts);
        }
        tracing::debug!(
            provider = provider.name(),
            attempt = attempts,
            "retrying in {delay:?}: {failure}"
        );
        // Cut during the backoff: as at the deadline, the last answer stands.
        if options.cutoff.or(tokio::time::sleep(delay)).await.is_none() {
            return (Err(failure), attempts);
        }
    }
}

/// A provider telling us to slow down: a 429, or a transient answer with a retry hint (gRPC's
/// `RESOURCE_EXHAUSTED` with `retry_after`, a plugin's `retry_after_secs`).
pub(super) fn is_throttled(e: &ProviderError) -> bool {
    match e {
        ProviderError::Transient { retry_after, .. } => {
            e.status() == Some(429) || retry_after.is_some()
        }
        _ => false,
    }
}

fn finish(sandbox: Sandbox, outcome: Outcome, attempts: u32) -> Removal {
    match &outcome {
        Outcome::Removed | Outcome::Gone => {
            tracing::debug!(provider = %sandbox.provider, id = %sandbox.id, "{}", outcome.as_str());
        }
        Outcome::Failed(e) | Outcome::Unfinished(e) => tracing::warn!("{e}"),
        Outcome::Refused(e) => tracing::warn!("{e}"),
    }
    let at_ms = matches!(outcome, Outcome::Removed | Outcome::Gone).then(crate::ledger::now_ms);
    Removal {
        at_ms,
        sandbox,
        outcome,
        attempts,
    }
}

/// The reclaim path's backoff: the options' schedule, with jitter ([`crate::backoff`]).
pub(super) fn backoff(options: &Options, attempt: u32) -> Duration {
    Backoff::new(options.retry_initial, options.retry_max)
        .jittered()
        .delay(attempt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::fake::{sandbox, Fake};
    use crate::providers::Kind;

    fn options() -> Options {
        Options {
            concurrency: 4,
            deadline: Duration::from_secs(60),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(5),
            settle: None,
            rates: Default::default(),
            paces: Default::default(),
            cutoff: Default::default(),
            windows: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_waited_out() {
        let p = Fake::flaky(
            vec![sandbox("c", Kind::Instance, Some("s"))],
            1,
            Some(Duration::from_secs(7)),
        );
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        let o = options();
        let removals = remove_all(
            &providers,
            vec![sandbox("c", Kind::Instance, Some("s"))],
            &o,
        )
        .await;
        assert_eq!(removals[0].outcome, Outcome::Removed);
        assert_eq!(removals[0].attempts, 2);
        let log = p.calls_log.lock().unwrap();
        assert!(log[1].2 - log[0].2 >= Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_leaves_work_unfinished() {
        let p = Fake::flaky(
            vec![sandbox("c", Kind::Instance, Some("s"))],
            u32::MAX,
            None,
        );
        let providers: Vec<Arc<dyn Provider>> = vec![p];
        let o = Options {
            deadline: Duration::from_secs(3),
            ..options()
        };
        let removals = remove_all(
            &providers,
            vec![sandbox("c", Kind::Instance, Some("s"))],
            &o,
        )
        .await;
        assert!(matches!(removals[0].outcome, Outcome::Unfinished(_)));
        assert!(removals[0].attempts > 2);
    }

    #[test]
    fn backoff_doubles_from_100ms_is_capped_at_5s_and_varies() {
        let o = options();
        // Literal bounds: attempt 1 is in [50, 100] ms, attempt 3 in [200, 400] ms, and from
        // attempt 7 on (6.4 s uncapped) the cap holds: [2.5, 5] s.
        let within = |attempt, lo: u64, hi: u64| {
            let d = backoff(&o, attempt);
            assert!(
                d >= Duration::from_millis(lo) && d <= Duration::from_millis(hi),
                "attempt {attempt}: {d:?} not in [{lo}, {hi}] ms"
            );
            d
        };
        within(1, 50, 100);
        within(2, 100, 200);
        within(3, 200, 400);
        for attempt in 7..40 {
            within(attempt, 2_500, 5_000);
        }
        // Jitter: 50 draws of the same attempt are not all equal.
        let draws: HashSet<Duration> = (0..50).map(|_| backoff(&o, 10)).collect();
        assert!(draws.len() > 10, "no jitter: {draws:?}");
    }
}
