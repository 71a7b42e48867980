//! What `sandguard stop --all` takes ([`super::Asker::StopAll`]): every managed sandbox, as
//! the seed promised, but told apart by how its owner stands, so that on a shared engine the
//! sandboxes of other users' live owners are taken only when the user says so (issue 56).
//! The standing comes from the one set of facts ([`super::known::Known::facts`]) and the
//! sweep's own rule for a session ([`super::judge_session`]); the CLI asks, it never judges.
//!
//! Decisions:
//! - **Orphaned**: no live owner keeps it. Its owner is proven dead (the sweep's rule 5:
//!   unknown is never dead), or its session is over in this machine's ledger (the session
//!   ended and its sidecar is gone: nobody guards what it left). Not while a session that may
//!   still live claims it, nor while its session's sidecar lives (its reclaim is at work).
//!   Only this user's ledger can say a session ended, so an orphan never belongs to another
//!   user's live owner.
//! - **Yours**: its session is in this user's ledger (a directory only the user can write,
//!   DESIGN's ledger rule), or its owner lives on this machine and runs as the user who asks
//!   ([`User::Yours`], the process's real uid against sandguard's effective one).
//! - **Theirs**: its owner lives and runs as another user ([`Reason::NotYours`]), or cannot be
//!   judged from here: another machine, boot or pid namespace, a label that names no owner,
//!   a live owner whose user cannot be read. Unknown is not dead, and may be anybody's: it
//!   is counted and asked about with the other users' (the question says how many of each).
//! - [`Only`] says which are taken: all three (the contract), the orphaned and yours (a "no"),
//!   or the orphaned alone (`--dead`). Detach wins over all three (rule 2). An expired
//!   `sandguard.expires` (rule 1) is taken by [`Only::All`] alone: an expiry ends what is
//!   owned, it does not prove the owner dead; the sweep removes it.

use super::verdict::{Judgement, Reason};
use super::{judge_session, Facts, SessionVerdict, Sidecar};
use crate::identity::Liveness;

#[cfg(test)]
mod tests;

/// What `stop --all` was asked to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Only {
    /// Every managed sandbox but the detached: the seed's contract (`--yes`, a yes, or no
    /// terminal to ask on), expired ones included.
    All,
    /// The orphaned and the user's own: the answer "no" to the question.
    OwnOrDead,
    /// The orphaned alone (`--dead`): never a live owner's, nor one that cannot be judged.
    Dead,
}

/// Which user the live owner a sandbox's label names runs as, as far as this machine can
/// tell ([`super::known::Known::facts`] reads it for an owner alive here whose session this
/// ledger does not have).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum User {
    /// The user sandguard runs as.
    Yours,
    /// Another user, by uid.
    Other(u32),
    /// Not read: the owner is not alive here, its session is in this ledger, or its uid could
    /// not be read.
    Unknown,
}

/// How a sandbox's owner stands, for `stop --all` (see the module docs), with why.
enum Standing {
    Orphaned(Reason),
    Yours(Reason),
    Theirs(Reason),
}

/// Whether `stop --all`, asked for `only`, takes the sandbox `facts` describe (not detached:
/// the caller kept those).
pub(super) fn judge(only: Only, facts: &Facts<'_>) -> Judgement {
    match (standing(facts), only) {
        (Standing::Orphaned(why), _) => Judgement::remove(why),
        (Standing::Yours(_), Only::All | Only::OwnOrDead) | (Standing::Theirs(_), Only::All) => {
            Judgement::remove(Reason::Named)
        }
        (Standing::Yours(why) | Standing::Theirs(why), _) => Judgement::keep(why),
    }
}

fn standing(facts: &Facts<'_>) -> Standing {
    // Claims are read from this user's ledger: a claimer that may live is the user's own.
    if let Some((by, _)) = facts.claimed_by.iter().find(|(_, s)| s.may_live()) {
        return Standing::Yours(Reason::ClaimLives { by: by.to_string() });
    }
    let Some((_, session)) = facts.owner_by_label() else {
        return Standing::Theirs(Reason::NoOwner);
    };
    if session.sidecar == Sidecar::Alive {
        return Standing::Yours(Reason::SidecarAlive);
    }
    if let (SessionVerdict::Reclaim, why) = judge_session(&session) {
        return Standing::Orphaned(why);
    }
    if session.ended_at.is_some() {
        return Standing::Orphaned(Reason::SessionOver);
    }
    let in_ledger = session.sidecar == Sidecar::Gone;
    match (session.owner, facts.owner_user) {
        (Liveness::Alive, _) if in_ledger => Standing::Yours(Reason::OwnerLives),
        (_, _) if in_ledger => Standing::Yours(Reason::OwnerUnknown),
        (Liveness::Alive, User::Yours) => Standing::Yours(Reason::OwnerLives),
        (Liveness::Alive, User::Other(uid)) => Standing::Theirs(Reason::NotYours { uid }),
        (Liveness::Alive, User::Unknown) => Standing::Theirs(Reason::UserUnknown),
        // Proven dead was judged above, by the sweep's rule.
        (Liveness::Dead, _) => Standing::Orphaned(Reason::OwnerDead),
        (Liveness::Unknown, _) => Standing::Theirs(Reason::OwnerUnknown),
    }
}
