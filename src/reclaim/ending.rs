//! The one journaled session ending, used by the sidecar (its owner died, its lease expired,
//! or it said `bye`) and by a sweep (a dead owner's session, or a pending one).
//!
//! In order: the fact the cause rests on (`owner_dead`, `lease_expired`) and `reclaim_start`
//! with its cause ([`EndCause`]) are written; one reclaim runs while they are synced (one
//! `fdatasync` on a blocking thread, not two before the first listing: they acknowledge
//! nothing, and a sidecar that dies before they are durable leaves an active session of a dead
//! owner, which the next sweep reclaims all the same); the outcomes and the end (`clean` after
//! `bye`, `reclaimed`, or `pending`) are written and made durable by one sync, again on a
//! blocking thread (they acknowledge nothing either, and an end that did not reach the disk
//! leaves a session the next sweep finishes; a sweep ending many sessions at once does not wait
//! for each one's disk in turn); one summary line is logged.
//!
//! Decisions:
//! - **The summary is logged at `info` when nothing is left, at `warn` when something is
//!   pending.** A reclaim that did its job is news, not a problem: at the default level
//!   (`warn`) the sidecar's log (`sessions/ID.log`) and a sweep's stderr stay quiet, and
//!   `sandguard sessions show ID` tells what happened to each sandbox from the journal. What
//!   was left behind is a warning wherever it is read.
//! - **A session is final only when every provider in it is done.** The providers a session
//!   used are the ones its sidecar had configured (its `providers` record). One this reclaim
//!   did not list (a `sweep --provider P`, or a sweep on a host where it is not configured)
//!   is journaled `unlisted`, and the session stays `pending` until a reclaim lists it.
//! - **A provider's part, once done, stays done** ([`Before::owed`]). A `pending` session owes
//!   only the providers its earlier reclaim left unlisted or left sandboxes pending on: every
//!   other one was listed and emptied then. So a sweep that has only those finishes the
//!   session (a `sweep --provider e2b` ends a session whose Docker part its sidecar did),
//!   and a sweep that has none of them has nothing to do for it (the sweep leaves it,
//!   [`crate::sweep`]). A session not yet `pending` owes every provider it names.
//! - **The words say what is left, and where.** A reclaim that did everything it could but
//!   left providers it does not have says so ("done with what it has; pending on docker,
//!   which this reclaim does not list …"), never "could not be removed" beside "nothing to
//!   reclaim"; a reclaim that failed says it failed, and names what it left to others too.
//! - **Cut short, it ends as at its deadline** ([`super::cutoff`]): what the stopped sweep
//!   service did not finish is journaled pending, the end written whole.
//! - **The outcomes and the end are written with no await between them**, so an ending its
//!   caller drops (a stopping sweep service past its grace) is whole or not ended
//!   (`reclaiming`, or `pending` as before), never torn: keep it so.
//! - **Journals do not grow without bound.** Finishing a session that is already `pending`
//!   writes only what changed: no new `reclaim_start`, a `failed` record only when the error
//!   differs from the one journaled last for that sandbox, an `unlisted` only when the error
//!   changed, and no `end` when the session stays `pending`. A sweep every five minutes over a
//!   session that cannot be finished adds nothing to its journal.
//! - **A session whose truth lives elsewhere is ended without a journal** ([`Ending::journal`]
//!   `None`): a fleet sweep's session lives in the fleet store, which its sweep updates from
//!   the returned state; the same reclaim and summary, nothing written to this machine's disk.
//! - A refusal (a claim that can never name a sandbox of ours) is journaled once, `refused`,
//!   and leaves nothing pending.
//! - A claim the owner's pipe still delivers while the reclaim runs (drained by the sidecar)
//!   is journaled when it arrives, so `sandguard claim` sees it acknowledged, and removed by
//!   the second pass.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use super::{reclaim_then, Options, Outcome, Plan, Report};
use crate::ledger::{EndCause, Journal, Record, SessionState, SessionView};
use crate::protocol::Target;
use crate::providers::{Provider, Sandbox};

/// What the ledger knew of the session before this ending (nothing, for a sidecar's own).
#[derive(Debug, Default, Clone)]
pub(crate) struct Before {
    pub state: Option<SessionState>,
    pub pending: BTreeMap<Target, String>,
    pub unlisted: BTreeMap<String, String>,
    /// The providers the session used; `None` when its journal does not say.
    pub providers: Option<Vec<String>>,
}

impl Before {
    /// The providers this session's reclaim still owes (see the module docs): for a `pending`
    /// session, those its earlier reclaim left unlisted or left sandboxes pending on; for any
    /// other, every provider its journal names.
    pub(crate) fn owed(&self) -> BTreeSet<String> {
        let left = self
            .unlisted
            .keys()
            .cloned()
            .chain(self.pending.keys().map(|t| t.provider.clone()));
        if self.state == Some(SessionState::Pending) {
            return left.collect();
        }
        self.providers
            .iter()
            .flatten()
            .cloned()
            .chain(left)
            .collect()
    }
}

impl From<&SessionView> for Before {
    fn from(v: &SessionView) -> Before {
        Before {
            state: Some(v.state),
            pending: v.pending.clone(),
            unlisted: v.unlisted.clone(),
            providers: v.providers.clone(),
        }
    }
}

/// A journal shared by the ending and the sidecar's pipe drain, which journals late claims as
/// they arrive. Never locked across an await.
pub(crate) type SharedJournal = Arc<Mutex<Journal>>;

/// Appends one record; a failure is logged, not fatal (the outcome is still reported).
pub(crate) fn append(journal: &SharedJournal, record: &Record) {
    let mut j = journal
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Err(e) = j.append(record) {
        tracing::error!("session {}: {e}", j.id());
    }
}

/// Writes one record, made durable by the next [`sync`] or [`append`] (nothing without a
/// journal).
pub(crate) fn write(journal: Option<&SharedJournal>, record: &Record) {
    let Some(journal) = journal else { return };
    let mut j = journal
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Err(e) = j.write(record) {
        tracing::error!("session {}: {e}", j.id());
    }
}

/// Makes what was written durable, on a blocking thread, so the reclaim runs meanwhile.
pub(crate) async fn sync(journal: Option<&SharedJournal>) {
    let Some(journal) = journal.cloned() else {
        return;
    };
    let synced = tokio::task::spawn_blocking(move || {
        let mut j = journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = j.sync() {
            tracing::error!("session {}: {e}", j.id());
        }
    });
    if let Err(e) = synced.await {
        tracing::error!("journal sync: {e}");
    }
}

/// One session ending: what [`Ending::run`] needs.
pub(crate) struct Ending<'a> {
    /// Where the ending is journaled; `None` for a session whose truth lives elsewhere (a
    /// fleet sweep's: the store holds it, and nothing is written to this machine's disk).
    pub journal: Option<&'a SharedJournal>,
    pub providers: &'a [Arc<dyn Provider>],
    /// What the reclaim is after; its selector names the session.
    pub plan: &'a Plan,
    pub options: &'a Options,
    /// What the ledger knew of the session before this ending.
    pub before: &'a Before,
    pub cause: EndCause,
}

impl Ending<'_> {
    /// Ends the session: see the module docs. Returns the state it ended in and the report.
    pub(crate) async fn run(self) -> (SessionState, Report) {
        self.run_then(async { Vec::new() }, None::<fn(&Report)>)
            .await
    }

    /// [`Ending::run`], with the claims `late` brings during the settle delay (the sidecar's
    /// pipe, drained), and `first` called with the first reclaim pass's report before the
    /// settle delay ([`super::reclaim_then`]); the records are journaled after the settle as
    /// always.
    pub(crate) async fn run_then<F, G>(self, late: F, first: Option<G>) -> (SessionState, Report)
    where
        F: Future<Output = Vec<Sandbox>>,
        G: FnOnce(&Report),
    {
        let Ending {
            journal,
            providers,
            plan,
            options,
            before,
            cause,
        } = self;
        let resuming = before.state == Some(SessionState::Pending);
        if !resuming {
            if let Some(fact) = cause.fact() {
                write(journal, &fact);
            }
            write(journal, &Record::ReclaimStart { cause: Some(cause) });
        }
        let (report, ()) = tokio::join!(
            reclaim_then(providers, plan, late, options, first),
            sync(journal)
        );
        let uncovered = uncovered(before, &report, providers);
        for record in records(before, &report, &uncovered, providers) {
            write(journal, &record);
        }
        let state = if !report.is_clean() || !uncovered.is_empty() {
            SessionState::Pending
        } else {
            cause.done()
        };
        if !(resuming && state == SessionState::Pending) {
            write(journal, &Record::End { state });
        }
        sync(journal).await;
        let id = plan.selector.session_id().unwrap_or_default();
        summarise(id, cause, state, &report, &uncovered);
        (state, report)
    }
}

/// The session's providers this reclaim did not list, each with the reason it is pending.
fn uncovered(
    before: &Before,
    report: &Report,
    providers: &[Arc<dyn Provider>],
) -> BTreeMap<String, String> {
    let here = |name: &str| providers.iter().any(|p| p.name() == name);
    before
        .owed()
        .into_iter()
        .filter(|name| !here(name) && !report.list_failures.iter().any(|f| &f.provider == name))
        .map(|name| {
            let why = "not listed by this reclaim (not selected, or not configured here)";
            (name, why.to_string())
        })
        .collect()
}

/// The records of one reclaim's outcomes, only what changes the ledger's picture.
/// Each sandbox is named as [`super::ledger_target`] names it (its provider's claim form), so a
/// removal clears the claim and a pending sandbox is read back as what it is.
fn records(
    before: &Before,
    report: &Report,
    uncovered: &BTreeMap<String, String>,
    providers: &[Arc<dyn Provider>],
) -> Vec<Record> {
    let mut out = Vec::new();
    for r in &report.removals {
        let target = super::ledger_target(providers, &r.sandbox, []);
        let (provider, id) = (target.provider.clone(), target.id.clone());
        match &r.outcome {
            Outcome::Removed | Outcome::Gone => out.push(Record::Removed {
                provider,
                id,
                at: r.at_ms,
                outcome: r.outcome.as_str().to_string(),
                limit: None,
            }),
            Outcome::Refused(reason) => out.push(Record::Refused {
                provider,
                id,
                reason: reason.to_string(),
            }),
            Outcome::Failed(error) | Outcome::Unfinished(error) => {
                if before.pending.get(&target) != Some(&error.message) {
                    out.push(Record::Failed {
                        provider,
                        id,
                        error: error.message.clone(),
                        pending: true,
                    });
                }
            }
        }
    }
    let failures = report
        .list_failures
        .iter()
        .map(|f| (f.provider.clone(), f.error.message.clone()))
        .chain(uncovered.clone());
    for (provider, error) in failures {
        if before.unlisted.get(&provider) != Some(&error) {
            out.push(Record::Unlisted { provider, error });
        }
    }
    for provider in &report.listed {
        if before.unlisted.contains_key(provider) {
            out.push(Record::Listed {
                provider: provider.clone(),
            });
        }
    }
    out
}

/// The one summary line, through the log: `info` when the session ended with nothing left,
/// `warn` when something was left pending (the user must act, or a sweep will).
fn summarise(
    id: &str,
    cause: EndCause,
    state: SessionState,
    report: &Report,
    uncovered: &BTreeMap<String, String>,
) {
    let (label, what) = (cause.label(), report.summary());
    let how = describe(state, report, uncovered);
    if state == SessionState::Pending {
        tracing::warn!("session {id}: {label}; {how} ({what})");
    } else {
        tracing::info!("session {id}: {label}; {how} ({what})");
    }
}

/// How the session ended, in words that agree with the report: what failed, and what is left
/// to a reclaim that has the providers this one does not.
fn describe(state: SessionState, report: &Report, uncovered: &BTreeMap<String, String>) -> String {
    let retry = "some sandboxes could not be removed and may still be running; `sandguard sweep` will retry";
    let others = uncovered.keys().cloned().collect::<Vec<_>>().join(", ");
    let elsewhere = "not selected, or not configured here";
    match state {
        SessionState::Pending if uncovered.is_empty() => retry.to_string(),
        SessionState::Pending if report.is_clean() => format!(
            "done with what it has; pending on {others}, which this reclaim does not list ({elsewhere}): a `sandguard sweep` that has it will finish it"
        ),
        SessionState::Pending => {
            format!("{retry}; {others} is left to a sweep that has it ({elsewhere})")
        }
        SessionState::Clean => "ended clean".to_string(),
        _ => "reclaimed".to_string(),
    }
}

#[cfg(test)]
mod tests;
