//! Unit tests of `ledger`.

use super::testutil::TempDir;
use super::*;
use crate::protocol::Target;

fn start(pid: u32) -> Record {
    Record::Start {
        owner: "0123456789abcdef-fedcba9876543210-7-100".into(),
        pid,
        grace_ms: 600_000,
        labels: [("sandguard.session".to_string(), "s1".to_string())].into(),
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

fn refused(path: &Path) -> String {
    match StateDir::open(path) {
        Err(e @ LedgerError::Unsafe { .. }) => e.to_string(),
        other => panic!("{} was accepted: {other:?}", path.display()),
    }
}

#[test]
fn open_creates_private_directories() {
    let tmp = TempDir::new("ledger-open");
    let root = tmp.path().join("a/b/sandguard");
    let dir = StateDir::open(&root).unwrap();
    assert_eq!(dir.path(), root);
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&root.join("sessions")), 0o700);
    // A directory that others can read but not write is fine, and left as it is.
    fs::set_permissions(&root, Permissions::from_mode(0o755)).unwrap();
    StateDir::open(&root).unwrap();
    assert_eq!(mode(&root), 0o755);
}

#[test]
fn unsafe_directories_are_refused_with_the_reason() {
    let tmp = TempDir::new("ledger-unsafe");
    let open_dir = tmp.path().join("open");
    fs::create_dir(&open_dir).unwrap();
    fs::set_permissions(&open_dir, Permissions::from_mode(0o777)).unwrap();
    let msg = refused(&open_dir);
    assert!(
        msg.contains("writable by group or others (mode 0777)"),
        "{msg}"
    );
    assert!(msg.contains(&open_dir.display().to_string()), "{msg}");

    let good = tmp.path().join("good");
    StateDir::open(&good).unwrap();
    fs::set_permissions(good.join("sessions"), Permissions::from_mode(0o770)).unwrap();
    assert!(refused(&good).contains("sessions"));

    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &link).unwrap();
    assert!(refused(&link).contains("symlink"));
    let file = tmp.path().join("file");
    fs::write(&file, "").unwrap();
    assert!(refused(&file).contains("not a directory"));
}

#[test]
#[ignore = "needs root to give a directory away; tests/run.sh runs ignored tests as root"]
fn a_directory_owned_by_someone_else_is_refused() {
    assert_eq!(
        unix::geteuid(),
        0,
        "only root can give a directory away: run this test as root (tests/run.sh does)"
    );
    let tmp = TempDir::new("ledger-owner");
    let theirs = tmp.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    fs::set_permissions(&theirs, Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    assert!(refused(&theirs).contains("owned by uid 65534, not by uid 0"));
}

#[test]
fn journals_are_private_and_read_back_what_was_appended() {
    let tmp = TempDir::new("ledger-rw");
    let dir = StateDir::open(tmp.path()).unwrap();
    let mut j = dir.create_session("s1", start(7)).unwrap();
    assert_eq!(j.id(), "s1");
    assert_eq!(mode(j.path()), 0o600);
    let docker = Target::new("docker", "3f2a").unwrap();
    j.append(&Record::claim(&docker)).unwrap();
    j.append(&Record::claim(&Target::new("e2b", "x").unwrap()))
        .unwrap();
    j.append(&Record::release(&Target::new("e2b", "x").unwrap()))
        .unwrap();
    let v = dir.read_session("s1").unwrap();
    assert_eq!((v.id.as_str(), v.pid, v.grace_ms), ("s1", 7, 600_000));
    assert_eq!(v.claims.into_iter().collect::<Vec<_>>(), [docker]);
    assert_eq!(v.state, SessionState::Active);
    assert!(v.started_ms > 0 && v.updated_ms >= v.started_ms);
    assert!(v.sidecar_alive);
}

#[test]
fn the_lock_tells_whether_a_sidecar_lives() {
    let tmp = TempDir::new("ledger-lock");
    let dir = StateDir::open(tmp.path()).unwrap();
    let j = dir.create_session("s1", start(1)).unwrap();
    assert!(matches!(
        dir.adopt_session("s1"),
        Err(LedgerError::Locked { .. })
    ));
    assert!(matches!(
        dir.create_session("s1", start(1)),
        Err(LedgerError::Exists { .. })
    ));
    assert!(dir.read_session("s1").unwrap().sidecar_alive);
    drop(j);
    assert!(!dir.read_session("s1").unwrap().sidecar_alive);
    let mut adopted = dir.adopt_session("s1").unwrap();
    adopted
        .append(&Record::ReclaimStart { cause: None })
        .unwrap();
    assert!(matches!(
        dir.adopt_session("s1"),
        Err(LedgerError::Locked { .. })
    ));
    let v = dir.read_session("s1").unwrap();
    assert_eq!((v.state, v.sidecar_alive), (SessionState::Reclaiming, true));
}

#[test]
fn bad_ids_and_missing_start_records_are_refused() {
    let tmp = TempDir::new("ledger-ids");
    let dir = StateDir::open(tmp.path()).unwrap();
    let long = "a".repeat(65);
    for id in ["", "S1", "../s1", "s.1", "s 1", "s\u{1b}", long.as_str()] {
        let bad = |r: Result<_, LedgerError>| matches!(r, Err(LedgerError::BadSessionId(_)));
        assert!(bad(dir.create_session(id, start(1)).map(drop)), "{id:?}");
        assert!(bad(dir.adopt_session(id).map(drop)), "{id:?}");
        assert!(bad(dir.read_session(id).map(drop)), "{id:?}");
    }
    dir.create_session(&"a".repeat(64), start(1)).unwrap();
    assert!(matches!(
        dir.create_session("s2", Record::ReclaimStart { cause: None }),
        Err(LedgerError::NotStart)
    ));
    assert!(matches!(
        dir.adopt_session("nope"),
        Err(LedgerError::Io {
            op: "open journal",
            ..
        })
    ));
}

#[test]
fn sessions_are_listed_oldest_first_skipping_what_is_not_a_journal() {
    let tmp = TempDir::new("ledger-list");
    let dir = StateDir::open(tmp.path()).unwrap();
    let sessions = tmp.path().join("sessions");
    let journal = |t: u64| {
        format!("{{\"t\":{t},\"ev\":\"start\",\"owner\":\"o\",\"pid\":1,\"grace_ms\":1}}\n")
    };
    fs::write(sessions.join("b.journal"), journal(5)).unwrap();
    fs::write(sessions.join("a.journal"), journal(9)).unwrap();
    fs::write(sessions.join("c.journal"), "").unwrap();
    fs::write(sessions.join("d.new"), journal(1)).unwrap();
    fs::write(sessions.join("E.journal"), journal(1)).unwrap();
    let ids: Vec<String> = dir.sessions().unwrap().into_iter().map(|v| v.id).collect();
    assert_eq!(ids, ["b", "a"]);
    assert!(matches!(
        dir.read_session("c"),
        Err(LedgerError::NoStart { .. })
    ));
}

fn resume(pid: u32) -> Record {
    Record::Resume {
        owner: "0123456789abcdef-fedcba9876543210-8-200".into(),
        pid,
        grace_ms: 600_000,
        labels: Default::default(),
    }
}

/// A creation cut short at every write it makes (the process dead there, or the disk full),
/// by the wrapper (unsynced) and by a sidecar, then a sidecar's start of the same session
/// with a healthy disk: it always begins the session (new, or resumed when the journal was
/// published), never refuses it; and nothing is left under a staging name.
#[test]
fn a_creation_cut_short_at_any_write_never_blocks_the_next_start() {
    use faults::{Fault, Faults};
    let tmp = TempDir::new("ledger-cut");
    let dir = StateDir::open(tmp.path()).unwrap();
    let patience = std::time::Duration::from_millis(100);
    let mut cases = 0;
    for unsynced in [false, true] {
        for fault in [Fault::Die, Fault::Full] {
            for after in 0.. {
                let id = format!("cut{cases}");
                cases += 1;
                let faulty = dir.with_faults(Faults::after(after, fault));
                let made = if unsynced {
                    faulty.create_session_unsynced(&id, start(7))
                } else {
                    faulty.create_session(&id, start(7))
                };
                let published = match made {
                    // Every write went through: the fault came too late to cut anything.
                    Ok(journal) => {
                        drop(journal);
                        break;
                    }
                    Err(_) => dir.journal_file(&id).unwrap().exists(),
                };
                // What a killed process leaves: its journal (and lock) dropped with it.
                let (journal, resumed) = dir
                    .begin_session(&id, start(8), &resume(9), patience)
                    .unwrap_or_else(|e| {
                        panic!("{fault:?} after {after} writes (unsynced: {unsynced}): {e}")
                    });
                assert_eq!(resumed.is_some(), published, "{fault:?} after {after}");
                let view = journal.view().unwrap();
                assert_eq!(view.pid, if published { 9 } else { 8 });
                // A staging name may be left only as a second name of the published journal
                // (killed between publishing and removing it): pruning removes it with it.
                let staged = tmp.path().join("sessions").join(format!("{id}.new"));
                if let Ok(left) = fs::metadata(&staged) {
                    let named = fs::metadata(dir.journal_file(&id).unwrap()).unwrap();
                    assert_eq!(
                        left.ino(),
                        named.ino(),
                        "{fault:?} after {after}: staging left"
                    );
                }
            }
        }
    }
    assert!(cases > 12, "only {cases} crash points were tried");
}

#[test]
fn a_staging_file_is_cleared_only_when_its_creator_is_gone() {
    let tmp = TempDir::new("ledger-staging");
    let dir = StateDir::open(tmp.path()).unwrap();
    let staged = tmp.path().join("sessions/s1.new");
    // A live creator holds its staging file's lock: a second creation is refused, and the
    // file is left to it.
    let held = fs::File::create(&staged).unwrap();
    assert!(unix::try_lock_exclusive(&held).unwrap());
    assert!(matches!(
        dir.create_session("s1", start(7)),
        Err(LedgerError::Locked { .. })
    ));
    assert!(staged.exists());
    // Its creator died: the leftover goes, and the session is created.
    drop(held);
    let journal = dir.create_session("s1", start(7)).unwrap();
    assert_eq!(journal.view().unwrap().pid, 7);
    assert!(!staged.exists());
}

#[test]
fn a_journal_without_a_start_is_begun_again_not_refused() {
    let tmp = TempDir::new("ledger-nostart");
    let dir = StateDir::open(tmp.path()).unwrap();
    let path = dir.journal_file("s1").unwrap();
    fs::write(&path, "{\"t\":1,\"ev\":\"sta").unwrap();
    let patience = std::time::Duration::from_millis(100);
    let (journal, resumed) = dir
        .begin_session("s1", start(7), &resume(8), patience)
        .unwrap();
    assert!(resumed.is_none(), "nothing could be resumed");
    assert_eq!(journal.view().unwrap().pid, 7);
    drop(journal);
    assert_eq!(dir.read_session("s1").unwrap().pid, 7);
}
