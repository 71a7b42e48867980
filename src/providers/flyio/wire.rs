//! Fly's machine listing as sandguard reads it: each machine mapped to a [`Sandbox`], its
//! labels read from `config.metadata`, terminal machines left out.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::NAME;
use crate::providers::http::decode_json;
use crate::providers::{Kind, ProviderError, Sandbox};

/// States a machine does not come back from; the listing still shows them for a while.
const TERMINAL: &[&str] = &["destroyed", "replaced", "migrated"];

/// `GET /apps/{app}/machines` as sandboxes, terminal machines left out. Public for the fuzz
/// target `flyio_list`.
#[doc(hidden)]
pub fn parse_list_body(body: &[u8], app: &str) -> Result<Vec<Sandbox>, ProviderError> {
    let what = format!("failed to list machines of app {app}");
    let machines: Vec<Machine> = decode_json(body, NAME, &what)?;
    Ok(machines
        .into_iter()
        .filter_map(Machine::into_sandbox)
        .collect())
}

#[derive(Debug, Deserialize)]
pub(super) struct Machine {
    id: String,
    #[serde(default)]
    state: String,
    created_at: Option<String>,
    config: Option<MachineConfig>,
    incomplete_config: Option<MachineConfig>,
    image_ref: Option<ImageRef>,
}

#[derive(Debug, Default, Deserialize)]
struct MachineConfig {
    image: Option<String>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize)]
struct ImageRef {
    repository: Option<String>,
    tag: Option<String>,
}

impl Machine {
    /// The machine as a sandbox; `None` for a machine in a terminal state.
    pub(super) fn into_sandbox(self) -> Option<Sandbox> {
        if TERMINAL.contains(&self.state.as_str()) {
            return None;
        }
        let config = self.config.or(self.incomplete_config).unwrap_or_default();
        let labels = config
            .metadata
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| match v {
                serde_json::Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect();
        let image = config.image.or_else(|| {
            let r = self.image_ref?;
            let repo = r.repository?;
            Some(match r.tag {
                Some(tag) if !tag.is_empty() => format!("{repo}:{tag}"),
                _ => repo,
            })
        });
        Some(Sandbox {
            inherited: false,
            identity: None,
            provider: NAME.into(),
            kind: Kind::Instance,
            id: self.id,
            status: if self.state.is_empty() {
                "unknown".into()
            } else {
                self.state
            },
            created_at: self
                .created_at
                .as_deref()
                .and_then(crate::timefmt::parse_rfc3339),
            image,
            labels,
            expires_at: None,
        })
    }
}
