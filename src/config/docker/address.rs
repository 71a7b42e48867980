//! A Docker daemon's address as one type that can only be printed redacted.
//!
//! Decision: the address is a [`DaemonAddress`], never a `String`, from where it is resolved
//! to where it is connected to. Its `Display` and `Debug` go through the crate's one redaction
//! of URLs ([`crate::providers::redact::url`]), so whatever prints it (`sandguard providers`,
//! the errors of `ps`, `stop` and `sweep`, the wrapper's warnings, a log line, a journal) shows
//! `tcp://user:[redacted]@host:2375`; the text itself is had only through
//! [`DaemonAddress::expose`], which the connecting code calls and no message does.

use std::fmt;

use crate::providers::redact;

/// `unix:///path`, `tcp://host:port`, …: where a Docker daemon listens (module docs).
#[derive(Clone, PartialEq, Eq)]
pub struct DaemonAddress(String);

impl DaemonAddress {
    pub(crate) fn new(address: impl Into<String>) -> DaemonAddress {
        DaemonAddress(address.into())
    }

    /// The address as it was given, credentials included: to connect, never to print.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DaemonAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact::url(&self.0))
    }
}

impl fmt::Debug for DaemonAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact::url(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_prints_only_redacted_and_connects_with_the_whole() {
        let a = DaemonAddress::new("tcp://user:s3cretPW@127.0.0.1:1");
        assert_eq!(a.to_string(), "tcp://user:[redacted]@127.0.0.1:1");
        assert_eq!(format!("{a:?}"), "\"tcp://user:[redacted]@127.0.0.1:1\"");
        assert_eq!(
            format!("{:?}", Some(&a)),
            "Some(\"tcp://user:[redacted]@127.0.0.1:1\")"
        );
        assert_eq!(a.expose(), "tcp://user:s3cretPW@127.0.0.1:1");
    }
}
