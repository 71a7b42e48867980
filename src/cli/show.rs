//! `sandguard sessions show ID [--json]`: one session from the local ledger, and for each
//! sandbox it knew (containers, networks, volumes, cloud sandboxes) one line in plain words of
//! what happened to it and why, from the journal ([`crate::ledger::story`]).
//!
//! ```text
//! Session 5d1c…: reclaimed: owner killed by SIGKILL. Owner dead (pid 4242); no sidecar.
//! PROVIDER   KIND      ID                  WHAT HAPPENED
//! docker     instance  3f2a9c0e11b2         removed: owner killed by SIGKILL (claimed)
//! docker     network   network/8c1e07aa5b3d removed: owner killed by SIGKILL (claimed)
//! docker     volume    volume/sg-cache      removed: owner killed by SIGKILL (claimed)
//! ```
//!
//! Decisions:
//! - This is where a session's networks and volumes are seen, not `ps`: `ps` answers "what
//!   runs now" from the providers, this answers "what did this session bring into being and
//!   what became of it", which the journal knows for every kind (the Docker proxy journals a
//!   claim for each network and volume it creates), even once they are gone.
//! - Only the journal's facts are told (see [`crate::ledger::story`]): "owner exited", never an
//!   exit status the journal does not hold. A claim with nothing after it is phrased with what
//!   is known now: whether a sidecar holds the session's lock, and the owner's liveness as
//!   judged here.
//! - A session not yet over may have sandboxes stamped with its label only, which its journal
//!   names once a reclaim finds them: the text says so and points to `ps --session ID`.
//! - The kind is read from the claim's form (`network/…`, `volume/…`, as Docker claims are
//!   written); anything else is an instance.
//! - What `sandguard stop` removed by hand is told as such ("removed by hand"), from the
//!   session's side file of stops ([`crate::ledger::StateDir::note_stopped`]); a stop made
//!   against another machine's state directory is not known here.
//! - An id that is malformed is bad usage (exit 2); a well-formed one with no journal is exit 1.
//! - `--json` is the `sessions --json` row of the session plus `ending` and `sandboxes`
//!   (`provider`, `id`, `kind`, `origin`, `fate`, `cause`, `detail`, `words`).

use serde::Serialize;

use super::output::{self, sanitize, Exit};
use super::sessions::{row, SessionJson};
use super::Error;
use crate::config::Settings;
use crate::identity::Liveness;
use crate::ledger::story::{Fate, Origin, SandboxStory};
use crate::ledger::{LedgerError, SessionState, SessionView, StateDir};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session's id (as `sandguard sessions` lists it)
    #[arg(value_name = "ID")]
    id: String,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct ShowJson {
    #[serde(flatten)]
    session: SessionJson,
    /// How the session's last reclaim came about; `null`: never reclaimed.
    ending: Option<EndingJson>,
    sandboxes: Vec<SandboxJson>,
    /// Providers a reclaim could not list (their sandboxes are pending), with the error.
    unlisted: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize)]
struct EndingJson {
    cause: &'static str,
    words: String,
}

#[derive(Serialize)]
struct SandboxJson {
    provider: String,
    id: String,
    kind: &'static str,
    /// `claimed`, or `labelled` (found by a reclaim's listing of the session's label).
    origin: &'static str,
    /// `removed`, `gone`, `released`, `detached`, `refused`, `pending`, `stopped`, `claimed`.
    fate: &'static str,
    /// For `removed` and `gone`: the reclaim's cause (as `ending.cause`).
    cause: Option<&'static str>,
    /// The error of a `pending` sandbox, or the reason of a `refused` one.
    detail: Option<String>,
    /// The line the text output prints.
    words: String,
}

pub fn run(args: Args, settings: &Settings) -> Result<Exit, Error> {
    crate::session::SessionId::parse(&args.id)
        .map_err(|e| Error::Usage(format!("sessions show: {e}")))?;
    let state = StateDir::open(&settings.state_dir)?;
    let (view, story) = match state.read_history(&args.id) {
        Err(LedgerError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Failed(format!(
                "no session {} in the ledger ({})",
                args.id,
                settings.state_dir.display()
            )))
        }
        other => other?,
    };
    let judge = state.judge();
    let owner = judge.label(&view.owner);
    let sandboxes: Vec<SandboxJson> = story
        .sandboxes
        .iter()
        .map(|s| sandbox(s, &view, owner))
        .collect();
    let ending = story.ending.as_ref().map(|e| EndingJson {
        cause: e.as_str(),
        words: e.words(),
    });
    let unlisted = view.unlisted.clone();
    if args.json {
        output::emit_json(&ShowJson {
            session: row(view, &judge),
            ending,
            sandboxes,
            unlisted,
        });
    } else {
        output::emit(&text(&view, owner, ending.as_ref(), &sandboxes));
    }
    Ok(Exit::Ok)
}

fn sandbox(s: &SandboxStory, view: &SessionView, owner: Liveness) -> SandboxJson {
    let (cause, detail) = match &s.fate {
        Fate::Removed { ending, .. } => (Some(ending.as_str()), None),
        Fate::Pending(e) | Fate::Refused(e) => (None, Some(e.clone())),
        _ => (None, None),
    };
    SandboxJson {
        provider: s.target.provider.clone(),
        id: s.target.id.clone(),
        kind: kind(&s.target.id),
        origin: match s.origin {
            Origin::Claimed => "claimed",
            Origin::Labelled => "labelled",
        },
        fate: s.fate.as_str(),
        cause,
        detail,
        words: words(s, view, owner),
    }
}

/// The kind a claim's form names (Docker's `network/…`, `volume/…`).
fn kind(id: &str) -> &'static str {
    match id.split_once('/') {
        Some(("network", _)) => "network",
        Some(("volume", _)) => "volume",
        _ => "instance",
    }
}

/// The id as the table shows it: a full Docker id (after `network/`, if any) cut to 12
/// characters, as `ps` and `docker ps` show them; `--json` has it whole.
fn short_id(provider: &str, id: &str) -> String {
    let (prefix, rest) = match id.split_once('/') {
        Some((p, rest)) => (format!("{p}/"), rest),
        None => (String::new(), id),
    };
    let full = rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit());
    if provider == "docker" && full {
        format!("{prefix}{}", &rest[..12])
    } else {
        sanitize(id).into_owned()
    }
}

/// What happened to one sandbox, in plain words.
fn words(s: &SandboxStory, view: &SessionView, owner: Liveness) -> String {
    let origin = match s.origin {
        Origin::Claimed => "claimed",
        Origin::Labelled => "found by its session label",
    };
    match &s.fate {
        Fate::Removed {
            ending,
            gone: false,
        } => format!("removed: {} ({origin})", ending.words()),
        Fate::Removed { ending, gone: true } => format!(
            "gone: already gone when reclaimed: {} ({origin})",
            ending.words()
        ),
        Fate::Released => "removed by the program itself (released)".into(),
        Fate::Stopped { gone: false } => format!("removed by hand (sandguard stop) ({origin})"),
        Fate::Stopped { gone: true } => {
            format!("gone: already gone when sandguard stop came for it ({origin})")
        }
        Fate::Detached => "left: detached by the program; only its TTL ends it".into(),
        Fate::Refused(reason) => format!("refused, never acted upon: {}", sanitize(reason)),
        Fate::Pending(error) => format!(
            "left: could not be removed ({}); `sandguard sweep` retries",
            sanitize(error)
        ),
        Fate::Claimed => still_claimed(view, owner),
    }
}

/// A claim with nothing after it, phrased with what is known now.
fn still_claimed(view: &SessionView, owner: Liveness) -> String {
    if view.state.is_final() {
        return format!(
            "claimed; the session ended {} with no record of its removal",
            view.state
        );
    }
    if view.state == SessionState::Reclaiming {
        return if view.sidecar_alive {
            "claimed, being reclaimed now".into()
        } else {
            "left: claimed; a reclaim started and never finished, the next sweep finishes it".into()
        };
    }
    match (view.sidecar_alive, owner) {
        (true, Liveness::Alive) => "left: claimed, owner alive, its sidecar watches".into(),
        (true, _) => "left: claimed, its sidecar watches the owner".into(),
        (false, Liveness::Dead) => {
            "left: claimed, owner dead and no sidecar; the next sweep reclaims it".into()
        }
        (false, Liveness::Alive) => {
            "left: claimed, owner alive but no sidecar; a sweep adopts it".into()
        }
        (false, Liveness::Unknown) => {
            "left: claimed, no sidecar, owner cannot be judged from here; only its TTL ends it"
                .into()
        }
    }
}

fn text(
    view: &SessionView,
    owner: Liveness,
    ending: Option<&EndingJson>,
    sandboxes: &[SandboxJson],
) -> String {
    let how = match (view.state, ending) {
        (SessionState::Active, _) | (_, None) => String::new(),
        (_, Some(e)) => format!(": {}", e.words),
    };
    let sidecar = if view.sidecar_alive {
        "its sidecar is alive"
    } else {
        "no sidecar"
    };
    let mut out = format!(
        "Session {}: {}{how}. Owner {} (pid {}); {sidecar}.\n",
        sanitize(&view.id),
        view.state,
        owner.as_str(),
        view.pid,
    );
    if sandboxes.is_empty() {
        out.push_str("No sandboxes recorded in its journal.\n");
    } else {
        let rows: Vec<Vec<String>> = sandboxes
            .iter()
            .map(|s| {
                vec![
                    sanitize(&s.provider).into_owned(),
                    s.kind.to_string(),
                    short_id(&s.provider, &s.id),
                    s.words.clone(),
                ]
            })
            .collect();
        out.push_str(&output::table(
            &["PROVIDER", "KIND", "ID", "WHAT HAPPENED"],
            &rows,
        ));
    }
    if !view.state.is_final() {
        // The journal learns of a sandbox stamped with the session's label only when a
        // reclaim finds it; until then the providers know it.
        out.push_str(&format!(
            "Sandboxes carrying only its label are in the journal once a reclaim finds them; now: sandguard ps --session {}\n",
            sanitize(&view.id)
        ));
    }
    for (provider, error) in &view.unlisted {
        out.push_str(&format!(
            "left: {} was not listed ({}); its sandboxes are pending for `sandguard sweep`\n",
            sanitize(provider),
            sanitize(error)
        ));
    }
    out
}
