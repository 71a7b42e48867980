//! Output shared by the subcommands: exit codes, text tables (their state words coloured on a
//! terminal: [`colour`]), escaping of untrusted strings, the JSON shape of a sandbox, and
//! writing to stdout without dying on a closed pipe.

pub(super) mod colour;

pub(super) mod refusals;

use std::borrow::Cow;
use std::io::Write;

use serde::Serialize;

use self::colour::{Hue, Paint};
use crate::identity::{Identity, Liveness};
use crate::providers::Sandbox;
use crate::reclaim::{ListFailure, Removal};
use crate::timefmt;

/// The process's exit codes (DESIGN's table): `ps`, `stop`, `sweep`, `sessions`,
/// `providers`, `watch` and `claim` use the first three; the wrapper the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Everything answered and everything asked for was done.
    Ok,
    /// A provider could not be queried, a target was not found, or a removal failed.
    Failure,
    /// Bad usage or bad config.
    Usage,
    /// The wrapper: sandguard itself failed before CMD ran (125).
    OwnFailure,
    /// The wrapper: CMD exists but cannot be executed (126).
    NotExecutable,
    /// The wrapper: CMD was not found (127).
    NotFound,
    /// The wrapper as pid 1: CMD's own status (128+N when it died of signal N).
    Wrapped(u8),
}

impl Exit {
    /// `Ok` when `clean`, else `Failure`.
    pub(crate) fn clean_if(clean: bool) -> Exit {
        if clean {
            Exit::Ok
        } else {
            Exit::Failure
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::OwnFailure => 125,
            Exit::NotExecutable => 126,
            Exit::NotFound => 127,
            Exit::Wrapped(code) => code,
        }
    }
}

/// Writes `text` to stdout. A closed pipe (`sandguard ps | head -1`) is not an error worth a
/// message: the reader went away.
pub(super) fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("sandguard: cannot write to stdout: {e}");
        }
    }
}

/// Serialises `value` as one line of JSON on stdout.
pub(super) fn emit_json(value: &impl Serialize) {
    match serde_json::to_string(value) {
        Ok(mut text) => {
            text.push('\n');
            emit(&text);
        }
        Err(e) => eprintln!("sandguard: cannot encode JSON: {e}"),
    }
}

/// Makes a provider-supplied string safe for a terminal: control characters (escape
/// sequences, carriage returns, …) are shown escaped instead of being interpreted.
pub(super) fn sanitize(s: &str) -> Cow<'_, str> {
    if s.chars().any(char::is_control) {
        Cow::Owned(
            s.chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_default().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
}

/// Lays out rows under headers, columns separated by three spaces, the last one unpadded.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    painted_table(headers, rows, &[], Paint::off())
}

/// [`table`], with the state words of the columns `states` in their colour when `paint` is
/// on ([`colour`]). Each cell is padded as its plain text, so the columns line up as they do
/// unpainted.
pub(super) fn painted_table(
    headers: &[&str],
    rows: &[Vec<String>],
    states: &[usize],
    paint: Paint,
) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, hues: &dyn Fn(usize, &str) -> Option<Hue>, out: &mut String| {
        let last = cells.len().saturating_sub(1);
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(&paint.word(cell, hues(i, cell)));
            if i < last {
                out.push_str(&" ".repeat(widths[i] - cell.chars().count() + 3));
            }
        }
        out.push('\n');
    };
    line(headers.to_vec(), &|_, _| None, &mut out);
    let hues = |i: usize, cell: &str| states.contains(&i).then(|| Hue::of_state(cell))?;
    for row in rows {
        line(row.iter().map(String::as_str).collect(), &hues, &mut out);
    }
    out
}

/// The owner of a sandbox, judged from its `sandguard.owner` label.
pub(super) fn owner_liveness(sandbox: &Sandbox) -> Liveness {
    sandbox
        .owner()
        .and_then(Identity::parse_label)
        .map_or(Liveness::Unknown, |id| id.liveness())
}

/// The JSON shape of one sandbox, shared by `ps --json` and `stop --json`.
#[derive(Debug, Serialize)]
pub(super) struct SandboxJson<'a> {
    pub provider: &'a str,
    pub instance_id: &'a str,
    pub kind: &'static str,
    pub status: &'a str,
    /// RFC 3339, UTC.
    pub created_at: Option<String>,
    /// When the provider itself ends it whatever its state (RFC 3339, UTC), where known.
    pub expires_at: Option<String>,
    pub image: Option<&'a str>,
    pub session: Option<&'a str>,
    pub owner: Option<&'a str>,
    /// `true`, `false`, or `null` when it cannot be told from here.
    pub owner_alive: Option<bool>,
    pub labels: &'a std::collections::BTreeMap<String, String>,
}

impl<'a> SandboxJson<'a> {
    pub(super) fn new(s: &'a Sandbox) -> Self {
        let owner_alive = match owner_liveness(s) {
            Liveness::Alive => Some(true),
            Liveness::Dead => Some(false),
            Liveness::Unknown => None,
        };
        SandboxJson {
            provider: &s.provider,
            instance_id: &s.id,
            kind: s.kind.as_str(),
            status: &s.status,
            created_at: s.created_at.map(timefmt::format_rfc3339),
            expires_at: s.expires_at.map(timefmt::format_rfc3339),
            image: s.image.as_deref(),
            session: s.session(),
            owner: s.owner(),
            owner_alive,
            labels: &s.labels,
        }
    }
}

/// The JSON shape of a provider that could not be queried. `status` and `retry_after_ms`
/// are there only when the provider gave them (see [`crate::reclaim::Failure`]).
#[derive(Debug, Serialize)]
pub(super) struct ErrorJson<'a> {
    pub provider: &'a str,
    pub error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u128>,
}

impl<'a> From<&'a ListFailure> for ErrorJson<'a> {
    fn from(f: &'a ListFailure) -> Self {
        ErrorJson {
            provider: &f.provider,
            error: &f.error.message,
            status: f.error.status,
            retry_after_ms: f.error.retry_after.map(|d| d.as_millis()),
        }
    }
}

/// The JSON shape of what was done (or would be, or was kept) to one sandbox, for `stop` and
/// `sweep`. `status` and `retry_after_ms` are there only when a failed removal's provider
/// gave them.
#[derive(Serialize)]
pub(super) struct ResultJson<'a> {
    #[serde(flatten)]
    pub sandbox: SandboxJson<'a>,
    /// `removed`, `gone`, `failed`, `unfinished`, `refused`; `stop` adds `would_remove` in a
    /// dry run and `kept` (`error` then says why).
    pub outcome: &'static str,
    pub error: Option<&'a str>,
    /// Removal calls made (0 in a dry run, or for a refusal).
    pub attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u128>,
}

impl<'a> ResultJson<'a> {
    /// What the reclaim did to one sandbox.
    pub(super) fn of(r: &'a Removal) -> Self {
        let failure = r.outcome.failure();
        ResultJson {
            sandbox: SandboxJson::new(&r.sandbox),
            outcome: r.outcome.as_str(),
            error: r.outcome.error(),
            attempts: r.attempts,
            status: failure.and_then(|f| f.status),
            retry_after_ms: failure.and_then(|f| f.retry_after).map(|d| d.as_millis()),
        }
    }

    /// A sandbox nothing was done to: `outcome` says why (`would_remove`, `kept`).
    pub(super) fn untouched(s: &'a Sandbox, outcome: &'static str, error: Option<&'a str>) -> Self {
        ResultJson {
            sandbox: SandboxJson::new(s),
            outcome,
            error,
            attempts: 0,
            status: None,
            retry_after_ms: None,
        }
    }
}

/// The lines that end a text output when providers failed.
pub(super) fn failure_lines(failures: &[ListFailure], consequence: &str) -> String {
    failures
        .iter()
        .map(|f| failure_line(&f.provider, &f.error.message, consequence))
        .collect()
}

/// One such line: what could not be queried (a provider, or for a sweep the ledger or the
/// fleet store), and why.
pub(super) fn failure_line(what: &str, error: &str, consequence: &str) -> String {
    format!(
        "error: could not query {what}: {}; {consequence}\n",
        sanitize(error)
    )
}

/// The id as the text table shows it: Docker ids cut to 12 characters, as `docker ps` does
/// (`stop` accepts any unique prefix); other providers' ids whole.
pub(super) fn display_id(s: &Sandbox) -> String {
    let id = sanitize(&s.id);
    if s.provider == "docker" && id.len() == 64 {
        id[..12].to_string()
    } else {
        id.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_defused() {
        assert_eq!(sanitize("plain"), "plain");
        assert_eq!(sanitize("a\x1b[31mred\r"), "a\\u{1b}[31mred\\r");
    }

    #[test]
    fn tables_align() {
        let t = table(&["A", "BB"], &[vec!["long".into(), "x".into()]]);
        assert_eq!(t, "A      BB\nlong   x\n");
    }
}
