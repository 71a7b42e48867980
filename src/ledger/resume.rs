//! A session's journal for a sidecar: created for a new session, or taken over from a sidecar
//! that is gone (a *resume*).
//!
//! Decisions:
//! - **The lock decides.** A journal whose lock nobody holds has no sidecar, whatever pids
//!   were reused: a new sidecar takes it over and appends a `resume` record naming its owner
//!   (durable before the caller says `ready`). A journal whose lock is held (a live sidecar,
//!   a sweep that adopted the session) is refused with [`LedgerError::Locked`], after waiting
//!   out, for at most the caller's patience, a reader that holds the lock for a moment
//!   (`sandguard sessions` probes it with a shared lock).
//! - **Whatever state the session is in, it is resumed**, `reclaimed` and `clean` included:
//!   the state becomes `active` under the new owner ([`super::view`] says how the records
//!   fold). A session id is reused on purpose (a Kubernetes pod's uid, the same for every
//!   restart of its sidecar and its workload), and refusing would crash-loop the sidecar
//!   while the workload it should guard runs.
//! - **What the session held is kept**: the view after the resume (claims, pending work as
//!   claims, detaches) is what the new sidecar guards, so its reclaim includes it.
//! - The wait for a reader is a blocking retry (25 ms steps): it runs before the sidecar says
//!   `ready`, when nothing else runs on its thread.
//! - **A journal with no readable `start` is begun again**, not refused: the new sidecar
//!   appends its own `start` after whatever is there (readers skip what comes before a
//!   `start`), and the session is new. Only a machine that lost power between a wrapper's
//!   unsynced creation and its sidecar's first sync leaves such a file (`create_session_unsynced`);
//!   refusing it would refuse the session for good. A creation cut short before its journal
//!   was published leaves only a staging file, which the creation itself clears
//!   (`journal::stale`).

use std::time::{Duration, Instant};

use super::{Journal, LedgerError, Record, SessionView, StateDir};

/// How often a locked journal is tried again while waiting for a reader.
const RETRY: Duration = Duration::from_millis(25);

impl StateDir {
    /// The journal of session `id` for a sidecar, its lock held: a new journal holding
    /// `start`, with `None`; or, when the journal exists, the existing one with `resume`
    /// appended, with the session as it stands from then on (see the module docs).
    /// [`LedgerError::Locked`] when the lock is still held after `patience`.
    pub fn begin_session(
        &self,
        id: &str,
        start: Record,
        resume: &Record,
        patience: Duration,
    ) -> Result<(Journal, Option<SessionView>), LedgerError> {
        if !matches!(resume, Record::Resume { .. }) {
            return Err(LedgerError::NotResume);
        }
        match self.create_session(id, start.clone()) {
            Ok(journal) => return Ok((journal, None)),
            // The journal exists (not merely another's half-made `<id>.new`): resume it.
            Err(LedgerError::Exists { path })
                if path.extension().is_some_and(|e| e == "journal") => {}
            Err(e) => return Err(e),
        }
        let deadline = Instant::now() + patience;
        loop {
            match self.take_over(id, resume, &start) {
                Err(LedgerError::Locked { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(RETRY);
                }
                other => return other,
            }
        }
    }

    /// [`StateDir::resume_session`], or, when the journal has no readable `start`, the
    /// session begun again in it with `start` (see the module docs).
    fn take_over(
        &self,
        id: &str,
        resume: &Record,
        start: &Record,
    ) -> Result<(Journal, Option<SessionView>), LedgerError> {
        let mut journal = self.adopt_session(id)?;
        match journal.view() {
            Err(LedgerError::NoStart { path }) => {
                tracing::warn!(
                    "{} holds no start record: the session begins again in it",
                    path.display()
                );
                journal.append(start)?;
                Ok((journal, None))
            }
            Err(e) => Err(e),
            Ok(_) => {
                journal.append(resume)?;
                let view = journal.view()?;
                Ok((journal, Some(view)))
            }
        }
    }

    /// Takes over session `id` for a new sidecar, its last one gone: the journal (its lock
    /// held) with `resume` appended (durable), and the session as it stands from then on.
    /// [`LedgerError::Locked`] while a sidecar, a sweep or a reader holds it; nothing is
    /// written then.
    pub fn resume_session(
        &self,
        id: &str,
        resume: &Record,
    ) -> Result<(Journal, SessionView), LedgerError> {
        if !matches!(resume, Record::Resume { .. }) {
            return Err(LedgerError::NotResume);
        }
        let mut journal = self.adopt_session(id)?;
        journal.append(resume)?;
        let view = journal.view()?;
        Ok((journal, view))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{start, TempDir};
    use super::*;
    use crate::ledger::SessionState;
    use crate::protocol::Target;

    fn resume(pid: u32) -> Record {
        Record::Resume {
            owner: "0123456789abcdef-fedcba9876543210-8-200".into(),
            pid,
            grace_ms: 1000,
            labels: Default::default(),
        }
    }

    #[test]
    fn a_session_whose_sidecar_is_gone_is_resumed_and_a_live_ones_is_not() {
        let tmp = TempDir::new("ledger-resume");
        let dir = StateDir::open(tmp.path()).unwrap();
        let mut j = dir.create_session("s1", start(7)).unwrap();
        let (a, b) = (
            Target::new("docker", "a").unwrap(),
            Target::new("e2b", "b").unwrap(),
        );
        j.append(&Record::claim(&a)).unwrap();
        j.append(&Record::detach(&b)).unwrap();
        let resume = resume(8);
        // Its sidecar lives (holds the lock): no second one.
        assert!(matches!(
            dir.resume_session("s1", &resume),
            Err(LedgerError::Locked { .. })
        ));
        drop(j);
        let (journal, view) = dir.resume_session("s1", &resume).unwrap();
        assert_eq!((view.pid, view.state), (8, SessionState::Active));
        assert_eq!(view.claims.into_iter().collect::<Vec<_>>(), [a]);
        assert_eq!(view.detached.into_iter().collect::<Vec<_>>(), [b]);
        // On disk, and the lock is the new sidecar's.
        let on_disk = dir.read_session("s1").unwrap();
        assert_eq!((on_disk.pid, on_disk.sidecar_alive), (8, true));
        assert!(matches!(
            dir.resume_session("s1", &resume),
            Err(LedgerError::Locked { .. })
        ));
        drop(journal);
        // Only a resume record resumes; a session that does not exist is not made up.
        assert!(matches!(
            dir.resume_session("s1", &Record::ReclaimStart { cause: None }),
            Err(LedgerError::NotResume)
        ));
        assert!(matches!(
            dir.resume_session("nope", &resume),
            Err(LedgerError::Io { .. })
        ));
    }

    #[test]
    fn begin_creates_a_new_session_resumes_a_gone_one_and_waits_out_a_reader_only() {
        let tmp = TempDir::new("ledger-begin");
        let dir = StateDir::open(tmp.path()).unwrap();
        let patience = Duration::from_millis(300);
        let (j, resumed) = dir
            .begin_session("s1", start(7), &resume(8), patience)
            .unwrap();
        assert!(resumed.is_none());
        let began = Instant::now();
        assert!(matches!(
            dir.begin_session("s1", start(7), &resume(8), patience),
            Err(LedgerError::Locked { .. })
        ));
        assert!(
            began.elapsed() >= patience,
            "refused before its patience ran out"
        );
        drop(j);
        // A reader holds the lock for a moment: waited out, not taken for a sidecar.
        let file = std::fs::File::open(dir.journal_file("s1").unwrap()).unwrap();
        // Another test's fork may hold a copy of the journal's descriptor (and so its lock)
        // for a moment between fork and exec: wait that out, then take the reader's lock.
        let until = Instant::now() + Duration::from_secs(5);
        while !crate::unix::try_lock_shared(&file).unwrap() {
            assert!(Instant::now() < until, "the released lock was never free");
            std::thread::sleep(Duration::from_millis(10));
        }
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(file);
        });
        let (_j, resumed) = dir
            .begin_session("s1", start(7), &resume(8), Duration::from_secs(5))
            .unwrap();
        reader.join().unwrap();
        let view = resumed.expect("resumed");
        assert_eq!((view.pid, view.state), (8, SessionState::Active));
    }
}
