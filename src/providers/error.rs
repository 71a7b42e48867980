//! How a provider call failed, in the terms the reclaim path decides by ([`ProviderError`]),
//! and what a failure says ([`Detail`]: its message and the HTTP status it came with).

use std::time::Duration;

/// What a failure says: its message, and the HTTP status it came with when it came over
/// HTTP, so a driver decides by the status, never by reading `(HTTP 409)` out of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    pub message: String,
    pub status: Option<u16>,
}

impl Detail {
    /// A message that came with an HTTP status.
    pub fn http(message: impl Into<String>, status: u16) -> Detail {
        Detail {
            message: message.into(),
            status: Some(status),
        }
    }
}

impl From<String> for Detail {
    fn from(message: String) -> Detail {
        Detail {
            message,
            status: None,
        }
    }
}

impl From<&str> for Detail {
    fn from(message: &str) -> Detail {
        Detail::from(message.to_string())
    }
}

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::ops::Deref for Detail {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

/// How a provider call failed, in the terms reclaim decides by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The sandbox no longer exists (or is being removed already): removal has succeeded.
    #[error("{0}")]
    Gone(Detail),
    /// Worth retrying: a timeout, a dropped connection, a 5xx, a 429. `retry_after` is the
    /// provider's own hint, which reclaim waits out before calling that provider again.
    #[error("{message}")]
    Transient {
        message: Detail,
        retry_after: Option<Duration>,
    },
    /// Retrying will not help: bad credentials, a refused request, a bug.
    #[error("{0}")]
    Fatal(Detail),
    /// sandguard will never act on this target: it does not name a sandbox of ours (a claim
    /// that turns out to be a container *name*, or a prefix of someone else's id). Final: it
    /// is reported once and leaves nothing pending.
    #[error("{0}")]
    Refused(String),
}

impl ProviderError {
    pub fn transient(message: impl Into<Detail>) -> Self {
        ProviderError::Transient {
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn fatal(message: impl Into<Detail>) -> Self {
        ProviderError::Fatal(message.into())
    }

    pub fn gone(message: impl Into<Detail>) -> Self {
        ProviderError::Gone(message.into())
    }

    /// The HTTP status the failure came with, if it came over HTTP.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Gone(d) | ProviderError::Fatal(d) => d.status,
            ProviderError::Transient { message, .. } => message.status,
            ProviderError::Refused(_) => None,
        }
    }

    /// The same error, its message rewritten by `f` (redacted, extended, …).
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> Self {
        match self {
            ProviderError::Gone(d) => ProviderError::Gone(Detail {
                message: f(d.message),
                ..d
            }),
            ProviderError::Transient {
                message,
                retry_after,
            } => ProviderError::Transient {
                message: Detail {
                    message: f(message.message),
                    ..message
                },
                retry_after,
            },
            ProviderError::Fatal(d) => ProviderError::Fatal(Detail {
                message: f(d.message),
                ..d
            }),
            ProviderError::Refused(m) => ProviderError::Refused(f(m)),
        }
    }
}
