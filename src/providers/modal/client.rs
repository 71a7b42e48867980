//! One unary gRPC call to Modal: the lazily built channel, the metadata every call carries,
//! the auth token a V2 call adds, and the failure classified and redacted; and reads retried.
//!
//! Decision: a read waits out the server's throttles (an error carrying Modal's
//! `RPCRetryPolicy`) without counting them as failed tries, as Modal's own client does, for
//! up to [`MAX_THROTTLE_WAIT`] in all; other transient failures, and throttles past that, are
//! retried as [`crate::providers::retry::read`] says. Modal's client has no such bound unless
//! `MODAL_MAX_THROTTLE_WAIT` sets one; sandguard's listings must end.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::Status;

use super::wire::{self, Api};
use super::{status, ModalProvider, NAME};
use crate::config::Secret;
use crate::providers::ProviderError;

/// The most a read waits out the server's throttles, in all.
pub(super) const MAX_THROTTLE_WAIT: Duration = Duration::from_secs(30);

const CLIENT_TYPE: &str = "9";
const CLIENT_VERSION: &str = "1.0.0";

impl ModalProvider {
    pub(super) async fn channel(&self) -> Result<Channel, ProviderError> {
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

    /// The metadata Modal wants on every call, and the auth token on a V2 call.
    pub(super) fn authorize(
        &self,
        metadata: &mut MetadataMap,
        auth_token: Option<&Secret>,
    ) -> Result<(), ProviderError> {
        let token = auth_token.map(|t| (wire::AUTH_TOKEN_HEADER, t));
        for (key, secret) in [
            ("x-modal-token-id", &self.token_id),
            ("x-modal-token-secret", &self.token_secret),
        ]
        .into_iter()
        .chain(token)
        {
            let mut value = AsciiMetadataValue::try_from(secret.expose()).map_err(|_| {
                ProviderError::fatal(format!("{NAME}: {key} is not a valid gRPC metadata value"))
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

    /// One call through the RPCs of `api`: a V2 call first gets the auth token. A failure is
    /// classified, with a message starting with `what`.
    pub(super) async fn call<Req, Resp>(
        &self,
        api: Api,
        path: &'static str,
        message: Req,
        what: &str,
    ) -> Result<Resp, ProviderError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let token = match api {
            Api::V1 => None,
            Api::V2 => Some(self.auth_token().await?),
        };
        self.unary(path, message, what, token.as_ref()).await
    }

    /// A read, retried (see the module's decision); a V2 read's token too.
    pub(super) async fn read<Req, Resp>(
        &self,
        api: Api,
        path: &'static str,
        message: Req,
        what: &str,
    ) -> Result<Resp, ProviderError>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        patiently(|| self.call(api, path, message.clone(), what)).await
    }

    /// The V2 auth token: the one held, or a new one (see `auth.rs`). One try: the read or
    /// the removal that needs it is what is retried, so retries never nest.
    async fn auth_token(&self) -> Result<Secret, ProviderError> {
        let fetch = || async {
            let reply: wire::AuthTokenGetResponse = self
                .unary(
                    wire::path::AUTH_TOKEN_GET,
                    wire::AuthTokenGetRequest {},
                    "failed to get an auth token for the V2 sandbox RPCs",
                    None,
                )
                .await?;
            Ok(reply.token)
        };
        self.auth.get(SystemTime::now(), fetch).await
    }

    async fn unary<Req, Resp>(
        &self,
        path: &'static str,
        message: Req,
        what: &str,
        auth_token: Option<&Secret>,
    ) -> Result<Resp, ProviderError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel().await?);
        let mut request = tonic::Request::new(message);
        self.authorize(request.metadata_mut(), auth_token)?;
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
            .map_err(|status| self.classify(&status, what, auth_token))
    }

    fn classify(&self, status: &Status, what: &str, auth_token: Option<&Secret>) -> ProviderError {
        let message = format!(
            "{NAME}: {what}: {} (gRPC {})",
            self.redact(&status::text(status), auth_token),
            status::code_name(status.code())
        );
        status::classify(status.code(), wire::retry_after(status.details()), message)
    }

    pub(super) fn redact(&self, text: &str, auth_token: Option<&Secret>) -> String {
        let secrets = [&self.token_id, &self.token_secret].into_iter();
        crate::providers::redact::redact(text, secrets.chain(auth_token))
    }
}

/// Runs `attempt` as a read: throttles waited out up to [`MAX_THROTTLE_WAIT`] in all, then
/// [`crate::providers::retry::read`].
async fn patiently<T, F, Fut>(attempt: F) -> Result<T, ProviderError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let waited_ms = AtomicU64::new(0);
    crate::providers::retry::read(|| async {
        loop {
            match attempt().await {
                Err(ProviderError::Transient {
                    retry_after: Some(wait),
                    message,
                }) => {
                    let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                    let before = waited_ms.fetch_add(ms, Ordering::Relaxed);
                    if Duration::from_millis(before.saturating_add(ms)) > MAX_THROTTLE_WAIT {
                        return Err(ProviderError::Transient {
                            message,
                            retry_after: Some(wait),
                        });
                    }
                    tracing::debug!("{message}; throttled, retrying in {wait:?}");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    })
    .await
}

/// The client type and version every call says (for the unit tests).
#[cfg(test)]
pub(super) const TEST_CLIENT: (&str, &str) = (CLIENT_TYPE, CLIENT_VERSION);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[tokio::test(start_paused = true)]
    async fn throttles_are_waited_out_without_using_up_the_tries() {
        let calls = AtomicU32::new(0);
        let throttle = || ProviderError::Transient {
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(1)),
        };
        let result = patiently(|| async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0..=9 => Err(throttle()),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(result.unwrap(), 7);
        assert_eq!(calls.load(Ordering::SeqCst), 11);

        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let result: Result<(), _> = patiently(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(throttle())
        })
        .await;
        assert!(matches!(result, Err(ProviderError::Transient { .. })));
        let waited = started.elapsed();
        assert!(
            waited >= MAX_THROTTLE_WAIT && waited < MAX_THROTTLE_WAIT * 2,
            "{waited:?}"
        );

        let calls = AtomicU32::new(0);
        let result: Result<(), _> = patiently(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(ProviderError::transient("unavailable"))
        })
        .await;
        assert!(result.is_err());
        assert_eq!(
            calls.load(Ordering::SeqCst),
            crate::providers::retry::READ_ATTEMPTS
        );
    }
}
