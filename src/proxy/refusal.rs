//! Why a proxy answers a request itself instead of passing it on: one typed value every step
//! of the create pipeline ([`super::create`]) and every route check returns, rendered by each
//! proxy in its API's own error shape (Docker: `{"message": …}` and the connection closed; E2B
//! and Daytona: `{"code": N, "message": …}`), so a client shows it as it shows any API error.
//! Every message starts `sandguard:`.
//!
//! A per-session limit on creates is [`Refusal::Limit`], refused at the pipeline's decide
//! step. Decision: a limit is answered `403` in every API: no client retries it (E2B's SDK
//! and flyctl retry `429`, which a budget must not invite), and each shows the message.

use std::fmt;

use super::claim::SlotRefusal;
use super::stamp::MAX_CREATE_BODY;

/// A request the proxy will not pass on, and why.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A body to be stamped over [`MAX_CREATE_BODY`] (413): it cannot be stamped, and is
    /// never passed on unstamped.
    TooLarge,
    /// A body that could not be read to its end (400).
    Unreadable,
    /// A create whose body cannot be stamped as the service would read it (400).
    Unstampable(Unstampable),
    /// A create a limit of the session refuses (403, no API retries it; `crate::budget`),
    /// or whose slot the sidecar did not decide in time (503).
    Limit(SlotRefusal),
    /// Anything else, in the proxy's own words (a message starting `sandguard:`).
    Said { status: u16, message: String },
}

impl Refusal {
    /// A refusal in the proxy's own words; `message` starts `sandguard:`.
    pub(crate) fn said(status: u16, message: impl Into<String>) -> Refusal {
        Refusal::Said {
            status,
            message: message.into(),
        }
    }

    /// The HTTP status it is answered with.
    pub(crate) fn status(&self) -> u16 {
        match self {
            Refusal::TooLarge => 413,
            Refusal::Unreadable | Refusal::Unstampable(_) => 400,
            Refusal::Limit(SlotRefusal::Exceeded(_)) => 403,
            Refusal::Limit(SlotRefusal::TimedOut) => 503,
            Refusal::Said { status, .. } => *status,
        }
    }
}

impl From<Unstampable> for Refusal {
    fn from(why: Unstampable) -> Refusal {
        Refusal::Unstampable(why)
    }
}

/// Why a create body cannot be stamped with the session's labels.
#[derive(Debug, Clone, PartialEq)]
pub enum Unstampable {
    /// Not JSON the service would read alike (serde's reason).
    NotJson(String),
    /// JSON, but not an object.
    NotObject,
    /// Its label map (under this key) is neither an object nor `null`.
    Labels(&'static str),
    /// A Docker container create whose `HostConfig` Go would not decode (the reason), so its
    /// named volumes cannot be read.
    HostConfig(&'static str),
}

impl fmt::Display for Unstampable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unstampable::NotJson(e) => write!(f, "its body is not JSON: {e}"),
            Unstampable::NotObject => f.write_str("its body is not a JSON object"),
            Unstampable::Labels(key) => write!(f, "its `{key}` is not an object"),
            Unstampable::HostConfig(e) => write!(f, "its HostConfig cannot be read: {e}"),
        }
    }
}

impl fmt::Display for Refusal {
    /// The reason, without the `sandguard:` each proxy puts before it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::TooLarge => write!(
                f,
                "a create or commit body over {} MiB cannot be stamped",
                MAX_CREATE_BODY >> 20
            ),
            Refusal::Unreadable => f.write_str("its body could not be read"),
            Refusal::Unstampable(why) => write!(f, "cannot stamp this create: {why}"),
            Refusal::Limit(SlotRefusal::Exceeded(limit)) => limit.fmt(f),
            Refusal::Limit(SlotRefusal::TimedOut) => f.write_str(
                "the session's limits could not be checked in time; nothing was created",
            ),
            Refusal::Said { message, .. } => {
                f.write_str(message.strip_prefix("sandguard: ").unwrap_or(message))
            }
        }
    }
}
