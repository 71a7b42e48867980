//! `sandguard stop ID` and `sandguard stop --all`: list afresh, then remove through the one
//! reclaim path.
//!
//! - `ID` matches a managed sandbox's full id or a unique prefix of it (the table shows Docker
//!   ids cut to 12 characters). An `ID` no id can start with (empty, `.`, `..`, with a `/`
//!   or whitespace) is bad usage, exit 2, before anything is listed. Only sandboxes carrying `sandguard.session` can be found: a
//!   stranger's container is "not found", never removed.
//! - `--all` removes every managed sandbox (instances, then networks, then volumes), narrowed by
//!   `--provider` and `--session`; `--dry-run` lists what would go and touches nothing.
//! - **On a shared engine** (issue 56), `--all` keeps its contract (it stops all) but tells
//!   whose each sandbox is, by the one judgement (rule 8 of [`crate::ownership`]): orphaned
//!   (its owner proven dead, or its session over in this ledger), the user's own (its session
//!   in this user's ledger, or a live owner running as this user), or *theirs*: a live owner
//!   running as another user, or an owner that cannot be judged from here (another machine,
//!   boot or pid namespace, no owner named). Unknown is not dead and may be anybody's, so it is
//!   counted with theirs, apart: the question says how many of each.
//!   - on a terminal (stdin and stderr both), no `--yes`: before anything is removed, it
//!     names theirs on stderr,
//!     says how many of each, and asks `[y/N]`. Only `y` or `yes` (any case) takes them; any
//!     other answer, an empty line or the end of input keeps them (`kept …: … (you answered
//!     no)`; `--json`: outcome `kept`) and the rest is stopped. A "no" is the user's choice,
//!     not a failure: the exit code is what the rest made it (0 when it all went).
//!   - `--yes`: no question (as `docker system prune -f`).
//!   - not on a terminal (stdin or stderr elsewhere: a script, CI, a log), no `--yes`: the
//!     contract holds, all is stopped, and one line on stderr says how many were theirs and
//!     that nobody was asked; a script that wants the safe side says `--dead`.
//!   - `--dry-run` never asks: it lists them as would-be removed and says how many were theirs.
//! - `--dead` takes only the orphaned: never a live owner's, nor an unknown one's (unknown is
//!   not dead), nor one whose `sandguard.expires` passed while its owner lives (the sweep's).
//!   The rest is kept and said so (`kept …: its owner lives`). It narrows `--all` as
//!   `--session` and `--provider` do, and with them; it asks nothing. `--dead` and `--yes`
//!   without `--all` are bad usage (exit 2).
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

use std::io::{IsTerminal, Write};

use serde::Serialize;

use super::output::{self, sanitize, ErrorJson, Exit, ResultJson};
use super::Error;
use crate::config::Settings;
use crate::ownership::Only;
use crate::providers::{Refusal, Registry, Sandbox};
use crate::reclaim::stop::{self, Answer, Asked, Chosen, Miss, NotFound};
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
    /// Only what dead owners left: owner proven dead, or session over (for scripts and
    /// shared hosts; never a live owner's, nor one that cannot be judged from here)
    #[arg(long, conflicts_with = "id")]
    dead: bool,
    /// Do not ask before stopping the sandboxes of other users' live owners (and of owners
    /// that cannot be judged from here)
    #[arg(long, conflicts_with = "id")]
    yes: bool,
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
    let asked = match (&args.id, args.dead) {
        (Some(id), _) => Asked::Id(id),
        (None, false) => Asked::All(Only::All),
        (None, true) => Asked::All(Only::Dead),
    };
    let mut chosen = match stop::choose(&providers, root, session.as_deref(), asked).await {
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
    settle_theirs(&args, &mut chosen).await?;
    let Chosen {
        targets,
        kept,
        failures,
        ..
    } = chosen;
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

/// What `stop --all` does with the sandboxes of other users' live owners and of owners that
/// cannot be judged from here: asks on a terminal, else takes them (the contract), saying so.
/// See the module docs.
async fn settle_theirs(args: &Args, chosen: &mut Chosen) -> Result<(), Error> {
    if chosen.theirs.is_empty() || args.yes {
        chosen.settle(Answer::Yes);
        return Ok(());
    }
    let counted = counted(chosen);
    if args.dry_run {
        eprintln!("sandguard: {counted}; a run on a terminal asks before stopping them");
        chosen.settle(Answer::Yes);
    } else if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        // A question nobody would see (stderr elsewhere) is no question either.
        eprintln!(
            "sandguard: {counted}; not on a terminal, so nobody was asked and all are stopped \
             (--dead stops only what dead owners left; --yes says this is meant)"
        );
        chosen.settle(Answer::Yes);
    } else {
        let mut question = String::new();
        for (s, why) in &chosen.theirs {
            question.push_str(&format!(
                "  {} {} {} (session {}): {why}\n",
                s.provider,
                s.kind.as_str(),
                output::display_id(s),
                sanitize(s.session().unwrap_or("-"))
            ));
        }
        question.push_str(&format!("sandguard: {counted}.\nStop them too? [y/N] "));
        chosen.settle(ask(question).await?);
    }
    Ok(())
}

/// "of the 4 sandboxes to stop, 1 belongs to a live owner that is not you and 1 to an owner
/// that cannot be judged from here (…)".
fn counted(chosen: &Chosen) -> String {
    let (others, unknown) = chosen.theirs_counted();
    let total = chosen.targets.len() + chosen.theirs.len();
    let others_said = match others {
        0 => None,
        1 => Some("1 belongs to a live owner that is not you".to_string()),
        n => Some(format!("{n} belong to live owners that are not you")),
    };
    let unknown_said = (unknown > 0).then(|| {
        let verb = match (others, unknown) {
            (1.., _) => "",
            (0, 1) => "belongs ",
            (0, _) => "belong ",
        };
        let whom = if unknown == 1 { "an owner" } else { "owners" };
        format!(
            "{unknown} {verb}to {whom} that cannot be judged from here (another machine, boot or \
             pid namespace, or none named)"
        )
    });
    let said: Vec<String> = [others_said, unknown_said].into_iter().flatten().collect();
    let sandboxes = if total == 1 { "sandbox" } else { "sandboxes" };
    format!("of the {total} {sandboxes} to stop, {}", said.join(" and "))
}

/// Asks `question` on stderr and reads the answer on stdin, a terminal: only `y` or `yes`
/// (any case) is yes; anything else, the end of input included, is no.
async fn ask(question: String) -> Result<Answer, Error> {
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(question.as_bytes())
        .and_then(|()| err.flush());
    drop(err);
    // A blocking read, off the runtime's threads; awaited, so it ends with the command.
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| Error::Failed(format!("cannot read the answer: {e}")))??;
    Ok(match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Yes,
        _ => Answer::No,
    })
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
