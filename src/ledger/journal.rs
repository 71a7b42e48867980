//! One session's journal, open for appending, with its lock held.
//!
//! Decisions:
//! - A new journal is written under a temporary name, locked and given its `start` record
//!   first, then published with `link(2)`, which fails if the name exists. So nobody ever sees
//!   a journal without its `start` record, and nobody can take its lock first.
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
        if let Err(e) = self.file.write_all(&line) {
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
        self.file
            .sync_data()
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
) -> Result<Journal, LedgerError> {
    let path = dir.join(format!("{id}.journal"));
    if path.exists() {
        return Err(LedgerError::Exists { path });
    }
    let staging = dir.join(format!("{id}.new"));
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(&staging)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => LedgerError::Exists {
                path: staging.clone(),
            },
            _ => io_err("create journal", &staging)(e),
        })?;
    let mut journal = Journal {
        id: id.to_string(),
        path: staging.clone(),
        file,
        mend: false,
        dirty: false,
    };
    let published = prepare(&mut journal, start, durable).and_then(|()| publish(&staging, &path));
    // The staging name goes whatever happened: on success the journal lives on under its real
    // name, on failure it was never visible. A leftover name is harmless (readers ignore it).
    if let Err(e) = fs::remove_file(&staging) {
        tracing::warn!("failed to remove {}: {e}", staging.display());
    }
    published?;
    journal.path = path;
    if durable == Durable::Now {
        sync_dir(dir)?;
    }
    Ok(journal)
}

fn sync_dir(dir: &Path) -> Result<(), LedgerError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync directory", dir))
}

impl Journal {
    /// The journal another process created unsynced ([`Durable::Later`]) and handed over
    /// open, its lock held through the same open file: made durable here (its data, then
    /// its directory entry) before it is used. `file` must be the journal at `path` (the same
    /// inode), or nothing is taken.
    pub(super) fn handed(id: &str, path: &Path, file: File) -> Result<Journal, LedgerError> {
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
        };
        journal.sync()?;
        if let Some(dir) = path.parent() {
            sync_dir(dir)?;
        }
        Ok(journal)
    }

    /// The open journal file, to hand to the sidecar (its lock goes with it).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }
}

/// Gives the staged journal its real name, unless that name is taken.
fn publish(staging: &Path, path: &Path) -> Result<(), LedgerError> {
    fs::hard_link(staging, path).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => LedgerError::Exists {
            path: path.to_path_buf(),
        },
        _ => io_err("publish journal", path)(e),
    })
}

/// Mode, lock and start record of a journal not yet published.
fn prepare(journal: &mut Journal, start: &Record, durable: Durable) -> Result<(), LedgerError> {
    // The mode given to open is filtered by the umask; this one is not.
    journal
        .file
        .set_permissions(Permissions::from_mode(0o600))
        .map_err(|e| journal.io_err("set permissions on", e))?;
    lock(&journal.file, &journal.path)?;
    match durable {
        Durable::Now => journal.append(start),
        Durable::Later => journal.write(start),
    }
}

/// Opens the existing journal `path` and takes its lock.
pub(super) fn adopt(id: &str, path: &Path) -> Result<Journal, LedgerError> {
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

    #[test]
    fn create_publishes_a_locked_journal_holding_its_start_record() {
        let tmp = TempDir::new("journal-create");
        let j = create(tmp.path(), "abc", &start(), Durable::Now).unwrap();
        assert_eq!(j.path(), tmp.path().join("abc.journal"));
        assert!(!tmp.path().join("abc.new").exists());
        let text = fs::read_to_string(j.path()).unwrap();
        assert!(
            text.contains("\"ev\":\"start\"") && text.ends_with('\n'),
            "{text}"
        );
        let probe = File::open(j.path()).unwrap();
        assert!(!unix::try_lock_shared(&probe).unwrap());
        assert!(matches!(
            create(tmp.path(), "abc", &start(), Durable::Now),
            Err(LedgerError::Exists { .. })
        ));
    }

    #[test]
    fn adopting_after_a_torn_write_mends_the_line_first() {
        let tmp = TempDir::new("journal-mend");
        let path = create(tmp.path(), "abc", &start(), Durable::Now)
            .unwrap()
            .path()
            .to_owned();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"t\":5,\"ev\":\"cla").unwrap();
        let mut j = adopt("abc", &path).unwrap();
        j.append(&Record::ReclaimStart { cause: None }).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[2].contains("reclaim_start"), "{text}");
    }

    #[test]
    fn unknown_records_are_refused_without_touching_the_file() {
        let tmp = TempDir::new("journal-unknown");
        let mut j = create(tmp.path(), "abc", &start(), Durable::Now).unwrap();
        let before = fs::read(j.path()).unwrap();
        assert!(matches!(
            j.append(&Record::Unknown),
            Err(LedgerError::Encode(_))
        ));
        assert_eq!(fs::read(j.path()).unwrap(), before);
    }
}
