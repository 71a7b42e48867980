use std::collections::HashMap;

use super::*;
use crate::config::Overrides;

fn settings(state: &Path) -> Settings {
    let env: HashMap<String, String> = [
        ("HOME", "/nonexistent"),
        ("SANDGUARD_CONFIG", "/dev/null"),
        ("SANDGUARD_STATE_DIR", state.to_str().unwrap()),
        ("DOCKER_HOST", "unix:///nonexistent/docker.sock"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Settings::resolve(&Overrides::default(), &env).unwrap()
}

fn plan(cloud: ProxyMode) -> StartPlan {
    StartPlan {
        owner_pid: std::process::id(),
        owner_start: None,
        session: None,
        control: None,
        grace: None,
        docker_proxy: ProxyMode::Auto,
        cloud_proxy: cloud,
        log_beside_journal: false,
        heard: true,
        handed: None,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn journals(state: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(state.join("sessions"))
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "journal"))
        .collect()
}

#[test]
fn the_journal_is_on_disk_before_start_returns_and_warnings_are_told() {
    let dir = std::env::temp_dir().join(format!("sandguard-start-{}", std::process::id()));
    let settings = settings(&dir);
    let mut warned = Vec::new();
    let started = runtime()
        .block_on(start(&settings, plan(ProxyMode::Off), &mut |w: &str| {
            warned.push(w.to_string());
        }))
        .unwrap();
    let path = dir
        .join("sessions")
        .join(format!("{}.journal", started.session));
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with("{") && text.contains("\"ev\":\"start\""),
        "{text}"
    );
    assert!(
        started.env.is_empty(),
        "no daemon, no proxy: {:?}",
        started.env
    );
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("no Docker daemon answers"), "{warned:?}");
    drop(started);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failure_after_the_journal_takes_the_new_session_back() {
    let dir = std::env::temp_dir().join(format!("sandguard-start-fail-{}", std::process::id()));
    let settings = settings(&dir);
    let failed = runtime().block_on(start(&settings, plan(ProxyMode::On), &mut |_: &str| {}));
    assert!(
        matches!(&failed, Err(StartError::Usage(m)) if m.contains("--cloud-proxy")),
        "{:?}",
        failed.err()
    );
    assert_eq!(journals(&dir), Vec::<std::path::PathBuf>::new());
    let _ = std::fs::remove_dir_all(&dir);
}
