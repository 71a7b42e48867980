//! Unit tests of the Modal driver: filters, mapping, the paging guard, configuration, TLS
//! and call metadata.

use super::list::{next_page_moves_back, tag_filter};
use super::*;
use tonic::metadata::MetadataMap;
use wire::SandboxTag;

#[test]
fn valued_terms_become_tags_and_key_only_terms_stay_local() {
    let tags = tag_filter(&Selector::session("s1"));
    assert_eq!(tags.len(), 1);
    assert_eq!(
        (tags[0].tag_name.as_str(), tags[0].tag_value.as_str()),
        ("sandguard.session", "s1")
    );
    assert!(tag_filter(&Selector::managed()).is_empty());
}

#[test]
fn sandboxes_map_with_their_tags_as_labels() {
    let info = SandboxInfo {
        id: "sb-1".into(),
        created_at: 1_700_000_000.75,
        image_id: "im-1".into(),
        tags: vec![SandboxTag {
            tag_name: "sandguard.session".into(),
            tag_value: "s1".into(),
        }],
        task_info: Some(wire::TaskInfo {
            started_at: 1.0,
            ..Default::default()
        }),
        ..Default::default()
    };
    let s = to_sandbox(info);
    assert_eq!(s.id, "sb-1");
    assert_eq!(s.status, "running");
    assert_eq!(s.created_at, Some(1_700_000_000));
    assert_eq!(s.image.as_deref(), Some("im-1"));
    assert_eq!(s.session(), Some("s1"));
    assert_eq!(status_word(None), "pending");
    let done = wire::TaskInfo {
        result: Some(wire::GenericResult {
            status: 3,
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(status_word(Some(&done)), "terminated");
}

#[test]
fn a_failover_list_uses_its_first_url() {
    assert_eq!(
        first_url("https://api.modal.com, https://api.modal2.com"),
        "https://api.modal.com"
    );
    assert_eq!(first_url("http://127.0.0.1:9/"), "http://127.0.0.1:9");
}

#[test]
fn the_walk_refuses_a_timestamp_that_does_not_move_back() {
    assert!(next_page_moves_back(None, 10.0));
    assert!(next_page_moves_back(Some(10.0), 9.5));
    assert!(!next_page_moves_back(Some(10.0), 10.0));
    assert!(!next_page_moves_back(Some(10.0), 11.0));
    assert!(!next_page_moves_back(None, 0.0));
    assert!(!next_page_moves_back(None, f64::NAN));
}

fn settings(id: Option<&str>, secret: Option<&str>, url: &str) -> CloudSettings {
    CloudSettings {
        token: id.map(Secret::new),
        secret: secret.map(Secret::new),
        url: url.into(),
        app: None,
        timeout: Duration::from_secs(1),
        rate: None,
    }
}

#[test]
fn configured_only_with_both_halves_of_the_token() {
    let reason = |id, secret| match entry(&settings(id, secret, "http://127.0.0.1:1"), None).state {
        EntryState::Unconfigured(r) => r,
        EntryState::Configured(_) => "configured".into(),
    };
    assert!(reason(None, Some("as-1")).starts_with("MODAL_TOKEN_ID is not set"));
    assert!(reason(Some("ak-1"), None).starts_with("MODAL_TOKEN_SECRET is not set"));
    assert_eq!(reason(Some("ak-1"), Some("as-1")), "configured");
}

#[tokio::test]
async fn https_gets_tls_and_a_bad_url_is_fatal() {
    let (id, secret) = (Secret::new("ak-1"), Secret::new("as-1"));
    let provider = |url| ModalProvider::new(&settings(None, None, url), &id, &secret, "");
    assert!(provider("https://api.modal.com:443")
        .channel()
        .await
        .is_ok());
    assert!(provider("http://127.0.0.1:1").channel().await.is_ok());
    assert!(matches!(
        provider("not a url").channel().await,
        Err(ProviderError::Fatal(_))
    ));
}

#[test]
fn every_call_carries_the_token_marked_sensitive() {
    let (id, secret) = (Secret::new("ak-1"), Secret::new("as-1"));
    let provider = ModalProvider::new(&settings(None, None, "http://x"), &id, &secret, "");
    let mut metadata = MetadataMap::new();
    provider.authorize(&mut metadata, None).unwrap();
    let token = metadata.get("x-modal-token-secret").unwrap();
    assert_eq!(token.to_str().unwrap(), "as-1");
    assert!(token.is_sensitive());
    assert_eq!(metadata.get("x-modal-token-id").unwrap(), "ak-1");
    let (client_type, client_version) = client::TEST_CLIENT;
    assert_eq!(metadata.get("x-modal-client-type").unwrap(), client_type);
    assert_eq!(
        metadata.get("x-modal-client-version").unwrap(),
        client_version
    );
    assert!(metadata.get(wire::AUTH_TOKEN_HEADER).is_none());
    assert_eq!(
        provider.redact("bad token as-1", None),
        "bad token [redacted]"
    );

    let jwt = Secret::new("eyJh.eyJl.c2ln");
    let mut metadata = MetadataMap::new();
    provider.authorize(&mut metadata, Some(&jwt)).unwrap();
    let token = metadata.get(wire::AUTH_TOKEN_HEADER).unwrap();
    assert_eq!(token.to_str().unwrap(), "eyJh.eyJl.c2ln");
    assert!(token.is_sensitive());
    assert_eq!(
        provider.redact("token eyJh.eyJl.c2ln expired", Some(&jwt)),
        "token [redacted] expired"
    );
}
