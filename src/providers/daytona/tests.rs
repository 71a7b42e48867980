//! Unit tests of `daytona`.

use std::collections::HashMap;

use super::wire::ListAnswer;
use super::*;
use crate::config::{ConfigError, Overrides, Settings};
use crate::labels::SESSION;
use crate::providers::Kind;

#[test]
fn only_valued_terms_reach_the_filter() {
    assert_eq!(
        label_filter(&Selector::session("s1")).as_deref(),
        Some(r#"{"sandguard.session":"s1"}"#)
    );
    assert_eq!(label_filter(&Selector::managed()), None);
}

#[test]
fn both_list_shapes_parse() {
    let paged: ListAnswer = serde_json::from_str(
        r#"{"items":[{"id":"a","state":"started","createdAt":"2026-06-01T10:00:00.123Z",
            "snapshot":"daytonaio/sandbox:0.4","labels":{"sandguard.session":"s"},
            "autoDestroyAt":"2026-06-01T11:00:00.000Z",
            "cpu":1,"memory":1,"disk":3,"gpu":0,"public":false,"target":"eu",
            "organizationId":"o","name":"n","user":"daytona","toolboxProxyUrl":"x"}],
            "nextCursor":"c2"}"#,
    )
    .unwrap();
    let (items, next) = paged.into_page();
    assert_eq!(next.as_deref(), Some("c2"));
    let s = items.into_iter().next().unwrap().into_sandbox();
    assert_eq!(s.id, "a");
    assert_eq!(s.status, "started");
    assert_eq!(s.created_at, Some(1_780_308_000));
    assert_eq!(s.expires_at, Some(1_780_311_600));
    assert_eq!(s.image.as_deref(), Some("daytonaio/sandbox:0.4"));
    assert_eq!(s.labels[SESSION], "s");
    assert_eq!(s.kind, Kind::Instance);

    let last: ListAnswer = serde_json::from_str(r#"{"items":[],"nextCursor":null}"#).unwrap();
    let (items, next) = last.into_page();
    assert!(items.is_empty() && next.is_none());

    let legacy: ListAnswer =
        serde_json::from_str(r#"[{"id":"b","labels":null,"autoDestroyAt":null},{"id":"c"}]"#)
            .unwrap();
    let (items, next) = legacy.into_page();
    assert_eq!(next, None);
    let ids: Vec<String> = items.iter().map(|i| i.id.clone()).collect();
    assert_eq!(ids, ["b", "c"]);
    let s = items.into_iter().next().unwrap().into_sandbox();
    assert_eq!(s.status, "unknown");
    assert!(s.labels.is_empty() && s.created_at.is_none() && s.image.is_none());
    assert_eq!(s.expires_at, None, "no TTL, absent or null alike");
}

#[test]
fn the_ttl_rounds_up_to_whole_minutes_and_never_disables() {
    assert_eq!(ttl_minutes(Duration::ZERO), 1);
    assert_eq!(ttl_minutes(Duration::from_secs(1)), 1);
    assert_eq!(ttl_minutes(Duration::from_secs(60)), 1);
    assert_eq!(ttl_minutes(Duration::from_secs(61)), 2);
    assert_eq!(ttl_minutes(Duration::from_secs(3600)), 60);
}

#[test]
fn a_missing_collection_is_fatal() {
    assert!(matches!(
        listing_error(ProviderError::Gone("nope".into())),
        ProviderError::Fatal(_)
    ));
}

#[test]
fn the_bare_key_is_scrubbed() {
    let key = Secret::new("dtn_secret");
    let p = DaytonaProvider::new(
        Auth::ApiKey(&key),
        "http://127.0.0.1:1/api",
        Duration::from_secs(1),
    )
    .unwrap();
    assert_eq!(
        p.http.redact("key dtn_secret refused"),
        "key [redacted] refused"
    );
    assert_eq!(p.http.redact("Bearer dtn_secret"), "[redacted]");
    assert_eq!(p.organization, None);

    let jwt = Secret::new("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1In0.c2ln");
    let p = DaytonaProvider::new(
        Auth::Jwt {
            token: &jwt,
            organization: "org-1",
        },
        "http://127.0.0.1:1/api",
        Duration::from_secs(1),
    )
    .unwrap();
    assert!(!p
        .http
        .redact("token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1In0.c2ln refused")
        .contains("c2ln"));
    assert_eq!(p.organization.as_deref(), Some("org-1"));
}

#[test]
fn path_segments_are_encoded() {
    assert_eq!(encode_segment("3f2a-b_c.d~").unwrap(), "3f2a-b_c.d~");
    assert_eq!(encode_segment("a b?#%").unwrap(), "a%20b%3F%23%25");
    assert!(
        encode_segment("a/b").is_err(),
        "a '/' is refused, never encoded"
    );
}

#[test]
fn unconfigured_names_the_variables() {
    let settings = CloudSettings {
        token: None,
        secret: None,
        url: "https://app.daytona.io/api".into(),
        app: None,
        timeout: Duration::from_secs(30),
        rate: None,
    };
    let e = entry(&settings);
    assert_eq!(e.name, "daytona");
    match e.state {
        EntryState::Unconfigured(reason) => {
            assert!(reason.contains("DAYTONA_API_KEY"), "{reason}");
            assert!(reason.contains("DAYTONA_JWT_TOKEN"), "{reason}");
        }
        EntryState::Configured(_) => panic!("configured without a key"),
    }
}

fn resolve(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain([
            ("HOME".into(), "/h".into()),
            ("SANDGUARD_CONFIG".into(), "/dev/null".into()),
        ])
        .collect();
    Settings::resolve(&Overrides::default(), &env)
}

fn configured(settings: &Settings) -> bool {
    matches!(entry(&settings.daytona).state, EntryState::Configured(_))
}

#[test]
fn credentials_are_chosen_as_the_sdk_chooses_them() {
    const JWT: &str = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ1In0.c2VjcmV0";
    // An API key wins over a JWT; the organisation then goes unused.
    let both = resolve(&[
        ("DAYTONA_API_KEY", "dtn_k"),
        ("DAYTONA_JWT_TOKEN", JWT),
        ("DAYTONA_ORGANIZATION_ID", "org-1"),
    ])
    .unwrap();
    assert_eq!(
        both.daytona.token.as_ref().map(Secret::expose),
        Some("dtn_k")
    );
    assert!(configured(&both));
    // A JWT with its organisation.
    let jwt = resolve(&[
        ("DAYTONA_JWT_TOKEN", JWT),
        ("DAYTONA_ORGANIZATION_ID", "org-1"),
    ])
    .unwrap();
    assert!(jwt.daytona.token.is_none());
    assert_eq!(jwt.daytona.app.as_deref(), Some("org-1"));
    assert!(configured(&jwt));
    // An empty variable is unset, as the SDK's `or` chain treats it.
    let empty_key = resolve(&[
        ("DAYTONA_API_KEY", ""),
        ("DAYTONA_JWT_TOKEN", JWT),
        ("DAYTONA_ORGANIZATION_ID", "org-1"),
    ])
    .unwrap();
    assert!(empty_key.daytona.token.is_none() && configured(&empty_key));
    // An organisation alone configures nothing.
    let org = resolve(&[("DAYTONA_ORGANIZATION_ID", "org-1")]).unwrap();
    assert!(!configured(&org));
    // A JWT without its organisation is an error that names the fix, never the token.
    for vars in [
        &[("DAYTONA_JWT_TOKEN", JWT)][..],
        &[("DAYTONA_JWT_TOKEN", JWT), ("DAYTONA_ORGANIZATION_ID", "")],
    ] {
        let Err(e) = resolve(vars) else {
            panic!("a JWT without an organisation was accepted")
        };
        let text = e.to_string();
        assert!(text.contains("DAYTONA_ORGANIZATION_ID"), "{text}");
        assert!(
            !text.contains("c2VjcmV0") && !text.contains("eyJ"),
            "{text}"
        );
    }
}
