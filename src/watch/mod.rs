//! The sidecar: watches one owner and reclaims its sandboxes the moment it is gone.
//!
//! The loop waits on events only, each arm delegating to a named method:
//! - the control pipe (claims, releases, detaches, heartbeats, `bye`), read line by line;
//!   EOF is a *wake-up*, not a verdict: the owner's identity is checked, and a program that
//!   merely closed its descriptors is watched on;
//! - claims from the Docker API proxy ([`crate::proxy::docker`]), applied exactly like a `claim` line and
//!   acknowledged once journaled;
//! - the owner's death ([`crate::identity::death::OwnerWatch`]: a pidfd, `/proc` polling only as fallback);
//! - the lease ([`lease::Lease`]), armed only once heartbeats start;
//! - a stop request (SIGTERM to the sidecar). Being told to stop says nothing about the
//!   owner, but systemd and `kill -TERM` of a process group stop the owner at the same moment:
//!   so the sidecar gives the owner [`STOP_WINDOW`] to die. An owner that dies (or is dead
//!   already) is reclaimed as any death is; only an owner still alive after the window means
//!   "stop without reclaiming" (the session stays active, its lock released, and the next
//!   `sandguard sweep` judges the owner).
//!
//! Every trigger is injected ([`Triggers`]), so tests drive the loop with a fake pipe, fake
//! providers, a manual clock and paused tokio time.
//!
//! Claims and detaches are checked when they arrive: one for a provider that is not
//! configured, or with an id that cannot name a sandbox of that provider (a Docker container
//! *name*), is journaled `refused` (final, reported once), never as a claim. A detach of what
//! the session does not own (never claimed, not carrying its label) is logged as refused and
//! journaled not at all ([`crate::ownership::detach`] says why). Lines that are
//! already in the pipe are applied together and made durable with one `fdatasync` (a program
//! claiming 100 000 sandboxes does not pay 100 000 syncs); nothing is acknowledged before
//! it is on disk. Each claim costs O(log n). The claims and detaches are kept once, in the
//! holdings the loop changes in place ([`ttl::SharedHoldings`]); the TTL keeper reads them
//! when it renews, the fleet registrar when poked, and the ending plans from them.
//!
//! When the owner dies or its lease expires: one journaled session ending
//! ([`crate::reclaim::ending`]): claims ∪ the session's labels, minus detached sandboxes.
//! Claims still arriving in the pipe while it runs (drained for the settle delay) are
//! journaled as they arrive and removed by the second pass. `bye` reclaims what is still
//! owned at once and ends the session `clean`.
//!
//! After `bye`, the first pass's outcome ([`ByeOutcome`]: clean, or what was left) is handed to
//! [`Sidecar::on_bye`] (the CLI writes it on the sidecar's stdout and closes it) before the
//! settle delay: the owner waits for that line, not for the settle pass. What the settle pass
//! finds is reclaimed, journaled and logged, and not reported to the owner, which has gone.

mod arrival;
pub(crate) mod daemon;
mod end;
pub(crate) mod fleet;
mod gone;
pub(crate) mod lease;
pub(crate) mod limits;
mod notify;
mod refusals;
pub(crate) mod service;
pub(crate) mod start;
mod triggers;
pub(crate) mod ttl;

use arrival::Listings;
pub(crate) use triggers::Triggers;
use triggers::{next_claim, next_line};

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::io::AsyncRead;

use crate::budget::{Budget, Slots};
use crate::ledger::{EndCause, Journal, Record, SessionState};
use crate::ownership::known;
use crate::protocol::{ByeOutcome, Command, ProtocolError, Target};
use crate::providers::Provider;
use crate::reclaim::{Options, Report};

use lease::{Clock, Lease};

/// How long a SIGTERMed sidecar waits for its owner to die before it stops without
/// reclaiming: `systemctl stop` and `kill -TERM -PGID` signal both at once.
pub(crate) const STOP_WINDOW: Duration = Duration::from_secs(2);

/// The most control lines applied under one `fdatasync`.
const BATCH: usize = 1024;

/// How long a claim waits for its provider's listing (the labels it is judged by) before the
/// sidecar takes it on the claim rule alone and leaves the labels to the reclaim's judgement.
pub(crate) const CLAIM_LOOKUP: Duration = Duration::from_secs(2);

/// How the session stands when the sidecar is done (named apart from [`crate::reclaim::Outcome`],
/// what became of one sandbox).
#[derive(Debug, Clone)]
pub(crate) struct Ended {
    /// Why the watch ended the session (the owner gone, its lease expired, `bye`); `None`:
    /// the sidecar was told to stop (SIGTERM) while its owner lived, and nothing was
    /// reclaimed (the session stays active for a sweep to judge).
    pub cause: Option<EndCause>,
    pub state: SessionState,
}

/// Told the first pass's outcome after `bye` ([`Sidecar::on_bye`]).
pub(crate) type ByeReport = Box<dyn FnOnce(&ByeOutcome) + Send>;

/// Told the first reclaim pass's report at the session's end, whatever ended it (never when
/// the sidecar was stopped: nothing is reclaimed then); [`Sidecar::on_end`].
pub(crate) type EndReport = Box<dyn FnOnce(&Report) + Send>;

/// One session's sidecar.
pub(crate) struct Sidecar<C> {
    pub session: String,
    pub providers: Vec<Arc<dyn Provider>>,
    journal: Journal,
    pub lease: Lease<C>,
    pub options: Options,
    malformed: u64,
    /// The owner's claims and detached sandboxes: the one set, which the loop changes in place
    /// and the TTL keeper and the fleet registrar read (never a copy kept in step). The lock is
    /// held only for a change or a read, never across an await.
    holdings: ttl::SharedHoldings,
    /// Poked on every change of the holdings, when a fleet registrar mirrors them.
    changed: Option<Arc<tokio::sync::Notify>>,
    /// Told how `bye`'s reclaim went, before the settle pass.
    bye_report: Option<ByeReport>,
    /// Told how the end's first reclaim pass went, before the settle pass.
    end_report: Option<EndReport>,
    /// Stops the TTL keeper the moment the watch ends, before the reclaim.
    halting: ttl::Halting,
    /// Where every judge of this sidecar gets its facts (claims as they arrive, the keepers'
    /// rounds, the reclaim): the ledger, other sessions' journals read again only when they
    /// changed ([`known::Source`]).
    facts: known::Source,
    /// The session's limits, and the create slots they were decided by (`crate::budget`):
    /// none until [`Sidecar::limit`].
    budget: (Budget, Slots),
    /// What the limit keeper removed, to journal and tell ([`Sidecar::limit_keeper`]).
    aged: Option<tokio::sync::mpsc::UnboundedReceiver<limits::Aged>>,
    /// Told a line for the terminal while the owner lives (a limit's removal).
    notice: Option<Notice>,
    /// What the limits observed on claims ([`Sidecar::observe`]).
    observed: arrival::Observed,
    /// The sandbox time the session used ([`crate::budget::Meter`]), kept as its holdings
    /// change; with a `spend` limit, the loop says when it is reached ([`Sidecar::on_spent`]).
    meter: crate::budget::Meter,
    /// Told each spend limit reached, when reaching it reclaims (the limit keeper).
    spent: Option<tokio::sync::watch::Sender<std::collections::BTreeSet<Option<String>>>>,
    /// The spend limits reached (and said): the session's (`None`) and providers'.
    spent_told: std::collections::BTreeSet<Option<String>>,
    /// Whether each target counted by a limit names a sandbox ([`Sidecar::is_sandbox`]),
    /// parsed once; targets are only added, as claims are (a released one stays, a few bytes).
    kinds: std::sync::Mutex<std::collections::HashMap<Target, bool>>,
    /// `[notify]`, started at its first event ([`notify`]).
    notify: crate::notify::Lazy,
    /// What the providers (their events) and the keepers (their look-ups) say went by itself
    /// ([`gone`]): the sender is handed to them, the loop releases what it receives.
    gone: (
        crate::providers::GoneTx,
        tokio::sync::mpsc::UnboundedReceiver<crate::providers::Gone>,
    ),
    /// The limits told to `[notify]` already, by key: once each per session.
    limits_told: std::collections::BTreeSet<String>,
    /// The latest refused create of each provider and limit not journaled yet ([`refusals`]).
    unjournaled: refusals::Unjournaled,
}

/// Told a line (without `sandguard: `) for whoever started the session, while it runs.
pub(crate) type Notice = Box<dyn Fn(&str) + Send>;

/// What a keeper beside the loop (TTL, limits) takes from its sidecar ([`Sidecar::link`]):
/// what stops it before the reclaim, where its rounds' facts come from (the same as every
/// judge of the sidecar's), and where it tells what its look-ups found gone ([`gone`]).
#[derive(Clone)]
pub(crate) struct Link {
    pub halt: ttl::Halt,
    pub facts: known::Source,
    pub gone: crate::providers::GoneTx,
}

impl<C: Clock> Sidecar<C> {
    pub(crate) fn new(
        session: String,
        providers: Vec<Arc<dyn Provider>>,
        journal: Journal,
        lease: Lease<C>,
        options: Options,
    ) -> Self {
        let facts = known::Source::new(state_root(&journal), &session, &providers);
        Sidecar {
            session,
            providers,
            journal,
            lease,
            options,
            malformed: 0,
            holdings: ttl::SharedHoldings::default(),
            changed: None,
            bye_report: None,
            end_report: None,
            halting: ttl::Halting::default(),
            facts,
            budget: Default::default(),
            aged: None,
            notice: None,
            observed: Default::default(),
            meter: Default::default(),
            spent: None,
            spent_told: Default::default(),
            kinds: Default::default(),
            notify: crate::notify::Lazy::none(),
            limits_told: Default::default(),
            unjournaled: Default::default(),
            gone: tokio::sync::mpsc::unbounded_channel(),
        }
    }

    /// Where a provider's following, or a keeper, tells what went by itself ([`gone`]).
    pub(crate) fn gone_to(&self) -> crate::providers::GoneTx {
        self.gone.0.clone()
    }

    /// Where events go (`[notify]`); nothing is started until there is one.
    pub(crate) fn notify_to(&mut self, notify: crate::notify::Lazy) {
        self.notify = notify;
    }

    /// What stops a TTL keeper the moment the watch ends, before anything is reclaimed.
    pub(crate) fn halt(&self) -> ttl::Halt {
        self.halting.halt()
    }

    /// What a resumed session already holds (its journal's claims, pending work and detaches,
    /// [`crate::ledger::StateDir::resume_session`]): guarded from now on exactly as if this
    /// sidecar had been told of them, its reclaim included. Call it before [`Sidecar::run`].
    pub(crate) fn seed(&mut self, held: ttl::Holdings) {
        if held.claims.is_empty() && held.detached.is_empty() {
            return;
        }
        // Shared at once: the TTL keeper renews them and the fleet registrar registers them.
        let mut h = self.held();
        h.claims.extend(held.claims);
        h.detached.extend(held.detached);
    }

    /// The session's limits, and the slots its journal already took (a resumed session's,
    /// [`crate::ledger::SessionView::slots`]). Call it before [`Sidecar::run`].
    pub(crate) fn limit(&mut self, budget: impl Into<Budget>, slots: Slots) {
        self.budget = (budget.into(), slots);
    }

    /// The keeper of the session's limits that remove (`lifetime`, `spend` with `on_spend =
    /// "reclaim"`), if it has one (call it after [`Sidecar::limit`]; what it removes reaches
    /// the loop).
    pub(crate) fn limit_keeper(&mut self) -> Option<limits::Keeper> {
        let budget = self.budget.0.clone();
        let spent = (budget.reclaims() && budget.spends().next().is_some()).then(|| {
            let (tx, rx) = tokio::sync::watch::channel(Default::default());
            self.spent = Some(tx);
            rx
        });
        if !budget.ages() && spent.is_none() {
            return None;
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.aged = Some(rx);
        Some(limits::Keeper::new(
            &self.providers,
            &self.session,
            (budget, spent),
            self.holdings(),
            self.link(),
            tx,
        ))
    }

    /// The sandbox time a resumed session's journal told ([`crate::budget::Meter::resumed`]).
    pub(crate) fn metered(&mut self, meter: crate::budget::Meter) {
        self.meter = meter;
    }

    /// `notice` is told each line for the terminal while the owner lives.
    pub(crate) fn on_notice(&mut self, notice: Notice) {
        self.notice = Some(notice);
    }

    /// The owner's claims and detached sandboxes, shared with a TTL keeper from now on.
    pub(crate) fn holdings(&self) -> ttl::SharedHoldings {
        self.holdings.clone()
    }

    /// Whether the owner holds `t`, claimed or detached.
    fn holds(&self, t: &Target) -> bool {
        let h = self.held();
        h.claims.contains(t) || h.detached.contains(t)
    }

    /// The holdings, locked for one read or change.
    fn held(&self) -> std::sync::MutexGuard<'_, ttl::Holdings> {
        self.holdings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A [`tokio::sync::Notify`] poked whenever the holdings change (for the fleet registrar).
    pub(crate) fn changes(&mut self) -> Arc<tokio::sync::Notify> {
        self.changed.get_or_insert_with(Default::default).clone()
    }

    /// `report` is told how the reclaim after `bye` went (its first pass), once.
    pub(crate) fn on_bye(&mut self, report: ByeReport) {
        self.bye_report = Some(report);
    }

    /// `report` is told how the first reclaim pass at the end went, whatever ended the
    /// session, once (the wrapper's line on the terminal).
    pub(crate) fn on_end(&mut self, report: EndReport) {
        self.end_report = Some(report);
    }

    /// Watches until the owner is gone (or says `bye`, or the sidecar is stopped), then
    /// reclaims as its cause requires.
    pub(crate) async fn run<R: AsyncRead + Unpin>(mut self, mut triggers: Triggers<R>) -> Ended {
        let names = self
            .providers
            .iter()
            .map(|p| p.name().to_string())
            .collect();
        self.write(&Record::Providers { names });
        self.sync();
        let cause = self.watch(&mut triggers).await;
        // Nothing is renewed after this point: the TTL keeper stops before the reclaim starts.
        self.halting.stop().await;
        // A proxy still serving during the reclaim gets no acknowledgement, not a hang; what
        // it creates now carries the labels, and the settle pass finds it.
        drop(triggers.proxy.take());
        let exit = triggers
            .exit
            .take()
            .filter(|_| cause == Some(EndCause::OwnerExited));
        self.finish(cause, triggers.control, exit).await
    }

    /// Waits for the session's end: its cause, or `None` when the sidecar is stopped while
    /// its owner lives.
    async fn watch<R: AsyncRead + Unpin>(&mut self, t: &mut Triggers<R>) -> Option<EndCause> {
        loop {
            let check_in = self.lease.next_check();
            let spend_in = self.spend_in();
            tokio::select! {
                biased;
                _ = &mut t.stop => return self.on_stop(t).await,
                // Proxy claims first: a client is waiting for each (its answer is held until
                // the claim is on disk), and a flood of control lines must not starve them.
                // Each costs the client a round trip to the daemon, so they cannot flood.
                claim = next_claim(&mut t.proxy), if t.proxy.is_some() => {
                    self.on_proxy_ask(claim, t).await;
                }
                // Control lines before the death event: a claim written just before the owner
                // died is in the pipe already and must be known before reclaiming.
                line = next_line(&mut t.control), if t.control.is_some() => {
                    if let Some(bye) = self.on_lines(line, t).await {
                        return Some(bye);
                    }
                }
                gone = &mut t.owner => return Some(gone.into()),
                // The sender is held here too: never closed while the loop runs.
                Some(went) = self.gone.1.recv() => self.on_gone(went),
                aged = triggers::next_aged(&mut self.aged), if self.aged.is_some() => {
                    self.on_aged(aged);
                }
                _ = tokio::time::sleep(spend_in.unwrap_or_default()), if spend_in.is_some() => {
                    self.on_spent();
                }
                _ = tokio::time::sleep(check_in), if self.lease.is_running() => {
                    if self.lease.check_expired() {
                        return Some(EndCause::LeaseExpired);
                    }
                }
            }
        }
    }

    /// SIGTERM: a dead or dying owner still means reclaim; only a live one means stop
    /// (`None`).
    async fn on_stop<R>(&mut self, t: &mut Triggers<R>) -> Option<EndCause> {
        match tokio::time::timeout(STOP_WINDOW, &mut t.owner).await {
            Ok(gone) => {
                tracing::info!("stopped while the owner died: reclaiming");
                Some(gone.into())
            }
            Err(_) => None,
        }
    }

    /// One line, and every further line already in the pipe, applied under one sync;
    /// [`EndCause::Bye`] when one was `bye`.
    async fn on_lines<R: AsyncRead + Unpin>(
        &mut self,
        first: Option<Result<Command, ProtocolError>>,
        t: &mut Triggers<R>,
    ) -> Option<EndCause> {
        let mut bye = None;
        let mut line = first;
        // Other sessions' claims and the providers' labels, read (once for the batch) only if
        // a claim comes; a journal that did not change since the last batch is not read again.
        let known = self.facts.known();
        let mut listed = Listings::default();
        let mut claimed = 0;
        for _ in 0..BATCH {
            match line {
                // A claim, or a detach (the owner's "mine, keep it"), of what another session
                // that may live holds would take it from that session: refused.
                // Pinned first (an id that is a name, to the object it names now), so that
                // whether another session holds it, or this one owns it, is judged of that
                // object (a detach too: a name taken again by a stranger is not ours to keep).
                Some(Ok(Command::Claim(c))) => {
                    if let Some(pinned) = self.pin(c).await {
                        if self.may_claim(&pinned, &known, &mut listed).await {
                            self.apply(Command::Claim(pinned));
                            claimed += 1;
                        }
                    }
                }
                Some(Ok(Command::Detach(c))) => {
                    if let Some(pinned) = self.pin(c).await {
                        if self.may_claim(&pinned, &known, &mut listed).await
                            && self.owns(&pinned, &mut listed).await
                        {
                            self.detach(pinned).await;
                        }
                    }
                }
                Some(Ok(command)) => {
                    if let Some(e) = self.apply(command) {
                        bye.get_or_insert(e);
                    }
                }
                Some(Err(e)) => {
                    self.malformed += 1;
                    tracing::warn!("ignored control line ({} so far): {e}", self.malformed);
                }
                None => {
                    t.control = None;
                    // EOF is a wake-up, not a verdict: the owner's death source decides (it
                    // fires at once if the owner is gone). A closed pipe while the owner lives
                    // (a program that closes all its descriptors) changes nothing.
                    tracing::info!("control pipe closed; watching the owner's process");
                    break;
                }
            }
            let Some(reader) = t.control.as_mut() else {
                break;
            };
            match reader.next().now_or_never() {
                Some(next) => line = next,
                None => break,
            }
        }
        self.sync();
        if claimed > 0 && self.budget.0.session.any() {
            self.observe(claimed);
        }
        bye
    }

    /// Applies one command: journaled (not yet synced) and remembered; [`EndCause::Bye`] for
    /// `bye`.
    fn apply(&mut self, command: Command) -> Option<EndCause> {
        self.apply_sized(command, None)
    }

    /// [`Sidecar::apply`], a claim or detach journaled with the `size` its create named (a
    /// proxy's, `crate::ledger::price`).
    fn apply_sized(&mut self, command: Command, size: Option<String>) -> Option<EndCause> {
        match command {
            Command::Claim(t) => {
                if self.accept(&t) {
                    self.meter_held(&t, size.as_deref());
                    self.write(&Record::claim_sized(&t, size));
                    self.share(|h| {
                        h.detached.remove(&t);
                        h.claims.insert(t);
                    });
                }
            }
            Command::Release(t) => {
                if self.accept(&t) {
                    self.write(&Record::release(&t));
                    if self.budget.0.spends().next().is_some() {
                        self.meter.ended(|c| c.answers(&t), crate::ledger::now_ms());
                    }
                    self.share(|h| h.claims.retain(|c| !c.answers(&t)));
                }
            }
            Command::Detach(t) => {
                if self.accept(&t) {
                    self.meter_held(&t, size.as_deref());
                    self.write(&Record::detach_sized(&t, size));
                    self.share(|h| {
                        h.claims.retain(|c| !c.answers(&t));
                        h.detached.insert(t);
                    });
                }
            }
            Command::Renew => {
                if !self.lease.renew() {
                    tracing::warn!("heartbeat after the lease expired: ignored");
                }
            }
            Command::Bye => return Some(EndCause::Bye),
        }
        None
    }

    /// A sandbox the limit keeper removed: journaled with its cause and synced, no longer
    /// held, and told.
    fn on_aged(&mut self, aged: Option<limits::Aged>) {
        let Some(aged) = aged else {
            self.aged = None;
            return;
        };
        let limits::Aged {
            target,
            gone,
            at_ms,
            age,
            limit,
        } = aged;
        let (kind, limit) = limit;
        self.write(&Record::Removed {
            provider: target.provider.clone(),
            id: target.id.clone(),
            outcome: if gone { "gone" } else { "removed" }.into(),
            at: Some(at_ms),
            limit: Some(kind),
        });
        self.sync();
        self.share(|h| h.claims.retain(|c| !c.answers(&target)));
        self.meter
            .ended(|c| c.answers(&target) || *c == target, at_ms);
        let why = match kind {
            crate::budget::Limit::Lifetime => format!(
                "{} old, past the lifetime limit ({limit})",
                crate::timefmt::format_span(age),
            ),
            crate::budget::Limit::Spend => {
                format!("the session's spend reached its limit ({limit})")
            }
        };
        let line = format!(
            "removed {} sandbox {}: {why}; the program runs on",
            target.provider,
            crate::protocol::echo(target.id.as_bytes()),
        );
        tracing::info!("{line}");
        let key = match kind {
            crate::budget::Limit::Lifetime => "lifetime",
            crate::budget::Limit::Spend => "spend",
        };
        self.tell_limit(key, None, &line);
        if !gone {
            if let Some(notice) = &self.notice {
                notice(&line);
            }
        }
    }

    /// `t` is held from now, for the spend limit's meter (a sandbox only, and only with a
    /// spend limit: without one nothing reads the meter).
    fn meter_held(&mut self, t: &Target, size: Option<&str>) {
        if self.budget.0.spends().next().is_some() && self.is_sandbox(t) {
            let per_hour = self.budget.0.prices.per_hour(&t.provider, size);
            self.meter.held(t, crate::ledger::now_ms(), per_hour);
        }
    }

    /// How long until the sandbox time reaches the `spend` limit, if there is one and it is
    /// not reached yet, and something runs.
    fn spend_in(&self) -> Option<Duration> {
        let now = crate::ledger::now_ms();
        self.budget
            .0
            .spends()
            .filter(|(scope, _)| !self.spent_told.contains(&scope.map(str::to_string)))
            .filter_map(|(scope, limit)| self.meter.reached_in(limit, scope, now))
            .min()
    }

    /// The spend limit reached: said once (log and terminal); creates are refused from here
    /// ([`crate::budget::Slots::take`]), and with `on_spend = "reclaim"` the limit keeper
    /// removes what the session holds.
    fn on_spent(&mut self) {
        let now = crate::ledger::now_ms();
        let reached: Vec<(Option<String>, crate::budget::Spend)> = self
            .budget
            .0
            .spends()
            .filter(|(scope, limit)| self.meter.used(*limit, *scope, now).reached(*limit))
            .map(|(scope, limit)| (scope.map(str::to_string), limit))
            .filter(|(scope, _)| !self.spent_told.contains(scope))
            .collect();
        for (scope, limit) in reached {
            self.spent_told.insert(scope.clone());
            let (whose, then) = match (&scope, &self.spent) {
                (None, Some(_)) => (String::new(), "every sandbox it holds is removed"),
                (Some(p), Some(_)) => (format!(" for {p}"), "its sandboxes there are removed"),
                (_, None) => (String::new(), "new creates are refused; what runs, runs on"),
            };
            let key = match &scope {
                None => "spend".to_string(),
                Some(p) => format!("providers.{p}.limits.spend"),
            };
            let line =
                format!("this session's spend{whose} reached its limit `{key}` ({limit}): {then}");
            tracing::warn!("{line}");
            self.tell_limit(&key, scope.as_deref(), &line);
            if let Some(notice) = &self.notice {
                notice(&line);
            }
            if let Some(spent) = &self.spent {
                spent.send_modify(|s| {
                    s.insert(scope);
                });
            }
        }
    }

    /// What a keeper takes from this sidecar ([`Link`]).
    pub(crate) fn link(&self) -> Link {
        Link {
            halt: self.halt(),
            facts: self.facts.clone(),
            gone: self.gone_to(),
        }
    }

    fn share(&self, change: impl FnOnce(&mut ttl::Holdings)) {
        change(&mut self.held());
        if let Some(n) = &self.changed {
            n.notify_one();
        }
    }

    /// Journal failures are logged, not fatal: the sidecar still holds the claim in memory
    /// and will reclaim it; only a crash of the sidecar itself could then lose it.
    fn write(&mut self, record: &Record) {
        if let Err(e) = self.journal.write(record) {
            tracing::error!("session {}: {e}", self.session);
        }
    }

    fn sync(&mut self) {
        if let Err(e) = self.journal.sync() {
            tracing::error!("session {}: {e}", self.session);
        }
    }
}

/// The state directory `journal` is in.
fn state_root(journal: &Journal) -> Option<std::path::PathBuf> {
    let root = journal.path().parent().and_then(|p| p.parent())?;
    Some(root.to_path_buf())
}

#[cfg(test)]
mod tests;
