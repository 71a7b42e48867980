//! Failing endpoints: a webhook that answers 500 is retried `attempts` times, then given up
//! with one log line that names its host and never its path; a webhook that hangs delays no
//! reclaim (the service's next pass, a one-shot sweep's removals) nor the command's events.

use std::process::Stdio;
use std::time::{Duration, Instant};

use sandguard::labels::{OWNER, SESSION};

use super::*;
use crate::support::plugin::cmd;

#[test]
fn a_webhook_that_answers_500_is_retried_then_given_up_and_logged_by_its_host_only() {
    let (s, acme, config) = acme_rig("notify-500");
    let hook = Hook::start(Answer::Status500);
    let sink = Sink::new(&s);
    with_notify(
        &config,
        &format!(
            "{}webhook = \"{}\"\nattempts = 3\nretry_initial = \"50ms\"\n",
            sink.command(),
            hook.url()
        ),
    );
    let dead = dead_owner_label();
    acme.insert("o1", &[(SESSION, "s500"), (OWNER, dead.as_str())]);
    acme.insert("o2", &[(SESSION, "s500"), (OWNER, dead.as_str())]);
    let out = run(cmd(&s, &config)
        .env("SANDGUARD_LOG", "info")
        .args(["sweep"]));
    assert_eq!(
        out.code, 0,
        "a failing endpoint fails no sweep: {}{}",
        out.stdout, out.stderr
    );
    assert!(!acme.exists("o1") && !acme.exists("o2"));
    let tries = hook.events();
    assert_eq!(tries.len(), 3, "three attempts: {tries:?}");
    assert!(
        tries.iter().all(|t| *t == tries[0]),
        "the same event each time"
    );
    check_common(&tries[0], "orphans_reclaimed");
    assert_eq!(tries[0]["count"], 2);
    let gave_up = format!(
        "notify: orphans_reclaimed not sent to webhook http://127.0.0.1:{}/… after 3 attempts: it answered 500 Internal Server Error; given up",
        hook.port
    );
    assert!(out.stderr.contains(&gave_up), "{}", out.stderr);
    assert!(!out.stderr.contains(TOKEN), "{}", out.stderr);
    assert_eq!(
        sink.of("orphans_reclaimed").len(),
        1,
        "the command still got it"
    );
}

#[test]
fn a_webhook_that_hangs_delays_no_pass_of_the_service_nor_the_commands_events() {
    let (s, acme, config) = acme_rig("notify-hang-every");
    let hook = Hook::start(Answer::Hang);
    let sink = Sink::new(&s);
    with_notify(
        &config,
        &format!(
            "{}webhook = \"{}\"\ntimeout = \"60s\"\n",
            sink.command(),
            hook.url()
        ),
    );
    let dead = dead_owner_label();
    acme.insert("first", &[(SESSION, "shang"), (OWNER, dead.as_str())]);
    let mut service = cmd(&s, &config)
        .args(["sweep", "--every", "300ms"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the webhook holds the first event",
        || !acme.exists("first") && hook.events().len() == 1,
    );
    acme.insert("second", &[(SESSION, "shang"), (OWNER, dead.as_str())]);
    let began = Instant::now();
    eventually(
        Duration::from_secs(3),
        "the next pass removes the second",
        || !acme.exists("second"),
    );
    let took = began.elapsed();
    eventually(
        Duration::from_secs(5),
        "the command got both events",
        || sink.of("orphans_reclaimed").len() == 2,
    );
    let _ = service.kill();
    let _ = service.wait();
    assert_eq!(
        hook.events().len(),
        1,
        "the webhook still hangs on the first"
    );
    eprintln!("removed the second orphan {took:?} after it appeared, the webhook hanging");
}

#[test]
fn a_one_shot_sweep_reclaims_before_it_waits_a_bounded_while_for_a_hanging_webhook() {
    let (s, acme, config) = acme_rig("notify-hang-once");
    let hook = Hook::start(Answer::Hang);
    with_notify(
        &config,
        &format!("webhook = \"{}\"\ntimeout = \"60s\"\n", hook.url()),
    );
    let dead = dead_owner_label();
    acme.insert("o1", &[(SESSION, "sonce"), (OWNER, dead.as_str())]);
    let began = Instant::now();
    let mut sweep = cmd(&s, &config)
        .env("SANDGUARD_LOG", "warn")
        .args(["sweep"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the removal, the webhook hanging",
        || !acme.exists("o1"),
    );
    assert!(
        sweep.try_wait().unwrap().is_none(),
        "removed while the sweep still waits for its webhook"
    );
    let out = sweep.wait_with_output().unwrap();
    let took = began.elapsed();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        took < Duration::from_secs(14),
        "the wait for events is bounded (10 s): {took:?}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dropped on exit"), "{stderr}");
    assert_eq!(hook.events().len(), 1);
}
