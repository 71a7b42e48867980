//! `sandguard ps`: every managed sandbox on every configured provider, with its session,
//! whether its owner is alive, and when the provider itself will end it (`EXPIRES`,
//! `expires_at`) where the provider has such a lifetime and lists it.
//!
//! Only instances (containers, VMs, cloud sandboxes) are shown; the networks and volumes of a
//! session are removed with it by `stop` but are not sandboxes a user runs. A provider that
//! could not be queried is listed under `errors` (and at the bottom of the text) and makes the
//! exit code 1: an unanswered provider is never shown as an empty list.
//!
//! With a fleet store configured, each sandbox whose session the store knows shows its
//! session's host (a `HOST` column; `host` in `--json`, `null` where unknown). A store that
//! cannot be read only leaves the hosts unknown (said once on stderr): `ps` lists what the
//! providers say, and the store decides nothing here.

use serde::Serialize;

use super::output::{self, sanitize, ErrorJson, Exit, SandboxJson};
use super::Error;
use std::collections::HashMap;

use crate::config::Settings;
use crate::labels::Selector;
use crate::providers::{Kind, Registry, Sandbox};
use crate::reclaim;
use crate::timefmt;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Only this provider
    #[arg(long, value_name = "P")]
    provider: Option<String>,
}

#[derive(Serialize)]
struct PsJson<'a> {
    sandboxes: Vec<PsRow<'a>>,
    errors: Vec<ErrorJson<'a>>,
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

pub async fn run(args: Args, settings: &Settings, registry: &Registry) -> Result<Exit, Error> {
    let providers = registry.select(args.provider.as_deref())?;
    let (mut found, failures) = reclaim::list_all(&providers, &Selector::managed()).await;
    found.retain(|s| s.kind == Kind::Instance);
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
        });
    } else {
        let mut text = render(&found, timefmt::now_unix(), &host_of);
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
        output::emit(&text);
    }
    Ok(Exit::clean_if(failures.is_empty()))
}

fn render<'a>(
    found: &'a [Sandbox],
    now: i64,
    host_of: &dyn Fn(&'a Sandbox) -> Option<Option<&'a str>>,
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
    let mut text = output::table(&headers, &rows);
    text.push_str(&format!(
        "{} running. Stop with: sandguard stop <instance-id>\n",
        found.len()
    ));
    text
}
