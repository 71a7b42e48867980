//! The world's calls of the paths that act on many sessions at once: `stop` (the same calls
//! `src/cli/stop.rs` makes, which has no library entry), one pass of the sweep service (with
//! the fleet pass for `--fleet`), the sweep service's pruning, and provider faults.
//!
//! Decisions:
//! - **`stop` is the command's own library half** ([`reclaim::stop::choose`]: listing, pick,
//!   the judgement), then [`reclaim::remove_all`], as `src/cli/stop.rs` does.
//! - **A sweep is [`crate::sweep::service::one_pass`]** with the fleet store told of what the
//!   local pass ends (as `sweep` with `[fleet] store` does), pruning after it or not (the
//!   service prunes after each pass; every ended session counts as old). Pruning is also a
//!   step of its own ([`World::prune`]), so a history decides when it happens.
//! - **A fleet sweep "after the lease"** first waits (polling, with a deadline) until every
//!   dead sidecar's fleet lease has run out: the model's time passing, not a synchronisation.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::ops::{box_id, Crash, Cut, Fault};
use super::world::{options, sweep_options, World, FORKS, LEASE, PATIENCE};
use crate::fleet::Store;
use crate::ownership::Only;
use crate::reclaim;
use crate::reclaim::stop::{Answer, Asked};

impl World {
    /// `sandguard stop ID`: the same library call the command makes
    /// ([`reclaim::stop::choose`]), then the one removal path.
    pub(super) async fn stop(&mut self, x: usize, cut: Cut) {
        let given = match cut {
            Cut::Full => box_id(x),
            Cut::Prefix(n) => super::ops::prefix(x, n),
            Cut::Empty => String::new(),
        };
        self.stop_as(None, Asked::Id(&given)).await;
    }

    /// `sandguard stop --all --session S`, as the command does it.
    pub(super) async fn stop_all(&mut self, s: usize) {
        self.stop_as(Some(&World::session_id(s)), Asked::All(Only::All))
            .await;
    }

    async fn stop_as(&self, session: Option<&str>, asked: Asked<'_>) {
        let root = Some(self.state.path().to_path_buf());
        if let Ok(mut chosen) = reclaim::stop::choose(&self.providers, root, session, asked).await {
            // Nobody to ask: the contract, as a `stop --all` without a terminal keeps it.
            chosen.settle(Answer::Yes);
            reclaim::remove_all(&self.providers, chosen.targets, &options(None)).await;
        }
    }

    /// The sessions whose fleet lease has run out (or was never written).
    pub(super) fn lapsed(&self) -> BTreeSet<usize> {
        self.sessions
            .iter()
            .filter(|(_, v)| !self.store.peek(&v.id).is_some_and(|(_, alive, _)| alive))
            .map(|(&s, _)| s)
            .collect()
    }

    /// One pass of the sweep service; `fleet`: with the fleet pass, as this host or another.
    /// `prune`: with the service's pruning after the pass (every ended session counts as old).
    /// `crash`: the sweep's journal writes fail from the given one on (it dies there, or the
    /// disk is full).
    pub(super) async fn sweep(
        &mut self,
        fleet: Option<(bool, bool)>,
        prune: bool,
        crash: Option<Crash>,
    ) -> Result<(), String> {
        if let Some((_, true)) = fleet {
            self.wait_for_leases().await?;
        }
        let store: Arc<dyn Store> = self.store.clone();
        let state = match crash {
            Some(c) => self.state.with_faults(c.faults()),
            None => self.state.clone(),
        };
        let plan = crate::sweep::service::SweepService {
            state,
            providers: self.providers.clone(),
            options: sweep_options(self.healthy()),
            every: Duration::from_secs(60),
            dry_run: false,
            prune_after: prune.then_some(Duration::ZERO),
            fleet: fleet.map(|(here, _)| crate::sweep::fleet::FleetSweep {
                store: store.clone(),
                host: if here { "here" } else { "there" }.into(),
                lease: LEASE,
                // Another host has a ledger of its own, not this one's.
                ledger: here.then(|| self.state.path().to_path_buf()),
            }),
            store: Some(store),
            notify: None,
            metrics: None,
        };
        let _no_fork = FORKS.read().await;
        crate::sweep::service::one_pass(&plan)
            .await
            .map(drop)
            .map_err(|e| format!("the sweep pass failed: {e}"))
    }

    /// Until every session whose sidecar died has lost its fleet lease.
    async fn wait_for_leases(&self) -> Result<(), String> {
        let deadline = Instant::now() + PATIENCE;
        for session in self.sessions.values().filter(|v| v.run.is_none()) {
            while self
                .store
                .peek(&session.id)
                .is_some_and(|(_, alive, _)| alive)
            {
                if Instant::now() >= deadline {
                    return Err(format!("{}'s fleet lease never ran out", session.id));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(())
    }

    pub(super) async fn prune(&self) {
        let _no_fork = FORKS.read().await;
        let _ = self.state.prune(crate::ledger::now_ms() + 1);
    }

    pub(super) fn fault(&self, provider: usize, fault: Fault) {
        let f = &self.fakes[provider % self.fakes.len()];
        use std::sync::atomic::Ordering::SeqCst;
        match fault {
            Fault::Remove5xx(n) => {
                *f.fault_retry_after.lock().unwrap() = None;
                f.fail_removes.store(n, SeqCst);
            }
            Fault::Remove429(n) => {
                *f.fault_retry_after.lock().unwrap() = Some(Duration::from_millis(5));
                f.fail_removes.store(n, SeqCst);
            }
            Fault::ListFails(n) => f.fail_lists.store(n, SeqCst),
            Fault::Slow(ms) => *f.latency.lock().unwrap() = Duration::from_millis(ms),
        }
    }

    pub(super) fn heal(&self) {
        self.fakes.iter().for_each(|f| f.heal());
    }
}
