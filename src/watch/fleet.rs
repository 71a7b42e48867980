//! The sidecar's part of the fleet store ([`crate::fleet`]): register the session, renew its
//! lease every `lease / 3` (while the owner lives and while the sidecar reclaims: the task
//! runs until the service shuts its tasks down, after the reclaim), mirror claims, releases
//! and detaches, and write the session's end.
//!
//! Decisions:
//! - **Never on the critical path**: the registrar is a task of its own; the watch loop only
//!   updates the shared holdings and pokes a [`Notify`]. A store that is down, slow or wrong
//!   costs the loop nothing.
//! - **Claims are mirrored promptly**: a change wakes the registrar, which sends it with a
//!   lease renewal in one pipelined round trip (changes made while a round trip is in flight
//!   go together in the next one). A claim made just before the machine dies may miss the
//!   store; its labels still name the session.
//! - **Redis down**: said once (`warn`), retried with backoff (doubling from
//!   [`FIRST_RETRY`] up to `lease / 3`), and on the first success the session is registered
//!   again in full, since a Redis that came back may have lost its data. A renewal that
//!   finds the record missing registers again at once, too.
//! - **Lease lost**: when the store was unreachable for longer than the lease, a fleet sweep
//!   may have reclaimed this session's sandboxes: the sidecar says so (`warn`, "lease lost"),
//!   registers again, and keeps guarding what is left.
//! - **A resumed session registers again** under the same id (a sidecar restarted with
//!   `watch --session S`): registration replaces the record
//!   whatever the store held (the owner, pid and lease are the new sidecar's, the state
//!   `active`, the session back in the index even after an end had dropped it, its expiry
//!   cleared), and mirrors the holdings the new sidecar was seeded with from its journal.
//!   A fleet sweep's counters (`reclaims`, `reclaimed_by`) are history and stay.
//! - **The end**: written with one round trip, bounded by [`END_TIMEOUT`]; when it cannot be
//!   written, the lease runs out and the next fleet sweep finds nothing left to remove.
//! - **Spend** ([`crate::fleet::spend`]): the session's figures, read from its journal
//!   ([`Tally`]: the figures `sandguard report` counts), are written whole (a rewrite replaces)
//!   at registration (again after the store was down or lost its data), at each timed renewal
//!   (every `lease / 3`) while a sandbox of the session is alive or when its holdings changed
//!   since the last write, and at the end, before the end itself ([`Last`]). So the store's
//!   figures lag the journal's by at most `lease / 3` (10 s by default), a claim storm costs
//!   one journal read per renewal period (a poke mirrors claims, it reads no journal), and a
//!   session holding nothing alive reads nothing. The journal is read inline: a local file, at
//!   most once a renewal. A write that fails is tried at the next renewal; the end's shares
//!   [`END_TIMEOUT`] with the end.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::fleet::{FleetState, Holdings, SessionRecord, SessionSpend, Store};
use crate::ledger::spend::daily::Days;
use crate::ledger::{EndCause, LedgerError, SessionState};

use super::ttl::SharedHoldings;

/// The first retry after the store failed.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(500);

/// How long the sidecar's last write (the session's end) may take.
pub(crate) const END_TIMEOUT: Duration = Duration::from_secs(5);

/// The session's figures as its journal tells them at a time (unix ms): what `report` counts
/// ([`crate::ledger::spend::daily::of_journal`]).
pub(crate) type Tally = Arc<dyn Fn(u64) -> Result<Days, LedgerError> + Send + Sync>;

/// Where and for how long the sidecar registers its session: the store, the session's
/// record, the fleet's lease, and where its spend is read from (`None`: it is not written).
pub(crate) struct Registration {
    pub store: Arc<dyn Store>,
    pub record: SessionRecord,
    pub lease: Duration,
    pub tally: Option<Tally>,
}

impl Registration {
    /// What the sidecar writes at its end, taken before the registrar runs.
    pub(crate) fn last(&self) -> Last {
        Last {
            store: self.store.clone(),
            record: self.record.clone(),
            tally: self.tally.clone(),
        }
    }
}

/// The figures of the session `record` now, and whether a sandbox of it is alive; `None`
/// without a tally, or when the journal cannot be read (said at `debug`: the next write tries
/// again).
fn spend_now(tally: Option<&Tally>, record: &SessionRecord) -> Option<(SessionSpend, bool)> {
    match tally?(crate::ledger::now_ms()) {
        Ok(days) => {
            let alive = days.values().any(|d| d.share.alive > 0);
            Some((SessionSpend::of(record, &days), alive))
        }
        Err(e) => {
            tracing::debug!("cannot count the session's spend for the fleet store: {e}");
            None
        }
    }
}

/// The last spend write (`None`: none since the last registration): of which holdings, and
/// whether a sandbox was alive then.
#[derive(Default)]
struct Spent(Option<(Holdings, bool)>);

pub(crate) struct Registrar {
    registration: Registration,
    holdings: SharedHoldings,
    changed: Arc<Notify>,
}

impl Registrar {
    pub(crate) fn new(
        registration: Registration,
        holdings: SharedHoldings,
        changed: Arc<Notify>,
    ) -> Registrar {
        Registrar {
            registration,
            holdings,
            changed,
        }
    }

    fn current(&self) -> Holdings {
        self.holdings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Registers, then renews and mirrors until aborted.
    pub(crate) async fn run(self) {
        let p = &self.registration;
        let every = p.lease / 3;
        let mut mirrored: Option<Holdings> = None;
        let mut failing_since: Option<Instant> = None;
        let mut failures = 0;
        let (mut spent, mut timed) = (Spent::default(), true);
        loop {
            let now = self.current();
            let fresh = mirrored.is_none();
            let result = match &mirrored {
                None => p
                    .store
                    .register(&p.record, &now, p.lease)
                    .await
                    .map(|()| true),
                Some(old) => {
                    let changes = now.changes_since(old);
                    p.store
                        .renew(&p.record.id, &p.record.host, p.lease, &changes)
                        .await
                }
            };
            let wait = match result {
                Ok(true) => {
                    if let Some(since) = failing_since.take() {
                        if since.elapsed() > p.lease {
                            tracing::warn!(
                                "fleet store reachable again after {} s: lease lost (a fleet sweep may have reclaimed this session's sandboxes); registered again",
                                since.elapsed().as_secs()
                            );
                        } else {
                            tracing::info!("fleet store reachable again; registered again");
                        }
                    }
                    if fresh {
                        // Registered (again): the store may have lost the figures too.
                        spent = Spent::default();
                    }
                    if timed || fresh {
                        self.write_spend(&mut spent, &now).await;
                    }
                    mirrored = Some(now);
                    failures = 0;
                    every
                }
                Ok(false) => {
                    tracing::warn!(
                        "session {} is missing from the fleet store (Redis lost its data?): registering again",
                        p.record.id
                    );
                    mirrored = None;
                    continue;
                }
                Err(e) => {
                    if failing_since.is_none() {
                        tracing::warn!("{e}; guarding locally, retrying in the background");
                        failing_since = Some(Instant::now());
                    }
                    // Registered again in full when it is back: it may have lost its data.
                    mirrored = None;
                    failures += 1;
                    Backoff::new(FIRST_RETRY, every.max(FIRST_RETRY)).delay(failures)
                }
            };
            timed = if failing_since.is_some() {
                tokio::time::sleep(wait).await;
                true
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => true,
                    _ = self.changed.notified() => false,
                }
            };
        }
    }

    /// Writes the session's figures if they are due (see the module docs).
    async fn write_spend(&self, spent: &mut Spent, holdings: &Holdings) {
        let due = match &spent.0 {
            None => true,
            Some((written, alive)) => *alive || written != holdings,
        };
        if !due {
            return;
        }
        let p = &self.registration;
        let Some((spend, alive)) = spend_now(p.tally.as_ref(), &p.record) else {
            return;
        };
        match p.store.put_spend(&spend).await {
            Ok(()) => *spent = Spent(Some((holdings.clone(), alive))),
            Err(e) => tracing::debug!("cannot write the session's spend, at the next renewal: {e}"),
        }
    }
}

/// What the sidecar writes last: its figures, then its end ([`Last::write`]).
pub(crate) struct Last {
    store: Arc<dyn Store>,
    record: SessionRecord,
    tally: Option<Tally>,
}

impl Last {
    /// Writes the session's figures as its journal ends them, then its end `state`, within
    /// [`END_TIMEOUT`] together; a failure is logged.
    pub(crate) async fn write(self, state: FleetState) {
        let store = self.store.as_ref();
        let both = async {
            if let Some((spend, _)) = spend_now(self.tally.as_ref(), &self.record) {
                if let Err(e) = store.put_spend(&spend).await {
                    tracing::warn!("cannot write the session's spend to the fleet store: {e}");
                }
            }
            finish(store, &self.record.id, state).await;
        };
        if tokio::time::timeout(END_TIMEOUT, both).await.is_err() {
            tracing::warn!("cannot write the session's end to the fleet store: timed out");
        }
    }
}

/// The state the store keeps for a sidecar that ended for `cause` in `state` (`None`: it was
/// stopped while its owner lived): `stopped`, the final state, or `pending`.
pub(crate) fn end_state(cause: Option<EndCause>, state: SessionState) -> FleetState {
    match (cause, state) {
        (None, _) => FleetState::Stopped,
        (Some(_), state) if state.is_final() => state.into(),
        _ => SessionState::Pending.into(),
    }
}

/// Writes the session's end (one round trip, bounded); a failure is logged.
pub(crate) async fn finish(store: &dyn Store, id: &str, state: FleetState) {
    match tokio::time::timeout(END_TIMEOUT, store.finish(id, state)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("cannot write the session's end: {e}"),
        Err(_) => tracing::warn!("cannot write the session's end to the fleet store: timed out"),
    }
}

#[cfg(test)]
mod tests;
