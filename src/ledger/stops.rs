//! A session's side file of stops: `sessions/<id>.stopped`, the sandboxes `sandguard stop`
//! removed by hand, so that `sessions show` tells "removed by hand" instead of "claimed".
//!
//! Decisions:
//! - **Never the journal.** The journal is written by whoever holds its lock (the sidecar, or
//!   an adopting sweep), and `stop` must not wait for a live sidecar. A second writer could not
//!   harm a claim by interleaving (each line is one `O_APPEND` write), but a `stop` killed in
//!   the middle of its write may leave a torn line, and the sidecar, which does not know the
//!   file changed under it, would glue its next claim onto it: an acknowledged claim a later
//!   sweep could not read. A torn line here can only spoil a stop record.
//! - **History, not truth.** A stop record moves nothing a reclaim acts on: the journal's fold
//!   never reads this file. A claim whose sandbox `stop` removed is still a claim; the reclaim
//!   finds it gone, which is right.
//! - Same line format as the journal ([`Record::Stopped`] in an [`Entry`]); 0600; each append
//!   starts with a `\n` when the file ends in a torn line, and is synced before `stop` says it
//!   is done. Several `stop`s may append at once.
//! - Written only for a session whose journal is in this state directory; `prune` deletes it
//!   with the journal.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::record::{now_ms, Entry, Record};
use super::{io_err, LedgerError};

/// Appends `records` (each a [`Record::Stopped`]) to the side file at `path`, stamped now, and
/// waits until they are on disk.
pub(super) fn append(path: &Path, records: &[Record]) -> Result<(), LedgerError> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err("open", path))?;
    file.set_permissions(Permissions::from_mode(0o600))
        .map_err(io_err("set permissions on", path))?;
    let mut text = Vec::new();
    if ends_torn(&file).map_err(io_err("read", path))? {
        text.push(b'\n');
    }
    let t = now_ms();
    for record in records {
        debug_assert!(matches!(record, Record::Stopped { .. }));
        let entry = Entry {
            t,
            record: record.clone(),
        };
        text.extend(entry.encode().map_err(LedgerError::Encode)?);
    }
    file.write_all(&text).map_err(io_err("append to", path))?;
    file.sync_data().map_err(io_err("sync", path))
}

/// The side file's text; empty when there is none.
pub(super) fn read(path: &Path) -> Result<Vec<u8>, LedgerError> {
    match std::fs::read(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_err("read", path)(e)),
    }
}

/// Whether the file is not empty and does not end in a `\n`.
fn ends_torn(file: &File) -> io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8];
    file.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] != b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::testutil::TempDir;
    use std::os::unix::fs::MetadataExt;

    fn stopped(id: &str) -> Record {
        Record::Stopped {
            provider: "docker".into(),
            id: id.into(),
            outcome: "removed".into(),
        }
    }

    #[test]
    fn appends_are_private_whole_lines_even_after_a_torn_one() {
        let tmp = TempDir::new("stops");
        let path = tmp.path().join("abc.stopped");
        assert!(read(&path).unwrap().is_empty());
        append(&path, &[stopped("a")]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // A stop killed in the middle of its write.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"t\":5,\"ev\":\"sto").unwrap();
        append(&path, &[stopped("b"), stopped("c")]).unwrap();
        let text = read(&path).unwrap();
        let ids: Vec<String> = text
            .split(|&b| b == b'\n')
            .filter_map(|l| Entry::decode(l).ok())
            .map(|e| match e.record {
                Record::Stopped { id, .. } => id,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(text.split(|&b| b == b'\n').count(), 5, "a, torn, b, c, end");
    }
}
