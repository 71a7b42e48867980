//! What happened to each sandbox of a session, and why, told from its journal's records in
//! order: the facts behind `sandguard sessions show ID`.
//!
//! The journal records, per sandbox, `claim`, `detach`, `release`, `removed` (with `removed`
//! or `gone`), `failed` and `refused`; per session, `reclaim_start` with its cause
//! ([`EndCause`]) and `end`. A reclaim's removals are told with its cause ([`Why`]):
//!
//! | records around the removal | told as |
//! |---|---|
//! | `reclaim_start {cause}` | [`Why::Cause`], with the status or signal of an `owner_exit` that follows an owner's death |
//! | after an `end pending`, no new `reclaim_start` | [`Why::FinishedPending`]: a sweep finishing it |
//! | a `removed` with `limit`, while the owner lived | [`Why::Limit`]: the limit keeper's |
//! | outside any reclaim | [`Why::Unrecorded`]: the journal does not say |
//!
//! A journal written before the cause was (a `reclaim_start` without one) is told as it always
//! was, the cause inferred from the records around it; the inference is kept for such
//! journals only:
//!
//! | records of an old journal | cause |
//! |---|---|
//! | `owner_dead {reason}`, `reclaim_start` | [`EndCause::OwnerExited`], or [`EndCause::OwnerGoneAtStart`] for `gone when the watch began` |
//! | `lease_expired`, `reclaim_start` | [`EndCause::LeaseExpired`] |
//! | `reclaim_start` with no cause record, then `end clean` | [`EndCause::Bye`]: only a `bye` ends clean |
//! | `reclaim_start` with no cause record, then `end reclaimed`/`pending` | [`EndCause::Sweep`]: only a sweep reclaimed without one |
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
//! - A create a limit refused (`create_refused`) is no sandbox: it is told apart, per
//!   provider and limit ([`Story::refused`], `story/refusals.rs`), never in the sandboxes'
//!   table.
//! - Each sandbox's stretches of being held ([`Held`]: from its claim, detach or first pending
//!   failure to its removal, release, stop or refusal) are kept here, where the records meet
//!   their sandbox, so that spend ([`super::spend`]) reads the story rather than folding the
//!   journal a second time; what counts, and until when, is decided there.

use std::collections::HashMap;

mod refusals;

use super::cause::EndCause;
pub(crate) use super::cause::Why;
use super::record::{Entry, Record, SessionState};
use crate::budget::Limit;
use crate::identity::death::Exit;
use crate::protocol::Target;
pub(crate) use refusals::RefusedCreates;

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
    Removed { ending: Why, gone: bool },
    /// The program removed it and said so (`release`).
    Released,
    /// The provider said it went while the owner lived, with no path of sandguard's removing
    /// it (`vanished`: an autoremove, its own timeout, a removal past the proxy).
    Vanished,
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
            Fate::Vanished => "vanished",
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
    /// When the session held it, oldest first ([`Held`]); empty for a sandbox the journal
    /// names only at its end (a reclaim's removal of a sandbox found by its label).
    pub held: Vec<Held>,
    /// The size its create named (the last `claim` or `detach` that carries one), which
    /// prices it ([`super::price`]); `None`: not known.
    pub size: Option<String>,
}

/// One stretch of time the session held a sandbox: from the record that made it held (a
/// `claim`, a `detach`, or a pending `failed`: its first sight) to the record that ended it
/// (`removed`, `release`, a stop, `refused`); `to_ms: None` while nothing has. A `resume`
/// carries an open stretch over, as it carries the claim. What the stretches are worth is
/// [`super::spend`]'s to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Unix milliseconds.
    pub from_ms: u64,
    /// Unix milliseconds; `None`: still held as far as the journal says.
    pub to_ms: Option<u64>,
}

/// Opens a stretch for a fate that holds the sandbox, closes the open one for a fate that ends
/// it; a record that repeats the state (a second claim) changes nothing.
fn hold(held: &mut Vec<Held>, fate: &Fate, t: u64) {
    let open = held.last_mut().filter(|h| h.to_ms.is_none());
    match (fate, open) {
        (Fate::Claimed | Fate::Detached | Fate::Pending(_), None) => held.push(Held {
            from_ms: t,
            to_ms: None,
        }),
        (Fate::Claimed | Fate::Detached | Fate::Pending(_), Some(_)) => {}
        // A clock stepped back between the two records counts nothing, never a negative.
        (_, Some(h)) => h.to_ms = Some(t.max(h.from_ms)),
        (_, None) => {}
    }
}

/// The sandboxes of one session, in the order the journal first names them, and how the
/// session's last reclaim came about, not counting a sweep finishing it (`None`: never
/// reclaimed since it started or was last resumed).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Story {
    pub ending: Option<Why>,
    pub sandboxes: Vec<SandboxStory>,
    /// Each time a new sidecar took the session over, oldest first.
    pub resumes: Vec<Resumed>,
    /// The creates its limits refused, per provider and limit, in the order first refused.
    pub refused: Vec<RefusedCreates>,
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
/// unreadable lines are skipped (the view counts the journal's). The unit tests' way in, and
/// a resumed sidecar's, for the sandbox time its journal tells.
pub(crate) fn tell(journal: &[u8], stops: &[u8]) -> Story {
    tell_decoded(entries(journal), stops)
}

fn entries(text: &[u8]) -> Vec<Entry> {
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| Entry::decode(l).ok())
        .collect()
}

/// The story of a journal already decoded (by the view's rules, `view::decode`: a torn last
/// line is left out), and of its side file of stops. [`StateDir::read_history`] tells every
/// story this way; `tell` reads the text itself.
///
/// [`StateDir::read_history`]: super::StateDir::read_history
pub(super) fn tell_decoded(journal: Vec<Entry>, stops: &[u8]) -> Story {
    let stops: Vec<Entry> = entries(stops)
        .into_iter()
        .filter(|e| matches!(e.record, Record::Stopped { .. }))
        .collect();
    let mut teller = Teller::default();
    // A merge, not a sort: a clock stepped back never reorders the journal's own records.
    let mut stops = stops.into_iter().peekable();
    for entry in journal {
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
    /// The fact a cause rests on (`owner_dead`, `lease_expired`), journaled since the last
    /// `reclaim_start`: an old journal's cause.
    fact: Option<Why>,
    /// Each reclaim: why it ran (`None`: an old journal's, decided by its end), and how it
    /// ended (`None`: no `end` yet).
    runs: Vec<(Option<Why>, Option<SessionState>)>,
    /// The reclaim removals belong to now: the last one, unless it ended pending.
    current: Option<usize>,
    sandboxes: Vec<(SandboxStory, Option<Told>)>,
    /// Where each sandbox is in `sandboxes`: a record finds its sandbox in constant time, so
    /// telling a journal of n claims is linear, not quadratic (a sidecar given 100 000 claims
    /// used to spend minutes here, 2026-12-03).
    index: HashMap<Target, usize>,
    /// Where each sandbox claimed pinned (`ID@IDENTITY`) is, by its id alone: a release or a
    /// detach of `ID` is the same sandbox's (`Target::answers`).
    pinned: HashMap<Target, usize>,
    /// The session's state as the view folds it (`None`: active), for [`Resumed::after`].
    state: Option<SessionState>,
    /// An `end` was seen in this life: a `reclaim_start` no longer changes the state.
    ended: bool,
    /// The first run of the current life (after the last `resume`).
    life: usize,
    resumes: Vec<Resumed>,
    refused: refusals::Gathered,
}

impl Teller {
    fn apply(&mut self, entry: Entry) {
        if matches!(entry.record, Record::CreateRefused { .. }) {
            return self.refused.add_record(entry.record);
        }
        let t = entry.t;
        let mut size = None;
        let (target, fate) = match entry.record {
            Record::OwnerDead { reason } => {
                return self.fact = Some(Why::cause(EndCause::of_owner_dead(&reason)));
            }
            Record::OwnerExit { code, signal } => {
                return self.owner_exit(Exit::from_parts(code, signal));
            }
            Record::LeaseExpired => return self.fact = Some(Why::cause(EndCause::LeaseExpired)),
            Record::Resume { pid, .. } => return self.resume(pid, t),
            Record::ReclaimStart { cause } => return self.reclaim_start(cause),
            Record::End { state } => return self.end(state),
            // Timed by when the provider said so, where the reclaim journaled it.
            Record::Removed {
                provider,
                id,
                outcome,
                at,
                limit,
            } => {
                let target = Target { provider, id };
                return self.removed(target, outcome == "gone", at.unwrap_or(t), limit);
            }
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
            Record::Claim {
                provider,
                id,
                size: sized,
            } => {
                size = sized;
                (Target { provider, id }, Fate::Claimed)
            }
            Record::Detach {
                provider,
                id,
                size: sized,
            } => {
                size = sized;
                (Target { provider, id }, Fate::Detached)
            }
            Record::Release { provider, id } => (Target { provider, id }, Fate::Released),
            // Timed by when the provider said so. What `stop` removed by hand is gone too,
            // and its event comes whichever record is written first: the stop tells it.
            Record::Vanished { provider, id, at } => {
                let target = Target { provider, id };
                let stopped = self
                    .index
                    .get(&target)
                    .is_some_and(|&i| matches!(self.sandboxes[i].0.fate, Fate::Stopped { .. }));
                if !stopped {
                    self.set(target, Fate::Vanished, at);
                }
                return;
            }
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
        let i = self.set(target, fate, t);
        if size.is_some() {
            self.sandboxes[i].0.size = size;
        }
    }

    /// A reclaim begins, for its journaled cause; a journal older than the cause: for the
    /// fact journaled before it, if any, else for what its end says ([`Teller::finish`]).
    fn reclaim_start(&mut self, cause: Option<EndCause>) {
        if !self.ended {
            self.state = Some(SessionState::Reclaiming);
        }
        let fact = self.fact.take();
        let why = match (cause, fact) {
            // An exit already learned stays with the death it explains.
            (Some(cause), Some(Why::Cause { cause: seen, exit })) if seen == cause => {
                Some(Why::Cause { cause, exit })
            }
            (Some(cause), _) => Some(Why::cause(cause)),
            (None, fact) => fact,
        };
        self.runs.push((why, None));
        self.current = Some(self.runs.len() - 1);
    }

    /// How the owner ended, learned after its death: told with the death it explains, the
    /// cause not yet started or the latest reclaim's.
    fn owner_exit(&mut self, exit: Option<Exit>) {
        let why = match self.fact.as_mut() {
            Some(why) => Some(why),
            None => self
                .runs
                .iter_mut()
                .rev()
                .map(|(why, _)| why)
                .find(|why| !matches!(why, Some(Why::FinishedPending)))
                .and_then(Option::as_mut),
        };
        if let Some(Why::Cause {
            cause: EndCause::OwnerExited | EndCause::OwnerGoneAtStart,
            exit: known,
        }) = why
        {
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
        (self.ended, self.fact, self.current) = (false, None, None);
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
            self.runs.push((Some(Why::FinishedPending), None));
            self.current = Some(self.runs.len() - 1);
        }
    }

    /// `limit`: removed by a limit of the session's while its owner lived (no reclaim's
    /// run); its cause is the limit, whatever reclaim comes later.
    fn removed(&mut self, target: Target, gone: bool, t: u64, limit: Option<Limit>) {
        let stopped = self
            .index
            .get(&target)
            .is_some_and(|&i| matches!(self.sandboxes[i].0.fate, Fate::Stopped { .. }));
        if gone && stopped {
            return;
        }
        if let Some(limit) = limit {
            let ending = Why::Limit(limit);
            self.set(target, Fate::Removed { ending, gone }, t);
            return;
        }
        let fate = Fate::Removed {
            ending: Why::Unrecorded,
            gone,
        };
        let run = self.current;
        let i = self.set(target, fate, t);
        self.sandboxes[i].1 = Some(Told { run });
    }

    /// Records the sandbox's latest fate; returns its index.
    fn set(&mut self, target: Target, fate: Fate, at_ms: u64) -> usize {
        let claims = matches!(fate, Fate::Claimed | Fate::Detached);
        let by_id = matches!(fate, Fate::Released | Fate::Vanished | Fate::Detached)
            .then(|| self.pinned.get(&target))
            .flatten();
        if let Some(&i) = self.index.get(&target).or(by_id) {
            let (s, told) = &mut self.sandboxes[i];
            hold(&mut s.held, &fate, at_ms);
            s.fate = fate;
            s.at_ms = at_ms;
            *told = None;
            return i;
        }
        self.index.insert(target.clone(), self.sandboxes.len());
        if let Some((id, _)) = target.id.split_once('@') {
            let bare = Target {
                provider: target.provider.clone(),
                id: id.to_string(),
            };
            self.pinned.insert(bare, self.sandboxes.len());
        }
        let mut held = Vec::new();
        hold(&mut held, &fate, at_ms);
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
                held,
                size: None,
            },
            None,
        ));
        self.sandboxes.len() - 1
    }

    /// Gives each removal its reclaim's cause, now that every `end` is known: an old
    /// journal's reclaim without one was a `bye` if it ended clean, else a sweep's.
    fn finish(self) -> Story {
        let ending_of = |run: Option<usize>| match run.and_then(|i| self.runs.get(i)) {
            Some((Some(why), _)) => why.clone(),
            Some((None, Some(SessionState::Clean))) => Why::cause(EndCause::Bye),
            Some((None, _)) => Why::cause(EndCause::Sweep),
            None => Why::Unrecorded,
        };
        let ending = self
            .runs
            .iter()
            .enumerate()
            .skip(self.life)
            .rfind(|(_, (why, _))| why.as_ref() != Some(&Why::FinishedPending))
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
            refused: self.refused.finish(),
        }
    }
}

#[cfg(test)]
mod tests;
