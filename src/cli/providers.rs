//! `sandguard providers`: every registered provider, configured or not, reachable or not, and
//! why. Exits 1 when a configured provider does not answer, so it doubles as a health check.

use serde::Serialize;

use super::output::{self, sanitize, Exit};
use super::Error;
use crate::providers::{Capabilities, EntryState, Registry};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct ProviderJson {
    name: &'static str,
    configured: bool,
    reachable: Option<bool>,
    detail: String,
    capabilities: Option<Capabilities>,
}

pub(super) async fn run(args: Args, registry: &Registry) -> Result<Exit, Error> {
    let checks = registry.entries().iter().map(|entry| async move {
        match &entry.state {
            EntryState::Unconfigured(why) => ProviderJson {
                name: entry.name,
                configured: false,
                reachable: None,
                detail: why.clone(),
                capabilities: None,
            },
            EntryState::Configured(p) => {
                let (reachable, detail) = match p.check().await {
                    Ok(d) => (true, d),
                    Err(e) => (false, e.to_string()),
                };
                ProviderJson {
                    name: entry.name,
                    configured: true,
                    reachable: Some(reachable),
                    detail,
                    capabilities: Some(p.capabilities()),
                }
            }
        }
    });
    let rows = futures_util::future::join_all(checks).await;
    if args.json {
        output::emit_json(&serde_json::json!({ "providers": rows }));
    } else {
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.name.to_string(),
                    if r.configured {
                        "configured"
                    } else {
                        "not configured"
                    }
                    .to_string(),
                    match r.reachable {
                        Some(true) => "reachable",
                        Some(false) => "unreachable",
                        None => "-",
                    }
                    .to_string(),
                    r.capabilities.map_or_else(|| "-".into(), describe),
                    sanitize(&r.detail).into_owned(),
                ]
            })
            .collect();
        output::emit(&output::table(
            &["PROVIDER", "STATE", "REACHABLE", "CAPABILITIES", "DETAIL"],
            &table,
        ));
    }
    Ok(Exit::clean_if(
        !rows.iter().any(|r| r.reachable == Some(false)),
    ))
}

fn describe(c: Capabilities) -> String {
    let mut parts = vec![];
    parts.push(if c.labels { "labels" } else { "claims-only" });
    parts.push(if c.ttl { "ttl" } else { "no-ttl" });
    if c.pagination {
        parts.push("paged");
    }
    parts.join(",")
}
