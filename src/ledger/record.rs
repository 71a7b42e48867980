//! What a journal line says: one [`Record`] stamped with the time it was written.
//!
//! On disk each line is one JSON object, `{"t":<unix ms>,"ev":"<kind>",…fields}`. The format is
//! meant to grow: a reader skips a record whose `ev` it does not know (it decodes as
//! [`Record::Unknown`]) instead of refusing the whole journal, so an older sandguard can still
//! sweep after a newer one wrote. Fields added to a known record must carry a serde default.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::cause::EndCause;
use crate::protocol::Target;

/// One event in a session's life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Record {
    /// Always the first record. `owner` is the owner identity in its label form.
    Start {
        owner: String,
        pid: u32,
        grace_ms: u64,
        #[serde(default)]
        labels: BTreeMap<String, String>,
    },
    /// A new sidecar took the session over, its last one gone (`watch --session S` while
    /// nobody held S's lock): the owner it guards from now on (`owner`, `pid`, `grace_ms` and
    /// `labels` as in `start`). The session is active again from here, whatever it was
    /// before; what it held (claims, detaches, pending work) is kept. A sandguard older
    /// than this record skips it as [`Record::Unknown`] (and so still reads the first owner).
    Resume {
        owner: String,
        pid: u32,
        grace_ms: u64,
        #[serde(default)]
        labels: BTreeMap<String, String>,
    },
    /// `size`: the size (template, snapshot) the create named, where the cloud proxy read one
    /// ([`super::price`]); absent otherwise, and in journals written before it (a reader older
    /// than the field ignores it).
    Claim {
        provider: String,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<String>,
    },
    Release {
        provider: String,
        id: String,
    },
    /// `size` as in `claim`.
    Detach {
        provider: String,
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<String>,
    },
    LeaseExpired,
    /// `reason`: `exited`, or `gone when the watch began`.
    OwnerDead {
        reason: String,
    },
    /// How the owner that died ended, learned after its `owner_dead` (the kernel tells once
    /// its parent has reaped it; see [`crate::identity::death::ExitProbe`]), so it may come
    /// after the reclaim's `end`: `code`, its exit status, or `signal`, the signal that
    /// killed it. History only: it moves nothing.
    OwnerExit {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
    },
    /// A reclaim began, for `cause` ([`EndCause`]). Written after the fact the cause rests on
    /// (`owner_dead`, `lease_expired`), which stays for readers older than `cause`: such a
    /// reader takes the record as a unit one and ignores the field. A journal written before
    /// `cause` has none: [`super::story`] then infers it, as older versions did.
    ReclaimStart {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<EndCause>,
    },
    /// `outcome` is `removed`, or `gone` when the provider no longer had it. `at`: unix
    /// milliseconds when the provider said so, when that is earlier than the record (a
    /// reclaim journals its outcomes once it is over, after its settle pass); absent in
    /// journals written before it, whose removals are timed by the record.
    ///
    /// `limit`: removed while its owner lived, by this limit of the session's
    /// ([`crate::budget::Limits`]); absent for a reclaim's removal (and in older journals).
    Removed {
        provider: String,
        id: String,
        outcome: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<crate::budget::Limit>,
    },
    /// The provider said it is gone while the owner lived, and no path of sandguard's removed
    /// it: the provider's own event (Docker's `destroy`: `docker run --rm`, a removal past the
    /// proxy) or a look-up that found nothing (a cloud sandbox its own timeout ended). It is
    /// released as by a `release` (its slot freed); `at`: unix milliseconds when the provider
    /// said so, where its time ends (`crate::watch::gone`). A reader older than this record
    /// skips it and keeps the claim, which is harmless: a reclaim finds it gone.
    Vanished {
        provider: String,
        id: String,
        at: u64,
    },
    /// `pending`: the reclaim gave up on it for now; a later sweep must finish it.
    Failed {
        provider: String,
        id: String,
        error: String,
        pending: bool,
    },
    End {
        state: SessionState,
    },
    /// A claim (or detach) that can never be acted upon: an unknown or unconfigured
    /// provider, or an id that cannot name one of that provider's sandboxes (a Docker
    /// container *name*). Final: it is reported once, never retried, and keeps nothing pending.
    Refused {
        provider: String,
        id: String,
        reason: String,
    },
    /// The providers configured for the session when its sidecar started: a reclaim that did
    /// not list all of them (a `sweep --provider P`, or a sweep where one is not configured)
    /// cannot end the session.
    Providers {
        names: Vec<String>,
    },
    /// A provider whose sandboxes could not be listed (or were not listed) by a reclaim: the
    /// whole provider is pending until a later reclaim lists it ([`Record::Listed`]).
    Unlisted {
        provider: String,
        error: String,
    },
    /// A reclaim listed this provider completely: an earlier [`Record::Unlisted`] is done.
    Listed {
        provider: String,
    },
    /// `sandguard stop` removed this sandbox by hand; `outcome` is `removed`, or `gone` when the
    /// provider no longer had it. Written only to a session's side file of stops
    /// (`<id>.stopped`, see [`super::StateDir::note_stopped`]), never to its journal: it is
    /// history for `sessions show`, not a fact a reclaim acts on.
    Stopped {
        provider: String,
        id: String,
        outcome: String,
    },
    /// A create a limit counts took slot `n` (`crate::budget`): decided and journaled before
    /// the create was forwarded to `provider`.
    Slot {
        provider: String,
        n: u64,
    },
    /// Slot `n`'s create is done: `made` when the provider made the sandbox (its claim is
    /// journaled as any proxy claim), not when the create failed (the slot is given back).
    SlotDone {
        n: u64,
        made: bool,
    },
    /// A create through a proxy that a limit refused (`crate::budget`): the `n`th of
    /// `provider`'s creates that `limit` (its key as the config names it: `sandboxes`,
    /// `providers.e2b.limits.sandboxes`) refused in the session, at `at` (unix ms). `max` and
    /// `reached`, the limit and the count that reached it in the refusal's words (`2`, `4s of
    /// sandbox time`; `2`, `5s`, `$3.12`); `create`, what the create named as far as the
    /// proxy read it (`image`, `template`, `snapshot`; never its environment or headers).
    /// Journaled at each doubling of `n` and at the session's end, not for every refusal
    /// (`crate::budget::refusals`): a reader keeps the largest `n`. A reader older than this
    /// record skips it as [`Record::Unknown`], which loses only the history.
    CreateRefused {
        provider: String,
        limit: String,
        max: String,
        reached: String,
        n: u64,
        at: u64,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        create: BTreeMap<String, String>,
    },
    /// A record written by a newer sandguard. Only ever read; writing one is an error.
    #[serde(other, skip_serializing)]
    Unknown,
}

impl Record {
    pub fn claim(t: &Target) -> Record {
        Record::claim_sized(t, None)
    }

    /// A claim of a sandbox whose create named its `size`.
    pub fn claim_sized(t: &Target, size: Option<String>) -> Record {
        Record::Claim {
            provider: t.provider.clone(),
            id: t.id.clone(),
            size,
        }
    }

    pub fn release(t: &Target) -> Record {
        Record::Release {
            provider: t.provider.clone(),
            id: t.id.clone(),
        }
    }

    pub fn detach(t: &Target) -> Record {
        Record::detach_sized(t, None)
    }

    /// A detach of a sandbox whose create named its `size`.
    pub fn detach_sized(t: &Target, size: Option<String>) -> Record {
        Record::Detach {
            provider: t.provider.clone(),
            id: t.id.clone(),
            size,
        }
    }
}

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionState {
    /// The owner is (as far as the ledger knows) alive.
    Active,
    /// A reclaim started and has not written its end yet (it may have died).
    Reclaiming,
    /// A reclaim ended with sandboxes left over; the next sweep finishes it.
    Pending,
    /// The owner died or its lease expired, and everything it owned is gone.
    Reclaimed,
    /// The owner said `bye` and everything it owned is gone.
    Clean,
}

impl SessionState {
    /// Nothing is left to do for this session.
    pub fn is_final(self) -> bool {
        matches!(self, SessionState::Reclaimed | SessionState::Clean)
    }

    /// The inverse of [`SessionState::as_str`].
    pub fn parse(s: &str) -> Option<SessionState> {
        [
            SessionState::Active,
            SessionState::Reclaiming,
            SessionState::Pending,
            SessionState::Reclaimed,
            SessionState::Clean,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Active => "active",
            SessionState::Reclaiming => "reclaiming",
            SessionState::Pending => "pending",
            SessionState::Reclaimed => "reclaimed",
            SessionState::Clean => "clean",
        }
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record as one journal line holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Entry {
    /// Unix milliseconds when the record was written.
    pub t: u64,
    #[serde(flatten)]
    pub record: Record,
}

impl Entry {
    /// The line to append, with its `\n`. Fails only for [`Record::Unknown`].
    pub(super) fn encode(&self) -> serde_json::Result<Vec<u8>> {
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        Ok(line)
    }

    /// One line, without its `\n`.
    pub(super) fn decode(line: &[u8]) -> serde_json::Result<Entry> {
        serde_json::from_slice(line)
    }
}

/// Unix milliseconds now; a clock before 1970 reads as 0 rather than failing a write.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests;
