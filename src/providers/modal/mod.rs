//! The Modal driver: gRPC (Modal has no REST API) through tonic, with prost messages
//! generated from `proto/modal.proto` (after the field numbers of modal 1.6.4's
//! `modal_proto`) and committed (`modal/wire.rs`, `modal/generated/`, `modal/codegen.rs`).
//!
//! - Endpoint: `MODAL_SERVER_URL` or `[providers.modal] server_url`, default
//!   `https://api.modal.com:443` (of a comma-separated failover list, the first); HTTP/2 with
//!   rustls (ring, webpki roots: the stack reqwest already uses), plain HTTP/2 for an
//!   `http://` URL (the emulator). The channel connects on first use, so building the
//!   registry never touches the network (`modal/client.rs`).
//! - Auth: configured only when both `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` are set. Every
//!   call carries `x-modal-token-id`, `x-modal-token-secret` (marked sensitive), and
//!   `x-modal-client-type` / `x-modal-client-version`. sandguard uses the subset of the API the
//!   Go SDK uses and says so: type `9` (`CLIENT_TYPE_LIBMODAL_GO`), version `1.0.0`.
//! - V1 and V2 sandboxes: `modal` 1.6.4 makes V2 sandboxes by default, reached through the
//!   `*V2` RPCs (same messages), which also want `x-modal-auth-token`: a short-lived JWT from
//!   `AuthTokenGet`, fetched once and again before its `exp` (`modal/auth.rs`). An id's shape
//!   says which RPCs reach it, as Modal's SDK decides ([`wire::Api::of`]): `sb-` and 22
//!   letters or digits is V1, anything else V2, and a V2-shaped id goes to the V2 RPCs only
//!   (never a V1 NOT_FOUND taken for "gone").
//! - Labels are sandbox tags (`sandguard.session` = id, …). Both listings get the selector's
//!   valued terms as `tags` (the server keeps sandboxes carrying all of them) and
//!   `include_finished = false`; a term that only asks for a key (`Selector::managed`) cannot
//!   be said in Modal's filter, so it is checked locally, as is every term again. Listings,
//!   environments, paging and the tags a listing leaves out: `modal/list.rs`.
//! - Environment: `MODAL_ENVIRONMENT` or `[providers.modal] environment`, sent as
//!   `environment_name`; unset, the account's default environment only. Modal's own profile
//!   file (`~/.modal.toml`) is not read.
//! - Reads (listing pages, tags) wait out the server's throttles for up to 30 s in all, as
//!   Modal's client does, and are tried up to four times on other transient failures: the
//!   shared HTTP layer does this for REST drivers, and gRPC cannot use it (`modal/client.rs`).
//! - Removal: `SandboxTerminate` or `SandboxTerminateV2` by the id's shape. Terminating a
//!   finished sandbox is a no-op on Modal's side; its answer then carries the earlier result,
//!   which is reported as gone, like NOT_FOUND from the RPC that owns the id.
//! - Errors: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, CANCELLED, ABORTED and
//!   RESOURCE_EXHAUSTED are transient; so is any error carrying Modal's `RPCRetryPolicy` in
//!   `grpc-status-details-bin`, whose `retry_after_secs` becomes the retry-after (without it,
//!   reclaim's own backoff applies). UNAUTHENTICATED, PERMISSION_DENIED and the rest are
//!   fatal. NOT_FOUND is gone for a removal and fatal for a listing. The credentials and the
//!   auth token are redacted from every message.
//! - No TTL: Modal sets a sandbox's timeout at creation only, with no RPC to change it, so
//!   `ttl` is false and `renew` is the trait's default refusal.
//!
//! Decisions:
//! - The id's shape alone picks the RPCs, as the SDK's does: a V2-shaped id never goes to
//!   `SandboxTerminate`, whose NOT_FOUND for a V2 sandbox would be a false "gone", and a
//!   V1-shaped one never to the V2 RPCs.
//! - Both listings always run, and each is a part of the listing that may fail alone
//!   (`modal/list.rs`); the auth token is fetched only when a V2 call needs it.
//! - The environment comes from `MODAL_ENVIRONMENT` or sandguard's own config, not from
//!   Modal's profile file: sandguard reads no other program's configuration, and neither does
//!   it read the token from there.
//! - `ps` and `stop --all` read the tags of every sandbox listed without them, one call each
//!   (at most eight at a time): the price of seeing sandguard's sandboxes whether or not
//!   Modal fills `SandboxInfo.tags`.

mod auth;
mod client;
mod list;
mod status;
pub mod wire;

#[cfg(test)]
mod codegen;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;
use tonic::transport::Channel;

use super::{
    Capabilities, Entry, EntryState, Kind, Listing, Provider, ProviderError, Refusal, Sandbox,
};
use crate::config::{CloudSettings, Secret};
use crate::labels::Selector;
use wire::{Api, SandboxInfo, SandboxListResponse};

const NAME: &str = "modal";

/// Builds the registry entry: configured when both halves of the token are present.
/// `environment` is `MODAL_ENVIRONMENT` or the config's; `None`, the default one.
pub(crate) fn entry(settings: &CloudSettings, environment: Option<&str>) -> Entry {
    let state = match (&settings.token, &settings.secret) {
        (Some(id), Some(secret)) => EntryState::Configured(Arc::new(ModalProvider::new(
            settings,
            id,
            secret,
            environment.unwrap_or_default(),
        ))),
        (None, _) => EntryState::Unconfigured(
            "MODAL_TOKEN_ID is not set (nor [providers.modal] token_id)".into(),
        ),
        (Some(_), None) => EntryState::Unconfigured(
            "MODAL_TOKEN_SECRET is not set (nor [providers.modal] token_secret)".into(),
        ),
    };
    Entry { name: NAME, state }
}

/// Modal's control plane, reached over one lazily built gRPC channel.
pub(crate) struct ModalProvider {
    url: String,
    timeout: Duration,
    token_id: Secret,
    token_secret: Secret,
    /// `environment_name` of the listings; empty: the default environment.
    environment: String,
    channel: OnceCell<Channel>,
    auth: auth::AuthToken,
}

impl ModalProvider {
    pub(crate) fn new(
        settings: &CloudSettings,
        token_id: &Secret,
        token_secret: &Secret,
        environment: &str,
    ) -> Self {
        ModalProvider {
            url: first_url(&settings.url),
            timeout: settings.timeout,
            token_id: token_id.clone(),
            token_secret: token_secret.clone(),
            environment: environment.to_string(),
            channel: OnceCell::new(),
            auth: auth::AuthToken::default(),
        }
    }
}

#[async_trait::async_trait]
impl Provider for ModalProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        super::ids::parse(NAME, super::ids::MODAL, id)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: false,
            pagination: true,
        }
    }

    /// All or nothing: the first failure of [`Provider::list_parts`], the others appended.
    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let Listing { found, mut errors } = self.list_each(selector).await;
        if errors.is_empty() {
            return Ok(found);
        }
        let first = errors.remove(0);
        let also: Vec<String> = errors.iter().map(ToString::to_string).collect();
        Err(if also.is_empty() {
            first
        } else {
            first.map_message(|m| format!("{m}; also: {}", also.join("; ")))
        })
    }

    /// The V1 and V2 listings, each kept when the other fails.
    async fn list_parts(&self, selector: &Selector) -> Listing {
        self.list_each(selector).await
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let id = &sandbox.id;
        let api = Api::of(id);
        let request = wire::SandboxTerminateRequest {
            sandbox_id: id.clone(),
        };
        let what = format!(
            "failed to terminate sandbox {id} ({})",
            Api::rpc(api.terminate())
        );
        let reply: wire::SandboxTerminateResponse =
            self.call(api, api.terminate(), request, &what).await?;
        match reply.existing_result {
            Some(result) => Err(ProviderError::gone(format!(
                "{NAME}: sandbox {id} had already finished ({})",
                result.status_word()
            ))),
            None => Ok(()),
        }
    }

    async fn check(&self) -> Result<String, ProviderError> {
        let hello: wire::ClientHelloResponse = self
            .call(
                Api::V1,
                wire::path::CLIENT_HELLO,
                wire::Empty {},
                "failed to say hello",
            )
            .await?;
        let mut text = format!("Modal API at {}", self.url);
        if !hello.warning.is_empty() {
            let warning: String = hello.warning.chars().filter(|c| !c.is_control()).collect();
            text.push_str(&format!(" (server warning: {warning})"));
        }
        Ok(text)
    }
}

/// The endpoint to use: the first of a comma-separated failover list (the form Modal's Python
/// client accepts in `MODAL_SERVER_URL`), without a trailing slash.
fn first_url(setting: &str) -> String {
    let first = setting.split(',').next().unwrap_or_default();
    first.trim().trim_end_matches('/').to_string()
}

/// A `SandboxList` answer's bytes as sandboxes, as the listing maps them. Public for the fuzz
/// target `modal_decode` (the real answers are decoded by tonic's prost codec).
#[doc(hidden)]
pub fn decode_list_page(bytes: &[u8]) -> Result<Vec<Sandbox>, prost::DecodeError> {
    let page = <SandboxListResponse as prost::Message>::decode(bytes)?;
    Ok(page.sandboxes.into_iter().map(to_sandbox).collect())
}

fn to_sandbox(info: SandboxInfo) -> Sandbox {
    let labels: BTreeMap<String, String> = info
        .tags
        .into_iter()
        .map(|t| (t.tag_name, t.tag_value))
        .collect();
    Sandbox {
        inherited: false,
        identity: None,
        provider: NAME.into(),
        kind: Kind::Instance,
        status: status_word(info.task_info.as_ref()).into(),
        id: info.id,
        created_at: (info.created_at.is_finite() && info.created_at > 0.0)
            .then_some(info.created_at as i64),
        expires_at: None,
        image: Some(info.image_id).filter(|i| !i.is_empty()),
        labels,
    }
}

fn status_word(task: Option<&wire::TaskInfo>) -> &'static str {
    match task {
        Some(wire::TaskInfo {
            result: Some(r), ..
        }) => r.status_word(),
        Some(t) if t.finished_at > 0.0 => "finished",
        Some(t) if t.started_at > 0.0 => "running",
        _ => "pending",
    }
}

#[cfg(test)]
mod tests;
