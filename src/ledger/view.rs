//! Reading a journal back: its records folded into one [`SessionView`].
//!
//! Reading rules: a last line without its `\n`, or an unparseable last line, is a write that
//! was cut short and is ignored. An unparseable line anywhere else is skipped and counted in
//! [`SessionView::corrupt_lines`]. A record of a kind this version does not know is skipped
//! with a warning. The state is the last `end` record's; without one, `reclaim_start` means
//! [`SessionState::Reclaiming`]; otherwise the session is [`SessionState::Active`].
//!
//! A `resume` record (a new sidecar took the session over) starts the session's life again:
//! the owner, pid, grace and labels become the resume's, the state is
//! [`SessionState::Active`] whatever it was (an earlier `end` no longer holds it), and what the
//! session held stays: claims and detaches as they were, and pending sandboxes become claims,
//! since the new sidecar reclaims them with the rest when its owner is gone. Providers a
//! reclaim could not list (`unlisted`) are left as they were: only a reclaim that lists them
//! says they are done. A sandguard that predates `resume` skips it as a record of an unknown
//! kind, and reads the session as its first owner's.
//!
//! A `create_refused` record (a create a limit refused) moves no sandbox: it counts, in the
//! slots, how many of its provider's creates its limit refused, so that a resumed sidecar
//! counts on (the largest `n` read; [`crate::budget::Refused`]).
//!
//! A `failed` record with the id `*` (written by earlier versions for a provider that could
//! not be listed) reads as an `unlisted` record for that provider.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::record::{Entry, Record, SessionState};
use crate::protocol::Target;

/// What the ledger knows about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionView {
    pub id: String,
    /// The owner identity, in its label form.
    pub owner: String,
    pub pid: u32,
    pub grace_ms: u64,
    pub labels: BTreeMap<String, String>,
    /// Unix milliseconds of the `start` record.
    pub started_ms: u64,
    /// Unix milliseconds of the last record read.
    pub updated_ms: u64,
    /// Unix milliseconds of the record that ended its active life (the first `reclaim_start`
    /// or `end` after its `start` or last `resume`): when it stopped making sandboxes. Later
    /// records (a sweep finishing a pending reclaim) do not move it. `None` while active.
    #[serde(skip)]
    pub ended_ms: Option<u64>,
    /// Claimed, and not since released, detached or removed.
    pub claims: BTreeSet<Target>,
    /// Meant to outlive the owner; only a TTL ends them.
    pub detached: BTreeSet<Target>,
    /// Those of `detached` the session had claimed when it detached them: it owned them by
    /// its claim (the judgement counts such a detach whatever label the sandbox carries; a
    /// detach of something the session never claimed counts only for its own label).
    #[serde(skip)]
    pub detached_claims: BTreeSet<Target>,
    /// Left over by a reclaim and not removed since, with the last error; the next sweep must
    /// finish them.
    pub pending: BTreeMap<Target, String>,
    /// Providers a reclaim could not list (provider → error): all their sandboxes are pending.
    pub unlisted: BTreeMap<String, String>,
    /// Claims refused for good (never retried), with the reason.
    pub refused: BTreeMap<Target, String>,
    /// The providers configured when the sidecar started (`None`: not recorded).
    pub providers: Option<Vec<String>>,
    pub state: SessionState,
    /// A sidecar holds the journal's lock right now.
    pub sidecar_alive: bool,
    /// Unparseable lines before the last one.
    pub corrupt_lines: usize,
    /// The create slots its limits were decided by (`crate::budget`), and the creates they
    /// refused: what a resumed sidecar counts on from.
    #[serde(skip)]
    pub slots: crate::budget::Slots,
}

/// Folds the journal text of session `id` into a view (with `sidecar_alive` false); `None`
/// when it holds no start record.
pub(super) fn fold(id: &str, text: &[u8]) -> Option<SessionView> {
    let decoded = decode(id, text);
    fold_decoded(id, decoded.entries, decoded.corrupt)
}

/// A journal's lines decoded by the reading rules above, once: a reader that both folds
/// the view and tells the story ([`super::StateDir::read_history`], for every session of a
/// `report`) decodes each line once, since decoding is most of a read's time.
pub(super) struct Decoded {
    /// Each record with its line number (from 1).
    pub entries: Vec<(usize, Entry)>,
    /// Unparseable lines before the last one (each warned about).
    pub corrupt: usize,
}

pub(super) fn decode(id: &str, text: &[u8]) -> Decoded {
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    // The piece after the last `\n` is empty, or a torn write.
    lines.pop();
    let last = lines.len().saturating_sub(1);
    let mut decoded = Decoded {
        entries: Vec::with_capacity(lines.len()),
        corrupt: 0,
    };
    for (n, line) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        match Entry::decode(line) {
            Ok(entry) => decoded.entries.push((n + 1, entry)),
            Err(_) if n == last => {}
            Err(e) => {
                tracing::warn!("session {id}: skipping corrupt journal line {}: {e}", n + 1);
                decoded.corrupt += 1;
            }
        }
    }
    decoded
}

/// Folds decoded records (see [`decode`]) into a view.
pub(super) fn fold_decoded(
    id: &str,
    entries: impl IntoIterator<Item = (usize, Entry)>,
    corrupt: usize,
) -> Option<SessionView> {
    let mut fold = Fold {
        id,
        view: None,
        ended: false,
    };
    for (line, entry) in entries {
        fold.apply(entry, line);
    }
    let mut view = fold.view?;
    view.corrupt_lines = corrupt;
    Some(view)
}

struct Fold<'a> {
    id: &'a str,
    view: Option<SessionView>,
    /// An `end` record was seen: from then on only another `end` changes the state.
    ended: bool,
}

impl Fold<'_> {
    /// Applies one record. Records before `start` (there should be none) are dropped: without
    /// it there is no session to apply them to.
    fn apply(&mut self, entry: Entry, line: usize) {
        let id = self.id;
        let Some(v) = &mut self.view else {
            match entry.record {
                Record::Start {
                    owner,
                    pid,
                    grace_ms,
                    labels,
                } => self.view = Some(started(id, entry.t, owner, pid, grace_ms, labels)),
                _ => tracing::warn!("session {id}: line {line}: record before start, skipped"),
            }
            return;
        };
        v.updated_ms = v.updated_ms.max(entry.t);
        match entry.record {
            Record::Start { .. } => {
                tracing::warn!("session {id}: line {line}: second start, skipped");
            }
            Record::Unknown => {
                tracing::warn!("session {id}: line {line}: record of an unknown kind, skipped");
            }
            Record::Resume {
                owner,
                pid,
                grace_ms,
                labels,
            } => {
                resumed(v, owner, pid, grace_ms, labels);
                v.ended_ms = None;
                self.ended = false;
            }
            Record::ReclaimStart { .. } if !self.ended => {
                v.state = SessionState::Reclaiming;
                v.ended_ms.get_or_insert(entry.t);
            }
            Record::End { state } => {
                v.state = state;
                v.ended_ms.get_or_insert(entry.t);
                self.ended = true;
            }
            other => track(v, other),
        }
    }
}

/// Moves a target between the claimed, detached and pending sets.
fn track(v: &mut SessionView, record: Record) {
    match record {
        Record::Claim { provider, id, .. } => {
            let t = Target { provider, id };
            v.detached.remove(&t);
            v.detached_claims.remove(&t);
            v.claims.insert(t);
        }
        Record::Detach { provider, id, .. } => {
            let t = Target { provider, id };
            // Its claim, as given or pinned (`Target::answers`), becomes a detach.
            let before = v.claims.len();
            v.claims.retain(|c| !c.answers(&t));
            if v.claims.len() != before {
                v.detached_claims.insert(t.clone());
            }
            v.detached.insert(t);
        }
        // Gone, whoever removed it (a release of `ID` ends its pinned claims too,
        // `Target::answers`).
        Record::Release { provider, id }
        | Record::Removed { provider, id, .. }
        | Record::Vanished { provider, id, .. } => {
            let t = Target { provider, id };
            v.claims.retain(|c| !c.answers(&t));
            v.detached.remove(&t);
            v.detached_claims.remove(&t);
            v.pending.remove(&t);
        }
        Record::Slot { provider, n } => v.slots.taken(n, &provider),
        Record::SlotDone { n, made } => v.slots.done(n, made),
        Record::CreateRefused {
            provider, limit, n, ..
        } => v.slots.refused.seen(&provider, &limit, n),
        Record::Failed {
            provider,
            id,
            pending: true,
            error,
        } if id == "*" => {
            v.unlisted.insert(provider, error);
        }
        Record::Failed {
            provider,
            id,
            pending: true,
            error,
        } => {
            v.pending.insert(Target { provider, id }, error);
        }
        Record::Refused {
            provider,
            id,
            reason,
        } => {
            let t = Target { provider, id };
            v.claims.remove(&t);
            v.pending.remove(&t);
            v.refused.insert(t, reason);
        }
        Record::Providers { names } => v.providers = Some(names),
        Record::Unlisted { provider, error } => {
            v.unlisted.insert(provider, error);
        }
        Record::Listed { provider } => {
            v.unlisted.remove(&provider);
        }
        // Lease and owner events and transient failures are history; they move nothing.
        _ => {}
    }
}

/// A new sidecar's owner takes over the session and what it holds (see the module docs).
fn resumed(
    v: &mut SessionView,
    owner: String,
    pid: u32,
    grace_ms: u64,
    labels: BTreeMap<String, String>,
) {
    (v.owner, v.pid, v.grace_ms, v.labels) = (owner, pid, grace_ms, labels);
    v.state = SessionState::Active;
    for (t, _) in std::mem::take(&mut v.pending) {
        if !v.detached.contains(&t) {
            v.claims.insert(t);
        }
    }
}

#[cfg(test)]
impl SessionView {
    /// An active session `id` with nothing in it, for tests that fill in what they need.
    pub(crate) fn blank(id: &str) -> SessionView {
        started(id, 0, String::new(), 0, 0, BTreeMap::new())
    }
}

fn started(
    id: &str,
    t: u64,
    owner: String,
    pid: u32,
    grace_ms: u64,
    labels: BTreeMap<String, String>,
) -> SessionView {
    SessionView {
        id: id.to_string(),
        owner,
        pid,
        grace_ms,
        labels,
        started_ms: t,
        updated_ms: t,
        ended_ms: None,
        claims: BTreeSet::new(),
        detached: BTreeSet::new(),
        detached_claims: BTreeSet::new(),
        pending: BTreeMap::new(),
        unlisted: BTreeMap::new(),
        refused: BTreeMap::new(),
        providers: None,
        state: SessionState::Active,
        sidecar_alive: false,
        corrupt_lines: 0,
        slots: crate::budget::Slots::default(),
    }
}

#[cfg(test)]
mod tests;
