//! The control protocol: what an owner tells its sidecar, one line per command.
//!
//! ```text
//! claim PROVIDER ID      this sandbox is mine
//! release PROVIDER ID    I removed it myself; forget it
//! detach PROVIDER ID     it should outlive me (its TTL still applies)
//! renew                  heartbeat
//! bye                    clean exit: reclaim what I still own now, then stop
//! ```
//!
//! Lines are UTF-8, at most [`MAX_LINE`] bytes including the `\n`; a `\r` before it is
//! tolerated. Words are separated by runs of ASCII spaces or tabs. Verbs are lower-case.
//!
//! Decisions:
//! - Provider names are `[a-z0-9][a-z0-9_-]{0,31}`, the same shape the registry uses.
//! - Ids are 1..=512 bytes of printable ASCII (`!`..=`~`). Every provider's ids are ASCII, and
//!   refusing everything else keeps escape sequences, bidi overrides and zero-width characters
//!   out of logs, terminals and the ledger.
//! - The input is untrusted: an error never echoes more than [`ECHO_LIMIT`] characters of it,
//!   escaped.
//! - [`LineReader`] keeps at most one line in memory whatever the writer sends: an oversized
//!   line is reported once and the rest of it is skipped as it streams past.

mod outcome;
mod reader;
mod ready;
mod session_id;

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

pub use outcome::ByeOutcome;
pub(crate) use outcome::Left;
pub(crate) use reader::LineReader;
pub(crate) use ready::ReadyLine;
pub(crate) use session_id::SessionId;

/// The longest line accepted, including its `\n`.
pub(crate) const MAX_LINE: usize = 4096;
/// The longest id accepted, in bytes.
pub(crate) const MAX_ID: usize = 512;
/// How many characters of an offending input an error message may show.
pub(crate) const ECHO_LIMIT: usize = 64;

/// A sandbox as the owner names it: a provider and that provider's id for it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Target {
    pub provider: String,
    pub id: String,
}

/// One control line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    Claim(Target),
    Release(Target),
    Detach(Target),
    Renew,
    Bye,
}

/// Why a control line was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("empty control line")]
    Empty,
    #[error("control line longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("control line is not valid UTF-8: {0}")]
    NotUtf8(String),
    #[error("unknown control verb \"{0}\"")]
    UnknownVerb(String),
    #[error("`{verb}` takes {expected} argument(s), got {got}")]
    Arity {
        verb: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("invalid provider name \"{0}\": expected [a-z0-9][a-z0-9_-]{{0,31}}")]
    BadProvider(String),
    #[error("invalid sandbox id \"{0}\": expected 1 to {MAX_ID} bytes of printable ASCII")]
    BadId(String),
    #[error("failed to read the control pipe: {0}")]
    Read(#[source] io::Error),
}

impl Target {
    /// A target from untrusted words, checked as the parser checks them.
    pub fn new(provider: &str, id: &str) -> Result<Target, ProtocolError> {
        if !valid_provider(provider) {
            return Err(ProtocolError::BadProvider(echo(provider.as_bytes())));
        }
        if !valid_id(id) {
            return Err(ProtocolError::BadId(echo(id.as_bytes())));
        }
        Ok(Target {
            provider: provider.to_string(),
            id: id.to_string(),
        })
    }

    /// Whether `self` (a journaled claim) is `sent` itself, or `sent` *pinned*: the sidecar
    /// journals a claim of an id its provider reuses (a Docker volume's name) as `ID@IDENTITY`,
    /// the object it named when it arrived (`crate::providers::Provider::pins`). How a
    /// journaled claim answers the line that asked for it, and what a release of `ID` ends.
    pub fn answers(&self, sent: &Target) -> bool {
        self.provider == sent.provider
            && (self.id == sent.id
                || self
                    .id
                    .strip_prefix(sent.id.as_str())
                    .and_then(|rest| rest.strip_prefix('@'))
                    .is_some_and(|identity| !identity.is_empty() && !identity.contains('@')))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.provider, self.id)
    }
}

impl Command {
    /// The wire form, with its trailing newline. Round-trips through [`parse_line`] for any
    /// target that [`Target::new`] accepts.
    pub fn to_line(&self) -> String {
        match self {
            Command::Claim(t) => format!("claim {t}\n"),
            Command::Release(t) => format!("release {t}\n"),
            Command::Detach(t) => format!("detach {t}\n"),
            Command::Renew => "renew\n".to_string(),
            Command::Bye => "bye\n".to_string(),
        }
    }
}

/// Parses one line, with or without its `\n` (or `\r\n`).
pub fn parse_line(line: &[u8]) -> Result<Command, ProtocolError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if line.len() >= MAX_LINE {
        return Err(ProtocolError::TooLong);
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| ProtocolError::NotUtf8(echo(line)))?;
    let words: Vec<&str> = text.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let (verb, args) = words.split_first().ok_or(ProtocolError::Empty)?;
    let (verb, wants_target): (&'static str, _) = match *verb {
        "claim" => ("claim", true),
        "release" => ("release", true),
        "detach" => ("detach", true),
        "renew" => ("renew", false),
        "bye" => ("bye", false),
        other => return Err(ProtocolError::UnknownVerb(echo(other.as_bytes()))),
    };
    let expected = if wants_target { 2 } else { 0 };
    if args.len() != expected {
        return Err(ProtocolError::Arity {
            verb,
            expected,
            got: args.len(),
        });
    }
    Ok(match verb {
        "claim" => Command::Claim(Target::new(args[0], args[1])?),
        "release" => Command::Release(Target::new(args[0], args[1])?),
        "detach" => Command::Detach(Target::new(args[0], args[1])?),
        "renew" => Command::Renew,
        _ => Command::Bye,
    })
}

/// A provider name as claims and plugins may use it: 1 to 32 of `a-z`, `0-9`, `-`, `_`,
/// starting with a letter or digit.
pub(crate) fn valid_provider(name: &str) -> bool {
    let b = name.as_bytes();
    let first_ok = b
        .first()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    first_ok
        && b.len() <= 32
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID).contains(&id.len()) && id.bytes().all(|c| c.is_ascii_graphic())
}

/// Untrusted bytes made safe to show: at most [`ECHO_LIMIT`] characters, invalid UTF-8
/// replaced, control and non-ASCII characters escaped, `…` when cut.
pub(crate) fn echo(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .take(ECHO_LIMIT)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c.to_string()
            } else {
                c.escape_default().to_string()
            }
        })
        .collect();
    if text.chars().nth(ECHO_LIMIT).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn target(p: &str, id: &str) -> Target {
        Target::new(p, id).unwrap()
    }

    #[test]
    fn a_pinned_claim_answers_the_id_it_was_pinned_from() {
        let t = |id: &str| Target::new("docker", id).unwrap();
        assert!(t("volume/v1").answers(&t("volume/v1")));
        assert!(t("volume/v1@17").answers(&t("volume/v1")));
        assert!(t("volume/v1@17").answers(&t("volume/v1@17")));
        assert!(!t("volume/v1").answers(&t("volume/v1@17")));
        assert!(!t("volume/v10@17").answers(&t("volume/v1")));
        assert!(!t("volume/v1@").answers(&t("volume/v1")));
        assert!(!t("volume/v1@1@2").answers(&t("volume/v1")));
        assert!(!Target::new("e2b", "volume/v1@17")
            .unwrap()
            .answers(&t("volume/v1")));
    }

    #[test]
    fn commands_round_trip() {
        let long_id = "x".repeat(MAX_ID);
        let commands = [
            Command::Claim(target("docker", "3f2a9c")),
            Command::Release(target("e2b", "sbx_1.2:3/4")),
            Command::Detach(target("fly-io_2", &long_id)),
            Command::Renew,
            Command::Bye,
        ];
        for c in commands {
            let line = c.to_line();
            assert!(line.ends_with('\n') && line.len() <= MAX_LINE, "{line}");
            assert_eq!(parse_line(line.as_bytes()).unwrap(), c);
        }
    }

    #[test]
    fn whitespace_and_line_endings_are_tolerated() {
        let want = Command::Claim(target("docker", "abc"));
        for line in [
            "claim docker abc",
            "claim docker abc\n",
            "claim docker abc\r\n",
            "  claim \t docker   abc \t\n",
        ] {
            assert_eq!(parse_line(line.as_bytes()).unwrap(), want, "{line:?}");
        }
        assert_eq!(parse_line(b"renew\r\n").unwrap(), Command::Renew);
    }

    #[test]
    fn malformed_lines_are_refused_with_the_right_error() {
        use ProtocolError::*;
        type Expect = fn(&ProtocolError) -> bool;
        let cases: &[(&[u8], Expect)] = &[
            (b"", |e| matches!(e, Empty)),
            (b"\n", |e| matches!(e, Empty)),
            (b" \t \r\n", |e| matches!(e, Empty)),
            (b"claim docker \xff\xfe\n", |e| matches!(e, NotUtf8(_))),
            (b"CLAIM docker abc", |e| matches!(e, UnknownVerb(_))),
            (b"remove docker abc", |e| matches!(e, UnknownVerb(_))),
            (b"claim docker", |e| matches!(e, Arity { got: 1, .. })),
            (b"claim docker a b", |e| matches!(e, Arity { got: 3, .. })),
            (b"renew now", |e| matches!(e, Arity { expected: 0, .. })),
            (b"bye bye", |e| matches!(e, Arity { .. })),
            (b"claim Docker abc", |e| matches!(e, BadProvider(_))),
            (b"claim -docker abc", |e| matches!(e, BadProvider(_))),
            (b"claim dock.er abc", |e| matches!(e, BadProvider(_))),
            (b"claim docker a\x1b[2Jb", |e| matches!(e, BadId(_))),
            (b"claim docker a\rb", |e| matches!(e, BadId(_))),
            ("claim docker \u{e9}t\u{e9}".as_bytes(), |e| {
                matches!(e, BadId(_))
            }),
            ("claim docker a\u{202e}b".as_bytes(), |e| {
                matches!(e, BadId(_))
            }),
        ];
        for (line, ok) in cases {
            let err = parse_line(line).unwrap_err();
            assert!(ok(&err), "{:?} gave {err:?}", String::from_utf8_lossy(line));
        }
        let provider = "p".repeat(33);
        assert!(matches!(
            parse_line(format!("claim {provider} a").as_bytes()),
            Err(BadProvider(_))
        ));
        let id = "i".repeat(MAX_ID + 1);
        assert!(matches!(
            parse_line(format!("claim docker {id}").as_bytes()),
            Err(BadId(_))
        ));
        let long = format!("claim docker {}\n", "i".repeat(MAX_LINE));
        assert!(matches!(parse_line(long.as_bytes()), Err(TooLong)));
    }

    #[test]
    fn errors_echo_little_and_escape_it() {
        let verb = format!("\x1b]0;pwned\x07{}", "v".repeat(1000));
        let msg = parse_line(verb.as_bytes()).unwrap_err().to_string();
        assert!(!msg.contains('\x1b') && !msg.contains('\x07'), "{msg}");
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.contains("\\u{1b}") && msg.ends_with("…\""), "{msg}");
        let msg = parse_line(b"claim docker \xff").unwrap_err().to_string();
        assert!(msg.contains("\\u{fffd}"), "{msg}");
    }
}
