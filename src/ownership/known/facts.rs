//! The one place the judgement's [`Facts`] are built: every path that asks
//! [`crate::ownership::judge`] or [`crate::ownership::may_claim`] gets its facts here, from
//! what [`Known`] knows (the ledger, the judge of owners) and what the asking session knows
//! by its own records ([`Own`]), so that no path gathers labels, claims or detaches itself.
//!
//! Decisions:
//! - A path that is no session's own (a sweep, `stop`) is told everything the ledger says
//!   ([`Known::facts`]), and, for an owner alive on this machine whose session the ledger does
//!   not have, which user it runs as (`stop --all` asks before taking another user's: rule 8
//!   of [`crate::ownership`]). Read once per owner label, and only for such an owner: the
//!   ledger's own sessions are this user's.
//! - A session's own reclaim or renewal ([`Known::facts_for`]) is told what its own records
//!   say (its plan, or the keeper's holdings), and the ledger is asked only what they leave
//!   open: whether another session adopted and detached a sandbox of its label, once it is
//!   over (a live sidecar's cannot have been); and, for a sandbox it claimed that its label
//!   does not make its own, how the session whose label it carries stands, who else claimed
//!   it, and whether anyone detached it (detach wins over any claim). So a sidecar whose
//!   sandboxes all carry its own label never reads another journal.
//! - A claim arriving at a sidecar ([`Known::claim_facts`]) is told how the session whose
//!   label the sandbox carries stands and which other sessions claimed it: all rule 4 reads.
//! - Every session's own judge is one of these: its reclaim, and its keepers while the owner
//!   lives (TTL, lifetime, spend), all told by a [`super::Source`]. There is no "nothing
//!   known": a keeper that judged by its holdings alone renewed and removed what another
//!   session had detached (issue 55).

use std::sync::PoisonError;

use super::Known;
use crate::identity::{Identity, Liveness};
use crate::ownership::{Facts, Session, Sidecar, User};
use crate::providers::Sandbox;

/// What a session asking about a sandbox knows by its own records (a reclaim's plan, the TTL
/// keeper's holdings): the ledger is not read for these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Own<'a> {
    /// The session that asks.
    pub session: &'a str,
    /// How it stands, for a sandbox that carries its label (which decides whether a label the
    /// sandbox only inherited counts).
    pub standing: Session,
    /// It claimed the sandbox.
    pub claimed: bool,
    /// It detached the sandbox.
    pub detached: bool,
}

impl Known {
    /// Everything the ledger says of `sandbox`, for a path that is no session's own (a sweep,
    /// `stop`).
    pub(crate) fn facts<'a>(&'a self, sandbox: &'a Sandbox) -> Facts<'a> {
        let mut facts = Facts::of(sandbox);
        self.stand_label(&mut facts);
        facts.owner_user = match (facts.labelled, sandbox.owner()) {
            (Some((_, s)), Some(label))
                if s.sidecar == Sidecar::NotHere && s.owner == Liveness::Alive =>
            {
                self.user(label)
            }
            _ => User::Unknown,
        };
        facts.claimed_by = self.claimers(sandbox, "");
        facts.detached = self.detached(sandbox);
        facts
    }

    /// Which user the live owner `label` names runs as, against the user sandguard runs as
    /// (its effective uid: the user its ledger belongs to); judged once per [`Known`], as
    /// [`Known::owner`] judges liveness.
    fn user(&self, label: &str) -> User {
        let mut users = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&read) = users.get(label) {
            return read;
        }
        let uid = Identity::parse_label(label).and_then(|id| self.judge().user(&id));
        let read = match uid {
            Some(uid) if uid == crate::unix::geteuid() => User::Yours,
            Some(uid) => User::Other(uid),
            None => User::Unknown,
        };
        users.insert(label.to_string(), read);
        read
    }

    /// The facts of `sandbox` for session `own.session`'s reclaim or renewal: its own records
    /// as `own` gives them, and the ledger only for what they leave open (see the module doc).
    pub(crate) fn facts_for<'a>(&'a self, sandbox: &'a Sandbox, own: Own<'a>) -> Facts<'a> {
        let mut facts = Facts::of(sandbox);
        facts.detached = own.detached;
        let ours = facts.labelled.is_some_and(|(id, _)| id == own.session);
        if ours {
            facts.labelled = Some((own.session, own.standing));
            // A session that is over may have had its sandboxes adopted (and detached) by
            // another. A live sidecar's cannot have.
            if own.standing.sidecar != Sidecar::Alive {
                facts.detached |= self.detached(sandbox);
            }
        }
        if own.claimed {
            facts.claimed_by.push((own.session, Session::UNKNOWN));
            if !ours {
                self.stand_label(&mut facts);
                facts.claimed_by.extend(self.claimers(sandbox, own.session));
                // Detach wins over any claim: whoever detached it, it stays.
                facts.detached |= self.detached(sandbox);
            }
        }
        facts
    }

    /// The facts a claim of `sandbox` arriving at session `session`'s sidecar is judged by
    /// ([`crate::ownership::may_claim`], rule 4): how the session whose label it carries
    /// stands (its own label is not looked up: a session's claim never steals from itself),
    /// and which other sessions claimed it. Detaches are not read: they never refuse a claim
    /// (they decide at removal, where detach wins).
    pub(crate) fn claim_facts<'a>(&'a self, sandbox: &'a Sandbox, session: &'a str) -> Facts<'a> {
        let mut facts = Facts::of(sandbox);
        if facts.labelled.is_some_and(|(id, _)| id != session) {
            self.stand_label(&mut facts);
        }
        facts.claimed_by = self.claimers(sandbox, session);
        facts
    }

    /// Whether `sandbox`'s label counts as ownership ([`Facts::label_counts`]): what `ps` and
    /// `stop` show and take. Only an inherited label needs the ledger.
    pub(crate) fn label_counts(&self, sandbox: &Sandbox) -> bool {
        if !sandbox.inherited {
            return true;
        }
        let mut facts = Facts::of(sandbox);
        self.stand_label(&mut facts);
        facts.label_counts()
    }

    /// The session the sandbox's label names, standing as the ledger (or, where it does not
    /// have it, the sandbox's owner label) says.
    fn stand_label(&self, facts: &mut Facts<'_>) {
        let owner = facts.sandbox.owner();
        facts.labelled = facts.labelled.map(|(id, _)| (id, self.session(id, owner)));
    }
}

#[cfg(test)]
mod tests;
