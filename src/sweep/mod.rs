//! Sweep: find what escaped and reclaim it, from cron (one pass) or as a service (`--every`).
//!
//! One pass looks at two things.
//!
//! (a) **The ledger**: sessions whose lock is free (their sidecar is dead) and whose state is
//! not final.
//! - `pending`, or `reclaiming` (a reclaim that died half way): finish it, whatever the owner;
//!   but a `pending` session that owes only providers this sweep does not have (a `sweep
//!   --provider P` over a session whose part on P is done) is left, with that reason, to a
//!   sweep that has them ([`reclaim::ending::Before::owed`]).
//! - Owner proven dead ([`crate::identity`]: this machine, this boot and pid namespace, the
//!   process gone; or a boot this machine ran and ended): reclaim the session (its labels on
//!   every provider, plus its claims, minus what it detached), through the one session ending
//!   ([`crate::reclaim::ending`]), journaled in the session's own journal under its lock.
//! - Owner alive: *adopt* it. In a one-shot sweep that only means reporting it; with `--every`
//!   the sweep takes the session's lock and watches the owner until it dies, then reclaims.
//! - Owner unknown (another pid namespace, a hidden pid, a boot never recorded): leave it.
//!
//! (b) **Every configured provider**: sandboxes carrying `sandguard.session` that no live
//! session (sidecar alive, or judged in (a)) covers.
//! - `sandguard.expires` in the past: reclaim, detached or not (an absolute TTL).
//! - Detached, by its `sandguard.detached=true` label or by the owner's `detach` in the
//!   ledger (matched as the provider matches ids, a Docker id prefix included): leave it;
//!   only its TTL ends it.
//! - Its session is in the local ledger and over: judged by the session's owner, not by the
//!   sandbox's labels (a container created after the session's last listing, stamped with the
//!   session label only, is still the session's). Owner dead: reclaim.
//! - Otherwise judged by its `sandguard.owner` label: dead → reclaim; alive, unknown or
//!   unreadable → leave (TTL only).
//!
//! With `--fleet`, a fleet pass ([`fleet`]) runs first: the sessions of the fleet store whose
//! lease expired, reclaimed wherever their machine was; then this pass, as without a fleet.
//!
//! Concurrent sweeps serialise on `sweep.lock` in the state directory ([`service::one_pass`]
//! takes it; [`service::serve`] runs the passes of `--every`).
//! `--dry-run` decides everything and touches nothing (not even the journals). A session whose
//! journal cannot be taken (a reader holds it for longer than [`ADOPT_PATIENCE`]) is an error
//! of the pass, never reported as reclaimed.
//!
//! Decisions:
//! - **A sweep limited to some providers finishes their part and leaves the rest**: a session's
//!   reclaim lists only the sweep's providers, and the session stays `pending` on the others
//!   (said once, by the one session ending); afterwards the session owes nothing this sweep
//!   has, and is left ("its reclaim is pending on docker only, which this sweep does not
//!   have"): no reclaim that cannot progress, no warning every pass.
//! - **A pass cut short** (the service's stop, [`Options::cutoff`]) ends as at its deadline:
//!   the listing and the reclaim at work answer at once ([`reclaim::cutoff`]), the session at
//!   work is journaled pending, and the sessions it had not begun are not touched (the next
//!   sweep judges them afresh; nothing of them needs journaling).

mod failure;
pub(crate) mod fleet;
pub(crate) mod service;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::labels::Selector;
use crate::ledger::{EndCause, Journal, LedgerError, SessionState, SessionView, StateDir};
use crate::ownership::known::Known;
pub(crate) use crate::ownership::SessionVerdict;
use crate::ownership::{self, Asker, Place, Reason};
use crate::providers::{Kind, Provider, Sandbox, SandboxKey};
use crate::reclaim::ending::{Before, Ending};
use crate::reclaim::{self, ListFailure, Options, Plan, Removal};

pub(crate) use failure::{StoreError, StoreFailure, StoreKind};

/// How long a sweep waits for a session's journal that someone else holds (a `sessions`
/// reader, say) before it counts the session as not reclaimed.
pub(crate) const ADOPT_PATIENCE: Duration = Duration::from_secs(1);

/// One decision, with the reason a user would want to read.
///
/// The reason is the verdict's why, and stays the same while the facts behind it do: the
/// `--every` output prints a verdict again only when its verdict or reason changes. What
/// moves on every pass (a fleet lease's countdown) is kept apart, in `lease_left`.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub session: String,
    /// `None` for a whole ledger session; the sandbox for a provider finding.
    pub sandbox: Option<SandboxKey>,
    pub verdict: SessionVerdict,
    pub reason: String,
    /// A fleet session whose lease another host holds: how long the lease had left when this
    /// pass read it (its sidecar renews it every third of the lease).
    pub lease_left: Option<Duration>,
}

/// Everything one pass decided and did.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    pub decisions: Vec<Decision>,
    pub removals: Vec<Removal>,
    /// The providers that could not be listed.
    pub list_failures: Vec<ListFailure>,
    /// What the ledger or the fleet store could not do ([`StoreFailure`]: never a provider's).
    pub store_failures: Vec<StoreFailure>,
    /// Ledger sessions whose owner lives: the caller may watch them.
    pub adopt: Vec<SessionView>,
    /// Ledger sessions this pass reclaimed, and the state each ended in (for the fleet store,
    /// [`fleet::tell_ended`]).
    pub ended: Vec<(String, SessionState)>,
    /// The managed objects each provider that answered listed at the start of the pass, by
    /// kind (the metrics' sandboxes alive, less what the pass removed).
    pub listed: BTreeMap<String, BTreeMap<Kind, usize>>,
    /// What the pass removed that no journal of this machine records (a sandbox judged by its
    /// labels, a fleet session's): the metrics count these from here, and the rest from the
    /// journals ([`crate::metrics`]).
    pub untold: Vec<Untold>,
    /// Ledger sessions this pass reclaimed that a reclaim had left `pending` (or
    /// `reclaiming`): what it finished, for the `pending_finished` event ([`crate::notify`]).
    pub finishing: Vec<String>,
    /// The detached sandboxes this pass listed and left (for `detached_alive`).
    pub detached: Vec<Sandbox>,
}

/// A removal no journal of this machine records: its provider, and why (a word of the
/// metrics' `cause`: `expired`, `owner_dead`, `lease_expired`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Untold {
    pub provider: String,
    pub cause: &'static str,
}

impl Untold {
    /// The removals of `removals` that removed something (not those already gone, failed or
    /// refused), each for the cause `cause` gives it.
    pub(crate) fn of<'a>(
        removals: &'a [Removal],
        cause: impl Fn(&SandboxKey) -> &'static str + 'a,
    ) -> impl Iterator<Item = Untold> + 'a {
        removals
            .iter()
            .filter(|r| r.outcome == reclaim::Outcome::Removed)
            .map(move |r| Untold {
                provider: r.sandbox.provider.clone(),
                cause: cause(&r.sandbox.key()),
            })
    }
}

impl Pass {
    pub(crate) fn is_clean(&self) -> bool {
        self.list_failures.is_empty()
            && self.store_failures.is_empty()
            && self.removals.iter().all(|r| r.outcome.is_final())
    }

    /// Counts of decisions by verdict, for the summary line.
    pub(crate) fn tally(&self) -> BTreeMap<SessionVerdict, usize> {
        let mut t = BTreeMap::new();
        for d in &self.decisions {
            *t.entry(d.verdict).or_insert(0) += 1;
        }
        t
    }
}

/// One sweep pass. With `dry_run` nothing is removed and nothing is written.
pub(crate) async fn pass(
    state: &StateDir,
    providers: &[Arc<dyn Provider>],
    options: &Options,
    dry_run: bool,
) -> Pass {
    let mut out = Pass::default();
    let sessions = match state.sessions() {
        Ok(s) => s,
        Err(e) => {
            out.store_failures
                .push(StoreFailure::unread(StoreKind::Ledger, e));
            Vec::new()
        }
    };
    let known = Arc::new(Known::of(sessions, state.judge(), providers));
    let (to_reclaim, covered) = judge_ledger(&known, providers, &mut out);
    let managed = Selector::managed();
    let listing = reclaim::list_all(providers, &managed);
    let (found, failures) = match options.cutoff.or(listing).await {
        Some(listed) => listed,
        None => (Vec::new(), cut_listings(providers)),
    };
    for p in providers {
        if !failures.iter().any(|f| f.provider == p.name()) {
            // Instances at 0 when none is listed: a provider that answered has a figure.
            out.listed
                .insert(p.name().to_string(), BTreeMap::from([(Kind::Instance, 0)]));
        }
    }
    for sandbox in &found {
        let kinds = out.listed.entry(sandbox.provider.clone()).or_default();
        *kinds.entry(sandbox.kind).or_default() += 1;
    }
    out.list_failures.extend(failures);
    let orphans = judge_found(found, &covered, &known, &mut out);
    if dry_run {
        return out;
    }
    let causes: HashMap<SandboxKey, &'static str> = orphans
        .iter()
        .map(|(sandbox, reason)| (sandbox.key(), reason.cause()))
        .collect();
    let orphans = orphans.into_iter().map(|(sandbox, _)| sandbox).collect();
    reclaim_sessions(state, providers, &to_reclaim, options, &known, &mut out).await;
    let removed = reclaim::remove_all(providers, orphans, options).await;
    out.untold.extend(Untold::of(&removed, |key| {
        causes.get(key).copied().unwrap_or("owner_dead")
    }));
    out.removals.extend(removed);
    out
}

/// The ledger's sessions to reclaim, one after the other, into `out`. Once the pass is cut
/// ([`Options::cutoff`]), those not begun are left as they are: nothing of them to journal,
/// and the next sweep judges them afresh.
async fn reclaim_sessions(
    state: &StateDir,
    providers: &[Arc<dyn Provider>],
    to_reclaim: &[SessionView],
    options: &Options,
    known: &Arc<Known>,
    out: &mut Pass,
) {
    for (begun, view) in to_reclaim.iter().enumerate() {
        if options.cutoff.is_cut() {
            let left = to_reclaim.len() - begun;
            tracing::warn!(
                "the sweep was stopped: {left} sessions it had not begun are left to the next sweep"
            );
            return;
        }
        match reclaim_session(state, providers, view, options, known).await {
            Ok((ended, report)) => {
                if matches!(view.state, SessionState::Pending | SessionState::Reclaiming) {
                    out.finishing.push(view.id.clone());
                }
                out.ended.push((view.id.clone(), ended));
                out.removals.extend(report.removals);
                out.list_failures.extend(report.list_failures);
            }
            Err(e) => {
                out.store_failures.push(StoreFailure::not_reclaimed(
                    StoreKind::Ledger,
                    &view.id,
                    e,
                ));
            }
        }
    }
}

/// (a) The ledger's sessions whose sidecar is gone and that are not over: decided, and the
/// live owners put up for adoption. Returns the sessions to reclaim, and every session a live
/// sidecar or this pass looks after (not to be judged again by their sandboxes).
fn judge_ledger(
    known: &Known,
    providers: &[Arc<dyn Provider>],
    out: &mut Pass,
) -> (Vec<SessionView>, HashSet<String>) {
    let sessions = known.views();
    let mut covered: HashSet<String> = sessions
        .iter()
        .filter(|s| s.sidecar_alive)
        .map(|s| s.id.clone())
        .collect();
    let mut to_reclaim = Vec::new();
    for view in sessions
        .iter()
        .filter(|s| !s.sidecar_alive && !s.state.is_final())
    {
        let elsewhere = owed_elsewhere(view, providers);
        let (verdict, reason) = judge_session(view, known, elsewhere.as_deref());
        out.decisions.push(Decision {
            session: view.id.clone(),
            sandbox: None,
            verdict,
            reason,
            lease_left: None,
        });
        covered.insert(view.id.clone());
        match verdict {
            SessionVerdict::Reclaim => to_reclaim.push(view.clone()),
            SessionVerdict::Adopt => out.adopt.push(view.clone()),
            SessionVerdict::Leave => {}
        }
    }
    (to_reclaim, covered)
}

/// (b) Every managed sandbox no covered session looks after, judged one by one
/// ([`ownership::judge`] as [`Asker::Sweep`]). Returns those to remove, each with the reason
/// it is removed for.
fn judge_found(
    found: Vec<Sandbox>,
    covered: &HashSet<String>,
    known: &Known,
    out: &mut Pass,
) -> Vec<(Sandbox, Reason)> {
    let mut orphans = Vec::new();
    for sandbox in found {
        let session = sandbox.session().unwrap_or_default().to_string();
        let judgement = ownership::judge(Asker::Sweep, &known.facts(&sandbox));
        if judgement.reason.is_detached() {
            // Told as alive long whoever covers it (`detached_alive`, [`crate::notify`]).
            out.detached.push(sandbox.clone());
        }
        if covered.contains(&session) && judgement.reason != Reason::Expired {
            continue;
        }
        let verdict = if judgement.removes() {
            SessionVerdict::Reclaim
        } else {
            SessionVerdict::Leave
        };
        out.decisions.push(Decision {
            session,
            sandbox: Some(sandbox.key()),
            verdict,
            reason: judgement.reason.to_string(),
            lease_left: None,
        });
        if verdict == SessionVerdict::Reclaim {
            orphans.push((sandbox, judgement.reason));
        }
    }
    orphans
}

/// A ledger session nobody guards, as the one judgement decides it
/// ([`ownership::judge_session`]: a reclaim that was begun is finished; otherwise its owner
/// decides); its reason is printed as given.
/// `elsewhere`: see [`owed_elsewhere`].
fn judge_session(
    view: &SessionView,
    known: &Known,
    elsewhere: Option<&str>,
) -> (SessionVerdict, String) {
    let found = ownership::Found {
        session: known.standing(view),
        place: Place::Ledger {
            state: view.state,
            pid: view.pid,
            elsewhere,
        },
    };
    let (verdict, why) = ownership::judge_session(found);
    (verdict, why.to_string())
}

/// For a `pending` session that owes only providers this sweep does not have
/// ([`Before::owed`]), their names, joined: nothing this sweep can do finishes it, and a sweep
/// that has them will. `None` for any other session (one that owes nothing it names is
/// finished as ever: its reclaim ends it).
fn owed_elsewhere(view: &SessionView, providers: &[Arc<dyn Provider>]) -> Option<String> {
    if view.state != SessionState::Pending {
        return None;
    }
    let owed = Before::from(view).owed();
    let here = |name: &String| providers.iter().any(|p| p.name() == name);
    let elsewhere = !owed.is_empty() && !owed.iter().any(here);
    elsewhere.then(|| owed.into_iter().collect::<Vec<_>>().join(", "))
}

/// Every provider's listing, failed for the cut ([`reclaim::cutoff`]): the pass was stopped
/// before they answered.
fn cut_listings(providers: &[Arc<dyn Provider>]) -> Vec<ListFailure> {
    providers
        .iter()
        .map(|p| ListFailure {
            provider: p.name().to_string(),
            error: reclaim::cutoff::cut_short().into(),
        })
        .collect()
}

/// Takes a session's journal (and lock), waiting up to [`ADOPT_PATIENCE`] for a reader that
/// holds it to let go.
pub(crate) async fn adopt(state: &StateDir, id: &str) -> Result<Journal, LedgerError> {
    let deadline = tokio::time::Instant::now() + ADOPT_PATIENCE;
    loop {
        match state.adopt_session(id) {
            Err(LedgerError::Locked { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            other => return other,
        }
    }
}

/// Reclaims one ledger session under its own lock, journaling as a sidecar would; the state
/// it ended in, and what was done.
pub(crate) async fn reclaim_session(
    state: &StateDir,
    providers: &[Arc<dyn Provider>],
    view: &SessionView,
    options: &Options,
    known: &Arc<Known>,
) -> Result<(SessionState, reclaim::Report), LedgerError> {
    let journal = adopt(state, &view.id).await?;
    Ok(reclaim_adopted(journal, providers, view, options, known.clone()).await)
}

/// Reclaims a session whose journal (and lock) the caller holds: its labels, its claims and
/// what is pending, minus what it detached.
/// `known`: the facts its judgement is told (how the other sessions stand, for its claims).
pub(crate) async fn reclaim_adopted(
    journal: Journal,
    providers: &[Arc<dyn Provider>],
    view: &SessionView,
    options: &Options,
    known: Arc<Known>,
) -> (SessionState, reclaim::Report) {
    let journal = Arc::new(Mutex::new(journal));
    let claims: Vec<_> = view.claims.iter().chain(view.pending.keys()).collect();
    let mut plan = Plan::for_session(&view.id, providers, (claims, &view.detached), known);
    plan.own.ended_at = crate::ownership::known::ended_at(view);
    plan.own.sidecar = crate::ownership::Sidecar::Gone;
    let once = Options {
        settle: None,
        ..options.clone()
    };
    let ending = Ending {
        journal: Some(&journal),
        providers,
        plan: &plan,
        options: &once,
        before: &Before::from(view),
        cause: EndCause::Sweep,
    };
    ending.run().await
}

#[cfg(test)]
mod tests;
