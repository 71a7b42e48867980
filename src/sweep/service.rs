//! The sweep as a long-lived service (`sandguard sweep --every D`): a pass every `D`, and a
//! watcher for each live owner it adopts, which reclaims that owner's session the moment it
//! dies.
//!
//! Every task is owned: the watchers live in one [`JoinSet`]; when `stop` resolves (SIGTERM or
//! SIGINT to the service) they are shut down and joined, which releases the sessions they
//! adopted (their journal locks) without reclaiming them: the next sweep adopts them again.
//! Passes take the state directory's sweep lock ([`StateDir::lock_sweeps`]), so a cron sweep
//! and the service never run a pass at the same time.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use super::Pass;
use crate::fleet::Store;
use crate::identity::death::OwnerWatch;
use crate::identity::Identity;
use crate::ledger::{LedgerError, StateDir, SweepLock};
use crate::ownership::known::Known;
use crate::providers::Provider;
use crate::reclaim::Options;

/// What the service sweeps with.
pub struct Plan {
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
}

/// Waits for the sweep lock without blocking the runtime's thread.
pub async fn lock(state: &StateDir) -> Result<SweepLock, LedgerError> {
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
pub async fn one_pass(plan: &Plan) -> Result<Pass, LedgerError> {
    let _lock = lock(&plan.state).await?;
    let mut pass = match &plan.fleet {
        Some(fleet) => {
            super::fleet::pass(fleet, &plan.providers, &plan.options, plan.dry_run).await
        }
        None => Pass::default(),
    };
    let local = super::pass(&plan.state, &plan.providers, &plan.options, plan.dry_run).await;
    if let Some(store) = &plan.store {
        for (id, state) in &local.ended {
            super::fleet::tell_ended(store.as_ref(), id, *state).await;
        }
    }
    pass.decisions.extend(local.decisions);
    pass.removals.extend(local.removals);
    pass.list_failures.extend(local.list_failures);
    pass.adopt.extend(local.adopt);
    if !plan.dry_run {
        prune(&plan.state, plan.prune_after);
    }
    Ok(pass)
}

/// Runs passes every `plan.every` until `stop` resolves; `report` sees each pass.
pub async fn serve(plan: Plan, stop: impl Future<Output = ()>, mut report: impl FnMut(&Pass)) {
    tokio::pin!(stop);
    let mut watchers = JoinSet::new();
    let mut adopted: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(plan.every);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(done) = watchers.join_next(), if !watchers.is_empty() => {
                if let Ok(id) = done {
                    adopted.remove(&id);
                }
            }
            _ = tick.tick() => {
                let pass = match one_pass(&plan).await {
                    Ok(pass) => pass,
                    Err(e) => {
                        tracing::warn!("sweep pass skipped: {e}");
                        continue;
                    }
                };
                report(&pass);
                if !plan.dry_run {
                    adopt(&plan, pass, &mut adopted, &mut watchers);
                }
            }
        }
    }
    // Releases the adopted sessions' locks: they are not reclaimed, only let go.
    watchers.shutdown().await;
}

/// Watches each newly adopted live owner; its session is reclaimed when it dies.
fn adopt(plan: &Plan, pass: Pass, adopted: &mut HashSet<String>, watchers: &mut JoinSet<String>) {
    for view in pass.adopt {
        if adopted.contains(&view.id) {
            continue;
        }
        let Some(owner) = Identity::parse_label(&view.owner) else {
            continue;
        };
        let Ok(journal) = plan.state.adopt_session(&view.id) else {
            continue;
        };
        adopted.insert(view.id.clone());
        let (providers, options) = (plan.providers.clone(), plan.options.clone());
        let store = plan.store.clone();
        let root = plan.state.path().to_path_buf();
        watchers.spawn(async move {
            OwnerWatch::open(&owner).wait().await;
            let known = Arc::new(Known::lazy(Some(root), &providers));
            let (ended, _) =
                super::reclaim_adopted(journal, &providers, &view, &options, None, Some(known))
                    .await;
            if let Some(store) = store {
                super::fleet::tell_ended(store.as_ref(), &view.id, ended).await;
            }
            view.id
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
