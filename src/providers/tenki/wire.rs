//! Tenki's answers as sandguard reads them: the session listing (Connect JSON), each session
//! mapped to a [`Sandbox`], its labels read from its tags and metadata.

use super::*;

/// One `ListWorkspaceSandboxes` answer as the live sandboxes it lists (for a listing that asked
/// for session `wanted`) and the next page token, as [`TenkiProvider`] reads it. Public for
/// the fuzz target `tenki_list`.
#[doc(hidden)]
pub fn parse_list_body(
    body: &[u8],
    wanted: Option<&str>,
) -> Result<(Vec<Sandbox>, String), ProviderError> {
    let page: ListReply = decode_json(body, NAME, "failed to list sandboxes")?;
    let sandboxes = page
        .sessions
        .into_iter()
        .filter_map(|s| s.into_live(wanted).map(|(sandbox, _)| sandbox))
        .collect();
    Ok((sandboxes, page.next_page_token))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListReply {
    #[serde(default)]
    pub(super) sessions: Vec<Session>,
    #[serde(default)]
    pub(super) next_page_token: String,
}

/// The `SandboxSession` fields sandguard reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Session {
    #[serde(default)]
    id: String,
    state: Option<String>,
    created_at: Option<String>,
    timeout_at: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(default)]
    tags: Vec<String>,
    source_registry_ref: Option<String>,
    source_template_id: Option<String>,
    snapshot_id: Option<String>,
}

impl Session {
    pub(super) fn is_terminal(&self) -> bool {
        matches!(
            self.state.as_deref(),
            Some("SESSION_STATE_TERMINATED" | "SESSION_STATE_TERMINATING")
        )
    }

    /// `SESSION_STATE_RUNNING` → `running`; an omitted state is proto3's zero value.
    pub(super) fn status(&self) -> String {
        self.state
            .as_deref()
            .map(|s| s.strip_prefix("SESSION_STATE_").unwrap_or(s))
            .filter(|s| !s.is_empty())
            .map_or_else(|| "unspecified".into(), str::to_ascii_lowercase)
    }

    /// A live session as a sandbox, with its `timeoutAt` (Unix seconds); `None` for one that
    /// is terminal or has no id.
    pub(super) fn into_live(self, wanted: Option<&str>) -> Option<(Sandbox, Option<i64>)> {
        if self.id.is_empty() || self.is_terminal() {
            return None;
        }
        let timeout_at = self
            .timeout_at
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339);
        Some((self.into_sandbox(wanted), timeout_at))
    }

    pub(super) fn into_sandbox(self, wanted: Option<&str>) -> Sandbox {
        let labels = read_labels(&self.tags, &self.metadata, wanted);
        // `ps`'s EXPIRES: Tenki terminates a session at its `timeoutAt` (the deadline
        // `ExtendSession` moves), whatever it runs.
        let expires_at = self
            .timeout_at
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339);
        let status = self.status();
        let image = [
            &self.source_registry_ref,
            &self.source_template_id,
            &self.snapshot_id,
        ]
        .into_iter()
        .flatten()
        .find(|s| !s.is_empty())
        .cloned();
        Sandbox {
            inherited: false,
            identity: None,
            provider: NAME.into(),
            kind: Kind::Instance,
            created_at: self
                .created_at
                .as_deref()
                .and_then(crate::timefmt::parse_rfc3339),
            id: self.id,
            status,
            expires_at,
            image,
            labels,
        }
    }
}

/// The sandguard labels of a session. Its `sandguard:` tag decides whether it is managed at
/// all and by which session; `metadata` adds the full session id (when it agrees with the
/// tag), the owner and the rest. When the tag holds only the start of a long id and the
/// listing asked for one session (`wanted`) whose tag it is, the label is that full id.
pub(super) fn read_labels(
    tags: &[String],
    metadata: &BTreeMap<String, String>,
    wanted: Option<&str>,
) -> BTreeMap<String, String> {
    let tags: Vec<String> = tags
        .iter()
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| t.len() > TAG_PREFIX.len() && t.starts_with(TAG_PREFIX))
        .collect();
    if tags.is_empty() {
        return BTreeMap::new();
    }
    let mut labels: BTreeMap<String, String> = metadata
        .iter()
        .filter(|(k, _)| k.starts_with("sandguard."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let agrees = |session: &str| tags.contains(&session_tag(session));
    let session = match labels.get(labels::SESSION) {
        Some(s) if agrees(s) => s.clone(),
        _ => match wanted {
            Some(w) if agrees(w) => w.to_string(),
            _ => tags[0][TAG_PREFIX.len()..].to_string(),
        },
    };
    labels.insert(labels::SESSION.to_string(), session);
    labels
}
