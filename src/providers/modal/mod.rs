//! The Modal driver: gRPC (Modal has no REST API) through tonic, with hand-written prost
//! messages (`modal/wire.rs`, after `proto/modal.proto`).
//!
//! - Endpoint: `MODAL_SERVER_URL` or `[providers.modal] server_url`, default
//!   `https://api.modal.com:443` (of a comma-separated failover list, the first); HTTP/2 with rustls (ring, webpki roots: the stack reqwest
//!   already uses), plain HTTP/2 for an `http://` URL (the emulator). The channel connects on
//!   first use, so building the registry never touches the network.
//! - Auth: configured only when both `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET` are set. Every
//!   call carries `x-modal-token-id`, `x-modal-token-secret` (marked sensitive), and
//!   `x-modal-client-type` / `x-modal-client-version`. sandguard uses the subset of the API the
//!   Go SDK uses and says so: type `9` (`CLIENT_TYPE_LIBMODAL_GO`), version `1.0.0`.
//! - Labels are sandbox tags (`sandguard.session` = id, …). `SandboxList` gets the selector's
//!   valued terms as `tags` (the server keeps sandboxes carrying all of them) and
//!   `include_finished = false`; a term that only asks for a key (`Selector::managed`) cannot
//!   be said in Modal's filter, so it is checked here, as is every term again.
//! - `SandboxInfo.tags` is marked "not yet exposed" in Modal's proto. A sandbox that a
//!   tag-filtered listing returns without tags gets them from `SandboxTagsGet` (one call each;
//!   the server already narrowed the list to matches). An unfiltered listing (`ps`, `stop --all`
//!   without `--session`) does not do this for every sandbox of the account: if the server never
//!   fills the field, those commands find nothing, which never removes a stranger.
//! - Paging: newest first; the next page asks for `before_timestamp` = the last sandbox's
//!   `created_at`, and an empty page ends the walk. A timestamp that does not move back is an
//!   error, not a loop. Sandboxes sharing the exact `created_at` of a page's last one and
//!   falling on the next page are skipped, as by Modal's own clients. Each page is tried up to four times on transient failures, honouring
//!   the server's retry hint: the shared HTTP layer does this for REST drivers, and gRPC cannot
//!   use it.
//! - Removal: `SandboxTerminate`. Terminating a finished sandbox is a no-op on Modal's side;
//!   its answer then carries the earlier result, which is reported as gone, like NOT_FOUND.
//! - Errors: UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL, UNKNOWN, CANCELLED, ABORTED and
//!   RESOURCE_EXHAUSTED are transient; so is any error carrying Modal's `RPCRetryPolicy` in
//!   `grpc-status-details-bin`, whose `retry_after_secs` becomes the retry-after (without it,
//!   reclaim's own backoff applies). UNAUTHENTICATED, PERMISSION_DENIED and the rest are
//!   fatal. NOT_FOUND is gone for a removal and fatal for a listing.
//! - No TTL: Modal sets a sandbox's timeout at creation only, with no RPC to change it, so
//!   `ttl` is false and `renew` is the trait's default refusal.
//! - Not covered: V2 sandboxes (the `*V2` RPCs and their `x-modal-auth-token`), and
//!   environments other than the default one (`MODAL_ENVIRONMENT` is not read).

mod status;
pub mod wire;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OnceCell;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Status;

use super::{Capabilities, Entry, EntryState, Kind, Provider, ProviderError, Sandbox};
use crate::config::{CloudSettings, Secret};
use crate::labels::Selector;
use wire::{SandboxInfo, SandboxListRequest, SandboxListResponse, SandboxTag};

const NAME: &str = "modal";
const CLIENT_TYPE: &str = "9";
const CLIENT_VERSION: &str = "1.0.0";

/// Builds the registry entry: configured when both halves of the token are present.
pub fn entry(settings: &CloudSettings) -> Entry {
    let state = match (&settings.token, &settings.secret) {
        (Some(id), Some(secret)) => {
            EntryState::Configured(Arc::new(ModalProvider::new(settings, id, secret)))
        }
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
pub struct ModalProvider {
    url: String,
    timeout: Duration,
    token_id: Secret,
    token_secret: Secret,
    channel: OnceCell<Channel>,
}

impl ModalProvider {
    pub fn new(settings: &CloudSettings, token_id: &Secret, token_secret: &Secret) -> Self {
        ModalProvider {
            url: first_url(&settings.url),
            timeout: settings.timeout,
            token_id: token_id.clone(),
            token_secret: token_secret.clone(),
            channel: OnceCell::new(),
        }
    }

    async fn channel(&self) -> Result<Channel, ProviderError> {
        self.channel
            .get_or_try_init(|| async { self.connect() })
            .await
            .cloned()
    }

    fn connect(&self) -> Result<Channel, ProviderError> {
        let bad = |e: &dyn std::fmt::Display| {
            ProviderError::fatal(format!("{NAME}: invalid server URL {:?}: {e}", self.url))
        };
        let mut endpoint = Endpoint::from_shared(self.url.clone())
            .map_err(|e| bad(&e))?
            .timeout(self.timeout)
            .connect_timeout(self.timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("sandguard/", env!("CARGO_PKG_VERSION")))
            .map_err(|e| bad(&e))?;
        if self.url.starts_with("https://") {
            endpoint = endpoint
                .tls_config(ClientTlsConfig::new().with_webpki_roots())
                .map_err(|e| bad(&e))?;
        }
        Ok(endpoint.connect_lazy())
    }

    /// The metadata Modal wants on every call.
    fn authorize(&self, metadata: &mut MetadataMap) -> Result<(), ProviderError> {
        for (key, secret) in [
            ("x-modal-token-id", &self.token_id),
            ("x-modal-token-secret", &self.token_secret),
        ] {
            let mut value = AsciiMetadataValue::try_from(secret.expose()).map_err(|_| {
                ProviderError::fatal(format!(
                    "{NAME}: the token is not a valid gRPC metadata value"
                ))
            })?;
            value.set_sensitive(true);
            metadata.insert(key, value);
        }
        metadata.insert(
            "x-modal-client-type",
            AsciiMetadataValue::from_static(CLIENT_TYPE),
        );
        metadata.insert(
            "x-modal-client-version",
            AsciiMetadataValue::from_static(CLIENT_VERSION),
        );
        Ok(())
    }

    /// One unary call; a failure is classified, with a message starting with `what`.
    async fn call<Req, Resp>(
        &self,
        path: &'static str,
        message: Req,
        what: &str,
    ) -> Result<Resp, ProviderError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel().await?);
        let mut request = tonic::Request::new(message);
        self.authorize(request.metadata_mut())?;
        let result = match grpc.ready().await {
            Ok(()) => {
                let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
                grpc.unary(request, PathAndQuery::from_static(path), codec)
                    .await
            }
            Err(e) => Err(Status::unavailable(e.to_string())),
        };
        result
            .map(tonic::Response::into_inner)
            .map_err(|status| self.classify(&status, what))
    }

    /// A read, retried as [`super::retry::read`] says.
    async fn read<Req, Resp>(
        &self,
        path: &'static str,
        message: Req,
        what: &str,
    ) -> Result<Resp, ProviderError>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        super::retry::read(|| self.call(path, message.clone(), what)).await
    }

    fn classify(&self, status: &Status, what: &str) -> ProviderError {
        let message = format!(
            "{NAME}: {what}: {} (gRPC {})",
            self.redact(&status::text(status)),
            status::code_name(status.code())
        );
        status::classify(status.code(), wire::retry_after(status.details()), message)
    }

    fn redact(&self, text: &str) -> String {
        super::redact::redact(text, [&self.token_id, &self.token_secret])
    }

    async fn list_page(
        &self,
        tags: &[SandboxTag],
        before: Option<f64>,
    ) -> Result<Vec<SandboxInfo>, ProviderError> {
        let request = SandboxListRequest {
            before_timestamp: before.unwrap_or(0.0),
            include_finished: false,
            tags: tags.to_vec(),
            ..Default::default()
        };
        let page: SandboxListResponse = self
            .read(wire::SANDBOX_LIST, request, "failed to list sandboxes")
            .await
            .map_err(|e| match e {
                // No such app or environment: a configuration error, not an empty listing.
                ProviderError::Gone(m) => ProviderError::Fatal(m),
                other => other,
            })?;
        Ok(page.sandboxes)
    }

    /// Reads the tags of the sandboxes a tag-filtered page listed without them. One that is
    /// gone meanwhile keeps no tags, so the local check drops it.
    async fn fill_tags(&self, page: &mut [SandboxInfo]) -> Result<(), ProviderError> {
        for info in page.iter_mut().filter(|i| i.tags.is_empty()) {
            let request = wire::SandboxTagsGetRequest {
                sandbox_id: info.id.clone(),
            };
            let what = format!("failed to read the tags of sandbox {}", info.id);
            match self.read(wire::SANDBOX_TAGS_GET, request, &what).await {
                Ok(wire::SandboxTagsGetResponse { tags }) => info.tags = tags,
                Err(ProviderError::Gone(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Provider for ModalProvider {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: false,
            pagination: true,
        }
    }

    /// Pages go back in time: each asks for what was created before the last one seen
    /// (`before_timestamp`). A page that does not move back is an error; a sandbox seen on
    /// two pages (same timestamp) counts once.
    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let tags = tag_filter(selector);
        let pages = super::retry::walk(NAME, |before: Option<OrderedTime>| {
            let tags = &tags;
            async move {
                let before = before.map(|t| t.0);
                let mut page = self.list_page(tags, before).await?;
                let Some(last) = page.last().map(|s| s.created_at) else {
                    return Ok((Vec::new(), None));
                };
                if !next_page_moves_back(before, last) {
                    return Err(ProviderError::fatal(format!(
                        "{NAME}: the sandbox listing did not move back in time \
                         (before_timestamp {before:?}, last created_at {last})"
                    )));
                }
                if !tags.is_empty() {
                    self.fill_tags(&mut page).await?;
                }
                Ok((page, Some(OrderedTime(last))))
            }
        })
        .await?;
        let mut seen = HashSet::new();
        Ok(pages
            .into_iter()
            .filter(|s| seen.insert(s.id.clone()))
            .map(to_sandbox)
            .collect())
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let id = &sandbox.id;
        let request = wire::SandboxTerminateRequest {
            sandbox_id: id.clone(),
        };
        let reply: wire::SandboxTerminateResponse = self
            .call(
                wire::SANDBOX_TERMINATE,
                request,
                &format!("failed to terminate sandbox {id}"),
            )
            .await?;
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
            .call(wire::CLIENT_HELLO, wire::Empty {}, "failed to say hello")
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

/// The selector's valued terms as Modal tags (all must match). Key-only terms have no tag
/// equivalent and are left to the local check.
fn tag_filter(selector: &Selector) -> Vec<SandboxTag> {
    selector
        .terms()
        .iter()
        .filter_map(|(k, v)| {
            v.as_ref().map(|v| SandboxTag {
                tag_name: k.clone(),
                tag_value: v.clone(),
            })
        })
        .collect()
}

/// Whether a page ending at `last` lets the walk go on: the timestamp must be a real time and
/// strictly older than the bound that produced the page.
/// A page cursor: a creation time (an `f64` that is never NaN here: checked before use).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedTime(f64);

fn next_page_moves_back(before: Option<f64>, last: f64) -> bool {
    last.is_finite() && last > 0.0 && before.is_none_or(|b| last < b)
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
