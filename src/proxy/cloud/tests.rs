use std::collections::BTreeMap;

use super::*;

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("sandguard.session".to_string(), "s1".to_string()),
        ("sandguard.owner".to_string(), "o".to_string()),
    ])
}

fn stamped(api: Api, body: &str) -> serde_json::Value {
    serde_json::from_slice(&api.stamp(body.as_bytes(), &labels().into()).unwrap().0).unwrap()
}

#[test]
fn e2b_metadata_is_merged_as_go_decodes_it_with_the_session_winning() {
    let body = r#"{"templateID":"base","metadata":{"app":"x","sandguard.session":"evil"},"METADATA":{"b":"2"}}"#;
    let v = stamped(Api::E2b, body);
    assert_eq!(v["templateID"], "base");
    assert_eq!(
        v["metadata"],
        serde_json::json!({"app":"x","sandguard.session":"s1","b":"2","sandguard.owner":"o"})
    );
    assert!(v.get("METADATA").is_none());
    assert_eq!(stamped(Api::E2b, "")["metadata"]["sandguard.session"], "s1");
}

#[test]
fn daytona_labels_are_read_as_json_parse_reads_them() {
    let body = r#"{"labels":{"gone":"1"},"Labels":{"kept":"as is"},"labels":{"app":"y","sandguard.session":"evil"}}"#;
    let v = stamped(Api::Daytona, body);
    assert_eq!(
        v["labels"],
        serde_json::json!({"app":"y","sandguard.session":"s1","sandguard.owner":"o"})
    );
    assert_eq!(v["Labels"], serde_json::json!({"kept":"as is"}));
}

#[test]
fn a_create_asking_to_be_detached_is_held_as_a_detach_as_each_service_reads_it() {
    let hold = |api: Api, body: &str| api.stamp(body.as_bytes(), &labels().into()).unwrap().1;
    let e2b =
        r#"{"metadata":{"sandguard.detached":"false"},"Metadata":{"sandguard.detached":"true"}}"#;
    assert_eq!(hold(Api::E2b, e2b), Hold::Detach, "Go merges both keys");
    assert_eq!(
        hold(Api::Daytona, e2b),
        Hold::Claim,
        "JSON.parse reads `labels` only"
    );
    let daytona = r#"{"labels":{"sandguard.detached":"true"},"labels":{"app":"x"}}"#;
    assert_eq!(
        hold(Api::Daytona, daytona),
        Hold::Claim,
        "the last `labels` wins"
    );
    let daytona = r#"{"labels":{"app":"x"},"labels":{"sandguard.detached":"true"}}"#;
    assert_eq!(hold(Api::Daytona, daytona), Hold::Detach);
    assert_eq!(hold(Api::E2b, r#"{"metadata":{"app":"x"}}"#), Hold::Claim);
}

#[test]
fn what_cannot_be_stamped_is_an_error() {
    for (api, body) in [
        (Api::E2b, "not json"),
        (Api::E2b, "[]"),
        (Api::E2b, r#"{"metadata":"x"}"#),
        (Api::Daytona, "null"),
        (Api::Daytona, r#"{"labels":[1]}"#),
    ] {
        assert!(
            api.stamp(body.as_bytes(), &labels().into()).is_err(),
            "{body}"
        );
    }
}

#[test]
fn creates_and_forks_are_routed_and_the_rest_passes() {
    assert_eq!(Api::E2b.route(true, &["sandboxes"]), Route::Create);
    assert_eq!(Api::E2b.route(true, &["v2", "sandboxes"]), Route::Create);
    assert_eq!(Api::E2b.route(false, &["v2", "sandboxes"]), Route::Pass);
    assert_eq!(
        Api::E2b.route(true, &["sandboxes", "i", "timeout"]),
        Route::Pass
    );
    assert!(matches!(
        Api::E2b.route(true, &["sandboxes", "i", "fork"]),
        Route::Refuse(_)
    ));
    assert_eq!(Api::Daytona.route(true, &["sandbox"]), Route::Create);
    assert_eq!(
        Api::Daytona.route(true, &["sandbox", "i", "stop"]),
        Route::Pass
    );
    assert!(matches!(
        Api::Daytona.route(true, &["sandbox", "i", "fork"]),
        Route::Refuse(_)
    ));
}

/// Every spelling of every collection, under each API's own rules, as the segments after the
/// base path: what creates, what is refused as an unknown create, what passes.
#[test]
fn every_create_route_in_any_case_is_stamped_and_other_collection_posts_are_refused() {
    fn cases(word: &str) -> Vec<String> {
        let mut capital = word.to_string();
        capital[..1].make_ascii_uppercase();
        vec![word.into(), word.to_ascii_uppercase(), capital]
    }
    let unknown = Route::Refuse(UNKNOWN_CREATE);
    for (api, creates, versions) in [
        (Api::Daytona, &["sandbox", "workspace"][..], &[""][..]),
        (Api::E2b, &["sandboxes"][..], &["", "v2", "V3"][..]),
    ] {
        for version in versions {
            let at = |rest: &[&str]| {
                let mut path: Vec<&str> =
                    [*version].into_iter().filter(|v| !v.is_empty()).collect();
                path.extend(rest);
                api.route(true, &path)
            };
            for collection in creates.iter().flat_map(|c| cases(c)) {
                let c = collection.as_str();
                assert_eq!(at(&[c]), Route::Create, "{api:?} {version} {c}");
                assert_eq!(api.route(false, &[c]), Route::Pass, "{api:?} GET {c}");
                assert!(matches!(at(&[c, "i", "FORK"]), Route::Refuse(w) if w != UNKNOWN_CREATE));
                assert_eq!(at(&[c, "new"]), unknown, "{api:?} {version} {c}/new");
                assert_eq!(at(&[c, "i", "stop"]), Route::Pass, "{api:?} {c}/i/stop");
                let plural = format!("{c}s");
                assert_eq!(at(&[plural.as_str()]), unknown, "{api:?} {plural}");
                let beta = format!("{c}-beta");
                assert_eq!(at(&[beta.as_str(), "x"]), unknown, "{api:?} {beta}");
            }
            for other in ["volumes", "snapshots", "templates", "api-keys"] {
                assert_eq!(at(&[other]), Route::Pass, "{api:?} {other}");
            }
        }
    }
}

#[test]
fn answers_name_the_new_sandbox() {
    assert_eq!(
        Api::E2b.created(br#"{"sandboxID":"abc","envdVersion":"0.2"}"#),
        Some("abc".into())
    );
    assert_eq!(Api::Daytona.created(br#"{"id":"d1"}"#), Some("d1".into()));
    assert_eq!(Api::Daytona.created(br#"{"id":""}"#), None);
    assert_eq!(Api::E2b.created(b"oops"), None);
}

#[test]
fn deletes_of_one_sandbox_are_removals_and_the_rest_is_not() {
    assert_eq!(Api::E2b.removal(&["sandboxes", "i"]), Some("i".into()));
    assert_eq!(
        Api::E2b.removal(&["v2", "SANDBOXES", "i"]),
        Some("i".into())
    );
    assert_eq!(Api::E2b.removal(&["sandboxes"]), None);
    assert_eq!(Api::E2b.removal(&["sandboxes", "i", "snapshots"]), None);
    assert_eq!(Api::E2b.removal(&["templates", "t"]), None);
    assert_eq!(Api::Daytona.removal(&["Sandbox", "d"]), Some("d".into()));
    assert_eq!(Api::Daytona.removal(&["workspace", "d"]), Some("d".into()));
    assert_eq!(Api::Daytona.removal(&["snapshots", "s"]), None);
    assert_eq!(
        Api::Daytona.sandbox_name(br#"{"id":"d1","name":"web"}"#),
        Some("web".into())
    );
    assert_eq!(
        Api::E2b.sandbox_name(br#"{"sandboxID":"i","name":"x"}"#),
        None
    );
}

#[test]
fn a_removal_is_routed_only_where_the_service_routes_it_as_sent() {
    let e2b = |path: &str| Api::E2b.removal_routed(path, "", "i1");
    assert!(e2b("/sandboxes/i1"));
    assert!(e2b("/sandboxes/%69%31"), "Go decodes before gin routes");
    assert!(e2b("/sandbo%78es/i1"));
    for path in [
        "/v2/sandboxes/i1",
        "/V1/sandboxes/i1",
        "/Sandboxes/i1",
        "/sandboxes/i1/",
        "//sandboxes/i1",
        "/sandboxes/./i1",
        "/x/../sandboxes/i1",
        "/sandboxes/i2",
        "/sandboxes/i1%zz",
    ] {
        assert!(!e2b(path), "{path}");
    }
    assert!(Api::E2b.removal_routed("/e2b/sandboxes/i1", "/e2b", "i1"));
    assert!(!Api::E2b.removal_routed("/sandboxes/i1", "/e2b", "i1"));

    let daytona = |path: &str| Api::Daytona.removal_routed(path, "/api", "d1");
    for path in [
        "/api/sandbox/d1",
        "/api/sandbox/d1/",
        "/API/Sandbox/d1",
        "/api/workspace/d1",
        "/api/sandbox/%64%31",
    ] {
        assert!(daytona(path), "{path}");
    }
    for path in [
        "/api/%73andbox/d1",
        "/api/sandbox/d1//",
        "/api//sandbox/d1",
        "/api/./sandbox/d1",
        "/api/sandboxes/d1",
        "/api/sandbox/d1/x",
        "/apix/sandbox/d1",
        "/sandbox/d1",
        "/api/sandbox/d2",
        "/api/sandbox/%ff",
    ] {
        assert!(!daytona(path), "{path}");
    }
}

#[test]
fn a_create_names_its_size_where_each_service_reads_it() {
    assert_eq!(
        Api::E2b.size(br#"{"templateID":"base","metadata":{}}"#),
        Some("base".into())
    );
    assert_eq!(
        Api::Daytona.size(br#"{"snapshot":"ubuntu-4vcpu-8ram-100gb","cpu":4}"#),
        Some("ubuntu-4vcpu-8ram-100gb".into())
    );
    assert_eq!(
        Api::Daytona.size(br#"{"labels":{}}"#),
        None,
        "the default snapshot"
    );
    assert_eq!(Api::Daytona.size(br#"{"templateID":"base"}"#), None);
    assert_eq!(Api::E2b.size(br#"{"snapshot":"x"}"#), None);
}

#[test]
fn the_upstream_keeps_its_base_path() {
    let u = Upstream::parse("https://app.daytona.io/api/").unwrap();
    assert_eq!(
        (u.scheme.as_str(), u.authority.as_str(), u.base.as_str()),
        ("https", "app.daytona.io", "/api")
    );
    let u = Upstream::parse("http://127.0.0.1:9/").unwrap();
    assert_eq!((u.authority.as_str(), u.base.as_str()), ("127.0.0.1:9", ""));
    assert!(Upstream::parse("unix:///x").is_err());
}

async fn bound(claims: mpsc::UnboundedSender<Ask>) -> CloudProxy {
    CloudProxy::bind(Api::E2b, "http://127.0.0.1:9", labels(), claims)
        .await
        .unwrap()
}

/// The pipeline's claim step for an answer naming `id`: the target read as the proxy reads
/// it (an answer it cannot read is a broken test), sent, and waited for.
async fn claim(
    shared: &Shared,
    id: &str,
    hold: Hold,
) -> Result<(), crate::proxy::claim::NotClaimed> {
    let creating = Creating(shared);
    let answer = format!(r#"{{"sandboxID":"{id}"}}"#);
    let target = match creating.created((), answer.as_bytes()) {
        Ok(target) => target,
        Err(e) => panic!("the answer naming {id:?} is not read: {e:?}"),
    };
    crate::proxy::claim::claim(creating.claims(), target, hold, None).await
}

#[tokio::test(start_paused = true)]
async fn a_claim_without_an_acknowledgement_is_an_error_never_a_silent_pass() {
    let (tx, rx) = mpsc::unbounded_channel();
    let proxy = bound(tx).await;
    let err = claim(&proxy.shared, "abc", Hold::Claim)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("did not journal it within 5 s"), "{err}");
    drop(rx);
    let err = claim(&proxy.shared, "abc", Hold::Claim)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("takes no more claims"), "{err}");
}

#[tokio::test]
async fn an_acknowledged_claim_names_the_provider_and_the_id() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let proxy = bound(tx).await;
    let sidecar = tokio::spawn(async move {
        let Some(Ask::Claim(Claim {
            target, hold, ack, ..
        })) = rx.recv().await
        else {
            panic!("a claim");
        };
        let _ = ack.send(());
        (target, hold)
    });
    claim(&proxy.shared, "abc", Hold::Detach).await.unwrap();
    let (target, hold) = sidecar.await.unwrap();
    assert_eq!(hold, Hold::Detach);
    assert_eq!(
        (target.provider.as_str(), target.id.as_str()),
        ("e2b", "abc")
    );
    let (name, url) = proxy.assignment();
    assert_eq!(name, "E2B_API_URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
}

#[test]
fn a_lifetime_limit_is_stamped_as_expires_and_cuts_an_e2b_timeout() {
    let aged = crate::proxy::stamp::Labels {
        session: labels(),
        budget: crate::budget::Limits {
            lifetime: Some(std::time::Duration::from_secs(120)),
            ..Default::default()
        }
        .into(),
    };
    let stamp = |api: Api, body: &str| -> serde_json::Value {
        serde_json::from_slice(&api.stamp(body.as_bytes(), &aged).unwrap().0).unwrap()
    };
    let now = crate::timefmt::now_unix();
    let expires = |v: &serde_json::Value, map: &str| -> i64 {
        v[map]["sandguard.expires"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    // Go applies every spelling in order: the last one was the 300 s asked for.
    let v = stamp(
        Api::E2b,
        r#"{"timeout":30,"TimeOut":300,"templateID":"base"}"#,
    );
    assert_eq!(v["timeout"], 120);
    assert!(v.get("TimeOut").is_none());
    assert!((now + 120..=now + 122).contains(&expires(&v, "metadata")));
    // Shorter than the limit, absent, or not a number: as asked.
    assert_eq!(stamp(Api::E2b, r#"{"timeout":60}"#)["timeout"], 60);
    assert!(stamp(Api::E2b, "{}").get("timeout").is_none());
    assert_eq!(stamp(Api::E2b, r#"{"timeout":"x"}"#)["timeout"], "x");
    let v = stamp(Api::Daytona, "{}");
    assert!((now + 120..=now + 122).contains(&expires(&v, "labels")));
    // A create may ask to end sooner than the limit, never later.
    let sooner = format!(r#"{{"labels":{{"sandguard.expires":"{}"}}}}"#, now + 5);
    assert_eq!(expires(&stamp(Api::Daytona, &sooner), "labels"), now + 5);
    let later = format!(r#"{{"labels":{{"sandguard.expires":"{}"}}}}"#, now + 9999);
    assert!(expires(&stamp(Api::Daytona, &later), "labels") <= now + 122);
}
