//! `sandguard sweep [--every D] [--dry-run] [--json] [--provider P] [--fleet]`: one pass (for
//! cron), or a service that passes every `D` and watches the live owners it adopts. `--fleet`
//! adds the fleet store's expired sessions ([`crate::sweep::fleet`]); a store that cannot be
//! read is a failure of the pass (exit 1), never an empty fleet.
//!
//! Output and exit codes follow `stop`: 0 when everything it decided to remove is gone and
//! every provider answered, 1 otherwise, 2 for bad usage. With `--every` it runs until SIGTERM
//! or SIGINT; each pass prints its own report.
//!
//! Decisions (`--every`, text):
//! - A verdict line (`reclaim …`, `adopt …`, `leave …`) is printed when it is news: on the
//!   first pass every one; later, only one whose verdict or reason differs from the previous
//!   pass's for the same session or sandbox. A sandbox (or session) missing from a pass and
//!   back later is news again. A service every five minutes over twenty sandboxes it leaves
//!   alone would otherwise repeat twenty lines every five minutes, and hide the one that
//!   changed.
//! - Removal lines and the `Sweep:` summary are printed on every pass: they say what this pass
//!   did. The summary says how many unchanged verdicts it did not repeat.
//! - What the watcher of an adopted session does when its owner dies is printed when it is
//!   done, as a pass of its own would be: its `reclaim session …` line, a `removed …` line per
//!   removal, and a summary that names it (`Sweep (watcher of session S): …`), since it may
//!   end long after the pass that adopted the session. It is no pass: it does not count as
//!   "the last pass" for what is news. With `--json` it is one more report object of the
//!   same shape.
//! - A verdict's reason never counts down: a fleet session left because another host holds
//!   its lease is said once, with how long the lease had left at that pass (`… (the lease
//!   runs out in 29.7 s unless renewed)`), and not again while it is held; it is said again
//!   when its verdict or reason changes (the lease expired: `reclaim session …`). `--json`
//!   gives the time left as `lease_left_ms` (`null` for every other decision).
//! - `--json` prints every decision of every pass: a reader of JSON keeps its own state.
//! - What the ledger or the fleet store could not do is not a provider's failure: the text
//!   says `error: could not query ledger: …` (or `fleet`) as for a provider, but `--json`
//!   lists it under `store_errors` (`{"store","session","error"}`), never under `errors`,
//!   where a plugin provider may be called `ledger` ([`crate::sweep::StoreFailure`]).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::output::{self, sanitize, ErrorJson, Exit, ResultJson};
use super::Error;
use crate::config::{HumanDuration, Settings};
use crate::fleet::redis::RedisStore;
use crate::fleet::Store;
use crate::ledger::StateDir;
use crate::metrics::{self, serve::Endpoint, Metrics};
use crate::providers::{Registry, SandboxKey};
use crate::reclaim::Options;
use crate::sweep::fleet::FleetSweep;
use crate::sweep::service::{self, Report};
use crate::sweep::{Decision, Pass, SessionVerdict, StoreFailure, StoreKind};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// Run as a service: a pass every D (e.g. 5m), adopting live owners
    #[arg(long, value_name = "D")]
    every: Option<HumanDuration>,
    /// Say what would be done, touch nothing
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    /// Only this provider
    #[arg(long, value_name = "P")]
    provider: Option<String>,
    /// Also reclaim the sessions of the fleet store ([fleet] store) whose lease expired, on
    /// whatever machine they ran
    #[arg(long)]
    fleet: bool,
    /// With --every: serve Prometheus metrics at GET /metrics on ADDR, a loopback address
    /// (127.0.0.1:9464) or a unix socket path
    #[arg(long, value_name = "ADDR")]
    metrics: Option<Endpoint>,
}

#[derive(Serialize)]
struct SweepJson<'a> {
    dry_run: bool,
    decisions: Vec<DecisionJson<'a>>,
    results: Vec<ResultJson<'a>>,
    /// The providers that could not be listed.
    errors: Vec<ErrorJson<'a>>,
    /// What the ledger or the fleet store could not do (never under `errors`: a provider may
    /// be called `ledger`; [`crate::sweep::StoreFailure`]).
    store_errors: Vec<StoreErrorJson<'a>>,
    clean: bool,
}

/// A store failure as `--json` shows it: `store` is `ledger` or `fleet`; `session` is the
/// session that was not reclaimed, `null` when the store could not be read at all.
#[derive(Serialize)]
struct StoreErrorJson<'a> {
    store: StoreKind,
    session: Option<&'a str>,
    error: String,
}

impl<'a> From<&'a StoreFailure> for StoreErrorJson<'a> {
    fn from(f: &'a StoreFailure) -> Self {
        StoreErrorJson {
            store: f.store,
            session: f.session.as_deref(),
            error: f.to_string(),
        }
    }
}

/// A decision as `--json` shows it: `provider` and `instance_id` are `null` for a session;
/// `lease_left_ms` is `null` but for a fleet session whose lease another host holds.
#[derive(Serialize)]
struct DecisionJson<'a> {
    session: &'a str,
    provider: Option<&'a str>,
    instance_id: Option<&'a str>,
    verdict: SessionVerdict,
    reason: &'a str,
    lease_left_ms: Option<u64>,
}

impl<'a> From<&'a Decision> for DecisionJson<'a> {
    fn from(d: &'a Decision) -> Self {
        DecisionJson {
            session: &d.session,
            provider: d.sandbox.as_ref().map(|k| k.provider.as_str()),
            instance_id: d.sandbox.as_ref().map(|k| k.id.as_str()),
            verdict: d.verdict,
            reason: &d.reason,
            lease_left_ms: d.lease_left.map(|l| l.as_millis() as u64),
        }
    }
}

pub(super) async fn run(
    args: Args,
    settings: &Settings,
    registry: &Registry,
) -> Result<Exit, Error> {
    if args.every.is_some_and(|d| d.0.is_zero()) {
        return Err(Error::Usage("--every must be longer than 0".into()));
    }
    if args.metrics.is_some() && (args.every.is_none() || args.dry_run) {
        return Err(Error::Usage(
            "--metrics needs --every (a service to scrape) and no --dry-run".into(),
        ));
    }
    let state = StateDir::open(&settings.state_dir)?;
    // With a store configured, the local pass tells it of the sessions it ends, `--fleet` or
    // not; a store that cannot be built only stops `--fleet` (the local pass goes on).
    let store = settings
        .fleet
        .as_ref()
        .map(|f| RedisStore::new(f).map(|s| std::sync::Arc::new(s) as std::sync::Arc<dyn Store>));
    let fleet = match (args.fleet, &settings.fleet, &store) {
        (false, _, _) => None,
        (true, None, _) | (true, _, None) => return Err(Error::Usage(
            "--fleet needs a fleet store: [fleet] store in the config, or SANDGUARD_FLEET_STORE"
                .into(),
        )),
        (true, Some(f), Some(store)) => Some(FleetSweep {
            store: store.clone().map_err(|e| Error::Usage(e.to_string()))?,
            host: settings.host.id(),
            lease: f.lease,
            ledger: Some(settings.state_dir.clone()),
        }),
    };
    let store = match store {
        Some(Ok(store)) => Some(store),
        Some(Err(e)) => {
            tracing::warn!("the fleet store will not be told of the sessions this sweep ends: {e}");
            None
        }
        None => None,
    };
    let every = args.every.map(|d| d.0).unwrap_or_default();
    let metrics = match &args.metrics {
        Some(endpoint) => {
            let bound = metrics::serve::bind(endpoint).await?;
            let served = Arc::new(Metrics::new(&settings.host.id(), every));
            tracing::info!("metrics at {}", bound.endpoint());
            Some((bound, served))
        }
        None => None,
    };
    let plan = service::SweepService {
        metrics: metrics.as_ref().map(|(_, m)| m.clone()),
        fleet,
        store,
        state,
        providers: registry.select(args.provider.as_deref())?,
        options: Options::from(&settings.reclaim),
        every,
        dry_run: args.dry_run,
        prune_after: settings.sweep.prune_after,
        notify: notify(&args, settings),
    };
    if args.every.is_none() {
        let mut plan = plan;
        let pass = service::one_pass(&plan).await?;
        print(&args, &pass);
        // Notify: told after the pass is printed; waits a bounded while before exit.
        if let Some(told) = &mut plan.notify {
            told.pass(&pass);
            told.notifier.flush(crate::notify::ONE_SHOT_FLUSH).await;
        }
        return Ok(Exit::clean_if(pass.is_clean()));
    }
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    let ledger = plan.state.clone();
    let serving = async move {
        match metrics {
            Some((bound, served)) => {
                metrics::serve::serve(bound, served, ledger).await;
            }
            None => std::future::pending().await,
        }
    };
    let mut seen = Seen::default();
    let sweeping = service::serve(plan, stop, |report| match report {
        Report::Pass(pass) | Report::Watched { pass, .. } if args.json => print_json(&args, pass),
        Report::Pass(pass) => {
            let news = seen.news(pass);
            output::emit(&text(&args, pass, &news, None));
        }
        Report::Watched { session, pass } => {
            let news = vec![true; pass.decisions.len()];
            output::emit(&text(&args, pass, &news, Some(session)));
        }
    });
    // The endpoint lives as long as the service (and its socket file with it).
    tokio::select! {
        () = sweeping => {}
        () = serving => {}
    }
    Ok(Exit::Ok)
}

/// `[notify]`'s notifier for this sweep: none for a dry run (it does nothing to tell of).
fn notify(args: &Args, settings: &Settings) -> Option<crate::notify::sweep::Told> {
    if args.dry_run {
        return None;
    }
    let notifier = crate::notify::Notifier::from_settings(settings)?;
    let after = settings.notify.as_ref().and_then(|n| n.detached_after);
    Some(crate::notify::sweep::Told::new(
        notifier,
        after,
        &settings.state_dir,
    ))
}

fn print(args: &Args, pass: &Pass) {
    if args.json {
        print_json(args, pass);
    } else {
        output::emit(&text(args, pass, &vec![true; pass.decisions.len()], None));
    }
}

/// What a decision is about: a ledger session, or one sandbox (with its session).
type Subject = (String, Option<SandboxKey>);

/// The verdicts of the previous pass of `--every`, to print only what changed.
#[derive(Default)]
struct Seen {
    last: HashMap<Subject, (SessionVerdict, String)>,
}

impl Seen {
    /// For each decision of `pass`, whether it is news (see the module docs); remembers this
    /// pass's verdicts, and only those, for the next.
    fn news(&mut self, pass: &Pass) -> Vec<bool> {
        let now: HashMap<Subject, (SessionVerdict, String)> = pass
            .decisions
            .iter()
            .map(|d| {
                (
                    (d.session.clone(), d.sandbox.clone()),
                    (d.verdict, d.reason.clone()),
                )
            })
            .collect();
        let news = pass
            .decisions
            .iter()
            .map(|d| {
                let subject = (d.session.clone(), d.sandbox.clone());
                self.last.get(&subject) != Some(&(d.verdict, d.reason.clone()))
            })
            .collect();
        self.last = now;
        news
    }
}

fn print_json(args: &Args, pass: &Pass) {
    let results = pass.removals.iter().map(ResultJson::of).collect();
    output::emit_json(&SweepJson {
        dry_run: args.dry_run,
        decisions: pass.decisions.iter().map(DecisionJson::from).collect(),
        results,
        errors: pass.list_failures.iter().map(ErrorJson::from).collect(),
        store_errors: pass
            .store_failures
            .iter()
            .map(StoreErrorJson::from)
            .collect(),
        clean: pass.is_clean(),
    });
}

/// A line per decision that is news (`news`, one flag per decision), a line per removal, the
/// counts, and what could not be listed. `watcher`: the session whose watcher's reclaim this
/// is, named in the summary.
fn text(args: &Args, pass: &Pass, news: &[bool], watcher: Option<&str>) -> String {
    let mut text = String::new();
    for (d, _) in pass.decisions.iter().zip(news).filter(|(_, new)| **new) {
        let verb = match (&d.verdict, args.dry_run) {
            (SessionVerdict::Reclaim, true) => "would reclaim",
            (SessionVerdict::Reclaim, false) => "reclaim",
            (SessionVerdict::Adopt, _) => "adopt",
            (SessionVerdict::Leave, _) => "leave",
        };
        let what = match &d.sandbox {
            Some(k) => format!(
                "{} {} (session {})",
                k.provider,
                sanitize(&k.id),
                sanitize(&d.session)
            ),
            None => format!("session {}", sanitize(&d.session)),
        };
        let lease = match d.lease_left {
            Some(left) => format!(
                " (the lease runs out in {:.1} s unless renewed)",
                left.as_secs_f64()
            ),
            None => String::new(),
        };
        text.push_str(&format!("{verb} {what}: {}{lease}\n", d.reason));
    }
    for r in &pass.removals {
        let (outcome, provider, id) = (r.outcome.as_str(), &r.sandbox.provider, &r.sandbox.id);
        text.push_str(&match r.outcome.error() {
            Some(e) => format!("{outcome} {provider} {}: {}\n", sanitize(id), sanitize(e)),
            None => format!("{outcome} {provider} {}\n", sanitize(id)),
        });
    }
    let tally = pass.tally();
    let count = |k: SessionVerdict| tally.get(&k).copied().unwrap_or(0);
    let failed = pass
        .removals
        .iter()
        .filter(|r| !r.outcome.is_final())
        .count();
    let dry = match watcher {
        Some(session) => format!(" (watcher of session {})", sanitize(session)),
        None if args.dry_run => " (dry run: nothing was touched)".into(),
        None => String::new(),
    };
    let unchanged = news.iter().filter(|new| !**new).count();
    let quiet = if unchanged > 0 {
        format!(" ({unchanged} unchanged since the last pass, not repeated)")
    } else {
        String::new()
    };
    text.push_str(&format!(
        "Sweep{dry}: {} to reclaim, {} adopted, {} left alone{quiet}; {} removed, {} could not be removed.\n",
        count(SessionVerdict::Reclaim),
        count(SessionVerdict::Adopt),
        count(SessionVerdict::Leave),
        pass.removals.len() - failed,
        failed
    ));
    let consequence = "sandboxes there may still be running";
    text.push_str(&output::failure_lines(&pass.list_failures, consequence));
    for f in &pass.store_failures {
        let line = output::failure_line(f.store.as_str(), &f.to_string(), consequence);
        text.push_str(&line);
    }
    text
}

#[cfg(test)]
mod tests;
