//! The sidecar: watches one owner and reclaims its sandboxes the moment it is gone.
//!
//! The loop waits on events only, each arm delegating to a named method:
//! - the control pipe (claims, releases, detaches, heartbeats, `bye`), read line by line;
//!   EOF is a *wake-up*, not a verdict: the owner's identity is checked, and a program that
//!   merely closed its descriptors is watched on;
//! - claims from the Docker API proxy ([`proxy`]), applied exactly like a `claim` line and
//!   acknowledged once journaled;
//! - the owner's death ([`death::OwnerWatch`]: a pidfd, `/proc` polling only as fallback);
//! - the lease ([`lease::Lease`]), armed only once heartbeats start;
//! - a stop request (SIGTERM to the sidecar), which ends the watch *without* reclaiming: a
//!   sidecar being told to stop says nothing about its owner. The session stays active in the
//!   ledger with its lock released, and the next `sandguard sweep` judges the owner: reclaims
//!   if it is dead, adopts it if it lives.
//!
//! Every trigger is injected ([`Triggers`]), so tests drive the loop with a fake pipe, fake
//! providers, a manual clock and paused tokio time.
//!
//! When the owner dies or its lease expires: the ending is journaled, then one reclaim runs
//! (claims ∪ the session's labels, minus detached sandboxes), each outcome is journaled, and
//! the session ends `reclaimed` or, if anything is left, `pending`. `bye` reclaims what is
//! still owned at once and ends the session `clean`.
//!
//! Two ledger conventions: a provider that could not be listed during the reclaim is
//! journaled as `failed` with the id `*` (the whole provider is pending, not one sandbox); and
//! claims that arrive *after* the owner's death (drained from the pipe during the settle
//! delay) are reclaimed in the second pass and journaled by their outcome only.

pub mod death;
pub mod lease;
pub mod proxy;
pub mod ttl;

use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncRead;

use crate::ledger::{Journal, Record, SessionState};
use crate::protocol::{Command, LineReader, Target};
use crate::providers::{Kind, Provider, Sandbox};
use crate::reclaim::{self, Options, Plan, Report};

use death::Gone;
use lease::{Clock, Lease};

/// Why the watch ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    OwnerGone(Gone),
    LeaseExpired,
    Bye,
    /// The sidecar was told to stop (SIGTERM); nothing was reclaimed.
    Stopped,
}

/// How the session stands when the sidecar is done.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub ending: Ending,
    pub state: SessionState,
    pub report: Option<Report>,
}

/// The events the loop waits on, injected.
pub struct Triggers<R> {
    /// Resolves when the owner is gone ([`OwnerWatch::wait`] in production).
    pub owner: Pin<Box<dyn Future<Output = Gone> + Send>>,
    pub control: Option<LineReader<R>>,
    /// Claims from the Docker API proxy ([`proxy`]), when it runs.
    pub proxy: Option<tokio::sync::mpsc::UnboundedReceiver<proxy::Claim>>,
    pub stop: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// One session's sidecar.
pub struct Sidecar<C> {
    pub session: String,
    pub providers: Vec<Arc<dyn Provider>>,
    pub journal: Journal,
    pub lease: Lease<C>,
    pub options: Options,
    claims: BTreeSet<Target>,
    detached: BTreeSet<Target>,
    malformed: u64,
    /// What the TTL keeper renews; updated on every claim, release and detach.
    holdings: tokio::sync::watch::Sender<ttl::Holdings>,
}

impl<C: Clock> Sidecar<C> {
    pub fn new(
        session: String,
        providers: Vec<Arc<dyn Provider>>,
        journal: Journal,
        lease: Lease<C>,
        options: Options,
    ) -> Self {
        Sidecar {
            session,
            providers,
            journal,
            lease,
            options,
            claims: BTreeSet::new(),
            detached: BTreeSet::new(),
            malformed: 0,
            holdings: tokio::sync::watch::Sender::new(ttl::Holdings::default()),
        }
    }

    /// The owner's claims and detached sandboxes, kept current for the TTL keeper.
    pub fn holdings(&self) -> tokio::sync::watch::Receiver<ttl::Holdings> {
        self.holdings.subscribe()
    }

    /// Malformed control lines seen so far.
    pub fn malformed_lines(&self) -> u64 {
        self.malformed
    }

    /// Watches until the owner is gone (or says `bye`, or the sidecar is stopped), then
    /// reclaims as the ending requires.
    pub async fn run<R: AsyncRead + Unpin>(mut self, mut triggers: Triggers<R>) -> Outcome {
        let ending = self.watch(&mut triggers).await;
        // A proxy still serving during the reclaim gets no acknowledgement, not a hang; what
        // it creates now carries the labels, and the settle pass finds it.
        drop(triggers.proxy.take());
        self.finish(ending, triggers.control).await
    }

    async fn watch<R: AsyncRead + Unpin>(&mut self, t: &mut Triggers<R>) -> Ending {
        loop {
            let check_in = self.lease.next_check();
            tokio::select! {
                biased;
                _ = &mut t.stop => return Ending::Stopped,
                // Control lines before the death event: a claim written just before the owner
                // died is in the pipe already and must be known before reclaiming.
                line = next_line(&mut t.control), if t.control.is_some() => {
                    if let Some(ending) = self.on_line(line, t).await {
                        return ending;
                    }
                }
                claim = next_claim(&mut t.proxy), if t.proxy.is_some() => {
                    self.on_proxy_claim(claim, t);
                }
                gone = &mut t.owner => return Ending::OwnerGone(gone),
                _ = tokio::time::sleep(check_in), if self.lease.is_running() => {
                    if self.lease.check_expired() {
                        return Ending::LeaseExpired;
                    }
                }
            }
        }
    }

    async fn on_line<R>(
        &mut self,
        line: Option<Result<Command, crate::protocol::ProtocolError>>,
        t: &mut Triggers<R>,
    ) -> Option<Ending> {
        match line {
            Some(Ok(command)) => self.apply(command),
            Some(Err(e)) => {
                self.malformed += 1;
                tracing::warn!("ignored control line ({} so far): {e}", self.malformed);
                None
            }
            None => {
                t.control = None;
                // EOF is a wake-up, not a verdict: the owner's death source decides (it fires
                // at once if the owner is gone). A closed pipe while the owner lives (a program
                // that closes all its descriptors) changes nothing.
                tracing::info!("control pipe closed; watching the owner's process");
                None
            }
        }
    }

    /// A create seen by the Docker proxy: claimed as if the owner had written the line, then
    /// acknowledged so the proxy hands the daemon's answer to the client.
    fn on_proxy_claim<R>(&mut self, claim: Option<proxy::Claim>, t: &mut Triggers<R>) {
        match claim {
            Some(c) => {
                self.apply(Command::Claim(c.target));
                let _ = c.ack.send(());
            }
            None => t.proxy = None,
        }
    }

    fn apply(&mut self, command: Command) -> Option<Ending> {
        let record = match &command {
            Command::Claim(t) => Record::Claim {
                provider: t.provider.clone(),
                id: t.id.clone(),
            },
            Command::Release(t) => Record::Release {
                provider: t.provider.clone(),
                id: t.id.clone(),
            },
            Command::Detach(t) => Record::Detach {
                provider: t.provider.clone(),
                id: t.id.clone(),
            },
            Command::Renew => {
                if !self.lease.renew() {
                    tracing::warn!("heartbeat after the lease expired: ignored");
                }
                return None;
            }
            Command::Bye => return Some(Ending::Bye),
        };
        self.journal_append(&record);
        match command {
            Command::Claim(t) => {
                self.detached.remove(&t);
                self.claims.insert(t);
            }
            Command::Release(t) => {
                self.claims.remove(&t);
            }
            Command::Detach(t) => {
                self.claims.remove(&t);
                self.detached.insert(t);
            }
            Command::Renew | Command::Bye => {}
        }
        self.holdings.send_replace(ttl::Holdings {
            claims: self.claims.clone(),
            detached: self.detached.clone(),
        });
        None
    }

    /// Journal failures are logged, not fatal: the sidecar still holds the claim in memory
    /// and will reclaim it; only a crash of the sidecar itself could then lose it.
    fn journal_append(&mut self, record: &Record) {
        if let Err(e) = self.journal.append(record) {
            tracing::error!("session {}: {e}", self.session);
        }
    }

    async fn finish<R: AsyncRead + Unpin>(
        mut self,
        ending: Ending,
        control: Option<LineReader<R>>,
    ) -> Outcome {
        let (record, label) = match &ending {
            Ending::Stopped => {
                tracing::warn!(
                    "session {}: sidecar stopped; nothing reclaimed, a sweep will judge the owner",
                    self.session
                );
                return Outcome {
                    ending,
                    state: SessionState::Active,
                    report: None,
                };
            }
            Ending::Bye => (None, "owner said bye"),
            Ending::LeaseExpired => (Some(Record::LeaseExpired), "lease expired"),
            Ending::OwnerGone(Gone::Exited) => (
                Some(Record::OwnerDead {
                    reason: "exited".into(),
                }),
                "owner exited",
            ),
            Ending::OwnerGone(Gone::GoneAtStart) => (
                Some(Record::OwnerDead {
                    reason: "gone when the watch began".into(),
                }),
                "owner was already gone",
            ),
        };
        if let Some(r) = record {
            self.journal_append(&r);
        }
        self.journal_append(&Record::ReclaimStart);
        let report = self.reclaim(control).await;
        let state = match (&ending, report.is_clean()) {
            (_, false) => SessionState::Pending,
            (Ending::Bye, true) => SessionState::Clean,
            (_, true) => SessionState::Reclaimed,
        };
        self.journal_report(&report);
        self.journal_append(&Record::End { state });
        eprintln!(
            "sandguard: session {}: {label}; {} ({})",
            self.session,
            describe(state),
            report.summary()
        );
        Outcome {
            ending,
            state,
            report: Some(report),
        }
    }

    async fn reclaim<R: AsyncRead + Unpin>(&mut self, control: Option<LineReader<R>>) -> Report {
        let plan = Plan {
            selector: crate::labels::Selector::session(&self.session),
            claims: self.claims.iter().map(claimed).collect(),
            keep: self
                .detached
                .iter()
                .map(|t| {
                    let s = claimed(t);
                    (s.provider, s.id)
                })
                .collect::<HashSet<_>>(),
            spare_detached: true,
        };
        let settle = self.options.settle.unwrap_or(Duration::ZERO);
        let late = drain_claims(control, settle);
        reclaim::reclaim(&self.providers, &plan, late, &self.options).await
    }

    fn journal_report(&mut self, report: &Report) {
        for record in report_records(report) {
            self.journal_append(&record);
        }
    }
}

/// The ledger records of a reclaim's outcomes: one per sandbox, and one `failed` with the id
/// `*` per provider that could not be listed (the whole provider is pending).
pub(crate) fn report_records(report: &Report) -> Vec<Record> {
    let removals = report.removals.iter().map(|r| {
        let (provider, id) = (r.sandbox.provider.clone(), r.sandbox.id.clone());
        match r.outcome.error() {
            None => Record::Removed {
                provider,
                id,
                outcome: r.outcome.as_str().to_string(),
            },
            Some(e) => Record::Failed {
                provider,
                id,
                error: e.to_string(),
                pending: true,
            },
        }
    });
    let failures = report.list_failures.iter().map(|f| Record::Failed {
        provider: f.provider.clone(),
        id: "*".into(),
        error: f.error.clone(),
        pending: true,
    });
    removals.chain(failures).collect()
}

fn describe(state: SessionState) -> &'static str {
    match state {
        SessionState::Pending => "some sandboxes could not be removed and may still be running; `sandguard sweep` will retry",
        SessionState::Clean => "ended clean",
        _ => "reclaimed",
    }
}

/// A claimed sandbox as a reclaim target: claims carry no labels, only provider and id (and,
/// for Docker networks and volumes, a kind prefix: [`crate::providers::docker::claimed_kind`]).
pub(crate) fn claimed(t: &Target) -> Sandbox {
    let (kind, id) = match t.provider.as_str() {
        "docker" => crate::providers::docker::claimed_kind(&t.id),
        _ => (Kind::Instance, t.id.as_str()),
    };
    Sandbox {
        provider: t.provider.clone(),
        kind,
        id: id.to_string(),
        status: "claimed".into(),
        created_at: None,
        image: None,
        labels: Default::default(),
    }
}

async fn next_line<R: AsyncRead + Unpin>(
    control: &mut Option<LineReader<R>>,
) -> Option<Result<Command, crate::protocol::ProtocolError>> {
    match control {
        Some(reader) => reader.next().await,
        None => std::future::pending().await,
    }
}

async fn next_claim(
    proxy: &mut Option<tokio::sync::mpsc::UnboundedReceiver<proxy::Claim>>,
) -> Option<proxy::Claim> {
    match proxy {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Claims still in the pipe when the owner died (or that a surviving child of the owner
/// writes while the first pass runs), read for at most `settle`.
async fn drain_claims<R: AsyncRead + Unpin>(
    control: Option<LineReader<R>>,
    settle: Duration,
) -> Vec<Sandbox> {
    let Some(mut reader) = control else {
        return Vec::new();
    };
    let mut late = Vec::new();
    let deadline = tokio::time::sleep(settle);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => break,
            line = reader.next() => match line {
                Some(Ok(Command::Claim(t))) => late.push(claimed(&t)),
                Some(_) => {}
                None => break,
            }
        }
    }
    late
}

#[cfg(test)]
mod tests;
