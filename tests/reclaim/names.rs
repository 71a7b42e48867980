//! A name is not an identity, to the end of a reclaim. Where ids are names (Docker volumes), a
//! session that claimed a volume, saw a stranger take its name again and claimed the new one
//! too holds two claims of one name, each pinned to its object: the first is refused ("now is
//! not the one claimed"), the second is reclaimed like any claim, and a removal of it that
//! fails keeps the session pending for a sweep. Before 2026-12-07 the reclaim kept one record
//! per name: the refusal stood for both, and the session read `reclaimed` with the second
//! volume still there, never to be finished (found by the model, seed 499166176).

use std::time::Duration;

use super::judgement::{ended, in_session_env};
use crate::support::*;

#[test]
fn two_claims_of_one_name_are_two_objects_to_the_end_of_the_reclaim() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("two-of-a-name");
    let v = format!("sg-two-{}", unique());
    let real =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let config = s.path().join("sandguard.toml");
    std::fs::write(
        &config,
        "[reclaim]\ndeadline = \"3s\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n",
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    // Made past the proxy (unlabelled); the second volume of the name is made in a later
    // second (Docker dates a volume to the second) and is kept busy by a stranger's container,
    // so its removal fails ("volume is in use").
    let d = format!("DOCKER_HOST={real} docker");
    let body = format!(
        "{d} volume create {v} >/dev/null; sandguard claim docker volume/{v} >&2; \
         {d} volume rm {v} >/dev/null; sleep 1.1; {d} volume create {v} >/dev/null; \
         sandguard claim docker volume/{v} >&2; \
         {d} run -d --network none -v {v}:/data {IMAGE} sleep 600"
    );
    let (lines, _) = in_session_env(&s, &[("SANDGUARD_CONFIG", config.as_str())], "two", &body);
    let (session, stranger) = (&lines[0], &lines[1]);
    let mut res = Resources::default();
    res.adopt_container(stranger);
    ended(&s, session);
    let journal =
        std::fs::read_to_string(crate::watch::sidecar::journal(&s, session)).unwrap_or_default();
    let pinned = journal
        .matches(&format!(
            r#""ev":"claim","provider":"docker","id":"volume/{v}@"#
        ))
        .count();
    assert_eq!(
        pinned, 2,
        "two claims, each pinned to its volume: {journal}"
    );
    let row = crate::support::plugin::session_row(&mut sandguard(&s), session);
    assert_eq!(
        row["state"], "pending",
        "the busy second volume keeps the session pending: {journal}"
    );
    assert!(volume_exists(&v), "the volume in use is still there");
    assert!(
        journal.contains("now is not the one claimed"),
        "the first claim is refused: {journal}"
    );
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", stranger])
        .output();
    eventually(Duration::from_secs(10), "the volume is freed", || {
        std::process::Command::new("docker")
            .args(["volume", "rm", &v])
            .output()
            .is_ok_and(|o| o.status.success())
            || !volume_exists(&v)
    });
}
