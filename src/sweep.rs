//! Sweep: find what escaped and reclaim it, from cron (one pass) or as a service (`--every`).
//!
//! One pass looks at two things.
//!
//! (a) **The ledger**: sessions whose lock is free (their sidecar is dead) and whose state is
//! not final.
//! - Owner dead (same machine, same boot, process gone or its start time differs), or from
//!   another boot: reclaim the session (its labels on every provider, plus its claims, minus
//!   what it detached), journaled in the session's own journal under its lock.
//! - `pending` (a reclaim that could not finish): finish it, whatever the owner.
//! - Owner alive: *adopt* it. In a one-shot sweep that only means reporting it; with `--every`
//!   the sweep takes the session's lock and watches the owner until it dies, then reclaims.
//!
//! (b) **Every configured provider**: sandboxes carrying `sandguard.session` that no live
//! session (sidecar alive, or adopted in (a)) covers.
//! - `sandguard.expires` in the past: reclaim, detached or not (an absolute TTL).
//! - Detached (`sandguard.detached=true`): only its TTL ends it.
//! - Owner on this machine and boot and dead, or from another boot of this machine: reclaim.
//! - Owner alive, or on another machine, or unreadable: leave it (other machines are judged
//!   only by TTL).
//!
//! Concurrent sweeps serialise on `sweep.lock` in the state directory. `--dry-run` decides
//! everything and touches nothing (not even the journals).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::identity::{Identity, Liveness};
use crate::labels::{self, Selector};
use crate::ledger::{Journal, Record, SessionState, SessionView, StateDir};
use crate::providers::{Provider, Sandbox};
use crate::reclaim::{self, ListFailure, Options, Plan, Removal};

/// What a sweep decided about one session or one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Remove (or, with a session, reclaim it).
    Reclaim,
    /// Its owner lives and its sidecar is gone: watch it (with `--every`).
    Adopt,
    /// Leave it alone.
    Leave,
}

/// One decision, with the reason a user would want to read.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub session: String,
    /// `None` for a whole ledger session; the sandbox for a provider finding.
    pub provider: Option<String>,
    pub instance_id: Option<String>,
    pub verdict: Verdict,
    pub reason: String,
}

/// Everything one pass decided and did.
#[derive(Debug, Default)]
pub struct Pass {
    pub decisions: Vec<Decision>,
    pub removals: Vec<Removal>,
    pub list_failures: Vec<ListFailure>,
    /// Ledger sessions whose owner lives: the caller may watch them.
    pub adopt: Vec<SessionView>,
}

impl Pass {
    pub fn is_clean(&self) -> bool {
        self.list_failures.is_empty() && self.removals.iter().all(|r| r.outcome.is_success())
    }
}

/// One sweep pass. With `dry_run` nothing is removed and nothing is written.
pub async fn pass(
    state: &StateDir,
    providers: &[Arc<dyn Provider>],
    options: &Options,
    dry_run: bool,
) -> Pass {
    let mut out = Pass::default();
    let sessions = match state.sessions() {
        Ok(s) => s,
        Err(e) => {
            out.list_failures.push(ListFailure {
                provider: "ledger".into(),
                error: e.to_string(),
            });
            Vec::new()
        }
    };
    // Sessions a live sidecar (or an adopting sweep) looks after: not ours to touch.
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
        let (verdict, reason) = judge_session(view);
        out.decisions.push(Decision {
            session: view.id.clone(),
            provider: None,
            instance_id: None,
            verdict: verdict.clone(),
            reason,
        });
        covered.insert(view.id.clone());
        match verdict {
            Verdict::Reclaim => to_reclaim.push(view.clone()),
            Verdict::Adopt => out.adopt.push(view.clone()),
            Verdict::Leave => {}
        }
    }
    let (found, failures) = reclaim::list_all(providers, &Selector::managed()).await;
    out.list_failures.extend(failures);
    let reclaiming: HashSet<&str> = to_reclaim.iter().map(|v| v.id.as_str()).collect();
    let mut orphans = Vec::new();
    for sandbox in found {
        let session = sandbox.session().unwrap_or_default().to_string();
        let expired = expired(&sandbox);
        if reclaiming.contains(session.as_str()) || (covered.contains(&session) && !expired) {
            continue;
        }
        let (verdict, reason) = if expired {
            (
                Verdict::Reclaim,
                "its sandguard.expires has passed".to_string(),
            )
        } else {
            judge_sandbox(&sandbox)
        };
        out.decisions.push(Decision {
            session,
            provider: Some(sandbox.provider.clone()),
            instance_id: Some(sandbox.id.clone()),
            verdict: verdict.clone(),
            reason,
        });
        if verdict == Verdict::Reclaim {
            orphans.push(sandbox);
        }
    }
    if dry_run {
        return out;
    }
    for view in &to_reclaim {
        let (removals, failures) = reclaim_session(state, providers, view, options).await;
        out.removals.extend(removals);
        out.list_failures.extend(failures);
    }
    out.removals
        .extend(reclaim::remove_all(providers, orphans, options).await);
    out
}

fn judge_session(view: &SessionView) -> (Verdict, String) {
    if view.state == SessionState::Pending {
        return (Verdict::Reclaim, "a reclaim is pending".into());
    }
    match Identity::parse_label(&view.owner).map(|id| (id.liveness(), id)) {
        Some((Liveness::Dead, _)) => (
            Verdict::Reclaim,
            "its owner is dead and its sidecar is gone".into(),
        ),
        Some((Liveness::Alive, id)) => (
            Verdict::Adopt,
            format!("its owner (pid {}) lives but its sidecar is gone", id.pid),
        ),
        Some((Liveness::Unknown, _)) | None => (
            Verdict::Leave,
            "its owner cannot be judged from this machine".into(),
        ),
    }
}

fn judge_sandbox(sandbox: &Sandbox) -> (Verdict, String) {
    if sandbox.labels.get(labels::DETACHED).map(String::as_str) == Some("true") {
        return (Verdict::Leave, "detached: only its TTL ends it".into());
    }
    match sandbox
        .owner()
        .and_then(Identity::parse_label)
        .map(|id| id.liveness())
    {
        Some(Liveness::Dead) => (Verdict::Reclaim, "its owner is dead".into()),
        Some(Liveness::Alive) => (Verdict::Leave, "its owner lives".into()),
        Some(Liveness::Unknown) => (
            Verdict::Leave,
            "its owner is on another machine: TTL only".into(),
        ),
        None => (
            Verdict::Leave,
            "it names no owner sandguard can judge: TTL only".into(),
        ),
    }
}

fn expired(sandbox: &Sandbox) -> bool {
    sandbox
        .labels
        .get(labels::EXPIRES)
        .and_then(|v| v.parse::<i64>().ok())
        .is_some_and(|t| t <= crate::timefmt::now_unix())
}

/// Reclaims one ledger session under its own lock, journaling as a sidecar would.
pub async fn reclaim_session(
    state: &StateDir,
    providers: &[Arc<dyn Provider>],
    view: &SessionView,
    options: &Options,
) -> (Vec<Removal>, Vec<ListFailure>) {
    match state.adopt_session(&view.id) {
        Ok(mut journal) => reclaim_adopted(&mut journal, providers, view, options).await,
        Err(e) => {
            // Locked: a sidecar or another sweep took it meanwhile; it is theirs now.
            tracing::info!("session {}: not reclaimed by this sweep: {e}", view.id);
            (Vec::new(), Vec::new())
        }
    }
}

/// Reclaims a session whose journal (and lock) the caller holds.
pub async fn reclaim_adopted(
    journal: &mut Journal,
    providers: &[Arc<dyn Provider>],
    view: &SessionView,
    options: &Options,
) -> (Vec<Removal>, Vec<ListFailure>) {
    let mut append = |record: &Record| {
        if let Err(e) = journal.append(record) {
            tracing::error!("session {}: {e}", view.id);
        }
    };
    append(&Record::ReclaimStart);
    let once = Options {
        settle: None,
        ..options.clone()
    };
    let report = reclaim::reclaim(providers, &plan_for(view), async { Vec::new() }, &once).await;
    for record in crate::watch::report_records(&report) {
        append(&record);
    }
    let state = if report.is_clean() {
        SessionState::Reclaimed
    } else {
        SessionState::Pending
    };
    append(&Record::End { state });
    tracing::warn!(
        "session {}: {} by sweep ({})",
        view.id,
        state.as_str(),
        report.summary()
    );
    (report.removals, report.list_failures)
}

/// The session's labels, its claims and what is pending, minus what it detached.
fn plan_for(view: &SessionView) -> Plan {
    let claimed: BTreeSet<_> = view
        .claims
        .iter()
        .chain(view.pending.iter().filter(|t| t.id != "*"))
        .cloned()
        .collect();
    Plan {
        selector: Selector::session(&view.id),
        claims: claimed.iter().map(crate::watch::claimed).collect(),
        keep: view
            .detached
            .iter()
            .map(|t| (t.provider.clone(), t.id.clone()))
            .collect(),
        spare_detached: true,
    }
}

/// Counts of decisions by verdict, for the summary line.
pub fn tally(decisions: &[Decision]) -> BTreeMap<&'static str, usize> {
    let mut t = BTreeMap::new();
    for d in decisions {
        let k = match d.verdict {
            Verdict::Reclaim => "reclaim",
            Verdict::Adopt => "adopt",
            Verdict::Leave => "leave",
        };
        *t.entry(k).or_insert(0) += 1;
    }
    t
}
