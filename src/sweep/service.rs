//! The sweep as a long-lived service (`sandguard sweep --every D`): a pass every `D`, and a
//! watcher for each live owner it adopts, which reclaims that owner's session the moment it
//! dies.
//!
//! Every task is owned: the watchers live in one [`JoinSet`]; when `stop` resolves (SIGTERM or
//! SIGINT to the service) they end and are joined, which releases the sessions they adopted
//! (their journal locks) without reclaiming them: the next sweep adopts them again. Passes
//! take the state directory's sweep lock ([`StateDir::lock_sweeps`]), so a cron sweep and the
//! service never run a pass at the same time.
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
//! - **The metrics' baseline is taken before anything the service does**: the first look at
//!   the ledger is [`serve`]'s first step, before its first pass (a scrape that comes earlier
//!   looks first, and is before the pass too). What the journals told before the service
//!   started is not its doing and not counted; what its first pass does is (the pass that
//!   matters most: a reaper restarted after a crash or a reboot finds the orphans of that
//!   time); a sidecar's reclaim that ends while the service runs is counted whole (its
//!   outcomes are journaled with its end, [`crate::reclaim::ending`]).
//! - **A stop is bounded** ([`STOP_GRACE`]). On SIGTERM or SIGINT the reclaims at work are
//!   cut short ([`crate::reclaim::cutoff`]): the pass at work ends as at its deadline (its
//!   session at work journaled pending, the sessions it had not begun untouched) and is
//!   reported; a watcher waiting for its owner lets its session go, one reclaiming is cut
//!   like the pass. What has not ended [`STOP_GRACE`] after the signal (a wait no cut
//!   reaches: a fleet store's call) is dropped where it stands: a session ending writes its
//!   outcomes and its end with no await between them, so a drop leaves it whole or not
//!   ended (`reclaiming` or `pending`, which the next sweep finishes), never torn. systemd
//!   gives a service 90 s before its SIGKILL; this one is gone in a few. One wait is not
//!   bounded yet: the sweep lock ([`lock`]) is taken on a blocking thread, which the
//!   runtime's end waits for, so a service stopped while another sweep holds the lock ends
//!   when that sweep lets go of it.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::{Decision, Pass, SessionVerdict};
use crate::fleet::Store;
use crate::identity::death::OwnerWatch;
use crate::identity::Identity;
use crate::ledger::{LedgerError, SessionState, SessionView, StateDir, SweepLock};
use crate::metrics::Metrics;
use crate::ownership::known::Known;
use crate::providers::Provider;
use crate::reclaim::cutoff::Cutter;
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
/// watcher's reclaim as it ends. With metrics, their baseline is taken first (see the module
/// docs); on `stop`, what is at work is cut short ([`Serving::stop`]).
pub(crate) async fn serve(
    mut service: SweepService,
    stop: impl Future<Output = ()>,
    mut report: impl FnMut(Report<'_>),
) {
    let cutter = Cutter::new();
    service.options.cutoff = cutter.cutoff();
    let mut serving = Serving {
        service,
        cutter,
        watchers: JoinSet::new(),
        adopted: HashSet::new(),
    };
    serving.baseline().await;
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(serving.service.every);
    loop {
        tokio::select! {
            () = &mut stop => break,
            Some(done) = serving.watchers.join_next(), if !serving.watchers.is_empty() => {
                serving.watched(done, &mut report).await;
            }
            _ = tick.tick() => {
                if serving.tick(stop.as_mut(), &mut report).await == Flow::Stop {
                    break;
                }
            }
        }
    }
    serving.stop(&mut report).await;
}

/// How long the service waits, once told to stop, for what it cut short to end (a pass, the
/// watchers) before it lets go of what is left where it stands.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(3);

/// The service at work: what it sweeps with, the watchers it owns, and what cuts its reclaims
/// short when it is told to stop.
struct Serving {
    service: SweepService,
    cutter: Cutter,
    watchers: JoinSet<WatcherEnd>,
    adopted: HashSet<String>,
}

/// What a watcher ends with: its session and, when the owner died while watched, what its
/// reclaim did; `None` when the service stopped first (the session let go, not reclaimed).
type WatcherEnd = (String, Option<Pass>);

/// Whether the service goes on after a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

impl Serving {
    /// The metrics' baseline: the ledger as the service found it (see the module docs).
    async fn baseline(&self) {
        if let Some(metrics) = &self.service.metrics {
            look(metrics, &self.service.state).await;
        }
    }

    /// One pass, then adoption of the live owners it found. When `stop` comes while the pass
    /// runs, the pass is cut short ([`Serving::cut`]), reported as far as it went, and the
    /// service stops.
    async fn tick(
        &mut self,
        stop: Pin<&mut impl Future<Output = ()>>,
        report: &mut impl FnMut(Report<'_>),
    ) -> Flow {
        let began = std::time::Instant::now();
        let (done, flow) = {
            let pass = one_pass(&self.service);
            tokio::pin!(pass);
            tokio::select! {
                done = &mut pass => (Some(done), Flow::Go),
                () = stop => (self.cut(pass).await, Flow::Stop),
            }
        };
        let pass = match done {
            Some(Ok(pass)) => pass,
            Some(Err(e)) => {
                tracing::warn!("sweep pass skipped: {e}");
                return flow;
            }
            None => return flow,
        };
        if let Some(metrics) = &self.service.metrics {
            metrics.pass(&pass, began.elapsed());
            look(metrics, &self.service.state).await;
        }
        report(Report::Pass(&pass));
        if let Some(told) = &mut self.service.notify {
            told.pass(&pass);
        }
        if flow == Flow::Go && !self.service.dry_run {
            let before = self.adopted.len();
            self.adopt(pass);
            if let Some(metrics) = &self.service.metrics {
                let now = self.adopted.len();
                metrics.watching(now, now - before);
            }
        }
        flow
    }

    /// Cuts the reclaims at work short and gives `work` [`STOP_GRACE`] to end: its answer, or
    /// `None` when it did not end in time (it is then dropped where it stood; see the module
    /// docs).
    async fn cut<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tracing::info!("stopping: the pass at work is cut short");
        self.cutter.cut();
        let ended = tokio::time::timeout(STOP_GRACE, work).await.ok();
        if ended.is_none() {
            tracing::warn!(
                "stopping: the pass at work did not end within {STOP_GRACE:?}; left where it stood, for the next sweep"
            );
        }
        ended
    }

    /// A watcher ended: what it reclaimed (if its owner died) is reported and told.
    async fn watched(
        &mut self,
        done: Result<WatcherEnd, tokio::task::JoinError>,
        report: &mut impl FnMut(Report<'_>),
    ) {
        let (id, watched) = match done {
            Ok(end) => end,
            Err(e) => {
                tracing::warn!("a watcher of an adopted session failed: {e}");
                return;
            }
        };
        self.adopted.remove(&id);
        if let Some(watched) = &watched {
            report(Report::Watched {
                session: &id,
                pass: watched,
            });
            if let Some(told) = &mut self.service.notify {
                told.watched(watched);
            }
        }
        if let Some(metrics) = &self.service.metrics {
            if let Some(watched) = &watched {
                metrics.watched(watched);
            }
            metrics.watching(self.adopted.len(), 0);
            look(metrics, &self.service.state).await;
        }
    }

    /// Stops: the reclaims at work are cut; the watchers end (one waiting for its owner lets
    /// its session go, one reclaiming is cut like a pass) and are reported, for at most
    /// [`STOP_GRACE`]; what is left is aborted, which releases the sessions' locks without
    /// reclaiming them (the next sweep adopts them again). Then the notifier is flushed.
    async fn stop(mut self, report: &mut impl FnMut(Report<'_>)) {
        self.cutter.cut();
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        while !self.watchers.is_empty() {
            match tokio::time::timeout_at(deadline, self.watchers.join_next()).await {
                Ok(Some(done)) => self.watched(done, report).await,
                Ok(None) => break,
                Err(_) => {
                    tracing::warn!(
                        "stopping: {} watchers did not end in time; let go where they stood",
                        self.watchers.len()
                    );
                    break;
                }
            }
        }
        self.watchers.shutdown().await;
        if let Some(told) = &self.service.notify {
            told.notifier.flush(crate::notify::STOP_FLUSH).await;
        }
    }

    /// Watches each newly adopted live owner; its session is reclaimed when it dies, and the
    /// watcher returns the session's id and what it did ([`Report::Watched`]).
    fn adopt(&mut self, pass: Pass) {
        let service = &self.service;
        for view in pass.adopt {
            if self.adopted.contains(&view.id) {
                continue;
            }
            let Some(owner) = Identity::parse_label(&view.owner) else {
                continue;
            };
            let Ok(journal) = service.state.adopt_session(&view.id) else {
                continue;
            };
            self.adopted.insert(view.id.clone());
            let (providers, options) = (service.providers.clone(), service.options.clone());
            let store = service.store.clone();
            let ledger = service.state.clone();
            let root = service.state.path().to_path_buf();
            self.watchers.spawn(async move {
                // Stopped first: the session is let go (its lock with the journal), not
                // reclaimed.
                let died = options.cutoff.or(OwnerWatch::open(&owner).wait()).await;
                if died.is_none() {
                    return (view.id, None);
                }
                let known = Arc::new(Known::lazy(Some(root), &providers));
                let (ended, report) =
                    super::reclaim_adopted(journal, &providers, &view, &options, known).await;
                if let Some(store) = store {
                    super::fleet::tell_ended(store.as_ref(), &ledger, &view.id, ended).await;
                }
                let watched = watched_pass(&view, report, ended);
                (view.id, Some(watched))
            });
        }
    }
}

/// Has `metrics` look at the ledger, off the runtime's threads.
async fn look(metrics: &Arc<Metrics>, state: &StateDir) {
    let (metrics, state) = (metrics.clone(), state.clone());
    if let Err(e) = tokio::task::spawn_blocking(move || metrics.look(&state)).await {
        tracing::warn!("metrics: the ledger's figures were not updated: {e}");
    }
}

/// What the watcher of `view` did when its owner died, told as a pass of one decision.
fn watched_pass(view: &SessionView, report: crate::reclaim::Report, ended: SessionState) -> Pass {
    Pass {
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
