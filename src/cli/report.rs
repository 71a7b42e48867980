//! `sandguard report [--since D] [--by session|provider|day] [--json]`: the sandbox time
//! spent across the whole local ledger (every journal in the state directory), with the
//! sandboxes still alive and their time so far. The counting is the ledger's
//! ([`crate::ledger::spend`]); this file parses, calls it once and prints. With `--fleet`
//! (`--by host` too) the same table counts what every host wrote to the fleet store
//! (`super::fleet`, [`crate::fleet::spend`]).
//!
//! ```text
//! Sandbox time in the last 7d (since 2026-11-29T09:00:00Z), by provider:
//! PROVIDER   TIME    SANDBOXES   ALIVE   ALIVE TIME
//! docker     4h00m   2           1       2h00m
//! e2b        2h00m   1           0       -
//! total      6h00m   3           1       2h00m
//! 3 sandboxes in 2 sessions; 1 still alive.
//! ```
//!
//! Decisions:
//! - `--by provider` is the default: "which provider's bill" is the first question; `session`
//!   lists the sessions oldest first, `day` the UTC days in order.
//! - `--since D` takes the CLI's human durations (`30m`, `2h`, `7d`); a value that is not one,
//!   or `0`, is bad usage (exit 2) naming the value, as clap words any bad value. Without it,
//!   everything the ledger still holds is counted (pruned sessions are gone from it).
//! - Times print as the rest of the CLI prints an age ([`crate::timefmt::format_uptime`]:
//!   `42s`, `5m00s`, `1h01m`, `2d03h`); `--json` gives seconds as numbers (millisecond
//!   precision), so a script never parses `1h01m`.
//! - Sandboxes the journal names only at their removal (found by a reclaim through the
//!   session's label, never claimed) have no known start: a line says how many, and their
//!   time is not made up ([`crate::ledger::spend`]).
//! - The same figures, per session, are the `SPEND` column of `sandguard sessions` and the
//!   per-provider lines of `sessions show`; the JSON shape of one group ([`ShareJson`]) is the
//!   same in all three.
//! - **Money only where prices are set** ([`crate::ledger::price`]: the prices configured now
//!   price all the time counted). With any price, the table gets a `COST` column (`~$0.07`,
//!   `-` for a group with no priced time) and a line saying it is an estimate and how much of
//!   the time has no price; `--json` gives each group an `estimate` object, `{"cost": 0.07,
//!   "unpriced_seconds": 0.0}`: `cost` in the currency the prices are in, for the priced part
//!   of `seconds`; `unpriced_seconds`, the part with no price. A group with no priced time
//!   has no `estimate` at all, and without prices the output is as it was.
//! - **Refused creates beside the time.** The creates the limits refused in the window
//!   follow the table, in one of their own grouped the same way (`Creates refused by a limit,
//!   by provider:`, with the provider and the limit), and in `--json` as `refused_creates`
//!   ([`crate::ledger::spend`] counts them, `super::output::refusals` prints them); a
//!   ledger with none prints nothing more.
//! - `--fleet` reads the store instead of the ledger, and prints the same table (time only:
//!   the store keeps no money), with a line saying how many hosts it covers (`--json`:
//!   `hosts`, only then). The store keeps whole UTC days, so its `--since` counts from the
//!   midnight of the day `D` ago falls in (`since` says which). `--by host` needs `--fleet`
//!   (bad usage, exit 2, without): a ledger is one host's.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::output::refusals::{self, RefusedRowJson};
use super::output::{self, sanitize, Exit};
use super::Error;
use crate::config::{HumanDuration, Settings};
use crate::ledger::spend::{self, By, Share, Spend, Window};
use crate::ledger::{now_ms, StateDir};
use crate::timefmt;

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// Count only the sandbox time of the last D (30m, 2h, 7d; default: all of the ledger)
    #[arg(long, value_name = "D", value_parser = since_arg)]
    since: Option<Since>,
    /// Rows per session, provider or (UTC) day
    #[arg(long, value_name = "GROUP", value_enum, default_value_t = ByArg::Provider)]
    by: ByArg,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
    /// Every host's sandbox time, from the fleet store ([fleet] store), in whole UTC days
    #[arg(long)]
    fleet: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ByArg {
    Session,
    Provider,
    Day,
    /// With --fleet: the host each session ran on
    Host,
}

impl ByArg {
    fn by(self) -> By {
        match self {
            ByArg::Session => By::Session,
            ByArg::Provider => By::Provider,
            ByArg::Day => By::Day,
            ByArg::Host => By::Host,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            ByArg::Session => "session",
            ByArg::Provider => "provider",
            ByArg::Day => "day",
            ByArg::Host => "host",
        }
    }
}

/// A `--since` of no length.
#[derive(Debug, thiserror::Error)]
enum SinceError {
    #[error(transparent)]
    Value(#[from] crate::config::ValueError),
    #[error("must be longer than 0")]
    Zero,
}

/// `--since` as typed (the text says it back) and as a duration.
#[derive(Debug, Clone)]
struct Since {
    typed: String,
    age: Duration,
}

/// `--since`: a human duration longer than 0.
fn since_arg(s: &str) -> Result<Since, SinceError> {
    let HumanDuration(age) = s.parse()?;
    if age.is_zero() {
        return Err(SinceError::Zero);
    }
    Ok(Since {
        typed: s.trim().to_string(),
        age,
    })
}

/// One group's figures in `--json` (the report's rows and total, a session's spend and each
/// of its providers').
#[derive(Debug, Serialize)]
pub(super) struct ShareJson {
    seconds: f64,
    sandboxes: usize,
    alive: usize,
    alive_seconds: f64,
    untimed: usize,
    /// What the priced part of the time is estimated to cost; absent when none of it has a
    /// price (see the module docs).
    #[serde(skip_serializing_if = "Option::is_none")]
    estimate: Option<EstimateJson>,
}

/// An estimate, never a bill ([`crate::ledger::price`]).
#[derive(Debug, Serialize)]
pub(super) struct EstimateJson {
    /// In the currency of the configured prices.
    cost: f64,
    /// The part of `seconds` that has no price, so is not in `cost`.
    unpriced_seconds: f64,
}

impl EstimateJson {
    /// A group's estimate; `None` when none of its time has a price.
    pub(super) fn of(s: &Share) -> Option<EstimateJson> {
        s.cost.map(|cost| EstimateJson {
            cost: cost.amount(),
            unpriced_seconds: seconds(s.unpriced_time),
        })
    }
}

impl From<&Share> for ShareJson {
    fn from(s: &Share) -> ShareJson {
        ShareJson {
            seconds: seconds(s.time),
            sandboxes: s.sandboxes,
            alive: s.alive,
            alive_seconds: seconds(s.alive_time),
            untimed: s.untimed,
            estimate: EstimateJson::of(s),
        }
    }
}

/// A session's spend in `--json`: its total, and each provider's.
#[derive(Debug, Serialize)]
pub(super) struct SpendJson {
    #[serde(flatten)]
    total: ShareJson,
    by_provider: BTreeMap<String, ShareJson>,
}

impl From<&Spend> for SpendJson {
    fn from(s: &Spend) -> SpendJson {
        SpendJson {
            total: ShareJson::from(&s.total()),
            by_provider: s
                .by_provider
                .iter()
                .map(|(p, share)| (p.clone(), ShareJson::from(share)))
                .collect(),
        }
    }
}

#[derive(Serialize)]
struct ReportJson {
    /// RFC 3339; `null`: the whole ledger.
    since: Option<String>,
    now: String,
    by: &'static str,
    rows: Vec<RowJson>,
    total: ShareJson,
    sessions: usize,
    /// Journals that could not be read.
    skipped: usize,
    /// With `--fleet`: how many hosts the figures come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    hosts: Option<usize>,
    /// The creates the limits refused, per group, provider and limit; absent with `--fleet`
    /// (`super::output::refusals`).
    #[serde(skip_serializing_if = "Option::is_none")]
    refused_creates: Option<Vec<RefusedRowJson>>,
}

#[derive(Serialize)]
struct RowJson {
    /// The session id, the provider or the day (`2026-12-06`), as `by` says.
    key: String,
    #[serde(flatten)]
    share: ShareJson,
}

/// Seconds with millisecond precision, as JSON numbers.
pub(super) fn seconds(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

/// A time as the CLI prints an age.
pub(super) fn human(d: Duration) -> String {
    timefmt::format_uptime(d.as_secs() as i64)
}

/// The line under money: an estimate, at which prices, and the time it leaves out.
pub(super) fn cost_note(total: &Share) -> String {
    let mut note = "~$: an estimate, the sandbox time at the prices configured now (book: \
                    Budgets, Prices), not a bill"
        .to_string();
    if !total.unpriced_time.is_zero() {
        note.push_str(&format!(
            "; {} of the time has no price and is not in it",
            human(total.unpriced_time)
        ));
    }
    note.push_str(".\n");
    note
}

pub(super) fn run(args: Args, settings: &Settings) -> Result<Exit, Error> {
    let now = now_ms();
    let (report, hosts) = if args.fleet {
        let age = args.since.as_ref().map(|s| s.age);
        let (report, hosts) = super::fleet::report(settings, age, args.by.by(), now)?;
        (report, Some(hosts))
    } else if args.by == ByArg::Host {
        return Err(Error::Usage(
            "--by host needs --fleet: this machine's ledger is one host's".into(),
        ));
    } else {
        let state = StateDir::open(&settings.state_dir)?;
        let window = match &args.since {
            Some(since) => Window::last(since.age, now),
            None => Window::all(now),
        };
        (
            spend::report(&state, window, args.by.by(), &settings.prices)?,
            None,
        )
    };
    let rfc3339 = |ms: u64| timefmt::format_rfc3339((ms / 1000) as i64);
    if args.json {
        output::emit_json(&ReportJson {
            since: report.window.since_ms.map(rfc3339),
            now: rfc3339(now),
            by: args.by.as_str(),
            rows: report
                .rows
                .iter()
                .map(|(key, share)| RowJson {
                    key: key.clone(),
                    share: share.into(),
                })
                .collect(),
            total: (&report.total).into(),
            sessions: report.sessions,
            skipped: report.skipped,
            hosts,
            refused_creates: hosts
                .is_none()
                .then(|| report.refused.iter().map(Into::into).collect()),
        });
        return Ok(Exit::Ok);
    }
    let span = match (args.since, report.window.since_ms) {
        (Some(typed), Some(since)) => format!(
            "in the last {} (since {}{})",
            sanitize(&typed.typed),
            rfc3339(since),
            if hosts.is_some() {
                ", whole UTC days"
            } else {
                ""
            }
        ),
        _ if hosts.is_some() => "in the fleet store".to_string(),
        _ => "in the whole ledger".to_string(),
    };
    let refused = refusals::report_table(&report.refused, args.by.as_str());
    if report.rows.is_empty() {
        output::emit(&format!("No sandbox time {span}.\n{refused}"));
        return Ok(Exit::Ok);
    }
    let mut out = text(&report, args.by, &span);
    out.push_str(&refused);
    if let Some(hosts) = hosts {
        out.push_str(&super::fleet::report_note(hosts));
    }
    output::emit(&out);
    Ok(Exit::Ok)
}

fn text(report: &spend::Report, by: ByArg, span: &str) -> String {
    let priced = report.total.cost.is_some();
    let cells = |key: &str, s: &Share| {
        let mut cells = vec![
            sanitize(key).into_owned(),
            human(s.time),
            s.sandboxes.to_string(),
            s.alive.to_string(),
            if s.alive == 0 && s.alive_time.is_zero() {
                "-".to_string()
            } else {
                human(s.alive_time)
            },
        ];
        if priced {
            cells.push(s.cost.map_or_else(|| "-".to_string(), |c| c.to_string()));
        }
        cells
    };
    let mut rows: Vec<Vec<String>> = report.rows.iter().map(|(k, s)| cells(k, s)).collect();
    rows.push(cells("total", &report.total));
    let header = by.as_str().to_uppercase();
    let mut headers = vec![header.as_str(), "TIME", "SANDBOXES", "ALIVE", "ALIVE TIME"];
    if priced {
        headers.push("COST");
    }
    let mut out = format!("Sandbox time {span}, by {}:\n", by.as_str());
    out.push_str(&output::table(&headers, &rows));
    let t = &report.total;
    out.push_str(&format!(
        "{} sandbox(es) in {} session(s); {} still alive.\n",
        t.sandboxes, report.sessions, t.alive
    ));
    if priced {
        out.push_str(&cost_note(t));
    }
    if t.untimed > 0 {
        out.push_str(&format!(
            "{} of them found only by the session's label when removed: the journal does not \
             know when they were made, so their time is not counted.\n",
            t.untimed
        ));
    }
    if report.skipped > 0 {
        out.push_str(&format!(
            "{} journal(s) could not be read and are not counted.\n",
            report.skipped
        ));
    }
    out
}
