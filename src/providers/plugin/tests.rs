//! Unit tests of `plugin`.

use super::*;
use crate::config::PluginSettings;
use crate::ledger::testutil::TempDir;
use crate::providers::EntryState;
use std::path::PathBuf;

/// A script written by `sh`, so that no descriptor open for writing it exists in this process:
/// a child another test forks meanwhile would keep one until it execs, and running the script
/// then fails with ETXTBSY ("Text file busy"), as a loaded CI run once saw.
fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
    use std::io::Write;
    let path = dir.join(name);
    let mut sh = std::process::Command::new("/bin/sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sh.stdin
        .take()
        .unwrap()
        .write_all(format!("#!/bin/sh\n{body}\n").as_bytes())
        .unwrap();
    assert!(sh.wait().unwrap().success());
    path
}

#[test]
fn discovery_takes_executable_files_first_on_path_and_config_wins() {
    let a = TempDir::new("plugin-a");
    let b = TempDir::new("plugin-b");
    let first = script(a.path(), "sandguard-provider-acme", "true");
    script(b.path(), "sandguard-provider-acme", "true");
    script(b.path(), "sandguard-provider-docker", "true");
    script(b.path(), "sandguard-provider-Bad", "true");
    std::fs::write(b.path().join("sandguard-provider-plain"), "x").unwrap();
    std::fs::create_dir(b.path().join("sandguard-provider-dir")).unwrap();
    let path = std::env::join_paths([
        "relative",
        a.path().to_str().unwrap(),
        b.path().to_str().unwrap(),
    ])
    .unwrap();
    let found = discover(Some(&path));
    assert_eq!(found.keys().collect::<Vec<_>>(), ["acme", "docker"]);
    assert_eq!(found["acme"], first);

    let configured = vec![
        PluginSettings {
            name: "zed".into(),
            command: Some(vec!["/opt/zed".into(), "--x".into()]),
            timeout: Duration::from_secs(5),
            rate: None,
        },
        PluginSettings {
            name: "ghost".into(),
            command: None,
            timeout: Duration::from_secs(5),
            rate: None,
        },
    ];
    let entries = entries(&configured, Some(&path), &["docker"], &[]);
    let names: Vec<&str> = entries.iter().map(|e| e.name).collect();
    assert_eq!(names, ["acme", "ghost", "zed"]);
    assert!(matches!(entries[0].state, EntryState::Configured(_)));
    let EntryState::Unconfigured(why) = &entries[1].state else {
        panic!("ghost has no command")
    };
    assert!(why.contains("sandguard-provider-ghost"), "{why}");
}

#[tokio::test]
async fn a_hanging_plugin_is_killed_at_its_time_limit() {
    let dir = TempDir::new("plugin-hang");
    let pidfile = dir.path().join("grandchild");
    let body = format!("sleep 30 &\necho $! > {}\nsleep 30", pidfile.display());
    let path = script(dir.path(), "hang", &body);
    let plugin = Plugin::new("hang", vec![path.into()], Duration::from_millis(300));
    let started = std::time::Instant::now();
    let err = plugin.list(&Selector::managed()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, ProviderError::Transient { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("did not answer `list` within 300ms"),
        "{err}"
    );
    // What the plugin started in the background dies with it (its process group).
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the grandchild lives on"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_plugin_round_trip_reads_the_request_and_checks_without_describe() {
    let dir = TempDir::new("plugin-echo");
    let body = r#"case "$1" in
list) read -r req; printf '{"sandboxes":[{"id":"x1","labels":{"sandguard.session":"s"}},{"id":"x2","labels":{}}],"req":%s}' "$req" ;;
remove) read -r req; case "$req" in *'"x1"'*) echo '{"result":"removed"}' ;; *) echo '{"result":"gone"}' ;; esac ;;
*) exit 2 ;;
esac"#;
    let path = script(dir.path(), "echo", body);
    let plugin = Plugin::new("echo", vec![path.into()], Duration::from_secs(10));
    let all = plugin.list(&Selector::managed()).await.unwrap();
    assert_eq!(all.len(), 2, "the driver passes on what the plugin listed");
    // Callers check the selector (reclaim::list_all): the unlabelled one never reaches them.
    let listed: Vec<Sandbox> = all
        .into_iter()
        .filter(|s| Selector::managed().matches(&s.labels))
        .collect();
    assert_eq!(listed[0].provider, "echo");
    plugin.remove(&listed[0]).await.unwrap();
    let other = Sandbox {
        inherited: false,
        identity: None,
        id: "x9".into(),
        ..listed[0].clone()
    };
    assert!(matches!(
        plugin.remove(&other).await,
        Err(ProviderError::Gone(_))
    ));
    assert!(plugin.capabilities().ttl, "provisional until described");
    assert!(plugin.check().await.unwrap().contains("no describe"));
    assert!(!plugin.capabilities().ttl);
    plugin
        .renew(&listed[0], Duration::from_secs(60))
        .await
        .unwrap();
}

/// Issue 22: an id a plugin lists that its parser refuses is dropped (never removed); the
/// rest of the listing stands, and a claim of such an id is refused.
#[tokio::test]
async fn a_listed_id_no_parser_accepts_is_dropped_and_never_claimable() {
    let dir = TempDir::new("plugin-ids");
    let body = r#"case "$1" in
list) echo '{"sandboxes":[{"id":"ok-1"},{"id":""},{"id":"."},{"id":".."},{"id":"a/b"},{"id":"%2e%2e"},{"id":"a b"},{"id":"-rf"},{"id":"ok:2"}]}' ;;
*) exit 2 ;;
esac"#;
    let path = script(dir.path(), "odd", body);
    let plugin = Plugin::new("odd", vec![path.into()], Duration::from_secs(10));
    let listed = plugin.list(&Selector::managed()).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["ok-1", "ok:2"]);
    for id in ["", ".", "..", "a/b", "%2e%2e", "a b", "-rf"] {
        assert!(plugin.parse_claim(id).is_err(), "{id:?}");
    }
    assert_eq!(plugin.parse_claim("ok-1").unwrap().id, "ok-1");
}
