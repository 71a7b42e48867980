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
}

/// Folds the journal text of session `id` into a view (with `sidecar_alive` false); `None`
/// when it holds no start record.
pub(super) fn fold(id: &str, text: &[u8]) -> Option<SessionView> {
    let mut lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    // The piece after the last `\n` is empty, or a torn write.
    lines.pop();
    let last = lines.len().saturating_sub(1);
    let mut fold = Fold {
        id,
        view: None,
        ended: false,
    };
    let mut corrupt = 0;
    for (n, line) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        match Entry::decode(line) {
            Ok(entry) => fold.apply(entry, n + 1),
            Err(_) if n == last => {}
            Err(e) => {
                tracing::warn!("session {id}: skipping corrupt journal line {}: {e}", n + 1);
                corrupt += 1;
            }
        }
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
                self.ended = false;
            }
            Record::ReclaimStart if !self.ended => v.state = SessionState::Reclaiming,
            Record::End { state } => {
                v.state = state;
                self.ended = true;
            }
            other => track(v, other),
        }
    }
}

/// Moves a target between the claimed, detached and pending sets.
fn track(v: &mut SessionView, record: Record) {
    match record {
        Record::Claim { provider, id } => {
            let t = Target { provider, id };
            v.detached.remove(&t);
            v.detached_claims.remove(&t);
            v.claims.insert(t);
        }
        Record::Detach { provider, id } => {
            let t = Target { provider, id };
            if v.claims.remove(&t) {
                v.detached_claims.insert(t.clone());
            }
            v.detached.insert(t);
        }
        // Gone, whoever removed it.
        Record::Release { provider, id } | Record::Removed { provider, id, .. } => {
            let t = Target { provider, id };
            v.claims.remove(&t);
            v.detached.remove(&t);
            v.detached_claims.remove(&t);
            v.pending.remove(&t);
        }
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str =
        r#"{"t":10,"ev":"start","owner":"o","pid":7,"grace_ms":5,"labels":{"k":"v"}}"#;

    fn view(lines: &[&str]) -> SessionView {
        let mut text = lines.join("\n");
        text.push('\n');
        fold("s1", text.as_bytes()).unwrap()
    }

    fn t(provider: &str, id: &str) -> Target {
        Target {
            provider: provider.into(),
            id: id.into(),
        }
    }

    fn set(targets: &[Target]) -> BTreeSet<Target> {
        targets.iter().cloned().collect()
    }

    #[test]
    fn claims_releases_detaches_and_removals_fold_into_sets() {
        let v = view(&[
            START,
            r#"{"t":11,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":12,"ev":"claim","provider":"docker","id":"b"}"#,
            r#"{"t":13,"ev":"claim","provider":"e2b","id":"c"}"#,
            r#"{"t":14,"ev":"claim","provider":"e2b","id":"d"}"#,
            r#"{"t":15,"ev":"release","provider":"docker","id":"a"}"#,
            r#"{"t":16,"ev":"detach","provider":"e2b","id":"c"}"#,
            r#"{"t":17,"ev":"removed","provider":"docker","id":"b","outcome":"gone"}"#,
            r#"{"t":18,"ev":"failed","provider":"e2b","id":"d","error":"x","pending":true}"#,
            r#"{"t":19,"ev":"failed","provider":"e2b","id":"e","error":"x","pending":true}"#,
            r#"{"t":20,"ev":"failed","provider":"e2b","id":"f","error":"x","pending":false}"#,
            r#"{"t":21,"ev":"removed","provider":"e2b","id":"e","outcome":"removed"}"#,
        ]);
        assert_eq!(v.claims, set(&[t("e2b", "d")]));
        assert_eq!(v.detached, set(&[t("e2b", "c")]));
        assert_eq!(
            v.pending.keys().cloned().collect::<BTreeSet<_>>(),
            set(&[t("e2b", "d")])
        );
        assert_eq!((v.owner.as_str(), v.pid, v.grace_ms), ("o", 7, 5));
        assert_eq!(v.labels.get("k").map(String::as_str), Some("v"));
        assert_eq!((v.started_ms, v.updated_ms), (10, 21));
        assert_eq!(v.corrupt_lines, 0);
    }

    #[test]
    fn refusals_providers_and_unlisted_providers_fold() {
        let v = view(&[
            START,
            r#"{"t":11,"ev":"providers","names":["docker","e2b"]}"#,
            r#"{"t":12,"ev":"claim","provider":"docker","id":"abc"}"#,
            r#"{"t":13,"ev":"refused","provider":"docker","id":"abc","reason":"a name"}"#,
            r#"{"t":14,"ev":"failed","provider":"e2b","id":"*","error":"down","pending":true}"#,
            r#"{"t":15,"ev":"unlisted","provider":"acme","error":"not swept"}"#,
            r#"{"t":16,"ev":"listed","provider":"e2b"}"#,
        ]);
        assert!(v.claims.is_empty() && v.pending.is_empty());
        assert_eq!(
            v.refused.get(&t("docker", "abc")).map(String::as_str),
            Some("a name")
        );
        assert_eq!(v.providers, Some(vec!["docker".into(), "e2b".into()]));
        assert_eq!(v.unlisted.keys().collect::<Vec<_>>(), ["acme"]);
    }

    #[test]
    fn the_state_follows_reclaim_and_end_records() {
        let reclaim = r#"{"t":11,"ev":"reclaim_start"}"#;
        let end = |s: &str| format!(r#"{{"t":12,"ev":"end","state":"{s}"}}"#);
        assert_eq!(view(&[START]).state, SessionState::Active);
        let lease = r#"{"t":11,"ev":"lease_expired"}"#;
        assert_eq!(view(&[START, lease]).state, SessionState::Active);
        assert_eq!(view(&[START, reclaim]).state, SessionState::Reclaiming);
        let pending = end("pending");
        assert_eq!(
            view(&[START, reclaim, &pending]).state,
            SessionState::Pending
        );
        // A later sweep starting again does not hide that work is pending …
        assert_eq!(
            view(&[START, reclaim, &pending, reclaim]).state,
            SessionState::Pending
        );
        // … and a successful one ends it.
        let done = end("reclaimed");
        let v = view(&[START, reclaim, &pending, reclaim, &done]);
        assert_eq!(v.state, SessionState::Reclaimed);
        assert_eq!(view(&[START, &end("clean")]).state, SessionState::Clean);
    }

    #[test]
    fn a_resume_makes_the_session_active_again_under_its_new_owner_keeping_its_holdings() {
        let resume =
            r#"{"t":30,"ev":"resume","owner":"o2","pid":8,"grace_ms":6,"labels":{"k":"w"}}"#;
        let held = [
            START,
            r#"{"t":11,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":12,"ev":"claim","provider":"docker","id":"b"}"#,
            r#"{"t":13,"ev":"detach","provider":"docker","id":"b"}"#,
            r#"{"t":14,"ev":"claim","provider":"docker","id":"c"}"#,
        ];
        // The sidecar died while its owner lived: nothing ended, everything is still held.
        let v = view(&[&held[..], &[resume]].concat());
        assert_eq!(v.state, SessionState::Active);
        assert_eq!((v.owner.as_str(), v.pid, v.grace_ms), ("o2", 8, 6));
        assert_eq!(v.labels.get("k").map(String::as_str), Some("w"));
        assert_eq!(v.claims, set(&[t("docker", "a"), t("docker", "c")]));
        assert_eq!(v.detached, set(&[t("docker", "b")]));
        assert_eq!((v.started_ms, v.updated_ms), (10, 30));

        // An ended session (the k8s case: a new owner in the same pod) is active again; what
        // a reclaim left pending becomes the new sidecar's to reclaim; the detach stays.
        let ended = [
            r#"{"t":15,"ev":"owner_dead","reason":"exited"}"#,
            r#"{"t":16,"ev":"reclaim_start"}"#,
            r#"{"t":17,"ev":"removed","provider":"docker","id":"a","outcome":"removed"}"#,
            r#"{"t":18,"ev":"failed","provider":"docker","id":"c","error":"x","pending":true}"#,
            r#"{"t":19,"ev":"end","state":"pending"}"#,
        ];
        let v = view(&[&held[..], &ended[..], &[resume]].concat());
        assert_eq!(v.state, SessionState::Active);
        assert_eq!(v.claims, set(&[t("docker", "c")]));
        assert!(v.pending.is_empty(), "{:?}", v.pending);
        assert_eq!(v.detached, set(&[t("docker", "b")]));
        // The new life's reclaim moves the state again, and its end holds.
        let reclaim = r#"{"t":31,"ev":"reclaim_start"}"#;
        let again = [&held[..], &ended[..], &[resume, reclaim]].concat();
        assert_eq!(view(&again).state, SessionState::Reclaiming);
        let end = r#"{"t":32,"ev":"end","state":"reclaimed"}"#;
        let after = [&held[..], &ended[..], &[resume, reclaim, end]].concat();
        assert_eq!(view(&after).state, SessionState::Reclaimed);
    }

    #[test]
    fn a_torn_last_line_is_ignored_and_middle_corruption_counted() {
        let claim = r#"{"t":11,"ev":"claim","provider":"docker","id":"a"}"#;
        let torn = format!("{START}\n{claim}\n{{\"t\":12,\"ev\":\"rel");
        let v = fold("s1", torn.as_bytes()).unwrap();
        assert_eq!((v.claims.len(), v.corrupt_lines), (1, 0));
        let garbage_last = view(&[START, claim, "{\"t\":12,"]);
        assert_eq!(
            (garbage_last.claims.len(), garbage_last.corrupt_lines),
            (1, 0)
        );
        let v = view(&[START, "not json", claim, "{\"t\":1}", "", claim]);
        assert_eq!((v.claims.len(), v.corrupt_lines), (1, 2));
    }

    #[test]
    fn unknown_kinds_are_skipped_and_a_missing_start_is_unreadable() {
        let v = view(&[START, r#"{"t":11,"ev":"teleport","to":"mars"}"#]);
        assert_eq!((v.corrupt_lines, v.updated_ms), (0, 11));
        assert_eq!(fold("s1", b""), None);
        let no_start = "{\"t\":11,\"ev\":\"reclaim_start\"}\n";
        assert_eq!(fold("s1", no_start.as_bytes()), None);
        // A start record cut short is no start at all.
        assert_eq!(fold("s1", &START.as_bytes()[..20]), None);
    }
}
