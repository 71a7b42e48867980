//! What a sweep's passes are told as: the events of one pass, and the memory across passes
//! some of them need ([`Tracker`]).
//!
//! Decisions:
//! - **At most one event per kind per pass**, counting what it is about; a one-shot sweep is a
//!   tracker with one pass.
//! - `orphans_reclaimed`: what the pass removed (an object sandguard itself removed, not one
//!   already gone) outside the sessions it finished; a watcher's reclaim of an adopted owner
//!   that died is one too, as it ends.
//! - `pending_finished`: the ledger sessions a reclaim had left pending (or that died
//!   reclaiming) and that this pass ended for good; with what it removed of them.
//! - `reclaim_pending`: removals that failed or did not finish by the deadline; each sandbox is
//!   told once while it stays pending (the next passes retry it, and saying so every five
//!   minutes would bury the news): told again only after a pass that removed it or did not
//!   retry it.
//! - `detached_alive`: detached sandboxes older than `detached_after` by their provider's
//!   creation time (a listing without one is never told); each once while it stays listed
//!   (a pass whose listing of its provider failed forgets nothing).
//! - **What was told is remembered in the state directory** (`notify.json`, [`Told::new`]),
//!   so a sweep from cron every five minutes tells a stuck sandbox once, as a service does;
//!   a file that cannot be read or written costs repeats (with a warning), never an event.
//! - `sweeper_failing`: the ledger, the fleet store or a provider's listing failed in two
//!   passes in a row (one failed pass is a blip the next pass retries); once per streak. The
//!   first pass without failure after it is `sweeper_recovered`. A one-shot sweep has one pass
//!   and never tells either (its exit status 1 says it).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::{Event, Kind, NAMED};
use crate::providers::{Sandbox, SandboxKey};
use crate::reclaim::{Outcome, Removal};
use crate::sweep::Pass;

/// The memory across passes; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    detached_after: Option<Duration>,
    told_detached: HashSet<SandboxKey>,
    told_pending: HashSet<SandboxKey>,
    /// Passes in a row with a failure, and whether `sweeper_failing` was told for them.
    failing: (u32, bool),
}

impl Tracker {
    pub(crate) fn new(detached_after: Option<Duration>) -> Tracker {
        Tracker {
            detached_after,
            ..Tracker::default()
        }
    }

    /// The events of one pass, at `now` (Unix seconds).
    pub(crate) fn pass(&mut self, pass: &Pass, now: i64) -> Vec<Event> {
        let mut events = Vec::new();
        let finishing: BTreeSet<&str> = pass.finishing.iter().map(String::as_str).collect();
        let finished: Vec<&str> = pass
            .ended
            .iter()
            .filter(|(id, state)| state.is_final() && finishing.contains(id.as_str()))
            .map(|(id, _)| id.as_str())
            .collect();
        let (of_finished, others): (Vec<&Removal>, Vec<&Removal>) = pass
            .removals
            .iter()
            .partition(|r| r.sandbox.session().is_some_and(|s| finishing.contains(s)));
        events.extend(self.orphans(&others, "sweep"));
        events.extend(finished_event(&finished, &of_finished));
        events.extend(self.pending(pass));
        events.extend(self.detached(pass, now));
        events.extend(self.failing(pass));
        self.forget(pass);
        events
    }

    /// Forgets what is no longer pending or detached: a removal this pass did not leave
    /// pending, a detached sandbox its provider's listing no longer has.
    fn forget(&mut self, pass: &Pass) {
        let pending: HashSet<SandboxKey> = pass
            .removals
            .iter()
            .filter(|r| !r.outcome.is_final())
            .map(|r| r.sandbox.key())
            .collect();
        self.told_pending.retain(|k| pending.contains(k));
        let detached: HashSet<SandboxKey> = pass.detached.iter().map(Sandbox::key).collect();
        self.told_detached
            .retain(|k| detached.contains(k) || !pass.listed.contains_key(&k.provider));
    }

    /// What was told, as `notify.json` keeps it.
    fn memory(&self) -> Value {
        let keys = |set: &HashSet<SandboxKey>| {
            let mut v: Vec<(&str, &str)> = set
                .iter()
                .map(|k| (k.provider.as_str(), k.id.as_str()))
                .collect();
            v.sort_unstable();
            json!(v)
        };
        json!({"pending": keys(&self.told_pending), "detached": keys(&self.told_detached)})
    }

    /// Takes back what `memory` kept (anything unreadable is ignored).
    fn remember(&mut self, memory: &Value) {
        let keys = |name: &str| -> HashSet<SandboxKey> {
            serde_json::from_value::<Vec<(String, String)>>(memory[name].clone())
                .unwrap_or_default()
                .into_iter()
                .map(|(provider, id)| SandboxKey { provider, id })
                .collect()
        };
        self.told_pending = keys("pending");
        self.told_detached = keys("detached");
    }

    /// The events of a watcher's reclaim (an adopted owner died while watched).
    pub(crate) fn watched(&mut self, pass: &Pass) -> Vec<Event> {
        let removals: Vec<&Removal> = pass.removals.iter().collect();
        let mut events: Vec<Event> = self.orphans(&removals, "watcher").into_iter().collect();
        events.extend(self.pending(pass));
        events
    }

    fn orphans(&self, removals: &[&Removal], by: &str) -> Option<Event> {
        let removed: Vec<&Removal> = removals
            .iter()
            .copied()
            .filter(|r| r.outcome == Outcome::Removed)
            .collect();
        if removed.is_empty() {
            return None;
        }
        let (providers, sessions) = tally(&removed);
        let text = format!(
            "reclaimed {} sandbox{} of dead owners ({}){}",
            removed.len(),
            plural(removed.len()),
            by_provider(&providers),
            named_sessions(&sessions),
        );
        Some(
            Event::new(Kind::OrphansReclaimed, text)
                .with("count", removed.len())
                .with("providers", json!(providers))
                .with_named("sessions", sessions)
                .with("by", by),
        )
    }

    fn pending(&mut self, pass: &Pass) -> Option<Event> {
        let left: Vec<&Removal> = pass
            .removals
            .iter()
            .filter(|r| !r.outcome.is_final())
            .filter(|r| self.told_pending.insert(r.sandbox.key()))
            .collect();
        if left.is_empty() {
            return None;
        }
        Some(pending_event(&left, "sweep"))
    }

    fn detached(&mut self, pass: &Pass, now: i64) -> Option<Event> {
        let after = self.detached_after?;
        let mut old: Vec<(SandboxKey, String, i64)> = pass
            .detached
            .iter()
            .filter_map(|s| Some((s, now - s.created_at?)))
            .filter(|(_, age)| *age >= 0 && *age as u64 >= after.as_secs())
            .filter(|(s, _)| self.told_detached.insert(s.key()))
            .map(|(s, age)| (s.key(), s.session().unwrap_or_default().to_string(), age))
            .collect();
        if old.is_empty() {
            return None;
        }
        old.sort_by_key(|o| std::cmp::Reverse(o.2));
        let mut providers: BTreeMap<String, usize> = BTreeMap::new();
        for (key, _, _) in &old {
            *providers.entry(key.provider.clone()).or_default() += 1;
        }
        let oldest = old[0].2;
        let text = format!(
            "{} detached sandbox{} alive longer than {} ({}); the oldest \
             is {} old",
            old.len(),
            plural(old.len()),
            crate::timefmt::format_span(after),
            by_provider(&providers),
            crate::timefmt::format_span(Duration::from_secs(oldest as u64)),
        );
        let sandboxes: Vec<Value> = old
            .iter()
            .take(NAMED)
            .map(|(k, session, age)| {
                json!({"provider": k.provider, "id": k.id, "session": session, "age_s": age})
            })
            .collect();
        Some(
            Event::new(Kind::DetachedAlive, text)
                .with("count", old.len())
                .with("providers", json!(providers))
                .with("detached_after_s", after.as_secs())
                .with("sandboxes", sandboxes)
                .with("more", old.len().saturating_sub(NAMED)),
        )
    }

    fn failing(&mut self, pass: &Pass) -> Option<Event> {
        let failures: Vec<Value> = pass
            .list_failures
            .iter()
            .map(|f| json!({"source": "provider", "name": f.provider, "error": f.error.message}))
            .chain(pass.store_failures.iter().map(|f| {
                json!({"source": f.store.as_str(), "name": f.store.as_str(), "error": f.to_string()})
            }))
            .collect();
        let (streak, told) = &mut self.failing;
        if failures.is_empty() {
            let event = told.then(|| {
                Event::new(
                    Kind::SweeperRecovered,
                    format!(
                        "the sweep works again after {streak} failed \
                         passes in a row"
                    ),
                )
                .with("passes", *streak)
            });
            *streak = 0;
            *told = false;
            return event;
        }
        *streak += 1;
        if *streak < 2 || *told {
            return None;
        }
        *told = true;
        let names: BTreeSet<&str> = failures.iter().filter_map(|f| f["name"].as_str()).collect();
        let names: Vec<&str> = names.into_iter().collect();
        let text = format!(
            "the sweep failed {streak} passes in a row ({}); sandboxes \
             there may still be running",
            names.join(", ")
        );
        Some(
            Event::new(Kind::SweeperFailing, text)
                .with("passes", *streak)
                .with("failures", failures),
        )
    }
}

/// `reclaim_pending` for `left`, from `source` (`sweep` or `sidecar`).
pub(crate) fn pending_event(left: &[&Removal], source: &str) -> Event {
    let (providers, sessions) = tally(left);
    let text = format!(
        "{} sandbox{} could not be removed yet ({}){}; a later sweep \
         finishes {}",
        left.len(),
        plural(left.len()),
        by_provider(&providers),
        named_sessions(&sessions),
        if left.len() == 1 { "it" } else { "them" },
    );
    let sandboxes: Vec<Value> = left
        .iter()
        .take(NAMED)
        .map(|r| {
            json!({
                "provider": r.sandbox.provider,
                "id": r.sandbox.id,
                "session": r.sandbox.session(),
                "error": r.outcome.error(),
            })
        })
        .collect();
    Event::new(Kind::ReclaimPending, text)
        .with("count", left.len())
        .with("providers", json!(providers))
        .with_named("sessions", sessions)
        .with("sandboxes", sandboxes)
        .with("source", source)
}

fn finished_event(finished: &[&str], removed: &[&Removal]) -> Option<Event> {
    if finished.is_empty() {
        return None;
    }
    let done: Vec<&Removal> = removed
        .iter()
        .copied()
        .filter(|r| r.outcome.is_final())
        .collect();
    let (providers, _) = tally(&done);
    let sessions: BTreeSet<String> = finished.iter().map(|s| (*s).to_string()).collect();
    let text = format!(
        "finished the pending reclaim of {} session{} ({} sandbox{} \
         removed){}",
        finished.len(),
        plural_s(finished.len()),
        done.len(),
        plural(done.len()),
        named_sessions(&sessions),
    );
    Some(
        Event::new(Kind::PendingFinished, text)
            .with("count", finished.len())
            .with("removed", done.len())
            .with("providers", json!(providers))
            .with_named("sessions", sessions),
    )
}

/// Counts by provider, and the sessions.
fn tally(removals: &[&Removal]) -> (BTreeMap<String, usize>, BTreeSet<String>) {
    let mut providers = BTreeMap::new();
    let mut sessions = BTreeSet::new();
    for r in removals {
        *providers.entry(r.sandbox.provider.clone()).or_default() += 1;
        if let Some(s) = r.sandbox.session() {
            sessions.insert(s.to_string());
        }
    }
    (providers, sessions)
}

/// `docker 3, e2b 1`.
fn by_provider(providers: &BTreeMap<String, usize>) -> String {
    providers
        .iter()
        .map(|(p, n)| format!("{p} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `, session S` / `, sessions A, B and 3 more` / ``.
fn named_sessions(sessions: &BTreeSet<String>) -> String {
    match sessions.len() {
        0 => String::new(),
        1 => format!(
            ", session {}",
            sessions.iter().next().unwrap_or(&String::new())
        ),
        n if n <= 3 => format!(
            ", sessions {}",
            sessions.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
        n => format!(
            ", sessions {} and {} more",
            sessions
                .iter()
                .take(2)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            n - 2
        ),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "es"
    }
}

fn plural_s(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

impl Event {
    /// `key` the first [`NAMED`] of `names`, and `more` the count of the rest.
    pub(crate) fn with_named(self, key: &str, names: BTreeSet<String>) -> Event {
        let more = names.len().saturating_sub(NAMED);
        let named: Vec<String> = names.into_iter().take(NAMED).collect();
        self.with(key, named).with("more", more)
    }
}

/// A sweep's notifier and its tracker: what [`crate::sweep::service`] tells passes to.
pub(crate) struct Told {
    pub notifier: std::sync::Arc<super::Notifier>,
    pub tracker: Tracker,
    /// `notify.json` in the state directory: what was told, across runs.
    memory: PathBuf,
}

impl Told {
    /// A tracker that remembers what was told in `state` (the state directory).
    pub(crate) fn new(
        notifier: std::sync::Arc<super::Notifier>,
        detached_after: Option<Duration>,
        state: &Path,
    ) -> Told {
        let memory = state.join(MEMORY);
        let mut tracker = Tracker::new(detached_after);
        match std::fs::read(&memory) {
            Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
                Ok(v) => tracker.remember(&v),
                Err(e) => tracing::warn!("notify: {} unreadable, ignored: {e}", memory.display()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("notify: cannot read {}: {e}", memory.display()),
        }
        Told {
            notifier,
            tracker,
            memory,
        }
    }

    /// Sends the events of one pass (queued: this never waits), and remembers what was told.
    pub(crate) fn pass(&mut self, pass: &Pass) {
        for event in self.tracker.pass(pass, crate::timefmt::now_unix()) {
            self.notifier.send(event);
        }
        if let Err(e) = write_private(&self.memory, &self.tracker.memory()) {
            tracing::warn!("notify: cannot write {}: {e}", self.memory.display());
        }
    }

    /// Sends the events of a watcher's reclaim.
    pub(crate) fn watched(&mut self, pass: &Pass) {
        for event in self.tracker.watched(pass) {
            self.notifier.send(event);
        }
    }
}

/// The file in the state directory that remembers what was told.
const MEMORY: &str = "notify.json";

/// Writes `value` to `path` through a temporary file renamed over it, mode 0600 (as every
/// file of the state directory).
fn write_private(path: &Path, value: &Value) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(value.to_string().as_bytes())?;
    std::fs::rename(&tmp, path)
}
