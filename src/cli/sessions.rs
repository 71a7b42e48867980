//! `sandguard sessions [--json]`: the local ledger: each session's state, owner, the claims it
//! holds, and whether its sidecar is alive (judged by the session lock, not by a pid).
//!
//! Decision (the claims column): the table's `HELD` column (once `CLAIMS`, which read as "how
//! many sandboxes this session has") counts the session's claims it still holds: sandboxes it
//! claimed (by a `claim` line, `sandguard claim` or a proxy's create) and has not since
//! released, detached or seen removed, as `claims` in `--json` lists them. A sandbox that
//! carries only the session's label is not counted (the journal learns of it only when a
//! reclaim finds it), nor a detached one, so an ended session holds 0. A line under the table
//! says so, and points to `sessions show ID` for every sandbox. `--fleet` counts the claims the
//! store mirrors, under the same name and note.
//!
//! Decisions (the list): the newest session first, as `docker ps` and `git log` put what a
//! user just did on top. On a terminal at most 20 rows unless `--limit N` says otherwise
//! (`--limit 0`: all), with a line counting the older ones not shown; piped, and with
//! `--json`, all unless `--limit` is given (a script reads everything), and `--json` says
//! `not_shown`. `--state` keeps one state (`active`, `reclaiming`, `pending`, `reclaimed`,
//! `clean`; anything else is bad usage, exit 2). What `sandguard stop` removed by hand is no
//! longer held: `HELD` and `claims` leave it out ([`held`]).
//!
//! Decision (the spend column): `SPEND` is the session's sandbox time
//! ([`crate::ledger::spend`]: each sandbox from its claim, or first sight, to its removal or
//! release; the alive ones until now, counted in brackets), as `sandguard report` counts it;
//! `--json` has it as `spend` (seconds as numbers, and `by_provider`). Telling it reads each
//! listed session's story, as `sessions show` does: only the rows shown, so a terminal's 20
//! rows cost 20 reads. `--fleet` has it too, as the session's host last wrote it to the
//! store (`super::fleet`). Where prices are configured ([`crate::ledger::price`]) the cell
//! adds the estimate (`1h24m ~$0.07`), a note under the table says it is one, and `spend`
//! has an `estimate` object (as `sandguard report`'s groups do, `super::report`); without
//! prices both are as they were (the fleet store keeps time only).
//!
//! `sandguard sessions --prune [--older-than D]` deletes the sessions that ended (reclaimed or
//! clean) more than D ago (default: `[sweep] prune_after`, 7 days), as every sweep does; a
//! pending session, or one whose sidecar lives, is never deleted.
//!
//! `sandguard sessions show ID [--json]`: one session, and what happened to each of its
//! sandboxes and why (`show.rs`).
//!
//! `sandguard sessions --fleet [--json]`: every session of the fleet store instead (host,
//! owner, state, lease left, claims, spend: `super::fleet`); a store that cannot be read is
//! exit 1, never an empty list.

use serde::Serialize;

use super::output::{self, sanitize, Exit};
use super::Error;
use crate::config::Settings;
use crate::identity::Liveness;
use crate::ledger::price::Prices;
use crate::ledger::spend::{Share, Spend};
use crate::ledger::{SessionState, SessionView, StateDir};
use crate::timefmt;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(super) struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Delete the sessions that ended longer ago than --older-than (never a pending one)
    #[arg(long)]
    prune: bool,
    /// With --prune: how long ago (default: [sweep] prune_after, 7d)
    #[arg(long, value_name = "D", requires = "prune")]
    older_than: Option<crate::config::HumanDuration>,
    /// The sessions of the fleet store ([fleet] store), on every machine
    #[arg(long, conflicts_with = "prune")]
    fleet: bool,
    /// Show at most N sessions, the newest first (0: all; default: 20 on a terminal, else all)
    #[arg(long, value_name = "N", conflicts_with_all = ["prune", "fleet"])]
    limit: Option<usize>,
    /// Only the sessions in this state
    #[arg(long, value_name = "STATE", value_parser = state_arg, conflicts_with_all = ["prune", "fleet"])]
    state: Option<SessionState>,
}

/// How many sessions a table on a terminal shows when `--limit` is not given.
const TERMINAL_LIMIT: usize = 20;

/// A `--state` that names none of the ledger's states.
#[derive(Debug, thiserror::Error)]
#[error("unknown state {0:?}: expected active, reclaiming, pending, reclaimed or clean")]
struct UnknownState(String);

/// `--state`: one of the ledger's states, as the table spells them.
fn state_arg(s: &str) -> Result<SessionState, UnknownState> {
    SessionState::parse(s).ok_or_else(|| UnknownState(s.to_string()))
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// One session: what happened to each of its sandboxes, and why
    Show(super::show::Args),
}

#[derive(Serialize)]
pub(super) struct SessionJson {
    session: String,
    state: String,
    owner: String,
    owner_alive: Option<bool>,
    sidecar_alive: bool,
    started_at: String,
    claims: Vec<ClaimJson>,
    pending: Vec<ClaimJson>,
    /// Sandbox time ([`crate::ledger::spend`]), alive sandboxes counted until now.
    spend: super::report::SpendJson,
    /// The spend's total, for the table.
    #[serde(skip)]
    total: Share,
}

#[derive(Serialize)]
pub(super) struct ClaimJson {
    pub(super) provider: String,
    pub(super) id: String,
}

/// A session id as a command was given it (`what`: the flag or command, for the message),
/// checked by the one rule ([`crate::session::SessionId::parse`]): bad usage (exit 2)
/// otherwise. `ps --session`, `stop --session` and `sessions show` all come here.
pub(super) fn session_arg(what: &str, id: &str) -> Result<String, Error> {
    crate::session::SessionId::parse(id)
        .map(|id| id.to_string())
        .map_err(|e| Error::Usage(format!("{what}: {e}")))
}

pub(super) fn run(args: Args, settings: &Settings) -> Result<Exit, Error> {
    if let Some(Command::Show(show)) = args.command {
        return super::show::run(show, settings);
    }
    if args.fleet {
        return super::fleet::sessions(args.json, settings);
    }
    let state = StateDir::open(&settings.state_dir)?;
    if args.prune {
        let age = args
            .older_than
            .map(|d| d.0)
            .or(settings.sweep.prune_after)
            .unwrap_or(std::time::Duration::from_secs(7 * 86_400));
        let before = crate::ledger::now_ms().saturating_sub(age.as_millis() as u64);
        let gone = state.prune(before)?;
        output::emit(&format!("{} ended sessions deleted.\n", gone.len()));
        return Ok(Exit::Ok);
    }
    let judge = state.judge();
    let mut views: Vec<SessionView> = state
        .sessions()?
        .into_iter()
        .filter(|v| args.state.is_none_or(|s| v.state == s))
        .collect();
    views.reverse(); // the newest first
    let limit = match args.limit {
        Some(0) => usize::MAX,
        Some(n) => n,
        None if !args.json && std::io::IsTerminal::is_terminal(&std::io::stdout()) => {
            TERMINAL_LIMIT
        }
        None => usize::MAX,
    };
    let not_shown = views.len().saturating_sub(limit);
    let rows: Vec<SessionJson> = views
        .into_iter()
        .take(limit)
        .map(|v| {
            let spend = spend_of(&state, &v, &settings.prices);
            row(held(&state, v), &spend, &judge)
        })
        .collect();
    if args.json {
        output::emit_json(&serde_json::json!({ "sessions": rows, "not_shown": not_shown }));
    } else if rows.is_empty() {
        output::emit(match args.state {
            Some(_) => "No sessions in that state.\n",
            None => "No sessions.\n",
        });
    } else {
        let mut text = table(&rows, output::colour::Paint::stdout());
        if not_shown > 0 {
            text.push_str(&format!(
                "{not_shown} older session(s) not shown (--limit 0 shows all).\n"
            ));
        }
        output::emit(&text);
    }
    Ok(Exit::Ok)
}

/// `view` with the claims `sandguard stop` removed by hand taken out of what it holds
/// ([`StateDir::stopped`]): a session whose sandboxes were all stopped holds none, though its
/// journal, which only its sidecar writes, still lists them as claims (a reclaim finds them
/// gone). A side file that cannot be read leaves the view as it is, with a warning.
pub(super) fn held(state: &StateDir, mut view: SessionView) -> SessionView {
    match state.stopped(&view.id) {
        Ok(stopped) => view.claims.retain(|t| !stopped.contains(t)),
        Err(e) => tracing::warn!("session {}: {e}", view.id),
    }
    view
}

/// The session's spend from its journal and side file of stops, until now; a session whose
/// history cannot be read (its view was) shows none, with a warning.
fn spend_of(state: &StateDir, view: &SessionView, prices: &Prices) -> Spend {
    match state.read_history(&view.id) {
        Ok((view, story)) => Spend::of(&view, &story, crate::ledger::now_ms(), prices),
        Err(e) => {
            tracing::warn!("session {}: {e}", view.id);
            Spend::default()
        }
    }
}

pub(super) fn row(
    v: crate::ledger::SessionView,
    spend: &Spend,
    judge: &crate::identity::Judge,
) -> SessionJson {
    let targets = |set: &mut dyn Iterator<Item = &crate::protocol::Target>| -> Vec<ClaimJson> {
        set.map(|t| ClaimJson {
            provider: t.provider.clone(),
            id: t.id.clone(),
        })
        .collect()
    };
    SessionJson {
        owner_alive: match judge.label(&v.owner) {
            Liveness::Alive => Some(true),
            Liveness::Dead => Some(false),
            Liveness::Unknown => None,
        },
        session: v.id.clone(),
        state: v.state.as_str().to_string(),
        owner: v.owner.clone(),
        sidecar_alive: v.sidecar_alive,
        started_at: timefmt::format_rfc3339((v.started_ms / 1000) as i64),
        claims: targets(&mut v.claims.iter()),
        pending: targets(&mut v.pending.keys()),
        spend: spend.into(),
        total: spend.total(),
    }
}

fn table(rows: &[SessionJson], paint: output::colour::Paint) -> String {
    let now = timefmt::now_unix();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                sanitize(&r.session).into_owned(),
                r.state.clone(),
                match r.owner_alive {
                    Some(true) => "alive",
                    Some(false) => "dead",
                    None => "unknown",
                }
                .to_string(),
                if r.sidecar_alive { "alive" } else { "-" }.to_string(),
                r.claims.len().to_string(),
                spend_cell(&r.total),
                timefmt::parse_rfc3339(&r.started_at)
                    .map(|t| timefmt::format_uptime(now - t))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    // STATE's and OWNER's words, coloured on a terminal.
    let mut text = output::painted_table(
        &[
            "SESSION", "STATE", "OWNER", "SIDECAR", "HELD", "SPEND", "AGE",
        ],
        &cells,
        &[1, 2],
        paint,
    );
    text.push_str(&held_note(""));
    text.push_str(SPEND_NOTE);
    let mut total = Share::default();
    rows.iter().for_each(|r| total.add(&r.total));
    if total.cost.is_some() {
        text.push_str(&super::report::cost_note(&total));
    }
    text
}

/// What the `SPEND` column counts (see the module docs).
const SPEND_NOTE: &str = "SPEND: sandbox time, from each claim to its removal, the alive ones \
                          until now; sandguard report sums it.\n";

/// A session's sandbox time, its estimated cost where it has one, and how many of its
/// sandboxes are alive.
pub(super) fn spend_cell(total: &Share) -> String {
    let mut cell = super::report::human(total.time);
    if let Some(cost) = total.cost {
        cell.push_str(&format!(" {cost}"));
    }
    if total.alive > 0 {
        cell.push_str(&format!(" ({} alive)", total.alive));
    }
    cell
}

/// What the `HELD` column counts (see the module docs); `where_`: where `sessions show` runs.
pub(super) fn held_note(where_: &str) -> String {
    format!(
        "HELD: claims the session still holds (claimed, not released, detached or removed \
         since); sandboxes found only by its label are not counted: {where_}sandguard sessions \
         show ID lists every one.\n"
    )
}
