//! `sandguard ps`: every managed sandbox on every configured provider, with its session,
//! whether its owner is alive, and when the provider itself will end it (`EXPIRES`,
//! `expires_at`) where the provider has such a lifetime and lists it.
//!
//! Decisions (`EXPIRES`, [`Sandbox::expires_at`]): only a time the provider's listing gives as
//! when it ends the sandbox on its own, never one worked out from other fields. E2B: `endAt`
//! while it runs (it is stopped then: killed, or paused if made with auto-pause), none once
//! paused (kept until deleted). Daytona: `autoDestroyAt`, set while a TTL is (its auto-stop
//! and auto-delete count from when it idles or stops: no time). Tenki: `timeoutAt`. Modal:
//! none; its listing has a timeout in seconds, not for certain when that clock started (the
//! create, or the task's start after its image is pulled), and a guess could end a sandbox
//! early on screen. Docker, Fly.io Machines, plugins: none, nothing of theirs ends a sandbox
//! on a clock (`sandguard.expires` is sandguard's, ended by a sweep). Times (`UPTIME`,
//! `in …`) are written as every table writes them ([`timefmt::format_uptime`]).
//!
//! Only instances (containers, VMs, cloud sandboxes) are shown; the networks and volumes of a
//! session are removed with it by `stop` but are not sandboxes a user runs. A provider that
//! could not be queried is listed under `errors` (and at the bottom of the text) and makes the
//! exit code 1: an unanswered provider is never shown as an empty list.
//!
//! The last line counts honestly: what is running, then every other state with its own count
//! (`3 running, 2 exited, 1 created.`). `--json` carries the same figures as `counts`
//! (`{"running": 3, "exited": 2, "created": 1}`), beside the unchanged `sandboxes` and
//! `errors`.
//!
//! Decisions:
//! - Running is the provider's word `running` or `started` (Daytona's and Fly.io's word for a
//!   machine that runs), in any case; the row keeps the provider's own word. Anything else
//!   (`created`, `exited`, `paused`, `stopped`, `unknown`, …) is counted under its own word,
//!   lower-cased, after `running`, most numerous first and then by name.
//!
//! Narrowing: `--session S` shows only the sandboxes labelled with session `S`, `--state W`
//! only those in state `W`; the two combine with each other, with `--provider` and with
//! `--json`, and the count line (and `counts`) counts what is shown, not what exists.
//!
//! Decisions (narrowing):
//! - `--session S` is checked before anything is listed, by the one session-id rule
//!   ([`crate::session::SessionId::parse`], as `stop --session`, `sessions show` and the
//!   sidecar take it): a malformed id is bad usage (exit 2). It is matched exactly. A well-formed id that names nothing (no journal in the local
//!   ledger, and no sandbox on any provider that answered carries it) is an error, exit 1, as
//!   an unknown `--provider` is: `ps` never answers "nothing" for a session that never was.
//!   A session the ledger knows whose sandboxes are all gone is "No sandboxes", exit 0.
//! - `--state W` takes the words of [`STATES`] (any case), matched as the count line counts
//!   (`running` takes Daytona's and Fly.io's `started` too). Anything else is bad usage (exit 2)
//!   naming the valid words: a filter that can never match is a typo, not an empty answer.
//!   A plugin's own word outside that list is still listed and counted without `--state`.
//! - Networks and volumes are not listed here: `sessions show ID` lists everything a session
//!   brought into being, from its journal, with what happened to each (see `sessions.rs`).
//!
//! With a fleet store configured, each sandbox whose session the store knows shows its
//! session's host (a `HOST` column; `host` in `--json`, `null` where unknown). A store that
//! cannot be read only leaves the hosts unknown (said once on stderr): `ps` lists what the
//! providers say, and the store decides nothing here.

use serde::Serialize;

use super::output::colour::Paint;
use super::output::{self, sanitize, ErrorJson, Exit, SandboxJson};
use super::Error;
use std::collections::HashMap;

use crate::config::Settings;
use crate::labels::Selector;
use crate::providers::{Kind, Registry, Sandbox};
use crate::reclaim;
use crate::timefmt;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Only this provider
    #[arg(long, value_name = "P")]
    provider: Option<String>,
    /// Only the sandboxes of this session
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Only the sandboxes in this state (running, exited, created, paused, …)
    #[arg(long, value_name = "STATE")]
    state: Option<String>,
}

/// The states `--state` accepts: Docker's words, then the cloud providers' (Daytona, Fly.io,
/// E2B, Modal), and `unknown` for a sandbox whose provider did not say.
pub(super) const STATES: &[&str] = &[
    "running",
    "created",
    "restarting",
    "paused",
    "exited",
    "dead",
    "removing",
    "starting",
    "stopping",
    "stopped",
    "suspended",
    "archived",
    "error",
    "unknown",
];

/// What `--session` and `--state` narrow the listing to, checked before anything is listed.
struct Narrow {
    session: Option<String>,
    state: Option<String>,
}

impl Narrow {
    fn parse(args: &Args) -> Result<Narrow, Error> {
        let session = match &args.session {
            Some(s) => Some(super::sessions::session_arg("--session", s)?),
            None => None,
        };
        let state = match &args.state {
            Some(w) => {
                let word = counted_as(w);
                if !STATES.contains(&word.as_str()) {
                    return Err(Error::Usage(format!(
                        "--state: unknown state \"{}\"; valid states: {}",
                        sanitize(w),
                        STATES.join(", ")
                    )));
                }
                Some(word)
            }
            None => None,
        };
        Ok(Narrow { session, state })
    }

    fn keeps(&self, s: &Sandbox) -> bool {
        self.session
            .as_deref()
            .is_none_or(|id| s.session() == Some(id))
            && self
                .state
                .as_deref()
                .is_none_or(|w| counted_as(&s.status) == w)
    }

    /// What an empty narrowed listing says instead of "No running sandboxes" (`None` without
    /// narrowing).
    fn nothing_line(&self) -> Option<String> {
        let mut what = Vec::new();
        if let Some(id) = &self.session {
            what.push(format!("of session {id}"));
        }
        if let Some(w) = &self.state {
            what.push(format!("in state {w}"));
        }
        (!what.is_empty()).then(|| format!("No sandboxes {}", what.join(" ")))
    }

    /// An error when `--session` names a session nobody knows: not in the local ledger, and
    /// carried by no sandbox of the providers that answered (`listed`, before `--state`).
    fn unknown_session(
        &self,
        settings: &Settings,
        listed: &[Sandbox],
        failed: bool,
    ) -> Option<Error> {
        let id = self.session.as_deref()?;
        if failed || listed.iter().any(|s| s.session() == Some(id)) {
            return None;
        }
        // No state directory is no ledger: `ps` does not create one to find that out.
        let journal = if settings.state_dir.exists() {
            crate::ledger::StateDir::open(&settings.state_dir)
                .and_then(|state| state.journal_file(id))
                .map(Some)
        } else {
            Ok(None)
        };
        match journal {
            Ok(Some(path)) if path.exists() => None,
            Ok(_) => Some(Error::Failed(format!(
                "no session {id}: not in the ledger ({}), and no sandbox carries it",
                settings.state_dir.display()
            ))),
            Err(e) => {
                tracing::warn!("{e}: only the providers were asked about session {id}");
                None
            }
        }
    }
}

#[derive(Serialize)]
struct PsJson<'a> {
    sandboxes: Vec<PsRow<'a>>,
    errors: Vec<ErrorJson<'a>>,
    /// State → how many (`running` for every running word); an addition, nothing else moved.
    counts: std::collections::BTreeMap<String, usize>,
}

/// The state a sandbox is counted under: `running` for the providers' running words, else
/// the provider's word, lower-cased.
fn counted_as(status: &str) -> String {
    let word = status.to_ascii_lowercase();
    match word.as_str() {
        "running" | "started" => "running".into(),
        _ => word,
    }
}

/// `running` first (present even at 0), then the other states, most numerous first.
fn counts(found: &[Sandbox]) -> Vec<(String, usize)> {
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for s in found {
        *by.entry(counted_as(&s.status)).or_default() += 1;
    }
    let running = by.remove("running").unwrap_or(0);
    let mut rest: Vec<(String, usize)> = by.into_iter().collect();
    rest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    std::iter::once(("running".to_string(), running))
        .chain(rest)
        .collect()
}

/// `3 running, 2 exited, 1 created.`
fn count_line(found: &[Sandbox]) -> String {
    let parts: Vec<String> = counts(found)
        .into_iter()
        .map(|(state, n)| format!("{n} {}", sanitize(&state)))
        .collect();
    format!("{}.", parts.join(", "))
}

#[derive(Serialize)]
struct PsRow<'a> {
    #[serde(flatten)]
    sandbox: SandboxJson<'a>,
    /// The host of the sandbox's session, as the fleet store knows it (omitted without a store).
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<Option<&'a str>>,
}

/// Session → host, from the fleet store; `None` without a store.
async fn hosts(settings: &Settings) -> Option<HashMap<String, String>> {
    use crate::fleet::Store;
    let f = settings.fleet.as_ref()?;
    let read = match crate::fleet::redis::RedisStore::new(f) {
        Ok(store) => store.sessions().await,
        Err(e) => Err(e),
    };
    match read {
        Ok(sessions) => Some(
            sessions
                .into_iter()
                .map(|s| (s.record.id, s.record.host))
                .collect(),
        ),
        Err(e) => {
            tracing::warn!("{e}: hosts unknown");
            Some(HashMap::new())
        }
    }
}

pub(super) async fn run(
    args: Args,
    settings: &Settings,
    registry: &Registry,
) -> Result<Exit, Error> {
    let narrow = Narrow::parse(&args)?;
    let providers = registry.select(args.provider.as_deref())?;
    let selector = match &narrow.session {
        Some(id) => Selector::session(id),
        None => Selector::managed(),
    };
    let (mut found, failures) = reclaim::list_all(&providers, &selector).await;
    found.retain(|s| s.kind == Kind::Instance);
    // A label only inherited from an image, after its session ended, is no ownership.
    let root = settings
        .state_dir
        .exists()
        .then(|| settings.state_dir.clone());
    let known = crate::ownership::known::Known::lazy(root, &providers);
    found.retain(|s| known.label_counts(s));
    if let Some(e) = narrow.unknown_session(settings, &found, !failures.is_empty()) {
        return Err(e);
    }
    found.retain(|s| narrow.keeps(s));
    // Newest first, as `docker ps` does.
    found.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.provider.cmp(&b.provider))
            .then_with(|| a.id.cmp(&b.id))
    });
    let hosts = hosts(settings).await;
    let host_of = |s: &Sandbox| {
        hosts
            .as_ref()
            .map(|h| s.session().and_then(|id| h.get(id)).map(String::as_str))
    };
    if args.json {
        output::emit_json(&PsJson {
            sandboxes: found
                .iter()
                .map(|s| PsRow {
                    sandbox: SandboxJson::new(s),
                    host: host_of(s),
                })
                .collect(),
            errors: failures.iter().map(ErrorJson::from).collect(),
            counts: counts(&found)
                .into_iter()
                .filter(|(state, n)| *n > 0 || state == "running")
                .collect(),
        });
    } else {
        let mut text = render(&found, timefmt::now_unix(), &host_of, Paint::stdout());
        text.push_str(&output::failure_lines(
            &failures,
            "its sandboxes are not listed above",
        ));
        if found.is_empty() && !failures.is_empty() {
            text = text.replace(
                "No running sandboxes.",
                "No running sandboxes on the providers that answered.",
            );
        }
        if let Some(line) = narrow.nothing_line().filter(|_| found.is_empty()) {
            text = text.replacen("No running sandboxes", &line, 1);
        }
        output::emit(&text);
    }
    Ok(Exit::clean_if(failures.is_empty()))
}

fn render<'a>(
    found: &'a [Sandbox],
    now: i64,
    host_of: &dyn Fn(&'a Sandbox) -> Option<Option<&'a str>>,
    paint: Paint,
) -> String {
    if found.is_empty() {
        return "No running sandboxes.\n".to_string();
    }
    let with_hosts = found.first().is_some_and(|s| host_of(s).is_some());
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|s| {
            let mut row = vec![
                output::display_id(s),
                s.provider.clone(),
                sanitize(&s.status).into_owned(),
                s.created_at
                    .map_or_else(|| "-".into(), |t| timefmt::format_uptime(now - t)),
                s.expires_at.map_or_else(
                    || "-".into(),
                    |t| format!("in {}", timefmt::format_uptime(t - now)),
                ),
                s.image
                    .as_deref()
                    .map_or_else(|| "-".into(), |i| sanitize(i).into_owned()),
                s.session()
                    .map_or_else(|| "-".into(), |i| sanitize(i).into_owned()),
                output::owner_liveness(s).as_str().to_string(),
            ];
            if let Some(host) = host_of(s) {
                row.push(host.map_or_else(|| "-".into(), |h| sanitize(h).into_owned()));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "INSTANCE ID",
        "PROVIDER",
        "STATUS",
        "UPTIME",
        "EXPIRES",
        "IMAGE",
        "SESSION",
        "OWNER",
    ];
    if with_hosts {
        headers.push("HOST");
    }
    // OWNER's words, coloured on a terminal.
    let mut text = output::painted_table(&headers, &rows, &[7], paint);
    text.push_str(&format!(
        "{} Stop with: sandguard stop <instance-id>\n",
        count_line(found)
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(status: &str) -> Sandbox {
        let mut s = Sandbox::claimed("docker", Kind::Instance, "x");
        s.status = status.into();
        s
    }

    #[test]
    fn the_count_line_counts_running_apart_from_every_other_state() {
        let found: Vec<Sandbox> = [
            "running", "exited", "created", "Started", "exited", "running", "paused",
        ]
        .iter()
        .map(|s| with(s))
        .collect();
        assert_eq!(
            count_line(&found),
            "3 running, 2 exited, 1 created, 1 paused."
        );
        assert_eq!(count_line(&[with("exited")]), "0 running, 1 exited.");
    }
}
