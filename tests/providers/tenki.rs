//! Tenki in the conformance suite: the adapter for `support/tenki.rs` (a program stamps the
//! `sandguard:<session>` tag, cut to Tenki's 32 characters, and its labels as metadata; Connect
//! RPCs; 100 a page), and Tenki's quirks: the tag, not the metadata, is what makes a sandbox
//! sandguard's, and renewal extends the timeout only as far as it needs to.

use std::process::Command;
use std::time::Duration;

use super::{session_id, Cloud, Config, Rig, Support};
use crate::support::emu::{Faults, Hit};
use crate::support::json;
use crate::support::tenki::{Tenki, TOKEN};
use sandguard::labels::SESSION;
use sandguard::testing::providers::tenki::session_tag;

const LIST: &str = "/tenki.sandbox.v1.SandboxService/ListWorkspaceSandboxes";

impl Cloud for Tenki {
    const NAME: &'static str = "tenki";
    const PAGE: Option<usize> = Some(100);
    const UNAUTHORIZED: &'static str = "HTTP 401";
    const RUNNING: &'static str = "running";
    const IMAGE: &'static str = "tenki/base@sha256:00";
    /// The driver keeps only the `sandguard.` keys of a session's metadata.
    const LISTS_OTHER_LABELS: bool = false;
    const CREDENTIAL_VAR: &'static str = "TENKI_API_KEY";
    const DROPPED_CONNECTIONS: Support = Support::Yes;
    const SERVER_TTL: Support = Support::Yes;

    fn start() -> Tenki {
        Tenki::start()
    }

    fn configure(&self, cmd: &mut Command) {
        cmd.env("TENKI_API_KEY", TOKEN)
            .env("TENKI_API_URL", self.url())
            .env_remove("TENKI_AUTH_TOKEN")
            .env_remove("TENKI_API_ENDPOINT");
    }

    fn wrong_credential(cmd: &mut Command) -> &'static str {
        let wrong = "tk_wrong_0a1b2c3d4e5f";
        cmd.env("TENKI_API_KEY", wrong);
        wrong
    }

    fn secrets() -> &'static [&'static str] {
        &[TOKEN]
    }

    fn detail(&self) -> String {
        format!("Tenki API at {}", self.url())
    }

    /// The session's tag, if there is a session, and every label as metadata.
    fn insert(&self, labels: &[(&str, &str)]) -> String {
        let tags: Vec<String> = labels
            .iter()
            .filter(|(k, _)| *k == SESSION)
            .map(|(_, session)| session_tag(session))
            .collect();
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        Tenki::insert(self, &tags, labels)
    }

    /// Not terminated.
    fn exists(&self, id: &str) -> bool {
        self.alive(id)
    }

    fn set_faults(&self, faults: Faults) {
        self.emu.set_faults(faults);
    }

    fn hits(&self) -> Vec<Hit> {
        self.emu.hits()
    }

    fn is_listing(hit: &Hit) -> bool {
        hit.path == LIST
    }

    fn expires_at(&self, id: &str) -> Option<i64> {
        self.timeout_at(id)
    }
}

conformance!(Tenki; dropped_connections, server_ttl);

#[test]
fn the_tag_not_the_metadata_makes_a_sandbox_sandguards() {
    let rig = Rig::<Tenki>::new(Config::deadline(3));
    let session = session_id();
    let full = rig.labelled(&session);
    let tag_only = rig.cloud.insert(&[&session_tag(&session)], &[]);
    let untagged = rig.cloud.insert(&["app:test"], &[(SESSION, &session)]);
    let stranger = rig.cloud.insert(&["sandguard.session", "ci"], &[]);

    let out = rig.run(&["ps", "--json", "--provider", "tenki"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let entry = |id: &str| {
        v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["instance_id"] == id)
            .cloned()
    };
    assert!(entry(&full).is_some(), "{v}");
    assert!(
        entry(&untagged).is_none() && entry(&stranger).is_none(),
        "{v}"
    );
    // Without metadata a listing of every session sees the start of the id the tag holds.
    let tagged = entry(&tag_only).unwrap_or_else(|| panic!("{v}"));
    assert_eq!(tagged["session"], &session[..22]);

    let out = rig.run(&["ps", "--provider", "tenki"]);
    assert!(!out.stdout.contains(&untagged[..8]), "{}", out.stdout);
}

#[test]
fn providers_checks_tenki_with_one_listing_call() {
    let rig = Rig::<Tenki>::new(Config::deadline(3));
    let out = rig.run(&["providers", "--json"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(rig.cloud.calls("ListWorkspaceSandboxes"), 1);
}

#[test]
fn renew_keeps_the_timeout_a_ttl_from_now() {
    use sandguard::labels::Selector;
    use sandguard::testing::config::{CloudSettings, Secret};
    use sandguard::testing::providers::{tenki::TenkiProvider, Provider, ProviderError, Sandbox};

    let rig = Rig::<Tenki>::new(Config::deadline(3));
    let t = &rig.cloud;
    let session = session_id();
    let id = rig.labelled(&session);
    let settings = CloudSettings {
        rate: None,
        token: Some(Secret::new(TOKEN)),
        secret: None,
        url: t.url().to_string(),
        app: None,
        timeout: Duration::from_secs(5),
    };
    let p = TenkiProvider::new(&settings, settings.token.as_ref().unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let found = p.list(&Selector::session(&session)).await.unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].session(), Some(session.as_str()));
        let before = t.timeout_at(&id).unwrap();
        p.renew(&found[0], Duration::from_secs(7200)).await.unwrap();
        let after = t.timeout_at(&id).unwrap();
        let now = sandguard::testing::timefmt::now_unix();
        assert!(
            (now + 7195..=now + 7205).contains(&after),
            "{before} → {after}"
        );
        // Already two hours out: a shorter renewal asks for nothing.
        p.renew(&found[0], Duration::from_secs(600)).await.unwrap();
        assert_eq!(t.calls("ExtendSession"), 1);
        assert_eq!(t.timeout_at(&id), Some(after));
        p.remove(&found[0]).await.unwrap();
        let again = p.remove(&found[0]).await;
        assert!(matches!(again, Err(ProviderError::Gone(_))), "{again:?}");
        let unknown = Sandbox {
            inherited: false,
            identity: None,
            id: "00000000-0000-4000-8000-000000000000".into(),
            ..found[0].clone()
        };
        assert!(matches!(
            p.remove(&unknown).await,
            Err(ProviderError::Gone(_))
        ));
    });
}
