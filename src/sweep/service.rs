//! The sweep as a long-lived service (`sandguard sweep --every D`): a pass every `D`, and a
//! watcher for each live owner it adopts, which reclaims that owner's session the moment it
//! dies.
//!
//! Every task is owned: the watchers live in one [`JoinSet`]; when `stop` resolves (SIGTERM or
//! SIGINT to the service) they are shut down and joined, which releases the sessions they
//! adopted (their journal locks) without reclaiming them: the next sweep adopts them again.
//! Passes take the state directory's sweep lock ([`StateDir::lock_sweeps`]), so a cron sweep
//! and the service never run a pass at the same time.
//!
//! Decisions:
//! - **A watcher's reclaim is reported as it ends** ([`Report::Watched`]), not folded into a
//!   pass: the owner may die long after the pass that adopted it (and before the next, which
//!   may be minutes away), so what its watcher removed is said when it is done, with its own
//!   decision (`reclaim` the session, its owner having died while watched), its removals,
//!   what could not be listed, and its own summary. Without it the service removed sandboxes
//!   and never said so, where a one-shot sweep prints every removal.
//! - **A watcher's report is no pass**: it says nothing about the other sessions, so the
//!   caller must not take it as the state of the world (the `--every` output's "unchanged
//!   since the last pass" bookkeeping ignores it).
//! - **Metrics, when asked for** ([`SweepService::metrics`], `--metrics`): every completed
//!   pass sets the heartbeat and counts its failures and what it removed that no journal
//!   records; a watcher's reclaim counts its failures only (no heartbeat: it is no pass);
//!   after each, the ledger is looked at again, off the runtime's threads, for what the
//!   journals tell ([`crate::metrics`]).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::{Decision, Pass, SessionVerdict};
use crate::fleet::Store;
use crate::identity::death::OwnerWatch;
use crate::identity::Identity;
use crate::ledger::{LedgerError, StateDir, SweepLock};
use crate::metrics::Metrics;
use crate::ownership::known::Known;
use crate::providers::Provider;
use crate::reclaim::Options;

/// What the sweep service sweeps with (named apart from [`crate::reclaim::Plan`], what one
/// reclaim is after).
pub(crate) struct SweepService {
    pub state: StateDir,
    pub providers: Vec<Arc<dyn Provider>>,
    pub options: Options,
    pub every: Duration,
    pub dry_run: bool,
    /// Ended sessions older than this are pruned after each pass.
    pub prune_after: Option<Duration>,
    /// `--fleet`: the fleet pass to run before the local one.
    pub fleet: Option<super::fleet::FleetSweep>,
    /// The fleet store (`[fleet] store`, with or without `--fleet`): told of the sessions the
    /// local pass and the adopting watchers end ([`super::fleet::tell_ended`]).
    pub store: Option<Arc<dyn Store>>,
    /// `--metrics`: told of every pass, every watcher's reclaim and the owners watched, and
    /// looking at the ledger after each ([`crate::metrics`]).
    pub metrics: Option<Arc<Metrics>>,
    /// `[notify]`: told of every pass and every watcher's reclaim, after it is done and
    /// without waiting ([`crate::notify`]); a one-shot sweep's caller tells its one pass.
    pub notify: Option<crate::notify::sweep::Told>,
}

/// What the service has to say: a pass, or what a watcher did when its owner died.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Report<'a> {
    /// One pass: every decision it made, and what it removed.
    Pass(&'a Pass),
    /// The watcher of adopted session `session` reclaimed it: one decision (the session), its
    /// removals.
    Watched { session: &'a str, pass: &'a Pass },
}

/// Waits for the sweep lock without blocking the runtime's thread.
pub(crate) async fn lock(state: &StateDir) -> Result<SweepLock, LedgerError> {
    let state = state.clone();
    match tokio::task::spawn_blocking(move || state.lock_sweeps()).await {
        Ok(lock) => lock,
        Err(e) => Err(LedgerError::Io {
            op: "wait for the sweep lock in",
            path: std::path::PathBuf::new(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}

/// One pass under the sweep lock, then pruning (unless a dry run).
pub(crate) async fn one_pass(service: &SweepService) -> Result<Pass, LedgerError> {
    let _lock = lock(&service.state).await?;
    let mut pass = match &service.fleet {
        Some(fleet) => {
            super::fleet::pass(fleet, &service.providers, &service.options, service.dry_run).await
        }
        None => Pass::default(),
    };
    let local = super::pass(
        &service.state,
        &service.providers,
        &service.options,
        service.dry_run,
    )
    .await;
    if let Some(store) = &service.store {
        for (id, state) in &local.ended {
            super::fleet::tell_ended(store.as_ref(), &service.state, id, *state).await;
        }
    }
    pass.decisions.extend(local.decisions);
    pass.removals.extend(local.removals);
    pass.list_failures.extend(local.list_failures);
    pass.store_failures.extend(local.store_failures);
    pass.adopt.extend(local.adopt);
    pass.listed = local.listed;
    pass.untold.extend(local.untold);
    pass.ended.extend(local.ended);
    pass.finishing.extend(local.finishing);
    pass.detached.extend(local.detached);
    if !service.dry_run {
        prune(&service.state, service.prune_after);
    }
    Ok(pass)
}

/// Runs passes every `service.every` until `stop` resolves; `report` sees each pass, and each
/// watcher's reclaim as it ends.
pub(crate) async fn serve(
    mut service: SweepService,
    stop: impl Future<Output = ()>,
    mut report: impl FnMut(Report<'_>),
) {
    tokio::pin!(stop);
    let mut watchers: JoinSet<(String, Pass)> = JoinSet::new();
    let mut adopted: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(service.every);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(done) = watchers.join_next(), if !watchers.is_empty() => {
                match done {
                    Ok((id, watched)) => {
                        report(Report::Watched { session: &id, pass: &watched });
                        if let Some(told) = &mut service.notify {
                            told.watched(&watched);
                        }
                        adopted.remove(&id);
                        if let Some(metrics) = &service.metrics {
                            metrics.watched(&watched);
                            metrics.watching(adopted.len(), 0);
                            look(metrics, &service.state).await;
                        }
                    }
                    Err(e) => tracing::warn!("a watcher of an adopted session failed: {e}"),
                }
            }
            _ = tick.tick() => {
                let began = std::time::Instant::now();
                let pass = match one_pass(&service).await {
                    Ok(pass) => pass,
                    Err(e) => {
                        tracing::warn!("sweep pass skipped: {e}");
                        continue;
                    }
                };
                if let Some(metrics) = &service.metrics {
                    metrics.pass(&pass, began.elapsed());
                    look(metrics, &service.state).await;
                }
                report(Report::Pass(&pass));
                if let Some(told) = &mut service.notify {
                    told.pass(&pass);
                }
                if !service.dry_run {
                    let before = adopted.len();
                    adopt(&service, pass, &mut adopted, &mut watchers);
                    if let Some(metrics) = &service.metrics {
                        metrics.watching(adopted.len(), adopted.len() - before);
                    }
                }
            }
        }
    }
    // Releases the adopted sessions' locks: they are not reclaimed, only let go.
    watchers.shutdown().await;
    if let Some(told) = &service.notify {
        told.notifier.flush(crate::notify::STOP_FLUSH).await;
    }
}

/// Has `metrics` look at the ledger, off the runtime's threads.
async fn look(metrics: &Arc<Metrics>, state: &StateDir) {
    let (metrics, state) = (metrics.clone(), state.clone());
    if let Err(e) = tokio::task::spawn_blocking(move || metrics.look(&state)).await {
        tracing::warn!("metrics: the ledger's figures were not updated: {e}");
    }
}

/// Watches each newly adopted live owner; its session is reclaimed when it dies, and the
/// watcher returns the session's id and what it did ([`Report::Watched`]).
fn adopt(
    service: &SweepService,
    pass: Pass,
    adopted: &mut HashSet<String>,
    watchers: &mut JoinSet<(String, Pass)>,
) {
    for view in pass.adopt {
        if adopted.contains(&view.id) {
            continue;
        }
        let Some(owner) = Identity::parse_label(&view.owner) else {
            continue;
        };
        let Ok(journal) = service.state.adopt_session(&view.id) else {
            continue;
        };
        adopted.insert(view.id.clone());
        let (providers, options) = (service.providers.clone(), service.options.clone());
        let store = service.store.clone();
        let ledger = service.state.clone();
        let root = service.state.path().to_path_buf();
        watchers.spawn(async move {
            OwnerWatch::open(&owner).wait().await;
            let known = Arc::new(Known::lazy(Some(root), &providers));
            let (ended, report) =
                super::reclaim_adopted(journal, &providers, &view, &options, known).await;
            if let Some(store) = store {
                super::fleet::tell_ended(store.as_ref(), &ledger, &view.id, ended).await;
            }
            let watched = Pass {
                decisions: vec![Decision {
                    session: view.id.clone(),
                    sandbox: None,
                    verdict: SessionVerdict::Reclaim,
                    reason: format!(
                        "its owner (pid {}) died while this sweep watched it",
                        view.pid
                    ),
                    lease_left: None,
                }],
                removals: report.removals,
                list_failures: report.list_failures,
                ended: vec![(view.id.clone(), ended)],
                ..Pass::default()
            };
            (view.id, watched)
        });
    }
}

/// Deletes the ledger's old ended sessions.
fn prune(state: &StateDir, after: Option<Duration>) {
    let Some(age) = after else {
        return;
    };
    let before = crate::ledger::now_ms().saturating_sub(age.as_millis() as u64);
    match state.prune(before) {
        Ok(gone) if !gone.is_empty() => {
            tracing::info!("pruned {} ended sessions from the ledger", gone.len());
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot prune the ledger: {e}"),
    }
}
