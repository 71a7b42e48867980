//! Unit tests of `metrics`: where it may serve, what a look at the ledger counts, and what a
//! scrape says. The service itself is tested through the binary (`tests/sweep/metrics.rs`).

use std::time::Duration;

use super::ledger::Tally;
use super::serve::Endpoint;
use super::Metrics;
use crate::ledger::testutil::{start, TempDir};
use crate::ledger::{EndCause, Journal, Record, SessionState, StateDir};
use crate::protocol::Target;
use crate::providers::fake::sandbox;
use crate::providers::Kind;
use crate::reclaim::{Failure, Outcome, Removal};
use crate::sweep::{Pass, Untold};

#[test]
fn metrics_are_served_on_loopback_or_a_socket_path_only() {
    let tcp = |s: &str| match s.parse::<Endpoint>() {
        Ok(Endpoint::Tcp(addr)) => addr.to_string(),
        other => panic!("{s}: {other:?}"),
    };
    assert_eq!(tcp("127.0.0.1:9464"), "127.0.0.1:9464");
    assert_eq!(tcp("[::1]:9464"), "[::1]:9464");
    assert_eq!(tcp("localhost:9464"), "127.0.0.1:9464");
    assert_eq!(
        "/run/sandguard/metrics.sock".parse::<Endpoint>(),
        Ok(Endpoint::Unix("/run/sandguard/metrics.sock".into()))
    );
    assert_eq!(
        "./metrics.sock".parse::<Endpoint>(),
        Ok(Endpoint::Unix("./metrics.sock".into()))
    );
    for wider in [
        "0.0.0.0:9464",
        "[::]:9464",
        "10.0.0.7:9464",
        "example.com:9464",
        "localhost:http",
        "9464",
        "",
    ] {
        let e = wider.parse::<Endpoint>().unwrap_err();
        assert!(e.contains("loopback"), "{wider}: {e}");
    }
}

fn docker(id: &str) -> Target {
    Target::new("docker", id).unwrap()
}

/// A session's owner died and its reclaim removed `removed`, and left `pending` pending.
fn reclaim(j: &mut Journal, removed: &[&str], pending: &[&str]) {
    j.append(&Record::OwnerDead {
        reason: "exited".into(),
    })
    .unwrap();
    j.append(&Record::ReclaimStart {
        cause: Some(EndCause::OwnerExited),
    })
    .unwrap();
    for id in removed {
        j.append(&Record::Removed {
            provider: "docker".into(),
            id: (*id).into(),
            outcome: "removed".into(),
            at: None,
            limit: None,
        })
        .unwrap();
    }
    for id in pending {
        j.append(&Record::Failed {
            provider: "docker".into(),
            id: (*id).into(),
            error: "HTTP 500".into(),
            pending: true,
        })
        .unwrap();
    }
    let state = if pending.is_empty() {
        SessionState::Reclaimed
    } else {
        SessionState::Pending
    };
    j.append(&Record::End { state }).unwrap();
}

fn session(dir: &StateDir, id: &str, claims: &[&str]) -> Journal {
    let mut j = dir.create_session(id, start(7)).unwrap();
    for c in claims {
        j.append(&Record::claim(&docker(c))).unwrap();
    }
    j
}

fn removed(seen: &super::ledger::Seen) -> Vec<(String, &'static str, u64)> {
    seen.removed
        .iter()
        .map(|((p, c), n)| (p.clone(), *c, *n))
        .collect()
}

#[test]
fn what_the_journals_told_before_the_service_started_is_not_counted_and_the_rest_once() {
    let tmp = TempDir::new("metrics-tally");
    let dir = StateDir::open(tmp.path()).unwrap();
    // Reclaimed before the service started: the baseline.
    let mut old = session(&dir, "old", &["a", "b"]);
    reclaim(&mut old, &["a", "b"], &[]);
    // Live when it started, reclaimed after.
    let mut live = session(&dir, "live", &["c", "d", "e"]);

    let mut tally = Tally::default();
    let now = crate::ledger::now_ms();
    let seen = tally.look(&dir, now);
    assert_eq!(removed(&seen), []);
    assert_eq!(seen.sessions_pending, 0);

    reclaim(&mut live, &["c", "d"], &["e"]);
    // Begun and ended after the service started: counted whole.
    let mut new = session(&dir, "new", &["f"]);
    reclaim(&mut new, &["f"], &[]);
    let seen = tally.look(&dir, now + 1000);
    assert_eq!(removed(&seen), [("docker".into(), "owner_dead", 3)]);
    assert_eq!(seen.sessions_pending, 1);
    assert_eq!(seen.sandboxes_pending.get("docker"), Some(&1));

    // Nothing changed: nothing new, and what is pending is still pending.
    let seen = tally.look(&dir, now + 2000);
    assert_eq!(removed(&seen), []);
    assert_eq!(seen.sessions_pending, 1);

    // A sweep finishes the pending one (its removals follow the `end pending`): counted
    // once, as the sweep's finishing.
    live.append(&Record::Removed {
        provider: "docker".into(),
        id: "e".into(),
        outcome: "removed".into(),
        at: None,
        limit: None,
    })
    .unwrap();
    live.append(&Record::End {
        state: SessionState::Reclaimed,
    })
    .unwrap();
    let seen = tally.look(&dir, now + 3000);
    assert_eq!(removed(&seen), [("docker".into(), "finished_pending", 1)]);
    assert_eq!(seen.sessions_pending, 0);
    assert!(seen.sandboxes_pending.is_empty());
}

#[test]
fn a_removal_the_provider_found_already_gone_is_not_counted() {
    let tmp = TempDir::new("metrics-gone");
    let dir = StateDir::open(tmp.path()).unwrap();
    let mut tally = Tally::default();
    tally.look(&dir, crate::ledger::now_ms());
    let mut j = session(&dir, "s", &["a", "b"]);
    reclaim(&mut j, &["a"], &[]);
    j.append(&Record::Removed {
        provider: "docker".into(),
        id: "b".into(),
        outcome: "gone".into(),
        at: None,
        limit: None,
    })
    .unwrap();
    let seen = tally.look(&dir, crate::ledger::now_ms());
    assert_eq!(removed(&seen), [("docker".into(), "owner_dead", 1)]);
}

fn failed(status: Option<u16>) -> Removal {
    Removal {
        sandbox: sandbox("f", Kind::Instance, Some("s")),
        outcome: Outcome::Unfinished(Failure {
            message: "HTTP 5xx".into(),
            status,
            retry_after: None,
        }),
        attempts: 3,
        at_ms: None,
    }
}

fn a_removal() -> Removal {
    Removal {
        sandbox: sandbox("r", Kind::Instance, Some("s")),
        outcome: Outcome::Removed,
        attempts: 1,
        at_ms: None,
    }
}

#[test]
fn a_scrape_is_the_prometheus_text_format_labelled_by_host_and_openmetrics_when_asked() {
    let metrics = Metrics::new("ci-7", Duration::from_secs(300));
    let pass = Pass {
        untold: vec![
            Untold {
                provider: "docker".into(),
                cause: "owner_dead",
            };
            3
        ],
        listed: [("fake".to_string(), [(Kind::Instance, 5)].into())].into(),
        removals: vec![
            failed(Some(503)),
            failed(Some(500)),
            failed(None),
            a_removal(),
        ],
        ..Pass::default()
    };
    metrics.pass(&pass, Duration::from_millis(40));
    metrics.watching(2, 2);

    let text = metrics.scrape("text/plain");
    assert!(text.content_type.starts_with("text/plain; version=0.0.4"));
    let body = text.body;
    for line in [
        r#"sandguard_sandboxes_reclaimed_total{host="ci-7",provider="docker",cause="owner_dead"} 3"#,
        // Five listed, one of them removed by the pass.
        r#"sandguard_sandboxes_alive{host="ci-7",provider="fake",kind="instance"} 4"#,
        r#"sandguard_sweep_interval_seconds{host="ci-7"} 300.0"#,
        r#"sandguard_removals_failed_total{host="ci-7",provider="fake",status_class="5xx"} 2"#,
        r#"sandguard_removals_failed_total{host="ci-7",provider="fake",status_class="none"} 1"#,
        r#"sandguard_sweep_passes_total{host="ci-7",result="unclean"} 1"#,
        r#"sandguard_sessions_watched{host="ci-7"} 2"#,
        r#"sandguard_sessions_adopted_total{host="ci-7"} 2"#,
        r#"sandguard_sweep_pass_duration_seconds_count{host="ci-7"} 1"#,
    ] {
        assert!(body.lines().any(|l| l == line), "{line} not in:\n{body}");
    }
    let heartbeat = body
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"sandguard_sweep_last_pass_timestamp_seconds{host="ci-7"} "#)
        })
        .unwrap_or_else(|| panic!("no heartbeat in:\n{body}"));
    let at: f64 = heartbeat.parse().unwrap();
    let now = crate::ledger::now_ms() as f64 / 1000.0;
    assert!((now - at).abs() < 60.0, "heartbeat {at}, now {now}");

    let open = metrics.scrape("application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
    assert!(open
        .content_type
        .starts_with("application/openmetrics-text"));
    assert!(open.body.ends_with("# EOF\n"), "{}", open.body);
}
