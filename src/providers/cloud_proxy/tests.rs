use std::collections::BTreeMap;

use super::*;

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("sandguard.session".to_string(), "s1".to_string()),
        ("sandguard.owner".to_string(), "o".to_string()),
    ])
}

fn stamped(api: Api, body: &str) -> serde_json::Value {
    serde_json::from_slice(&api.stamp(body.as_bytes(), &labels()).unwrap()).unwrap()
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
fn what_cannot_be_stamped_is_an_error() {
    for (api, body) in [
        (Api::E2b, "not json"),
        (Api::E2b, "[]"),
        (Api::E2b, r#"{"metadata":"x"}"#),
        (Api::Daytona, "null"),
        (Api::Daytona, r#"{"labels":[1]}"#),
    ] {
        assert!(api.stamp(body.as_bytes(), &labels()).is_err(), "{body}");
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

async fn bound(claims: mpsc::UnboundedSender<Claim>) -> CloudProxy {
    CloudProxy::bind(Api::E2b, "http://127.0.0.1:9", labels(), claims)
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_claim_without_an_acknowledgement_is_an_error_never_a_silent_pass() {
    let (tx, rx) = mpsc::unbounded_channel();
    let proxy = bound(tx).await;
    let err = claim(&proxy.shared, "abc").await.unwrap_err();
    assert!(err.contains("did not journal it within 5 s"), "{err}");
    drop(rx);
    let err = claim(&proxy.shared, "abc").await.unwrap_err();
    assert!(err.contains("takes no more claims"), "{err}");
}

#[tokio::test]
async fn an_acknowledged_claim_names_the_provider_and_the_id() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let proxy = bound(tx).await;
    let sidecar = tokio::spawn(async move {
        let Claim { target, ack } = rx.recv().await.unwrap();
        let _ = ack.send(());
        target
    });
    claim(&proxy.shared, "abc").await.unwrap();
    let target = sidecar.await.unwrap();
    assert_eq!(
        (target.provider.as_str(), target.id.as_str()),
        ("e2b", "abc")
    );
    let (name, url) = proxy.assignment();
    assert_eq!(name, "E2B_API_URL");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
}
