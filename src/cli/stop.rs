//! `sandguard stop ID` and `sandguard stop --all`: list afresh, then remove through the one
//! reclaim path.
//!
//! - `ID` matches a managed sandbox's full id or a unique prefix of it (the table shows Docker
//!   ids cut to 12 characters). An `ID` no id can start with (empty, `.`, `..`, with a `/`
//!   or whitespace) is bad usage, exit 2, before anything is listed. Only sandboxes carrying `sandguard.session` can be found: a
//!   stranger's container is "not found", never removed.
//! - `--all` removes every managed sandbox (instances, then networks, then volumes), narrowed by
//!   `--provider` and `--session`; `--dry-run` lists what would go and touches nothing.
//! - What may go is the one ownership judgement's to say ([`crate::ownership`]): `stop ID`
//!   removes the sandbox the user named, detached or not (that is how a detached sandbox is
//!   ended by hand); `stop --all` keeps every detached sandbox, by its label or by a `detach`
//!   in any session's ledger, and says so on stderr (`kept … : detached: …`; `--json`: outcome
//!   `kept`). Detach wins everywhere.
//! - `--session S` takes the one session-id rule ([`SessionId::parse`], as `ps --session`,
//!   `sessions show` and the sidecar's `watch --session`): anything else (`'a b'`) is bad
//!   usage, exit 2, before anything is listed. It is matched exactly (a label selector), never
//!   as a prefix.
//! - Exit 1 when the id is not found, when a removal failed, or when a provider could not be
//!   queried; in that last case the output says sandboxes may still be running. An id that is
//!   a prefix of several is bad usage, exit 2 (nothing is touched; the message names every
//!   candidate), as an ambiguous `sessions show` prefix is: the user has to type more.
//! - What was removed is told to the ledger of its session (by its `sandguard.session` label),
//!   when that session's journal is in this state directory: `sessions show` then says "removed
//!   by hand" instead of "claimed". It goes to the session's side file of stops, never its
//!   journal, so a live sidecar is neither waited for nor disturbed
//!   ([`crate::reclaim::stop::note_stops`], in the library). A sandbox is named as its claim named it (a
//!   Docker id prefix, `network/…`: [`reclaim::ledger_target`]), so the story has one line
//!   for it. This is best effort:
//!   the removal is done either way, and a ledger that cannot be written is a warning that
//!   changes neither the output nor the exit status. A dry run writes nothing.

use serde::Serialize;

use super::output::{self, sanitize, ErrorJson, Exit, ResultJson};
use super::Error;
use crate::config::Settings;
use crate::providers::{Refusal, Registry, Sandbox};
use crate::reclaim::stop::{self, Asked, Chosen, Miss, NotFound};
use crate::reclaim::{self, ListFailure, Options, Removal};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The sandbox to remove: its id, or a unique prefix of it
    #[arg(
        value_name = "INSTANCE_ID",
        required_unless_present = "all",
        conflicts_with = "all",
        value_parser = instance_id
    )]
    id: Option<String>,
    /// Remove every managed sandbox (narrowed by --provider and --session)
    #[arg(long)]
    all: bool,
    /// Only this provider
    #[arg(long, value_name = "P")]
    provider: Option<String>,
    /// Only the sandboxes of this session
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Say what would be removed, remove nothing
    #[arg(long)]
    dry_run: bool,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

/// `ID` as typed: an id or a prefix of one, so never what no id can start with (empty, `.`,
/// `..`, a `/`, whitespace: [`crate::providers::ids::structural_refusal`]). Bad usage (exit
/// 2), checked before anything is listed: the empty string is a prefix of every id.
fn instance_id(id: &str) -> Result<String, Refusal> {
    match crate::providers::ids::structural_refusal(id) {
        Some(why) => Err(Refusal(why.to_string())),
        None => Ok(id.to_string()),
    }
}

#[derive(Serialize)]
struct StopJson<'a> {
    dry_run: bool,
    results: Vec<ResultJson<'a>>,
    errors: Vec<ErrorJson<'a>>,
    /// True only when every target is gone and every provider answered.
    clean: bool,
}

pub(super) async fn run(
    args: Args,
    settings: &Settings,
    registry: &Registry,
) -> Result<Exit, Error> {
    let session = match &args.session {
        Some(s) => Some(super::sessions::session_arg("--session", s)?),
        None => None,
    };
    let providers = registry.select(args.provider.as_deref())?;
    let root = settings
        .state_dir
        .exists()
        .then(|| settings.state_dir.clone());
    let asked = match &args.id {
        Some(id) => Asked::Id(id),
        None => Asked::All,
    };
    let Chosen {
        targets,
        kept,
        failures,
    } = match stop::choose(&providers, root, session.as_deref(), asked).await {
        Ok(chosen) => chosen,
        Err(NotFound {
            miss,
            message,
            failures,
        }) => {
            report_not_found(&args, &message, &failures);
            return Ok(match miss {
                Miss::Nothing => Exit::Failure,
                Miss::Ambiguous => Exit::Usage,
            });
        }
    };
    let removals = if args.dry_run {
        Vec::new()
    } else {
        reclaim::remove_all(
            &providers,
            targets.clone(),
            &Options::from(&settings.reclaim),
        )
        .await
    };
    stop::note_stops(&settings.state_dir, &providers, &removals);
    let clean = failures.is_empty() && removals.iter().all(|r| r.outcome.is_final());
    if args.json {
        print_json(&args, &targets, &kept, &removals, &failures, clean);
    } else {
        print_kept(&kept);
        print_text(&args, &targets, &removals, &failures);
    }
    Ok(Exit::clean_if(clean))
}

/// One line on stderr for each sandbox `stop --all` left, with why.
fn print_kept(kept: &[(Sandbox, String)]) {
    for (s, why) in kept {
        eprintln!(
            "kept {} {} {}: {why}",
            s.provider,
            s.kind.as_str(),
            output::display_id(s)
        );
    }
}

fn report_not_found(args: &Args, message: &str, failures: &[ListFailure]) {
    if args.json {
        output::emit_json(&serde_json::json!({
            "dry_run": args.dry_run,
            "results": [],
            "errors": failures.iter().map(ErrorJson::from).collect::<Vec<_>>(),
            "not_found": message,
            "clean": false,
        }));
    } else {
        eprintln!("sandguard: {message}");
        eprint!(
            "{}",
            output::failure_lines(failures, "it may be there and still running")
        );
    }
}

fn print_json(
    args: &Args,
    targets: &[Sandbox],
    kept: &[(Sandbox, String)],
    removals: &[Removal],
    failures: &[ListFailure],
    clean: bool,
) {
    let kept = kept
        .iter()
        .map(|(s, why)| ResultJson::untouched(s, "kept", Some(why.as_str())));
    let results: Vec<ResultJson> = if args.dry_run {
        targets
            .iter()
            .map(|s| ResultJson::untouched(s, "would_remove", None))
            .collect()
    } else {
        removals.iter().map(ResultJson::of).collect()
    };
    let results = results.into_iter().chain(kept).collect();
    output::emit_json(&StopJson {
        dry_run: args.dry_run,
        results,
        errors: failures.iter().map(ErrorJson::from).collect(),
        clean,
    });
}

fn print_text(args: &Args, targets: &[Sandbox], removals: &[Removal], failures: &[ListFailure]) {
    let mut text = String::new();
    let describe = |s: &Sandbox| {
        format!(
            "{} {} {}",
            s.provider,
            s.kind.as_str(),
            output::display_id(s)
        )
    };
    if args.dry_run {
        for s in targets {
            text.push_str(&format!(
                "would remove {} (session {})\n",
                describe(s),
                sanitize(s.session().unwrap_or("-"))
            ));
        }
        text.push_str(&format!(
            "{} would be removed (dry run: nothing was touched).\n",
            targets.len()
        ));
    } else {
        for r in removals {
            let line = match r.outcome.error() {
                Some(e) => format!(
                    "{} {}: {}\n",
                    r.outcome.as_str(),
                    describe(&r.sandbox),
                    sanitize(e)
                ),
                None => format!("{} {}\n", r.outcome.as_str(), describe(&r.sandbox)),
            };
            text.push_str(&line);
        }
        let ok = removals.iter().filter(|r| r.outcome.is_success()).count();
        let failed = removals.len() - ok;
        text.push_str(&match (removals.len(), failed) {
            (0, _) if failures.is_empty() => "Nothing to stop.\n".to_string(),
            (0, _) => "Nothing to stop on the providers that answered.\n".to_string(),
            (_, 0) => format!("{ok} stopped.\n"),
            _ => format!("{ok} stopped, {failed} could not be removed and may still be running.\n"),
        });
    }
    text.push_str(&output::failure_lines(
        failures,
        "sandboxes there may still be running",
    ));
    output::emit(&text);
}
