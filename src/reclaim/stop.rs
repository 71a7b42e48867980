//! What `sandguard stop` takes, decided by the one judgement: the library half of the
//! command (the CLI prints; the model test of the trust rules calls the same function).
//!
//! - Every configured provider is listed once (by the session's label with `--session`, else
//!   by every sandguard label). A container whose label was only inherited from an image, and
//!   does not count ([`crate::ownership::Facts::label_counts`]), is left out, as a stranger's
//!   is: "not found".
//! - `stop ID` takes the one managed sandbox whose id is `ID` or starts with it. An id that
//!   names nothing by itself (empty, `.`, `..`, with a `/`) is never a prefix: not found (the
//!   CLI refuses it before, as bad usage). A prefix of several ids is [`Miss::Ambiguous`],
//!   apart from [`Miss::Nothing`], so the CLI can tell "type more" (bad usage) from "not
//!   there".
//! - Then the judgement: `stop ID` removes what the user named, detached or not; `stop --all`
//!   keeps every detached sandbox (by its label or by a `detach` in any session's ledger),
//!   with the reason, and takes what [`Only`] says (rule 8 of [`crate::ownership`]).
//! - `stop --all` (all of it, [`Only::All`]) sets apart what it takes only because all was
//!   asked for: the sandboxes of other users' live owners and of owners that cannot be judged
//!   from here, those the same judgement keeps when asked for [`Only::OwnOrDead`] (the answer
//!   "no"). They wait in [`Chosen::theirs`] until the caller [`Chosen::settle`]s them: the CLI
//!   asks on a terminal, and takes them without asking (the contract) when it cannot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{list_all, ListFailure, Removal};
use crate::labels::Selector;
use crate::ledger::{Record, StateDir};
use crate::ownership::known::Known;
use crate::ownership::{self, Asker, Only, Reason};
use crate::providers::{Provider, Sandbox};
use crate::session::SessionId;

/// What the user asked `stop` for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Asked<'a> {
    /// One sandbox, by its id or a unique prefix.
    Id(&'a str),
    /// Every managed sandbox (of the session, with one), as far as `Only` says.
    All(Only),
}

/// What `stop` removes, what it keeps and why, and the providers it could not list.
#[derive(Debug, Default)]
pub(crate) struct Chosen {
    pub targets: Vec<Sandbox>,
    /// What `stop --all` takes only once the user agrees (or nobody can be asked), with why:
    /// other users' live owners' sandboxes, and those whose owner cannot be judged from here.
    pub theirs: Vec<(Sandbox, Reason)>,
    pub kept: Vec<(Sandbox, String)>,
    pub failures: Vec<ListFailure>,
}

/// The answer about [`Chosen::theirs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Take them: a yes, `--yes`, or nobody to ask (the contract).
    Yes,
    /// Keep them.
    No,
}

impl Chosen {
    /// How many of [`Chosen::theirs`] belong to other users' live owners, and how many to
    /// owners that cannot be judged from here.
    pub(crate) fn theirs_counted(&self) -> (usize, usize) {
        let others = self
            .theirs
            .iter()
            .filter(|(_, why)| matches!(why, Reason::NotYours { .. }))
            .count();
        (others, self.theirs.len() - others)
    }

    /// Takes [`Chosen::theirs`] too, or keeps them saying so, as `answer` says.
    pub(crate) fn settle(&mut self, answer: Answer) {
        for (s, why) in std::mem::take(&mut self.theirs) {
            match answer {
                Answer::Yes => self.targets.push(s),
                Answer::No => self.kept.push((s, format!("{why} (you answered no)"))),
            }
        }
    }
}

/// What the judgement makes of one candidate.
enum Fate {
    Take,
    /// Taken only with the user's yes (see [`Chosen::theirs`]).
    Theirs(Reason),
    Keep(Reason),
}

/// `stop ID` found nothing, or several.
#[derive(Debug)]
pub(crate) struct NotFound {
    pub miss: Miss,
    pub message: String,
    pub failures: Vec<ListFailure>,
}

/// How `stop ID` missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No managed sandbox has that id or starts with it.
    Nothing,
    /// Several do (the message names them).
    Ambiguous,
}

/// Lists, picks and judges; see the module docs. `state`: the state directory, when there is
/// one (its ledger says what was detached, and when sessions ended).
pub(crate) async fn choose(
    providers: &[Arc<dyn Provider>],
    state: Option<PathBuf>,
    session: Option<&str>,
    asked: Asked<'_>,
) -> Result<Chosen, NotFound> {
    let selector = session.map_or_else(Selector::managed, Selector::session);
    let (mut found, failures) = list_all(providers, &selector).await;
    let known = Known::lazy(state, providers);
    found.retain(|s| known.label_counts(s));
    let (candidates, asker) = match asked {
        Asked::Id(id) => match pick(found, id) {
            Ok(one) => (vec![one], Asker::StopNamed),
            Err((miss, message)) => {
                return Err(NotFound {
                    miss,
                    message,
                    failures,
                })
            }
        },
        Asked::All(only) => (found, Asker::StopAll { only }),
    };
    let mut chosen = Chosen {
        failures,
        ..Chosen::default()
    };
    for s in candidates {
        match fate(asker, &known, &s) {
            Fate::Take => chosen.targets.push(s),
            Fate::Theirs(why) => chosen.theirs.push((s, why)),
            Fate::Keep(why) => chosen.kept.push((s, why.to_string())),
        }
    }
    Ok(chosen)
}

/// The judgement of one candidate, from one set of facts; for all of `stop --all`, asked
/// again as the answer "no" would ask, to tell the user's own and the orphaned from theirs.
fn fate(asker: Asker<'_>, known: &Known, s: &Sandbox) -> Fate {
    let facts = known.facts(s);
    let judgement = ownership::judge(asker, &facts);
    if !judgement.removes() {
        return Fate::Keep(judgement.reason);
    }
    if asker != (Asker::StopAll { only: Only::All }) {
        return Fate::Take;
    }
    let only_own = ownership::judge(
        Asker::StopAll {
            only: Only::OwnOrDead,
        },
        &facts,
    );
    if only_own.removes() {
        Fate::Take
    } else {
        Fate::Theirs(only_own.reason)
    }
}

/// The one sandbox `id` names: an exact id, else a unique prefix; never an id that names
/// nothing by itself.
fn pick(found: Vec<Sandbox>, id: &str) -> Result<Sandbox, (Miss, String)> {
    if id.is_empty() || id == "." || id == ".." || id.contains('/') {
        return Err((Miss::Nothing, format!("{id:?} names no sandbox")));
    }
    if let Some(exact) = found.iter().find(|s| s.id == id) {
        return Ok(exact.clone());
    }
    let mut matches: Vec<Sandbox> = found.into_iter().filter(|s| s.id.starts_with(id)).collect();
    match matches.len() {
        0 => Err((Miss::Nothing, format!("no managed sandbox {id:?} found"))),
        1 => Ok(matches.remove(0)),
        _ => Err((
            Miss::Ambiguous,
            format!(
                "{id:?} is ambiguous: it matches {}",
                matches
                    .iter()
                    .map(|s| format!("{} {}", s.provider, s.id.escape_debug()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Tells each session's ledger what `stop` removed from it, in the session's side file of
/// stops ([`StateDir::note_stopped`]), when that session's journal is in `state_dir`. Best
/// effort: a ledger that cannot be written is a warning (the removal is done either way).
pub(crate) fn note_stops(state_dir: &Path, providers: &[Arc<dyn Provider>], removals: &[Removal]) {
    let mut by_session: BTreeMap<&str, Vec<&Removal>> = BTreeMap::new();
    for r in removals.iter().filter(|r| r.outcome.is_success()) {
        if let Some(session) = r.sandbox.session() {
            by_session.entry(session).or_default().push(r);
        }
    }
    // No state directory: no session of ours to tell (and none is created for this).
    if by_session.is_empty() || !state_dir.exists() {
        return;
    }
    let state = match StateDir::open(state_dir) {
        Ok(state) => state,
        Err(e) => return tracing::warn!("cannot record the stops in the ledger: {e}"),
    };
    for (session, removed) in by_session {
        // A label that is not a session id names no journal; a session whose journal is not
        // here is another machine's (or was pruned).
        if SessionId::parse(session).is_err() {
            continue;
        }
        let Ok(view) = state.read_session(session) else {
            continue;
        };
        let records: Vec<Record> = removed
            .iter()
            .map(|r| Record::Stopped {
                provider: r.sandbox.provider.clone(),
                id: super::ledger_target(
                    providers,
                    &r.sandbox,
                    view.claims.iter().chain(&view.detached),
                )
                .id,
                outcome: r.outcome.as_str().to_string(),
            })
            .collect();
        if let Err(e) = state.note_stopped(session, &records) {
            tracing::warn!("cannot record the stops of session {session} in the ledger: {e}");
        }
    }
}
