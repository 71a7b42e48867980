//! The one reclaim path: `stop`, owner death, lease expiry and sweep all remove sandboxes
//! through [`reclaim`] (or its two halves, [`list_all`] and [`remove_all`]).
//!
//! - Targets are explicit claims plus every sandbox whose labels match the selector, on every
//!   configured provider. Nothing else is ever removed: a listed sandbox that does not match
//!   the selector is dropped before removal, whatever the provider returned.
//! - Providers are worked on concurrently; within one provider removals run with bounded
//!   concurrency, kind by kind (instances, then networks, then volumes).
//! - Transient failures are retried with exponential backoff and jitter ("equal jitter": half
//!   the delay fixed, half random). A provider's `Retry-After` closes a gate for that whole
//!   provider: no request goes to it before the hint has elapsed.
//! - "Already gone" counts as removed. A fatal error stops retrying that one sandbox; the pass
//!   goes on and the failure sets the final status.
//! - At the deadline whatever is still failing is reported as [`Outcome::Unfinished`]; under a
//!   session that leaves the session pending for the next sweep.
//! - With a settle delay, the selector is listed once more after the first pass, because a
//!   create in flight when the owner died lands after the first listing.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::ReclaimSettings;
use crate::labels::{self, Selector};
use crate::providers::{Provider, ProviderError, Sandbox};

/// Limits of one reclaim.
#[derive(Debug, Clone)]
pub struct Options {
    pub concurrency: usize,
    pub deadline: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Delay before the second listing; `None` lists once.
    pub settle: Option<Duration>,
}

impl From<&ReclaimSettings> for Options {
    fn from(s: &ReclaimSettings) -> Self {
        Options {
            concurrency: s.concurrency,
            deadline: s.deadline,
            retry_initial: s.retry_initial,
            retry_max: s.retry_max,
            settle: Some(s.settle).filter(|d| !d.is_zero()),
        }
    }
}

/// What happened to one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// sandguard removed it.
    Removed,
    /// It was already gone (or being removed by someone else).
    Gone,
    /// The provider refused for good; retrying would not help.
    Failed(String),
    /// Still failing transiently when the deadline came: may still exist.
    Unfinished(String),
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Removed | Outcome::Gone)
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Removed => "removed",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "failed",
            Outcome::Unfinished(_) => "unfinished",
        }
    }
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Failed(e) | Outcome::Unfinished(e) => Some(e),
            _ => None,
        }
    }
}

/// One target and its outcome.
#[derive(Debug, Clone)]
pub struct Removal {
    pub sandbox: Sandbox,
    pub outcome: Outcome,
    pub attempts: u32,
}

/// A provider that could not be listed: its sandboxes may still be running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFailure {
    pub provider: String,
    pub error: String,
}

/// Everything one reclaim did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub removals: Vec<Removal>,
    pub list_failures: Vec<ListFailure>,
}

impl Report {
    /// Every target removed and every provider answered.
    pub fn is_clean(&self) -> bool {
        self.list_failures.is_empty() && self.removals.iter().all(|r| r.outcome.is_success())
    }

    /// One line with counts per provider: `docker: 3 removed, 1 gone, 0 failed; e2b: …`.
    pub fn summary(&self) -> String {
        let mut per: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
        for r in &self.removals {
            let slot = per.entry(r.sandbox.provider.as_str()).or_default();
            match r.outcome {
                Outcome::Removed => slot[0] += 1,
                Outcome::Gone => slot[1] += 1,
                Outcome::Failed(_) | Outcome::Unfinished(_) => slot[2] += 1,
            }
        }
        let mut parts: Vec<String> = per
            .iter()
            .map(|(p, [r, g, f])| format!("{p}: {r} removed, {g} already gone, {f} failed"))
            .collect();
        parts.extend(
            self.list_failures
                .iter()
                .map(|f| format!("{}: not listed", f.provider)),
        );
        if parts.is_empty() {
            "nothing to reclaim".to_string()
        } else {
            parts.join("; ")
        }
    }
}

/// Lists `selector` on every provider at once. Failures are returned beside the results,
/// never folded into an empty list; a provider that listed only some of its parts keeps
/// what it found, and each part that failed is one failure.
pub async fn list_all(
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
        found.extend(
            listing
                .found
                .into_iter()
                .filter(|s| selector.matches(&s.labels)),
        );
        failures.extend(listing.errors.into_iter().map(|e| ListFailure {
            provider: provider.clone(),
            error: e.to_string(),
        }));
    }
    (found, failures)
}

/// Removes every target through its provider. Targets whose provider is not among
/// `providers` fail with a clear error instead of being dropped.
pub async fn remove_all(
    providers: &[Arc<dyn Provider>],
    targets: Vec<Sandbox>,
    options: &Options,
) -> Vec<Removal> {
    let deadline = Instant::now() + options.deadline;
    let mut by_provider: BTreeMap<String, Vec<Sandbox>> = BTreeMap::new();
    for t in dedup(targets) {
        by_provider.entry(t.provider.clone()).or_default().push(t);
    }
    let work = by_provider.into_iter().map(|(name, targets)| {
        let provider = providers.iter().find(|p| p.name() == name).cloned();
        async move {
            match provider {
                Some(p) => remove_from(p, targets, options, deadline).await,
                None => targets
                    .into_iter()
                    .map(|sandbox| Removal {
                        outcome: Outcome::Failed(format!("provider {name:?} is not configured")),
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

/// What one reclaim is after: the selector's matches plus the claims, minus what must stay.
#[derive(Debug, Clone)]
pub struct Plan {
    pub selector: Selector,
    /// Sandboxes the owner claimed (they may carry no labels at all).
    pub claims: Vec<Sandbox>,
    /// `(provider, id)` pairs never to remove: those the owner detached.
    pub keep: HashSet<(String, String)>,
    /// Also spare sandboxes labelled `sandguard.detached=true` (a session's own reclaim does;
    /// `stop`, which the user asked for by name or by session, does not).
    pub spare_detached: bool,
}

impl Plan {
    fn wants(&self, s: &Sandbox) -> bool {
        self.selector.matches(&s.labels)
            && !self.keep.contains(&(s.provider.clone(), s.id.clone()))
            && !(self.spare_detached
                && s.labels.get(labels::DETACHED).map(String::as_str) == Some("true"))
    }
}

/// The whole path. Claims are removed at once, while the selector is being listed (so a
/// claimed sandbox is not kept waiting for a listing); then what the listing found goes.
/// With a settle delay, `late` (claims that arrive while the first pass runs) is collected
/// and the selector listed once more, and whatever is new is removed too.
pub async fn reclaim<F>(
    providers: &[Arc<dyn Provider>],
    plan: &Plan,
    late: F,
    options: &Options,
) -> Report
where
    F: Future<Output = Vec<Sandbox>>,
{
    let started = Instant::now();
    let claims: Vec<Sandbox> = plan
        .claims
        .iter()
        .filter(|c| !plan.keep.contains(&(c.provider.clone(), c.id.clone())))
        .cloned()
        .collect();
    let claimed: HashSet<(String, String)> = claims.iter().map(key).collect();
    let listed_pass = async {
        let (found, failures) = list_all(providers, &plan.selector).await;
        let targets = found
            .into_iter()
            .filter(|s| plan.wants(s) && !claimed.contains(&key(s)))
            .collect();
        (remove_all(providers, targets, options).await, failures)
    };
    let (mut removals, (listed, mut list_failures)) =
        tokio::join!(remove_all(providers, claims, options), listed_pass);
    removals.extend(listed);
    if let Some(settle) = options.settle {
        let late = late.await;
        tokio::time::sleep_until(started + settle).await;
        let (found, failures) = list_all(providers, &plan.selector).await;
        let done: HashSet<(String, String)> = removals
            .iter()
            .filter(|r| r.outcome.is_success())
            .map(|r| key(&r.sandbox))
            .collect();
        let again: Vec<Sandbox> = found
            .into_iter()
            .filter(|s| plan.wants(s))
            .chain(late.into_iter().filter(|c| !plan.keep.contains(&key(c))))
            .filter(|s| !done.contains(&key(s)))
            .collect();
        let second = Options {
            deadline: options.deadline.saturating_sub(started.elapsed()),
            ..options.clone()
        };
        removals.extend(remove_all(providers, again, &second).await);
        // A provider that answered the second time was listed after all.
        list_failures.retain(|f| failures.iter().any(|g| g.provider == f.provider));
    }
    Report {
        removals: merge(removals),
        list_failures,
    }
}

fn key(s: &Sandbox) -> (String, String) {
    (s.provider.clone(), s.id.clone())
}

/// Keeps one record per sandbox, preferring a success (a second pass that found a sandbox
/// gone after the first pass timed out on it means it is gone).
fn merge(removals: Vec<Removal>) -> Vec<Removal> {
    let mut seen: BTreeMap<(String, String), Removal> = BTreeMap::new();
    for r in removals {
        let key = (r.sandbox.provider.clone(), r.sandbox.id.clone());
        match seen.get(&key) {
            Some(existing) if existing.outcome.is_success() || !r.outcome.is_success() => {}
            _ => {
                seen.insert(key, r);
            }
        }
    }
    seen.into_values().collect()
}

fn dedup(targets: Vec<Sandbox>) -> Vec<Sandbox> {
    let mut seen = HashSet::new();
    targets
        .into_iter()
        .filter(|t| seen.insert((t.provider.clone(), t.id.clone())))
        .collect()
}

async fn remove_from(
    provider: Arc<dyn Provider>,
    mut targets: Vec<Sandbox>,
    options: &Options,
    deadline: Instant,
) -> Vec<Removal> {
    targets.sort_by_key(|t| t.kind);
    let gate = Gate::default();
    let mut removals = Vec::with_capacity(targets.len());
    let mut rest = targets.as_slice();
    while let Some(first) = rest.first() {
        let phase_len = rest.iter().take_while(|t| t.kind == first.kind).count();
        let (phase, tail) = rest.split_at(phase_len);
        rest = tail;
        let done: Vec<Removal> = stream::iter(phase.iter().cloned())
            .map(|sandbox| remove_one(provider.as_ref(), sandbox, options, deadline, &gate))
            .buffer_unordered(options.concurrency.max(1))
            .collect()
            .await;
        removals.extend(done);
    }
    removals
}

/// The "not before" instant a provider's `Retry-After` set, shared by all its removals.
#[derive(Default)]
struct Gate(Mutex<Option<Instant>>);

impl Gate {
    async fn wait(&self) {
        let until = *self.0.lock().await;
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }
    async fn close_for(&self, pause: Duration) {
        let until = Instant::now() + pause;
        let mut slot = self.0.lock().await;
        if slot.is_none_or(|u| u < until) {
            *slot = Some(until);
        }
    }
}

async fn remove_one(
    provider: &dyn Provider,
    sandbox: Sandbox,
    options: &Options,
    deadline: Instant,
    gate: &Gate,
) -> Removal {
    let mut attempts = 0;
    loop {
        gate.wait().await;
        attempts += 1;
        let error = match provider.remove(&sandbox).await {
            Ok(()) => return finish(sandbox, Outcome::Removed, attempts),
            Err(ProviderError::Gone(_)) => return finish(sandbox, Outcome::Gone, attempts),
            Err(ProviderError::Fatal(e)) => return finish(sandbox, Outcome::Failed(e), attempts),
            Err(ProviderError::Transient {
                message,
                retry_after,
            }) => {
                if let Some(pause) = retry_after {
                    gate.close_for(pause).await;
                }
                (message, retry_after)
            }
        };
        let delay = backoff(options, attempts).max(error.1.unwrap_or_default());
        if Instant::now() + delay >= deadline {
            return finish(sandbox, Outcome::Unfinished(error.0), attempts);
        }
        tracing::debug!(provider = provider.name(), id = %sandbox.id, attempt = attempts, "retrying in {delay:?}: {}", error.0);
        tokio::time::sleep(delay).await;
    }
}

fn finish(sandbox: Sandbox, outcome: Outcome, attempts: u32) -> Removal {
    match &outcome {
        Outcome::Removed | Outcome::Gone => {
            tracing::debug!(provider = %sandbox.provider, id = %sandbox.id, "{}", outcome.as_str())
        }
        Outcome::Failed(e) | Outcome::Unfinished(e) => tracing::warn!("{e}"),
    }
    Removal {
        sandbox,
        outcome,
        attempts,
    }
}

/// `initial * 2^(attempt-1)`, capped, then "equal jitter": a uniform pick in `[d/2, d]`.
fn backoff(options: &Options, attempt: u32) -> Duration {
    let exp = options
        .retry_initial
        .saturating_mul(1u32 << (attempt - 1).min(20));
    let capped = exp.min(options.retry_max);
    let half = capped / 2;
    half + half.mul_f64(jitter())
}

/// A uniform number in `[0, 1)` from the kernel's random source.
fn jitter() -> f64 {
    let mut b = [0u8; 8];
    if crate::unix::random_bytes(&mut b).is_err() {
        return 0.5;
    }
    (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
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
        }
    }

    fn plan(session: &str) -> Plan {
        Plan {
            selector: Selector::session(session),
            claims: vec![],
            keep: HashSet::new(),
            spare_detached: true,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn kinds_go_in_order_and_strangers_are_left_alone() {
        let p = Fake::holding(vec![
            sandbox("v", Kind::Volume, Some("s")),
            sandbox("n", Kind::Network, Some("s")),
            sandbox("c", Kind::Instance, Some("s")),
            sandbox("x", Kind::Instance, Some("other")),
            sandbox("y", Kind::Instance, None),
        ]);
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        let report = reclaim(&providers, &plan("s"), async { vec![] }, &options()).await;
        assert!(report.is_clean());
        assert_eq!(report.removals.len(), 3);
        let kinds: Vec<Kind> = p
            .calls_log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, k, _)| *k)
            .collect();
        assert_eq!(kinds, vec![Kind::Instance, Kind::Network, Kind::Volume]);
        assert_eq!(p.remaining(), vec!["x", "y"]);
    }

    #[tokio::test(start_paused = true)]
    async fn claims_detached_and_late_arrivals() {
        let mut detached = sandbox("d", Kind::Instance, Some("s"));
        detached
            .labels
            .insert(labels::DETACHED.into(), "true".into());
        let p = Fake::holding(vec![
            sandbox("c", Kind::Instance, None),
            sandbox("k", Kind::Instance, Some("s")),
            detached,
            sandbox("late", Kind::Instance, None),
        ]);
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        let mut plan = plan("s");
        plan.claims = vec![sandbox("c", Kind::Instance, None)];
        plan.keep.insert(("fake".into(), "k".into()));
        let opts = Options {
            settle: Some(Duration::from_secs(2)),
            ..options()
        };
        let report = reclaim(
            &providers,
            &plan,
            async { vec![sandbox("late", Kind::Instance, None)] },
            &opts,
        )
        .await;
        assert!(report.is_clean(), "{:?}", report.removals);
        assert_eq!(p.remaining(), vec!["d", "k"]);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_waited_out() {
        let p = Fake::flaky(
            vec![sandbox("c", Kind::Instance, Some("s"))],
            1,
            Some(Duration::from_secs(7)),
        );
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        let removals = remove_all(
            &providers,
            vec![sandbox("c", Kind::Instance, Some("s"))],
            &options(),
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
        let opts = Options {
            deadline: Duration::from_secs(3),
            ..options()
        };
        let removals = remove_all(
            &providers,
            vec![sandbox("c", Kind::Instance, Some("s"))],
            &opts,
        )
        .await;
        assert!(matches!(removals[0].outcome, Outcome::Unfinished(_)));
        assert!(removals[0].attempts > 2);
    }

    #[test]
    fn backoff_grows_with_jitter_and_is_capped() {
        let o = options();
        for attempt in 1..30 {
            let d = backoff(&o, attempt);
            let full = o
                .retry_initial
                .saturating_mul(1 << (attempt - 1).min(20))
                .min(o.retry_max);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
    }
}
