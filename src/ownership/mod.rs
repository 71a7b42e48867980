//! The one ownership judgement: whether a sandbox may be removed, or renewed, and why.
//!
//! Every path that removes or renews asks [`judge`] (one sandbox) or [`judge_session`] (a
//! whole session a sweep found): the sidecar's reclaim and a sweep's reclaim of a session
//! ([`Asker::Reclaim`]), `sandguard stop` ([`Asker::StopNamed`], [`Asker::StopAll`]), a
//! sweep's look at every managed sandbox ([`Asker::Sweep`]), the fleet sweep
//! ([`judge_session`] with the fleet lease) and the TTL keeper ([`Asker::Renew`]); a claim
//! arriving at a sidecar asks [`may_claim`]. None of them decides on its own, and none gathers
//! the [`Facts`] (labels, claims, detaches, how the sessions involved stand) itself: each asks
//! [`known::Known`] for them, giving what its own records say ([`known::Own`]), and prints the
//! [`Reason`] it is given. The judgement does no I/O: what it is told is all it knows, so a
//! fact that could not be established is passed as unknown, never guessed.
//!
//! The rules, in the order they apply (DESIGN's trust rules; README's "Trust rules" states
//! them for users):
//!
//! 1. **An absolute TTL ends what is owned** (ownership before age): a sandbox whose
//!    `sandguard.expires` passed is removed by a sweep (and `stop --all`), detached or not,
//!    when some session owns it (rules 3 and 4: a label that counts, or a claim); it is never
//!    renewed. An expiry the sandbox only inherited with a label that does not count (a
//!    stranger's container from an image committed with a session's labels) makes it no one's,
//!    and so never expired; nor does an expiry age a Docker network or volume, which goes with
//!    its session (a lifetime ages sandboxes, never a session's networks or volumes). A
//!    session's own reclaim leaves expiry to the sweep: it judges by ownership alone.
//! 2. **Detach wins everywhere** (the `sandguard.detached=true` label as much as a `detach` in
//!    any session's ledger, over any claim): kept by every path but `stop ID`, where the user
//!    named that one sandbox. A detach lasts as long as the sandbox: pruning never forgets it.
//! 3. **A session owns its label**, during and after its life: a sandbox labelled with session
//!    S is S's. A label the sandbox only inherited (a Docker image committed with S's labels)
//!    counts only when the sandbox was created while S lived; after S ended, only labels its
//!    creator set count. An inherited label never makes a stranger ours, and never makes ours
//!    lose a detach (`crate::labels::inherited` says which labels a provider lists as its own).
//! 4. **A claim adopts, it never steals**: a sandbox claimed by S is S's when it carries no
//!    other session's label, or when that other session is over and its owner proven dead;
//!    never while another session that claimed it, or whose label it carries, may still live.
//! 5. **Unknown is not dead, and proof of life beats a lease**: a session is reclaimed for a
//!    dead owner only when the death is proven ([`Liveness::Dead`]); an owner this machine sees
//!    alive is never reclaimed, whatever its lease says; an owner that cannot be judged from
//!    here is reclaimed only when its fleet lease expired.
//! 6. **Nothing is renewed after its owner's death**, nor anything the session does not own.
//! 7. **A limit removes only the session's own**: a sandbox the session owns (rules 3 and 4)
//!    that has reached the session's `lifetime`, or every one once the session's sandbox time
//!    reached its `spend` with `on_spend = "reclaim"`, is removed while its owner lives
//!    ([`Asker::Lifetime`], [`Asker::Spent`]); a detached one is kept (rule 2), as is one
//!    whose age is not known, and anything not a sandbox itself (a Docker network or volume is
//!    reclaimed with the session, not aged).
//! 8. **`stop --all` tells the dead from the living, and yours from theirs** ([`stop`]): it
//!    takes every managed sandbox but the detached (its contract), yet says which are orphaned
//!    (owner proven dead, or session over), which are the user's own, and which belong to other
//!    users' live owners or to owners that cannot be judged from here, so that the CLI can ask
//!    before taking the last ([`Only::OwnOrDead`] is the answer "no") and `--dead` can take the
//!    orphaned alone ([`Only::Dead`]).

use crate::identity::Liveness;
use crate::providers::Sandbox;

pub(crate) mod detach;
pub(crate) mod known;
mod stop;
#[cfg(test)]
mod tests;
mod verdict;

pub(crate) use stop::{Only, User};
pub(crate) use verdict::{Judgement, Reason, Verdict};

/// Whether a session's sidecar (or an adopting sweep) holds its journal's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sidecar {
    Alive,
    Gone,
    /// The session is not in this machine's ledger.
    NotHere,
}

/// A session's fleet lease, where there is a fleet store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// No fleet store knows the session (or none is configured), or its lease lives (then
    /// its sidecar renews it, and the caller says so by [`Sidecar::Alive`]).
    None,
    Expired,
}

/// How one session stands, as far as the caller could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Session {
    pub owner: Liveness,
    pub sidecar: Sidecar,
    /// When it ended (unix seconds), if its ledger says it is over.
    pub ended_at: Option<i64>,
    pub lease: Lease,
}

impl Session {
    /// A session nothing is known of: its owner cannot be judged, no ledger, no lease.
    pub(crate) const UNKNOWN: Session = Session {
        owner: Liveness::Unknown,
        sidecar: Sidecar::NotHere,
        ended_at: None,
        lease: Lease::None,
    };

    /// A session whose sidecar asks, about itself: its owner alive, its sidecar too, not over
    /// (its reclaim's plan, its keepers).
    pub(crate) const GUARDED: Session = Session {
        owner: Liveness::Alive,
        sidecar: Sidecar::Alive,
        ended_at: None,
        lease: Lease::None,
    };

    /// Whether the session may still act for itself: its sidecar lives, or its owner is not
    /// proven dead (alive, or unknown and not over). Such a session's sandboxes are never
    /// taken by another's claim.
    pub(crate) fn may_live(&self) -> bool {
        self.sidecar == Sidecar::Alive
            || self.owner == Liveness::Alive
            || (self.owner == Liveness::Unknown && self.ended_at.is_none())
    }

    /// Over, with its owner proven dead (or its fleet lease expired where it cannot be
    /// judged): what it owned may be adopted by a claim, or reclaimed by a sweep.
    pub(crate) fn orphaned(&self) -> bool {
        self.sidecar != Sidecar::Alive
            && match self.owner {
                Liveness::Dead => true,
                Liveness::Alive => false,
                Liveness::Unknown => self.lease == Lease::Expired,
            }
    }
}

/// Who asks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Asker<'a> {
    /// The reclaim of session `session`: its sidecar at the owner's death, `bye` or lease
    /// expiry, or a sweep finishing it.
    Reclaim { session: &'a str },
    /// `sandguard stop ID`: the user named this one sandbox.
    StopNamed,
    /// `sandguard stop --all [--session S] [--dead]`, taking what `only` says (rule 8).
    StopAll { only: Only },
    /// A sweep looking at a managed sandbox that no session it reclaims covers.
    Sweep,
    /// Session `session`'s TTL keeper, whose owner stands as `owner`.
    Renew { session: &'a str, owner: Liveness },
    /// Session `session`'s limit keeper, while its owner lives: its `lifetime` limit
    /// (`crate::budget::Limits::lifetime`) reached by a sandbox `age` old (rule 7).
    Lifetime {
        session: &'a str,
        limit: std::time::Duration,
        age: Option<std::time::Duration>,
    },
    /// Session `session`'s limit keeper, while its owner lives, once the session's sandbox
    /// time reached its `spend` `limit` with `on_spend = "reclaim"` (rule 7).
    Spent {
        session: &'a str,
        limit: crate::budget::Spend,
    },
}

/// Everything known of one sandbox, as [`known::Known`] builds it.
#[derive(Debug, Clone)]
pub(crate) struct Facts<'a> {
    pub sandbox: &'a Sandbox,
    /// The session its `sandguard.session` label names, and how it stands.
    pub labelled: Option<(&'a str, Session)>,
    /// Whether that label was only inherited (from a Docker image), not set by its creator.
    pub inherited: bool,
    /// Sessions whose claims name it, and how each stands.
    pub claimed_by: Vec<(&'a str, Session)>,
    /// Some session's ledger (or holdings) detached it.
    pub detached: bool,
    /// Which user the owner its label names runs as, when that owner lives here and its
    /// session is not in this ledger (rule 8; only [`known::Known::facts`] reads it).
    pub owner_user: User,
    /// Unix seconds now.
    pub now: i64,
}

impl<'a> Facts<'a> {
    /// The facts of a sandbox of which nothing but its own labels is known yet (where
    /// [`known::Known`] starts).
    fn of(sandbox: &'a Sandbox) -> Facts<'a> {
        Facts {
            sandbox,
            labelled: sandbox
                .session()
                .filter(|s| !s.is_empty())
                .map(|s| (s, Session::UNKNOWN)),
            inherited: sandbox.inherited,
            claimed_by: Vec::new(),
            detached: false,
            owner_user: User::Unknown,
            now: crate::timefmt::now_unix(),
        }
    }

    /// Whether the label it carries counts as ownership (rule 3): false only for a label it
    /// inherited and that its session cannot claim. `ps` and `stop` show and take only those
    /// whose label counts: the others are strangers that look like a session's.
    pub(crate) fn label_counts(&self) -> bool {
        self.labelled.is_none() || self.owner_by_label().is_some()
    }

    /// Whether its expiry may end it (rule 1, ownership before age): it is a sandbox itself,
    /// not a Docker network or volume, and some session owns it: its label counts, or (for
    /// labels its creator set) a session claimed it. An expiry that came with a label that
    /// does not count was only inherited, as the label was: it ends nothing.
    fn ages(&self) -> bool {
        if self.sandbox.kind != crate::providers::Kind::Instance {
            return false;
        }
        let label = self.owner_by_label().is_some();
        label || (!self.inherited && !self.claimed_by.is_empty())
    }

    fn expired(&self) -> bool {
        self.sandbox
            .labels
            .get(crate::labels::EXPIRES)
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|t| t <= self.now)
    }

    /// The session whose label counts (rule 3): an inherited label counts only for a sandbox
    /// created before its session ended (or while it is not known to have ended).
    fn owner_by_label(&self) -> Option<(&'a str, Session)> {
        let (id, session) = self.labelled?;
        if !self.inherited {
            return Some((id, session));
        }
        match (session.sidecar, session.ended_at, self.sandbox.created_at) {
            (Sidecar::NotHere, _, _) => None,
            (_, None, _) => Some((id, session)),
            (_, Some(ended), Some(created)) if created <= ended => Some((id, session)),
            _ => None,
        }
    }
}

/// Whether `asker` may remove (or, for [`Asker::Renew`], renew) the sandbox `facts` describe.
pub(crate) fn judge(asker: Asker<'_>, facts: &Facts<'_>) -> Judgement {
    if facts.expired() {
        match asker {
            Asker::Renew { .. } => return Judgement::keep(Reason::Expired),
            Asker::Sweep | Asker::StopAll { only: Only::All } if facts.ages() => {
                return Judgement::remove(Reason::Expired)
            }
            // An expiry does not prove an owner dead, nor make a live owner's ours to take
            // without asking (rule 8): the sweep removes it.
            Asker::Sweep | Asker::StopAll { .. } => {}
            // A session's own reclaim judges by ownership alone: what its owner detached
            // stays, and the next sweep ends it for its TTL.
            Asker::Reclaim { .. }
            | Asker::StopNamed
            | Asker::Lifetime { .. }
            | Asker::Spent { .. } => {}
        }
    }
    let detached = if facts.sandbox.is_detached() {
        Some(Reason::Detached)
    } else {
        facts.detached.then_some(Reason::DetachedByOwner)
    };
    match (asker, detached) {
        (Asker::StopNamed, _) => Judgement::remove(Reason::Named),
        (_, Some(why)) => Judgement::keep(why),
        (Asker::StopAll { only }, None) => stop::judge(only, facts),
        (Asker::Reclaim { session }, None) => {
            owned_by(session, facts).map_or_else(Judgement::keep, Judgement::remove)
        }
        (Asker::Renew { session, owner }, None) => match owned_by(session, facts) {
            Err(why) => Judgement::keep(why),
            Ok(_) if owner != Liveness::Alive => Judgement::keep(Reason::AfterDeath),
            Ok(why) => Judgement {
                verdict: Verdict::Renew,
                reason: why,
            },
        },
        (Asker::Sweep, None) => orphan(facts),
        (
            Asker::Lifetime {
                session,
                limit,
                age,
            },
            None,
        ) => match owned_by(session, facts) {
            Err(why) => Judgement::keep(why),
            Ok(_) if facts.sandbox.kind != crate::providers::Kind::Instance => {
                Judgement::keep(Reason::NotAged)
            }
            Ok(_) if age.is_some_and(|a| a >= limit) => Judgement::remove(Reason::Lifetime {
                limit: crate::timefmt::format_span(limit),
            }),
            Ok(_) => Judgement::keep(Reason::Young),
        },
        (Asker::Spent { session, limit }, None) => match owned_by(session, facts) {
            Err(why) => Judgement::keep(why),
            Ok(_) if facts.sandbox.kind != crate::providers::Kind::Instance => {
                Judgement::keep(Reason::NotAged)
            }
            Ok(_) => Judgement::remove(Reason::Spent {
                limit: limit.to_string(),
            }),
        },
    }
}

/// Whether session `session` may take a claim (or a detach) of the sandbox `facts` describe
/// when it arrives (rule 4; its facts from [`known::Known::claim_facts`]): not while the
/// sandbox carries the label of another session that may still live, nor while another
/// session that may still live claimed it. The first to hold it keeps it; a later claim would
/// steal.
pub(crate) fn may_claim(session: &str, facts: &Facts<'_>) -> Result<(), Reason> {
    let other = |(id, s): &(&str, Session)| *id != session && s.may_live();
    if let Some((from, _)) = facts.labelled.filter(other) {
        return Err(Reason::Steal {
            from: from.to_string(),
        });
    }
    match facts.claimed_by.iter().find(|c| other(c)) {
        Some((by, _)) => Err(Reason::ClaimedElsewhere { by: by.to_string() }),
        None => Ok(()),
    }
}

/// Whether session `session` owns the sandbox (rules 3 and 4), and why not when it does not.
fn owned_by(session: &str, facts: &Facts<'_>) -> Result<Reason, Reason> {
    let label = facts.owner_by_label();
    if label.is_some_and(|(id, _)| id == session) {
        return Ok(Reason::Labelled);
    }
    if !facts.claimed_by.iter().any(|(id, _)| *id == session) {
        return Err(Reason::NotOurs);
    }
    if let Some((by, _)) = facts
        .claimed_by
        .iter()
        .find(|(id, s)| *id != session && s.may_live())
    {
        return Err(Reason::ClaimedElsewhere { by: by.to_string() });
    }
    match label {
        None => Ok(Reason::Claimed),
        // Orphaned and not able to act for itself: over, its owner proven dead.
        Some((from, other)) if other.orphaned() && !other.may_live() => Ok(Reason::Adopted {
            from: from.to_string(),
        }),
        Some((from, _)) => Err(Reason::Steal {
            from: from.to_string(),
        }),
    }
}

/// A sweep's look at a managed sandbox no session it reclaims covers: its session decides,
/// else the owner its label names.
fn orphan(facts: &Facts<'_>) -> Judgement {
    if let Some((by, _)) = facts.claimed_by.iter().find(|(_, s)| s.may_live()) {
        return Judgement::keep(Reason::ClaimedElsewhere { by: by.to_string() });
    }
    let Some((_, session)) = facts.owner_by_label() else {
        return Judgement::keep(Reason::NoOwner);
    };
    match judge_session(&session) {
        (SessionVerdict::Reclaim, why) => Judgement::remove(why),
        (_, why) => Judgement::keep(why),
    }
}

/// What a sweep does with a whole session whose state is not final (serialised in
/// `sweep --json` as `reclaim`, `adopt`, `leave`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SessionVerdict {
    /// Its owner is gone: reclaim it.
    Reclaim,
    /// Its owner lives and nothing guards it: watch it (a local sweep with `--every`).
    Adopt,
    Leave,
}

/// A whole session as a sweep found it: how it stands, and where it was found, which decides
/// what a begun reclaim means and what the reason names (its owner's pid, the host that held
/// its fleet lease).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found<'a> {
    pub session: Session,
    pub place: Place<'a>,
}

/// Where a sweep found a session.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place<'a> {
    /// Nowhere but in a sandbox's label: judged by how it stands alone.
    Label,
    /// This machine's ledger, its sidecar gone: its state and its owner's pid; `elsewhere`:
    /// for a `pending` session that owes only providers the sweep judging it does not have,
    /// their names (`docker`, `docker, modal`), and `None` otherwise.
    Ledger {
        state: crate::ledger::SessionState,
        pid: u32,
        elsewhere: Option<&'a str>,
    },
    /// The fleet store: its state there, the host whose sidecar registered it, its owner's
    /// pid, and whether its lease is still held (renewed by that host's sidecar).
    Fleet {
        state: crate::fleet::FleetState,
        host: &'a str,
        pid: u32,
        held: bool,
    },
}

impl From<&Session> for Found<'_> {
    fn from(session: &Session) -> Self {
        Found {
            session: *session,
            place: Place::Label,
        }
    }
}

/// Whether a session nobody guards may be reclaimed (rule 5): proof of life beats a lease,
/// unknown is not dead. Where it was found adds (the sweeps print the reason as given):
/// - **ledger**: a reclaim that was begun (`pending`, or `reclaiming` by a process that died)
///   is finished, whatever the owner, unless it is pending only on providers the sweep does
///   not have (left to a sweep that has them: nothing here can finish it); a live owner is
///   adopted, and the reasons say its sidecar is gone (a ledger session's lease is never
///   known here: [`Lease::None`]);
/// - **fleet store**: a session that ended, or whose lease a host still holds, or whose
///   sidecar was stopped while its owner lived (only its own host's sweep judges it), is
///   left; one whose lease expired is reclaimed unless this machine sees its owner alive,
///   which is this machine's sweep's to adopt, never the fleet pass's.
pub(crate) fn judge_session<'a>(found: impl Into<Found<'a>>) -> (SessionVerdict, Reason) {
    use crate::ledger::SessionState;
    let Found { session, place } = found.into();
    match place {
        Place::Label => by_owner(&session),
        Place::Ledger {
            state: SessionState::Pending,
            elsewhere: Some(providers),
            ..
        } => (
            SessionVerdict::Leave,
            Reason::PendingElsewhere {
                providers: providers.to_string(),
            },
        ),
        Place::Ledger {
            state: SessionState::Pending,
            ..
        } => (SessionVerdict::Reclaim, Reason::ReclaimPending),
        Place::Ledger {
            state: SessionState::Reclaiming,
            ..
        } => (SessionVerdict::Reclaim, Reason::ReclaimUnfinished),
        Place::Ledger { pid, .. } => match by_owner(&session) {
            (SessionVerdict::Reclaim, Reason::OwnerDead) => {
                (SessionVerdict::Reclaim, Reason::OwnerDeadSidecarGone)
            }
            (SessionVerdict::Adopt, _) => (SessionVerdict::Adopt, Reason::SidecarGone { pid }),
            other => other,
        },
        Place::Fleet {
            state,
            host,
            pid,
            held,
        } => {
            let host = host.to_string();
            if state.is_final() {
                return (SessionVerdict::Leave, Reason::Ended(state.as_str()));
            }
            if held {
                return (SessionVerdict::Leave, Reason::LeaseHeld { host });
            }
            if state == crate::fleet::FleetState::Stopped {
                return (SessionVerdict::Leave, Reason::StoppedOnHost { host });
            }
            match by_owner(&session) {
                (SessionVerdict::Reclaim, _) => (
                    SessionVerdict::Reclaim,
                    Reason::FleetLeaseExpired {
                        host,
                        state: state.as_str(),
                    },
                ),
                (SessionVerdict::Adopt, _) => (SessionVerdict::Leave, Reason::LivesHere { pid }),
                other => other,
            }
        }
    }
}

/// Rule 5 on how a session stands, wherever it was found.
fn by_owner(session: &Session) -> (SessionVerdict, Reason) {
    if session.sidecar == Sidecar::Alive {
        return (SessionVerdict::Leave, Reason::SidecarAlive);
    }
    match (session.owner, session.lease) {
        (Liveness::Dead, _) => (SessionVerdict::Reclaim, Reason::OwnerDead),
        (Liveness::Alive, _) => (SessionVerdict::Adopt, Reason::OwnerLives),
        (Liveness::Unknown, Lease::Expired) => (SessionVerdict::Reclaim, Reason::LeaseExpired),
        (Liveness::Unknown, _) => (SessionVerdict::Leave, Reason::OwnerUnknown),
    }
}
