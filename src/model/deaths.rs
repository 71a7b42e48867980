//! Deaths: an owner's (it exits, SIGKILL, or SIGTERM with a stop request to its sidecar, as a
//! group SIGTERM does) and a sidecar's (its task aborted, as a SIGKILL would end it).
//!
//! A death step ends when the code has done what the death sets off: the sidecar's reclaim
//! has returned, the owner reads dead to the judge, and the journal's lock reads free (see
//! [`super::world`]). It notes when the owner's reclaim began (its first removal call of a
//! sandbox it owns), which the renewal check measures against.

use std::time::Duration;

use tokio::time::Instant;

use super::ops::Death;
use super::oracle::Oracle;
use super::world::{World, PATIENCE};
use crate::identity::Liveness;

impl World {
    pub(super) async fn kill(
        &mut self,
        s: usize,
        how: Death,
        o: &mut Oracle,
    ) -> Result<(), String> {
        let Some(session) = self.sessions.get_mut(&s).filter(|_| o.alive(s)) else {
            return Ok(());
        };
        let died = Instant::now();
        match how {
            Death::Exit => drop(session.child.stdin.take()),
            Death::Sigkill => {
                let _ = session.child.kill();
            }
            Death::GroupTerm => {
                crate::unix::send_signal(session.owner.pid, libc::SIGTERM);
                if let Some(stop) = session.stop.take() {
                    let _ = stop.send(());
                }
            }
        }
        o.owner_dies(s);
        let owner = session.owner.clone();
        if let Some(run) = session.run.take() {
            session.pipe = None;
            session.proxy = None;
            match tokio::time::timeout(PATIENCE, run).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("s{s}'s sidecar panicked: {e}")),
                Err(_) => return Err(format!("s{s}'s sidecar did not finish within {PATIENCE:?}")),
            }
            // Its own reclaim's first removal: a call for a sandbox it owns (by its label or
            // a claim), not another session's reclaim that happened to run meanwhile.
            let its: std::collections::BTreeSet<String> = o
                .boxes
                .iter()
                .filter(|(_, b)| {
                    b.label == Some(s) || b.claimed.contains(&s) || b.stolen.contains(&s)
                })
                .map(|(&x, _)| super::ops::box_id(x))
                .collect();
            let first = self
                .fakes
                .iter()
                .flat_map(|f| f.calls_log.lock().unwrap().clone())
                .filter(|(id, _, t)| *t >= died && its.contains(id))
                .map(|(_, _, t)| t)
                .min();
            self.reclaim_began
                .insert(s, first.unwrap_or_else(Instant::now));
            self.lock_freed(s).await?;
        }
        let deadline = Instant::now() + PATIENCE;
        while owner.liveness() != Liveness::Dead {
            if Instant::now() >= deadline {
                return Err(format!("s{s}'s owner is not seen dead"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    pub(super) async fn sidecar_dies(&mut self, s: usize, o: &mut Oracle) {
        let Some(session) = self.sessions.get_mut(&s) else {
            return;
        };
        if let Some(run) = session.run.take() {
            run.abort();
            let _ = run.await;
            session.pipe = None;
            session.proxy = None;
            session.stop = None;
            o.sidecar_dies(s);
        }
        let _ = self.lock_freed(s).await;
    }

    /// Until session `s`'s journal lock is free, as it is once a sidecar process is gone (its
    /// task's end drops the journal; the lock may outlive it for a moment).
    async fn lock_freed(&self, s: usize) -> Result<(), String> {
        let Some(id) = self.sessions.get(&s).map(|v| v.id.clone()) else {
            return Ok(());
        };
        let deadline = Instant::now() + PATIENCE;
        while self.state.read_session(&id).is_ok_and(|v| v.sidecar_alive) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "s{s}'s journal is still locked after its sidecar ended"
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }
}
