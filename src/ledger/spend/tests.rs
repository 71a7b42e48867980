//! Unit tests of `spend`: journals written out as their lines, times in milliseconds.

use super::super::price::ProviderPrices;
use super::super::story::tell;
use super::super::view::fold;
use super::*;

const START: &str = r#"{"t":1000,"ev":"start","owner":"o","pid":7,"grace_ms":5}"#;

fn history(id: &str, lines: &[&str], stops: &[&str]) -> (SessionView, Story) {
    let text = |lines: &mut dyn Iterator<Item = &str>| -> String {
        lines.map(|l| format!("{l}\n")).collect()
    };
    let journal = text(&mut std::iter::once(START).chain(lines.iter().copied()));
    let stops = text(&mut stops.iter().copied());
    let view = fold(id, journal.as_bytes()).unwrap();
    (view, tell(journal.as_bytes(), stops.as_bytes()))
}

fn spend(lines: &[&str], now_ms: u64) -> Spend {
    let (view, story) = history("s", lines, &[]);
    Spend::of(&view, &story, now_ms, &Prices::default())
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn a_sandbox_counts_from_its_claim_to_its_removal_or_release() {
    let s = spend(
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":3000,"ev":"claim","provider":"e2b","id":"b"}"#,
            r#"{"t":5000,"ev":"release","provider":"e2b","id":"b"}"#,
            r#"{"t":7000,"ev":"reclaim_start","cause":"bye"}"#,
            r#"{"t":12000,"ev":"removed","provider":"docker","id":"a","outcome":"removed"}"#,
            r#"{"t":13000,"ev":"end","state":"clean"}"#,
        ],
        99_000,
    );
    let docker = &s.by_provider["docker"];
    assert_eq!(
        (docker.time, docker.sandboxes, docker.alive),
        (secs(10), 1, 0)
    );
    assert_eq!(s.by_provider["e2b"].time, secs(2));
    let total = s.total();
    assert_eq!(
        (total.time, total.sandboxes, total.untimed),
        (secs(12), 2, 0)
    );
}

#[test]
fn a_held_sandbox_is_alive_until_now_and_a_detached_one_too() {
    let s = spend(
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":4000,"ev":"detach","provider":"docker","id":"b"}"#,
        ],
        10_000,
    );
    let total = s.total();
    assert_eq!(
        (total.time, total.alive, total.alive_time),
        (secs(14), 2, secs(14))
    );
}

#[test]
fn an_ended_session_holds_nothing_and_a_detach_outlives_it() {
    let s = spend(
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"b"}"#,
            r#"{"t":3000,"ev":"detach","provider":"docker","id":"b"}"#,
            r#"{"t":4000,"ev":"reclaim_start","cause":"bye"}"#,
            r#"{"t":6000,"ev":"end","state":"clean"}"#,
        ],
        100_000,
    );
    let total = s.total();
    // `a`: claimed, no removal recorded, the session clean: until its last record (4 s).
    // `b`: detached, still running: until now (98 s).
    assert_eq!((total.time, total.alive), (secs(4 + 98), 1));
}

#[test]
fn a_sandbox_found_only_by_its_label_is_untimed_and_a_refused_one_not_counted() {
    let s = spend(
        &[
            r#"{"t":2000,"ev":"refused","provider":"acme","id":"x","reason":"unknown"}"#,
            r#"{"t":4000,"ev":"reclaim_start","cause":"sweep"}"#,
            r#"{"t":5000,"ev":"removed","provider":"docker","id":"c","outcome":"removed"}"#,
            r#"{"t":6000,"ev":"end","state":"reclaimed"}"#,
        ],
        100_000,
    );
    assert!(!s.by_provider.contains_key("acme"));
    let docker = &s.by_provider["docker"];
    assert_eq!(
        (docker.time, docker.sandboxes, docker.untimed),
        (secs(0), 1, 1)
    );
}

#[test]
fn a_pending_sandbox_runs_on_through_a_resume_until_a_sweep_removes_it() {
    let s = spend(
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":3000,"ev":"reclaim_start","cause":"owner_exited"}"#,
            r#"{"t":4000,"ev":"failed","provider":"docker","id":"a","error":"busy","pending":true}"#,
            r#"{"t":5000,"ev":"end","state":"pending"}"#,
            r#"{"t":6000,"ev":"resume","owner":"o2","pid":8,"grace_ms":5}"#,
            r#"{"t":9000,"ev":"reclaim_start","cause":"bye"}"#,
            r#"{"t":11000,"ev":"removed","provider":"docker","id":"a","outcome":"gone"}"#,
            r#"{"t":11000,"ev":"end","state":"clean"}"#,
        ],
        100_000,
    );
    let total = s.total();
    assert_eq!((total.time, total.sandboxes, total.alive), (secs(9), 1, 0));
}

#[test]
fn a_stop_by_hand_ends_the_time_and_a_clock_stepped_back_counts_nothing() {
    let (view, story) = history(
        "s",
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":9000,"ev":"claim","provider":"docker","id":"b"}"#,
            r#"{"t":8000,"ev":"release","provider":"docker","id":"b"}"#,
        ],
        &[r#"{"t":5000,"ev":"stopped","provider":"docker","id":"a","outcome":"removed"}"#],
    );
    let total = Spend::of(&view, &story, 100_000, &Prices::default()).total();
    assert_eq!((total.time, total.alive, total.sandboxes), (secs(3), 0, 2));
}

#[test]
fn a_second_claim_does_not_restart_the_time() {
    let s = spend(
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":6000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":8000,"ev":"release","provider":"docker","id":"a"}"#,
        ],
        100_000,
    );
    assert_eq!(s.total().time, secs(6));
}

const DAY: u64 = DAY_MS;

fn session(id: &str, lines: &[String]) -> (SessionView, Story) {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    history(id, &lines, &[])
}

fn claim(t: u64, provider: &str, id: &str) -> String {
    format!(r#"{{"t":{t},"ev":"claim","provider":"{provider}","id":"{id}"}}"#)
}

fn release(t: u64, provider: &str, id: &str) -> String {
    format!(r#"{{"t":{t},"ev":"release","provider":"{provider}","id":"{id}"}}"#)
}

/// Two sessions: `old` held docker `a` for the first two hours of day 0 and e2b `b` from
/// 23:00 on day 0 to 01:00 on day 1; `new` holds docker `c` from 12:00 on day 2, alive.
fn ledger() -> Vec<(SessionView, Story)> {
    let h = 3_600_000;
    vec![
        session(
            "old",
            &[
                claim(2 * DAY, "docker", "a"),
                release(2 * DAY + 2 * h, "docker", "a"),
                claim(2 * DAY + 23 * h, "e2b", "b"),
                release(3 * DAY + h, "e2b", "b"),
            ],
        ),
        session("new", &[claim(4 * DAY + 12 * h, "docker", "c")]),
    ]
}

#[test]
fn a_report_groups_by_provider_session_and_day_and_counts_each_sandbox_once() {
    let now = 4 * DAY + 14 * 3_600_000;
    let by_provider = tally(
        &ledger(),
        Window::all(now),
        By::Provider,
        &Prices::default(),
    );
    let rows: Vec<(&str, Duration, usize, usize)> = by_provider
        .rows
        .iter()
        .map(|(k, s)| (k.as_str(), s.time, s.sandboxes, s.alive))
        .collect();
    assert_eq!(
        rows,
        [
            ("docker", secs(4 * 3600), 2, 1),
            ("e2b", secs(2 * 3600), 1, 0)
        ]
    );
    assert_eq!(by_provider.sessions, 2);
    let total = &by_provider.total;
    assert_eq!(
        (total.time, total.sandboxes, total.alive),
        (secs(6 * 3600), 3, 1)
    );
    assert_eq!(total.alive_time, secs(2 * 3600));

    let by_session = tally(&ledger(), Window::all(now), By::Session, &Prices::default());
    let keys: Vec<&str> = by_session.rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["old", "new"], "oldest session first");

    let by_day = tally(&ledger(), Window::all(now), By::Day, &Prices::default());
    let days: Vec<(&str, Duration, usize)> = by_day
        .rows
        .iter()
        .map(|(k, s)| (k.as_str(), s.time, s.sandboxes))
        .collect();
    assert_eq!(
        days,
        [
            ("1970-01-03", secs(3 * 3600), 2),
            ("1970-01-04", secs(3600), 1),
            ("1970-01-05", secs(2 * 3600), 1),
        ]
    );
    // `b` spans two days but is one sandbox.
    assert_eq!(by_day.total, by_provider.total);
}

#[test]
fn a_window_clips_the_time_and_keeps_what_is_alive() {
    let now = 4 * DAY + 14 * 3_600_000;
    // From 00:30 on day 1: half an hour of `b`, and `c`'s two hours.
    let window = Window::last(Duration::from_secs(37 * 3600 + 1800), now);
    let r = tally(&ledger(), window, By::Provider, &Prices::default());
    let total = &r.total;
    assert_eq!(
        (total.time, total.sandboxes, total.alive),
        (secs(2 * 3600 + 1800), 2, 1)
    );
    // A window after everything of `old`: only `new` remains.
    let r = tally(
        &ledger(),
        Window::last(secs(3600), now),
        By::Session,
        &Prices::default(),
    );
    let keys: Vec<&str> = r.rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        (keys, r.sessions, r.total.time),
        (vec!["new"], 1, secs(3600))
    );
}

#[test]
fn days_are_cut_at_utc_midnight() {
    assert_eq!(days(5, 10), [(5, 10)]);
    assert_eq!(days(DAY - 1, DAY + 1), [(DAY - 1, DAY), (DAY, DAY + 1)]);
    assert_eq!(days(DAY, DAY), [(DAY, DAY)]);
    assert_eq!(day_of(DAY), "1970-01-02");
}

#[test]
fn a_removal_is_timed_by_when_the_provider_said_so_not_by_the_reclaims_end() {
    // The reclaim journals its outcomes after its settle pass, 2 s after the removal.
    let s = spend(
        &[
            r#"{"t":2000,"ev":"claim","provider":"docker","id":"a"}"#,
            r#"{"t":5000,"ev":"reclaim_start","cause":"owner_exited"}"#,
            r#"{"t":7100,"ev":"removed","provider":"docker","id":"a","outcome":"removed","at":5100}"#,
            r#"{"t":7100,"ev":"end","state":"reclaimed"}"#,
        ],
        100_000,
    );
    assert_eq!(s.total().time, Duration::from_millis(3100));
}

fn priced(provider: &str, per_hour: Option<f64>, sizes: &[(&str, f64)]) -> Prices {
    Prices::new([(
        provider.to_string(),
        ProviderPrices {
            per_hour,
            sizes: sizes.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        },
    )])
}

#[test]
fn each_sandbox_is_priced_by_its_size_else_its_providers_price() {
    let (view, story) = history(
        "s",
        &[
            r#"{"t":0,"ev":"claim","provider":"e2b","id":"gpu","size":"gpu-large"}"#,
            r#"{"t":0,"ev":"claim","provider":"e2b","id":"base","size":"base"}"#,
            r#"{"t":0,"ev":"detach","provider":"e2b","id":"old"}"#,
            r#"{"t":0,"ev":"claim","provider":"docker","id":"c"}"#,
            r#"{"t":3600000,"ev":"release","provider":"e2b","id":"gpu"}"#,
            r#"{"t":1800000,"ev":"release","provider":"e2b","id":"base"}"#,
            r#"{"t":7200000,"ev":"release","provider":"e2b","id":"old"}"#,
            r#"{"t":3600000,"ev":"release","provider":"docker","id":"c"}"#,
        ],
        &[],
    );
    let prices = priced("e2b", Some(0.1), &[("gpu-large", 2.0)]);
    let s = Spend::of(&view, &story, 10_000_000, &prices);
    let e2b = &s.by_provider["e2b"];
    // gpu-large: 1 h at 2.0; base (no price listed): 0.5 h at 0.1; no size: 2 h at 0.1.
    assert_eq!(e2b.cost.map(Money::amount), Some(2.25));
    assert_eq!(e2b.unpriced_time, Duration::ZERO);
    let docker = &s.by_provider["docker"];
    assert_eq!((docker.cost, docker.unpriced_time), (None, secs(3600)));
    let total = s.total();
    assert_eq!(
        total.cost, e2b.cost,
        "the priced part, and how much is left out"
    );
    assert_eq!(total.unpriced_time, secs(3600));

    let unpriced = Spend::of(&view, &story, 10_000_000, &Prices::default()).total();
    assert_eq!((unpriced.cost, unpriced.time), (None, secs(16200)));
}

#[test]
fn a_report_prices_only_the_time_in_its_window_and_each_day_its_own() {
    let now = 4 * DAY + 14 * 3_600_000;
    let prices = priced("e2b", Some(1.0), &[]);
    // `b` held 2 h across midnight at 1.0 an hour: 1.0 on each day.
    let by_day = tally(&ledger(), Window::all(now), By::Day, &prices);
    let costs: Vec<(&str, Option<f64>)> = by_day
        .rows
        .iter()
        .map(|(k, s)| (k.as_str(), s.cost.map(Money::amount)))
        .collect();
    assert_eq!(
        costs,
        [
            ("1970-01-03", Some(1.0)),
            ("1970-01-04", Some(1.0)),
            ("1970-01-05", None)
        ]
    );
    assert_eq!(by_day.total.cost.map(Money::amount), Some(2.0));
    assert_eq!(by_day.total.unpriced_time, secs(4 * 3600));
    let window = Window::last(Duration::from_secs(37 * 3600 + 1800), now);
    let clipped = tally(&ledger(), window, By::Provider, &prices);
    assert_eq!(clipped.total.cost.map(Money::amount), Some(0.5));
}

#[test]
fn at_a_runs_end_what_the_first_pass_removed_ends_when_the_provider_said_so() {
    use super::super::testutil::TempDir;
    use super::super::Record;
    let tmp = TempDir::new("spend-at-end");
    let state = StateDir::open(tmp.path()).unwrap();
    let start = Record::Start {
        owner: "o".into(),
        pid: 7,
        grace_ms: 5_000,
        labels: Default::default(),
    };
    let mut j = state.create_session("run1", start).unwrap();
    let target = |provider: &str, id: &str| Target::new(provider, id).unwrap();
    j.append(&Record::claim_sized(
        &target("e2b", "a"),
        Some("big".into()),
    ))
    .unwrap();
    j.append(&Record::claim(&target("e2b", "b"))).unwrap();
    j.append(&Record::detach(&target("docker", "c"))).unwrap();
    let t = super::super::now_ms();
    // The pass removed `a` 10 s on and found `b` gone 20 s on; `c`, detached, runs on until
    // the line 30 s on. Nothing of the pass is journaled yet.
    let ends = [
        (target("e2b", "a"), t + 10_000),
        (target("e2b", "b"), t + 20_000),
        (target("docker", "stranger"), t + 1),
    ];
    let prices = priced("e2b", Some(36.0), &[("big", 360.0)]);
    let s = Spend::at_end(&state, "run1", &ends, t + 30_000, &prices).unwrap();
    let near =
        |d: Duration, secs: u64| d.abs_diff(Duration::from_secs(secs)) < Duration::from_secs(1);
    let e2b = &s.by_provider["e2b"];
    assert!(near(e2b.time, 30), "{e2b:?}");
    assert_eq!(e2b.alive, 0, "both ended by the pass");
    // `a`: 10 s at 0.1 a second; `b`: 20 s at 0.01 a second.
    let cost = e2b.cost.unwrap().amount();
    assert!((cost - 1.2).abs() < 0.2, "{cost}");
    let docker = &s.by_provider["docker"];
    assert!(near(docker.time, 30) && docker.alive == 1, "{docker:?}");
    assert_eq!(docker.cost, None);
}

#[test]
fn each_sandbox_has_its_own_share_and_they_add_up_to_the_session() {
    let (view, story) = history(
        "s",
        &[
            r#"{"t":2000,"ev":"claim","provider":"e2b","id":"a","size":"big"}"#,
            r#"{"t":3000,"ev":"claim","provider":"e2b","id":"b"}"#,
            r#"{"t":4000,"ev":"refused","provider":"tenki","id":"x","reason":"not configured"}"#,
            r#"{"t":5000,"ev":"release","provider":"e2b","id":"b"}"#,
            r#"{"t":6000,"ev":"reclaim_start","cause":"owner_exited"}"#,
            r#"{"t":9000,"ev":"removed","provider":"e2b","id":"a","outcome":"removed","at":7000}"#,
            r#"{"t":9000,"ev":"removed","provider":"docker","id":"l","outcome":"removed","at":7000}"#,
            r#"{"t":9000,"ev":"end","state":"reclaimed"}"#,
        ],
        &[],
    );
    let prices = priced("e2b", None, &[("big", 3600.0)]);
    let each = each(&view, &story, 100_000, &prices);
    let ids: Vec<&str> = story
        .sandboxes
        .iter()
        .map(|s| s.target.id.as_str())
        .collect();
    assert_eq!(ids, ["a", "b", "x", "l"]);
    let times: Vec<Option<(Duration, usize)>> = each
        .iter()
        .map(|s| s.as_ref().map(|s| (s.time, s.untimed)))
        .collect();
    assert_eq!(
        times,
        [
            Some((secs(5), 0)),
            Some((secs(2), 0)),
            None,
            Some((secs(0), 1))
        ]
    );
    assert_eq!(each[0].as_ref().unwrap().cost.map(Money::amount), Some(5.0));
    assert_eq!(
        each[1].as_ref().unwrap().cost,
        None,
        "no size, no price_per_hour"
    );
    let total = Spend::of(&view, &story, 100_000, &prices).total();
    assert_eq!(total.time, secs(7));
}
