//! The fleet pass of `sweep --fleet`: the sessions of the fleet store ([`crate::fleet`]) whose
//! lease expired, reclaimed once each, wherever their machine was.
//!
//! For each session in the store's index:
//! - final (`reclaimed`, `clean`): nothing to do (they leave the index anyway);
//! - its lease is alive: leave it (its sidecar renews it);
//! - `stopped` (its sidecar was stopped while its owner lived): leave it; no one proved the
//!   owner dead, and its own host's sweep adopts it;
//! - otherwise (`active`, `reclaiming` or `pending`, lease expired): reclaim it.
//!
//! A reclaim takes the session's lock in the store (`SET NX PX`, for the fleet's `lease`,
//! renewed every third of it while the reclaim runs), reads the session again (another
//! sweeper may have finished it meanwhile), counts the reclaim and marks it `reclaiming`, and
//! then goes through the same session ending as every reclaim ([`reclaim::ending::Ending`]),
//! its plan built from the store's record: the session's labels on every provider, plus its
//! mirrored claims, minus what it detached. The ending has no journal: the store is where a
//! fleet session lives (see the decisions). The result is written back: `reclaimed`, or
//! `pending`, which the next fleet sweep (here or on any machine) finishes; a sweeper that
//! dies half way leaves `reclaiming` and a lock that expires, and the next one finishes the
//! session.
//!
//! Decisions:
//! - **Several sessions at once, one pace per provider for the whole pass.** Dead sessions
//!   are reclaimed `[reclaim] concurrency` at a time, and every reclaim of the pass calls a
//!   provider through the same `reclaim::Paces` (`reclaim/options.rs`): a `Retry-After` one session got
//!   holds back every session's calls to that provider, the window of calls in flight and the
//!   learnt rate are the pass's, and `[providers.NAME] rate` caps the pass as a whole. (A pace
//!   per reclaim would multiply what the provider sees by the number of sessions at once.)
//! - **One listing per provider for the whole pass** ([`Listed`]): every managed sandbox,
//!   grouped by session, listed once before the first reclaim; each reclaim takes its
//!   session's share (still filtered by its labels, minus what it detached). A provider that
//!   could not be listed so is listed by each session's reclaim, as before. A sandbox created
//!   after that listing by a session whose lease is gone would be missed; nothing lives to
//!   create one (a partitioned host that comes back is the lease contract's known case).
//! - **No files for fleet sessions**: the store holds a fleet session's truth (its record,
//!   claims, detaches, state, reclaim count and reclaimer, and a lock that expires when its
//!   sweeper dies), so its ending is journaled nowhere ([`reclaim::ending::Ending::journal`]
//!   `None`) and nothing is written to this machine's disk. A sweeper that dies half way leaves `reclaiming` and a lock that
//!   expires; the next one reclaims again from the store (what is already removed is
//!   "already gone"). What a pass did is its output (every removal on stdout, each session's
//!   summary on stderr) and the store's record. A journal file per session cost the
//!   10 000-dead-sessions pass most of its time: creating 10 000 files (ext4's inode
//!   allocation) and their syncs, about half of its 3.3 s.
//! - **No store, no verdict**: a store that cannot be read is a failure of the pass (exit 1),
//!   and no session is judged by the store; the local pass still runs, as without a fleet.
//! - **A verdict's reason does not count down**: a session whose lease another host holds
//!   is left because "its fleet lease is held by host H", and how long the lease had left
//!   travels beside the reason ([`Decision::lease_left`]), not in it. The reason used to end
//!   in "(2747 ms left)", so the same verdict was new on every pass and `sweep --every`
//!   repeated it each time; now it is printed once, with when the lease runs out at that
//!   moment (`sessions --fleet` shows the lease left whenever asked).
//! - **A lock not taken is not an error**: another sweeper has the session; it is left to it.
//! - **Spend: closed, not counted again.** A fleet sweep has no journal of another host's
//!   session, so it cannot count its sandboxes' time; once it has ended the session
//!   (`reclaimed`) it closes the session's figures in the store ([`Store::close_spend`]):
//!   they keep the time its sidecar last wrote (at most a renewal period, `lease / 3`, before
//!   it died), and none of its sandboxes counts as alive any more. The time from that write to
//!   the removal (about a lease and a sweep interval) is not counted: the store never saw it,
//!   and no figure is made up (a ledger's `untimed` rule). A session left `pending` keeps its
//!   figures open.
//! - A sandbox of a session the store never heard of is judged by the local pass as before.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{self, StreamExt};

use super::{Decision, Pass, SessionVerdict, StoreError, StoreFailure, StoreKind};
use crate::fleet::{FleetSession, FleetState, Lock, Store};
use crate::identity::Judge;
use crate::ledger::{EndCause, LedgerError, SessionState};
use crate::ownership::{self, known::Known};
use crate::providers::Provider;
use crate::reclaim::ending::{Before, Ending};
use crate::reclaim::{self, Listed, Options, Plan};

/// What a fleet pass needs.
#[derive(Clone)]
pub(crate) struct FleetSweep {
    pub store: Arc<dyn Store>,
    /// This machine's name, written as the reclaimer.
    pub host: String,
    /// The fleet's lease: also how long a sweeper's lock lives without renewal.
    pub lease: Duration,
    /// This machine's state directory, when it has one: how its own sessions stand, so that
    /// a session reclaimed here never takes what a live session of this machine adopted.
    pub ledger: Option<std::path::PathBuf>,
}

/// One fleet pass; with `dry_run` nothing is touched (not even the store).
pub(crate) async fn pass(
    fleet: &FleetSweep,
    providers: &[Arc<dyn Provider>],
    options: &Options,
    dry_run: bool,
) -> Pass {
    let mut out = Pass::default();
    let sessions = match fleet.store.sessions().await {
        Ok(s) => s,
        Err(e) => {
            out.store_failures
                .push(StoreFailure::unread(StoreKind::Fleet, e));
            return out;
        }
    };
    let judge_owner = Judge::new(Default::default());
    let mut dead = Vec::new();
    for s in sessions {
        let (verdict, reason) = judge(&s, &judge_owner);
        if verdict == SessionVerdict::Reclaim && !dry_run {
            dead.push((s, reason));
        } else if !s.state.is_final() {
            out.decisions.push(decision(&s, verdict, reason));
        }
    }
    if dead.is_empty() {
        return out;
    }
    // Several sessions at once, every provider called at one pace for the whole pass, and
    // listed once for all of them.
    let shared = options.sharing_paces();
    let listed = Arc::new(Listed::list(providers, &shared).await);
    let known = Arc::new(Known::lazy(fleet.ledger.clone(), providers));
    let done: Vec<Pass> = stream::iter(dead)
        .map(|(s, reason)| reclaim(fleet, providers, &shared, (&listed, &known), s, reason))
        .buffered(options.concurrency.max(1))
        .collect()
        .await;
    for one in done {
        out.decisions.extend(one.decisions);
        out.removals.extend(one.removals);
        out.untold.extend(one.untold);
        out.list_failures.extend(one.list_failures);
        out.store_failures.extend(one.store_failures);
    }
    out
}

fn decision(s: &FleetSession, verdict: SessionVerdict, reason: String) -> Decision {
    Decision {
        session: s.record.id.clone(),
        sandbox: None,
        verdict,
        reason,
        lease_left: s.lease_left,
    }
}

/// A fleet session, as the one judgement decides it ([`ownership::judge_session`], found in
/// the store): its reason printed as given.
fn judge(s: &FleetSession, judge: &Judge) -> (SessionVerdict, String) {
    // Whatever can write to the store wrote this name: only printable ASCII reaches a reason.
    let host: String = s
        .record
        .host
        .chars()
        .filter(char::is_ascii_graphic)
        .take(128)
        .collect();
    // The time left is no part of the reason: it moves on every pass, and would make the
    // same verdict news every time. The decision carries it apart ([`decision`]).
    // Where the lease expired, the judgement decides, and proof of life beats it (an owner
    // this machine sees alive is its own sweep's to adopt, never the fleet's to reclaim).
    let found = ownership::Found {
        session: ownership::Session {
            owner: judge.label(&s.record.owner),
            sidecar: ownership::Sidecar::Gone,
            ended_at: None,
            lease: ownership::Lease::Expired,
        },
        place: ownership::Place::Fleet {
            state: s.state,
            host: &host,
            pid: s.record.pid,
            held: s.lease_left.is_some(),
        },
    };
    let (verdict, why) = ownership::judge_session(found);
    (verdict, why.to_string())
}

/// A lock token: 64 random bits, or the pid and time when the kernel gives none.
fn token(host: &str) -> String {
    let hex = crate::unix::random_hex(8)
        .unwrap_or_else(|_| format!("{}-{}", std::process::id(), crate::ledger::now_ms()));
    format!("{host}:{hex}")
}

/// Reclaims one dead session under its lock; what it decided and did.
async fn reclaim(
    fleet: &FleetSweep,
    providers: &[Arc<dyn Provider>],
    options: &Options,
    seen: (&Arc<Listed>, &Arc<Known>),
    s: FleetSession,
    reason: String,
) -> Pass {
    let mut out = Pass::default();
    reclaim_into(fleet, providers, options, seen, &s, reason, &mut out).await;
    out
}

async fn reclaim_into(
    fleet: &FleetSweep,
    providers: &[Arc<dyn Provider>],
    options: &Options,
    seen: (&Arc<Listed>, &Arc<Known>),
    s: &FleetSession,
    reason: String,
    out: &mut Pass,
) {
    let id = &s.record.id;
    let store = fleet.store.as_ref();
    let token = token(&fleet.host);
    let fail = |out: &mut Pass, error: StoreError| {
        out.store_failures
            .push(StoreFailure::not_reclaimed(StoreKind::Fleet, id, error));
    };
    // Read again under the lock (in the same round trip): another sweeper may have finished
    // it since the listing.
    let fresh = match store.lock(id, &token, fleet.lease).await {
        Ok(Lock::Held(Some(fresh))) => *fresh,
        Ok(Lock::Held(None)) => {
            let _ = store.unlock(id, &token, None).await;
            return;
        }
        Ok(Lock::Busy) => {
            out.decisions.push(decision(
                s,
                SessionVerdict::Leave,
                "another sweeper is reclaiming it".into(),
            ));
            return;
        }
        Err(e) => return fail(out, e.into()),
    };
    let (verdict, now) = judge(&fresh, &Judge::new(Default::default()));
    if verdict != SessionVerdict::Reclaim {
        let _ = store.unlock(id, &token, None).await;
        if !fresh.state.is_final() {
            out.decisions.push(decision(&fresh, verdict, now));
        }
        return;
    }
    out.decisions
        .push(decision(&fresh, SessionVerdict::Reclaim, reason));
    if let Err(e) = store
        .set_state(id, SessionState::Reclaiming.into(), &fleet.host)
        .await
    {
        let _ = store.unlock(id, &token, None).await;
        return fail(out, e.into());
    }
    let work = end_session(providers, options, seen, &fresh);
    let kept = keep_lock(store, id, &token, fleet.lease);
    let result = tokio::select! {
        r = work => Ok(r),
        () = kept => Err(LedgerError::LockLost {
            what: format!("the fleet lock of {id}"),
        }),
    };
    match result {
        Ok((state, report)) => {
            // Journaled nowhere on this machine (the module's decisions): counted from here.
            out.untold
                .extend(super::Untold::of(&report.removals, |_| "lease_expired"));
            out.removals.extend(report.removals);
            out.list_failures.extend(report.list_failures);
            let state = FleetState::from(if state.is_final() {
                SessionState::Reclaimed
            } else {
                SessionState::Pending
            });
            // Written and unlocked in one round trip; if the store cannot take it, the lock
            // expires and the next sweeper reclaims the session again.
            match store.unlock(id, &token, Some((state, &fleet.host))).await {
                Ok(()) if state.is_final() => ended::close_spend(store, &fresh).await,
                Ok(()) => {}
                Err(e) => fail(out, e.into()),
            }
        }
        Err(e) => {
            fail(out, e.into());
            let _ = store.unlock(id, &token, None).await;
        }
    }
}

/// Renews the lock every third of its life; returns only when it was lost.
async fn keep_lock(store: &dyn Store, id: &str, token: &str, ttl: Duration) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        match store.relock(id, token, ttl).await {
            Ok(true) => {}
            Ok(false) => return,
            // Unreachable for now: the lock lives on until its expiry; try again.
            Err(e) => tracing::warn!("cannot renew the fleet lock of session {id}: {e}"),
        }
    }
}

/// The session's ending, planned from its record in the store (its labels, the claims and
/// detaches it mirrored, the providers its sidecar had), through the one session ending, as
/// a sweep ends any session whose sidecar is gone.
async fn end_session(
    providers: &[Arc<dyn Provider>],
    options: &Options,
    (listed, known): (&Arc<Listed>, &Arc<Known>),
    s: &FleetSession,
) -> (SessionState, reclaim::Report) {
    // A target both claimed and detached is detached (detach wins), as a ledger folds it.
    let claims = s.holdings.claims.difference(&s.holdings.detached);
    let detached = &s.holdings.detached;
    let mut plan = Plan::for_session(&s.record.id, providers, (claims, detached), known.clone());
    plan.listed = Some(listed.clone());
    plan.own.sidecar = ownership::Sidecar::Gone;
    plan.own.ended_at = fleet_end(known, &s.record.id);
    let before = Before {
        providers: Some(s.record.providers.clone()),
        ..Default::default()
    };
    let once = Options {
        settle: None,
        ..options.clone()
    };
    let ending = Ending {
        journal: None,
        providers,
        plan: &plan,
        options: &once,
        before: &before,
        cause: EndCause::Sweep,
    };
    ending.run().await
}

/// When a session the fleet store reclaims ended, for a label its sandboxes only inherited
/// (trust rule 3: it counts for a sandbox created while the session lived): as this
/// machine's ledger says, when it holds the session (a `--fleet` sweep on the session's own
/// host); otherwise the store cannot say (a lease expires, it is not dated), and no inherited
/// label counts: a stranger's container made from the session's image after its death must
/// never be taken for the session's. The session's own containers made from its own image
/// with its labels are then left to their TTL and to its machine's sweep (what its proxy
/// made is claimed, and goes by its claim).
fn fleet_end(known: &Known, id: &str) -> Option<i64> {
    match known.view(id) {
        Some(view) => crate::ownership::known::ended_at(view),
        None => Some(i64::MIN),
    }
}

mod ended;
#[cfg(test)]
mod tests;

pub(crate) use ended::tell_ended;
