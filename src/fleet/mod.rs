//! The fleet lease store: which sessions, on which machines, are alive, so that a sweep on any
//! machine can reclaim the sandboxes of a machine that died whole.
//!
//! A sidecar registers its session ([`Store::register`]), renews its lease every `lease / 3`
//! while its owner lives and while it reclaims ([`Store::renew`], which also mirrors the
//! claims and detaches made since the last renewal), and ends it ([`Store::finish`]).
//! `sweep --fleet` reads every session ([`Store::sessions`]), and reclaims one whose lease
//! expired under a per-session lock ([`Store::lock`]), writing its progress back
//! ([`Store::set_state`]). [`redis::RedisStore`] is the real store; `memory::MemoryStore`
//! stands in for it in unit tests of the sidecar and the sweep.
//!
//! # Key layout (every key under the configured `prefix`, default `sandguard`)
//!
//! | key | type | what |
//! |---|---|---|
//! | `{prefix}:sessions` | sorted set | every session not yet final; member the id, score its start (unix ms). Listing reads this, never `SCAN`s the keyspace. |
//! | `{prefix}:session:{id}` | hash | `host`, `owner` (identity label), `pid`, `labels` (JSON object), `providers` (JSON array), `started_ms`, `lease_ms`, `state` (`active`, `reclaiming`, `pending`, `stopped`, `reclaimed`, `clean`), `updated_ms`, `reclaims` (reclaims started by sweepers), `reclaimed_by` |
//! | `{prefix}:lease:{id}` | string | the host holding the lease, with `PX lease`: the lease is alive exactly while this key exists, on the store's clock |
//! | `{prefix}:claims:{id}` | set | the session's claims, `provider:id` |
//! | `{prefix}:detached:{id}` | set | what the owner detached, `provider:id` |
//! | `{prefix}:lock:{id}` | string | a sweeper's token, `SET NX PX`, renewed while it reclaims |
//! | `{prefix}:spend:{day}` | hash | one UTC day's sandbox time (`2026-12-06`): field `{host}\|{session}\|{provider}`, value JSON `{"ms", "alive_ms", "sandboxes", "first", "alive", "untimed", "started_ms"}` (times in ms; [`spend`] says what each counts); expires [`spend::KEEP_DAYS`] after the day ends |
//!
//! Decisions:
//! - **The lease lives on the store's clock** (a key with `PX`), so machines' clocks never
//!   decide a death; a sweeper only asks whether the key still exists.
//! - **A final session stays for [`FINAL_KEEP`]** (its hash, with its state, for audit and
//!   `sessions --fleet`), out of the index; its lease, claims and detaches are deleted.
//! - **A sidecar stopped while its owner lives marks the session `stopped`** and drops its
//!   lease: no one proved the owner dead, so a fleet sweep leaves it (its host's own sweep
//!   adopts it; the provider TTLs still apply). Unknown is not dead. The record expires
//!   after a week; a listing drops index members whose record is gone.
//! - **A pending session drops its lease**: nobody looks after it any more, so the next fleet
//!   sweep finishes it (its own host's sweep may too; removals of what is gone are success).
//! - **A renewal is one pipelined round trip**: the lease `SET … PX`, the claim changes, and
//!   an `EXISTS` on the record; a record found missing (Redis restarted empty, or a flush)
//!   makes the sidecar register again at once with everything it holds.
//! - **Locks are released only by their holder** (a compare-and-delete script), and expire by
//!   themselves if the sweeper dies: the next sweeper finishes what it left pending.
//! - **Spend outlives the session** ([`spend`]): a final session's record goes after
//!   [`FINAL_KEEP`], its figures stay [`spend::KEEP_DAYS`] (400) days after their day, in
//!   hashes by day, so that a report reads the days it covers (one `HGETALL` each, in one
//!   pipeline; no `SCAN`, no index to keep) and a day's hash expires by itself. A session's
//!   sidecar writes its figures from its journal ([`Store::put_spend`]: one `HSET` per day, in
//!   one pipelined round trip), at registration, at most once per renewal while it runs, and
//!   at its end; its machine's sweep writes them when it ends the session; a fleet sweep,
//!   which has no journal of another host's session, closes them ([`Store::close_spend`]).

#[cfg(test)]
pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod spend;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use std::time::Duration;

use serde::Serialize;

use crate::ledger::SessionState;
use crate::protocol::Target;
pub(crate) use spend::{SessionSpend, SpendEntry};

/// How long a final session's record stays in the store after its end.
pub(crate) const FINAL_KEEP: Duration = Duration::from_secs(3600);

/// A session's state in the store: the ledger's state of a session ([`SessionState`], under
/// the same names), or `stopped`, which only the store says.
///
/// On the wire (the hash's `state` field, and `sessions --fleet --json`) it is one lowercase
/// word: `active`, `reclaiming`, `pending`, `reclaimed`, `clean` or `stopped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetState {
    /// Where the session stands, as a ledger would say.
    Session(SessionState),
    /// Its sidecar was stopped while its owner lived: no one proved the owner dead, so only
    /// its own host's sweep judges it. (A ledger keeps such a session `active`: the lock
    /// its sidecar dropped tells a sweep there all it needs; the store has no lock to read.)
    Stopped,
}

impl FleetState {
    pub fn as_str(self) -> &'static str {
        match self {
            FleetState::Session(state) => state.as_str(),
            FleetState::Stopped => "stopped",
        }
    }

    pub fn parse(s: &str) -> Option<FleetState> {
        match s {
            "stopped" => Some(FleetState::Stopped),
            _ => SessionState::parse(s).map(FleetState::Session),
        }
    }

    pub fn is_final(self) -> bool {
        matches!(self, FleetState::Session(state) if state.is_final())
    }
}

impl From<SessionState> for FleetState {
    fn from(state: SessionState) -> FleetState {
        FleetState::Session(state)
    }
}

impl PartialEq<SessionState> for FleetState {
    fn eq(&self, state: &SessionState) -> bool {
        *self == FleetState::Session(*state)
    }
}

impl Serialize for FleetState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What a sidecar registers about its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: String,
    pub host: String,
    /// The owner identity in its label form.
    pub owner: String,
    pub pid: u32,
    pub labels: BTreeMap<String, String>,
    pub providers: Vec<String>,
    pub started_ms: u64,
}

/// What the sidecar holds: mirrored into the claims and detached sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holdings {
    pub claims: BTreeSet<Target>,
    pub detached: BTreeSet<Target>,
}

impl Holdings {
    /// What changed from `old` to `self`.
    pub fn changes_since(&self, old: &Holdings) -> Changes {
        Changes {
            claimed: self.claims.difference(&old.claims).cloned().collect(),
            unclaimed: old.claims.difference(&self.claims).cloned().collect(),
            detached: self.detached.difference(&old.detached).cloned().collect(),
            undetached: old.detached.difference(&self.detached).cloned().collect(),
        }
    }
}

/// Claim changes carried by one renewal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub claimed: Vec<Target>,
    pub unclaimed: Vec<Target>,
    pub detached: Vec<Target>,
    pub undetached: Vec<Target>,
}

/// One session as a sweep (or `sessions --fleet`) reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSession {
    pub record: SessionRecord,
    pub state: FleetState,
    /// The lease left (`None`: expired, or never written).
    pub lease_left: Option<Duration>,
    pub holdings: Holdings,
    pub reclaims: u64,
}

/// What [`Store::lock`] found.
#[derive(Debug)]
pub enum Lock {
    /// Another sweeper holds the session's lock.
    Busy,
    /// The lock is ours, and this is the session as it is now (`None`: its record is gone).
    Held(Option<Box<FleetSession>>),
}

/// A failure to reach or use the store; its messages never carry a password.
#[derive(Debug, Clone, thiserror::Error)]
#[error("fleet store {store}: {message}")]
pub struct FleetError {
    /// The store's URL with its password masked.
    pub store: String,
    pub message: String,
}

/// The lease store. Every call is at most one round trip.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Writes the session's record, its holdings and its lease (again, after data loss).
    async fn register(
        &self,
        record: &SessionRecord,
        holdings: &Holdings,
        lease: Duration,
    ) -> Result<(), FleetError>;

    /// Renews the lease of session `id` held by `host` and applies `changes`; `false` when the
    /// session's record is gone (the caller registers again).
    async fn renew(
        &self,
        id: &str,
        host: &str,
        lease: Duration,
        changes: &Changes,
    ) -> Result<bool, FleetError>;

    /// The sidecar's end: `state` written; a final state drops the session from the index
    /// (kept `FINAL_KEEP` for audit); every end drops the lease.
    async fn finish(&self, id: &str, state: FleetState) -> Result<(), FleetError>;

    /// Every session in the index.
    async fn sessions(&self) -> Result<Vec<FleetSession>, FleetError>;

    /// One session, in the index or not (a final one is kept for `FINAL_KEEP`).
    async fn session(&self, id: &str) -> Result<Option<FleetSession>, FleetError>;

    /// Takes the sweep lock of session `id` for `ttl`, if nobody holds it, and reads the
    /// session under it (in the same round trip).
    async fn lock(&self, id: &str, token: &str, ttl: Duration) -> Result<Lock, FleetError>;

    /// Extends the lock if `token` still holds it.
    async fn relock(&self, id: &str, token: &str, ttl: Duration) -> Result<bool, FleetError>;

    /// Releases the lock if `token` still holds it; with `state`, writes it first as
    /// [`Store::set_state`] does (`(state, host)`), in the same round trip.
    async fn unlock(
        &self,
        id: &str,
        token: &str,
        state: Option<(FleetState, &str)>,
    ) -> Result<(), FleetError>;

    /// A sweeper's progress: `state` written (and, when `reclaiming`, one more reclaim
    /// counted, by `host`); a final state drops the session as [`Store::finish`] does.
    async fn set_state(&self, id: &str, state: FleetState, host: &str) -> Result<(), FleetError>;

    /// Writes a session's figures: each of its (day, provider) replaces what the store held
    /// for it, and is kept [`spend::KEEP_DAYS`] after its day.
    async fn put_spend(&self, spend: &SessionSpend) -> Result<(), FleetError>;

    /// Every session's figures of the UTC `days` (days since the epoch; [`spend::days`]).
    async fn spend(&self, days: RangeInclusive<u64>) -> Result<Vec<SpendEntry>, FleetError>;

    /// A sweep's end of a session it has no journal of: the figures of `session` on `host`,
    /// of `providers` in `days`, keep their time, and none of their sandboxes is alive any
    /// more ([`spend::close`]).
    async fn close_spend(
        &self,
        host: &str,
        session: &str,
        providers: &[String],
        days: RangeInclusive<u64>,
    ) -> Result<(), FleetError>;
}

/// `provider:id`, as the claims sets hold a target.
pub(crate) fn encode_target(t: &Target) -> String {
    format!("{}:{}", t.provider, t.id)
}

/// The inverse of [`encode_target`]; `None` for a member that is not one.
pub(crate) fn decode_target(s: &str) -> Option<Target> {
    let (provider, id) = s.split_once(':')?;
    (!provider.is_empty() && !id.is_empty()).then(|| Target {
        provider: provider.to_string(),
        id: id.to_string(),
    })
}

#[cfg(test)]
mod tests;
