//! A reclaim cut short ([`Cutoff`], carried in [`super::Options`]): the sweep service's stop
//! (SIGTERM or SIGINT, [`crate::sweep::service`]) reaches every wait of the reclaims it runs:
//! a provider's call in flight, a pace's gate, a backoff, a settle delay. A cut is the
//! deadline brought forward: a wait that is cut answers as the deadline would (the removal
//! unfinished with its last failure, or [`cut_short`]'s words when no answer came; the
//! listing failed), so the one session ending ([`super::ending`]) journals what was removed
//! as removed and what was not as pending, and writes the session's end whole. The next sweep
//! finishes it.
//!
//! Decisions:
//! - **Cut, not dropped.** A reclaim is never abandoned at an await point by its service: what
//!   it did before the cut is journaled, and nothing is told as done that was not.
//! - **Nothing starts after the cut**: a cut wait answers at once, without calling the
//!   provider; a call in flight is dropped (its answer, if the provider acted, is found by
//!   the next sweep as "already gone").
//! - **Only the sweep service cuts.** A sidecar's reclaim, `stop` and a one-shot sweep run with
//!   [`Cutoff::default`], which is never cut: nobody stops them half way (their process ends
//!   by its own signal disposition, and the next sweep finishes what they leave).

use std::future::Future;

use tokio::sync::watch;

use crate::providers::ProviderError;

/// The words of a wait that was cut before its provider answered.
const CUT: &str =
    "not finished: the sweep was stopped before the provider answered; the next sweep finishes it";

/// What a reclaim's waits watch: cut once, for good. The default is never cut.
#[derive(Clone, Default)]
pub(crate) struct Cutoff(Option<watch::Receiver<bool>>);

/// The side that cuts: the sweep service's, when it is told to stop.
pub(crate) struct Cutter(watch::Sender<bool>);

impl Cutter {
    pub(crate) fn new() -> Cutter {
        Cutter(watch::channel(false).0)
    }

    /// What the reclaims this cutter may cut are given.
    pub(crate) fn cutoff(&self) -> Cutoff {
        Cutoff(Some(self.0.subscribe()))
    }

    /// Cuts every reclaim of [`Cutter::cutoff`]: their waits answer at once from now on.
    pub(crate) fn cut(&self) {
        self.0.send_replace(true);
    }
}

impl Cutoff {
    pub(crate) fn is_cut(&self) -> bool {
        self.0.as_ref().is_some_and(|cut| *cut.borrow())
    }

    /// Resolves once cut; never for a cutoff nobody can cut (the default, or a dropped
    /// [`Cutter`]).
    pub(crate) async fn cut(&self) {
        if let Some(cut) = &self.0 {
            let mut cut = cut.clone();
            if cut.wait_for(|c| *c).await.is_ok() {
                return;
            }
        }
        std::future::pending::<()>().await;
    }

    /// `work`'s answer, or `None` when the cut comes first (`work` is then dropped); once
    /// cut, `None` at once, without starting `work`.
    pub(crate) async fn or<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        if self.is_cut() {
            return None;
        }
        tokio::select! {
            biased;
            () = self.cut() => None,
            done = work => Some(done),
        }
    }
}

impl std::fmt::Debug for Cutoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match (&self.0, self.is_cut()) {
            (None, _) => "never",
            (Some(_), false) => "not cut",
            (Some(_), true) => "cut",
        })
    }
}

/// What a wait cut before its provider answered says: transient (the next sweep tries
/// again), no status, no hint.
pub(crate) fn cut_short() -> ProviderError {
    ProviderError::Transient {
        message: CUT.into(),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_cut_ends_a_wait_at_once_and_starts_nothing_after_it() {
        let cutter = Cutter::new();
        let cutoff = cutter.cutoff();
        assert_eq!(cutoff.or(async { 7 }).await, Some(7));
        let waiting = cutoff.or(tokio::time::sleep(Duration::from_secs(600)));
        let cutting = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cutter.cut();
        };
        let began = tokio::time::Instant::now();
        let (waited, ()) = tokio::join!(waiting, cutting);
        assert_eq!(waited, None);
        assert_eq!(began.elapsed(), Duration::from_secs(1));
        assert!(cutoff.is_cut());
        let mut started = false;
        assert_eq!(cutoff.or(async { started = true }).await, None);
        assert!(!started, "nothing starts after the cut");
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_is_never_cut() {
        let never = Cutoff::default();
        let slow = never.or(tokio::time::sleep(Duration::from_secs(3600)));
        assert_eq!(slow.await, Some(()));
        let dropped = Cutter::new().cutoff();
        assert!(!dropped.is_cut());
        assert_eq!(dropped.or(async { 1 }).await, Some(1));
    }
}
