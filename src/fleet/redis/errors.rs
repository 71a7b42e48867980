//! How a failure of the store is put into words: from the client's error kind and server
//! code only, with the URL redacted, so that no message of ours can carry the password.
//!
//! Decisions:
//! - **A host no resolver finds is said so** (`cannot resolve the fleet store host H (…)`),
//!   never "connection lost": a misspelt host or a DNS outage is fixed in another place than
//!   a Redis that went away. The client cannot tell them apart for us: a failed lookup
//!   reaches us as an I/O error of no kind of its own (std's `getaddrinfo` error is
//!   `Uncategorized`), as a dropped connection does. So when a call fails with an I/O error
//!   that is neither a timeout nor a refusal, the store's host is looked up once more, here,
//!   within the call's deadline: a lookup that fails names the host and the resolver's own
//!   words (no secret in either: the password is in neither, and the URL shown is masked).
//!   It costs a lookup only on such a failure; a host that resolves now keeps the client's
//!   reading ("connection lost"). Matching std's message text was the alternative; std does
//!   not promise it.
//! - A unix socket needs no resolver and is never looked up; an IP literal always resolves.
//! - A lookup that hangs past the deadline is not called a lookup failure: what is known is
//!   only that the store did not answer ("no answer to connect within the timeout").

use redis::ConnectionAddr;

use super::RedisStore;
use crate::fleet::FleetError;

impl RedisStore {
    /// `e` in words ([`describe`]), for a failure that is no lookup's (an answer that could
    /// not be parsed, say).
    pub(super) fn error(&self, e: &redis::RedisError) -> FleetError {
        FleetError {
            store: self.shown.clone(),
            message: describe(e),
        }
    }

    /// A call's failure in words; an I/O failure that may have been the host's lookup is told
    /// apart by looking the host up (see the module docs).
    pub(super) async fn failed(&self, e: &redis::RedisError) -> FleetError {
        if e.is_io_error() && !e.is_timeout() && !e.is_connection_refusal() {
            if let Some(why) = self.unresolved().await {
                return FleetError {
                    store: self.shown.clone(),
                    message: why,
                };
            }
        }
        self.error(e)
    }

    /// Why the store's host cannot be resolved; `None` when it can (or when it is no host).
    async fn unresolved(&self) -> Option<String> {
        let (host, port) = match self.client.get_connection_info().addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host.as_str(), *port)
            }
            _ => return None,
        };
        let lookup = tokio::net::lookup_host((host, port));
        let why = match tokio::time::timeout(self.timeout, lookup).await {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(mut found)) => match found.next() {
                None => "it has no address".into(),
                Some(_) => return None,
            },
            Err(_) => return None,
        };
        Some(format!(
            "cannot resolve the fleet store host {host} ({why})"
        ))
    }
}

/// What went wrong, in words that cannot carry a secret: the client's kind and server code
/// (`WRONGPASS`, `NOAUTH`, …), or the I/O error's kind.
pub(super) fn describe(e: &redis::RedisError) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    if e.is_connection_refusal() {
        return "connection refused".into();
    }
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return "authentication failed (check the user and password)".into();
    }
    if let Some(code) = e.code() {
        return match code {
            "WRONGPASS" | "NOAUTH" => format!("authentication failed ({code})"),
            other => format!("the server answered {other}"),
        };
    }
    if e.is_io_error() || e.is_connection_dropped() {
        return "connection lost".into();
    }
    format!("{:?} error", e.kind())
}
