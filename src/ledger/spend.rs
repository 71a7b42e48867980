//! Spend, counted: the sandbox time each session held, per provider, from its journal, and
//! the same across the whole ledger (`sandguard report`); and, where prices are configured,
//! what that time is estimated to cost ([`super::price`]: which price a sandbox has, and why
//! the prices of today price all of it).
//!
//! Decisions:
//! - **Read from the story, not a second fold.** [`super::story`] already meets every record
//!   with its sandbox and keeps, per sandbox, the stretches it was held ([`Held`]: from its
//!   `claim`, `detach` or first pending failure to its `removed`, `release`, stop or
//!   `refused`). This module only decides what those stretches are worth, so a rule about
//!   which record ends a sandbox is written once, in the story, for `sessions show` and spend
//!   alike.
//! - **To the removal itself.** A reclaim journals its outcomes once it is over, its settle
//!   pass included (2 s after the removals, for a sidecar), so each `removed` record carries
//!   `at`, when the provider said it was removed, and the story ends the stretch there; a
//!   journal written before `at` existed is timed by the record, up to the settle late.
//! - **From first sight.** A sandbox's time starts at the first record that names it as held.
//!   A sandbox the journal names only at its removal (found by a reclaim's listing of the
//!   session's label, never claimed) has no known start: it is counted as *untimed*
//!   ([`Share::untimed`]), never given a guessed time (neither zero seconds passed off as a
//!   measurement nor the whole session's life).
//! - **Alive until the journal says otherwise.** An open stretch (claimed, detached, or left
//!   pending by a reclaim) runs until the `now` the caller gives, and is counted in
//!   [`Share::alive`]: a detached sandbox really does run on until its TTL ends it. The one
//!   exception is a sandbox still told as claimed in a session that ended `reclaimed` or
//!   `clean`: that state says everything the session owned is gone, so its time ends at the
//!   session's last record rather than growing forever.
//! - **A window clips, it does not select.** `--since 7d` counts the time that falls in the
//!   last 7 days, whenever the session started; a sandbox alive now is always in it. `--by
//!   day` splits a stretch at UTC midnights, and a sandbox counts once in every day (or
//!   session, or provider) its time falls in; an alive one counts as alive in the group where
//!   its stretch ends, today's.
//! - **Money beside time, never instead of it.** Each stretch of a sandbox's time is priced
//!   at the sandbox's price ([`Prices::per_hour`] of its provider and size) into
//!   [`Share::cost`]; time that has no price is counted in [`Share::unpriced_time`] and in no
//!   money, so a partial estimate says how much it leaves out. `cost` is `None` when none of
//!   a group's time has a price: no price, no money shown.
//! - **At a run's end, from the journal as it stands** ([`Spend::at_end`], for the wrapper's
//!   last line): a reclaim journals its removals only once it is over, after its settle
//!   pass, but the line is written as soon as the first pass is done. So the journal is read
//!   then, and each sandbox the pass removed or found gone ends when its provider said so
//!   (the time the `removed` record will carry); a sandbox still open otherwise (a detached
//!   one, one the pass could not remove) counts until the line is written.
//! - **Refused creates are counted beside the time** ([`refused`]): per group, provider and
//!   limit, in the same window; a refused create holds no time.
//! - **One unreadable journal does not hide the rest.** [`report`] skips it with a warning and
//!   says how many it skipped, as the sweep does.

use std::collections::BTreeMap;
use std::time::Duration;

use super::price::{Money, Prices};
use super::story::{Fate, Held, SandboxStory, Story};
use super::{LedgerError, SessionView, StateDir};
use crate::protocol::Target;

pub(crate) mod daily;
mod refused;

pub(crate) use refused::RefusedRow;

/// The figures of one group (a provider, a session, a day): sandbox time and the sandboxes it
/// is of.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Share {
    /// Sandbox time, the alive sandboxes' time so far included.
    pub time: Duration,
    /// The sandboxes counted here, untimed ones included.
    pub sandboxes: usize,
    /// Of those, the ones still alive as far as the journal says (split by day: counted in
    /// the last day, today's).
    pub alive: usize,
    /// The time (part of `time`) of sandboxes alive now; split by day, each day's part.
    pub alive_time: Duration,
    /// Sandboxes the journal names only at their removal: their time is not known.
    pub untimed: usize,
    /// The estimated cost of the part of `time` that has a price; `None`: none of it has.
    pub cost: Option<Money>,
    /// The part of `time` with no price, so in no `cost`.
    pub unpriced_time: Duration,
}

impl Share {
    pub(crate) fn add(&mut self, other: &Share) {
        self.time += other.time;
        self.sandboxes += other.sandboxes;
        self.alive += other.alive;
        self.alive_time += other.alive_time;
        self.untimed += other.untimed;
        self.add_cost(other);
    }

    fn add_cost(&mut self, other: &Share) {
        if let Some(cost) = other.cost {
            *self.cost.get_or_insert_with(Money::default) += cost;
        }
        self.unpriced_time += other.unpriced_time;
    }

    /// `d` of a sandbox's time at `per_hour` (`None`: it has no price).
    fn spend(&mut self, d: Duration, per_hour: Option<f64>) {
        self.time += d;
        match per_hour {
            Some(price) => *self.cost.get_or_insert_with(Money::default) += Money::of(price, d),
            None => self.unpriced_time += d,
        }
    }
}

/// One session's spend, per provider.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Spend {
    pub by_provider: BTreeMap<String, Share>,
}

impl Spend {
    /// The spend of a session over its whole life, alive sandboxes counted until `now_ms`,
    /// priced at `prices`.
    pub(crate) fn of(view: &SessionView, story: &Story, now_ms: u64, prices: &Prices) -> Spend {
        let mut by_provider = BTreeMap::new();
        let window = Window::all(now_ms);
        for (provider, held) in timed(view, story, prices) {
            for (_, share) in shares(&held, window, |_| String::new()) {
                by_provider
                    .entry(provider.to_string())
                    .or_insert_with(Share::default)
                    .add(&share);
            }
        }
        Spend { by_provider }
    }

    /// The spend of session `id` at the end of its run, its first reclaim pass just done:
    /// its journal read now, each sandbox `ends` names (by provider and id, as the pass
    /// reported it) ended when the provider said it was removed or gone, the rest counted until
    /// `now_ms`, priced at `prices` (see the module docs).
    pub(crate) fn at_end(
        state: &StateDir,
        id: &str,
        ends: &[(Target, u64)],
        now_ms: u64,
        prices: &Prices,
    ) -> Result<Spend, LedgerError> {
        let (view, mut story) = state.read_history(id)?;
        for sandbox in &mut story.sandboxes {
            let end = ends
                .iter()
                .find(|(removed, _)| sandbox.target.answers(removed))
                .map(|(_, at)| *at);
            let open = sandbox.held.last_mut().filter(|h| h.to_ms.is_none());
            if let (Some(at), Some(open)) = (end, open) {
                open.to_ms = Some(at.max(open.from_ms));
            }
        }
        Ok(Spend::of(&view, &story, now_ms, prices))
    }

    /// Every provider's share summed.
    pub(crate) fn total(&self) -> Share {
        let mut total = Share::default();
        self.by_provider.values().for_each(|s| total.add(s));
        total
    }
}

/// The time a report counts: from `since_ms` (`None`: the beginning) to `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub since_ms: Option<u64>,
    pub now_ms: u64,
}

impl Window {
    pub(crate) fn all(now_ms: u64) -> Window {
        Window {
            since_ms: None,
            now_ms,
        }
    }

    /// The last `age` before `now_ms`.
    pub(crate) fn last(age: Duration, now_ms: u64) -> Window {
        Window {
            since_ms: Some(now_ms.saturating_sub(age.as_millis() as u64)),
            now_ms,
        }
    }
}

/// How a report groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    Session,
    Provider,
    /// The UTC day (`2026-12-06`) the time fell in.
    Day,
    /// The host the session ran on: the fleet store's report only (`report --fleet`,
    /// [`crate::fleet::spend`]); a ledger is one machine's, and `report` asks it of no ledger.
    Host,
}

/// Spend across the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub window: Window,
    pub by: By,
    /// One row per group with any sandbox in the window: sessions oldest first, providers
    /// and days in order.
    pub rows: Vec<(String, Share)>,
    /// Every row summed, each sandbox counted once.
    pub total: Share,
    /// Sessions with any sandbox in the window.
    pub sessions: usize,
    /// Journals that could not be read (each warned about).
    pub skipped: usize,
    /// The creates the limits refused in the window, per group, provider and limit
    /// ([`refused`]); a group with none has no row.
    pub refused: Vec<RefusedRow>,
}

/// Spend across every journal of the state directory, in `window`, grouped `by`, priced at
/// `prices`.
pub(crate) fn report(
    state: &StateDir,
    window: Window,
    by: By,
    prices: &Prices,
) -> Result<Report, LedgerError> {
    let mut histories = Vec::new();
    let mut skipped = 0;
    for id in state.session_ids()? {
        match state.read_history(&id) {
            Ok(history) => histories.push(history),
            Err(e) => {
                tracing::warn!("skipping session {id}: {e}");
                skipped += 1;
            }
        }
    }
    histories.sort_by(|(a, _), (b, _)| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
    let mut report = tally(&histories, window, by, prices);
    report.skipped = skipped;
    report.refused = refused::tally(&histories, window, by);
    Ok(report)
}

/// [`report`] over histories already read, oldest session first.
fn tally(histories: &[(SessionView, Story)], window: Window, by: By, prices: &Prices) -> Report {
    let mut rows: Vec<(String, Share)> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let (mut total, mut sessions) = (Share::default(), 0);
    for (view, story) in histories {
        let mut any = false;
        for (provider, held) in timed(view, story, prices) {
            let key = |day: u64| match by {
                By::Session => view.id.clone(),
                By::Provider => provider.to_string(),
                By::Day => day_of(day),
                // Never asked of a ledger (see the variant): all of it is one machine's.
                By::Host => String::new(),
            };
            let pieces = shares(&held, window, key);
            if pieces.is_empty() {
                continue;
            }
            any = true;
            let mut once = Share::default();
            for (key, share) in pieces {
                let i = match index.get(&key) {
                    Some(&i) => i,
                    None => {
                        index.insert(key.clone(), rows.len());
                        rows.push((key, Share::default()));
                        rows.len() - 1
                    }
                };
                rows[i].1.add(&share);
                once.time += share.time;
                once.add_cost(&share);
                once.alive_time += share.alive_time;
                once.alive = once.alive.max(share.alive);
                once.untimed = once.untimed.max(share.untimed);
            }
            once.sandboxes = 1;
            total.add(&once);
        }
        sessions += usize::from(any);
    }
    if by != By::Session {
        rows.sort_by(|a, b| a.0.cmp(&b.0));
    }
    Report {
        window,
        by,
        rows,
        total,
        sessions,
        skipped: 0,
        refused: Vec::new(),
    }
}

/// What one sandbox held, as spend counts it.
enum Timed {
    /// Its stretches, and its price per hour (`None`: it has none).
    Held(Vec<Held>, Option<f64>),
    /// Named only at its end, at this time.
    Untimed(u64),
}

/// Each sandbox of the session with its provider and its stretches, the session's final
/// state applied (see the module docs), priced at `prices`; a refused sandbox never held
/// counts for nothing.
fn timed<'a>(view: &SessionView, story: &'a Story, prices: &Prices) -> Vec<(&'a str, Timed)> {
    story
        .sandboxes
        .iter()
        .filter_map(|s| Some((s.target.provider.as_str(), timed_one(view, s, prices)?)))
        .collect()
}

/// One sandbox of [`timed`]; `None`: it counts for nothing.
fn timed_one(view: &SessionView, s: &SandboxStory, prices: &Prices) -> Option<Timed> {
    if s.held.is_empty() {
        if matches!(s.fate, Fate::Refused(_)) {
            return None;
        }
        return Some(Timed::Untimed(s.at_ms));
    }
    let mut held = s.held.clone();
    if view.state.is_final() && s.fate == Fate::Claimed {
        if let Some(last) = held.last_mut().filter(|h| h.to_ms.is_none()) {
            last.to_ms = Some(view.updated_ms.max(last.from_ms));
        }
    }
    let provider = s.target.provider.as_str();
    Some(Timed::Held(
        held,
        prices.per_hour(provider, s.size.as_deref()),
    ))
}

/// Each sandbox's own spend over the session's life, in the story's order (`sessions show
/// --json`), alive ones until `now_ms`; `None` for one that counts for nothing (refused
/// before it was ever held).
pub(crate) fn each(
    view: &SessionView,
    story: &Story,
    now_ms: u64,
    prices: &Prices,
) -> Vec<Option<Share>> {
    let window = Window::all(now_ms);
    story
        .sandboxes
        .iter()
        .map(|s| {
            let timed = timed_one(view, s, prices)?;
            let mut share = Share::default();
            for (_, piece) in shares(&timed, window, |_| String::new()) {
                share.add(&piece);
            }
            share.sandboxes = 1;
            Some(share)
        })
        .collect()
}

/// One sandbox's share of each group its time falls in (`key` names a group from a time in
/// it: the day of a piece's start), clipped to `window`; empty when nothing falls in it.
fn shares(timed: &Timed, window: Window, key: impl Fn(u64) -> String) -> Vec<(String, Share)> {
    let since = window.since_ms.unwrap_or(0);
    let mut out: Vec<(String, Share)> = Vec::new();
    let mut put = |at: u64, f: &dyn Fn(&mut Share)| {
        let k = key(at);
        match out.iter_mut().find(|(g, _)| *g == k) {
            Some((_, share)) => f(share),
            None => {
                let mut share = Share {
                    sandboxes: 1,
                    ..Share::default()
                };
                f(&mut share);
                out.push((k, share));
            }
        }
    };
    match timed {
        Timed::Untimed(at) if *at >= since && *at <= window.now_ms => {
            put(*at, &|s| s.untimed = 1);
        }
        Timed::Untimed(_) => {}
        Timed::Held(held, per_hour) => {
            for h in held {
                let alive = h.to_ms.is_none();
                let to = h.to_ms.unwrap_or(window.now_ms).min(window.now_ms);
                let from = h.from_ms.max(since);
                if to < from || (to == from && !alive && h.from_ms < since) {
                    continue;
                }
                for (start, end) in days(from, to) {
                    let d = Duration::from_millis(end - start);
                    let last = end == to;
                    put(start, &|s| {
                        s.spend(d, *per_hour);
                        if alive {
                            s.alive_time += d;
                            s.alive = usize::from(last).max(s.alive);
                        }
                    });
                }
            }
        }
    }
    out
}

const DAY_MS: u64 = 86_400_000;

/// `[from, to]` cut at UTC midnights; one piece (possibly empty) when it crosses none.
fn days(from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut pieces = Vec::new();
    let mut start = from;
    loop {
        let midnight = (start / DAY_MS + 1) * DAY_MS;
        if midnight >= to {
            pieces.push((start, to));
            return pieces;
        }
        pieces.push((start, midnight));
        start = midnight;
    }
}

/// The UTC day of unix milliseconds `ms`: `2026-12-06`.
fn day_of(ms: u64) -> String {
    let mut day = crate::timefmt::format_rfc3339((ms / 1000) as i64);
    day.truncate(10);
    day
}

#[cfg(test)]
mod tests;
