//! `sandguard watch`: the sidecar itself, for SDKs and for the wrapper.
//!
//! Start-up, in order: judge the owner's identity; open the state directory and create the
//! session's journal (its `Start` record fsynced, its lock held); open the death source; then
//! print `ready SESSION` on stdout. Anything that fails before that prints `error MESSAGE` on
//! stdout instead (the wrapper shows it) and exits 2 for bad configuration, 1 otherwise.
//!
//! **Resume.** `--session S` whose journal exists and whose lock nobody holds is a restarted
//! sidecar (a Kubernetes native sidecar, S the pod's uid): it takes the session over, ended or
//! not, journals `resume` with its owner, guards what the session held as if it had been told
//! of it, registers again in the fleet store, and says `ready S` (decisions:
//! [`crate::ledger`]'s `resume.rs`). While S's lock is held (a live sidecar, a sweep that
//! adopted it) it says `error …` and exits 1, once a reader had
//! [`begin::RESUME_PATIENCE`] to let go.
//!
//! With `--docker-proxy`, the Docker API proxy ([`crate::providers::docker::proxy`]) is listening before
//! `ready`, and the ready line carries its address: `ready SESSION DOCKER_HOST=unix:///…/docker.sock`.
//! With `--cloud-proxy`, the cloud API proxy ([`crate::providers::cloud_proxy`]) listens on a
//! loopback port for each of E2B and Daytona that is configured (their base URLs read here,
//! before the program's variables point elsewhere), and the ready line carries
//! `E2B_API_URL=…` / `DAYTONA_API_URL=…`; with neither configured the sidecar does not start
//! (exit 2). Both proxies send their claims down one channel ([`Triggers::proxy`]).
//!
//! After `ready`, stdout carries one more line only when the owner says `bye`: the first
//! reclaim pass's outcome ([`ByeOutcome`]: `ended clean`, or `ended left N: …`); stdout is then
//! closed (`/dev/null` takes its place) before the settle pass, so an owner waiting for the
//! line or for EOF is not kept waiting by the settle delay. Exit status: 0 when the session
//! ended clean or reclaimed (or the sidecar was stopped by SIGTERM), 1 when work is left
//! pending.
//!
//! `--daemonize` (used by the wrapper) forks once more before anything else, so the sidecar is
//! nobody's child (not the guarded program's), closes every descriptor it inherited but
//! stdin, stdout (the ready line), stderr and the control pipe (a parent waiting for EOF on a
//! pipe the wrapper had must not wait for the reclaim), moves to `/` (its working directory
//! must not keep a filesystem busy), and sends its diagnostics to
//! `<state dir>/sessions/<session>.log`. SIGINT and SIGHUP are ignored in every case.

use std::io::Write;

use super::output::Exit;
use crate::config::{HumanDuration, ProxyMode, Settings};
use crate::identity::death::OwnerWatch;
use crate::identity::Identity;
use crate::protocol::{ByeOutcome, LineReader, ReadyLine};
use crate::providers::docker::proxy::Claim;
use crate::providers::Registry;
use crate::reclaim::Options;
use crate::session::{self, SessionId};
use crate::unix::{self, Forked};
use crate::watch::{service, Triggers};

mod begin;
mod pod;
mod proxies;
mod terminal;
use begin::{fleet_plan, start_session};
use terminal::Terminal;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The process to guard
    #[arg(long, value_name = "PID", required_unless_present = "owner_pid_file")]
    pub owner_pid: Option<u32>,
    /// Wait until FILE holds the pid of the process to guard (one line, as `echo $$ > FILE`
    /// writes it), then guard that one: a sidecar in another container of a pod
    #[arg(long, value_name = "FILE", conflicts_with = "owner_pid")]
    pub owner_pid_file: Option<std::path::PathBuf>,
    /// The owner's start time (field 22 of /proc/PID/stat), pinning its identity; without it
    /// the process that has PID now is taken as the owner
    #[arg(long, value_name = "TICKS")]
    pub owner_start: Option<u64>,
    /// Session id, 1-64 characters of [0-9a-z_-], the first a letter or a digit (default: a
    /// new random one); a UUID (a pod's metadata.uid) is taken without its dashes
    #[arg(long, value_name = "ID", value_parser = pod::session_arg)]
    pub session: Option<String>,
    /// Inherited descriptor to read control lines from
    #[arg(long, value_name = "N")]
    pub control_fd: Option<i32>,
    /// Lease grace once heartbeats start (default 10m)
    #[arg(long, value_name = "D")]
    pub grace: Option<HumanDuration>,
    /// Serve a Docker API proxy that labels and claims what it creates; the ready line then
    /// carries its address (`ready SESSION DOCKER_HOST=unix:///…/docker.sock`). `=auto`: only
    /// when a Docker daemon answers (else a warning, and no proxy)
    #[arg(
        long,
        value_name = "WHEN",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on"
    )]
    pub docker_proxy: Option<ProxyMode>,
    /// Serve the cloud API proxy for E2B and Daytona (those configured): a loopback endpoint
    /// each that labels and claims every sandbox created through it; the ready line then
    /// carries `E2B_API_URL=http://127.0.0.1:PORT` / `DAYTONA_API_URL=http://127.0.0.1:PORT/api`.
    /// `=auto`: for those configured, and none is no error
    #[arg(
        long,
        value_name = "WHEN",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on"
    )]
    pub cloud_proxy: Option<ProxyMode>,
    /// stderr is the wrapper's: warnings at start, and a line at the end when it is a
    /// terminal (see `session::spawn::Report`)
    #[arg(long, hide = true)]
    pub report: bool,
    /// With --report: no line at the end
    #[arg(long, hide = true)]
    pub quiet: bool,
    /// Fork away from the parent and log to the state directory (used by the wrapper)
    #[arg(long, hide = true)]
    pub daemonize: bool,
}

/// A start-up failure: reported on stdout for whoever waits for `ready`.
struct StartError(Exit, String);

pub fn run(args: Args, settings: Result<Settings, String>) -> Exit {
    let terminal = match args.report {
        true => Terminal::take_stderr(),
        false => Terminal::none(),
    };
    if args.daemonize {
        match unix::fork_single_threaded() {
            Ok(Forked::Parent(_)) => return Exit::Ok,
            Ok(Forked::Child) => {}
            Err(e) => return fail(StartError(Exit::Failure, format!("cannot fork: {e}"))),
        }
        let keep: Vec<i32> = args.control_fd.into_iter().chain(terminal.fd()).collect();
        unix::close_descriptors_except(&keep);
        if let Err(e) = std::env::set_current_dir("/") {
            return fail(StartError(
                Exit::Failure,
                format!("cannot change to /: {e}"),
            ));
        }
    }
    for signal in [libc::SIGINT, libc::SIGHUP] {
        if let Err(e) = unix::ignore_signal(signal) {
            return fail(StartError(
                Exit::Failure,
                format!("cannot ignore signal {signal}: {e}"),
            ));
        }
    }
    let settings = match settings {
        Ok(s) => s,
        Err(e) => return fail(StartError(Exit::Usage, e)),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(StartError(
                Exit::Failure,
                format!("cannot start the async runtime: {e}"),
            ))
        }
    };
    match runtime.block_on(serve(args, settings, terminal)) {
        Ok(exit) => exit,
        Err(e) => fail(e),
    }
}

fn fail(StartError(exit, message): StartError) -> Exit {
    let _ = announce(&ReadyLine::Error(message.clone()));
    eprintln!("sandguard watch: {message}");
    exit
}

async fn serve(args: Args, settings: Settings, terminal: Terminal) -> Result<Exit, StartError> {
    let failure = |m: String| StartError(Exit::Failure, m);
    let pid = match (args.owner_pid, &args.owner_pid_file) {
        (Some(pid), _) => pid,
        (None, Some(file)) => pod::wait_for_pid(file).await?,
        (None, None) => return Err(StartError(Exit::Usage, "no --owner-pid".into())),
    };
    let owner = judge_owner(pid, args.owner_start);
    let session = match args.session.as_deref().map(SessionId::parse) {
        Some(Ok(id)) => id,
        Some(Err(e)) => return Err(StartError(Exit::Usage, e.to_string())),
        None => {
            SessionId::random().map_err(|e| failure(format!("cannot make a session id: {e}")))?
        }
    }
    .to_string();
    let grace = args.grace.map_or(settings.watch.grace, |g| g.0);
    let (journal, resumed) = start_session(&settings, &session, &owner, grace)?;
    if args.daemonize {
        redirect_stderr(&journal.path().with_extension("log"));
    }
    // Until `ready`, a failure leaves no new session behind (see `begin::Undo`).
    let undo = begin::Undo::new(&journal, resumed.is_some());
    let started = begin_watch(&args, &settings, &session, &owner, &journal, terminal)
        .await
        .and_then(|begun| {
            announce(&ReadyLine::Ready {
                session: session.clone(),
                env: begun.served.env(),
            })
            .map_err(|e| failure(format!("cannot write the ready line: {e}")))?;
            Ok(begun)
        });
    let Begun {
        control,
        mut owner_watch,
        stop,
        labels,
        served,
        claims_rx,
        terminal,
    } = undo.unless_ok(started)?;
    let terminal = terminal.at_ready(args.quiet);
    // After `ready`: building the registry (the PATH scan for plugins) is not needed to accept
    // claims, and the wrapper's program is waiting for `ready` to start.
    let registry = Registry::from_settings(&settings);
    let proxy_claims = (served.docker.is_some() || !served.cloud.is_empty()).then_some(claims_rx);
    let (proxy, _proxy_dir) = match served.docker {
        Some(p) => (Some(p.proxy), Some(p.dir)),
        None => (None, None),
    };
    let providers = registry.select(None).unwrap_or_default();
    let started_ms = resumed.as_ref().map(|v| v.started_ms);
    let fleet = fleet_plan(&settings, &session, &owner, labels, &providers, started_ms);
    let held = resumed.map_or_else(Default::default, |v| crate::fleet::Holdings {
        claims: v.claims,
        detached: v.detached,
    });
    let end_report: Option<crate::watch::EndReport> =
        terminal.map(|t| Box::new(move |report: &crate::reclaim::Report| t.tell_end(report)) as _);
    let plan = service::Plan {
        session,
        journal,
        providers,
        grace,
        renew_every: settings.watch.renew_every,
        options: Options::from(&settings.reclaim),
        proxy,
        cloud: served.cloud,
        fleet,
        held,
        bye_report: Some(Box::new(report_bye)),
        end_report,
    };
    let triggers = Triggers {
        exit: owner_watch.exit_probe(),
        owner: Box::pin(async move { owner_watch.wait().await }),
        control,
        proxy: proxy_claims,
        stop,
    };
    let outcome = service::run(plan, triggers).await;
    tracing::info!("the watch ended: {:?}", outcome.ending);
    Ok(Exit::clean_if(
        outcome.state != crate::ledger::SessionState::Pending,
    ))
}

type Control = LineReader<tokio::net::unix::pipe::Receiver>;
type Stop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Everything between the journal and `ready`: the control pipe, the owner's death source,
/// SIGTERM, the proxies (and their warnings).
struct Begun {
    control: Option<Control>,
    owner_watch: OwnerWatch,
    stop: Stop,
    labels: std::collections::BTreeMap<String, String>,
    served: proxies::Served,
    claims_rx: tokio::sync::mpsc::UnboundedReceiver<Claim>,
    terminal: Terminal,
}

async fn begin_watch(
    args: &Args,
    settings: &Settings,
    session: &str,
    owner: &Identity,
    journal: &crate::ledger::Journal,
    mut terminal: Terminal,
) -> Result<Begun, StartError> {
    let failure = |m: String| StartError(Exit::Failure, m);
    let control = match args.control_fd {
        Some(fd) => Some(open_control(fd).map_err(failure)?),
        None => None,
    };
    let owner_watch = OwnerWatch::open(owner);
    let stop = stop_signal().map_err(|e| failure(format!("cannot listen for SIGTERM: {e}")))?;
    let labels = session::labels(session, owner);
    let (claims_tx, claims_rx) = tokio::sync::mpsc::unbounded_channel();
    let at = proxies::Session {
        id: session,
        labels: &labels,
        journal: journal.path(),
    };
    let docker = args.docker_proxy.unwrap_or(ProxyMode::Off);
    let cloud = args.cloud_proxy.unwrap_or(ProxyMode::Off);
    let served = proxies::start(settings, docker, cloud, &at, &claims_tx, &mut terminal).await?;
    Ok(Begun {
        control,
        owner_watch,
        stop,
        labels,
        served,
        claims_rx,
        terminal,
    })
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

fn open_control(fd: i32) -> Result<LineReader<tokio::net::unix::pipe::Receiver>, String> {
    let owned = unix::take_fd(fd).map_err(|e| format!("--control-fd {fd}: {e}"))?;
    let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(owned)
        .map_err(|e| format!("--control-fd {fd} is not a readable pipe: {e}"))?;
    Ok(LineReader::new(receiver))
}

fn stop_signal() -> std::io::Result<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>
{
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(Box::pin(async move {
        term.recv().await;
    }))
}

fn announce(line: &dyn std::fmt::Display) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// After `bye`: the outcome line for the owner, then stdout closed (see the module docs).
fn report_bye(outcome: &ByeOutcome) {
    match outcome {
        ByeOutcome::Clean => tracing::info!("bye: {outcome}"),
        ByeOutcome::Left { .. } => tracing::warn!("bye: {outcome}"),
    }
    if let Err(e) = announce(outcome) {
        tracing::info!("cannot tell the owner how bye went (it has gone): {e}");
    }
    let closed = std::fs::File::open("/dev/null").and_then(|null| unix::redirect_stdout(&null));
    if let Err(e) = closed {
        tracing::warn!("cannot close stdout: {e}");
    }
}

/// Diagnostics of a daemonized sidecar go to a private log file beside its journal.
fn redirect_stderr(path: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path);
    match file {
        Ok(f) => {
            if let Err(e) = unix::redirect_stderr(&f) {
                tracing::warn!("cannot log to {}: {e}", path.display());
            }
        }
        Err(e) => tracing::warn!("cannot log to {}: {e}", path.display()),
    }
}
