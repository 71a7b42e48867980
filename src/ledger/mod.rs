//! The ledger: the durable record of sessions on this machine.
//!
//! ```text
//! <state dir>/                 0700, owned by us, not a symlink
//!   boots                      0600, the boot ids this machine has run, one per line
//!   sessions/                  0700, same checks
//!     <session id>.journal     0600, JSON Lines, append-only, one per session
//!     <session id>.stopped     0600, what `sandguard stop` removed by hand (`stops.rs`)
//!     <session id>.new         a journal being created (ignored by readers; one whose
//!                              creator died is removed by the next creation)
//! ```
//!
//! Decisions:
//! - The state directory is refused, with the reason, when it is a symlink, owned by another
//!   user, or writable by group or others: whoever can write there can make sandguard forget
//!   sandboxes or remove the wrong ones. Modes are set explicitly, never left to the umask.
//! - Session ids follow [`crate::protocol::SessionId::RULE`], so an id is always a safe file name.
//! - Every record is on disk before it is acknowledged ([`Journal::append`]). A reader ignores
//!   a torn last line, and skips (and counts, [`SessionView::corrupt_lines`]) a corrupt one
//!   elsewhere.
//! - A live sidecar holds an exclusive `flock` on its journal for as long as it runs. The lock
//!   dies with the process however it dies, so "the lock is free" proves the sidecar is gone,
//!   whatever pids were reused since. Readers probe it with a shared lock, so two probes never
//!   mistake each other for a sidecar.
//!
//! - A session's journal outlives its sidecar, so a sidecar restarted with the same session
//!   (`watch --session S`: a Kubernetes native sidecar restarted by the kubelet) takes the
//!   session over when nobody holds the lock, and journals a `resume` with its owner; the
//!   lock is what tells a dead sidecar from a live one, here as for a sweep (`resume.rs`).
//!
//! - The boots file is how a sweep tells "this machine, an earlier boot" (its owners are dead)
//!   from "a machine that merely shares our machine id" (a cloned VM image: unknown). The
//!   current boot is appended whenever the state directory is opened, which every sidecar
//!   and every sweep does; the list is only ever read to prove a death, never to prove life.
//!
//! The pieces: `record.rs` (what a line says), `journal.rs` (writing, locking), `view.rs`
//! (reading), `story.rs` (what happened to each sandbox, for `sessions show`), `stops.rs` (the
//! side file of stops), `resume.rs` (a session created, or taken over by a new sidecar),
//! `spend.rs` (the sandbox time each session held, and `sandguard report` across the ledger),
//! `price.rs` (what that time is estimated to cost, where prices are configured).

mod cause;
pub(crate) mod faults;
pub(crate) mod journal;
pub(crate) mod price;
pub(crate) mod record;
mod resume;
pub(crate) mod spend;
mod stops;
pub(crate) mod story;
mod view;

use std::collections::BTreeSet;
use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(crate) use cause::EndCause;
pub(crate) use journal::Journal;
pub(crate) use record::{now_ms, Record, SessionState};
pub(crate) use view::SessionView;

use crate::identity::Judge;
use crate::protocol::{echo, Target};
use crate::unix;

/// The file listing the boots this machine has run.
const BOOTS: &str = "boots";

/// A ledger failure; every variant names the path involved.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("failed to {op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("refusing to use {} as sandguard state: {reason}", path.display())]
    Unsafe {
        path: PathBuf,
        reason: unix::owner::Exposed,
    },
    #[error("journal {} is locked by another process (a live sidecar, a sweep, or a reader)", path.display())]
    Locked { path: PathBuf },
    #[error("session journal {} already exists", path.display())]
    Exists { path: PathBuf },
    #[error("journal {} has no start record", path.display())]
    NoStart { path: PathBuf },
    #[error("invalid session id \"{0}\": expected {rule}", rule = crate::protocol::SessionId::RULE)]
    BadSessionId(String),
    #[error("a session must begin with a start record")]
    NotStart,
    #[error("a session is taken over with a resume record")]
    NotResume,
    #[error("failed to encode a ledger record: {0}")]
    Encode(#[source] serde_json::Error),
    /// A lock held while the work ran was lost before the work was done (a fleet session's
    /// lock in the fleet store expired, or another sweeper took it): the work's result must
    /// not be written as if the lock had been kept. Not an I/O error: nothing failed here.
    #[error("failed to keep {what}: the lock was lost")]
    LockLost { what: String },
}

/// Folds the journal text of session `id` as [`StateDir::read_session`] reads it (`None`:
/// no start record). For the fuzz target `ledger_journal`; touches no file.
#[doc(hidden)]
pub fn fold_journal(id: &str, text: &[u8]) -> Option<SessionView> {
    view::fold(id, text)
}

/// One journal line (without its `\n`) as a record; `None` when it is not one.
pub(crate) fn decode_line(line: &[u8]) -> Option<Record> {
    record::Entry::decode(line).ok().map(|e| e.record)
}

/// Wraps an I/O error with what was being done to which path.
pub(crate) fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LedgerError {
    let path = path.to_path_buf();
    move |source| LedgerError::Io { op, path, source }
}

/// One state of a journal file: its inode, length and modification time. An append changes
/// its length (and time); a journal replaced under its name (a creation's rename) its inode.
/// What a reader folded at one stamp holds until the stamp changes: a journal is append-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(file: &File, path: &Path) -> Result<Stamp, LedgerError> {
        let meta = file.metadata().map_err(io_err("inspect journal", path))?;
        Ok(Stamp {
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        })
    }
}

/// One state of a session's history: its journal's [`Stamp`] and the length of its side file
/// of stops (appended to only, by `sandguard stop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HistoryStamp {
    journal: Stamp,
    stops_len: u64,
}

/// What [`StateDir::reread_session`] found.
#[derive(Debug)]
pub(crate) enum Reread {
    /// The journal is as it was: only whether a sidecar holds its lock now.
    Same { sidecar_alive: bool },
    /// It changed (or was not read before): read again, at this stamp.
    Read(Stamp, Box<SessionView>),
}

/// Held by the one sweep that may run now; dropping it lets the next one in.
#[derive(Debug)]
pub struct SweepLock(#[allow(dead_code)] File);

/// The checked state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    sessions: PathBuf,
    /// Where the journals' writes may fail (tests only: [`faults`]).
    faults: faults::Faults,
}

impl StateDir {
    /// Opens the state directory at `path`, creating it (and its parents) if missing.
    pub fn open(path: &Path) -> Result<StateDir, LedgerError> {
        private_dir(path)?;
        let sessions = path.join("sessions");
        private_dir(&sessions)?;
        let dir = StateDir {
            root: path.to_path_buf(),
            sessions,
            faults: faults::Faults::default(),
        };
        dir.record_boot();
        Ok(dir)
    }

    /// The boots this machine is known to have run (short boot ids), the current one included.
    pub fn known_boots(&self) -> BTreeSet<String> {
        let text = fs::read_to_string(self.root.join(BOOTS)).unwrap_or_default();
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// A judge of owners that knows this machine's past boots.
    pub fn judge(&self) -> Judge {
        Judge::new(self.known_boots())
    }

    /// Appends the current boot to the boots file unless it is there. Failing to record it is
    /// not fatal: a boot missing from the list only makes its owners unknown, never dead.
    fn record_boot(&self) {
        let boot = crate::identity::current_boot();
        if boot.is_empty() || self.known_boots().contains(&boot) {
            return;
        }
        let path = self.root.join(BOOTS);
        let written = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| io::Write::write_all(&mut f, format!("{boot}\n").as_bytes()));
        if let Err(e) = written {
            tracing::warn!("cannot record this boot in {}: {e}", path.display());
        }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The same directory, its journals' writes failing as `faults` says.
    #[cfg(test)]
    pub(crate) fn with_faults(&self, faults: faults::Faults) -> StateDir {
        StateDir {
            faults,
            ..self.clone()
        }
    }

    /// Starts the journal of a new session with its `start` record, durable and locked.
    pub fn create_session(&self, id: &str, start: Record) -> Result<Journal, LedgerError> {
        check_id(id)?;
        if !matches!(start, Record::Start { .. }) {
            return Err(LedgerError::NotStart);
        }
        journal::create(
            &self.sessions,
            id,
            &start,
            journal::Durable::Now,
            &self.faults,
        )
    }

    /// [`StateDir::create_session`] for the wrapper, whose sidecar makes it durable: the
    /// journal is published with its `start` record written but not synced, and handed to
    /// the sidecar ([`StateDir::handed_session`]), which syncs it first. This keeps two
    /// disk flushes (0.5–0.8 ms on a quiet disk, several on a busy one) off the path between
    /// `sandguard -- CMD` and CMD's start; a machine that crashes in the milliseconds before
    /// the sidecar's sync loses a session that could not yet have confirmed anything.
    pub fn create_session_unsynced(&self, id: &str, start: Record) -> Result<Journal, LedgerError> {
        check_id(id)?;
        if !matches!(start, Record::Start { .. }) {
            return Err(LedgerError::NotStart);
        }
        journal::create(
            &self.sessions,
            id,
            &start,
            journal::Durable::Later,
            &self.faults,
        )
    }

    /// The journal of session `id` that another process created and handed over open (its
    /// lock held), made durable ([`Journal::handed`]).
    pub fn handed_session(&self, id: &str, file: File) -> Result<Journal, LedgerError> {
        Journal::handed(id, &self.journal_path(id)?, file, &self.faults)
    }

    /// Takes over an existing session's journal: [`LedgerError::Locked`] while its sidecar lives.
    pub fn adopt_session(&self, id: &str) -> Result<Journal, LedgerError> {
        journal::adopt(id, &self.journal_path(id)?, &self.faults)
    }

    /// Reads one session: its view only. The story is not told here; every sweep pass and
    /// every batch of claims reads sessions, and only `sessions show` tells stories.
    pub fn read_session(&self, id: &str) -> Result<SessionView, LedgerError> {
        self.read_journal(id)
    }

    /// Reads one session and the story of its sandboxes ([`story`]), from one read.
    /// Each line is decoded once, for both.
    pub fn read_history(&self, id: &str) -> Result<(SessionView, story::Story), LedgerError> {
        let (text, free, path) = self.read_text(id)?;
        let decoded = view::decode(id, &text);
        let folded = decoded.entries.iter().map(|(n, e)| (*n, e.clone()));
        let Some(mut view) = view::fold_decoded(id, folded, decoded.corrupt) else {
            return Err(LedgerError::NoStart { path });
        };
        view.sidecar_alive = !free;
        let stops = stops::read(&path.with_extension("stopped"))?;
        let journal = decoded.entries.into_iter().map(|(_, e)| e).collect();
        Ok((view, story::tell_decoded(journal, &stops)))
    }

    /// One session's view.
    fn read_journal(&self, id: &str) -> Result<SessionView, LedgerError> {
        let (text, free, path) = self.read_text(id)?;
        let Some(mut view) = view::fold(id, &text) else {
            return Err(LedgerError::NoStart { path });
        };
        view.sidecar_alive = !free;
        Ok(view)
    }

    /// One session's journal text, whether its lock was free when it was read, and its path.
    fn read_text(&self, id: &str) -> Result<(Vec<u8>, bool, PathBuf), LedgerError> {
        let path = self.journal_path(id)?;
        let mut file = File::open(&path).map_err(io_err("open journal", &path))?;
        // Probe before reading: while our shared lock is held nobody can take the journal, so
        // the view of a session whose sidecar is gone is complete, not a race with a sweep.
        let free = unix::try_lock_shared(&file).map_err(io_err("probe the lock of", &path))?;
        let mut text = Vec::new();
        io::Read::read_to_end(&mut file, &mut text).map_err(io_err("read journal", &path))?;
        Ok((text, free, path))
    }

    /// Records that `sandguard stop` removed these sandboxes of session `id` (each a
    /// [`Record::Stopped`]), in the session's side file of stops, never its journal
    /// ([`stops`] says why). `Ok(false)`: no session `id` in this state directory, so nothing
    /// was written.
    pub fn note_stopped(&self, id: &str, records: &[Record]) -> Result<bool, LedgerError> {
        let journal = self.journal_path(id)?;
        if !journal.exists() {
            return Ok(false);
        }
        stops::append(&journal.with_extension("stopped"), records)?;
        Ok(true)
    }

    /// What `sandguard stop` removed of session `id`, by hand ([`Record::Stopped`] in its side
    /// file of stops, as each claim names its sandbox); empty when it has none. History for
    /// display only: a reclaim never reads it ([`stops`]).
    pub fn stopped(&self, id: &str) -> Result<BTreeSet<Target>, LedgerError> {
        let text = stops::read(&self.journal_path(id)?.with_extension("stopped"))?;
        Ok(text
            .split(|&b| b == b'\n')
            .filter_map(|l| record::Entry::decode(l).ok())
            .filter_map(|e| match e.record {
                Record::Stopped { provider, id, .. } => Some(Target { provider, id }),
                _ => None,
            })
            .collect())
    }

    /// Every session, oldest first. A journal that cannot be read is skipped with a warning, so
    /// one damaged file never hides the others from a sweep.
    pub fn sessions(&self) -> Result<Vec<SessionView>, LedgerError> {
        self.sessions_but(None)
    }

    /// Every session but `but` (its journal is not even read: a sidecar asking about others
    /// already knows its own, and rereading it for every batch of claims would grow with it).
    pub(crate) fn sessions_but(&self, but: Option<&str>) -> Result<Vec<SessionView>, LedgerError> {
        let mut views = Vec::new();
        for id in self.session_ids()? {
            if but == Some(id.as_str()) {
                continue;
            }
            match self.read_session(&id) {
                Ok(view) => views.push(view),
                Err(e) => tracing::warn!("skipping session {id}: {e}"),
            }
        }
        views.sort_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
        Ok(views)
    }

    /// The ids of every session that has a journal, in no order.
    pub(crate) fn session_ids(&self) -> Result<Vec<String>, LedgerError> {
        let dir = &self.sessions;
        let mut ids = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_err("list sessions in", dir))? {
            let entry = entry.map_err(io_err("list sessions in", dir))?;
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".journal")) else {
                continue;
            };
            if check_id(id).is_ok() {
                ids.push(id.to_string());
            }
        }
        Ok(ids)
    }

    /// Session `id` read again only if its journal changed since it was read with `seen`
    /// ([`Stamp`]); its lock is probed every time, since a sidecar dies (or a sweep adopts
    /// the session) without writing a line.
    pub(crate) fn reread_session(
        &self,
        id: &str,
        seen: Option<Stamp>,
    ) -> Result<Reread, LedgerError> {
        let path = self.journal_path(id)?;
        let mut file = File::open(&path).map_err(io_err("open journal", &path))?;
        // Probed before the stamp is taken and the text read, as `read_journal` does.
        let free = unix::try_lock_shared(&file).map_err(io_err("probe the lock of", &path))?;
        // Taken before the text is read: a line appended meanwhile is in the text but not in
        // the stamp, so the next look reads again (never the reverse).
        let stamp = Stamp::of(&file, &path)?;
        if seen == Some(stamp) {
            return Ok(Reread::Same {
                sidecar_alive: !free,
            });
        }
        let mut text = Vec::new();
        io::Read::read_to_end(&mut file, &mut text).map_err(io_err("read journal", &path))?;
        let Some(mut view) = view::fold(id, &text) else {
            return Err(LedgerError::NoStart { path });
        };
        view.sidecar_alive = !free;
        Ok(Reread::Read(stamp, Box::new(view)))
    }

    /// Session `id`'s history ([`StateDir::read_history`]) read again only if its journal or
    /// its side file of stops changed since it was read at `seen`; `Ok(None)`: neither did.
    /// For readers that keep every session's story between looks (the sweep's metrics), so
    /// that a look costs a `stat` per session that did not change.
    pub(crate) fn reread_history(
        &self,
        id: &str,
        seen: Option<HistoryStamp>,
    ) -> Result<Option<(HistoryStamp, SessionView, story::Story)>, LedgerError> {
        let path = self.journal_path(id)?;
        let file = File::open(&path).map_err(io_err("open journal", &path))?;
        let stops = path.with_extension("stopped");
        let stops_len = match fs::metadata(&stops) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io_err("inspect", &stops)(e)),
        };
        let stamp = HistoryStamp {
            journal: Stamp::of(&file, &path)?,
            stops_len,
        };
        if seen == Some(stamp) {
            return Ok(None);
        }
        let (view, story) = self.read_history(id)?;
        Ok(Some((stamp, view, story)))
    }

    /// Waits until no other sweep runs (`sweep.lock` in the state directory) and holds that
    /// until the returned lock is dropped; says so (at `info`) when it has to wait. Blocking:
    /// call it off the async runtime's thread.
    pub fn lock_sweeps(&self) -> Result<SweepLock, LedgerError> {
        let path = self.root.join("sweep.lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err("open", &path))?;
        if !unix::try_lock_exclusive(&file).map_err(io_err("lock", &path))? {
            tracing::info!("waiting for another sweep to finish (it holds sweep.lock)");
            unix::lock_exclusive(&file).map_err(io_err("lock", &path))?;
        }
        Ok(SweepLock(file))
    }

    /// Deletes the sessions that ended (reclaimed or clean) and whose journal has not changed
    /// since `before_ms` (unix milliseconds): their journal, log, side file of stops and proxy
    /// directory. A
    /// session whose sidecar (or an adopting sweep) holds its lock is never touched, nor a
    /// pending one, nor one that detached a sandbox: a detach lasts as long as its sandbox
    /// (only its TTL ends it), and the journal is where it is written; were it deleted, the
    /// next sweep would judge the sandbox by its dead owner and remove it. Returns the ids
    /// deleted.
    pub fn prune(&self, before_ms: u64) -> Result<Vec<String>, LedgerError> {
        let mut gone = Vec::new();
        for view in self.sessions()? {
            if !view.state.is_final()
                || view.sidecar_alive
                || view.updated_ms >= before_ms
                || !view.detached.is_empty()
            {
                continue;
            }
            // Hold the lock while deleting, so no sweep adopts it half way.
            let Ok(journal) = self.adopt_session(&view.id) else {
                continue;
            };
            let path = journal.path().to_path_buf();
            let _ = fs::remove_file(path.with_extension("log"));
            let _ = fs::remove_file(path.with_extension("stopped"));
            // The journal's staging name, left when a creator died after publishing it.
            let _ = fs::remove_file(path.with_extension("new"));
            let _ = fs::remove_dir_all(path.with_extension("docker"));
            fs::remove_file(&path).map_err(io_err("delete journal", &path))?;
            drop(journal);
            gone.push(view.id);
        }
        Ok(gone)
    }

    /// Where session `id`'s journal is (whether or not it exists).
    pub fn journal_file(&self, id: &str) -> Result<PathBuf, LedgerError> {
        self.journal_path(id)
    }

    fn journal_path(&self, id: &str) -> Result<PathBuf, LedgerError> {
        check_id(id)?;
        Ok(self.sessions.join(format!("{id}.journal")))
    }
}

fn check_id(id: &str) -> Result<(), LedgerError> {
    crate::protocol::SessionId::parse(id)
        .map(drop)
        .map_err(|_| LedgerError::BadSessionId(echo(id.as_bytes())))
}

/// Makes sure `path` is a directory only we can write, creating it 0700 if missing.
fn private_dir(path: &Path) -> Result<(), LedgerError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io_err("create directory", path))?;
            fs::set_permissions(path, Permissions::from_mode(0o700))
                .map_err(io_err("set permissions on", path))?;
        }
        Err(e) => return Err(io_err("inspect", path)(e)),
        Ok(_) => {}
    }
    let meta = fs::symlink_metadata(path).map_err(io_err("inspect", path))?;
    unix::owner::private_dir(&meta, unix::owner::Owners::user()).map_err(|reason| {
        LedgerError::Unsafe {
            path: path.to_path_buf(),
            reason,
        }
    })
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A session's first record: a well-formed owner identity, `pid`, a ten-minute grace and
    /// no labels.
    pub(crate) fn start(pid: u32) -> super::Record {
        super::Record::Start {
            owner: "0123456789abcdef-fedcba9876543210-7-100".into(),
            pid,
            grace_ms: 600_000,
            labels: Default::default(),
        }
    }

    /// A fresh directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(PathBuf);

    impl TempDir {
        pub(crate) fn new(name: &str) -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("sandguard-test-{name}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub(crate) fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests;
