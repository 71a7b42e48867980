//! Loop tests for the sidecar: fake provider, fake pipe, manual boot clock, paused time.

use super::*;
use crate::identity::death::Gone;
use crate::ledger::StateDir;
use crate::protocol::LineReader;
use crate::providers::fake::{self, Fake};
use crate::providers::{Kind, Sandbox};
use lease::ManualClock;
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;

fn sandbox(id: &str, session: Option<&str>) -> Sandbox {
    fake::sandbox(id, Kind::Instance, session)
}

struct Harness {
    fake: Arc<Fake>,
    clock: ManualClock,
    pipe: tokio::io::DuplexStream,
    kill_owner: Option<oneshot::Sender<()>>,
    stop: Option<oneshot::Sender<()>>,
    proxy: tokio::sync::mpsc::UnboundedSender<crate::proxy::claim::Ask>,
    run: tokio::task::JoinHandle<Ended>,
    dir: std::path::PathBuf,
    /// What the TTL keeper is told: `true` once the watch ended.
    ending: ttl::Halt,
}

impl Harness {
    fn start(session: &str, sandboxes: Vec<Sandbox>) -> Harness {
        Harness::start_with(session, Fake::holding(sandboxes), None)
    }

    /// A sidecar over `fake`, told how `bye` went through `report` when given.
    fn start_with(session: &str, fake: Arc<Fake>, report: Option<ByeReport>) -> Harness {
        Harness::start_set(session, fake, |sidecar| {
            if let Some(report) = report {
                sidecar.on_bye(report);
            }
        })
    }

    /// A sidecar over `fake`, `set` up before it runs.
    fn start_set(
        session: &str,
        fake: Arc<Fake>,
        set: impl FnOnce(&mut Sidecar<ManualClock>),
    ) -> Harness {
        let dir =
            std::env::temp_dir().join(format!("sandguard-watch-{session}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = StateDir::open(&dir).unwrap();
        let start = Record::Start {
            owner: "x".into(),
            pid: 1,
            grace_ms: 600_000,
            labels: Default::default(),
        };
        let journal = state.create_session(session, start).unwrap();
        let clock = ManualClock::default();
        let options = Options {
            concurrency: 4,
            deadline: Duration::from_secs(60),
            retry_initial: Duration::from_millis(100),
            retry_max: Duration::from_secs(1),
            settle: Some(Duration::from_secs(2)),
            rates: Default::default(),
            paces: Default::default(),
            cutoff: Default::default(),
            windows: Default::default(),
        };
        let providers: Vec<Arc<dyn Provider>> = vec![fake.clone()];
        let mut sidecar = Sidecar::new(
            session.into(),
            providers,
            journal,
            Lease::new(clock.clone(), Duration::from_secs(600)),
            options,
        );
        set(&mut sidecar);
        let (pipe, sidecar_end) = tokio::io::duplex(64 * 1024);
        let (kill_owner, owner_dead) = oneshot::channel::<()>();
        let (stop, stopped) = oneshot::channel::<()>();
        let (proxy, proxy_claims) = tokio::sync::mpsc::unbounded_channel();
        let triggers = Triggers {
            exit: None,
            proxy: Some(proxy_claims),
            owner: Box::pin(async move {
                let _ = owner_dead.await;
                Gone::Exited
            }),
            control: Some(LineReader::new(sidecar_end)),
            stop: Box::pin(async move {
                let _ = stopped.await;
            }),
        };
        let ending = sidecar.halt();
        let run = tokio::spawn(sidecar.run(triggers));
        Harness {
            ending,
            fake,
            clock,
            pipe,
            kill_owner: Some(kill_owner),
            stop: Some(stop),
            proxy,
            run,
            dir,
        }
    }

    async fn send(&mut self, line: &str) {
        self.pipe.write_all(line.as_bytes()).await.unwrap();
        // Let the sidecar read it.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    async fn finish(self) -> (Ended, Vec<String>, crate::ledger::SessionView) {
        let Harness { fake, run, dir, .. } = self;
        let outcome = run.await.unwrap();
        let view = StateDir::open(&dir).unwrap().sessions().unwrap().remove(0);
        let remaining = fake.remaining();
        let _ = std::fs::remove_dir_all(&dir);
        (outcome, remaining, view)
    }
}

#[tokio::test(start_paused = true)]
async fn owner_death_reclaims_labels_and_claims_but_not_detached_or_strangers() {
    let s = "death1";
    let mut h = Harness::start(
        s,
        vec![
            sandbox("a", Some(s)),
            sandbox("b", Some(s)),
            sandbox("claimed", None),
            sandbox("kept", Some(s)),
            sandbox("stranger", None),
            sandbox("other", Some("zzz")),
        ],
    );
    h.send("claim fake claimed\ndetach fake kept\nclaim fake released\nrelease fake released\n")
        .await;
    h.kill_owner.take().unwrap().send(()).unwrap();
    let (outcome, remaining, view) = h.finish().await;
    assert_eq!(outcome.cause, Some(EndCause::OwnerExited));
    assert_eq!(outcome.state, SessionState::Reclaimed);
    assert_eq!(remaining, vec!["kept", "other", "stranger"]);
    assert_eq!(view.state, SessionState::Reclaimed);
}

/// Issue 22 point 8: the TTL keeper is told the owner is gone before the reclaim starts, so
/// a reclaim whose removals keep failing renews nothing meanwhile.
#[tokio::test(start_paused = true)]
async fn the_keeper_is_told_of_the_death_before_the_reclaim_starts() {
    let s = "ending1";
    let fake = Fake::flaky(vec![sandbox("a", Some(s))], u32::MAX, None);
    let mut h = Harness::start_with(s, fake, None);
    assert!(!h.ending.is_ending());
    h.kill_owner.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(1), h.ending.ended())
        .await
        .expect("told within a second");
    assert!(!h.run.is_finished(), "told while the reclaim still runs");
    let (outcome, remaining, _) = h.finish().await;
    assert_eq!(outcome.state, SessionState::Pending);
    assert_eq!(remaining, vec!["a"]);
}

#[tokio::test(start_paused = true)]
async fn a_claim_written_just_before_death_is_reclaimed() {
    let s = "death2";
    let mut h = Harness::start(s, vec![sandbox("late", None)]);
    h.pipe.write_all(b"claim fake late\n").await.unwrap();
    h.kill_owner.take().unwrap().send(()).unwrap();
    let (_, remaining, _) = h.finish().await;
    assert!(remaining.is_empty(), "{remaining:?}");
}

#[tokio::test(start_paused = true)]
async fn a_proxy_claim_is_acknowledged_and_reclaimed() {
    let s = "proxy1";
    let h = Harness::start(s, vec![sandbox("made", None), sandbox("stranger", None)]);
    let (ack, acked) = oneshot::channel();
    let target = crate::protocol::Target::new("fake", "made").unwrap();
    h.proxy
        .send(crate::proxy::claim::Ask::Claim(
            crate::proxy::claim::Claim {
                target,
                hold: crate::proxy::claim::Hold::Claim,
                size: None,
                ack,
            },
        ))
        .unwrap();
    acked.await.expect("the sidecar acknowledges a proxy claim");
    let mut h = h;
    h.kill_owner.take().unwrap().send(()).unwrap();
    let (_, remaining, _) = h.finish().await;
    assert_eq!(remaining, vec!["stranger"]);
}

#[tokio::test(start_paused = true)]
async fn the_lease_expires_after_the_grace_without_heartbeats() {
    let s = "lease1";
    let mut h = Harness::start(s, vec![sandbox("a", Some(s))]);
    h.send("renew\n").await;
    h.clock.advance(Duration::from_secs(300));
    tokio::time::sleep(Duration::from_secs(300)).await;
    h.send("renew\n").await;
    assert!(!h.run.is_finished(), "a renewed lease holds");
    h.clock.advance(Duration::from_secs(600));
    let (outcome, remaining, _) = h.finish().await;
    assert_eq!(outcome.cause, Some(EndCause::LeaseExpired));
    assert!(remaining.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_suspend_past_the_grace_reclaims_on_waking() {
    let s = "suspend1";
    let mut h = Harness::start(s, vec![sandbox("a", Some(s))]);
    h.send("renew\n").await;
    // The machine sleeps for two hours: the boot clock jumps, tokio's clock does not.
    h.clock.advance(Duration::from_secs(7200));
    let started = tokio::time::Instant::now();
    let (outcome, remaining, _) = h.finish().await;
    assert_eq!(outcome.cause, Some(EndCause::LeaseExpired));
    assert!(remaining.is_empty());
    // Noticed within one check interval of awake time (plus the settle pass).
    assert!(
        started.elapsed() <= lease::CHECK_EVERY + Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn without_heartbeats_there_is_no_lease_to_expire() {
    let s = "nolease";
    let mut h = Harness::start(s, vec![sandbox("a", Some(s))]);
    h.clock.advance(Duration::from_secs(86_400));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!h.run.is_finished());
    h.send("bye\n").await;
    let (outcome, _, _) = h.finish().await;
    assert_eq!(outcome.cause, Some(EndCause::Bye));
}

#[tokio::test(start_paused = true)]
async fn bye_reclaims_what_is_left_and_ends_clean() {
    let s = "bye1";
    let mut h = Harness::start(s, vec![sandbox("a", Some(s)), sandbox("c", None)]);
    h.send("claim fake c\nbye\n").await;
    let (outcome, remaining, view) = h.finish().await;
    assert_eq!(outcome.state, SessionState::Clean);
    assert!(remaining.is_empty());
    assert_eq!(view.state, SessionState::Clean);
}

/// What the owner is told after `bye`, and when (paused time).
fn told() -> (
    ByeReport,
    std::sync::mpsc::Receiver<(ByeOutcome, tokio::time::Instant)>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let report: ByeReport = Box::new(move |o: &ByeOutcome| {
        let _ = tx.send((o.clone(), tokio::time::Instant::now()));
    });
    (report, rx)
}

#[tokio::test(start_paused = true)]
async fn bye_tells_the_owner_before_the_settle_pass() {
    let s = "byetold";
    let (report, rx) = told();
    let fake = Fake::holding(vec![sandbox("a", Some(s))]);
    let mut h = Harness::start_with(s, fake, Some(report));
    let said = tokio::time::Instant::now();
    h.send("bye\n").await;
    let (outcome, remaining, view) = h.finish().await;
    let ended = tokio::time::Instant::now();
    let (word, when) = rx.try_recv().expect("told once");
    assert!(rx.try_recv().is_err(), "told once only");
    assert_eq!(word, ByeOutcome::Clean);
    assert!(when - said < Duration::from_secs(1), "{:?}", when - said);
    assert!(
        ended - said >= Duration::from_secs(2),
        "the settle ran after"
    );
    assert_eq!(outcome.state, SessionState::Clean);
    assert!(remaining.is_empty());
    assert_eq!(view.state, SessionState::Clean);
}

#[tokio::test(start_paused = true)]
async fn bye_tells_the_owner_what_was_left() {
    let s = "byeleft";
    let (report, rx) = told();
    let fake = Fake::holding(vec![sandbox("a", Some(s))]);
    fake.fail_lists
        .store(u32::MAX, std::sync::atomic::Ordering::SeqCst);
    let mut h = Harness::start_with(s, fake, Some(report));
    h.send("bye\n").await;
    let (outcome, remaining, _) = h.finish().await;
    let (word, _) = rx.try_recv().expect("told");
    let ByeOutcome::Left { count: 1, items } = &word else {
        panic!("{word}")
    };
    assert_eq!(
        (items[0].provider.as_str(), items[0].id.as_str()),
        ("fake", "*")
    );
    assert!(items[0].reason.starts_with("not listed: "), "{word}");
    assert_eq!(outcome.state, SessionState::Pending);
    assert_eq!(remaining, ["a"]);
}

#[tokio::test(start_paused = true)]
async fn only_bye_is_reported() {
    let s = "deathuntold";
    let (report, rx) = told();
    let fake = Fake::holding(vec![sandbox("a", Some(s))]);
    let mut h = Harness::start_with(s, fake, Some(report));
    h.kill_owner.take().unwrap().send(()).unwrap();
    let (outcome, remaining, _) = h.finish().await;
    assert_eq!(outcome.state, SessionState::Reclaimed);
    assert!(remaining.is_empty());
    assert!(rx.try_recv().is_err(), "nobody is waiting for a dead owner");
}

#[tokio::test(start_paused = true)]
async fn eof_while_the_owner_lives_changes_nothing_and_stop_reclaims_nothing() {
    let s = "eof1";
    let mut h = Harness::start(s, vec![sandbox("a", Some(s))]);
    h.send("claim fake a\n").await;
    let (dummy, _) = tokio::io::duplex(1);
    drop(std::mem::replace(&mut h.pipe, dummy));
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(!h.run.is_finished(), "EOF alone must not end the watch");
    h.stop.take().unwrap().send(()).unwrap();
    let (outcome, remaining, view) = h.finish().await;
    assert_eq!(outcome.cause, None);
    assert_eq!(remaining, vec!["a"]);
    assert_eq!(view.state, SessionState::Active);
    assert!(view.claims.iter().any(|t| t.id == "a"));
}

#[tokio::test(start_paused = true)]
async fn claims_over_a_limit_are_reported_once_and_nothing_is_refused() {
    let s = "observed";
    let told = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = told.clone();
    let mut h = Harness::start_set(s, Fake::holding(Vec::new()), |sidecar| {
        let limits = crate::budget::Limits {
            sandboxes: Some(1),
            creates: Some(2),
            ..Default::default()
        };
        sidecar.limit(limits, Default::default());
        sidecar.on_notice(Box::new(move |line: &str| {
            sink.lock().unwrap().push(line.into());
        }));
    });
    h.send("claim fake a\n").await;
    assert!(told.lock().unwrap().is_empty(), "one claim is within both");
    h.send("claim fake b\nclaim fake c\nclaim fake d\n").await;
    let lines = told.lock().unwrap().clone();
    assert_eq!(lines.len(), 2, "each limit once: {lines:?}");
    assert!(lines[0].starts_with("this session holds 4 sandboxes, over its limit `sandboxes` (1)"));
    assert!(
        lines[1].starts_with("this session was told of 4 sandboxes, over its limit `creates` (2)")
    );
    let view = StateDir::open(&h.dir)
        .unwrap()
        .sessions()
        .unwrap()
        .remove(0);
    assert_eq!(
        view.claims.len(),
        4,
        "every claim was taken: {:?}",
        view.claims
    );
    h.kill_owner.take().unwrap().send(()).unwrap();
    h.finish().await;
}

/// A flood of refused creates is journaled at each doubling while it lasts, and its exact
/// count once the session ends (`super::refusals`).
#[tokio::test(start_paused = true)]
async fn refused_creates_are_journaled_per_doubling_and_counted_exactly_at_the_end() {
    let s = "refusals";
    let mut h = Harness::start_set(s, Fake::holding(Vec::new()), |sidecar| {
        let limits = crate::budget::Limits {
            creates: Some(0),
            ..Default::default()
        };
        sidecar.limit(limits, Default::default());
    });
    for _ in 0..10 {
        let (answer, answered) = oneshot::channel();
        let create = [("image".to_string(), "busybox".to_string())].into();
        let ask = crate::proxy::claim::Ask::Slot {
            provider: "fake".into(),
            create,
            answer,
        };
        h.proxy.send(ask).unwrap();
        assert!(answered.await.unwrap().is_err(), "over `creates`");
    }
    let journal = std::fs::read_to_string(h.dir.join(format!("sessions/{s}.journal"))).unwrap();
    let written: Vec<&str> = journal
        .lines()
        .filter(|l| l.contains(r#""ev":"create_refused""#))
        .collect();
    assert_eq!(written.len(), 4, "the 1st, 2nd, 4th and 8th: {journal}");
    assert!(written[3].contains(r#""n":8"#) && written[3].contains(r#""image":"busybox""#));
    h.kill_owner.take().unwrap().send(()).unwrap();
    let (_, _, view) = h.finish().await;
    assert_eq!(
        view.slots.refused.of("fake", "creates"),
        10,
        "the 10th, at the end"
    );
}
