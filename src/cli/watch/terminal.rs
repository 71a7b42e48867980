//! What the sidecar says on the stderr of whoever started it (`watch --report`, which the
//! wrapper passes; the decisions are [`crate::session::spawn::Report`]'s).
//!
//! - **Warnings at start**: `sandguard: warning: …`, one line each, written before `ready`, so
//!   they come before anything CMD prints.
//! - **The end**: one line when the first reclaim pass at CMD's end removed or left
//!   something, and nothing when it found nothing:
//!   `sandguard: removed 3 sandboxes the program left (docker 2, e2b 1)`, or
//!   `sandguard: 1 sandbox could not be removed (e2b: HTTP 503); sandguard sweep will retry`
//!   (both halves in one line when both happened). "Removed" counts what sandguard removed, not
//!   what was already gone. A provider that could not be listed is named as such. Reasons come
//!   from providers and are shown as untrusted text is ([`crate::protocol`]'s echo rule), the
//!   first one per provider. What the settle pass catches later (a create in flight at the
//!   death) is journaled and logged, not printed: the line is written at once, while the
//!   user is still looking at the terminal.
//! - A stream that is not a terminal is kept only until `ready` (see the spawn's decisions);
//!   a write that fails (the terminal has gone) is ignored.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd};

use crate::reclaim::{Outcome, Report};

/// The starter's stderr, while the sidecar may still write to it.
pub(super) struct Terminal {
    out: Option<File>,
}

impl Terminal {
    /// Nowhere: the sidecar was not asked to report.
    pub(super) fn none() -> Terminal {
        Terminal { out: None }
    }

    /// Takes descriptor 2 (the starter's stderr) as the report stream and puts `/dev/null` in
    /// its place, so that the sidecar's own diagnostics never reach the user's terminal (they
    /// go to its log once it has one; a start-up error reaches the user through the wrapper).
    pub(super) fn take_stderr() -> Terminal {
        let Ok(copy) = std::io::stderr().as_fd().try_clone_to_owned() else {
            return Terminal::none();
        };
        if let Ok(null) = File::options().write(true).open("/dev/null") {
            let _ = crate::unix::redirect_stderr(&null);
        }
        Terminal {
            out: Some(File::from(copy)),
        }
    }

    /// Its descriptor, to keep open when the sidecar closes what it inherited.
    pub(super) fn fd(&self) -> Option<i32> {
        self.out.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Whether there is anyone to tell.
    pub(super) fn reports(&self) -> bool {
        self.out.is_some()
    }

    /// One warning line, before `ready`.
    pub(super) fn warn(&mut self, message: &str) {
        tracing::warn!("{message}");
        self.say(&format!("warning: {message}"));
    }

    /// At `ready`: what is kept for the end. Nothing unless the stream is a terminal and the
    /// wrapper was not `--quiet`.
    pub(super) fn at_ready(self, quiet: bool) -> Option<Terminal> {
        let out = self.out.filter(|f| !quiet && f.is_terminal())?;
        Some(Terminal { out: Some(out) })
    }

    /// A line while the program runs (a limit's removal).
    pub(super) fn tell(&mut self, line: &str) {
        self.say(line);
    }

    /// The end's line, if the first reclaim pass did or left anything.
    pub(super) fn tell_end(mut self, report: &Report) {
        if let Some(line) = end_line(report) {
            self.say(&line);
        }
    }

    fn say(&mut self, text: &str) {
        if let Some(out) = &mut self.out {
            let _ = writeln!(out, "sandguard: {text}");
        }
    }
}

/// The line for the terminal after the first reclaim pass at the end (without `sandguard: `),
/// or `None` when it neither removed nor left anything.
pub(super) fn end_line(report: &Report) -> Option<String> {
    let mut removed: BTreeMap<&str, usize> = BTreeMap::new();
    let mut left: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    for r in &report.removals {
        let provider = r.sandbox.provider.as_str();
        match &r.outcome {
            Outcome::Removed => *removed.entry(provider).or_default() += 1,
            Outcome::Failed(why) | Outcome::Unfinished(why) => {
                let slot = left
                    .entry(provider)
                    .or_insert_with(|| (0, why.message.clone()));
                slot.0 += 1;
            }
            Outcome::Gone | Outcome::Refused(_) => {}
        }
    }
    let unlisted: Vec<String> = report
        .list_failures
        .iter()
        .map(|f| {
            format!(
                "{} could not be listed ({})",
                f.provider,
                safe(&f.error.message)
            )
        })
        .collect();
    let mut parts = Vec::new();
    let total: usize = removed.values().sum();
    if total > 0 {
        let per: Vec<String> = removed.iter().map(|(p, n)| format!("{p} {n}")).collect();
        parts.push(format!(
            "removed {} the program left ({})",
            sandboxes(total),
            per.join(", ")
        ));
    }
    let failed: usize = left.values().map(|(n, _)| n).sum();
    if failed > 0 {
        let per: Vec<String> = left
            .iter()
            .map(|(p, (_, why))| format!("{p}: {}", safe(why)))
            .collect();
        parts.push(format!(
            "{} could not be removed ({})",
            sandboxes(failed),
            per.join("; ")
        ));
    }
    parts.extend(unlisted);
    if parts.is_empty() {
        return None;
    }
    let mut line = parts.join("; ");
    if failed > 0 || !report.list_failures.is_empty() {
        line.push_str("; sandguard sweep will retry");
    }
    Some(line)
}

fn sandboxes(n: usize) -> String {
    match n {
        1 => "1 sandbox".to_string(),
        n => format!("{n} sandboxes"),
    }
}

/// A provider's words as a terminal may show them.
fn safe(text: &str) -> String {
    crate::protocol::echo(text.as_bytes()).replace(';', ",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{Kind, Sandbox};
    use crate::reclaim::{Failure, ListFailure, Removal};

    fn removal(provider: &str, outcome: Outcome) -> Removal {
        Removal {
            at_ms: None,
            sandbox: Sandbox::claimed(provider, Kind::Instance, "x"),
            outcome,
            attempts: 1,
        }
    }

    fn report(removals: Vec<Removal>, list_failures: Vec<ListFailure>) -> Report {
        Report {
            removals,
            list_failures,
            listed: vec![],
        }
    }

    #[test]
    fn says_what_was_removed_and_what_was_left_and_nothing_else() {
        assert_eq!(end_line(&report(vec![], vec![])), None);
        let gone = report(vec![removal("docker", Outcome::Gone)], vec![]);
        assert_eq!(end_line(&gone), None, "already gone is not news");
        let three = report(
            vec![
                removal("docker", Outcome::Removed),
                removal("e2b", Outcome::Removed),
                removal("docker", Outcome::Removed),
            ],
            vec![],
        );
        assert_eq!(
            end_line(&three).unwrap(),
            "removed 3 sandboxes the program left (docker 2, e2b 1)"
        );
        let left = report(
            vec![
                removal("docker", Outcome::Removed),
                removal(
                    "e2b",
                    Outcome::Unfinished(Failure::new("HTTP 503\u{1b}[2J")),
                ),
            ],
            vec![ListFailure {
                provider: "daytona".into(),
                error: Failure::new("connection refused"),
            }],
        );
        let line = end_line(&left).unwrap();
        assert_eq!(
            line,
            "removed 1 sandbox the program left (docker 1); 1 sandbox could not be removed \
             (e2b: HTTP 503\\u{1b}[2J); daytona could not be listed (connection refused); \
             sandguard sweep will retry"
        );
    }
}
