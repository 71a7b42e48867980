//! `sandguard sweep [--every D] [--dry-run] [--json] [--provider P]`: one pass (for cron), or
//! a service that passes every `D` and watches the live owners it adopts.
//!
//! Output and exit codes follow `stop`: 0 when everything it decided to remove is gone and
//! every provider answered, 1 otherwise, 2 for bad usage. With `--every` it runs until SIGTERM
//! or SIGINT; each pass prints its own report.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::output::{self, sanitize, ErrorJson, Exit, SandboxJson};
use crate::config::{HumanDuration, Settings};
use crate::identity::Identity;
use crate::ledger::StateDir;
use crate::providers::{Provider, Registry};
use crate::reclaim::Options;
use crate::sweep::{self, Decision, Pass, Verdict};
use crate::watch::death::OwnerWatch;

#[derive(Debug, clap::Args)]
pub struct Args {
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
}

#[derive(Serialize)]
struct SweepJson<'a> {
    dry_run: bool,
    decisions: &'a [Decision],
    results: Vec<ResultJson<'a>>,
    errors: Vec<ErrorJson<'a>>,
    clean: bool,
}

#[derive(Serialize)]
struct ResultJson<'a> {
    #[serde(flatten)]
    sandbox: SandboxJson<'a>,
    outcome: &'static str,
    error: Option<&'a str>,
}

pub async fn run(args: Args, settings: &Settings, registry: &Registry) -> Exit {
    let providers = match registry.select(args.provider.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sandguard: {e}");
            return Exit::Failure;
        }
    };
    let state = match StateDir::open(&settings.state_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sandguard: {e}");
            return Exit::Failure;
        }
    };
    let options = Options::from(&settings.reclaim);
    let Some(every) = args.every.map(|d| d.0) else {
        return one_pass(&args, settings, &state, &providers, &options).await;
    };
    if every.is_zero() {
        eprintln!("sandguard: --every must be longer than 0");
        return Exit::Usage;
    }
    serve(&args, settings, state, providers, options, every).await
}

async fn one_pass(
    args: &Args,
    settings: &Settings,
    state: &StateDir,
    providers: &[Arc<dyn Provider>],
    options: &Options,
) -> Exit {
    let _lock = match lock(state).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sandguard: cannot take the sweep lock: {e}");
            return Exit::Failure;
        }
    };
    let pass = sweep::pass(state, providers, options, args.dry_run).await;
    print(args, &pass);
    if !args.dry_run {
        prune(state, settings);
    }
    if pass.is_clean() {
        Exit::Ok
    } else {
        Exit::Failure
    }
}

/// The service: a pass every `every`, each adopted owner watched by a task that reclaims its
/// session when it dies. Stops on SIGTERM or SIGINT (adopted sessions are released, not
/// reclaimed: the next sweep adopts them again).
async fn serve(
    args: &Args,
    settings: &Settings,
    state: StateDir,
    providers: Vec<Arc<dyn Provider>>,
    options: Options,
    every: Duration,
) -> Exit {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("sandguard: cannot listen for signals");
        return Exit::Failure;
    };
    let state = Arc::new(state);
    let mut watchers = tokio::task::JoinSet::new();
    let mut adopted: HashSet<String> = HashSet::new();
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            Some(done) = watchers.join_next() => {
                if let Ok(id) = done {
                    adopted.remove(&id);
                }
            }
            _ = tick.tick() => {
                let Ok(_lock) = lock(&state).await else { continue };
                let pass = sweep::pass(&state, &providers, &options, args.dry_run).await;
                print(args, &pass);
                if args.dry_run {
                    continue;
                }
                prune(&state, settings);
                for view in pass.adopt {
                    if adopted.contains(&view.id) {
                        continue;
                    }
                    let Some(owner) = Identity::parse_label(&view.owner) else { continue };
                    let Ok(journal) = state.adopt_session(&view.id) else { continue };
                    adopted.insert(view.id.clone());
                    let (providers, options) = (providers.clone(), options.clone());
                    watchers.spawn(async move {
                        OwnerWatch::open(&owner).wait().await;
                        sweep::reclaim_adopted(journal, &providers, &view, &options).await;
                        view.id
                    });
                }
            }
        }
    }
    watchers.abort_all();
    Exit::Ok
}

/// Deletes the ledger's old ended sessions (`[sweep] prune_after`).
fn prune(state: &StateDir, settings: &Settings) {
    let Some(age) = settings.sweep.prune_after else {
        return;
    };
    let before = crate::ledger::now_ms().saturating_sub(age.as_millis() as u64);
    match state.prune(before) {
        Ok(gone) if !gone.is_empty() => {
            tracing::info!("pruned {} ended sessions from the ledger", gone.len())
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot prune the ledger: {e}"),
    }
}

/// Serialises sweeps: waits for `sweep.lock` in the state directory.
async fn lock(state: &StateDir) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(state.path().join("sweep.lock"))?;
    let mut said = false;
    while !crate::unix::try_lock_exclusive(&file)? {
        if !std::mem::replace(&mut said, true) {
            tracing::info!("waiting for another sweep to finish (it holds sweep.lock)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(file)
}

fn print(args: &Args, pass: &Pass) {
    if args.json {
        let results = pass
            .removals
            .iter()
            .map(|r| ResultJson {
                sandbox: SandboxJson::new(&r.sandbox),
                outcome: r.outcome.as_str(),
                error: r.outcome.error(),
            })
            .collect();
        output::emit_json(&SweepJson {
            dry_run: args.dry_run,
            decisions: &pass.decisions,
            results,
            errors: pass.list_failures.iter().map(ErrorJson::from).collect(),
            clean: pass.is_clean(),
        });
        return;
    }
    let mut text = String::new();
    for d in &pass.decisions {
        let verb = match (&d.verdict, args.dry_run) {
            (Verdict::Reclaim, true) => "would reclaim",
            (Verdict::Reclaim, false) => "reclaim",
            (Verdict::Adopt, _) => "adopt",
            (Verdict::Leave, _) => "leave",
        };
        let what = match (&d.provider, &d.instance_id) {
            (Some(p), Some(id)) => {
                format!("{p} {} (session {})", sanitize(id), sanitize(&d.session))
            }
            _ => format!("session {}", sanitize(&d.session)),
        };
        text.push_str(&format!("{verb} {what}: {}\n", d.reason));
    }
    for r in &pass.removals {
        let line = match r.outcome.error() {
            Some(e) => format!(
                "{} {} {}: {}\n",
                r.outcome.as_str(),
                r.sandbox.provider,
                sanitize(&r.sandbox.id),
                sanitize(e)
            ),
            None => format!(
                "{} {} {}\n",
                r.outcome.as_str(),
                r.sandbox.provider,
                sanitize(&r.sandbox.id)
            ),
        };
        text.push_str(&line);
    }
    let tally = pass.tally();
    let count = |k: Verdict| tally.get(&k).copied().unwrap_or(0);
    let failed = pass
        .removals
        .iter()
        .filter(|r| !r.outcome.is_final())
        .count();
    text.push_str(&format!(
        "Sweep{}: {} to reclaim, {} adopted, {} left alone; {} removed, {} could not be removed.\n",
        if args.dry_run {
            " (dry run: nothing was touched)"
        } else {
            ""
        },
        count(Verdict::Reclaim),
        count(Verdict::Adopt),
        count(Verdict::Leave),
        pass.removals.len() - failed,
        failed
    ));
    text.push_str(&output::failure_lines(
        &pass.list_failures,
        "sandboxes there may still be running",
    ));
    output::emit(&text);
}
