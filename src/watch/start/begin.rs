//! How `sandguard watch` begins its session: the journal created, or resumed from a sidecar
//! that is gone (the decisions are [`crate::ledger`]'s, in `resume.rs`), and the fleet
//! registration that follows from it.

use super::Failure;
use crate::config::Settings;
use crate::identity::Identity;
use crate::ledger::{LedgerError, Record, SessionView, StateDir};
use crate::session;

/// How long a resume waits for the journal's lock to be let go before it takes the holder to
/// be a live sidecar: a reader (`sandguard sessions`, a sweep's look) holds it for a moment.
pub(crate) const RESUME_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// What the fleet registrar registers, when a store is configured (nothing connects yet). A
/// resumed session registers again under its id with its new owner and its first start
/// (`started_ms`), replacing the record its last sidecar left. Its spend is read from its
/// `journal`.
pub(crate) fn fleet_plan(
    settings: &Settings,
    session: &str,
    owner: &Identity,
    labels: std::collections::BTreeMap<String, String>,
    providers: &[std::sync::Arc<dyn crate::providers::Provider>],
    started_ms: Option<u64>,
    journal: &std::path::Path,
) -> Option<crate::watch::fleet::Registration> {
    let fleet = settings.fleet.as_ref()?;
    let store = match crate::fleet::redis::RedisStore::new(fleet) {
        Ok(store) => std::sync::Arc::new(store),
        Err(e) => {
            tracing::warn!("{e}; guarding locally only");
            return None;
        }
    };
    Some(crate::watch::fleet::Registration {
        store,
        record: crate::fleet::SessionRecord {
            id: session.to_string(),
            host: settings.host.id(),
            owner: owner.to_label(),
            pid: owner.pid,
            labels,
            providers: providers.iter().map(|p| p.name().to_string()).collect(),
            started_ms: started_ms.unwrap_or_else(crate::ledger::now_ms),
        },
        lease: fleet.lease,
        tally: Some(std::sync::Arc::new({
            let (journal, id) = (journal.to_path_buf(), session.to_string());
            move |now_ms| crate::ledger::spend::daily::of_journal(&journal, &id, now_ms)
        })),
    })
}

/// The session's journal in the state directory (durable, locked): created with its `start`
/// record, or resumed with a `resume` record, with the session as it then stands (see the
/// module docs).
pub(crate) fn start_session(
    settings: &Settings,
    session: &str,
    owner: &Identity,
    grace: std::time::Duration,
) -> Result<(crate::ledger::Journal, Option<SessionView>), Failure> {
    let state = StateDir::open(&settings.state_dir)?;
    let labels = session::labels(session, owner);
    let (owner, pid, grace_ms) = (owner.to_label(), owner.pid, grace.as_millis() as u64);
    let start = Record::Start {
        owner: owner.clone(),
        pid,
        grace_ms,
        labels: labels.clone(),
    };
    let resume = Record::Resume {
        owner,
        pid,
        grace_ms,
        labels,
    };
    match state.begin_session(session, start, &resume, RESUME_PATIENCE) {
        Ok((journal, Some(view))) => {
            tracing::info!(
                "resumed session {session}, its last sidecar gone: {} claimed, {} detached",
                view.claims.len(),
                view.detached.len()
            );
            Ok((journal, Some(view)))
        }
        Ok(new) => Ok(new),
        Err(LedgerError::Locked { path }) => Err(Failure::Guarded {
            session: session.to_string(),
            journal: path,
        }),
        Err(e) => Err(e.into()),
    }
}

/// The journal the wrapper created for `session` and handed over open
/// (`crate::session::handoff::Handoff`), made durable.
pub(crate) fn take_handed(
    settings: &Settings,
    session: &str,
    file: std::fs::File,
) -> Result<crate::ledger::Journal, Failure> {
    let state = StateDir::open(&settings.state_dir)?;
    Ok(state.handed_session(session, file)?)
}

/// A new session's journal, taken back when the sidecar fails before `ready`: nobody was told
/// the session's labels, so nothing can carry them, and a journal left behind would show as
/// an `active` session whose sidecar never ran. The journal, its log and its proxy directory
/// are removed (the failure itself reaches the user through the wrapper's or the helper's
/// error). A resumed session keeps its journal: what it held before is still to be guarded,
/// and a sweep adopts it.
pub(crate) struct Undo {
    journal: Option<std::path::PathBuf>,
}

impl Undo {
    pub(crate) fn new(journal: &crate::ledger::Journal, resumed: bool) -> Undo {
        Undo {
            journal: (!resumed).then(|| journal.path().to_path_buf()),
        }
    }

    /// `result`, after taking the journal back if it is an error.
    pub(crate) fn unless_ok<T>(self, result: Result<T, Failure>) -> Result<T, Failure> {
        if let (Err(e), Some(path)) = (&result, self.journal) {
            tracing::warn!("the sidecar failed before ready ({e}); removing its session");
            take_back(&path);
        }
        result
    }
}

/// Removes a new session that nobody was told of: its journal at `journal`, its log and its
/// Docker proxy directory beside it (the sidecar's [`Undo`], and the wrapper's handoff that
/// no sidecar took).
pub(crate) fn take_back(journal: &std::path::Path) {
    for leftover in [journal.with_extension("log"), journal.to_path_buf()] {
        let _ = std::fs::remove_file(leftover);
    }
    let _ = std::fs::remove_dir_all(journal.with_extension("docker"));
}
