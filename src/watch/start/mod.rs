//! How a sidecar begins, up to its `ready` line: [`start`] takes a [`StartPlan`] (what the
//! command line asked for, already parsed) and returns a [`Started`] sidecar whose session is
//! on disk, or a [`StartError`]. The CLI (`cli/watch.rs`) only daemonizes, turns its arguments
//! into the plan, prints the ready or error line, and runs what it got.
//!
//! In order:
//! 1. judge the owner's identity (a pid that is gone, or whose start time differs, is an owner
//!    already gone: the session still begins, and reclaims at once);
//! 2. create the session's journal, its `start` record fsynced and its lock held, or resume a
//!    session whose sidecar is gone ([`begin`]), or take the journal the wrapper created and
//!    make it durable (`StartPlan::handed`); from here a daemonized sidecar logs beside the journal;
//! 3. open the control pipe, the owner's death source and SIGTERM;
//! 4. bind the proxies ([`proxies`]), their warnings told to the caller, or serve the ones
//!    the wrapper bound;
//! 5. the fleet record to register, when a store is configured.
//!
//! **The journal is on disk before `ready`**: when [`start`] returns, the `start` record has
//! been fsynced, so nothing the program is told can be missed (tested below without the
//! binary). A failure after step 2 takes a new session's journal back ([`begin::Undo`]).

pub(crate) mod begin;
pub(crate) mod handoff;
pub(crate) mod proxies;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{service, ByeReport, EndReport, Ended, Triggers};
use crate::config::{ProxyMode, Settings};
use crate::identity::death::{Gone, OwnerWatch};
use crate::identity::Identity;
use crate::ledger::{Journal, LedgerError, SessionView};
use crate::protocol::LineReader;
use crate::providers::Registry;
use crate::proxy::docker::Ask;
use crate::reclaim::Options;
use crate::session::handoff::Handoff;
use crate::session::{self, SessionId};

/// Why a sidecar could not begin, as the CLI reports it: the configuration or the command
/// line (exit 2), or anything else (exit 1). Its text is the `error` line's. What [`start`]
/// itself can fail with is a [`Failure`], which says which of the two it is (`From`); the CLI
/// adds its own (daemonizing, its arguments, the ready line).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
}

/// The ways a sidecar's start (or the wrapper's handoff, `handoff::prepare`) fails.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// No random session id.
    #[error("cannot make a session id: {0}")]
    SessionId(std::io::Error),
    /// The state directory or the session's journal.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The session's journal is locked: another sidecar guards it.
    #[error(
        "session {session} is guarded by a live sidecar (or a sweep adopted it): its journal \
         {} is locked; a second sidecar is refused",
        journal.display()
    )]
    Guarded { session: String, journal: PathBuf },
    /// The control descriptor is not a pipe this process can read.
    #[error("control descriptor {fd} is not a readable pipe: {error}")]
    Control { fd: RawFd, error: std::io::Error },
    /// SIGTERM cannot be listened for.
    #[error("cannot listen for SIGTERM: {0}")]
    Sigterm(std::io::Error),
    /// The proxies asked for.
    #[error(transparent)]
    Proxy(#[from] proxies::ProxyError),
}

impl From<Failure> for StartError {
    /// Asking for the cloud proxy with no cloud provider configured is a usage error; every
    /// other failure is the start's own.
    fn from(e: Failure) -> StartError {
        match e {
            Failure::Proxy(proxies::ProxyError::NoCloud) => StartError::Usage(e.to_string()),
            e => StartError::Failed(e.to_string()),
        }
    }
}

/// What to start, as the command line asked.
#[derive(Debug)]
pub(crate) struct StartPlan {
    /// The process to guard, and its start time when pinned (`--owner-start`).
    pub owner_pid: u32,
    pub owner_start: Option<u64>,
    /// The session (`None`: a new random id).
    pub session: Option<SessionId>,
    /// The control pipe's read end, if any.
    pub control: Option<OwnedFd>,
    /// The lease's grace (`None`: the settings').
    pub grace: Option<Duration>,
    pub docker_proxy: ProxyMode,
    pub cloud_proxy: ProxyMode,
    /// Diagnostics go to `<session>.log` beside the journal once it exists (daemonized).
    pub log_beside_journal: bool,
    /// Someone hears the warnings: the Docker daemon is looked at even with its proxy off.
    pub heard: bool,
    /// What the wrapper made before it execed the program (`crate::session::handoff`): the
    /// session's journal, open, locked and written but not yet synced
    /// (`crate::ledger::StateDir::create_session_unsynced`), the owner's exit watch, and the
    /// listeners of the proxies it decided to serve (`proxies::bind`), the program already
    /// pointed at them. `None`: this sidecar makes them.
    pub handed: Option<Handoff<OwnedFd>>,
}

/// A sidecar whose session is on disk and whose proxies listen, not yet announced.
pub(crate) struct Started {
    /// The session id, for the `ready` line.
    pub session: String,
    /// What the program gets (`DOCKER_HOST`, `E2B_API_URL`, …), for the `ready` line.
    pub env: Vec<(String, String)>,
    plan: service::SidecarService,
    triggers: Triggers<tokio::net::unix::pipe::Receiver>,
    /// Kept until the end: the Docker proxy's socket directory is removed on drop.
    _socket_dir: Option<crate::proxy::docker::SocketDir>,
}

impl Started {
    /// `notice` is told each line for the terminal while the owner lives
    /// ([`super::Sidecar::on_notice`]).
    pub(crate) fn on_notice(&mut self, notice: super::Notice) {
        self.plan.notice = Some(notice);
    }

    /// Runs the session to its end; `bye` and `end` are told how the end's first reclaim pass
    /// went ([`super::Sidecar::on_bye`], [`super::Sidecar::on_end`]).
    pub(crate) async fn run(mut self, bye: Option<ByeReport>, end: Option<EndReport>) -> Ended {
        self.plan.bye_report = bye;
        self.plan.end_report = end;
        let outcome = service::run(self.plan, self.triggers).await;
        drop(self._socket_dir);
        outcome
    }
}

/// Begins the session `plan` asks for (see the module docs); `warn` hears each warning.
pub(crate) async fn start(
    settings: &Settings,
    mut plan: StartPlan,
    warn: &mut dyn FnMut(&str),
) -> Result<Started, StartError> {
    let owner = judge_owner(plan.owner_pid, plan.owner_start);
    let session = match plan.session.take() {
        Some(id) => id,
        None => SessionId::random().map_err(Failure::SessionId)?,
    }
    .to_string();
    let grace = plan.grace.unwrap_or(settings.watch.grace);
    let handed = plan.handed.take();
    let mut owner_exit = None;
    let (journal, resumed, bound) = match handed {
        // The program already runs with the session's labels: from here nothing is taken
        // back, whatever fails (a sweep finds the session and judges its owner).
        Some(handed) => {
            owner_exit = handed.owner_exit;
            let journal = std::fs::File::from(handed.journal);
            let journal = begin::take_handed(settings, &session, journal)?;
            let docker = handed
                .docker
                .map(|(fd, socket)| (std::os::unix::net::UnixListener::from(fd), socket));
            let cloud = handed
                .cloud
                .into_iter()
                .map(|(api, fd)| (api, std::net::TcpListener::from(fd)))
                .collect();
            let bound = proxies::Bound::handed(settings, docker, cloud).map_err(Failure::from)?;
            (journal, None, Some(bound))
        }
        None => {
            let (journal, resumed) = begin::start_session(settings, &session, &owner, grace)?;
            (journal, resumed, None)
        }
    };
    if plan.log_beside_journal {
        redirect_stderr(&journal.path().with_extension("log"));
    }
    let undo = begin::Undo::new(&journal, resumed.is_some() || bound.is_some());
    let control = plan.control.take();
    let opened = open(
        settings,
        &plan,
        control,
        (&session, &owner),
        (&journal, bound, owner_exit),
        warn,
    );
    let opened = undo.unless_ok(opened)?;
    Ok(assemble(
        settings, session, owner, grace, journal, resumed, opened,
    ))
}

/// SIGTERM's future.
type Stop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What steps 3 and 4 open.
struct Opened {
    control: Option<LineReader<tokio::net::unix::pipe::Receiver>>,
    owner_watch: OwnerWatch,
    stop: Stop,
    labels: BTreeMap<String, String>,
    served: proxies::Served,
    claims: tokio::sync::mpsc::UnboundedReceiver<Ask>,
    /// The wrapper handed the session over: the owner was alive then.
    handed: bool,
}

/// `bound`: the proxies the wrapper bound, served as they are; `None`: decided and bound here.
/// `owner_exit`: the owner's exit watch the wrapper handed over, watched instead of its pid.
fn open(
    settings: &Settings,
    plan: &StartPlan,
    control: Option<OwnedFd>,
    (session, owner): (&str, &Identity),
    (journal, bound, owner_exit): (&Journal, Option<proxies::Bound>, Option<OwnedFd>),
    warn: &mut dyn FnMut(&str),
) -> Result<Opened, Failure> {
    let control = match control {
        Some(fd) => Some(open_control(fd)?),
        None => None,
    };
    let owner_watch = match owner_exit {
        Some(watch) => OwnerWatch::open_handed(watch, owner),
        None => OwnerWatch::open(owner),
    };
    let stop = stop_signal().map_err(Failure::Sigterm)?;
    let labels = session::labels(session, owner);
    let (tx, claims) = tokio::sync::mpsc::unbounded_channel();
    let stamp = crate::proxy::stamp::Labels {
        session: labels.clone(),
        budget: settings.budget(),
    };
    let at = proxies::Session {
        id: session,
        labels: &stamp,
        journal: journal.path(),
    };
    let handed = bound.is_some();
    let served = match bound {
        Some(bound) => proxies::serve(bound, &stamp, &tx)?,
        None => {
            let modes = (plan.docker_proxy, plan.cloud_proxy);
            proxies::start(settings, modes, &at, &tx, plan.heard, warn)?
        }
    };
    Ok(Opened {
        control,
        owner_watch,
        stop,
        labels,
        served,
        claims,
        handed,
    })
}

/// The service's plan and triggers from what was opened (step 5 included). Building the
/// registry (the PATH scan for plugins) waits until here: it is not needed to accept claims.
fn assemble(
    settings: &Settings,
    session: String,
    owner: Identity,
    grace: Duration,
    journal: Journal,
    resumed: Option<SessionView>,
    opened: Opened,
) -> Started {
    let Opened {
        control,
        mut owner_watch,
        stop,
        labels,
        served,
        claims,
        handed,
    } = opened;
    let env = served.env();
    let registry = Registry::from_settings(settings);
    let proxy_claims = (served.docker.is_some() || !served.cloud.is_empty()).then_some(claims);
    let (proxy, socket_dir) = match served.docker {
        Some(p) => (Some(p.proxy), Some(p.dir)),
        None => (None, None),
    };
    let providers = registry.select(None).unwrap_or_default();
    let started_ms = resumed.as_ref().map(|v| v.started_ms);
    // When the session began, for following to tell whether it saw all of it (a new or
    // handed session's journal holds its `start` alone: one short read).
    let began_ms = started_ms.or_else(|| journal.view().ok().map(|v| v.started_ms));
    let fleet = begin::fleet_plan(
        settings,
        &session,
        &owner,
        labels,
        &providers,
        started_ms,
        journal.path(),
    );
    let meter = match &resumed {
        Some(_) if settings.budget().spends().next().is_some() => {
            metered(journal.path(), &providers, &settings.prices)
        }
        _ => Default::default(),
    };
    let (held, slots) = resumed.map_or_else(Default::default, |v| {
        let held = crate::fleet::Holdings {
            claims: v.claims,
            detached: v.detached,
        };
        (held, v.slots)
    });
    let plan = service::SidecarService {
        session: session.clone(),
        journal,
        began_ms,
        warm_up: service::WARM_UP_DELAY,
        providers,
        grace,
        renew_every: settings.watch.renew_every,
        limit_rounds: None,
        options: Options::from(&settings.reclaim),
        proxy,
        cloud: served.cloud,
        fleet,
        held,
        budget: (settings.budget(), slots, meter),
        bye_report: None,
        end_report: None,
        notice: None,
        notify: crate::notify::Lazy::new(settings),
    };
    let triggers = Triggers {
        exit: owner_watch.exit_probe(),
        owner: Box::pin(async move {
            match owner_watch.wait().await {
                // The owner handed its session over alive (it is the wrapper, exec'd into
                // CMD): found gone now, it exited before the watch began, as a short CMD
                // does. That is its exit, not an owner that was never there.
                Gone::GoneAtStart if handed => Gone::Exited,
                gone => gone,
            }
        }),
        control,
        proxy: proxy_claims,
        stop,
    };
    Started {
        session,
        env,
        plan,
        triggers,
        _socket_dir: socket_dir,
    }
}

/// The owner as it is now; a pid that is gone or whose start time differs from the one given
/// is an owner already gone (its identity is kept so the ledger records what was asked for).
fn judge_owner(pid: u32, start: Option<u64>) -> Identity {
    let host = crate::identity::Host::current();
    match Identity::of_pid(pid) {
        Some(id) if start.is_none_or(|s| s == id.start_time) => id,
        _ => Identity {
            machine: host.machine.clone(),
            boot: host.boot.clone(),
            pid,
            start_time: start.unwrap_or(0),
            pidns: host.pidns,
        },
    }
}

fn open_control(fd: OwnedFd) -> Result<LineReader<tokio::net::unix::pipe::Receiver>, Failure> {
    let raw = fd.as_raw_fd();
    let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
        .map_err(|error| Failure::Control { fd: raw, error })?;
    Ok(LineReader::new(receiver))
}

fn stop_signal() -> std::io::Result<Stop> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(Box::pin(async move {
        term.recv().await;
    }))
}

/// Diagnostics of a daemonized sidecar go to a private log file beside its journal.
fn redirect_stderr(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path);
    match file {
        Ok(f) => {
            if let Err(e) = crate::unix::redirect_stderr(&f) {
                tracing::warn!("cannot log to {}: {e}", path.display());
            }
        }
        Err(e) => tracing::warn!("cannot log to {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests;

/// The sandbox time a resumed session's journal tells (for its `spend` limit): the stretches
/// its story holds, sandboxes only. A journal that cannot be read counts nothing here (its
/// view was read a moment ago; the meter then starts from the resume).
fn metered(
    journal: &std::path::Path,
    providers: &[std::sync::Arc<dyn crate::providers::Provider>],
    prices: &crate::ledger::price::Prices,
) -> crate::budget::Meter {
    let Ok(bytes) = std::fs::read(journal) else {
        return Default::default();
    };
    let story = crate::ledger::story::tell(&bytes, b"");
    let is_sandbox = |t: &crate::protocol::Target| {
        crate::providers::by_name(providers, &t.provider)
            .and_then(|p| p.parse_claim(&t.id).ok())
            .is_none_or(|s| s.kind == crate::providers::Kind::Instance)
    };
    crate::budget::Meter::resumed(
        story
            .sandboxes
            .iter()
            .filter(|s| is_sandbox(&s.target))
            .flat_map(|s| {
                let per_hour = prices.per_hour(&s.target.provider, s.size.as_deref());
                s.held
                    .iter()
                    .map(move |h| (s.target.clone(), per_hour, h.from_ms, h.to_ms))
            }),
    )
}
