//! One session's spend per UTC day and provider: the figures its sidecar (or its machine's
//! sweep) writes to the fleet store ([`crate::fleet::spend`]), so that `report --fleet` counts
//! what `report` counts here.
//!
//! Decisions:
//! - **The same rules, cut by day.** Each sandbox's pieces are [`super::shares`]' with the
//!   UTC day as the group, as `report --by day` cuts them, and the provider beside it: a group
//!   is a (day, provider). Nothing here decides what a stretch is worth.
//! - **Each sandbox is counted once across days, by [`DayShare::first`].** A sandbox whose
//!   time crosses midnight is one of the `sandboxes` of every day it falls in, as the local
//!   report's days count it; `first` counts it only in the first day it falls in, so a sum
//!   over days (the fleet report's sessions, providers, hosts and total) can count it once
//!   (the rule is [`crate::fleet::spend`]'s).
//! - **Read from the journal file** with its side file of stops, as `sandguard report` reads
//!   them, without taking a lock: the sidecar that holds the journal's lock only appends, and a
//!   torn last line is skipped as every reader skips it.

use std::collections::BTreeMap;
use std::path::Path;

use super::{shares, timed, Share, Window, DAY_MS};
use crate::ledger::{io_err, LedgerError, SessionView};

/// One (day, provider) of a session: its figures, and how many of its sandboxes fall in no
/// earlier day of the session.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct DayShare {
    pub share: Share,
    /// The sandboxes of `share` whose time (or untimed end) falls in no earlier day.
    pub first: usize,
}

/// A session's figures: `(day, provider)` → its share; a day is a number of days since the
/// epoch, UTC ([`day`]).
pub(crate) type Days = BTreeMap<(u64, String), DayShare>;

/// The UTC day (days since the epoch) of unix milliseconds `ms`.
pub(crate) fn day(ms: u64) -> u64 {
    ms / DAY_MS
}

/// When day `day` starts: its midnight, UTC, in unix milliseconds.
pub(crate) fn start_ms(day: u64) -> u64 {
    day * DAY_MS
}

/// A day's name: `2026-12-06`.
pub(crate) fn day_name(day: u64) -> String {
    super::day_of(start_ms(day))
}

/// The session's figures over its whole life, alive sandboxes counted until `now_ms`.
pub(crate) fn by_day(view: &SessionView, story: &super::Story, now_ms: u64) -> Days {
    let mut days = Days::new();
    // The store keeps time only: no prices here.
    for (provider, held) in timed(view, story, &Default::default()) {
        let pieces = shares(&held, Window::all(now_ms), |at| day(at).to_string());
        for (i, (d, share)) in pieces.into_iter().enumerate() {
            let Ok(d) = d.parse::<u64>() else { continue };
            let entry = days.entry((d, provider.to_string())).or_default();
            entry.share.add(&share);
            // Pieces come in time order, so the first names the sandbox's first day.
            entry.first += usize::from(i == 0);
        }
    }
    days
}

/// The figures of session `id` from its journal at `journal` (and the side file of stops
/// beside it), alive sandboxes counted until `now_ms`.
pub(crate) fn of_journal(journal: &Path, id: &str, now_ms: u64) -> Result<Days, LedgerError> {
    let text = std::fs::read(journal).map_err(io_err("read journal", journal))?;
    let view = crate::ledger::view::fold(id, &text).ok_or_else(|| LedgerError::NoStart {
        path: journal.to_path_buf(),
    })?;
    let stops = crate::ledger::stops::read(&journal.with_extension("stopped"))?;
    let story = crate::ledger::story::tell(&text, &stops);
    Ok(by_day(&view, &story, now_ms))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ledger::story::tell;
    use crate::ledger::view::fold;

    const T0: u64 = 1_765_000_000_000; // 2025-12-06T05:46:40Z
    const MIDNIGHT: u64 = (T0 / DAY_MS + 1) * DAY_MS;

    fn days_of(lines: &[String], now_ms: u64) -> Days {
        let mut text = format!(r#"{{"t":{T0},"ev":"start","owner":"o","pid":7,"grace_ms":5}}"#);
        text.push('\n');
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        let view = fold("s", text.as_bytes()).unwrap();
        by_day(&view, &tell(text.as_bytes(), b""), now_ms)
    }

    fn claim(t: u64, provider: &str, id: &str) -> String {
        format!(r#"{{"t":{t},"ev":"claim","provider":"{provider}","id":"{id}"}}"#)
    }

    fn removed(t: u64, provider: &str, id: &str) -> String {
        format!(
            r#"{{"t":{t},"ev":"removed","provider":"{provider}","id":"{id}","outcome":"removed"}}"#
        )
    }

    #[test]
    fn a_sandbox_across_midnight_is_in_both_days_and_first_in_one() {
        let today = day(T0);
        let days = days_of(
            &[
                claim(MIDNIGHT - 10_000, "e2b", "a"),
                removed(MIDNIGHT + 5_000, "e2b", "a"),
                claim(MIDNIGHT + 1_000, "docker", "b"),
            ],
            MIDNIGHT + 61_000,
        );
        let e2b_first = &days[&(today, "e2b".to_string())];
        let e2b_next = &days[&(today + 1, "e2b".to_string())];
        assert_eq!(
            (
                e2b_first.share.time,
                e2b_first.share.sandboxes,
                e2b_first.first
            ),
            (Duration::from_secs(10), 1, 1)
        );
        assert_eq!(
            (
                e2b_next.share.time,
                e2b_next.share.sandboxes,
                e2b_next.first
            ),
            (Duration::from_secs(5), 1, 0)
        );
        let docker = &days[&(today + 1, "docker".to_string())];
        assert_eq!(
            (docker.share.time, docker.share.alive, docker.first),
            (Duration::from_secs(60), 1, 1)
        );
        assert_eq!(days.len(), 3);
        assert_eq!(day_name(today), "2025-12-06");
    }

    #[test]
    fn the_days_sum_to_the_sessions_spend() {
        let lines = [
            claim(T0 + 1_000, "e2b", "a"),
            claim(T0 + 2_000, "e2b", "b"),
            removed(MIDNIGHT + 3_000, "e2b", "a"),
            removed(T0 + 9_000, "e2b", "b"),
        ];
        let now = MIDNIGHT + 100_000;
        let days = days_of(&lines, now);
        let mut text = format!(r#"{{"t":{T0},"ev":"start","owner":"o","pid":7,"grace_ms":5}}"#);
        text.push('\n');
        lines.iter().for_each(|l| text.push_str(&format!("{l}\n")));
        let view = fold("s", text.as_bytes()).unwrap();
        let whole =
            super::super::Spend::of(&view, &tell(text.as_bytes(), b""), now, &Default::default());
        let time: Duration = days.values().map(|d| d.share.time).sum();
        let first: usize = days.values().map(|d| d.first).sum();
        assert_eq!(time, whole.total().time);
        assert_eq!(first, whole.total().sandboxes);
    }
}
