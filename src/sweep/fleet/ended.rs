//! What a sweep tells the fleet store of the sessions it ends: a machine's own sweep its
//! session's end and its figures from the journal ([`tell_ended`]), a fleet sweep, which has
//! no journal of another host's session, its figures closed ([`close_spend`]; the module
//! docs of `sweep::fleet` say why).

use crate::fleet::{FleetSession, SessionSpend, Store};
use crate::ledger::spend::daily;
use crate::ledger::{SessionState, StateDir};

/// Tells the store that this machine's sweep ended session `id` in `state` (a session whose
/// sidecar died on this machine, reclaimed by the local pass or an adopting watcher), so that
/// `sessions --fleet` shows it ended and no fleet sweep reclaims it a second time, and writes
/// its figures from its journal in `ledger` (its sidecar's last write is as old as its
/// death; these end it). Only a final end is told, and only of a session the store holds and
/// has not seen end (a session from before the store was configured gets no record; one a
/// fleet sweep ended keeps the figures that sweep closed, which end where it removed the
/// sandboxes). Best effort: a store that cannot be reached is logged, and the fleet sweep
/// later finds the session's lease expired and reclaims it again, which finds it already gone.
pub(crate) async fn tell_ended(
    store: &dyn Store,
    ledger: &StateDir,
    id: &str,
    state: SessionState,
) {
    if !state.is_final() {
        return;
    }
    let told = match store.session(id).await {
        Ok(Some(s)) if !s.state.is_final() => {
            if let Some(spend) = journal_spend(ledger, &s.record) {
                if let Err(e) = store.put_spend(&spend).await {
                    tracing::warn!(
                        "cannot write the spend of session {id} to the fleet store: {e}"
                    );
                }
            }
            store.finish(id, state.into()).await
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(e) = told {
        tracing::warn!("cannot tell the fleet store that session {id} ended: {e}");
    }
}

/// The figures of session `record` from its journal in `ledger`, now; `None` (with a
/// warning) when it cannot be read.
fn journal_spend(ledger: &StateDir, record: &crate::fleet::SessionRecord) -> Option<SessionSpend> {
    match ledger.read_history(&record.id) {
        Ok((view, story)) => {
            let days = daily::by_day(&view, &story, crate::ledger::now_ms());
            Some(SessionSpend::of(record, &days))
        }
        Err(e) => {
            tracing::warn!("the spend of session {} is not written: {e}", record.id);
            None
        }
    }
}

/// A fleet sweep ended session `s`, of a host whose journal it does not have: its figures
/// keep the time its sidecar last wrote, and none of its sandboxes counts as alive any more
/// ([`crate::fleet::spend`]). Best effort, logged.
pub(super) async fn close_spend(store: &dyn Store, s: &FleetSession) {
    let days = crate::fleet::spend::days(Some(s.record.started_ms), crate::ledger::now_ms());
    let r = &s.record;
    if let Err(e) = store.close_spend(&r.host, &r.id, &r.providers, days).await {
        tracing::warn!(
            "cannot close the spend of session {} in the fleet store: {e}",
            r.id
        );
    }
}
