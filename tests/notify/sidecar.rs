//! The sidecar's events: a budget limit hit through the Docker proxy (`limit_reached`, once
//! however often it refuses), and nothing else from a session whose reclaim left nothing
//! pending.

use std::time::Duration;

use super::*;
use crate::watch::wrapper::{guarded_env, sidecar_pid, unsafe_kill, wait_for_file};

#[test]
fn a_limit_that_refuses_three_creates_is_told_once_and_a_clean_reclaim_is_not_told() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("notify-limit");
    let hook = Hook::start(Answer::Ok);
    let config = s.file(
        "sandguard.toml",
        notify_table(&format!("webhook = \"{}\"\n", hook.url())),
    );
    let out = s.path().display().to_string();
    let script = format!(
        r#"c1=$(docker create --network none {IMAGE} true)
for i in 1 2 3; do docker create --network none {IMAGE} true > /dev/null 2>&1 && echo made >> {out}/made; done
printf '%s\n' "$SANDGUARD_SESSION" "$c1" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#
    );
    let config = config.display().to_string();
    let mut child = guarded_env(
        &s,
        &[("SANDGUARD_CONFIG", &config)],
        &["run", "--docker-proxy", "--max-sandboxes", "1"],
        &script,
    );
    let lines = wait_for_file(&s.path().join("done"), &mut child);
    let [session, c1] = <[String; 2]>::try_from(lines).unwrap();
    assert!(!s.path().join("made").exists(), "all three refused");
    eventually(Duration::from_secs(10), "the limit is told", || {
        !hook.of("limit_reached").is_empty()
    });
    let sidecar = sidecar_pid(&session);
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.0.wait().unwrap();
    eventually(Duration::from_secs(10), "the reclaim", || {
        !container_exists(&c1)
    });
    eventually(Duration::from_secs(10), "the sidecar exits", || {
        !Path::new(&format!("/proc/{sidecar}")).exists()
    });
    let told = hook.events();
    assert_eq!(
        told.len(),
        1,
        "one limit, told once; the clean reclaim is not told: {told:?}"
    );
    let e = &told[0];
    check_common(e, "limit_reached");
    assert_eq!(e["session"], session.as_str(), "{e}");
    assert_eq!(e["limit"], "sandboxes", "{e}");
    assert_eq!(e["provider"], serde_json::Value::Null, "{e}");
    let text = e["text"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "session {session}: refused a sandbox create on docker"
        )) && text.contains("`sandboxes`"),
        "{text}"
    );
}
