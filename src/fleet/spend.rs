//! Spend in the fleet store: each session's sandbox time per UTC day and provider, as its own
//! machine counted it from its journal ([`crate::ledger::spend::daily`]), so that one report
//! covers every host (`report --fleet`, [`report`]) and `sessions --fleet` has a `SPEND`
//! column ([`per_session`]). How it is written and read is in the key layout
//! ([`super`]'s docs); this file says what one field holds and what the figures add up to.
//!
//! Decisions:
//! - **One field per day, host, session and provider**, holding that group's whole figures:
//!   a writer always writes what its journal says now, so writing again replaces and never
//!   adds. A sidecar that writes the same session twice, a sweep that writes it after its
//!   sidecar died, a sidecar that wrote before Redis lost its data: each leaves the figures
//!   once. (The journal only grows, so a session's days and providers never shrink: nothing
//!   written is ever left stale by a later write.)
//! - **Whole UTC days.** The store keeps each day's sum, not each sandbox's stretches, so
//!   `report --fleet --since D` counts the whole UTC days from the one `D` ago falls in, and
//!   says from which midnight; `report --since` over a ledger clips to the millisecond.
//! - **A sandbox is counted once in a sum over days**, as a ledger's report counts it: in
//!   the first day of the window it falls in (that day's `sandboxes`), and otherwise in the
//!   day it was first seen (`first`, [`DayShare::first`]). Only a sandbox held twice with a
//!   whole day between, the first time before the window, is missed by a windowed count.
//! - **As last written.** The report counts what each machine last wrote (an alive sandbox's
//!   time lags by at most the sidecar's write period, [`crate::watch::fleet`]); it never
//!   extrapolates, so a host that died is never counted as running on. A sweep that ends a
//!   session it has no journal of (a fleet sweep of another host's session) *closes* its
//!   figures ([`close`]): nothing of it is alive any more, its time stays as last written.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::SessionRecord;
use crate::ledger::spend::daily::{self, DayShare, Days};
use crate::ledger::spend::{By, Report, Share, Spend, Window};

/// How many days a day's figures are kept after it ended: a year's look back, and a month
/// more for the reports that run after a year's end. About 200 bytes a field: a fleet of
/// 1 000 sessions a day on two providers keeps about 160 MB at the full horizon.
pub(crate) const KEEP_DAYS: u64 = 400;

/// One (day, provider) of a session, as the store keeps it: the ledger's figures of that
/// group ([`crate::ledger::spend::Share`], [`DayShare`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub time: Duration,
    pub alive_time: Duration,
    pub sandboxes: usize,
    /// Of `sandboxes`, those in no earlier day of the session.
    pub first: usize,
    pub alive: usize,
    pub untimed: usize,
}

impl From<&DayShare> for Figures {
    fn from(d: &DayShare) -> Figures {
        Figures {
            time: d.share.time,
            alive_time: d.share.alive_time,
            sandboxes: d.share.sandboxes,
            first: d.first,
            alive: d.share.alive,
            untimed: d.share.untimed,
        }
    }
}

impl Figures {
    /// As a ledger's share, its sandboxes counted `sandboxes`.
    fn share(&self, sandboxes: usize) -> Share {
        Share {
            time: self.time,
            sandboxes,
            alive: self.alive,
            alive_time: self.alive_time,
            untimed: self.untimed,
            // The store keeps no prices: all its time is unpriced, as a ledger's is without.
            unpriced_time: self.time,
            cost: None,
        }
    }
}

/// One session's figures, as its machine writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpend {
    pub host: String,
    pub session: String,
    /// When the session started (unix ms): `report --by session` lists the oldest first.
    pub started_ms: u64,
    /// `(day, provider)` → its figures; a day is a number of days since the epoch, UTC.
    pub days: BTreeMap<(u64, String), Figures>,
}

impl SessionSpend {
    /// The figures `days` of the session `record` registers.
    pub(crate) fn of(record: &SessionRecord, days: &Days) -> SessionSpend {
        SessionSpend {
            host: record.host.clone(),
            session: record.id.clone(),
            started_ms: record.started_ms,
            days: days.iter().map(|(k, d)| (k.clone(), d.into())).collect(),
        }
    }

    /// Each (day, provider) as the store keeps it: `(day, field, value)`.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (u64, String, String)> + '_ {
        self.days.iter().map(|((day, provider), f)| {
            let value = Wire {
                ms: f.time.as_millis() as u64,
                alive_ms: f.alive_time.as_millis() as u64,
                sandboxes: f.sandboxes,
                first: f.first,
                alive: f.alive,
                untimed: f.untimed,
                started_ms: self.started_ms,
            };
            let value = serde_json::to_string(&value).unwrap_or_default();
            (*day, field(&self.host, &self.session, provider), value)
        })
    }
}

/// One field of a day: a session's figures of one provider that day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendEntry {
    pub day: u64,
    pub host: String,
    pub session: String,
    pub provider: String,
    pub started_ms: u64,
    pub figures: Figures,
}

/// A field's value: JSON, times in milliseconds (fields a later version adds are ignored).
#[derive(Serialize, Deserialize)]
struct Wire {
    ms: u64,
    alive_ms: u64,
    sandboxes: usize,
    first: usize,
    alive: usize,
    untimed: usize,
    started_ms: u64,
}

/// `host|session|provider`: neither a session id nor a provider name has a `|`, so the host
/// (any printable ASCII) is what is left of the last two.
pub(crate) fn field(host: &str, session: &str, provider: &str) -> String {
    format!("{host}|{session}|{provider}")
}

/// A day's field and value, read back; `None` for one that is not ours to read.
pub(crate) fn decode(day: u64, field: &str, value: &str) -> Option<SpendEntry> {
    let mut parts = field.rsplitn(3, '|');
    let (provider, session, host) = (parts.next()?, parts.next()?, parts.next()?);
    if [provider, session, host].iter().any(|p| p.is_empty()) {
        return None;
    }
    let w: Wire = serde_json::from_str(value).ok()?;
    Some(SpendEntry {
        day,
        host: host.to_string(),
        session: session.to_string(),
        provider: provider.to_string(),
        started_ms: w.started_ms,
        figures: Figures {
            time: Duration::from_millis(w.ms),
            alive_time: Duration::from_millis(w.alive_ms),
            sandboxes: w.sandboxes,
            first: w.first,
            alive: w.alive,
            untimed: w.untimed,
        },
    })
}

/// A value closed by a sweep that ended its session without its journal: none of its
/// sandboxes is alive any more, the time stays as written. `None`: nothing to change (or not
/// a value of ours). The memory store's; Redis runs the same in a script (`CLOSE` in
/// `redis/spend.rs`), in the one round trip.
#[cfg(test)]
pub(crate) fn close(value: &str) -> Option<String> {
    let mut w: Wire = serde_json::from_str(value).ok()?;
    if w.alive == 0 && w.alive_ms == 0 {
        return None;
    }
    (w.alive, w.alive_ms) = (0, 0);
    serde_json::to_string(&w).ok()
}

/// The days kept at `now_ms` from `since_ms` on (`None`: all of them), and the day after
/// today, for a writer whose clock runs ahead.
pub(crate) fn days(since_ms: Option<u64>, now_ms: u64) -> RangeInclusive<u64> {
    let today = daily::day(now_ms);
    let oldest = today.saturating_sub(KEEP_DAYS);
    oldest.max(since_ms.map_or(0, daily::day))..=today + 1
}

/// When a day's figures expire (unix ms): [`KEEP_DAYS`] after the day ended.
pub(crate) fn expires_ms(day: u64) -> u64 {
    daily::start_ms(day + 1 + KEEP_DAYS)
}

/// The figures of one (host, session, provider) over the days read, each sandbox once (see
/// the module docs), and the entries they come from.
fn groups(entries: &[SpendEntry]) -> Vec<(Share, Vec<&SpendEntry>)> {
    let mut by: BTreeMap<(u64, &str, &str, &str), Vec<&SpendEntry>> = BTreeMap::new();
    for e in entries {
        let key = (
            e.started_ms,
            e.host.as_str(),
            e.session.as_str(),
            &*e.provider,
        );
        by.entry(key).or_default().push(e);
    }
    by.into_values()
        .map(|mut days| {
            days.sort_by_key(|e| e.day);
            let mut once = Share::default();
            for (i, e) in days.iter().enumerate() {
                let f = &e.figures;
                once.add(&f.share(if i == 0 { f.sandboxes } else { f.first }));
            }
            (once, days)
        })
        .collect()
}

/// Spend across every host: [`crate::ledger::spend::report`]'s figures from the store's
/// `entries` (the days of `window`, whose `since_ms` is a midnight), grouped `by`; and how
/// many hosts they come from.
pub(crate) fn report(entries: &[SpendEntry], window: Window, by: By) -> (Report, usize) {
    let since = window.since_ms.map_or(0, daily::day);
    let entries: Vec<SpendEntry> = entries.iter().filter(|e| e.day >= since).cloned().collect();
    let mut rows: Vec<(String, Share)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut add = |key: String, share: &Share| {
        let i = *index.entry(key.clone()).or_insert_with(|| {
            rows.push((key, Share::default()));
            rows.len() - 1
        });
        rows[i].1.add(share);
    };
    let (mut total, mut sessions, mut hosts) = (Share::default(), BTreeSet::new(), BTreeSet::new());
    // Oldest session first: `groups` is ordered by start.
    for (once, days) in groups(&entries) {
        let e = days[0];
        match by {
            By::Day => {
                for d in &days {
                    add(
                        daily::day_name(d.day),
                        &d.figures.share(d.figures.sandboxes),
                    );
                }
            }
            By::Session => add(e.session.clone(), &once),
            By::Provider => add(e.provider.clone(), &once),
            By::Host => add(e.host.clone(), &once),
        }
        total.add(&once);
        sessions.insert((&e.host, &e.session));
        hosts.insert(&e.host);
    }
    if by != By::Session {
        rows.sort_by(|a, b| a.0.cmp(&b.0));
    }
    let report = Report {
        window,
        by,
        rows,
        total,
        sessions: sessions.len(),
        skipped: 0,
        // The store keeps sandbox time only: refused creates are each ledger's.
        refused: Vec::new(),
    };
    (report, hosts.len())
}

/// Each (host, session)'s spend per provider over the days read.
pub(crate) fn per_session(entries: &[SpendEntry]) -> BTreeMap<(String, String), Spend> {
    let mut out: BTreeMap<(String, String), Spend> = BTreeMap::new();
    for (once, days) in groups(entries) {
        let e = days[0];
        out.entry((e.host.clone(), e.session.clone()))
            .or_default()
            .by_provider
            .insert(e.provider.clone(), once);
    }
    out
}

#[cfg(test)]
mod tests;
