//! Loop tests of the reclaim path with the in-memory provider and paused time.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::providers::fake::{sandbox, Fake};
use crate::providers::Kind;

fn options() -> Options {
    Options {
        concurrency: 4,
        deadline: Duration::from_secs(60),
        retry_initial: Duration::from_millis(100),
        retry_max: Duration::from_secs(5),
        settle: None,
        rates: Default::default(),
        paces: Default::default(),
        cutoff: Default::default(),
        windows: Default::default(),
    }
}

fn plan(session: &str) -> Plan {
    Plan {
        selector: Selector::session(session),
        claims: vec![],
        keep: vec![],
        known: Arc::new(crate::ownership::known::Known::lazy(None, &[])),
        own: crate::ownership::Session::GUARDED,
        refused: vec![],
        listed: None,
    }
}

#[tokio::test(start_paused = true)]
async fn kinds_go_in_order_and_strangers_are_left_alone() {
    let p = Fake::holding(vec![
        sandbox("v", Kind::Volume, Some("s")),
        sandbox("n", Kind::Network, Some("s")),
        sandbox("c", Kind::Instance, Some("s")),
        sandbox("x", Kind::Instance, Some("other")),
        sandbox("y", Kind::Instance, None),
    ]);
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let report = reclaim(&providers, &plan("s"), async { vec![] }, &options()).await;
    assert!(report.is_clean());
    assert_eq!(report.removals.len(), 3);
    assert_eq!(report.listed, vec!["fake".to_string()]);
    let kinds: Vec<Kind> = p
        .calls_log
        .lock()
        .unwrap()
        .iter()
        .map(|(_, k, _)| *k)
        .collect();
    assert_eq!(kinds, vec![Kind::Instance, Kind::Network, Kind::Volume]);
    assert_eq!(p.remaining(), vec!["x", "y"]);
}

#[tokio::test(start_paused = true)]
async fn claims_detached_and_late_arrivals() {
    let mut detached = sandbox("d", Kind::Instance, Some("s"));
    detached
        .labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    let p = Fake::holding(vec![
        sandbox("c", Kind::Instance, None),
        sandbox("k", Kind::Instance, Some("s")),
        detached,
        sandbox("late", Kind::Instance, None),
    ]);
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let mut plan = plan("s");
    plan.claims = vec![sandbox("c", Kind::Instance, None)];
    plan.keep = vec![sandbox("k", Kind::Instance, None)];
    let opts = Options {
        settle: Some(Duration::from_secs(2)),
        rates: Default::default(),
        ..options()
    };
    let report = reclaim(
        &providers,
        &plan,
        async { vec![sandbox("late", Kind::Instance, None)] },
        &opts,
    )
    .await;
    assert!(report.is_clean(), "{:?}", report.removals);
    assert_eq!(p.remaining(), vec!["d", "k"]);
}

#[tokio::test(start_paused = true)]
async fn a_detach_by_prefix_keeps_the_sandbox_it_names() {
    let full = "0123456789abcdef0123456789abcdef";
    let p = Arc::new(Fake {
        sandboxes: std::sync::Mutex::new(vec![
            sandbox(full, Kind::Instance, Some("s")),
            sandbox("0123456789ff9999", Kind::Instance, Some("s")),
        ]),
        prefix_ids: true,
        ..Default::default()
    });
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let mut plan = plan("s");
    plan.keep = vec![sandbox(&full[..12], Kind::Instance, None)];
    // A claim of the same sandbox by another prefix is kept too.
    plan.claims = vec![sandbox(&full[..16], Kind::Instance, None)];
    let report = reclaim(&providers, &plan, async { vec![] }, &options()).await;
    assert!(report.is_clean(), "{:?}", report.removals);
    assert_eq!(p.remaining(), vec![full.to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_listing_that_fails_for_a_while_is_tried_again_until_it_answers() {
    let p = Fake::holding(vec![sandbox("c", Kind::Instance, Some("s"))]);
    p.fail_lists.store(6, Ordering::SeqCst);
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let started = Instant::now();
    let report = reclaim(&providers, &plan("s"), async { vec![] }, &options()).await;
    assert!(report.is_clean(), "{report:?}");
    assert!(p.remaining().is_empty());
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_listing_that_never_answers_is_reported_at_the_deadline() {
    let p = Fake::holding(vec![sandbox("c", Kind::Instance, Some("s"))]);
    p.fail_lists.store(u32::MAX, Ordering::SeqCst);
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let opts = Options {
        deadline: Duration::from_secs(10),
        ..options()
    };
    let report = reclaim(&providers, &plan("s"), async { vec![] }, &opts).await;
    assert_eq!(report.list_failures.len(), 1);
    assert!(report.listed.is_empty() && !report.is_clean());
}

#[tokio::test(start_paused = true)]
async fn a_second_pass_listing_failure_is_kept() {
    let p = Fake::holding(vec![sandbox("c", Kind::Instance, Some("s"))]);
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let opts = Options {
        settle: Some(Duration::from_secs(2)),
        rates: Default::default(),
        deadline: Duration::from_secs(10),
        ..options()
    };
    let fails_later = {
        let p = p.clone();
        async move {
            p.fail_lists.store(u32::MAX, Ordering::SeqCst);
            vec![]
        }
    };
    let report = reclaim(&providers, &plan("s"), fails_later, &opts).await;
    assert_eq!(report.list_failures.len(), 1, "{report:?}");
    assert!(!report.is_clean());
}

/// A claim no listing answered for is looked up and judged by what it carries: labelled
/// `sandguard.detached=true` alone, it stays; gone, it is gone; its id now naming another
/// object than the one the claim was pinned to, it is refused and that object stays.
#[tokio::test(start_paused = true)]
async fn a_claim_no_listing_found_is_judged_by_what_it_carries() {
    let mut detached = sandbox("d", Kind::Instance, None);
    detached
        .labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    let mut reused = sandbox("v", Kind::Instance, None);
    reused.identity = Some("2".into());
    let mut pinned = sandbox("v", Kind::Instance, None);
    pinned.identity = Some("1".into());
    let p = Arc::new(Fake {
        sandboxes: std::sync::Mutex::new(vec![
            detached,
            reused,
            sandbox("c", Kind::Instance, None),
        ]),
        reuses_ids: true,
        ..Default::default()
    });
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let mut plan = plan("s");
    plan.claims = vec![
        sandbox("d", Kind::Instance, None),
        sandbox("c", Kind::Instance, None),
        sandbox("gone", Kind::Instance, None),
        pinned,
    ];
    let report = reclaim(&providers, &plan, async { vec![] }, &options()).await;
    let outcome = |id: &str| {
        report
            .removals
            .iter()
            .find(|r| r.sandbox.id == id)
            .map(|r| r.outcome.as_str())
    };
    assert_eq!(outcome("c"), Some("removed"));
    assert_eq!(outcome("gone"), Some("gone"));
    assert_eq!(outcome("v"), Some("refused"));
    assert_eq!(outcome("d"), None, "a detached one is kept without a word");
    assert_eq!(p.remaining(), vec!["d", "v"]);
}

/// A provider that cannot look up one sandbox is listed once, whole, for the claims no
/// listing by label found: a claimed sandbox labelled `sandguard.detached=true` alone stays;
/// the plain one goes; one listed nowhere is judged as it stands (its removal finds it gone).
#[tokio::test(start_paused = true)]
async fn a_provider_without_look_ups_is_listed_whole_for_its_claims() {
    let mut detached = sandbox("d", Kind::Instance, None);
    detached
        .labels
        .insert(crate::labels::DETACHED.into(), "true".into());
    let p = Arc::new(Fake {
        sandboxes: std::sync::Mutex::new(vec![detached, sandbox("c", Kind::Instance, None)]),
        no_lookup: true,
        ..Default::default()
    });
    let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
    let mut plan = plan("s");
    plan.claims = vec![
        sandbox("d", Kind::Instance, None),
        sandbox("c", Kind::Instance, None),
        sandbox("gone", Kind::Instance, None),
    ];
    let report = reclaim(&providers, &plan, async { vec![] }, &options()).await;
    let outcome = |id: &str| {
        report
            .removals
            .iter()
            .find(|r| r.sandbox.id == id)
            .map(|r| r.outcome.as_str())
    };
    assert_eq!(outcome("c"), Some("removed"));
    assert_eq!(outcome("gone"), Some("gone"));
    assert_eq!(outcome("d"), None, "a detached one is kept without a word");
    assert_eq!(p.remaining(), vec!["d"]);
}

/// Following that is whole spares the first pass its listing only where a settle pass will
/// list: the instance following missed (the fake never knows a session's last one, as a
/// create's news at the instant of death is still on its way) is found either way, and the
/// network following never holds is listed too.
#[tokio::test(start_paused = true)]
async fn whole_following_spares_the_first_listing_only_before_a_settle_pass() {
    for (settle, lists) in [(None, 1), (Some(Duration::from_millis(500)), 1)] {
        let p = Arc::new(Fake {
            sandboxes: Mutex::new(vec![
                sandbox("a", Kind::Instance, Some("s")),
                sandbox("n", Kind::Network, Some("s")),
                sandbox("stranger", Kind::Instance, Some("t")),
                sandbox("b", Kind::Instance, Some("s")),
            ]),
            follows: true,
            ..Default::default()
        });
        let (gone, _) = tokio::sync::mpsc::unbounded_channel();
        p.followed.lock().unwrap().insert("s".into(), gone);
        let known = p.known("s").expect("followed");
        assert!(known.whole);
        assert_eq!(known.sandboxes.len(), 1, "b is not known yet");
        let providers: Vec<Arc<dyn Provider>> = vec![p.clone()];
        let opts = Options {
            settle,
            ..options()
        };
        let report = reclaim(&providers, &plan("s"), async { vec![] }, &opts).await;
        assert!(report.is_clean(), "{:?}", report.removals);
        assert_eq!(p.remaining(), vec!["stranger"], "settle {settle:?}");
        assert_eq!(p.lists.load(Ordering::SeqCst), lists, "settle {settle:?}");
        let first = p.calls_log.lock().unwrap()[0].0.clone();
        assert_eq!(first, "a", "what was followed goes first");
    }
}
