//! What the sidecar tells `[notify]` ([`crate::notify`]): a budget limit hit
//! (`limit_reached`, once per limit per session) and an end-of-session reclaim that left
//! something pending (`reclaim_pending`, then a flush of at most
//! [`crate::notify::STOP_FLUSH`] before the sidecar exits).
//!
//! Decisions:
//! - **Lazy**: the notifier ([`crate::notify::Lazy`]) is started at the first event; a
//!   sidecar with nothing to tell starts no task and has no wake-up for it, `[notify]` or not.
//! - **Once per limit**: a limit is named by its config key (`sandboxes`, `creates`,
//!   `lifetime`, `spend`, or `providers.NAME.limits.KEY`); the first time it refuses a create,
//!   is seen passed by claims, removes a sandbox past its lifetime or is reached by spend, it
//!   is told; later hits of the same limit are not.
//! - The flush happens after the session's ending is journaled and synced: the reclaim is
//!   over; only the sidecar's exit waits.

use super::lease::Clock;
use super::Sidecar;
use crate::notify::{Event, Kind};
use crate::reclaim::Report;

impl<C: Clock> Sidecar<C> {
    /// Tells `limit_reached` for the limit `key` (said as `line`), once per session.
    pub(super) fn tell_limit(&mut self, key: &str, provider: Option<&str>, line: &str) {
        if !self.notify.is_configured() || !self.limits_told.insert(key.to_string()) {
            return;
        }
        let event = Event::new(
            Kind::LimitReached,
            format!("session {}: {line}", self.session),
        )
        .with("session", self.session.clone())
        .with("limit", key)
        .with("provider", provider.map(str::to_string));
        self.notify.send(event);
    }
}

/// Tells `reclaim_pending` for what `report` left, if anything, and waits (bounded) for the
/// notifier to deliver what the session told.
pub(super) async fn tell_end(notify: &mut crate::notify::Lazy, session: &str, report: &Report) {
    let left: Vec<_> = report
        .removals
        .iter()
        .filter(|r| !r.outcome.is_final())
        .collect();
    if !left.is_empty() {
        let session = std::collections::BTreeSet::from([session.to_string()]);
        let event =
            crate::notify::sweep::pending_event(&left, "sidecar").with_named("sessions", session);
        notify.send(event);
    }
    notify.flush(crate::notify::STOP_FLUSH).await;
}
