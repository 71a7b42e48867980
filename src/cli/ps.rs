//! `sandguard ps`: every managed sandbox on every configured provider, with its session,
//! whether its owner is alive, and when the provider itself will end it (`EXPIRES`,
//! `expires_at`) where the provider has such a lifetime and lists it.
//!
//! Only instances (containers, VMs, cloud sandboxes) are shown; the networks and volumes of a
//! session are removed with it by `stop` but are not sandboxes a user runs. A provider that
//! could not be queried is listed under `errors` (and at the bottom of the text) and makes the
//! exit code 1: an unanswered provider is never shown as an empty list.

use serde::Serialize;

use super::output::{self, sanitize, ErrorJson, Exit, SandboxJson};
use super::Error;
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
    sandboxes: Vec<SandboxJson<'a>>,
    errors: Vec<ErrorJson<'a>>,
}

pub async fn run(args: Args, registry: &Registry) -> Result<Exit, Error> {
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
    if args.json {
        output::emit_json(&PsJson {
            sandboxes: found.iter().map(SandboxJson::new).collect(),
            errors: failures.iter().map(ErrorJson::from).collect(),
        });
    } else {
        let mut text = render(&found, timefmt::now_unix());
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

fn render(found: &[Sandbox], now: i64) -> String {
    if found.is_empty() {
        return "No running sandboxes.\n".to_string();
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|s| {
            vec![
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
            ]
        })
        .collect();
    let mut text = output::table(
        &[
            "INSTANCE ID",
            "PROVIDER",
            "STATUS",
            "UPTIME",
            "EXPIRES",
            "IMAGE",
            "SESSION",
            "OWNER",
        ],
        &rows,
    );
    text.push_str(&format!(
        "{} running. Stop with: sandguard stop <instance-id>\n",
        found.len()
    ));
    text
}
