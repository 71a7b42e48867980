//! How the keeper is stopped before a reclaim: the sidecar's [`Halting`] and the keeper's
//! [`Halt`]. The sidecar turns `ending` and then takes the lock the keeper holds around each
//! batch of renewal calls, so that no renewal lands after the first removal (a check-then-call
//! on another thread could otherwise); a batch in flight is waited for at most [`HALT_WAIT`].

use std::sync::Arc;
use std::time::Duration;

/// How long a sidecar whose watch ended waits for a batch of renewals already in flight
/// before its reclaim starts anyway (a renewal call is bounded by its client's timeouts).
pub(crate) const HALT_WAIT: Duration = Duration::from_secs(1);

/// The keeper's half of its stop: `ending` turns `true` when the watch ends; the keeper holds
/// `calls` around each batch of renewal calls, checking `ending` once it has it.
#[derive(Clone)]
pub(crate) struct Halt {
    pub(in crate::watch) ending: tokio::sync::watch::Receiver<bool>,
    pub(in crate::watch) calls: Arc<tokio::sync::Mutex<()>>,
}

impl Halt {
    /// Whether the watch has ended.
    pub(crate) fn is_ending(&self) -> bool {
        *self.ending.borrow()
    }

    /// Until the watch has ended.
    #[cfg(test)]
    pub(crate) async fn ended(&mut self) {
        let _ = self.ending.wait_for(|e| *e).await;
    }
}

/// The sidecar's half: [`Halting::stop`] turns `ending` and then takes `calls`, so that no
/// renewal call is made once the reclaim has begun (a check-then-call on another thread could
/// otherwise land after the first removal).
pub(crate) struct Halting {
    ending: tokio::sync::watch::Sender<bool>,
    calls: Arc<tokio::sync::Mutex<()>>,
}

impl Default for Halting {
    fn default() -> Halting {
        Halting {
            ending: tokio::sync::watch::channel(false).0,
            calls: Arc::default(),
        }
    }
}

impl Halting {
    /// What a keeper is handed.
    pub(crate) fn halt(&self) -> Halt {
        Halt {
            ending: self.ending.subscribe(),
            calls: self.calls.clone(),
        }
    }

    /// The lock a keeper holds around each batch of calls: whoever holds it knows no
    /// keeper's removal or renewal is on its way ([`super::super::Sidecar`]'s detach takes it
    /// before it is confirmed).
    pub(crate) fn calls(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.calls.clone()
    }

    /// Stops the keeper: from now on it calls nothing; a batch in flight is waited for (at
    /// most [`HALT_WAIT`]).
    pub(crate) async fn stop(&self) {
        self.ending.send_replace(true);
        let _ = tokio::time::timeout(HALT_WAIT, self.calls.lock()).await;
    }
}
