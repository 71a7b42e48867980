//! Unit tests of the store's spend: the encoding through the memory store (which keeps each
//! field as Redis does), what a rewrite and a close do, and generated ledgers of several hosts
//! whose `report --fleet` figures must be the local reports' (the oracle: `ledger::spend`).

use std::time::Duration;

use super::*;
use crate::fleet::memory::MemoryStore;
use crate::fleet::Store;
use crate::ledger::spend::daily::{by_day, day};
use crate::ledger::testutil::TempDir;
use crate::ledger::StateDir;
use crate::testing::rng::Rng;

const DAY: u64 = 86_400_000;
/// A midnight, UTC (2025-12-06T00:00:00Z).
const M0: u64 = 1_764_979_200_000;

fn figures(time_s: u64, sandboxes: usize, first: usize, alive: usize) -> Figures {
    Figures {
        time: Duration::from_secs(time_s),
        alive_time: Duration::from_secs(if alive > 0 { time_s } else { 0 }),
        sandboxes,
        first,
        alive,
        untimed: 0,
    }
}

fn session(host: &str, id: &str, started_ms: u64, days: &[(u64, &str, Figures)]) -> SessionSpend {
    SessionSpend {
        host: host.into(),
        session: id.into(),
        started_ms,
        days: days
            .iter()
            .map(|(d, p, f)| ((*d, p.to_string()), *f))
            .collect(),
    }
}

fn today() -> u64 {
    day(M0)
}

#[tokio::test]
async fn figures_round_trip_through_the_stores_fields_and_a_rewrite_replaces_them() {
    let store = MemoryStore::default();
    let d = today();
    // A host id may hold `|`: the field is still read back whole.
    let a = session("ci|7", "s1", M0 + 5, &[(d, "e2b", figures(10, 2, 2, 1))]);
    store.put_spend(&a).await.unwrap();
    store.put_spend(&a).await.unwrap();
    let read = store.spend(d..=d).await.unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    let e = &read[0];
    assert_eq!(
        (
            e.day,
            e.host.as_str(),
            e.session.as_str(),
            e.provider.as_str()
        ),
        (d, "ci|7", "s1", "e2b")
    );
    assert_eq!((e.started_ms, e.figures), (M0 + 5, figures(10, 2, 2, 1)));
    // Its sidecar writes again later: replaced, never added.
    let later = session(
        "ci|7",
        "s1",
        M0 + 5,
        &[
            (d, "e2b", figures(25, 2, 2, 0)),
            (d + 1, "e2b", figures(3, 1, 0, 0)),
        ],
    );
    store.put_spend(&later).await.unwrap();
    let read = store.spend(d..=d + 1).await.unwrap();
    assert_eq!(read.len(), 2, "{read:?}");
    assert_eq!(read[0].figures, figures(25, 2, 2, 0));
    let (report, hosts) = report(&read, Window::all(M0 + 2 * DAY), By::Provider);
    assert_eq!(hosts, 1);
    assert_eq!(report.total.time, Duration::from_secs(28));
    assert_eq!(
        report.total.sandboxes, 2,
        "one sandbox across midnight counts once"
    );
    // Days outside the range are not read.
    assert!(store.spend(d + 2..=d + 3).await.unwrap().is_empty());
}

#[test]
fn fields_that_are_not_ours_are_not_read() {
    let value =
        r#"{"ms":1,"alive_ms":0,"sandboxes":1,"first":1,"alive":0,"untimed":0,"started_ms":1}"#;
    assert!(decode(1, "h|s|e2b", value).is_some());
    assert!(decode(1, "s|e2b", value).is_none());
    assert!(decode(1, "h||e2b", value).is_none());
    assert!(decode(1, "h|s|e2b", "{\"ms\":1}").is_none());
    assert!(decode(1, "h|s|e2b", "not json").is_none());
    // A field a later version adds is ignored.
    let newer = value.replace("}", r#","cost":0.5}"#);
    assert!(decode(1, "h|s|e2b", &newer).is_some());
}

#[tokio::test]
async fn a_close_keeps_the_time_and_ends_what_was_alive_of_that_session_only() {
    let store = MemoryStore::default();
    let d = today();
    let dead = session(
        "a",
        "dead",
        M0,
        &[
            (d, "e2b", figures(60, 1, 1, 0)),
            (d + 1, "e2b", figures(30, 1, 0, 1)),
        ],
    );
    let other = session("b", "live", M0, &[(d + 1, "e2b", figures(5, 1, 1, 1))]);
    store.put_spend(&dead).await.unwrap();
    store.put_spend(&other).await.unwrap();
    let providers = ["e2b".to_string(), "docker".to_string()];
    store
        .close_spend("a", "dead", &providers, d..=d + 1)
        .await
        .unwrap();
    let read = store.spend(d..=d + 1).await.unwrap();
    let of = |s: &str| {
        read.iter()
            .filter(|e| e.session == s)
            .map(|e| e.figures)
            .collect::<Vec<_>>()
    };
    let closed = of("dead");
    assert_eq!(closed.len(), 2);
    assert_eq!(closed[1].time, Duration::from_secs(30));
    assert!(closed
        .iter()
        .all(|f| f.alive == 0 && f.alive_time.is_zero()));
    assert_eq!(of("live"), vec![figures(5, 1, 1, 1)]);
}

#[test]
fn the_days_read_are_the_kept_ones_from_the_since_midnight_on() {
    let now = M0 + 3 * DAY + 5;
    assert_eq!(days(None, now), day(now) - KEEP_DAYS..=day(now) + 1);
    assert_eq!(days(Some(M0 + 10), now), day(M0)..=day(now) + 1);
    assert_eq!(days(Some(0), now).start(), &(day(now) - KEEP_DAYS));
    assert_eq!(expires_ms(day(M0)), M0 + DAY + KEEP_DAYS * DAY);
}

/// One generated history: its journal's lines (after `start`).
fn generate(rng: &mut Rng, started: u64, now: u64) -> Vec<String> {
    let mut lines = Vec::new();
    for i in 0..1 + rng.below(4) {
        let provider = rng.pick(&["e2b", "docker"]);
        let id = format!("sb{i}");
        let from = started + rng.below(((now - started) / 1000) as usize) as u64 * 1000;
        if rng.chance(10) {
            // Found only by its label at its removal: untimed.
            lines.push((
                from,
                format!(
                    r#""ev":"removed","provider":"{provider}","id":"{id}","outcome":"removed""#
                ),
            ));
            continue;
        }
        let ev = if rng.chance(15) { "detach" } else { "claim" };
        lines.push((
            from,
            format!(r#""ev":"{ev}","provider":"{provider}","id":"{id}""#),
        ));
        if rng.chance(70) {
            let to = from + rng.below(((now - from) / 1000).max(1) as usize) as u64 * 1000;
            let end = if rng.chance(30) {
                format!(r#""ev":"release","provider":"{provider}","id":"{id}""#)
            } else {
                format!(r#""ev":"removed","provider":"{provider}","id":"{id}","outcome":"removed""#)
            };
            lines.push((to, end));
        }
    }
    lines.sort_by_key(|(t, _)| *t);
    lines
        .into_iter()
        .map(|(t, rest)| format!(r#"{{"t":{t},{rest}}}"#))
        .collect()
}

/// Generated ledgers of three hosts over four days, written to their state directories: each
/// host's local report (the oracle) and `report --fleet` over what each wrote to one store
/// must agree, row for row, for every grouping and for windows from a midnight; and so must
/// each session's spend.
#[tokio::test]
async fn the_fleet_report_is_the_sum_of_every_hosts_local_report() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let now = M0 + 3 * DAY + rng.below(DAY as usize) as u64;
        let store = MemoryStore::default();
        let mut locals = Vec::new();
        let mut whole = BTreeMap::new();
        for (h, host) in ["host-a", "host-b", "host-c"].iter().enumerate() {
            let dir = TempDir::new(&format!("fleet-spend-{seed}-{h}"));
            let state = StateDir::open(dir.path()).unwrap();
            for n in 0..1 + rng.below(3) {
                let id = format!("s{h}{n}");
                let started = M0 + (rng.below(3 * DAY as usize / 1000) as u64) * 1000 + h as u64;
                let mut text =
                    format!(r#"{{"t":{started},"ev":"start","owner":"o","pid":7,"grace_ms":5}}"#);
                text.push('\n');
                for l in generate(&mut rng, started, now) {
                    text.push_str(&l);
                    text.push('\n');
                }
                if rng.chance(30) {
                    text.push_str(&format!(r#"{{"t":{now},"ev":"end","state":"clean"}}"#));
                    text.push('\n');
                }
                std::fs::write(dir.path().join(format!("sessions/{id}.journal")), &text).unwrap();
                let (view, story) = state.read_history(&id).unwrap();
                let days = by_day(&view, &story, now);
                let record = SessionRecord {
                    id: id.clone(),
                    host: host.to_string(),
                    owner: "o".into(),
                    pid: 7,
                    labels: Default::default(),
                    providers: vec![],
                    started_ms: started,
                };
                store
                    .put_spend(&SessionSpend::of(&record, &days))
                    .await
                    .unwrap();
                whole.insert(
                    (host.to_string(), id),
                    crate::ledger::spend::Spend::of(&view, &story, now, &Default::default()),
                );
            }
            locals.push((dir, state));
        }
        for since in [None, Some(M0), Some(M0 + DAY), Some(M0 + 3 * DAY)] {
            let window = Window {
                since_ms: since,
                now_ms: now,
            };
            let entries = store.spend(days(since, now)).await.unwrap();
            for by in [By::Provider, By::Day, By::Session] {
                let (fleet, hosts) = report(&entries, window, by);
                let mut rows: BTreeMap<String, Share> = BTreeMap::new();
                let (mut total, mut sessions) = (Share::default(), 0);
                for (_, state) in &locals {
                    let local =
                        crate::ledger::spend::report(state, window, by, &Default::default())
                            .unwrap();
                    for (k, s) in &local.rows {
                        rows.entry(k.clone()).or_default().add(s);
                    }
                    total.add(&local.total);
                    sessions += local.sessions;
                }
                let fleet_rows: BTreeMap<String, Share> = fleet.rows.iter().cloned().collect();
                let case = format!("seed {seed}, since {since:?}, by {by:?}");
                assert_eq!(fleet_rows, rows, "{case}");
                assert_eq!(fleet.total, total, "{case}");
                assert_eq!(fleet.sessions, sessions, "{case}");
                assert!(hosts <= 3, "{case}");
            }
        }
        let entries = store.spend(days(None, now)).await.unwrap();
        let mut per = per_session(&entries);
        for (key, spend) in whole {
            let fleet = per.remove(&key).unwrap_or_default();
            let nonempty: BTreeMap<_, _> = spend
                .by_provider
                .into_iter()
                .filter(|(_, s)| s.sandboxes > 0)
                .collect();
            assert_eq!(fleet.by_provider, nonempty, "seed {seed}, {key:?}");
        }
    }
}
