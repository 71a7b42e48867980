//! The one reclaim path: `stop`, owner death, lease expiry and sweep all remove sandboxes
//! through [`reclaim_then`] (or its halves, [`list_all`] and [`remove_all`]).
//!
//! - Targets are explicit claims plus every sandbox whose labels match the selector, on every
//!   configured provider, as the one ownership judgement ([`crate::ownership`]) gives them to
//!   the session: nothing else is ever removed, whatever the provider returned.
//! - What the owner detached is never removed, whether it was named by its full id or by a
//!   prefix the provider accepts ([`Provider::names`]), nor anything labelled detached, nor a
//!   claimed sandbox that carries another session's label while that session may live.
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

mod list;
mod pace;
mod remove;
pub mod session;
pub mod stop;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ReclaimSettings;
use crate::labels::Selector;
use crate::ownership::{self, known::Known, Facts, Judgement};
use crate::protocol::Target;
use crate::providers::{Kind, Provider, Refusal, Sandbox, SandboxKey};

pub use list::list_all;
pub use remove::remove_all;

use pace::Pace;

/// Limits of one reclaim.
#[derive(Debug, Clone)]
pub struct Options {
    pub concurrency: usize,
    pub deadline: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Delay before the second listing; `None` lists once.
    pub settle: Option<Duration>,
    /// Calls a second never to exceed, per provider (`[providers.NAME] rate`).
    pub rates: BTreeMap<String, f64>,
    /// Where each provider's [`Pace`] comes from: a fresh one per reclaim (the default), or
    /// one shared by every reclaim run with these options ([`Paces::shared`]).
    pub paces: Paces,
}

impl Options {
    /// The rate cap of provider `name`, if it has one.
    pub fn rate(&self, name: &str) -> Option<f64> {
        self.rates.get(name).copied()
    }

    /// These options with one pace per provider shared by every reclaim that uses them (or a
    /// clone of them): a sweep reclaiming several sessions at once calls each provider as
    /// politely as one reclaim would.
    pub fn sharing_paces(&self) -> Options {
        Options {
            paces: Paces::shared(),
            ..self.clone()
        }
    }

    /// The pace of `provider` for one reclaim: its own, or the shared one.
    fn pace(&self, provider: &str) -> Arc<Pace> {
        let fresh = || Arc::new(Pace::new(self.concurrency, self.rate(provider)));
        match &self.paces.0 {
            None => fresh(),
            Some(shared) => shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(provider.to_string())
                .or_insert_with(fresh)
                .clone(),
        }
    }
}

/// The paces of a reclaim's providers. Not shared (the default), every reclaim makes its own;
/// shared, the first reclaim to call a provider makes its pace and every later one (through a
/// clone of the same [`Options`]) waits at the same gate, in the same window, at the same
/// rate: a `Retry-After` holds back every session's calls to that provider, and
/// `[providers.NAME] rate` caps them all together.
#[derive(Clone, Default)]
pub struct Paces(Option<Arc<std::sync::Mutex<PaceMap>>>);

/// The shared paces, by provider.
type PaceMap = BTreeMap<String, Arc<Pace>>;

impl Paces {
    /// Paces shared by every holder of a clone of this value.
    pub fn shared() -> Paces {
        Paces(Some(Arc::default()))
    }
}

impl std::fmt::Debug for Paces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "shared"
        } else {
            "per reclaim"
        })
    }
}

impl From<&ReclaimSettings> for Options {
    fn from(s: &ReclaimSettings) -> Self {
        Options {
            concurrency: s.concurrency,
            deadline: s.deadline,
            retry_initial: s.retry_initial,
            retry_max: s.retry_max,
            settle: Some(s.settle).filter(|d| !d.is_zero()),
            rates: s.rates.clone(),
            paces: Paces::default(),
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
    /// The provider refused for good; retrying would not help. It may still exist.
    Failed(String),
    /// Still failing transiently when the deadline came: may still exist.
    Unfinished(String),
    /// sandguard will never act on it (it does not name a sandbox of ours): final, and not
    /// a failure of the reclaim.
    Refused(String),
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Removed | Outcome::Gone)
    }
    /// Nothing is left to do: removed, gone, or refused for good.
    pub fn is_final(&self) -> bool {
        self.is_success() || matches!(self, Outcome::Refused(_))
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Removed => "removed",
            Outcome::Gone => "gone",
            Outcome::Failed(_) => "failed",
            Outcome::Unfinished(_) => "unfinished",
            Outcome::Refused(_) => "refused",
        }
    }
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::Failed(e) | Outcome::Unfinished(e) | Outcome::Refused(e) => Some(e),
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
    /// The providers whose (last) listing succeeded.
    pub listed: Vec<String>,
}

impl Report {
    /// Every target removed (or refused for good) and every provider answered.
    pub fn is_clean(&self) -> bool {
        self.list_failures.is_empty() && self.removals.iter().all(|r| r.outcome.is_final())
    }

    /// One line with counts per provider: `docker: 3 removed, 1 gone, 0 failed; e2b: …`.
    pub fn summary(&self) -> String {
        let mut per: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
        for r in &self.removals {
            let slot = per.entry(r.sandbox.provider.as_str()).or_default();
            match r.outcome {
                Outcome::Removed => slot[0] += 1,
                Outcome::Gone => slot[1] += 1,
                Outcome::Failed(_) | Outcome::Unfinished(_) => slot[2] += 1,
                Outcome::Refused(_) => slot[3] += 1,
            }
        }
        let mut parts: Vec<String> = per
            .iter()
            .map(|(p, [r, g, f, n])| {
                let refused = if *n > 0 {
                    format!(", {n} refused")
                } else {
                    String::new()
                };
                format!("{p}: {r} removed, {g} already gone, {f} failed{refused}")
            })
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

/// What one reclaim is after: the selector's matches plus the claims, minus what must stay.
#[derive(Debug, Clone)]
pub struct Plan {
    pub selector: Selector,
    /// Sandboxes the owner claimed (they may carry no labels at all).
    pub claims: Vec<Sandbox>,
    /// Sandboxes never to remove: those the owner detached, as it named them.
    pub keep: Vec<Sandbox>,
    /// Claims that can never name a sandbox of theirs (reported as refused, never touched).
    pub refused: Vec<(Sandbox, Refusal)>,
    /// What a sweep already listed for every session it reclaims: a provider found there is
    /// not listed again by this reclaim (one not found there is).
    pub listed: Option<Arc<Listed>>,
    /// How other sessions stand, for claims of sandboxes that do not carry this session's
    /// label (a claim adopts, it never steals). `None`: nothing is known of them, so none is
    /// taken from another session.
    pub known: Option<Arc<Known>>,
    /// How this session stands, for a label its sandboxes only inherited (a Docker image
    /// committed with its labels): alive by default (its sidecar reclaims); a sweep that
    /// finishes an ended session says when it ended.
    pub own: ownership::Session,
}

impl Plan {
    /// What a session's reclaim is after: its labels, its claims as the providers read them,
    /// minus what it detached.
    pub fn for_session<'a>(
        session: &str,
        providers: &[Arc<dyn Provider>],
        claims: impl IntoIterator<Item = &'a Target>,
        detached: impl IntoIterator<Item = &'a Target>,
    ) -> Plan {
        let mut plan = Plan {
            selector: Selector::session(session),
            claims: Vec::new(),
            keep: Vec::new(),
            refused: Vec::new(),
            listed: None,
            known: None,
            own: ownership::Session {
                owner: crate::identity::Liveness::Alive,
                sidecar: ownership::Sidecar::Alive,
                ended_at: None,
                lease: ownership::Lease::None,
            },
        };
        for t in claims {
            match Sandbox::from_claim(providers, t) {
                Ok(s) => plan.claims.push(s),
                Err(reason) => plan
                    .refused
                    .push((Sandbox::claimed(&t.provider, Kind::Instance, &t.id), reason)),
            }
        }
        // A detach the provider cannot read is kept as written: sparing too much is safe.
        plan.keep = detached
            .into_iter()
            .map(|t| {
                Sandbox::from_claim(providers, t)
                    .unwrap_or_else(|_| Sandbox::claimed(&t.provider, Kind::Instance, &t.id))
            })
            .collect();
        plan
    }

    /// Whether `s` (listed or claimed on `provider`) was detached.
    fn keeps(&self, provider: &dyn Provider, s: &Sandbox) -> bool {
        self.keep.iter().any(|k| {
            k.provider == s.provider
                && (k.id == s.id || provider.names(k, s) || provider.names(s, k))
        })
    }

    /// Whether the owner claimed `s`.
    fn claimed(&self, provider: &dyn Provider, s: &Sandbox) -> bool {
        self.claims
            .iter()
            .any(|c| c.provider == s.provider && (c.id == s.id || provider.names(c, s)))
    }

    /// The one judgement ([`crate::ownership`]) on `s` for this session's reclaim; `claimed`:
    /// the owner claimed it (in the plan, or late, during the settle delay).
    fn judge(&self, provider: &dyn Provider, s: &Sandbox, claimed: bool) -> Judgement {
        let session = self.selector.session_id().unwrap_or_default();
        let mut facts = Facts::of(s);
        facts.detached = self.keeps(provider, s);
        let ours = facts.labelled.is_some_and(|(id, _)| id == session);
        if ours {
            facts.labelled = Some((session, self.own));
            // A session that is over may have had its sandboxes adopted (and detached) by
            // another: a sweep finishing it asks the ledger. A live sidecar's cannot have.
            if self.own.sidecar != ownership::Sidecar::Alive {
                if let Some(known) = &self.known {
                    facts.detached |= known.detached(s);
                }
            }
        }
        if claimed {
            facts
                .claimed_by
                .push((session, ownership::Session::UNKNOWN));
            if !ours {
                if let Some(known) = &self.known {
                    facts.labelled = facts
                        .labelled
                        .map(|(id, _)| (id, known.session(id, s.owner())));
                    facts.claimed_by.extend(known.claimers(s, session));
                    // Detach wins over any claim: whoever detached it, it stays.
                    facts.detached |= known.detached(s);
                }
            }
        }
        ownership::judge(ownership::Asker::Reclaim { session }, &facts)
    }
}

/// Every managed sandbox of the providers a sweep listed once for all the sessions it
/// reclaims, by provider and session, so that reclaiming 10 000 sessions costs one listing
/// per provider instead of 10 000 (and the sessions' listings do not run side by side). A
/// provider whose listing failed is left out: each session's reclaim lists it itself, with
/// its retries until its deadline, as without this.
#[derive(Debug, Default)]
pub struct Listed {
    by_provider: BTreeMap<String, HashMap<String, Vec<Sandbox>>>,
}

impl Listed {
    /// Lists every provider once (one attempt, under its pace: with shared paces, the pass's),
    /// keeping the providers that answered in full.
    pub async fn list(providers: &[Arc<dyn Provider>], options: &Options) -> Listed {
        let selector = Selector::managed();
        let deadline = Instant::now() + options.deadline;
        let work = providers.iter().map(|p| {
            let selector = &selector;
            async move {
                let pace = options.pace(p.name());
                let attempt =
                    list::attempt(p.as_ref(), selector, options, deadline, &pace, 1).await;
                (p.name().to_string(), attempt)
            }
        });
        let mut listed = Listed::default();
        for (provider, attempt) in futures_util::future::join_all(work).await {
            if attempt.retry.is_some() {
                tracing::info!(
                    "{provider} could not be listed for the whole sweep: each session lists it"
                );
                continue;
            }
            let sessions = listed.by_provider.entry(provider).or_default();
            for s in attempt.found {
                if let Some(session) = s.session().map(str::to_string) {
                    sessions.entry(session).or_default().push(s);
                }
            }
        }
        listed
    }

    /// What `provider` holds of `session`; `None` when the provider was not listed.
    fn of(&self, provider: &str, session: &str) -> Option<Vec<Sandbox>> {
        self.by_provider
            .get(provider)
            .map(|s| s.get(session).cloned().unwrap_or_default())
    }

    /// Every managed sandbox `provider` holds; `None` when it was not listed.
    fn all(&self, provider: &str) -> Option<Vec<Sandbox>> {
        self.by_provider
            .get(provider)
            .map(|s| s.values().flatten().cloned().collect())
    }
}

#[cfg(test)]
/// [`reclaim_then`] without being told of the first pass.
pub async fn reclaim<F>(
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
pub async fn reclaim_then<F, G>(
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
    )
    .await;
    removals.extend(plan.refused.iter().map(|(sandbox, reason)| Removal {
        sandbox: sandbox.clone(),
        outcome: Outcome::Refused(reason.to_string()),
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
        tokio::time::sleep_until(started + settle).await;
        let done: HashSet<SandboxKey> = removals
            .iter()
            .filter(|r| r.outcome.is_final())
            .map(|r| key(&r.sandbox))
            .collect();
        let (again, failures) = pass(providers, plan, late, &done, options, deadline).await;
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
async fn pass(
    providers: &[Arc<dyn Provider>],
    plan: &Plan,
    claims: Vec<Sandbox>,
    done: &HashSet<SandboxKey>,
    options: &Options,
    deadline: Instant,
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
        one_provider(p.as_ref(), plan, claims, done, options, deadline)
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
async fn one_provider(
    provider: &dyn Provider,
    plan: &Plan,
    claims: Vec<Sandbox>,
    done: &HashSet<SandboxKey>,
    options: &Options,
    deadline: Instant,
) -> (Vec<Removal>, Option<ListFailure>) {
    let pace = options.pace(provider.name());
    let pace = pace.as_ref();
    let mut judged = Judged {
        provider,
        plan,
        seen: done.clone(),
        claims,
        matched: HashSet::new(),
    };
    let wide = !judged.claims.is_empty();
    let prelisted = plan.listed.as_ref().and_then(|listed| {
        if wide {
            listed.all(provider.name())
        } else {
            listed.of(provider.name(), plan.selector.session_id()?)
        }
    });
    if let Some(found) = prelisted {
        let (targets, mut removals) = judged.sort(found, true);
        removals.extend(remove::remove_from(provider, targets, options, deadline, pace).await);
        return (removals, None);
    }
    let selector = if wide {
        Selector::managed()
    } else {
        plan.selector.clone()
    };
    let mut removals = Vec::new();
    let mut tries = 0;
    loop {
        tries += 1;
        let attempt = list::attempt(provider, &selector, options, deadline, pace, tries).await;
        let (targets, refused) = judged.sort(attempt.found, attempt.retry.is_none());
        removals.extend(refused);
        removals.extend(remove::remove_from(provider, targets, options, deadline, pace).await);
        match attempt.retry {
            None => return (removals, None),
            Some(Err(failure)) => {
                removals.extend(judged.unjudged(&failure));
                return (removals, Some(failure));
            }
            Some(Ok(delay)) => tokio::time::sleep(delay).await,
        }
    }
}

/// The judging state of one provider's share of a pass.
struct Judged<'a> {
    provider: &'a dyn Provider,
    plan: &'a Plan,
    /// Judged already (this pass or a finished earlier one).
    seen: HashSet<SandboxKey>,
    claims: Vec<Sandbox>,
    /// The claims a listed sandbox answered for.
    matched: HashSet<usize>,
}

impl Judged<'_> {
    /// What of `found` the judgement removes, and the claims it refuses (reported, final);
    /// with `complete`, the claims nothing listed answered for are judged too, bare.
    fn sort(&mut self, found: Vec<Sandbox>, complete: bool) -> (Vec<Sandbox>, Vec<Removal>) {
        let mut targets = Vec::new();
        let mut refused = Vec::new();
        for s in found {
            for (n, c) in self.claims.iter().enumerate() {
                if c.id == s.id || self.provider.names(c, &s) {
                    self.matched.insert(n);
                }
            }
            self.decide(s, &mut targets, &mut refused);
        }
        if complete {
            let bare: Vec<Sandbox> = (0..self.claims.len())
                .filter(|n| self.matched.insert(*n))
                .map(|n| self.claims[n].clone())
                .collect();
            for c in bare {
                self.decide(c, &mut targets, &mut refused);
            }
        }
        (targets, refused)
    }

    fn decide(&mut self, s: Sandbox, targets: &mut Vec<Sandbox>, refused: &mut Vec<Removal>) {
        if self.seen.contains(&key(&s)) {
            return;
        }
        let claimed = self.plan.claimed(self.provider, &s)
            || self
                .claims
                .iter()
                .any(|c| c.id == s.id || self.provider.names(c, &s));
        let judgement = self.plan.judge(self.provider, &s, claimed);
        if judgement.removes() {
            self.seen.insert(key(&s));
            targets.push(s);
        } else if judgement.reason.is_detached() {
            self.seen.insert(key(&s));
        } else if claimed {
            // A claim the judgement will not honour: said once, final. (A detached one is
            // kept above without a word: that is what its owner asked.)
            self.seen.insert(key(&s));
            refused.push(Removal {
                sandbox: s,
                outcome: Outcome::Refused(judgement.reason.to_string()),
                attempts: 0,
            });
        }
    }

    /// The claims no listing answered for by the deadline: nobody can tell whose they are.
    fn unjudged(&self, failure: &ListFailure) -> Vec<Removal> {
        (0..self.claims.len())
            .filter(|n| !self.matched.contains(n))
            .map(|n| &self.claims[n])
            .filter(|c| !self.seen.contains(&key(c)))
            .map(|c| Removal {
                sandbox: c.clone(),
                outcome: Outcome::Unfinished(format!(
                    "not judged: {} could not be listed ({})",
                    failure.provider, failure.error
                )),
                attempts: 0,
            })
            .collect()
    }
}

fn key(s: &Sandbox) -> SandboxKey {
    s.key()
}

/// Keeps one record per sandbox, preferring a final outcome (a second pass that found a
/// sandbox gone after the first pass timed out on it means it is gone).
fn merge(removals: Vec<Removal>) -> Vec<Removal> {
    let mut seen: BTreeMap<SandboxKey, Removal> = BTreeMap::new();
    for r in removals {
        let key = key(&r.sandbox);
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
