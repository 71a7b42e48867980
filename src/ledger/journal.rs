//! One session's journal, open for appending, with its lock held.
//!
//! Decisions:
//! - A new journal is written under a temporary name (`<id>.new`), locked and given its
//!   `start` record first, then published with `link(2)`, which fails if the name exists. So
//!   nobody ever sees a journal without its `start` record, and nobody can take its lock first.
//! - **A creation cut short never blocks the session** ([`stale`]): a process killed between
//!   making `<id>.new` and removing it (SIGKILL, `SIGXFSZ` under a file-size limit) leaves the
//!   name behind, and the next creation finds it. Its lock tells: held, another process is
//!   creating the session right now, and this creation is refused as [`LedgerError::Locked`];
//!   free, its creator is gone, and the leftover is removed (under its lock, and only when the
//!   name still is the file locked) and the creation goes on. Before this, every later `watch
//!   --session S` failed with "S.new already exists", for good.
//! - An append is one `write_all` of the whole line, then `fdatasync`. Only when both returned
//!   is the record acknowledged. A batch of records may be written first and synced once
//!   ([`Journal::write`], then [`Journal::sync`]); nothing of the batch may be acknowledged
//!   before that sync returned. If a write fails halfway, or an adopted journal ends in a torn
//!   line, the next append starts with a `\n`: the fragment becomes one corrupt line that
//!   readers skip, instead of swallowing the good record glued to it.
//! - One `write` is not all-or-nothing: Linux may cut a write to a regular file short where
//!   it crosses a page boundary when a SIGKILL arrives (seen on ext4: about one kill in eight
//!   tore a 4.3 KB line). So a killed sidecar's journal may end in a torn line; that record
//!   was never synced, so never acknowledged, and readers drop it.
//! - The lock is an exclusive `flock` on the open file, released when the [`Journal`] drops.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::faults::{Faults, Op};
use super::record::{now_ms, Entry, Record};
use super::view::{self, SessionView};
use super::{io_err, LedgerError};
use crate::unix;

/// An open session journal whose exclusive lock this process holds.
#[derive(Debug)]
pub struct Journal {
    id: String,
    /// The journal file.
    path: PathBuf,
    /// The journal file, whose exclusive lock this process holds.
    file: File,
    /// The file may end without a `\n` (a torn write); mend it before the next record.
    mend: bool,
    /// Written since the last sync.
    dirty: bool,
    /// Where its writes may fail (tests only: [`super::faults`]).
    faults: Faults,
}

impl Journal {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session as this journal tells it, read back through the open file (whose lock
    /// this process holds). [`LedgerError::NoStart`] when it has no `start`.
    pub fn view(&self) -> Result<SessionView, LedgerError> {
        let mut text = Vec::new();
        (&self.file)
            .seek(io::SeekFrom::Start(0))
            .and_then(|_| (&self.file).read_to_end(&mut text))
            .map_err(|e| self.io_err("read journal", e))?;
        view::fold(&self.id, &text).ok_or_else(|| LedgerError::NoStart {
            path: self.path.clone(),
        })
    }

    /// Appends `record`, stamped now, and waits until it is on disk.
    pub fn append(&mut self, record: &Record) -> Result<(), LedgerError> {
        self.write(record)?;
        self.sync()
    }

    /// Writes `record`, stamped now, without waiting for the disk: [`Journal::sync`] does.
    pub fn write(&mut self, record: &Record) -> Result<(), LedgerError> {
        let entry = Entry {
            t: now_ms(),
            record: record.clone(),
        };
        let mut line = Vec::with_capacity(128);
        if self.mend {
            line.push(b'\n');
        }
        line.extend(entry.encode().map_err(LedgerError::Encode)?);
        let written = self
            .faults
            .before(Op::Write)
            .and_then(|()| self.file.write_all(&line));
        if let Err(e) = written {
            self.mend = true;
            return Err(self.io_err("append to journal", e));
        }
        self.mend = false;
        self.dirty = true;
        Ok(())
    }

    /// Waits until everything written so far is on disk.
    pub fn sync(&mut self) -> Result<(), LedgerError> {
        if !self.dirty {
            return Ok(());
        }
        self.faults
            .before(Op::Sync)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| self.io_err("sync journal", e))?;
        self.dirty = false;
        Ok(())
    }

    fn io_err(&self, op: &'static str, source: io::Error) -> LedgerError {
        io_err(op, &self.path)(source)
    }
}

/// Whether a new journal is on disk when [`create`] returns, or only written (the wrapper's
/// case: the sidecar it hands the journal to makes it durable, [`Journal::handed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durable {
    Now,
    Later,
}

/// Creates the journal `dir/<id>.journal` holding `start`; see the module docs for the order.
pub(super) fn create(
    dir: &Path,
    id: &str,
    start: &Record,
    durable: Durable,
    faults: &Faults,
) -> Result<Journal, LedgerError> {
    let path = dir.join(format!("{id}.journal"));
    if path.exists() {
        return Err(LedgerError::Exists { path });
    }
    let staging = dir.join(format!("{id}.new"));
    let file = stage(&staging, faults)?;
    let mut journal = Journal {
        id: id.to_string(),
        path: staging.clone(),
        file,
        mend: false,
        dirty: false,
        faults: faults.clone(),
    };
    let published = prepare(&mut journal, start, durable)
        .and_then(|()| publish(&journal.file, &staging, &path, faults));
    // The staging name goes whatever happened: on success the journal lives on under its real
    // name, on failure it was never visible. A leftover name (a process killed before this
    // line) is removed by the next creation ([`stale`]).
    if let Err(e) = faults
        .before(Op::Unlink)
        .and_then(|()| fs::remove_file(&staging))
    {
        tracing::warn!("failed to remove {}: {e}", staging.display());
    }
    published?;
    journal.path = path;
    if durable == Durable::Now {
        sync_dir(dir, faults)?;
    }
    Ok(journal)
}

/// Makes the staging file `staging`, first removing one a dead creator left there
/// ([`stale`]). Tried a few times: between a leftover's removal and this creation, another
/// process may have made the name anew (then its lock refuses this one).
fn stage(staging: &Path, faults: &Faults) -> Result<File, LedgerError> {
    const TRIES: usize = 3;
    for _ in 0..TRIES {
        faults
            .before(Op::Create)
            .map_err(io_err("create journal", staging))?;
        match OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(staging)
        {
            // Locked at once: from here on a live creator is told from a dead one.
            Ok(file) => return lock(&file, staging).map(|()| file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => stale(staging, faults)?,
            Err(e) => return Err(io_err("create journal", staging)(e)),
        }
    }
    Err(LedgerError::Locked {
        path: staging.to_path_buf(),
    })
}

/// Removes the staging file `staging` that a creation left behind, when its creator is gone:
/// its lock is free (a live creator holds it from the moment it made the file), and the name
/// still names the file whose lock is held here (a removal never takes a newer file's name).
/// [`LedgerError::Locked`] while a live process is creating the same session.
fn stale(staging: &Path, faults: &Faults) -> Result<(), LedgerError> {
    use std::os::unix::fs::MetadataExt;
    let file = match File::open(staging) {
        Ok(file) => file,
        // Gone meanwhile (its creator finished): try again.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("open", staging)(e)),
    };
    lock(&file, staging)?;
    let held = file.metadata().map_err(io_err("inspect", staging))?;
    match fs::symlink_metadata(staging) {
        Ok(named) if (named.dev(), named.ino()) == (held.dev(), held.ino()) => {}
        // Another process removed it and made the name anew meanwhile: try again.
        _ => return Ok(()),
    }
    tracing::warn!(
        "removing {}: a journal creation that never finished (its process is gone)",
        staging.display()
    );
    faults
        .before(Op::Unlink)
        .and_then(|()| fs::remove_file(staging))
        .or_else(|e| match e.kind() {
            io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        })
        .map_err(io_err("remove", staging))
}

fn sync_dir(dir: &Path, faults: &Faults) -> Result<(), LedgerError> {
    faults
        .before(Op::SyncDir)
        .and_then(|()| File::open(dir))
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync directory", dir))
}

impl Journal {
    /// The journal another process created unsynced ([`Durable::Later`]) and handed over
    /// open, its lock held through the same open file: made durable here (its data, then
    /// its directory entry) before it is used. `file` must be the journal at `path` (the same
    /// inode), or nothing is taken.
    pub(super) fn handed(
        id: &str,
        path: &Path,
        file: File,
        faults: &Faults,
    ) -> Result<Journal, LedgerError> {
        use std::os::unix::fs::MetadataExt;
        let open = file.metadata().map_err(io_err("inspect", path))?;
        let named = fs::metadata(path).map_err(io_err("inspect", path))?;
        if (open.dev(), open.ino()) != (named.dev(), named.ino()) {
            return Err(io_err("adopt journal", path)(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the descriptor handed over is not this journal",
            )));
        }
        let mut journal = Journal {
            id: id.to_string(),
            path: path.to_path_buf(),
            file,
            mend: false,
            dirty: true,
            faults: faults.clone(),
        };
        journal.sync()?;
        if let Some(dir) = path.parent() {
            sync_dir(dir, faults)?;
        }
        Ok(journal)
    }

    /// The open journal file, to hand to the sidecar (its lock goes with it).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

/// Gives the staged journal its real name, unless that name is taken.
/// Gives the staged journal `file` its real name, unless that name is taken; and checks that
/// the name now is `file`: two processes creating one session at the same instant could
/// otherwise each take the other's staging file for its own ([`stale`] removes a name only
/// under its lock, but a creator's file exists for a moment before it is locked).
fn publish(file: &File, staging: &Path, path: &Path, faults: &Faults) -> Result<(), LedgerError> {
    use std::os::unix::fs::MetadataExt;
    let linked = faults
        .before(Op::Link)
        .and_then(|()| fs::hard_link(staging, path));
    linked.map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => LedgerError::Exists {
            path: path.to_path_buf(),
        },
        _ => io_err("publish journal", path)(e),
    })?;
    let ours = file.metadata().map_err(io_err("inspect", staging))?;
    let named = fs::metadata(path).map_err(io_err("inspect", path))?;
    if (ours.dev(), ours.ino()) == (named.dev(), named.ino()) {
        return Ok(());
    }
    Err(LedgerError::Locked {
        path: path.to_path_buf(),
    })
}

/// Mode and start record of a journal not yet published (its lock is held since [`stage`]).
fn prepare(journal: &mut Journal, start: &Record, durable: Durable) -> Result<(), LedgerError> {
    // The mode given to open is filtered by the umask; this one is not.
    journal
        .file
        .set_permissions(Permissions::from_mode(0o600))
        .map_err(|e| journal.io_err("set permissions on", e))?;
    match durable {
        Durable::Now => journal.append(start),
        Durable::Later => journal.write(start),
    }
}

/// Opens the existing journal `path` and takes its lock.
pub(super) fn adopt(id: &str, path: &Path, faults: &Faults) -> Result<Journal, LedgerError> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .map_err(io_err("open journal", path))?;
    lock(&file, path)?;
    let len = file.metadata().map_err(io_err("inspect", path))?.len();
    let mut last = [b'\n'];
    if len > 0 {
        file.read_exact_at(&mut last, len - 1)
            .map_err(io_err("read journal", path))?;
    }
    Ok(Journal {
        id: id.to_string(),
        path: path.to_path_buf(),
        file,
        mend: last[0] != b'\n',
        dirty: false,
        faults: faults.clone(),
    })
}

fn lock(file: &File, path: &Path) -> Result<(), LedgerError> {
    match unix::try_lock_exclusive(file) {
        Ok(true) => Ok(()),
        Ok(false) => Err(LedgerError::Locked {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(io_err("lock journal", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::testutil::TempDir;

    fn start() -> Record {
        Record::Start {
            owner: "o".into(),
            pid: 1,
            grace_ms: 1000,
            labels: Default::default(),
        }
    }

    /// The journal of session `abc` in `dir`, made durable, with no faults.
    fn made(dir: &Path) -> Result<Journal, LedgerError> {
        create(dir, "abc", &start(), Durable::Now, &Faults::default())
    }

    #[test]
    fn create_publishes_a_locked_journal_holding_its_start_record() {
        let tmp = TempDir::new("journal-create");
        let j = made(tmp.path()).unwrap();
        assert_eq!(j.path(), tmp.path().join("abc.journal"));
        assert!(!tmp.path().join("abc.new").exists());
        let text = fs::read_to_string(j.path()).unwrap();
        assert!(
            text.contains("\"ev\":\"start\"") && text.ends_with('\n'),
            "{text}"
        );
        let probe = File::open(j.path()).unwrap();
        assert!(!unix::try_lock_shared(&probe).unwrap());
        assert!(matches!(made(tmp.path()), Err(LedgerError::Exists { .. })));
    }

    #[test]
    fn adopting_after_a_torn_write_mends_the_line_first() {
        let tmp = TempDir::new("journal-mend");
        let path = made(tmp.path()).unwrap().path().to_owned();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"t\":5,\"ev\":\"cla").unwrap();
        let mut j = adopt("abc", &path, &Faults::default()).unwrap();
        j.append(&Record::ReclaimStart { cause: None }).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[2].contains("reclaim_start"), "{text}");
    }

    #[test]
    fn unknown_records_are_refused_without_touching_the_file() {
        let tmp = TempDir::new("journal-unknown");
        let mut j = made(tmp.path()).unwrap();
        let before = fs::read(j.path()).unwrap();
        assert!(matches!(
            j.append(&Record::Unknown),
            Err(LedgerError::Encode(_))
        ));
        assert_eq!(fs::read(j.path()).unwrap(), before);
    }
}
