//! What happened to each sandbox of a session, and why, told from its journal's records in
//! order: the facts behind `sandguard sessions show ID`.
//!
//! The journal records, per sandbox, `claim`, `detach`, `release`, `removed` (with `removed`
//! or `gone`), `failed` and `refused`; per session, the cause of an ending (`owner_dead` with
//! its reason, `lease_expired`), `reclaim_start` and `end`. A reclaim's removals are told with
//! the cause journaled before its `reclaim_start`:
//!
//! | records around the removal | told as |
//! |---|---|
//! | `owner_dead {reason}`, `reclaim_start` | [`Ending::OwnerDead`] (`exited`, `gone when the watch began`, …), with the status or signal of an `owner_exit` that follows |
//! | `lease_expired`, `reclaim_start` | [`Ending::LeaseExpired`] |
//! | `reclaim_start` with no cause, then `end clean` | [`Ending::Bye`]: only a `bye` ends clean |
//! | `reclaim_start` with no cause, then `end reclaimed`/`pending` | [`Ending::Sweep`]: only a sweep reclaims without a cause record |
//! | after an `end pending`, no new `reclaim_start` | [`Ending::FinishedPending`]: a sweep finishing it |
//! | outside any reclaim | [`Ending::Unrecorded`]: the journal does not say |
//!
//! What `sandguard stop` removed by hand comes from the session's side file of stops
//! ([`super::stops`]): its `stopped` records are merged in by time (each file keeps its own
//! order) and told as [`Fate::Stopped`]. A reclaim that later finds such a sandbox gone leaves
//! it told as stopped: the stop is why it was gone.
//!
//! Decisions:
//! - Nothing is guessed. The journal records an owner's exit status or the signal that
//!   killed it only where the kernel told the sidecar (see [`crate::identity::death`]);
//!   otherwise the story says "owner exited". It never says whether a sandbox still runs: a
//!   claim with nothing after it is "claimed". Liveness (owner, sidecar) is for the caller to add, from the lock
//!   and the judge, at the time of asking.
//! - A sandbox is [`Origin::Claimed`] when the journal holds a `claim` (or `detach`) for it
//!   before its fate, else [`Origin::Labelled`]: a reclaim found it by the session's label.
//! - A `failed` record that is not pending (a transient failure later retried) moves nothing.
//! - A `resume` (a new sidecar took the session over, its last one gone) starts a new life of
//!   the session, told in [`Story::resumes`] (when, the new owner's pid, and the state the
//!   session was in: `active` when only the sidecar had died, `reclaimed`/`clean`/`pending`
//!   when a new owner took an ended session over). [`Story::ending`] is the current life's:
//!   `None` until the resumed session is reclaimed again, since the state it explained no
//!   longer holds. Each earlier removal keeps the ending of its own reclaim. A sandbox left
//!   pending is held by the new sidecar from the resume on, and told as claimed again (its
//!   next fate is the new life's); claims and detaches carry over as they were. So
//!   `sessions show` of a resumed session tells it active under its new owner, with what the
//!   new sidecar watches as claimed; the earlier life is in the removals' own words.

use super::record::{Entry, Record, SessionState};
use crate::identity::death::Exit;
use crate::protocol::Target;

/// How a session's sandboxes came to be reclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The sidecar saw the owner die; the journaled reason (`exited`, …) and how it ended,
    /// where the journal says.
    OwnerDead { reason: String, exit: Option<Exit> },
    /// The session's lease expired (a sidecar's, or a fleet sweep's verdict).
    LeaseExpired,
    /// The program said `bye`: a clean end.
    Bye,
    /// A sweep reclaimed it (the owner dead, its sidecar gone, or a reclaim never finished).
    Sweep,
    /// A sweep finished a reclaim left pending.
    FinishedPending,
    /// No reclaim is recorded around it.
    Unrecorded,
}

impl Ending {
    /// Plain words: "owner exited", "lease expired", …
    pub fn words(&self) -> String {
        match self {
            Ending::OwnerDead { reason, exit } if reason == "exited" => Exit::owner_words(*exit),
            Ending::OwnerDead { reason, .. } if reason == "gone when the watch began" => {
                "owner was already gone when the watch began".into()
            }
            Ending::OwnerDead { reason, .. } => format!("owner dead ({reason})"),
            Ending::LeaseExpired => "lease expired".into(),
            Ending::Bye => "the program ended its session (bye)".into(),
            Ending::Sweep => "reclaimed by a sweep".into(),
            Ending::FinishedPending => "a sweep finished the pending reclaim".into(),
            Ending::Unrecorded => "no reclaim recorded".into(),
        }
    }

    /// A stable word for JSON: `owner_dead`, `lease_expired`, `bye`, `sweep`,
    /// `finished_pending`, `unrecorded`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Ending::OwnerDead { .. } => "owner_dead",
            Ending::LeaseExpired => "lease_expired",
            Ending::Bye => "bye",
            Ending::Sweep => "sweep",
            Ending::FinishedPending => "finished_pending",
            Ending::Unrecorded => "unrecorded",
        }
    }
}

/// How the session came to know a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The program (or the Docker proxy) claimed it.
    Claimed,
    /// Only a reclaim's listing by the session's label found it.
    Labelled,
}

/// Where a sandbox stands, by the journal's last word on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Removed by a reclaim; `gone`: the provider no longer had it.
    Removed { ending: Ending, gone: bool },
    /// The program removed it and said so (`release`).
    Released,
    /// Meant to outlive the owner: only its TTL ends it.
    Detached,
    /// Never acted upon, for this reason.
    Refused(String),
    /// A reclaim could not remove it (last error); a sweep retries.
    Pending(String),
    /// Removed by hand with `sandguard stop`; `gone`: the provider no longer had it.
    Stopped { gone: bool },
    /// Claimed, and nothing since.
    Claimed,
}

impl Fate {
    /// A stable word for JSON.
    pub fn as_str(&self) -> &'static str {
        match self {
            Fate::Removed { gone: false, .. } => "removed",
            Fate::Removed { gone: true, .. } => "gone",
            Fate::Released => "released",
            Fate::Detached => "detached",
            Fate::Refused(_) => "refused",
            Fate::Pending(_) => "pending",
            Fate::Stopped { .. } => "stopped",
            Fate::Claimed => "claimed",
        }
    }
}

/// One sandbox's story.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStory {
    pub target: Target,
    pub origin: Origin,
    pub fate: Fate,
    /// Unix milliseconds of the record that decided the fate.
    pub at_ms: u64,
}

/// The sandboxes of one session, in the order the journal first names them, and how the
/// session's last reclaim came about, not counting a sweep finishing it (`None`: never
/// reclaimed since it started or was last resumed).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Story {
    pub ending: Option<Ending>,
    pub sandboxes: Vec<SandboxStory>,
    /// Each time a new sidecar took the session over, oldest first.
    pub resumes: Vec<Resumed>,
}

/// One `resume`: a new sidecar took the session over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resumed {
    /// Unix milliseconds of the `resume` record.
    pub at_ms: u64,
    /// The pid of the owner the new sidecar guards.
    pub pid: u32,
    /// Where the session stood when it was resumed (`active`: only its sidecar had gone).
    pub after: SessionState,
}

/// Reads the story of a journal's text and its side file of stops (empty when none);
/// unreadable lines are skipped (the view counts the journal's).
pub fn tell(journal: &[u8], stops: &[u8]) -> Story {
    let entries = |text: &[u8]| -> Vec<Entry> {
        text.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| Entry::decode(l).ok())
            .collect()
    };
    let stops: Vec<Entry> = entries(stops)
        .into_iter()
        .filter(|e| matches!(e.record, Record::Stopped { .. }))
        .collect();
    let mut teller = Teller::default();
    // A merge, not a sort: a clock stepped back never reorders the journal's own records.
    let mut stops = stops.into_iter().peekable();
    for entry in entries(journal) {
        while let Some(stop) = stops.next_if(|s| s.t < entry.t) {
            teller.apply(stop);
        }
        teller.apply(entry);
    }
    stops.for_each(|stop| teller.apply(stop));
    teller.finish()
}

/// A removal told once its reclaim's end is known (a `bye` is only known at `end clean`).
struct Told {
    run: Option<usize>,
}

#[derive(Default)]
struct Teller {
    /// The cause journaled since the last `reclaim_start`.
    cause: Option<Ending>,
    /// Each reclaim: its cause, and how it ended (`None`: no `end` yet).
    runs: Vec<(Option<Ending>, Option<SessionState>)>,
    /// The reclaim removals belong to now: the last one, unless it ended pending.
    current: Option<usize>,
    sandboxes: Vec<(SandboxStory, Option<Told>)>,
    /// The session's state as the view folds it (`None`: active), for [`Resumed::after`].
    state: Option<SessionState>,
    /// An `end` was seen in this life: a `reclaim_start` no longer changes the state.
    ended: bool,
    /// The first run of the current life (after the last `resume`).
    life: usize,
    resumes: Vec<Resumed>,
}

impl Teller {
    fn apply(&mut self, entry: Entry) {
        let t = entry.t;
        let (target, fate) = match entry.record {
            Record::OwnerDead { reason } => {
                return self.cause = Some(Ending::OwnerDead { reason, exit: None })
            }
            Record::OwnerExit { code, signal } => {
                return self.owner_exit(Exit::from_parts(code, signal));
            }
            Record::LeaseExpired => return self.cause = Some(Ending::LeaseExpired),
            Record::Resume { pid, .. } => return self.resume(pid, t),
            Record::ReclaimStart => {
                if !self.ended {
                    self.state = Some(SessionState::Reclaiming);
                }
                self.runs.push((self.cause.take(), None));
                self.current = Some(self.runs.len() - 1);
                return;
            }
            Record::End { state } => return self.end(state),
            Record::Removed {
                provider,
                id,
                outcome,
            } => return self.removed(Target { provider, id }, outcome == "gone", t),
            Record::Stopped {
                provider,
                id,
                outcome,
            } => (
                Target { provider, id },
                Fate::Stopped {
                    gone: outcome == "gone",
                },
            ),
            Record::Claim { provider, id } => (Target { provider, id }, Fate::Claimed),
            Record::Detach { provider, id } => (Target { provider, id }, Fate::Detached),
            Record::Release { provider, id } => (Target { provider, id }, Fate::Released),
            Record::Refused {
                provider,
                id,
                reason,
            } => (Target { provider, id }, Fate::Refused(reason)),
            Record::Failed {
                provider,
                id,
                error,
                pending: true,
            } if id != "*" => (Target { provider, id }, Fate::Pending(error)),
            _ => return,
        };
        self.set(target, fate, t);
    }

    /// How the owner ended, learned after its death: told with the death it explains, the
    /// cause not yet started or the latest reclaim's.
    fn owner_exit(&mut self, exit: Option<Exit>) {
        let cause = match self.cause.as_mut() {
            Some(cause) => Some(cause),
            None => self
                .runs
                .iter_mut()
                .rev()
                .map(|(cause, _)| cause)
                .find(|cause| !matches!(cause, Some(Ending::FinishedPending)))
                .and_then(Option::as_mut),
        };
        if let Some(Ending::OwnerDead { exit: known, .. }) = cause {
            *known = exit;
        }
    }

    /// A new life: the session active again, pending sandboxes held as claims.
    fn resume(&mut self, pid: u32, t: u64) {
        let after = self.state.take().unwrap_or(SessionState::Active);
        self.resumes.push(Resumed {
            at_ms: t,
            pid,
            after,
        });
        (self.ended, self.cause, self.current) = (false, None, None);
        self.life = self.runs.len();
        for (s, told) in &mut self.sandboxes {
            if matches!(s.fate, Fate::Pending(_)) {
                (s.fate, s.at_ms, *told) = (Fate::Claimed, t, None);
            }
        }
    }

    fn end(&mut self, state: SessionState) {
        (self.state, self.ended) = (Some(state), true);
        if let Some(run) = self.current.and_then(|i| self.runs.get_mut(i)) {
            run.1 = Some(state);
        }
        if state == SessionState::Pending {
            // Removals from now on, with no new `reclaim_start`, are a sweep finishing it.
            self.runs.push((Some(Ending::FinishedPending), None));
            self.current = Some(self.runs.len() - 1);
        }
    }

    fn removed(&mut self, target: Target, gone: bool, t: u64) {
        let stopped = |(s, _): &(SandboxStory, Option<Told>)| {
            s.target == target && matches!(s.fate, Fate::Stopped { .. })
        };
        if gone && self.sandboxes.iter().any(stopped) {
            return;
        }
        let fate = Fate::Removed {
            ending: Ending::Unrecorded,
            gone,
        };
        let run = self.current;
        let i = self.set(target, fate, t);
        self.sandboxes[i].1 = Some(Told { run });
    }

    /// Records the sandbox's latest fate; returns its index.
    fn set(&mut self, target: Target, fate: Fate, at_ms: u64) -> usize {
        let claims = matches!(fate, Fate::Claimed | Fate::Detached);
        if let Some(i) = self.sandboxes.iter().position(|(s, _)| s.target == target) {
            let (s, told) = &mut self.sandboxes[i];
            s.fate = fate;
            s.at_ms = at_ms;
            *told = None;
            return i;
        }
        self.sandboxes.push((
            SandboxStory {
                target,
                origin: if claims {
                    Origin::Claimed
                } else {
                    Origin::Labelled
                },
                fate,
                at_ms,
            },
            None,
        ));
        self.sandboxes.len() - 1
    }

    /// Gives each removal its reclaim's ending, now that every `end` is known.
    fn finish(self) -> Story {
        let ending_of = |run: Option<usize>| match run.and_then(|i| self.runs.get(i)) {
            Some((Some(cause), _)) => cause.clone(),
            Some((None, Some(SessionState::Clean))) => Ending::Bye,
            Some((None, _)) => Ending::Sweep,
            None => Ending::Unrecorded,
        };
        let ending = self
            .runs
            .iter()
            .enumerate()
            .skip(self.life)
            .rfind(|(_, (cause, _))| cause.as_ref() != Some(&Ending::FinishedPending))
            .map(|(i, _)| ending_of(Some(i)));
        let sandboxes = self
            .sandboxes
            .iter()
            .map(|(s, told)| {
                let mut s = s.clone();
                if let (Fate::Removed { ending, .. }, Some(told)) = (&mut s.fate, told) {
                    *ending = ending_of(told.run);
                }
                s
            })
            .collect();
        Story {
            ending,
            sandboxes,
            resumes: self.resumes,
        }
    }
}

#[cfg(test)]
#[path = "story_tests.rs"]
mod tests;
