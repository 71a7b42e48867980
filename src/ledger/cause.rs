//! Why a session's reclaim began ([`EndCause`]): one type for the sidecar's loop, the one
//! journaled session ending ([`crate::reclaim::ending`]), its journal (the `cause` of
//! `reclaim_start`) and the story `sessions show` tells ([`super::story`]), which tells a
//! removal's cause as a [`Why`] (a cause, or a sweep finishing pending work, or nothing
//! recorded). A leaf of the ledger: it reads only its records and how an owner is seen gone.
//!
//! Decisions:
//! - **The cause is journaled, not inferred.** It rides on `reclaim_start` as a field, so a
//!   sandguard older than it reads the record as before (serde ignores the unknown field of
//!   the unit record it knows) and never warns of an unknown kind. The fact it rests on
//!   (`owner_dead`, `lease_expired`) is still written just before, so such a reader still
//!   tells the same story; a `bye` and a sweep have no such fact, which is what older readers
//!   inferred them from (a `reclaim_start` without a cause, then `end clean` or not).

use serde::{Deserialize, Serialize};

use super::record::{Record, SessionState};
use crate::budget::Limit;
use crate::identity::death::{Exit, Gone};

/// Why a session's reclaim began: the one word for it, from the sidecar's loop through the
/// reclaim (its journal and summary line) to `sessions show`. Journaled as the `cause` of
/// `reclaim_start` (`owner_exited`, `owner_gone_at_start`, `lease_expired`, `bye`, `sweep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    /// The sidecar saw the owner's process exit.
    OwnerExited,
    /// The owner was already gone (or its pid was another process's) when the watch began.
    OwnerGoneAtStart,
    /// The session's lease expired.
    LeaseExpired,
    /// The program said `bye`: the only cause that ends a session `clean`.
    Bye,
    /// A sweep reclaimed it: its owner dead, its sidecar gone, or its fleet lease expired.
    Sweep,
}

impl EndCause {
    /// The record of the fact this cause rests on, journaled before `reclaim_start` (where
    /// readers older than `cause` found it): `owner_dead` with its reason, `lease_expired`.
    pub fn fact(self) -> Option<Record> {
        let reason = match self {
            EndCause::OwnerExited => "exited",
            EndCause::OwnerGoneAtStart => "gone when the watch began",
            EndCause::LeaseExpired => return Some(Record::LeaseExpired),
            EndCause::Bye | EndCause::Sweep => return None,
        };
        Some(Record::OwnerDead {
            reason: reason.into(),
        })
    }

    /// The cause an `owner_dead` record's reason stands for (a journal older than `cause`).
    /// Only `exited` and `gone when the watch began` were ever written; any other reason is
    /// still a death the sidecar saw, told as the owner having exited.
    pub fn of_owner_dead(reason: &str) -> EndCause {
        match reason {
            "gone when the watch began" => EndCause::OwnerGoneAtStart,
            _ => EndCause::OwnerExited,
        }
    }

    /// The words of the reclaim's summary line: "owner exited", "reclaimed by sweep", …
    /// (`sessions show` tells it in a sentence of its own, [`Why::words`]).
    pub fn label(self) -> &'static str {
        match self {
            EndCause::OwnerExited => "owner exited",
            EndCause::OwnerGoneAtStart => "owner was already gone",
            EndCause::LeaseExpired => "lease expired",
            EndCause::Bye => "owner said bye",
            EndCause::Sweep => "reclaimed by sweep",
        }
    }

    /// The state a session ending for this cause reaches once nothing is left: `clean` after
    /// `bye`, `reclaimed` otherwise.
    pub fn done(self) -> SessionState {
        match self {
            EndCause::Bye => SessionState::Clean,
            _ => SessionState::Reclaimed,
        }
    }
}

impl From<Gone> for EndCause {
    fn from(gone: Gone) -> EndCause {
        match gone {
            Gone::Exited => EndCause::OwnerExited,
            Gone::GoneAtStart => EndCause::OwnerGoneAtStart,
        }
    }
}

/// Why a session's sandboxes were reclaimed, as its journal tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// A reclaim that began for `cause`; `exit`: how an owner that died ended, where the
    /// journal says.
    Cause { cause: EndCause, exit: Option<Exit> },
    /// A sweep finished a reclaim left pending.
    FinishedPending,
    /// A limit of the session's removed it while its owner lived ([`Limit`]).
    Limit(Limit),
    /// No reclaim is recorded around it.
    Unrecorded,
}

impl Why {
    /// A reclaim for `cause`, with no exit status known.
    pub fn cause(cause: EndCause) -> Why {
        Why::Cause { cause, exit: None }
    }

    /// Plain words: "owner exited", "lease expired", …
    pub fn words(&self) -> String {
        let cause = match self {
            Why::Cause { cause, exit } => (*cause, *exit),
            Why::FinishedPending => return "a sweep finished the pending reclaim".into(),
            Why::Limit(Limit::Lifetime) => return "past the session's lifetime limit".into(),
            Why::Limit(Limit::Spend) => return "the session's spend limit was reached".into(),
            Why::Unrecorded => return "no reclaim recorded".into(),
        };
        match cause {
            (EndCause::OwnerExited, exit) => Exit::owner_words(exit),
            (EndCause::OwnerGoneAtStart, _) => "owner was already gone when the watch began".into(),
            (EndCause::LeaseExpired, _) => "lease expired".into(),
            (EndCause::Bye, _) => "the program ended its session (bye)".into(),
            (EndCause::Sweep, _) => "reclaimed by a sweep".into(),
        }
    }

    /// A stable word for JSON (and the metrics' `cause`): `owner_dead`, `lease_expired`,
    /// `bye`, `sweep`, `finished_pending`, `lifetime`, `spend`, `unrecorded`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Why::Cause { cause, .. } => match cause {
                EndCause::OwnerExited | EndCause::OwnerGoneAtStart => "owner_dead",
                EndCause::LeaseExpired => "lease_expired",
                EndCause::Bye => "bye",
                EndCause::Sweep => "sweep",
            },
            Why::FinishedPending => "finished_pending",
            Why::Limit(Limit::Lifetime) => "lifetime",
            Why::Limit(Limit::Spend) => "spend",
            Why::Unrecorded => "unrecorded",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::record::Entry;

    #[test]
    fn the_cause_rides_on_reclaim_start_and_an_old_line_has_none() {
        let record = Record::ReclaimStart {
            cause: Some(EndCause::LeaseExpired),
        };
        let line = Entry { t: 5, record }.encode().unwrap();
        assert_eq!(
            line,
            b"{\"t\":5,\"ev\":\"reclaim_start\",\"cause\":\"lease_expired\"}\n"
        );
        let old = Entry::decode(br#"{"t":5,"ev":"reclaim_start"}"#).unwrap();
        assert_eq!(old.record, Record::ReclaimStart { cause: None });
        let none = Entry {
            t: 5,
            record: Record::ReclaimStart { cause: None },
        };
        assert_eq!(
            none.encode().unwrap(),
            b"{\"t\":5,\"ev\":\"reclaim_start\"}\n"
        );
    }

    /// A reader older than `cause` knew `reclaim_start` as a unit record: it reads the new
    /// line as that record, not as one of an unknown kind.
    #[test]
    fn a_reader_older_than_the_cause_reads_the_new_line() {
        #[derive(Debug, PartialEq, Deserialize)]
        #[serde(tag = "ev", rename_all = "snake_case")]
        enum OldRecord {
            ReclaimStart,
            #[serde(other)]
            Unknown,
        }
        let line = br#"{"t":5,"ev":"reclaim_start","cause":"owner_exited"}"#;
        let old: OldRecord = serde_json::from_slice(line).unwrap();
        assert_eq!(old, OldRecord::ReclaimStart);
    }

    #[test]
    fn each_cause_journals_the_fact_older_readers_told_it_by() {
        let reason = |c: EndCause| match c.fact() {
            Some(Record::OwnerDead { reason }) => reason,
            other => format!("{other:?}"),
        };
        assert_eq!(reason(EndCause::OwnerExited), "exited");
        assert_eq!(
            reason(EndCause::OwnerGoneAtStart),
            "gone when the watch began"
        );
        assert_eq!(EndCause::LeaseExpired.fact(), Some(Record::LeaseExpired));
        assert_eq!((EndCause::Bye.fact(), EndCause::Sweep.fact()), (None, None));
        for cause in [EndCause::OwnerExited, EndCause::OwnerGoneAtStart] {
            assert_eq!(EndCause::of_owner_dead(&reason(cause)), cause);
        }
        assert_eq!(EndCause::Bye.done(), SessionState::Clean);
        assert_eq!(EndCause::Sweep.done(), SessionState::Reclaimed);
    }
}
