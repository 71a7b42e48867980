//! The auth token of Modal's V2 sandbox RPCs: fetched with `AuthTokenGet`, kept, and fetched
//! again before it expires.
//!
//! The token is a JWT. Only its payload's `exp` (Unix seconds, possibly fractional) is read,
//! without verifying the signature: the server that issued it judges it, sandguard only needs
//! to know when to ask for a new one. The payload is base64url (the `base64` crate, already in
//! the tree through reqwest and tonic), read leniently as the hand-written decoder it replaced
//! did: `=` padding or none, and stray low bits in the last character ignored.
//!
//! Decisions:
//! - One token per process, shared by every call; concurrent callers wait for one fetch (the
//!   lock is held across it), so a burst of removals costs one `AuthTokenGet`.
//! - A token is used until half of the lifetime it had left when it came has passed (Modal's
//!   client refreshes at 50–60 %), then fetched again. A refresh that fails for a transient
//!   reason while the old token is still valid keeps the old one, as Modal's client does; past
//!   its `exp`, the failure is the call's.
//! - A token without `exp` is kept for 20 minutes (Modal's client's default for that case); a
//!   token whose payload cannot be read is an error: the V2 calls that needed it fail, and say
//!   so, rather than run on a token of unknown lifetime.
//! - The token is a [`Secret`]: it is sent as sensitive metadata and redacted from errors.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine as _;
use tokio::sync::Mutex;

use crate::config::Secret;
use crate::providers::ProviderError;

/// How long a token without `exp` is trusted.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(20 * 60);

/// The process's V2 auth token, if one was fetched.
#[derive(Default)]
pub(super) struct AuthToken {
    slot: Mutex<Option<Held>>,
}

struct Held {
    token: Secret,
    refresh_at: SystemTime,
    expires_at: SystemTime,
}

impl AuthToken {
    /// The token to send at `now`: the one held, or a new one from `fetch` when none is held
    /// or it has used up half its lifetime.
    pub(super) async fn get<F, Fut>(
        &self,
        now: SystemTime,
        fetch: F,
    ) -> Result<Secret, ProviderError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, ProviderError>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some(held) = slot.as_ref().filter(|h| now < h.refresh_at) {
            return Ok(held.token.clone());
        }
        let fetched = fetch().await.and_then(|raw| {
            let expires_at = expiry(&raw, now)?;
            Ok(Held {
                refresh_at: now + expires_at.duration_since(now).unwrap_or_default() / 2,
                token: Secret::new(raw),
                expires_at,
            })
        });
        match (fetched, slot.as_ref()) {
            (Ok(held), _) => {
                let token = held.token.clone();
                *slot = Some(held);
                Ok(token)
            }
            (Err(ProviderError::Transient { .. }), Some(old)) if now < old.expires_at => {
                tracing::debug!("modal: refreshing the auth token failed; the held one is valid");
                Ok(old.token.clone())
            }
            (Err(e), _) => Err(e),
        }
    }
}

/// When the JWT `token` expires: its payload's `exp`, or [`DEFAULT_LIFETIME`] from `now`
/// when it has none.
pub(super) fn expiry(token: &str, now: SystemTime) -> Result<SystemTime, ProviderError> {
    let unreadable =
        || ProviderError::fatal("modal: the auth token from AuthTokenGet is not a readable JWT");
    let payload = token.split('.').nth(1).ok_or_else(unreadable)?;
    let bytes = base64url(payload).ok_or_else(unreadable)?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| unreadable())?;
    match claims.get("exp") {
        None | Some(serde_json::Value::Null) => Ok(now + DEFAULT_LIFETIME),
        Some(exp) => {
            let secs = exp.as_f64().filter(|s| s.is_finite() && *s >= 0.0);
            let secs = secs.ok_or_else(unreadable)?;
            Ok(UNIX_EPOCH + Duration::from_secs_f64(secs.min(1e11)))
        }
    }
}

/// base64url (RFC 4648 §5) as read here: after any `=` padding is trimmed, none required.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::RequireNone)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes base64url, with or without `=` padding.
fn base64url(text: &str) -> Option<Vec<u8>> {
    BASE64URL.decode(text.trim_end_matches('=')).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// `{"alg":"none"}`, then `payload` base64url-encoded (no padding).
    fn jwt(payload: &str) -> String {
        let enc = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
        format!("eyJhbGciOiJub25lIn0.{enc}.sig")
    }

    fn at(secs: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    #[test]
    fn base64url_decodes_with_and_without_padding() {
        assert_eq!(base64url("aGk").unwrap(), b"hi");
        assert_eq!(base64url("aGk=").unwrap(), b"hi");
        assert_eq!(base64url("aGl").unwrap(), b"hi");
        assert_eq!(base64url("-_8").unwrap(), [0xfb, 0xff]);
        assert_eq!(base64url("").unwrap(), b"");
        assert!(base64url("a").is_none());
        assert!(base64url("a+b/").is_none());
    }

    #[test]
    fn the_expiry_is_the_payloads_exp() {
        let now = at(1000.0);
        assert_eq!(expiry(&jwt(r#"{"exp":1800}"#), now).unwrap(), at(1800.0));
        assert_eq!(
            expiry(&jwt(r#"{"exp":1800.5,"sub":"x"}"#), now).unwrap(),
            at(1800.5)
        );
        assert_eq!(expiry(&jwt(r#"{"sub":"x"}"#), now).unwrap(), at(2200.0));
        for bad in [
            "nodots",
            "a.!!!.c",
            &jwt("not json"),
            &jwt(r#"{"exp":"soon"}"#),
        ] {
            assert!(
                matches!(expiry(bad, now), Err(ProviderError::Fatal(_))),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn one_fetch_until_half_the_lifetime_then_another() {
        let auth = AuthToken::default();
        let fetches = AtomicU32::new(0);
        let fetch = || async {
            let n = fetches.fetch_add(1, Ordering::SeqCst);
            Ok(jwt(&format!(
                r#"{{"exp":{},"n":{n}}}"#,
                1000 + 100 * (n + 1)
            )))
        };
        let first = auth.get(at(1000.0), fetch).await.unwrap();
        for t in [1000.0, 1020.0, 1049.9] {
            let again = auth.get(at(t), fetch).await.unwrap();
            assert_eq!(again.expose(), first.expose());
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        let second = auth.get(at(1050.0), fetch).await.unwrap();
        assert_ne!(second.expose(), first.expose());
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_a_valid_token_and_fails_past_its_exp() {
        let auth = AuthToken::default();
        let good = || async { Ok(jwt(r#"{"exp":1100}"#)) };
        let down = || async { Err(ProviderError::transient("unavailable")) };
        let denied = || async { Err(ProviderError::fatal("permission denied")) };
        let token = auth.get(at(1000.0), good).await.unwrap();
        let kept = auth.get(at(1060.0), down).await.unwrap();
        assert_eq!(kept.expose(), token.expose());
        assert!(auth.get(at(1060.0), denied).await.is_err());
        assert!(auth.get(at(1100.0), down).await.is_err());
        assert!(AuthToken::default().get(at(0.0), down).await.is_err());
    }
}
