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
//! - `ID` is a session id or a unique prefix of one, as `stop ID` takes a sandbox's: checked
//!   first by the one session-id rule ([`crate::session::SessionId::parse`]; `'a b'` is bad
//!   usage, exit 2), then matched against the ledger's journals: an exact id wins (so `abc`
//!   shows `abc` beside `abcd`), else the one id that starts with it. A prefix of several is bad
//!   usage (exit 2) naming every candidate, as `stop` says of an ambiguous sandbox id; a prefix
//!   of none is exit 1 ("no session … in the ledger"), as `stop`'s "not found" is.
//! - What ends a sandbox sandguard leaves (detached, or claimed by an owner that cannot be
//!   judged from here) is said per provider ([`what_ends_it`]), never "its TTL" on a provider
//!   that has none: Docker and Fly.io have no server-side lifetime (it runs until removed: `stop`,
//!   or a sweep once a `sandguard.expires` label on it has passed); E2B's, Daytona's and Tenki's
//!   timeouts end it (sandguard no longer renews them); Modal's is the `timeout` given at
//!   creation; a plugin's is the plugin's own, if it has one (this command asks no plugin).
//! - The session's sandbox time follows the table, one line per provider
//!   ([`crate::ledger::spend`], as `sandguard report` counts it: `Sandbox time: 12m00s.` then
//!   `  docker: 12m00s over 3 sandbox(es), 1 alive (2m00s so far)`); no line when it knew no
//!   sandbox. Where prices are configured ([`crate::ledger::price`]) each line adds its
//!   estimate (`Sandbox time: 12m00s, ~$0.07 estimated.`, `  e2b: 10m00s over 2 sandbox(es),
//!   ~$0.06`), and a last line says it is one, at today's prices, and how much time has no
//!   price (`super::report::cost_note`).
//! - The creates its limits refused are told under the table, per provider and limit, and
//!   in `--json` as `refused_creates` (`super::output::refusals` says how).
//! - `--json` is the `sessions --json` row of the session (its `spend` included) plus `ending` and `sandboxes`
//!   (`provider`, `id`, `kind`, `origin`, `fate`, `cause`, `detail`, `words`; `size` where
//!   the create named one; `seconds`, its own time as `spend` counts it, `null` when not
//!   known; `estimate` where it has a price), so a script can check each sandbox's time.

use serde::Serialize;

use super::output::refusals::{self, RefusedCreatesJson};
use super::output::{self, sanitize, Exit};
use super::sessions::{row, SessionJson};
use super::Error;
use crate::config::Settings;
use crate::identity::Liveness;
use crate::ledger::spend::{Share, Spend};
use crate::ledger::story::{Fate, Origin, SandboxStory};
use crate::ledger::{LedgerError, SessionState, SessionView, StateDir};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
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
    /// The creates its limits refused, per provider and limit (`output::refusals`).
    refused_creates: Vec<RefusedCreatesJson>,
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
    /// The size its create named (a template, a snapshot), where the cloud proxy read one.
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<String>,
    /// Its sandbox time, as the session's `spend` counts it (the alive one's until now);
    /// `null` when it is not known (found only by its label) or counts for nothing (refused).
    seconds: Option<f64>,
    /// Its estimated cost, where it has a price (as in `spend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    estimate: Option<super::report::EstimateJson>,
}

pub(super) fn run(args: Args, settings: &Settings) -> Result<Exit, Error> {
    let prefix = super::sessions::session_arg("sessions show", &args.id)?;
    let state = StateDir::open(&settings.state_dir)?;
    let none = || {
        Error::Failed(format!(
            "no session {prefix} in the ledger ({})",
            settings.state_dir.display()
        ))
    };
    let id = resolve(&state, &prefix)?.ok_or_else(none)?;
    let (view, story) = match state.read_history(&id) {
        Err(LedgerError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(none())
        }
        other => other?,
    };
    let judge = state.judge();
    let owner = judge.label(&view.owner);
    let now = crate::ledger::now_ms();
    let spend = Spend::of(&view, &story, now, &settings.prices);
    let each = crate::ledger::spend::each(&view, &story, now, &settings.prices);
    let sandboxes: Vec<SandboxJson> = story
        .sandboxes
        .iter()
        .zip(&each)
        .map(|(s, share)| sandbox(s, share.as_ref(), &view, owner))
        .collect();
    let ending = story.ending.as_ref().map(|e| EndingJson {
        cause: e.as_str(),
        words: e.words(),
    });
    let unlisted = view.unlisted.clone();
    if args.json {
        output::emit_json(&ShowJson {
            session: row(super::sessions::held(&state, view), &spend, &judge),
            ending,
            sandboxes,
            unlisted,
            refused_creates: story.refused.iter().map(Into::into).collect(),
        });
    } else {
        let mut out = text(&view, owner, ending.as_ref(), &sandboxes);
        out.push_str(&refusals::show_lines(&story.refused));
        out.push_str(&spend_lines(&spend));
        output::emit(&out);
    }
    Ok(Exit::Ok)
}

/// The session `prefix` names in the ledger: its own id when that journal exists, else the
/// one id starting with it; `None` when none does. Several: bad usage, naming them.
fn resolve(state: &StateDir, prefix: &str) -> Result<Option<String>, Error> {
    let exact = state.journal_file(prefix)?;
    if exact.exists() {
        return Ok(Some(prefix.to_string()));
    }
    let Some(dir) = exact.parent() else {
        return Ok(None);
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Failed(format!(
                "cannot list the sessions in {}: {e}",
                dir.display()
            )))
        }
    };
    let mut found: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".journal").map(str::to_string))
        .filter(|id| id.starts_with(prefix) && crate::session::SessionId::parse(id).is_ok())
        .collect();
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => Err(Error::Usage(format!(
            "sessions show: {prefix:?} is ambiguous: it matches sessions {}",
            found.join(", ")
        ))),
    }
}

fn sandbox(
    s: &SandboxStory,
    share: Option<&Share>,
    view: &SessionView,
    owner: Liveness,
) -> SandboxJson {
    let timed = share.filter(|share| share.untimed == 0);
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
        size: s.size.clone(),
        seconds: timed.map(|share| super::report::seconds(share.time)),
        estimate: timed.and_then(super::report::EstimateJson::of),
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
        Fate::Vanished => format!(
            "gone by itself while the program ran (its provider said so: an autoremove, its \
             own timeout, a removal past the proxy) ({origin})"
        ),
        Fate::Stopped { gone: false } => format!("removed by hand (sandguard stop) ({origin})"),
        Fate::Stopped { gone: true } => {
            format!("gone: already gone when sandguard stop came for it ({origin})")
        }
        Fate::Detached => format!(
            "left: detached by the program; {}",
            what_ends_it(&s.target.provider)
        ),
        Fate::Refused(reason) => format!("refused, never acted upon: {}", sanitize(reason)),
        Fate::Pending(error) => format!(
            "left: could not be removed ({}); `sandguard sweep` retries",
            sanitize(error)
        ),
        Fate::Claimed => still_claimed(view, owner, &s.target.provider),
    }
}

/// What ends a sandbox of `provider` that sandguard leaves alone (see the module docs).
fn what_ends_it(provider: &str) -> String {
    let p = sanitize(provider);
    match provider {
        "docker" | "flyio" => format!(
            "{p} has no TTL: it runs until removed (sandguard stop, or a sweep once a \
             sandguard.expires label on it has passed)"
        ),
        "e2b" | "daytona" | "tenki" => {
            format!("only its {p} timeout ends it (sandguard no longer renews it)")
        }
        "modal" => "only the timeout modal gave it at creation ends it".into(),
        _ => format!("sandguard leaves it: only a lifetime {p} itself gives it, if any, ends it"),
    }
}

/// A claim with nothing after it, phrased with what is known now.
fn still_claimed(view: &SessionView, owner: Liveness, provider: &str) -> String {
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
        (false, Liveness::Unknown) => format!(
            "left: claimed, no sidecar, owner cannot be judged from here; {}",
            what_ends_it(provider)
        ),
    }
}

/// The session's sandbox time, a line per provider (see the module docs).
fn spend_lines(spend: &Spend) -> String {
    let human = super::report::human;
    let total = spend.total();
    if total.sandboxes == 0 {
        return String::new();
    }
    let mut out = format!("Sandbox time: {}", human(total.time));
    if let Some(cost) = total.cost {
        out.push_str(&format!(", {cost} estimated"));
    }
    if total.alive > 0 {
        out.push_str(&format!(", {} sandbox(es) still alive", total.alive));
    }
    out.push_str(".\n");
    for (provider, share) in &spend.by_provider {
        out.push_str(&format!(
            "  {}: {} over {} sandbox(es)",
            sanitize(provider),
            human(share.time),
            share.sandboxes
        ));
        if let Some(cost) = share.cost {
            out.push_str(&format!(", {cost}"));
        }
        if share.alive > 0 {
            out.push_str(&format!(
                ", {} alive ({} so far)",
                share.alive,
                human(share.alive_time)
            ));
        }
        if share.untimed > 0 {
            out.push_str(&format!(
                ", {} found only by its label when removed (time unknown)",
                share.untimed
            ));
        }
        out.push('\n');
    }
    if total.cost.is_some() {
        out.push_str(&super::report::cost_note(&total));
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_provider_is_told_what_ends_its_sandboxes() {
        for p in crate::config::BUILT_IN_PROVIDERS {
            assert!(
                !what_ends_it(p).contains("if any"),
                "{p}: {}",
                what_ends_it(p)
            );
        }
        for p in ["docker", "flyio"] {
            assert!(what_ends_it(p).contains("has no TTL"), "{p}");
        }
        assert!(what_ends_it("acme").contains("acme itself"));
    }
}
