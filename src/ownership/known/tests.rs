//! The cache a sidecar keeps of other sessions between its batches of claims: a journal that
//! changed is read again, its lock is probed every time, and a torn last line is read once it
//! is whole.

use std::io::Write;
use std::sync::Arc;

use super::{Cache, Known};
use crate::ledger::testutil::{start, TempDir};
use crate::ledger::{Record, StateDir};
use crate::ownership::Sidecar;
use crate::protocol::Target;
use crate::providers::fake::Fake;
use crate::providers::{Kind, Provider, Sandbox};

fn t(id: &str) -> Target {
    Target::new("fake", id).unwrap()
}

/// The sessions other than `me` that claimed `id`, as a batch using `cache` sees them.
fn claimers(root: &std::path::Path, cache: &Arc<Cache>, id: &str) -> Vec<String> {
    let providers: Vec<Arc<dyn Provider>> = vec![Arc::new(Fake::default())];
    let known = Known::lazy(Some(root.to_path_buf()), &providers)
        .but("me")
        .cached(cache);
    let sandbox = Sandbox::claimed("fake", Kind::Instance, id);
    known
        .claimers(&sandbox, "me")
        .into_iter()
        .map(|(s, _)| s.to_string())
        .collect()
}

#[test]
fn a_journal_that_changed_between_two_batches_is_read_again() {
    let dir = TempDir::new("known-cache-changed");
    let state = StateDir::open(dir.path()).unwrap();
    let mut other = state.create_session("other", start(7)).unwrap();
    other.write(&Record::claim(&t("x"))).unwrap();
    other.sync().unwrap();
    let cache = Arc::new(Cache::default());
    assert_eq!(claimers(dir.path(), &cache, "x"), ["other"]);
    // Released: a batch that served the cached view would still refuse a claim of x.
    other.write(&Record::release(&t("x"))).unwrap();
    other.write(&Record::claim(&t("y"))).unwrap();
    other.sync().unwrap();
    assert!(claimers(dir.path(), &cache, "x").is_empty());
    assert_eq!(claimers(dir.path(), &cache, "y"), ["other"]);
    // A session that appears is read; one that goes away is forgotten.
    let mut third = state.create_session("third", start(7)).unwrap();
    third.write(&Record::claim(&t("y"))).unwrap();
    third.sync().unwrap();
    assert_eq!(claimers(dir.path(), &cache, "y"), ["other", "third"]);
    drop(third);
    std::fs::remove_file(state.journal_file("third").unwrap()).unwrap();
    assert_eq!(claimers(dir.path(), &cache, "y"), ["other"]);
}

#[test]
fn a_torn_last_line_is_read_once_it_is_whole() {
    let dir = TempDir::new("known-cache-torn");
    let state = StateDir::open(dir.path()).unwrap();
    drop(state.create_session("other", start(7)).unwrap());
    let path = state.journal_file("other").unwrap();
    let started = std::fs::read(&path).unwrap().len();
    {
        let mut j = state.adopt_session("other").unwrap();
        j.write(&Record::claim(&t("x"))).unwrap();
        j.sync().unwrap();
    }
    let full = std::fs::read(&path).unwrap();
    let claim = &full[started..];
    let cache = Arc::new(Cache::default());
    // Half a claim line: a write cut short, ignored.
    std::fs::write(&path, &full[..started + claim.len() / 2]).unwrap();
    assert!(claimers(dir.path(), &cache, "x").is_empty());
    // The rest of the line lands: read again, the claim counts.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&claim[claim.len() / 2..]).unwrap();
    drop(f);
    assert_eq!(claimers(dir.path(), &cache, "x"), ["other"]);
}

#[test]
fn a_lock_given_up_without_a_line_is_seen() {
    let dir = TempDir::new("known-cache-lock");
    let state = StateDir::open(dir.path()).unwrap();
    let mut other = state.create_session("other", start(7)).unwrap();
    other.write(&Record::claim(&t("x"))).unwrap();
    other.sync().unwrap();
    let cache = Arc::new(Cache::default());
    let providers: Vec<Arc<dyn Provider>> = vec![Arc::new(Fake::default())];
    let standing = || {
        let known = Known::lazy(Some(dir.path().to_path_buf()), &providers)
            .but("me")
            .cached(&cache);
        let view = known.view("other").cloned().unwrap();
        known.standing(&view).sidecar
    };
    assert_eq!(standing(), Sidecar::Alive);
    // Its sidecar dies: the journal does not change, its lock is free. (A process another
    // test forks may hold the descriptor for a moment before its exec closes it.)
    drop(other);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while standing() != Sidecar::Gone {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock was seen held"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
