//! The shared tests: each is generic over [`Cloud`] and runs, through `conformance!`, against
//! every provider it applies to. Together they say what every cloud driver must do: list
//! only what sandguard made, keep credentials out of its output, stop exactly its targets,
//! reclaim a dead owner's sandboxes, walk every page, and get through throttling, errors,
//! dropped connections, latency and an outage; and renew server-side TTLs where there are
//! some.

use std::process::Command;
use std::time::Duration;

use super::{session_id, Cloud, Config, Rig, Support};
use crate::support::{eventually, json, live_owner_label, run};
use sandguard::labels::SESSION;

mod reclaim;
pub use reclaim::*;

/// Makes a `#[test]` of every shared test for one provider: the core, which applies to all,
/// and the optional parts named after the `;` (`dropped_connections`, `server_ttl`). A
/// generated test checks that the parts named are exactly those the adapter supports, so a
/// part cannot be left out by mistake, nor run where it does not apply.
macro_rules! conformance {
    ($cloud:ty; $($part:ident),* $(,)?) => {
        conformance!(@tests $cloud;
            ps_lists_labelled_sandboxes_only,
            a_wrong_credential_is_an_error_and_never_printed,
            stop_touches_only_its_targets,
            the_owners_death_reclaims_its_sandboxes_only,
            listing_walks_every_page,
            a_429_storm_is_waited_out_with_no_request_before_its_retry_after,
            server_errors_are_retried_until_everything_is_removed,
            a_slow_provider_is_waited_for_not_given_up_on,
            an_outage_past_the_deadline_leaves_sessions_pending_until_stop_or_a_sweep,
            providers_reports_it_reachable_with_one_request,
        );
        $(conformance!(@part $cloud; $part);)*
        #[test]
        fn the_suite_runs_every_part_that_applies() {
            $crate::providers::suite::check_parts::<$cloud>(&[$(stringify!($part)),*]);
        }
    };
    (@part $cloud:ty; dropped_connections) => {
        conformance!(@tests $cloud; dropped_connections_are_retried_until_everything_is_removed,);
    };
    (@part $cloud:ty; server_ttl) => {
        conformance!(@tests $cloud; while_the_owner_lives_its_sandboxes_ttls_are_renewed_past_the_grace,);
    };
    (@tests $cloud:ty; $($test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                $crate::providers::suite::$test::<$cloud>();
            }
        )*
    };
}

/// The optional parts, with what the adapter says of each.
fn parts<C: Cloud>() -> [(&'static str, Support); 2] {
    [
        ("dropped_connections", C::DROPPED_CONNECTIONS),
        ("server_ttl", C::SERVER_TTL),
    ]
}

pub fn check_parts<C: Cloud>(named: &[&str]) {
    for (part, support) in parts::<C>() {
        match (support, named.contains(&part)) {
            (Support::Yes, true) | (Support::No(_), false) => {}
            (Support::Yes, false) => panic!(
                "{} supports {part}, but its conformance! line leaves it out",
                C::NAME
            ),
            (Support::No(why), true) => panic!("{part} does not apply to {}: {why}", C::NAME),
        }
    }
}

/// The instance ids of a `ps --json` or `stop --json` answer, sorted.
fn ids(v: &serde_json::Value) -> Vec<String> {
    let mut ids: Vec<String> = v["sandboxes"]
        .as_array()
        .unwrap_or_else(|| panic!("no sandboxes: {v}"))
        .iter()
        .map(|x| x["instance_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// No run of 12 characters of `secret` (all of it, if shorter) appears in `text`: a
/// credential cut short or half-masked is still a leak.
fn assert_not_printed(text: &str, secret: &str) {
    let chars: Vec<char> = secret.chars().collect();
    for window in chars.windows(12.min(chars.len())) {
        let part: String = window.iter().collect();
        assert!(
            !text.contains(&part),
            "{part:?} of a secret was printed:\n{text}"
        );
    }
}

/// The cell under `header` in the row of a text table that starts with `id` (cells are set
/// apart by at least three spaces, and hold no three in a row).
fn cell(table: &str, id: &str, header: &str) -> String {
    let head = table.lines().next().unwrap_or_default();
    let at = head
        .find(header)
        .unwrap_or_else(|| panic!("no {header}:\n{table}"));
    let row = table
        .lines()
        .find(|l| l.starts_with(id))
        .unwrap_or_else(|| panic!("no row for {id}:\n{table}"));
    let rest = row.get(at..).unwrap_or_default();
    rest.split("   ").next().unwrap_or_default().to_string()
}

/// The command succeeded; its output otherwise.
fn ok(out: &crate::support::Run) {
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
}

pub fn ps_lists_labelled_sandboxes_only<C: Cloud>() {
    let rig = Rig::<C>::new(Config::deadline(3));
    let session = session_id();
    let owned = rig.labelled(&session);
    let ownerless = rig.cloud.insert(&[(SESSION, &session), ("app", "x")]);
    let stranger = rig.stranger();
    let lookalike = rig.cloud.insert(&[("sandguard.sessionx", &session)]);

    let out = rig.run(&["ps", "--provider", C::NAME]);
    ok(&out);
    let table = out.stdout.clone();
    let line = |id: &str| out.stdout.lines().find(|l| l.starts_with(id));
    let owned_line = line(&owned).unwrap_or_else(|| panic!("{owned} not listed:\n{}", out.stdout));
    for word in [C::NAME, C::RUNNING, C::IMAGE, &session, "alive"] {
        assert!(owned_line.contains(word), "no {word:?} in {owned_line}");
    }
    assert!(line(&ownerless).is_some(), "{}", out.stdout);
    for id in [&stranger, &lookalike] {
        assert!(
            !out.stdout.contains(id.as_str()),
            "{id} listed:\n{}",
            out.stdout
        );
    }

    let out = rig.run(&["ps", "--json", "--provider", C::NAME]);
    ok(&out);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    assert_eq!(ids(&v), sorted(vec![owned.clone(), ownerless]), "{v}");
    let since_2026 = 1_767_225_600;
    let tomorrow = sandguard::testing::timefmt::now_unix() + 86_400;
    for sb in v["sandboxes"].as_array().unwrap() {
        assert_eq!(sb["provider"], C::NAME, "{sb}");
        assert_eq!(sb["kind"], "instance", "{sb}");
        assert_eq!(sb["status"], C::RUNNING, "{sb}");
        assert_eq!(sb["image"], C::IMAGE, "{sb}");
        assert_eq!(sb["session"], session.as_str(), "{sb}");
        assert_eq!(sb["labels"][SESSION], session.as_str(), "{sb}");
        let app = if C::LISTS_OTHER_LABELS {
            "x".into()
        } else {
            serde_json::Value::Null
        };
        assert_eq!(sb["labels"]["app"], app, "{sb}");
        let created = sb["created_at"]
            .as_str()
            .and_then(sandguard::testing::timefmt::parse_rfc3339);
        assert!(
            created.is_some_and(|t| (since_2026..tomorrow).contains(&t)),
            "{sb}"
        );
    }
    // EXPIRES: when the provider itself ends the sandbox, where its listing says so
    // (`Cloud::expires_at`), in the JSON and in the table; none (`-`) where it does not.
    for sb in v["sandboxes"].as_array().unwrap() {
        let id = sb["instance_id"].as_str().unwrap();
        let want = rig
            .cloud
            .expires_at(id)
            .map(sandguard::testing::timefmt::format_rfc3339);
        assert_eq!(sb["expires_at"].as_str(), want.as_deref(), "{sb}");
        let cell = cell(&table, id, "EXPIRES");
        assert_eq!(
            cell.starts_with("in "),
            want.is_some(),
            "EXPIRES {cell:?} of {id}:\n{table}"
        );
    }
    let entry = v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["instance_id"] == owned.as_str())
        .unwrap();
    assert_eq!(entry["owner"], live_owner_label().as_str(), "{entry}");
    assert_eq!(entry["owner_alive"], true, "{entry}");

    let hits = rig.cloud.hits();
    assert!(
        !hits.is_empty() && hits.iter().all(C::is_listing),
        "ps only lists: {hits:?}"
    );
}

pub fn a_wrong_credential_is_an_error_and_never_printed<C: Cloud>() {
    let rig = Rig::<C>::new(Config::deadline(3));
    rig.labelled(&session_id());
    for as_json in [false, true] {
        let mut cmd = rig.cmd();
        let wrong = C::wrong_credential(&mut cmd);
        cmd.args(["ps", "--provider", C::NAME]);
        if as_json {
            cmd.arg("--json");
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
        for text in [&out.stdout, &out.stderr] {
            for secret in C::secrets().iter().chain([&wrong]) {
                assert_not_printed(text, secret);
            }
        }
        if as_json {
            let v = json(&out.stdout);
            let errors = v["errors"].as_array().unwrap();
            assert_eq!(errors.len(), 1, "{v}");
            assert_eq!(errors[0]["provider"], C::NAME, "{v}");
            let error = errors[0]["error"].as_str().unwrap();
            assert!(error.contains(C::UNAUTHORIZED), "{v}");
            // Issue 24: the provider's status travels with its words.
            let status = C::UNAUTHORIZED_STATUS.map_or(serde_json::Value::Null, Into::into);
            assert_eq!(errors[0]["status"], status, "{v}");
        } else {
            let want = format!("could not query {}", C::NAME);
            assert!(out.stdout.contains(&want), "{}", out.stdout);
        }
    }
}

pub fn stop_touches_only_its_targets<C: Cloud>() {
    let rig = Rig::<C>::new(Config::deadline(3));
    let (sa, sb) = (session_id(), session_id());
    let a = rig.many(&sa, 3);
    let b = rig.many(&sb, 2);
    let stranger = rig.stranger();

    ok(&rig.run(&["stop", &a[0]]));
    assert!(!rig.cloud.exists(&a[0]));
    assert!(rig.all_exist(&a[1..]) && rig.all_exist(&b) && rig.cloud.exists(&stranger));
    // What was removed may linger on its way out for a moment; then a stop finds nothing.
    eventually(
        Duration::from_secs(3),
        "a second stop of a removed sandbox finds no such sandbox",
        || rig.run(&["stop", &a[0]]).code == 1,
    );
    let out = rig.run(&["stop", &stranger]);
    assert_eq!(
        out.code, 1,
        "a sandbox sandguard did not make is not found, never removed: {}",
        out.stdout
    );
    assert!(rig.cloud.exists(&stranger));

    ok(&rig.run(&["stop", "--all", "--session", &sa]));
    assert!(rig.all_gone(&a), "the session's sandboxes are removed");
    assert!(rig.all_exist(&b), "another session's sandboxes survive");
    assert!(rig.cloud.exists(&stranger));

    ok(&rig.run(&["stop", "--all", "--provider", C::NAME]));
    assert!(rig.all_gone(&b));
    assert!(
        rig.cloud.exists(&stranger),
        "an unlabelled sandbox survives"
    );
    let listings = rig.cloud.hits().iter().filter(|h| C::is_listing(h)).count();
    assert!(listings >= 3, "{listings} listings for three stops");
}

pub fn listing_walks_every_page<C: Cloud>() {
    // Two and a half pages (with the bystanders); unpaged, a large account in one answer.
    let (n, requests) = match C::PAGE {
        Some(size) => (2 * size + 50, 3 + usize::from(C::EMPTY_PAGE_ENDS_LISTING)),
        None => (600, 1),
    };
    let rig = Rig::<C>::new(Config::deadline(20));
    let session = session_id();
    let mine = rig.many(&session, n);
    let others = rig.many(&session_id(), 5);
    let strangers: Vec<String> = (0..5).map(|_| rig.stranger()).collect();

    let out = rig.run(&["ps", "--json", "--provider", C::NAME]);
    ok(&out);
    let listed = [mine.clone(), others.clone()].concat();
    assert_eq!(ids(&json(&out.stdout)), sorted(listed));
    let hits = rig.cloud.hits();
    assert!(hits.iter().all(C::is_listing), "{hits:?}");
    assert_eq!(
        hits.len(),
        rig.cloud.listing_requests(requests),
        "listing requests for {n} sandboxes"
    );

    ok(&rig.run(&["stop", "--all", "--session", &session]));
    assert!(rig.all_gone(&mine));
    assert!(rig.all_exist(&others) && rig.all_exist(&strangers));
}

/// `providers --json` with `cmd`: its exit code and this provider's entry.
fn provider_entry<C: Cloud>(cmd: &mut Command) -> (i32, serde_json::Value) {
    let out = run(cmd.args(["providers", "--json"]));
    let v = json(&out.stdout);
    let entry = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == C::NAME)
        .cloned()
        .unwrap_or_else(|| panic!("{} is not registered: {v}", C::NAME));
    (out.code, entry)
}

pub fn providers_reports_it_reachable_with_one_request<C: Cloud>() {
    let rig = Rig::<C>::new(Config::deadline(3));
    let (code, p) = provider_entry::<C>(&mut rig.cmd());
    assert_eq!(code, 0, "{p}");
    assert_eq!(p["configured"], true, "{p}");
    assert_eq!(p["reachable"], true, "{p}");
    assert_eq!(p["detail"], rig.cloud.detail().as_str(), "{p}");
    assert_eq!(
        p["capabilities"]["ttl"],
        C::SERVER_TTL == Support::Yes,
        "{p}"
    );
    let hits = rig.cloud.hits();
    assert_eq!(hits.len(), 1, "one cheap request: {hits:?}");

    let out = rig.run(&["providers"]);
    assert!(out.stdout.contains(&rig.cloud.detail()), "{}", out.stdout);

    let (_, p) = provider_entry::<C>(rig.cmd().env_remove(C::CREDENTIAL_VAR));
    assert_eq!(p["configured"], false, "{p}");
    let missing = format!("{} is not set", C::CREDENTIAL_VAR);
    assert!(p["detail"].as_str().unwrap().contains(&missing), "{p}");
}
