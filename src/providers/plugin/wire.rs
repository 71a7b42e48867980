//! The plugin protocol's messages, and how a plugin's answer (exit status, stdout, stderr)
//! becomes a reply or a [`crate::providers::ProviderError`] ([`interpret()`], in
//! `wire/interpret.rs`). Pure: no processes here, so every rule is tested on plain bytes. The
//! protocol itself is described in README.md ("Plugin providers").
//!
//! A plugin is text sandguard did not write: its stderr, its error replies and whatever a
//! parse error quotes from its stdout go through [`crate::providers::redact`] (the HTTP
//! layer's redaction) before they reach any message, and stderr and error texts are redacted
//! *before* they are cut to their last 400 characters, so a cut can never leave half a
//! credential behind its key.

use std::collections::BTreeMap;
use std::process::ExitStatus;

use serde::Deserialize;

use crate::providers::{Capabilities, Kind, Sandbox};

mod interpret;

pub(super) use interpret::{describe_status, interpret};

/// What one call of a plugin produced.
#[derive(Debug)]
pub(super) struct Answer {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    /// The plugin printed more than the reply limit; the rest was discarded.
    pub stdout_truncated: bool,
    pub stderr: Vec<u8>,
}

/// `list` → `{"sandboxes": [...]}`.
#[derive(Debug, Deserialize)]
pub(super) struct ListReply {
    pub sandboxes: Vec<Listed>,
}

/// One sandbox as a plugin lists it. Unknown fields are ignored, so plugins may say more.
#[derive(Debug, Deserialize)]
pub(super) struct Listed {
    pub id: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub created_at: Option<i64>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl Listed {
    pub(super) fn into_sandbox(self, provider: &str) -> Sandbox {
        Sandbox {
            inherited: false,
            identity: None,
            provider: provider.to_string(),
            kind: Kind::Instance,
            id: self.id,
            status: self.status.unwrap_or_else(|| "unknown".into()),
            created_at: self.created_at,
            expires_at: None,
            image: self.image,
            labels: self.labels,
        }
    }
}

/// `remove` and `renew` → `{"result": "removed" | "renewed" | "gone"}`.
#[derive(Debug, Deserialize)]
pub(super) struct Done {
    pub result: Did,
}

/// What the plugin says it did (`result`). Named for the plugin's word, not an outcome:
/// [`crate::reclaim::Outcome`] is what a reclaim made of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Did {
    Removed,
    Renewed,
    Gone,
}

/// `describe` → `{"capabilities": {"labels": true, "ttl": false}, "detail": "…"}`.
#[derive(Debug, Deserialize)]
pub(super) struct Described {
    pub capabilities: WireCapabilities,
    #[serde(default)]
    pub detail: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct WireCapabilities {
    #[serde(default = "yes")]
    pub labels: bool,
    #[serde(default)]
    pub ttl: bool,
}

fn yes() -> bool {
    true
}

impl From<WireCapabilities> for Capabilities {
    fn from(c: WireCapabilities) -> Self {
        Capabilities {
            labels: c.labels,
            ttl: c.ttl,
            pagination: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;
    use crate::providers::ProviderError;
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

    fn answer(code: i32, stdout: &str, stderr: &str) -> Answer {
        Answer {
            status: ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stdout_truncated: false,
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    fn list(a: &Answer) -> Result<ListReply, ProviderError> {
        interpret(a, "failed to list sandboxes", "/bin/p", &[])
    }

    #[test]
    fn a_list_reply_maps_to_sandboxes() {
        let a = answer(
            0,
            r#"{"sandboxes":[{"id":"a1","status":"running","created_at":1700000000,"image":"py",
                "labels":{"sandguard.session":"s1"},"extra":1},{"id":"b2"}],"more":true}"#,
            "",
        );
        let reply = list(&a).unwrap();
        let s: Vec<Sandbox> = reply
            .sandboxes
            .into_iter()
            .map(|l| l.into_sandbox("acme"))
            .collect();
        assert_eq!(s[0].provider, "acme");
        assert_eq!(s[0].session(), Some("s1"));
        assert_eq!(s[0].created_at, Some(1_700_000_000));
        assert_eq!(s[0].image.as_deref(), Some("py"));
        assert_eq!(s[1].status, "unknown");
        assert!(s[1].labels.is_empty());
    }

    #[test]
    fn an_error_reply_decides_retry_whatever_the_exit_status() {
        let a = answer(
            1,
            r#"{"error":"rate limited","retry":true,"retry_after_secs":7}"#,
            "",
        );
        assert_eq!(
            list(&a).unwrap_err(),
            ProviderError::Transient {
                message: "failed to list sandboxes: rate limited".into(),
                retry_after: Some(Duration::from_secs(7)),
            }
        );
        let a = answer(0, r#"{"error":"bad token"}"#, "");
        assert_eq!(
            list(&a).unwrap_err(),
            ProviderError::Fatal("failed to list sandboxes: bad token".into())
        );
    }

    #[test]
    fn a_crash_is_transient_and_quotes_the_end_of_stderr_without_control_characters() {
        let a = answer(3, "", "starting\n\x1b[31mpanic: boom\x1b[0m\n");
        let err = list(&a).unwrap_err();
        assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "failed to list sandboxes: plugin /bin/p exited with status 3; stderr: starting | [31mpanic: boom[0m"
        );
        let killed = Answer {
            status: ExitStatus::from_raw(9),
            ..answer(0, "", "")
        };
        assert!(list(&killed)
            .unwrap_err()
            .to_string()
            .ends_with("plugin /bin/p was killed by signal 9"));
        let long = "x".repeat(2000);
        let msg = list(&answer(1, "", &long)).unwrap_err().to_string();
        assert!(
            msg.ends_with(&format!("stderr: …{}", "x".repeat(400))),
            "{msg}"
        );
    }

    #[test]
    fn what_a_plugin_says_is_redacted_before_it_is_cut() {
        let known = [Secret::new("e2b_kn0wn")];
        let interpret_list = |a: &Answer| -> String {
            interpret::<ListReply>(a, "failed to list sandboxes", "/bin/p", &known)
                .unwrap_err()
                .to_string()
        };
        let stderr = format!(
            "token=s3cr3t-1\nAuthorization: Bearer b3ar3r-2\nkey is e2b_kn0wn\n{}",
            "x".repeat(300)
        );
        let msg = interpret_list(&answer(1, "", &stderr));
        for secret in ["s3cr3t-1", "b3ar3r-2", "e2b_kn0wn"] {
            assert!(!msg.contains(secret), "{msg}");
        }
        assert!(
            msg.contains("token=[redacted] | Authorization: Bearer [redacted]"),
            "{msg}"
        );
        // A credential longer than the quote: redacted first, so no tail of it survives.
        let long = format!("password={}", "p".repeat(1000));
        assert!(interpret_list(&answer(1, "", &long)).ends_with("stderr: password=[redacted]"));
        let msg = interpret_list(&answer(0, r#"{"error":"denied for api_key=k3y-3"}"#, ""));
        assert_eq!(
            msg,
            "failed to list sandboxes: denied for api_key=[redacted]"
        );
        let msg = interpret_list(&answer(0, r#"{"sandboxes":"token=s3cr3t-4"}"#, ""));
        assert!(
            msg.contains("unreadable reply") && !msg.contains("s3cr3t-4"),
            "{msg}"
        );
    }

    #[test]
    fn garbage_is_fatal() {
        for (out, says) in [
            ("hello, I am not JSON", "not JSON"),
            (r#"{"sandboxes":"many"}"#, "unreadable reply"),
            (
                r#"{"sandboxes":[{"status":"running"}]}"#,
                "missing field `id`",
            ),
            (r#"{"error":42}"#, "unreadable error reply"),
            ("", "not JSON"),
        ] {
            let err = list(&answer(0, out, "")).unwrap_err();
            assert!(matches!(err, ProviderError::Fatal(_)), "{out}: {err:?}");
            assert!(err.to_string().contains(says), "{out}: {err}");
        }
        let big = Answer {
            stdout_truncated: true,
            ..answer(0, "{", "")
        };
        assert!(list(&big).unwrap_err().to_string().contains("too large"));
    }

    #[test]
    fn done_and_described_replies_parse() {
        let d: Done = interpret(&answer(0, r#"{"result":"gone"}"#, ""), "w", "p", &[]).unwrap();
        assert_eq!(d.result, Did::Gone);
        assert!(interpret::<Done>(&answer(0, r#"{"result":"maybe"}"#, ""), "w", "p", &[]).is_err());
        let d: Described = interpret(
            &answer(0, r#"{"capabilities":{"ttl":true}}"#, ""),
            "w",
            "p",
            &[],
        )
        .unwrap();
        let c = Capabilities::from(d.capabilities);
        assert!(c.labels && c.ttl && !c.pagination);
        assert_eq!(d.detail, None);
    }
}
