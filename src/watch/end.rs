//! How the sidecar ends its session: its cause ([`EndCause`]) journaled, one reclaim of claims ∪ the
//! session's labels minus what was detached, the first pass told to whoever listens (the
//! owner's `bye` outcome, the wrapper's line on the terminal), claims still arriving drained
//! for the settle delay, and how the owner exited learned beside it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncRead;

use super::lease::Clock;
use super::triggers::drain_claims;
use super::{Ended, Sidecar};
use crate::identity::death::{ExitProbe, PROBE_FOR};
use crate::ledger::{EndCause, Record, SessionState};
use crate::protocol::{ByeOutcome, LineReader};
use crate::reclaim::ending::{self, Before, Ending, SharedJournal};
use crate::reclaim::{Plan, Report};

impl<C: Clock> Sidecar<C> {
    /// Ends the session for `cause` (`None`: stopped while the owner lives, nothing
    /// reclaimed); `exit`, for an owner that exited, learns how beside the reclaim and
    /// journals it (`owner_exit`) without delaying any removal.
    pub(super) async fn finish<R: AsyncRead + Unpin>(
        mut self,
        cause: Option<EndCause>,
        control: Option<LineReader<R>>,
        exit: Option<ExitProbe>,
    ) -> Ended {
        // The refusals' exact counts, before anything else is journaled for the end.
        self.journal_refusals();
        let mut notify = std::mem::replace(&mut self.notify, crate::notify::Lazy::none());
        let Some(cause) = cause else {
            notify.flush(crate::notify::STOP_FLUSH).await;
            tracing::warn!(
                "session {}: sidecar stopped while its owner lives; nothing reclaimed, a sweep will judge the owner",
                self.session
            );
            return Ended {
                cause: None,
                state: SessionState::Active,
            };
        };
        // Other sessions are read from the ledger only if a claim names a sandbox that does
        // not carry this session's label.
        let known = Arc::new(self.facts.known());
        let plan = {
            let h = self.held();
            Plan::for_session(
                &self.session,
                &self.providers,
                (&h.claims, &h.detached),
                known,
            )
        };
        let journal: SharedJournal = Arc::new(Mutex::new(self.journal));
        let settle = self.options.settle.unwrap_or(Duration::ZERO);
        let late = drain_claims(control, settle, &journal, &self.providers);
        let before = Before {
            providers: Some(
                self.providers
                    .iter()
                    .map(|p| p.name().to_string())
                    .collect(),
            ),
            ..Default::default()
        };
        let bye = self.bye_report.filter(|_| cause == EndCause::Bye);
        let end = self.end_report;
        let told = (bye.is_some() || end.is_some()).then_some(move |report: &Report| {
            if let Some(tell) = bye {
                tell(&bye_outcome(report));
            }
            if let Some(tell) = end {
                tell(report);
            }
        });
        let learn_exit = async {
            let Some(probe) = exit else { return };
            if let Some(exit) = probe.wait(PROBE_FOR).await {
                let (code, signal) = exit.parts();
                // Written, not synced: an fdatasync here would block the runtime thread while
                // the first removal requests are in flight (the exit is usually known at once,
                // the owner's parent having reaped it). It is made durable below, once the
                // reclaim is done; it tells how the owner ended and decides nothing.
                ending::write(Some(&journal), &Record::OwnerExit { code, signal });
            }
        };
        let ending = Ending {
            journal: Some(&journal),
            providers: &self.providers,
            plan: &plan,
            options: &self.options,
            before: &before,
            cause,
        };
        let ((state, report), ()) = tokio::join!(ending.run_then(late, told), learn_exit);
        ending::sync(Some(&journal)).await;
        tracing::debug!("session {} ended: {}", self.session, report.summary());
        super::notify::tell_end(&mut notify, &self.session, &report).await;
        Ended {
            cause: Some(cause),
            state,
        }
    }
}

/// What a reclaim left behind, as the owner is told after `bye`.
fn bye_outcome(report: &Report) -> ByeOutcome {
    let failed = report.removals.iter().filter_map(|r| {
        let error = r.outcome.error().filter(|_| !r.outcome.is_final())?;
        Some(crate::protocol::Left {
            provider: r.sandbox.provider.clone(),
            id: r.sandbox.id.clone(),
            reason: format!("{}: {error}", r.outcome.as_str()),
        })
    });
    let unlisted = report.list_failures.iter().map(|f| crate::protocol::Left {
        provider: f.provider.clone(),
        id: "*".into(),
        reason: format!("not listed: {}", f.error),
    });
    ByeOutcome::from_left(failed.chain(unlisted).collect())
}
