//! What an owner tells its sidecar: `claim`, `release` and `detach` lines on the control
//! pipe, and the proxy's claims of what it created.
//!
//! Each line is written and then confirmed the way `sandguard claim` confirms it: by the
//! session's journal (polled with a deadline) showing the claim, the release, the detach, or
//! a refusal. The oracle is told whether the sidecar took it, since a claim a sweep must act
//! on is one the ledger holds.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::oracle::Oracle;
use super::world::{World, PATIENCE};
use crate::ledger::SessionView;
use crate::protocol::Target;
use crate::proxy::claim::{Ask as ProxyAsk, Claim as ProxyClaim, Hold};

/// The provider of the fences: none of the world's providers is called so.
const FENCE: &str = "fence";

impl World {
    /// What a proxy hands the sidecar for a create it stamped: a claim, or (a create that
    /// asked to be detached) a detach, as the real proxies decide ([`Hold::of`]).
    pub(super) async fn proxy_claim(&mut self, s: usize, x: usize, detached: bool) -> bool {
        let hold = if detached { Hold::Detach } else { Hold::Claim };
        match self.pinned(x) {
            Some(target) => self.proxy_says(s, target, hold).await,
            None => false,
        }
    }

    /// What a proxy hands the sidecar for `target` (an id pinned to the object there): `hold`
    /// says a claim, a detach, or a release (a removal through the proxy); `true` once
    /// acknowledged.
    pub(super) async fn proxy_says(&mut self, s: usize, target: Target, hold: Hold) -> bool {
        let Some(tx) = self.sessions.get(&s).and_then(|v| v.proxy.as_ref()) else {
            return false;
        };
        let (ack, acked) = oneshot::channel();
        if tx
            .send(ProxyAsk::Claim(ProxyClaim {
                target,
                ack,
                hold,
                size: None,
            }))
            .is_err()
        {
            return false;
        }
        matches!(tokio::time::timeout(PATIENCE, acked).await, Ok(Ok(())))
    }

    /// Writes one control line of session `s` about sandbox `x`, then a fence (a claim on a
    /// provider no session has, which the sidecar journals as refused), and waits until the
    /// journal shows the fence: the sidecar reads its lines in order, so by then it has
    /// answered the line, and `done` says whether it took it. A refused detach journals
    /// nothing (`ownership::detach`), so without the fence only a timeout could tell.
    async fn line(
        &mut self,
        s: usize,
        verb: &str,
        x: usize,
        done: impl Fn(&SessionView, &Target) -> bool,
    ) -> Option<bool> {
        if !self.guarded(s) {
            return None;
        }
        let target = self.target(x)?;
        self.fences += 1;
        let fence = Target::new(FENCE, &format!("f{}", self.fences)).ok()?;
        let session = self.sessions.get_mut(&s)?;
        let pipe = session.pipe.as_mut()?;
        let lines = format!(
            "{verb} {} {}\nclaim {} {}\n",
            target.provider, target.id, fence.provider, fence.id
        );
        pipe.write_all(lines.as_bytes()).await.ok()?;
        let deadline = Instant::now() + PATIENCE;
        let id = session.id.clone();
        let faults = session.faults.clone();
        loop {
            if let Ok(view) = self.state.read_session(&id) {
                if view.refused.contains_key(&fence) {
                    return Some(!view.refused.contains_key(&target) && done(&view, &target));
                }
            }
            // Died at a journal write: it answers nothing more (the step reaps it), but what
            // it wrote before (unsynced, as a process killed before its fsync leaves it) is
            // in the journal for every reader.
            if faults.died() {
                let view = self.state.read_session(&id).ok()?;
                return Some(!view.refused.contains_key(&target) && done(&view, &target));
            }
            if Instant::now() >= deadline {
                return Some(false);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub(super) async fn claim(&mut self, s: usize, x: usize, o: &mut Oracle) -> Result<(), String> {
        // The claim may be journaled pinned to the object there (`Target::answers`).
        let done = |v: &SessionView, t: &Target| v.claims.iter().any(|c| c.answers(t));
        if let Some(confirmed) = self.line(s, "claim", x, done).await {
            o.claim(s, x, confirmed);
        }
        Ok(())
    }

    pub(super) async fn release(
        &mut self,
        s: usize,
        x: usize,
        o: &mut Oracle,
    ) -> Result<(), String> {
        if self
            .line(s, "release", x, |v, t| {
                !v.claims.iter().any(|c| c.answers(t))
            })
            .await
            == Some(true)
        {
            // Only a release the journal shows: one its sidecar died before writing
            // releases nothing, and the sidecar started again still holds the claim.
            o.release(s, x);
        }
        Ok(())
    }

    pub(super) async fn detach(
        &mut self,
        s: usize,
        x: usize,
        o: &mut Oracle,
    ) -> Result<(), String> {
        // Pinned to the object there, as a claim is (`Target::answers`).
        let done = |v: &SessionView, t: &Target| v.detached.iter().any(|d| d.answers(t));
        if self.line(s, "detach", x, done).await == Some(true) {
            o.detach(s, x);
        }
        Ok(())
    }
}
