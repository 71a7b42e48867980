//! What the judgement answers: a [`Verdict`] (remove, renew, keep) and the [`Reason`] it is
//! given for, one variant per rule as it applied, whose text every path prints as the
//! verdict's reason (`ps`, `stop`, the sweeps' reports, the sidecar's log). The rules
//! themselves are [`super::judge`]'s.

use std::fmt;

/// What the judgement allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Remove,
    Renew,
    Keep,
}

/// Why: each variant is one rule as it applied, printed as the verdict's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reason {
    Expired,
    /// Labelled `sandguard.detached=true`.
    Detached,
    /// Detached by a `detach` in a session's ledger.
    DetachedByOwner,
    Named,
    Labelled,
    Claimed,
    Adopted {
        from: String,
    },
    Steal {
        from: String,
    },
    ClaimedElsewhere {
        by: String,
    },
    NotOurs,
    OwnerDead,
    OwnerLives,
    OwnerUnknown,
    /// Its owner lives on this machine as another user (this uid): `stop --all` asks.
    NotYours {
        uid: u32,
    },
    /// Its owner lives on this machine, but as which user cannot be read.
    UserUnknown,
    /// Its session is over in this machine's ledger, its sidecar gone.
    SessionOver,
    /// Session `by`, which may still live, claimed it.
    ClaimLives {
        by: String,
    },
    NoOwner,
    LeaseExpired,
    SidecarAlive,
    AfterDeath,
    /// Reached its session's `lifetime` limit (as the limit was written).
    Lifetime {
        limit: String,
    },
    /// Its session's sandbox time reached the `spend` limit (as written), to be reclaimed.
    Spent {
        limit: String,
    },
    /// Younger than its session's `lifetime` limit, or of an age not known.
    Young,
    /// Not a sandbox itself (a network, a volume): no lifetime limit ages it.
    NotAged,
    /// A ledger session's reclaim left sandboxes pending.
    ReclaimPending,
    /// A ledger session's reclaim began and its process died.
    ReclaimUnfinished,
    /// A ledger session's reclaim is pending only on these providers, which the sweep
    /// judging it does not have.
    PendingElsewhere {
        providers: String,
    },
    /// A ledger session's owner is dead, and its sidecar gone.
    OwnerDeadSidecarGone,
    /// A ledger session's owner (this pid) lives, and its sidecar is gone.
    SidecarGone {
        pid: u32,
    },
    /// A fleet session that ended, in this state.
    Ended(&'static str),
    /// A fleet session whose lease this host's sidecar holds.
    LeaseHeld {
        host: String,
    },
    /// A fleet session whose sidecar on this host was stopped while its owner lived.
    StoppedOnHost {
        host: String,
    },
    /// A fleet session whose lease expired (its host, the state the store has).
    FleetLeaseExpired {
        host: String,
        state: &'static str,
    },
    /// A fleet session whose lease expired, but whose owner (this pid) lives on this machine.
    LivesHere {
        pid: u32,
    },
}

impl Reason {
    /// Kept because it was detached (by its label or by its owner).
    pub(crate) fn is_detached(&self) -> bool {
        matches!(self, Reason::Detached | Reason::DetachedByOwner)
    }

    /// The word a removal for this reason is counted under in the sweep's metrics (`cause`),
    /// the same words a journal's ending gives ([`crate::ledger::story::Why::as_str`]) where
    /// they mean the same: `expired` (its `sandguard.expires`), `lease_expired` (a fleet
    /// lease), `lifetime`, `spend`, `finished_pending`, and `owner_dead` for every other
    /// removing reason (an owner proven dead, however it was found).
    pub(crate) fn cause(&self) -> &'static str {
        match self {
            Reason::Expired => "expired",
            Reason::LeaseExpired | Reason::FleetLeaseExpired { .. } => "lease_expired",
            Reason::Lifetime { .. } => "lifetime",
            Reason::Spent { .. } => "spend",
            Reason::ReclaimPending | Reason::ReclaimUnfinished => "finished_pending",
            _ => "owner_dead",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Expired => f.write_str("its sandguard.expires has passed"),
            Reason::Detached => f.write_str("detached: left to its TTL, if it has one, or a stop by id"),
            Reason::DetachedByOwner => {
                f.write_str("detached by its owner: left to its TTL, if it has one, or a stop by id")
            }
            Reason::Named => f.write_str("named by hand"),
            Reason::Labelled => f.write_str("it carries the session's label"),
            Reason::Claimed => f.write_str("the session claimed it"),
            Reason::Adopted { from } => write!(
                f,
                "the session claimed it, and session {from} whose label it carries is over with its owner dead"
            ),
            Reason::Steal { from } => write!(
                f,
                "claimed, but it carries session {from}'s label and that session may still live: a claim adopts, it never steals"
            ),
            Reason::ClaimedElsewhere { by } => write!(
                f,
                "session {by}, which may still live, claimed it too: a claim adopts, it never steals"
            ),
            Reason::NotOurs => f.write_str("it is not the session's"),
            Reason::OwnerDead => f.write_str("its owner is dead"),
            Reason::OwnerLives => f.write_str("its owner lives"),
            Reason::OwnerUnknown => f.write_str(
                "its owner cannot be judged from here (another machine, boot or pid namespace): TTL only",
            ),
            Reason::NoOwner => f.write_str("it names no owner and no session of this ledger: TTL only"),
            Reason::NotYours { uid } => {
                write!(f, "its owner lives, as uid {uid}: a live owner that is not you")
            }
            Reason::UserUnknown => {
                f.write_str("its owner lives here, but as which user cannot be read: it cannot be judged from here")
            }
            Reason::SessionOver => f.write_str("its session is over and its sidecar gone"),
            Reason::ClaimLives { by } => write!(f, "session {by}, which may still live, claimed it"),
            Reason::LeaseExpired => f.write_str("its fleet lease expired and its owner cannot be judged from here"),
            Reason::SidecarAlive => f.write_str("its session's sidecar lives"),
            Reason::Lifetime { limit } => {
                write!(f, "older than the session's lifetime limit ({limit}); its owner lives on")
            }
            Reason::Spent { limit } => write!(
                f,
                "its session's spend reached its limit ({limit}) with on_spend = reclaim"
            ),
            Reason::Young => f.write_str("younger than the session's lifetime limit"),
            Reason::NotAged => f.write_str("not a sandbox itself: no lifetime limit ages it"),
            Reason::AfterDeath => f.write_str("its owner is dead: nothing is renewed after a death"),
            Reason::ReclaimPending => f.write_str("a reclaim is pending"),
            Reason::ReclaimUnfinished => f.write_str("a reclaim started and never finished"),
            Reason::PendingElsewhere { providers } => write!(
                f,
                "its reclaim is pending on {providers} only, which this sweep does not have: a sweep that has it will finish it"
            ),
            Reason::OwnerDeadSidecarGone => f.write_str("its owner is dead and its sidecar is gone"),
            Reason::SidecarGone { pid } => {
                write!(f, "its owner (pid {pid}) lives but its sidecar is gone")
            }
            Reason::Ended(state) => write!(f, "it ended {state}"),
            Reason::LeaseHeld { host } => write!(f, "its fleet lease is held by host {host}"),
            Reason::StoppedOnHost { host } => write!(
                f,
                "its sidecar on host {host} was stopped while its owner lived: its host's sweep judges it"
            ),
            Reason::FleetLeaseExpired { host, state } => {
                write!(f, "its fleet lease expired (host {host}, {state})")
            }
            Reason::LivesHere { pid } => write!(
                f,
                "its fleet lease expired, but its owner (pid {pid}) lives on this machine: this machine's sweep adopts it"
            ),
        }
    }
}

/// The judgement and its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Judgement {
    pub verdict: Verdict,
    pub reason: Reason,
}

impl Judgement {
    pub(super) fn remove(reason: Reason) -> Judgement {
        Judgement {
            verdict: Verdict::Remove,
            reason,
        }
    }
    pub(super) fn keep(reason: Reason) -> Judgement {
        Judgement {
            verdict: Verdict::Keep,
            reason,
        }
    }
    pub(crate) fn removes(&self) -> bool {
        self.verdict == Verdict::Remove
    }
}
