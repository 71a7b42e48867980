//! Faults at the ledger's write boundary, for tests: a state directory (and every journal it
//! creates or adopts) can be told to fail from its N-th write on, as a process that dies there
//! (SIGKILL, `SIGXFSZ` under a file-size limit) or a disk that fills up (ENOSPC) would leave it.
//!
//! Every change the ledger makes to a journal goes through [`Faults::before`], named by what it
//! is ([`Op`]): creating the staging file, writing a line, syncing, publishing it under its
//! real name, removing a stale or used staging name, syncing the directory. In a build that is
//! not a test, [`Faults`] holds nothing and every call is `Ok`.
//!
//! Decisions:
//! - **A death freezes the disk**: once a [`Fault::Die`] fired, every later change fails, the
//!   clean-ups after an error included (a killed process runs none). What the caller does in
//!   memory afterwards does not reach the disk; the test then ends the caller itself (drops
//!   its journal, aborts its task), and the next start finds exactly what a kill there leaves.
//! - **A full disk fails what needs space** (a file or a directory entry made, a line
//!   written, a sync), never a removal, and lasts until [`Faults::heal`].
//! - Counting is per [`Faults`] value shared by clones: a state directory given to one actor
//!   (a sidecar, a sweep) counts that actor's writes only.

use std::io;

/// One change the ledger makes to its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A new file (a journal's staging file).
    Create,
    /// One or more records written.
    Write,
    /// A file's data made durable.
    Sync,
    /// A staged journal published under its real name.
    Link,
    /// A name removed (a staging name after use, a stale one).
    Unlink,
    /// A directory's entries made durable.
    SyncDir,
}

/// What a fault is, once it fires.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The process dies before this write: it and every later one fail.
    Die,
    /// The disk is full: this and every later write that needs space fail with ENOSPC.
    Full,
}

/// Where a state directory's writes may fail; nothing outside tests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    #[cfg(test)]
    armed: Option<std::sync::Arc<Armed>>,
}

#[cfg(test)]
#[derive(Debug)]
struct Armed {
    /// Writes that still succeed; then `fault` fires.
    left: std::sync::atomic::AtomicU64,
    fault: std::sync::Mutex<Fault>,
    fired: std::sync::atomic::AtomicBool,
    healed: std::sync::atomic::AtomicBool,
}

impl Faults {
    /// Whether `op` may go ahead; the injected failure when not.
    #[inline]
    pub(super) fn before(&self, op: Op) -> io::Result<()> {
        #[cfg(test)]
        if let Some(armed) = &self.armed {
            return armed.before(op);
        }
        let _ = op;
        Ok(())
    }
}

#[cfg(test)]
impl Faults {
    /// Fails from the write after `after` more on, as `fault` says.
    pub(crate) fn after(after: u64, fault: Fault) -> Faults {
        Faults {
            armed: Some(std::sync::Arc::new(Armed {
                left: after.into(),
                fault: fault.into(),
                fired: false.into(),
                healed: false.into(),
            })),
        }
    }

    /// Counts writes but fails none until [`Faults::arm`]ed.
    pub(crate) fn counting() -> Faults {
        Faults::after(u64::MAX, Fault::Die)
    }

    /// Fails from the write after `after` more on, as `fault` says (unless one fired already).
    pub(crate) fn arm(&self, after: u64, fault: Fault) {
        use std::sync::atomic::Ordering::SeqCst;
        if let Some(a) = self.armed.as_ref().filter(|a| !a.fired.load(SeqCst)) {
            *a.fault.lock().unwrap() = fault;
            a.left.store(after, SeqCst);
        }
    }

    fn fault(&self) -> Option<Fault> {
        self.armed.as_ref().map(|a| *a.fault.lock().unwrap())
    }

    /// Whether the fault fired (a write failed).
    pub(crate) fn fired(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.armed.as_ref().is_some_and(|a| a.fired.load(SeqCst))
    }

    /// Whether the fault is one the actor dies of, and it fired.
    pub(crate) fn died(&self) -> bool {
        self.fired() && self.fault() == Some(Fault::Die)
    }

    /// A full disk has room again (a death is not undone).
    pub(crate) fn heal(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if let Some(a) = self
            .armed
            .as_ref()
            .filter(|_| self.fault() == Some(Fault::Full))
        {
            a.healed.store(true, SeqCst);
        }
    }
}

#[cfg(test)]
impl Armed {
    fn before(&self, op: Op) -> io::Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        if self.healed.load(SeqCst) {
            return Ok(());
        }
        let spent = self
            .left
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if spent && !self.fired.load(SeqCst) {
            return Ok(());
        }
        self.left.store(0, SeqCst);
        let fault = *self.fault.lock().unwrap();
        match (fault, op) {
            (Fault::Full, Op::Unlink) => Ok(()),
            (Fault::Full, _) => {
                self.fired.store(true, SeqCst);
                Err(io::Error::from_raw_os_error(libc::ENOSPC))
            }
            (Fault::Die, _) => {
                self.fired.store(true, SeqCst);
                Err(io::Error::other(format!(
                    "injected: the process died before this {op:?}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_death_fails_everything_after_a_full_disk_only_what_needs_space_until_healed() {
        let die = Faults::after(2, Fault::Die);
        assert!(die.before(Op::Create).is_ok() && die.before(Op::Write).is_ok());
        assert!(!die.fired());
        assert!(die.before(Op::Sync).is_err());
        assert!(
            die.before(Op::Unlink).is_err(),
            "a dead process removes nothing"
        );
        assert!(die.died());
        die.heal();
        assert!(die.before(Op::Write).is_err(), "a death is not undone");

        let full = Faults::after(0, Fault::Full);
        assert!(full.before(Op::Unlink).is_ok());
        assert!(!full.fired(), "a removal needs no space");
        let err = full.before(Op::Write).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
        assert!(full.fired() && !full.died());
        assert!(full.before(Op::Link).is_err());
        full.heal();
        assert!(full.before(Op::Write).is_ok());
        assert!(Faults::default().before(Op::Write).is_ok());

        let later = Faults::counting();
        assert!((0..100).all(|_| later.before(Op::Write).is_ok()));
        later.arm(1, Fault::Die);
        assert!(later.before(Op::Write).is_ok());
        assert!(later.before(Op::Sync).is_err() && later.died());
    }
}
