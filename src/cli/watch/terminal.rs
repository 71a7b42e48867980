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
//! - **What the run used**, on the same line, whenever the session held any sandbox:
//!   `sandguard: removed 3 sandboxes the program left; this run used 1.4 sandbox-hours (e2b
//!   1.2 h, docker 0.2 h)`, and `, ~$0.07 estimated` after the hours where prices are set
//!   ([`crate::ledger::price`]). It is the session's spend ([`Spend::at_end`]: the journal as
//!   written so far, what the pass removed ended when its provider said so) at the moment the
//!   line is written; with it the providers' removal counts give way to their times. A run
//!   that removed nothing itself but held sandboxes (it removed them all) gets the usage
//!   alone, `sandguard: this run used 42 sandbox-seconds (e2b 42 s)`; a run that held none
//!   prints nothing new. A journal that cannot be read leaves the usage out (logged).
//! - **The unit fits the run** ([`amount`]): hours from an hour of sandbox time, minutes from
//!   a minute, seconds below (never `0.0 sandbox-hours`); each provider in the total's unit, so
//!   the parts add up by eye. One decimal below 10, whole numbers from 10 (`4.2 s`, `42 s`);
//!   a share too small for one decimal is `<0.1`.
//! - A stream that is not a terminal is kept only until `ready` (see the spawn's decisions);
//!   a write that fails (the terminal has gone) is ignored.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::time::Duration;

use crate::ledger::price::Prices;
use crate::ledger::spend::Spend;
use crate::ledger::StateDir;
use crate::protocol::Target;
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

    /// The end's line, if the first reclaim pass did or left anything or the run held any
    /// sandbox (`used`: the session's spend, [`used`]).
    pub(super) fn tell_end(mut self, report: &Report, used: Option<&Spend>) {
        if let Some(line) = end_line(report, used) {
            self.say(&line);
        }
    }

    fn say(&mut self, text: &str) {
        if let Some(out) = &mut self.out {
            let _ = writeln!(out, "sandguard: {text}");
        }
    }
}

/// What session `session` used, as its first reclaim pass at the end leaves it
/// ([`Spend::at_end`], until now); `None` (logged) when its journal cannot be read.
pub(super) fn used(state: &Path, session: &str, report: &Report, prices: &Prices) -> Option<Spend> {
    let ends: Vec<(Target, u64)> = report
        .removals
        .iter()
        .filter(|r| r.outcome.is_success())
        .filter_map(|r| {
            let target = Target::new(&r.sandbox.provider, &r.sandbox.id).ok()?;
            Some((target, r.at_ms?))
        })
        .collect();
    let now = crate::ledger::now_ms();
    let spend =
        StateDir::open(state).and_then(|state| Spend::at_end(&state, session, &ends, now, prices));
    match spend {
        Ok(spend) => Some(spend),
        Err(e) => {
            tracing::warn!("session {session}: what the run used is not told: {e}");
            None
        }
    }
}

/// The line for the terminal after the first reclaim pass at the end (without `sandguard: `),
/// or `None` when it neither removed nor left anything and the run held no sandbox.
pub(super) fn end_line(report: &Report, used: Option<&Spend>) -> Option<String> {
    let used = used.filter(|s| s.total().sandboxes > 0);
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
    match (total, used) {
        (0, _) => {}
        (_, Some(_)) => parts.push(format!("removed {} the program left", sandboxes(total))),
        (_, None) => {
            let per: Vec<String> = removed.iter().map(|(p, n)| format!("{p} {n}")).collect();
            parts.push(format!(
                "removed {} the program left ({})",
                sandboxes(total),
                per.join(", ")
            ));
        }
    }
    if let Some(spend) = used {
        parts.push(usage(spend));
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

/// `this run used 1.4 sandbox-hours, ~$0.07 estimated (e2b 1.2 h, docker 0.2 h)`.
fn usage(spend: &Spend) -> String {
    let total = spend.total();
    let (unit, short, size) = match total.time.as_secs() {
        3600.. => ("sandbox-hours", "h", 3600.0),
        60.. => ("sandbox-minutes", "min", 60.0),
        _ => ("sandbox-seconds", "s", 1.0),
    };
    let mut line = format!("this run used {} {unit}", amount(total.time, size));
    if let Some(cost) = total.cost {
        line.push_str(&format!(", {cost} estimated"));
    }
    let mut shares: Vec<(&String, Duration)> = spend
        .by_provider
        .iter()
        .map(|(provider, share)| (provider, share.time))
        .collect();
    // The largest first, as the eye reads a bill.
    shares.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let per: Vec<String> = shares
        .iter()
        .map(|(provider, time)| format!("{} {} {short}", safe(provider), amount(*time, size)))
        .collect();
    line.push_str(&format!(" ({})", per.join(", ")));
    line
}

/// `time` in units of `size` seconds (see the module docs): `4.2`, `42`, `<0.1`.
fn amount(time: Duration, size: f64) -> String {
    let n = time.as_secs_f64() / size;
    if n >= 9.95 {
        format!("{n:.0}")
    } else if n < 0.05 && !time.is_zero() {
        "<0.1".to_string()
    } else {
        format!("{n:.1}")
    }
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
        assert_eq!(end_line(&report(vec![], vec![]), None), None);
        let gone = report(vec![removal("docker", Outcome::Gone)], vec![]);
        assert_eq!(end_line(&gone, None), None, "already gone is not news");
        let three = report(
            vec![
                removal("docker", Outcome::Removed),
                removal("e2b", Outcome::Removed),
                removal("docker", Outcome::Removed),
            ],
            vec![],
        );
        assert_eq!(
            end_line(&three, None).unwrap(),
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
        let line = end_line(&left, None).unwrap();
        assert_eq!(
            line,
            "removed 1 sandbox the program left (docker 1); 1 sandbox could not be removed \
             (e2b: HTTP 503\\u{1b}[2J); daytona could not be listed (connection refused); \
             sandguard sweep will retry"
        );
    }

    fn spend(shares: &[(&str, u64, Option<f64>)]) -> Spend {
        use crate::ledger::price::Money;
        use crate::ledger::spend::Share;
        let by_provider = shares
            .iter()
            .map(|(provider, secs, per_hour)| {
                let time = Duration::from_secs(*secs);
                let share = Share {
                    time,
                    sandboxes: 1,
                    cost: per_hour.map(|p| Money::of(p, time)),
                    ..Share::default()
                };
                (provider.to_string(), share)
            })
            .collect();
        Spend { by_provider }
    }

    #[test]
    fn says_what_the_run_used_in_a_unit_that_fits_it() {
        let three = report(
            vec![
                removal("docker", Outcome::Removed),
                removal("e2b", Outcome::Removed),
                removal("e2b", Outcome::Removed),
            ],
            vec![],
        );
        let hours = spend(&[("docker", 720, None), ("e2b", 4320, None)]);
        assert_eq!(
            end_line(&three, Some(&hours)).unwrap(),
            "removed 3 sandboxes the program left; this run used 1.4 sandbox-hours (e2b 1.2 h, \
             docker 0.2 h)"
        );
        let priced = spend(&[("docker", 720, None), ("e2b", 4320, Some(0.05))]);
        assert_eq!(
            end_line(&three, Some(&priced)).unwrap(),
            "removed 3 sandboxes the program left; this run used 1.4 sandbox-hours, ~$0.06 \
             estimated (e2b 1.2 h, docker 0.2 h)"
        );
        let nothing_left = report(vec![removal("e2b", Outcome::Gone)], vec![]);
        let seconds = spend(&[("e2b", 42, None)]);
        assert_eq!(
            end_line(&nothing_left, Some(&seconds)).unwrap(),
            "this run used 42 sandbox-seconds (e2b 42 s)",
            "the program removed its own: the usage alone"
        );
        let minutes = spend(&[("docker", 150, None), ("e2b", 1, None)]);
        assert_eq!(
            end_line(&nothing_left, Some(&minutes)).unwrap(),
            "this run used 2.5 sandbox-minutes (docker 2.5 min, e2b <0.1 min)"
        );
        let short = spend(&[("docker", 4, None)]);
        assert_eq!(
            end_line(&nothing_left, Some(&short)).unwrap(),
            "this run used 4.0 sandbox-seconds (docker 4.0 s)"
        );
        assert_eq!(
            end_line(&nothing_left, Some(&Spend::default())),
            None,
            "a run that held nothing prints nothing new"
        );
        let failed = report(
            vec![
                removal("docker", Outcome::Removed),
                removal("e2b", Outcome::Failed(Failure::new("HTTP 403"))),
            ],
            vec![],
        );
        assert_eq!(
            end_line(
                &failed,
                Some(&spend(&[("docker", 60, None), ("e2b", 60, None)]))
            )
            .unwrap(),
            "removed 1 sandbox the program left; this run used 2.0 sandbox-minutes (docker 1.0 \
             min, e2b 1.0 min); 1 sandbox could not be removed (e2b: HTTP 403); sandguard sweep \
             will retry"
        );
    }
}
