//! How a plugin's answer becomes a reply or an error ([`interpret`]): its error reply first,
//! then its exit status, then its stdout as the reply; and what of its stderr an error quotes
//! (the end, redacted line by line before it is cut, control characters dropped).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::Answer;
use crate::config::Secret;
use crate::providers::redact::redact;
use crate::providers::ProviderError;

/// At most this much of a plugin's stderr is quoted in an error message (the end of it:
/// that is where a crash says what happened).
const STDERR_QUOTE: usize = 400;

/// `{"error": "…", "retry": true, "retry_after_secs": 5}`: the plugin's own word on a failure.
#[derive(Debug, Deserialize)]
struct ErrorReply {
    error: String,
    #[serde(default)]
    retry: bool,
    #[serde(default)]
    retry_after_secs: Option<u64>,
}

/// Turns an answer into the reply `T`, or the error it stands for:
///
/// 1. stdout is an error reply (whatever the exit status): `retry: true` is transient (with its
///    `retry_after_secs`), otherwise fatal;
/// 2. otherwise a non-zero exit (or death by a signal) is transient: a crash is retried until
///    reclaim's deadline, and what is left is pending for the next sweep;
/// 3. otherwise stdout must parse as `T`; anything else is fatal (a protocol violation).
///
/// `what` says what was being done ("failed to list sandboxes"); `program` names the plugin.
/// Every message is redacted: `secrets` (the credentials sandguard knows, which the plugin
/// sees in its environment) and anything shaped like a credential.
pub(crate) fn interpret<T: DeserializeOwned>(
    answer: &Answer,
    what: &str,
    program: &str,
    secrets: &[Secret],
) -> Result<T, ProviderError> {
    decide(answer, what, program, secrets).map_err(|e| redacted(e, secrets))
}

/// [`interpret`] before the last redaction of the whole message.
fn decide<T: DeserializeOwned>(
    answer: &Answer,
    what: &str,
    program: &str,
    secrets: &[Secret],
) -> Result<T, ProviderError> {
    let stderr = stderr_note(&answer.stderr, secrets);
    let value: Option<serde_json::Value> = if answer.stdout_truncated {
        None
    } else {
        serde_json::from_slice(&answer.stdout).ok()
    };
    if let Some(v) = value.as_ref().filter(|v| v.get("error").is_some()) {
        return Err(match ErrorReply::deserialize(v) {
            Ok(e) => {
                let message = format!(
                    "{what}: {}",
                    clean(&redact(&e.error, secrets), STDERR_QUOTE)
                );
                if e.retry {
                    ProviderError::Transient {
                        message: message.into(),
                        retry_after: e.retry_after_secs.map(Duration::from_secs),
                    }
                } else {
                    ProviderError::fatal(message)
                }
            }
            Err(e) => ProviderError::fatal(format!(
                "{what}: plugin {program} printed an unreadable error reply ({e}){stderr}"
            )),
        });
    }
    if !answer.status.success() {
        return Err(ProviderError::transient(format!(
            "{what}: plugin {program} {}{stderr}",
            describe_status(answer.status)
        )));
    }
    if answer.stdout_truncated {
        return Err(ProviderError::fatal(format!(
            "{what}: plugin {program} printed a reply too large to read{stderr}"
        )));
    }
    let Some(value) = value else {
        return Err(ProviderError::fatal(format!(
            "{what}: plugin {program} printed something that is not JSON{stderr}"
        )));
    };
    T::deserialize(value).map_err(|e| {
        ProviderError::fatal(format!(
            "{what}: plugin {program} printed an unreadable reply ({e}){stderr}"
        ))
    })
}

/// `exited with status 3`, `was killed by signal 9`.
pub(crate) fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended with {status}"),
    }
}

/// The same error with its message redacted.
fn redacted(e: ProviderError, secrets: &[Secret]) -> ProviderError {
    e.map_message(|m| redact(&m, secrets))
}

/// `; stderr: …` with the end of the plugin's stderr (redacted line by line, then cut), or
/// nothing when it said nothing.
fn stderr_note(stderr: &[u8], secrets: &[Secret]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let joined = text
        .lines()
        .map(|l| redact(l, secrets))
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    let quoted = clean(&joined, STDERR_QUOTE);
    if quoted.is_empty() {
        String::new()
    } else {
        format!("; stderr: {quoted}")
    }
}

/// Drops control characters (a plugin's output must not drive a terminal) and keeps the last
/// `limit` characters, marking a cut with `…`.
fn clean(text: &str, limit: usize) -> String {
    let chars: Vec<char> = text.chars().filter(|c| !c.is_control()).collect();
    if chars.len() <= limit {
        chars.into_iter().collect()
    } else {
        std::iter::once('…')
            .chain(chars[chars.len() - limit..].iter().copied())
            .collect()
    }
}
