//! gRPC statuses in the terms reclaim decides by, and in words fit for an error line.

use std::time::Duration;

use tonic::{Code, Status};

use crate::providers::ProviderError;

/// The classes reclaim decides by. A retry policy in the details makes any error transient:
/// that is how Modal throttles.
pub(super) fn classify(
    code: Code,
    retry_after: Option<Duration>,
    message: String,
) -> ProviderError {
    match code {
        _ if retry_after.is_some() => ProviderError::Transient {
            message: message.into(),
            retry_after,
        },
        Code::NotFound => ProviderError::gone(message),
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Internal
        | Code::Unknown
        | Code::Cancelled
        | Code::Aborted
        | Code::ResourceExhausted => ProviderError::transient(message),
        _ => ProviderError::fatal(message),
    }
}

/// The status message and the transport error beneath it, on one line.
pub(super) fn text(status: &Status) -> String {
    let mut text: String = status
        .message()
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect();
    if let Some(beneath) = std::error::Error::source(status) {
        let chain = crate::providers::retry::error_chain(beneath);
        if !text.contains(&chain) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&chain);
        }
    }
    if text.is_empty() {
        "no details".into()
    } else {
        text
    }
}

/// The canonical upper-case name, as gRPC tools print it.
pub(super) fn code_name(code: Code) -> String {
    let mut out = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified() {
        let c = |code| classify(code, None, String::new());
        assert!(matches!(c(Code::NotFound), ProviderError::Gone(_)));
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Internal,
            Code::Unknown,
            Code::ResourceExhausted,
        ] {
            assert!(
                matches!(c(code), ProviderError::Transient { .. }),
                "{code:?}"
            );
        }
        for code in [
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::InvalidArgument,
        ] {
            assert!(matches!(c(code), ProviderError::Fatal(_)), "{code:?}");
        }
        let hinted = classify(
            Code::ResourceExhausted,
            Some(Duration::from_secs(2)),
            String::new(),
        );
        assert_eq!(
            hinted,
            ProviderError::Transient {
                message: String::new().into(),
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
        assert_eq!(code_name(Code::Unavailable), "UNAVAILABLE");
    }
}
