//! The sidecar as a library service: everything that runs beside the watch loop, owned.
//!
//! [`run`] starts, in one [`JoinSet`], the tasks a sidecar needs besides its loop: the
//! provider warm-up ([`WARM_UP_DELAY`] after start) and then the following of the session's
//! sandboxes ([`Provider::follow`], which also tells what goes by itself: `super::gone`), the TTL keeper ([`super::ttl`], only when
//! a provider has a server-side lifetime), the Docker API proxy and the cloud API proxies (when
//! asked for). It then
//! runs the loop ([`Sidecar::run`]) and, whatever the outcome, shuts every task down and waits
//! for them before returning: no task outlives the session, none is left unowned.
//!
//! A resumed session's sidecar starts holding what its journal says the session held
//! ([`SidecarService::held`], [`Sidecar::seed`]) before any task runs, so the TTL keeper renews it, the
//! fleet registrar registers it, and the reclaim includes it.
//!
//! With a fleet store, the fleet registrar ([`super::fleet`]) is one more task of the set: it
//! registers at once, renews through the reclaim (it is shut down only after the loop has
//! reclaimed), and the session's figures and end are written to the store last.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio::task::JoinSet;

use super::fleet::{Registrar, Registration};
use super::lease::{BootClock, Lease};
use super::ttl::Keeper;
use super::{ByeReport, EndReport, Ended, Notice, Sidecar, Triggers};
use crate::ledger::Journal;
use crate::providers::Provider;
use crate::proxy::cloud::CloudProxy;
use crate::proxy::docker::Proxy;
use crate::reclaim::Options;

/// How long after start the sidecar connects to the providers that want it
/// ([`Provider::warm_up`]: Docker, whose first call negotiates the API version): the guarded
/// program is starting on the same cores right now, and one that dies within this delay only
/// pays one cold connection on reclaim. Cloud providers build their clients (TLS roots,
/// HTTP/2 and gRPC stacks) at their first real call instead: a sidecar whose owner never dies
/// never pays for them.
pub(crate) const WARM_UP_DELAY: Duration = Duration::from_millis(100);

/// How long after the warm-up the start-up pages are handed back: the event subscriptions
/// ([`Provider::follow`]) are made by then, so the pages they touched go too.
const FOLLOW_SETTLE: Duration = Duration::from_millis(50);

/// What a sidecar service watches with, once it has said `ready` ([`super::start`] builds it
/// from a [`super::start::StartPlan`]; named apart from [`crate::reclaim::Plan`], what one
/// reclaim is after).
pub(crate) struct SidecarService {
    pub session: String,
    pub journal: Journal,
    pub providers: Vec<Arc<dyn Provider>>,
    /// The lease grace once heartbeats start.
    pub grace: Duration,
    /// When the session began (its `start` record), where it could be read: following that
    /// saw everything since is whole ([`crate::providers::Following::whole`]).
    pub began_ms: Option<u64>,
    /// How long after start the providers are warmed up and followed: [`WARM_UP_DELAY`]; the
    /// model test (whose sessions live milliseconds) follows at once, so that its reclaims
    /// take the path that trusts following.
    pub warm_up: Duration,
    /// How often server-side TTLs are renewed (`0`: never).
    pub renew_every: Duration,
    /// How often the limit keeper's rounds run, where it has one: `None` by its limits
    /// ([`super::limits`]); the model test, whose sessions live milliseconds, sets a few
    /// milliseconds so that the keeper runs at random points of its histories.
    pub limit_rounds: Option<Duration>,
    pub options: Options,
    /// The Docker API proxy to serve, already bound (its claims come in through
    /// [`Triggers::proxy`]).
    pub proxy: Option<Proxy>,
    /// The cloud API proxies to serve, already bound (their claims come in through
    /// [`Triggers::proxy`] too).
    pub cloud: Vec<CloudProxy>,
    /// The fleet store to register in, when one is configured.
    pub fleet: Option<Registration>,
    /// What the session already holds: empty for a new session, its journal's holdings for
    /// a resumed one ([`Sidecar::seed`]).
    pub held: super::ttl::Holdings,
    /// The session's limits on creates through the proxies, and the slots its journal
    /// already took (a resumed session's): [`Sidecar::limit`].
    pub budget: (
        crate::budget::Budget,
        crate::budget::Slots,
        crate::budget::Meter,
    ),
    /// Told how the reclaim after `bye` went, before the settle pass ([`Sidecar::on_bye`]).
    pub bye_report: Option<ByeReport>,
    /// Told how the first reclaim pass at the end went ([`Sidecar::on_end`]).
    pub end_report: Option<EndReport>,
    /// Told each line for the terminal while the owner lives ([`Sidecar::on_notice`]).
    pub notice: Option<Notice>,
    /// `[notify]`: limits hit and a reclaim that left something pending
    /// ([`super::notify`]); started only at the first event.
    pub notify: crate::notify::Lazy,
}

/// Runs one session's sidecar to its end; see the module docs.
pub(crate) async fn run<R: AsyncRead + Unpin>(
    service: SidecarService,
    triggers: Triggers<R>,
) -> Ended {
    let mut sidecar = Sidecar::new(
        service.session.clone(),
        service.providers.clone(),
        service.journal,
        Lease::new(BootClock, service.grace),
        service.options,
    );
    let mut tasks = JoinSet::new();
    let warm = service.providers.clone();
    let followed = service.session.clone();
    let began_ms = service.began_ms;
    let warm_up = service.warm_up;
    let gone = sidecar.gone_to();
    tasks.spawn(async move {
        tokio::time::sleep(warm_up).await;
        for p in warm.iter().filter(|p| p.warm_up()) {
            if let Err(e) = p.check().await {
                tracing::warn!("provider {} is not reachable yet: {e}", p.name());
            }
        }
        // Then the session's sandboxes are followed as they come and go, so the reclaim
        // knows them before the owner dies, and what goes by itself is released at once
        // ([`Provider::follow`]: Docker's event stream).
        let follow = futures_util::future::join_all(
            warm.iter()
                .map(|p| p.follow(&followed, began_ms, gone.clone())),
        );
        let settle = async {
            // Start-up is over once the subscriptions are made: what it touched of the
            // program and nothing more stays resident (an idle stream touches nothing).
            tokio::time::sleep(FOLLOW_SETTLE).await;
            let released = crate::unix::release_startup_pages();
            tracing::debug!("released {} KiB of start-up pages", released / 1024);
        };
        tokio::join!(follow, settle);
    });
    if let Some(proxy) = service.proxy {
        tasks.spawn(proxy.run());
    }
    for proxy in service.cloud {
        tasks.spawn(proxy.run());
    }
    if let Some(report) = service.bye_report {
        sidecar.on_bye(report);
    }
    if let Some(report) = service.end_report {
        sidecar.on_end(report);
    }
    sidecar.seed(service.held);
    let (budget, slots, meter) = service.budget;
    let ttl_limits = budget.clone();
    sidecar.limit(budget, slots);
    sidecar.metered(meter);
    if let Some(notice) = service.notice {
        sidecar.on_notice(notice);
    }
    sidecar.notify_to(service.notify);
    if let Some(keeper) = sidecar.limit_keeper() {
        let keeper = match service.limit_rounds {
            Some(every) => keeper.every(every),
            None => keeper,
        };
        tasks.spawn(keeper.run());
    }
    let keeper = Keeper::new(
        &service.providers,
        &service.session,
        service.grace,
        service.renew_every,
        sidecar.holdings(),
        sidecar.link(),
    );
    if let Some(keeper) = keeper.map(|k| k.capped(ttl_limits)) {
        tasks.spawn(keeper.run());
    }
    let fleet = service.fleet.map(|fleet| {
        let last = fleet.last();
        let registrar = Registrar::new(fleet, sidecar.holdings(), sidecar.changes());
        tasks.spawn(registrar.run());
        last
    });
    let outcome = sidecar.run(triggers).await;
    tasks.shutdown().await;
    if let Some(last) = fleet {
        last.write(super::fleet::end_state(outcome.cause, outcome.state))
            .await;
    }
    outcome
}
