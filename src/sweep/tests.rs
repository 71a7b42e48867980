//! Unit tests of `sweep`: a pass over pending sessions with the providers it has and those it
//! lacks, and the service's baseline and stop, against the fake provider and a real ledger.
//! The same behaviours through the binary: `tests/sweep/partial.rs`, `service.rs`,
//! `metrics.rs`.

use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::service::{self, SweepService};
use super::*;
use crate::ledger::testutil::{start, TempDir};
use crate::ledger::{Record, StateDir};
use crate::metrics::Metrics;
use crate::protocol::Target;
use crate::providers::fake::{sandbox, Fake};

fn options(deadline: Duration) -> Options {
    Options {
        concurrency: 4,
        deadline,
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
        settle: None,
        rates: Default::default(),
        paces: Default::default(),
        windows: Default::default(),
        cutoff: Default::default(),
    }
}

/// Session `id`, whose sidecar had `fake` and `acme`, left pending by its reclaim: on the
/// fake sandbox `a` (its removal failed), or with `acme` not listed.
fn pending(dir: &StateDir, id: &str, on: &str) {
    let mut j = dir.create_session(id, start(7)).unwrap();
    let records = [
        Record::Providers {
            names: vec!["fake".into(), "acme".into()],
        },
        Record::ReclaimStart {
            cause: Some(EndCause::OwnerExited),
        },
        match on {
            "fake" => Record::Failed {
                provider: "fake".into(),
                id: "a".into(),
                error: "boom".into(),
                pending: true,
            },
            _ => Record::Unlisted {
                provider: on.into(),
                error: "down".into(),
            },
        },
        Record::End {
            state: SessionState::Pending,
        },
    ];
    for r in &records {
        j.append(r).unwrap();
    }
    drop(j);
    // The journal's lock is its sidecar's life, and a child another test's thread forks holds
    // a copy of the descriptor, and so the lock, until it execs: the pass then took the
    // sidecar for alive and decided nothing (seen once, in a loaded CI run). Wait until the
    // lock reads free, as a dead sidecar's does.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while dir
        .sessions()
        .unwrap()
        .iter()
        .any(|s| s.id == id && s.sidecar_alive)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{id}'s lock stayed held"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn fake_holding_a(session: &str) -> Arc<Fake> {
    Fake::holding(vec![sandbox("a", Kind::Instance, Some(session))])
}

#[tokio::test]
async fn a_pending_session_that_owes_only_providers_the_sweep_lacks_is_left_untouched() {
    let tmp = TempDir::new("sweep-elsewhere");
    let dir = StateDir::open(tmp.path()).unwrap();
    pending(&dir, "s1", "acme");
    let journal = dir.journal_file("s1").unwrap();
    let before = std::fs::read(&journal).unwrap();
    let providers: Vec<Arc<dyn Provider>> = vec![fake_holding_a("s1")];

    let pass = pass(&dir, &providers, &options(Duration::from_secs(5)), false).await;
    let d = &pass.decisions[0];
    assert_eq!(
        (d.session.as_str(), d.verdict),
        ("s1", SessionVerdict::Leave)
    );
    assert!(d.reason.contains("pending on acme only"), "{}", d.reason);
    assert!(pass.ended.is_empty());
    assert_eq!(std::fs::read(&journal).unwrap(), before, "nothing written");
}

#[tokio::test]
async fn a_pending_session_whose_other_providers_are_done_is_ended_by_a_sweep_of_the_rest() {
    let tmp = TempDir::new("sweep-rest");
    let dir = StateDir::open(tmp.path()).unwrap();
    // Its reclaim listed and emptied acme; only the fake sandbox `a` is left.
    pending(&dir, "s2", "fake");
    let fake = fake_holding_a("s2");
    let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];

    let pass = pass(&dir, &providers, &options(Duration::from_secs(5)), false).await;
    assert_eq!(pass.decisions[0].verdict, SessionVerdict::Reclaim);
    assert_eq!(pass.ended, [("s2".to_string(), SessionState::Reclaimed)]);
    assert!(fake.remaining().is_empty());
}

fn service_of(dir: &StateDir, fake: Arc<Fake>, metrics: Option<Arc<Metrics>>) -> SweepService {
    SweepService {
        state: dir.clone(),
        providers: vec![fake],
        options: options(Duration::from_secs(600)),
        every: Duration::from_secs(3600),
        dry_run: false,
        prune_after: None,
        fleet: None,
        store: None,
        metrics,
        notify: None,
    }
}

#[tokio::test]
async fn a_stopped_service_cuts_its_pass_short_and_leaves_the_session_pending() {
    let tmp = TempDir::new("sweep-cut");
    let dir = StateDir::open(tmp.path()).unwrap();
    pending(&dir, "s3", "fake");
    // Its removals fail for good and all: with a ten-minute deadline, the pass would retry
    // them for ten minutes.
    let fake = Arc::new(Fake {
        sandboxes: Mutex::new(vec![sandbox("a", Kind::Instance, Some("s3"))]),
        fail_removes: AtomicU32::new(u32::MAX),
        ..Fake::default()
    });
    let passes = Mutex::new(0);
    let began = std::time::Instant::now();
    service::serve(
        service_of(&dir, fake.clone(), None),
        tokio::time::sleep(Duration::from_millis(500)),
        |report| {
            if let service::Report::Pass(_) = report {
                *passes.lock().unwrap() += 1;
            }
        },
    )
    .await;
    let took = began.elapsed();
    assert!(took < Duration::from_secs(2), "stopped after {took:?}");
    assert_eq!(*passes.lock().unwrap(), 1, "the cut pass is reported");
    let (view, _) = dir.read_history("s3").unwrap();
    assert_eq!(view.state, SessionState::Pending);
    let target = Target::new("fake", "a").unwrap();
    assert!(view.pending.contains_key(&target), "{:?}", view.pending);
    assert_eq!(fake.remaining(), ["a"]);
}

#[tokio::test]
async fn the_first_pass_of_a_service_is_counted_from_a_baseline_taken_before_it() {
    let tmp = TempDir::new("sweep-baseline");
    let dir = StateDir::open(tmp.path()).unwrap();
    pending(&dir, "s4", "fake");
    let metrics = Arc::new(Metrics::new("h", Duration::from_secs(3600)));
    let passed = tokio::sync::Notify::new();
    service::serve(
        service_of(&dir, fake_holding_a("s4"), Some(metrics.clone())),
        passed.notified(),
        |report| {
            if let service::Report::Pass(_) = report {
                passed.notify_one();
            }
        },
    )
    .await;
    let body = metrics.scrape("text/plain").body;
    let line = r#"sandguard_sandboxes_reclaimed_total{host="h",provider="fake",cause="finished_pending"} 1"#;
    assert!(body.lines().any(|l| l == line), "{line} not in:\n{body}");
    assert!(
        body.contains("sandguard_sessions_pending{host=\"h\"} 0"),
        "{body}"
    );
}
