//! `sandguard watch`: the sidecar itself, for SDKs and for the wrapper.
//!
//! This file only daemonizes, turns the arguments into a [`StartPlan`], prints, and runs what
//! [`crate::watch::start`] started: that module judges the owner, creates the journal (its
//! `Start` record fsynced, its lock held), opens the death source and binds the proxies. Then
//! `ready SESSION` is printed on stdout. Anything that fails before that prints `error MESSAGE`
//! on stdout instead (the wrapper shows it), then `sandguard: MESSAGE` on stderr as every
//! command's error is ([`super::Error`]), and exits 2 for bad configuration, 1 otherwise.
//!
//! **Resume.** `--session S` whose journal exists and whose lock nobody holds is a restarted
//! sidecar (a Kubernetes native sidecar, S the pod's uid): it takes the session over, ended or
//! not, journals `resume` with its owner, guards what the session held as if it had been told
//! of it, registers again in the fleet store, and says `ready S` (decisions:
//! [`crate::ledger`]'s `resume.rs`). While S's lock is held (a live sidecar, a sweep that
//! adopted it) it says `error …` and exits 1, once a reader had
//! [`crate::watch::start::begin::RESUME_PATIENCE`] to let go.
//!
//! With `--docker-proxy`, the Docker API proxy ([`crate::proxy::docker`]) is listening before
//! `ready`, and the ready line carries its address: `ready SESSION DOCKER_HOST=unix:///…/docker.sock`.
//! With `--cloud-proxy`, the cloud API proxy ([`crate::proxy::cloud`]) listens on a
//! loopback port for each of E2B and Daytona that is configured (their base URLs read here,
//! before the program's variables point elsewhere), and the ready line carries
//! `E2B_API_URL=…` / `DAYTONA_API_URL=…`; with neither configured the sidecar does not start
//! (exit 2). Both proxies send their claims down one channel (`Triggers::proxy`).
//!
//! After `ready`, stdout carries one more line only when the owner says `bye`: the first
//! reclaim pass's outcome ([`ByeOutcome`]: `ended clean`, or `ended left N: …`); stdout is then
//! closed (`/dev/null` takes its place) before the settle pass, so an owner waiting for the
//! line or for EOF is not kept waiting by the settle delay. Exit status: 0 when the session
//! ended clean or reclaimed (or the sidecar was stopped by SIGTERM), 1 when work is left
//! pending.
//!
//! `--daemonize` (the SDKs' way to start it) forks once more before anything else, so the
//! sidecar is nobody's child (not the guarded program's); `--detached` (the Rust side's one
//! way, `crate::session::spawn`) says its spawner made it so already. Either then closes every
//! descriptor it inherited but stdin, stdout (the ready line), stderr, the control pipe and
//! what a handoff names (a parent waiting for EOF on a pipe the wrapper had must not wait for
//! the reclaim), moves to `/` (its working directory must not keep a filesystem busy), and
//! sends its diagnostics to
//! `<state dir>/sessions/<session>.log`. SIGINT and SIGHUP are ignored in every case. That
//! part is the library's ([`crate::watch::daemon`]); this file parses, calls and prints.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use super::{Error, Exit};
use crate::config::{ConfigError, HumanDuration, ProxyMode, Settings};
use crate::protocol::{ByeOutcome, ReadyLine};
use crate::session::handoff::Handoff;
use crate::session::SessionId;
use crate::unix;
use crate::watch::daemon::{self, Became};
use crate::watch::start::{start, StartError, StartPlan};
use crate::watch::EndReport;
use std::os::fd::{OwnedFd, RawFd};

mod pod;
mod terminal;
use terminal::Terminal;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
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
    #[command(flatten)]
    pub limits: super::run::Limits,
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
    /// Fork away from the parent and log to the state directory (the SDKs' way)
    #[arg(long, hide = true)]
    pub daemonize: bool,
    /// Started detached already (the Rust side's one way, `crate::session::spawn`): as
    /// --daemonize, without the fork
    #[arg(long, hide = true, conflicts_with = "daemonize")]
    pub detached: bool,
    /// The wrapper's handoff, one value (`crate::session::handoff`): the session's journal,
    /// created by the wrapper, the owner's exit watch and the proxies' listeners, open at the
    /// descriptors it names
    #[arg(long, hide = true, value_name = "VALUE", value_parser = Handoff::decode, requires_all = ["session", "detached"])]
    pub handoff: Option<Handoff<RawFd>>,
    /// The directory whose `.env` files the settings read, instead of the current one (the
    /// wrapper's, which the handed-over sidecar does not start in)
    #[arg(long, hide = true, value_name = "DIR")]
    pub dotenv_dir: Option<std::path::PathBuf>,
}

impl Args {
    /// The descriptors the handoff names.
    fn handed_fds(&self) -> Vec<i32> {
        self.handoff
            .iter()
            .flat_map(|h| h.each().copied())
            .collect()
    }

    /// What the wrapper handed over, its descriptors taken.
    fn handed(&self) -> Result<Option<Handoff<OwnedFd>>, StartError> {
        self.handoff
            .clone()
            .map(Handoff::take)
            .transpose()
            .map_err(StartError::Failed)
    }
}

/// Runs the sidecar; a start-up failure is also said on stdout (`error MESSAGE`) for whoever
/// waits for `ready`, then returned like any command's error ([`Error::Start`]: exit 2 for bad
/// configuration or arguments, 1 otherwise).
pub(super) fn run(args: Args, settings: Result<Settings, ConfigError>) -> Result<Exit, Error> {
    let terminal = match args.report {
        true => Terminal::take_stderr(),
        false => Terminal::none(),
    };
    if args.daemonize || args.detached {
        let keep: Vec<i32> = args
            .control_fd
            .into_iter()
            .chain(terminal.fd())
            .chain(args.handed_fds())
            .collect();
        match daemon::daemonize(args.daemonize, &keep) {
            Ok(Became::Parent) => return Ok(Exit::Ok),
            Ok(Became::Sidecar) => {}
            Err(e) => return fail(e),
        }
    }
    if let Err(e) = daemon::ignore_terminal_signals() {
        return fail(e);
    }
    let settings = match settings {
        Ok(s) => s,
        Err(e) => return fail(StartError::Usage(e.to_string())),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return fail(StartError::Failed(format!(
                "cannot start the async runtime: {e}"
            )))
        }
    };
    match runtime.block_on(serve(args, settings, terminal)) {
        Ok(exit) => Ok(exit),
        Err(e) => fail(e),
    }
}

/// The `error` line for whoever waits for `ready`, and the error to report.
fn fail(e: StartError) -> Result<Exit, Error> {
    let _ = announce(&ReadyLine::Error(e.to_string()));
    Err(Error::Start(e))
}

async fn serve(args: Args, settings: Settings, mut terminal: Terminal) -> Result<Exit, StartError> {
    let owner_pid = match (args.owner_pid, &args.owner_pid_file) {
        (Some(pid), _) => pid,
        (None, Some(file)) => pod::wait_for_pid(file).await?,
        (None, None) => return Err(StartError::Usage("no --owner-pid".into())),
    };
    let session = match args.session.as_deref().map(SessionId::parse) {
        Some(Ok(id)) => Some(id),
        Some(Err(e)) => return Err(StartError::Usage(e.to_string())),
        None => None,
    };
    let control = match args.control_fd {
        Some(fd) => Some(
            unix::take_fd(fd).map_err(|e| StartError::Failed(format!("--control-fd {fd}: {e}")))?,
        ),
        None => None,
    };
    let plan = StartPlan {
        owner_pid,
        owner_start: args.owner_start,
        session,
        control,
        grace: args.grace.map(|g| g.0),
        docker_proxy: args.docker_proxy.unwrap_or(ProxyMode::Off),
        cloud_proxy: args.cloud_proxy.unwrap_or(ProxyMode::Off),
        log_beside_journal: args.daemonize || args.detached,
        heard: terminal.reports(),
        handed: args.handed()?,
    };
    let mut started = start(&settings, plan, &mut |w: &str| terminal.warn(w)).await?;
    announce(&ReadyLine::Ready {
        session: started.session.clone(),
        env: started.env.clone(),
    })
    .map_err(|e| StartError::Failed(format!("cannot write the ready line: {e}")))?;
    // Kept for the lines while the program runs (a limit's removal) and the one at its end.
    let kept = Arc::new(Mutex::new(terminal.at_ready(args.quiet)));
    let (state_dir, prices) = (settings.state_dir.clone(), settings.prices.clone());
    let session = started.session.clone();
    let end_report: Option<EndReport> = {
        let kept = kept.clone();
        Some(Box::new(move |report: &crate::reclaim::Report| {
            if let Some(t) = kept.lock().unwrap_or_else(PoisonError::into_inner).take() {
                let used = terminal::used(&state_dir, &session, report, &prices);
                t.tell_end(report, used.as_ref());
            }
        }))
    };
    started.on_notice(Box::new(move |line: &str| {
        if let Some(t) = kept.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            t.tell(line);
        }
    }));
    let outcome = started.run(Some(Box::new(report_bye)), end_report).await;
    tracing::info!("the watch ended: {:?}", outcome.cause);
    Ok(Exit::clean_if(
        outcome.state != crate::ledger::SessionState::Pending,
    ))
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
