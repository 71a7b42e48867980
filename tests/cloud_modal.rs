//! The Modal driver through the real binary, against the gRPC emulator in
//! `support/modal.rs`: ps, stop, reclaim on owner death, paging, throttling, errors, latency
//! and an outage longer than the reclaim deadline.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::modal::{Faults, ModalEmu, PAGE_SIZE, TOKEN_ID, TOKEN_SECRET};
use crate::support::*;
use sandguard::labels::SESSION;
use sandguard::providers::modal::wire;

/// A scratch directory, a fresh emulator and a config that leaves Docker out.
struct Setup {
    s: Scratch,
    emu: ModalEmu,
    config: PathBuf,
}

fn setup(tag: &str, deadline: &str) -> Setup {
    let s = Scratch::new(tag);
    let config = s.path().join("sandguard.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"{deadline}\"\n\
             retry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0s\"\n"
        ),
    )
    .unwrap();
    Setup {
        s,
        emu: ModalEmu::start(),
        config,
    }
}

impl Setup {
    fn sg(&self) -> Command {
        self.sg_with(TOKEN_SECRET)
    }

    fn sg_with(&self, secret: &str) -> Command {
        let mut cmd = sandguard(&self.s);
        cmd.env("SANDGUARD_CONFIG", &self.config)
            .env("MODAL_SERVER_URL", &self.emu.url)
            .env("MODAL_TOKEN_ID", TOKEN_ID)
            .env("MODAL_TOKEN_SECRET", secret)
            .env_remove("MODAL_ENVIRONMENT")
            .env_remove("MODAL_PROFILE");
        cmd
    }

    /// `n` sandboxes tagged with `session`.
    fn insert(&self, session: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|_| self.emu.insert(&[(SESSION, session), ("app", "test")]))
            .collect()
    }

    fn stop(&self, args: &[&str]) -> Run {
        run(self.sg().arg("stop").args(args))
    }
}

/// Polls until `check` holds, for at most `limit`.
fn eventually(limit: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn modal_ps_lists_tagged_sandboxes_and_a_wrong_token_fails_loudly() {
    let t = setup("modal-ps", "3s");
    let session = format!("mp{}", unique());
    let mine = t.insert(&session, 2);
    let untagged = t.emu.insert(&[("app", "mine")]);
    let lookalike = t.emu.insert(&[("sandguard.sessionx", &session)]);

    let out = run(t.sg().args(["ps", "--provider", "modal"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    for id in &mine {
        let line = out.stdout.lines().find(|l| l.starts_with(id.as_str()));
        let line = line.unwrap_or_else(|| panic!("{id} not listed:\n{}", out.stdout));
        assert!(
            line.contains(&session) && line.contains("running"),
            "{line}"
        );
    }
    assert!(!out.stdout.contains(&untagged) && !out.stdout.contains(&lookalike));

    let out = run(t.sg().args(["ps", "--json", "--provider", "modal"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let listed = v["sandboxes"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{}", out.stdout);
    for sb in listed {
        assert_eq!(sb["provider"], "modal");
        assert_eq!(sb["kind"], "instance");
        assert_eq!(sb["session"], session.as_str());
        assert_eq!(sb["image"], "im-emulated");
        assert_eq!(sb["labels"]["app"], "test");
        assert!(mine.contains(&sb["instance_id"].as_str().unwrap().to_string()));
    }

    let out = run(t.sg().arg("providers"));
    assert!(out.stdout.contains("Modal API at"), "{}", out.stdout);

    let wrong = "as-wrongsecret4242";
    let out = run(t
        .sg_with(wrong)
        .args(["ps", "--json", "--provider", "modal"]));
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let errors = v["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{}", out.stdout);
    assert_eq!(errors[0]["provider"], "modal");
    assert!(
        errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("UNAUTHENTICATED"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains(wrong) && !out.stderr.contains(wrong));
    assert!(!out.stdout.contains(TOKEN_ID) && !out.stderr.contains(TOKEN_ID));
}

#[test]
fn modal_stop_removes_exactly_the_targets() {
    let t = setup("modal-stop", "3s");
    let (a, b) = (format!("ma{}", unique()), format!("mb{}", unique()));
    let a_ids = t.insert(&a, 3);
    let b_ids = t.insert(&b, 2);
    let untagged = t.emu.insert(&[("app", "mine")]);

    let out = t.stop(&[&a_ids[0]]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(!t.emu.running(&a_ids[0]));
    assert_eq!(t.emu.count_running(&a_ids), 2);

    // Already terminated: not managed-and-running any more, so not found.
    let out = t.stop(&[&a_ids[0]]);
    assert_eq!(out.code, 1, "{}", out.stdout);

    let out = t.stop(&["--all", "--session", &a]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&a_ids), 0);
    assert_eq!(t.emu.count_running(&b_ids), 2, "another session survives");
    assert!(t.emu.running(&untagged));

    let out = t.stop(&["--all", "--provider", "modal"]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&b_ids), 0);
    assert!(t.emu.running(&untagged), "an untagged sandbox survives");
}

/// `sandguard -- sh -c SCRIPT` in its own process group; the group is killed on drop.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// Starts a guarded owner and returns it with its session id.
fn guarded_owner(t: &Setup) -> (Job, String) {
    use std::os::unix::process::CommandExt;
    let file = t.s.path().join(format!("session-{}", unique()));
    let script = format!(
        "echo \"$SANDGUARD_SESSION\" > {}; exec sleep 600",
        file.display()
    );
    let child = t
        .sg()
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sandguard");
    let mut job = Job(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            if text.ends_with('\n') && text.trim().len() > 1 {
                return (job, text.trim().to_string());
            }
        }
        if let Ok(Some(status)) = job.0.try_wait() {
            panic!("the guarded owner ended early ({status})");
        }
        assert!(Instant::now() < deadline, "the owner did not start in time");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn sigkill(job: &mut Job) {
    let pid = job.0.id().to_string();
    let status = Command::new("kill")
        .args(["-KILL", "--", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    job.0.wait().unwrap();
}

#[test]
fn modal_sandboxes_of_a_sigkilled_owner_are_reclaimed() {
    let t = setup("modal-kill", "3s");
    let (mut job, session) = guarded_owner(&t);
    let mine = t.insert(&session, 3);
    let other = t.insert(&format!("mo{}", unique()), 1);
    let untagged = t.emu.insert(&[]);
    assert_eq!(t.emu.count_running(&mine), 3);

    sigkill(&mut job);
    eventually(
        Duration::from_secs(5),
        "the dead owner's three sandboxes are terminated",
        || t.emu.count_running(&mine) == 0,
    );
    assert_eq!(t.emu.count_running(&other), 1, "another session survives");
    assert!(t.emu.running(&untagged), "an untagged sandbox survives");
}

#[test]
fn modal_reads_tags_itself_when_a_filtered_listing_omits_them() {
    let t = setup("modal-tags", "3s");
    let session = format!("mt{}", unique());
    let mine = t.insert(&session, 3);
    let other = t.insert(&format!("mu{}", unique()), 1);
    let untagged = t.emu.insert(&[]);
    t.emu.hide_tags_in_listings();

    let out = t.stop(&["--all", "--provider", "modal", "--session", &session]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&mine), 0);
    assert_eq!(t.emu.count_running(&other), 1);
    assert!(t.emu.running(&untagged));
    let reads = t.emu.hits();
    let reads = reads.iter().filter(|h| h.path == wire::SANDBOX_TAGS_GET);
    assert_eq!(reads.count(), 3, "one SandboxTagsGet per listed sandbox");
}

#[test]
fn modal_listing_walks_every_page() {
    let t = setup("modal-pages", "10s");
    let session = format!("pg{}", unique());
    let mine = t.insert(&session, 2 * PAGE_SIZE + 50);
    let other = t.insert(&format!("po{}", unique()), 1);
    let untagged = t.emu.insert(&[]);

    let out = run(t.sg().args(["ps", "--json", "--provider", "modal"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let listed = json(&out.stdout)["sandboxes"].as_array().unwrap().len();
    assert_eq!(listed, mine.len() + 1);
    let pages = t
        .emu
        .hits()
        .iter()
        .filter(|h| h.path == wire::SANDBOX_LIST)
        .count();
    assert_eq!(
        pages, 4,
        "three full pages and the empty one that ends the walk"
    );

    let out = t.stop(&["--all", "--session", &session]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&mine), 0);
    assert_eq!(t.emu.count_running(&other), 1);
    assert!(t.emu.running(&untagged));
}

#[test]
fn modal_throttling_storm_is_waited_out() {
    let t = setup("modal-429", "20s");
    let session = format!("th{}", unique());
    let mine = t.insert(&session, 10);
    t.emu.set_faults(Faults {
        throttle_rate: 0.5,
        retry_after_secs: 0.5,
        ..Faults::default()
    });
    let out = t.stop(&["--all", "--provider", "modal", "--session", &session]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&mine), 0);
    assert!(t.emu.hits_with(tonic::Code::ResourceExhausted) > 0);
    assert_eq!(
        t.emu.early_hits(),
        0,
        "a call arrived before its retry-after"
    );
}

#[test]
fn modal_thirty_percent_failures_still_remove_everything() {
    let t = setup("modal-5xx", "15s");
    let session = format!("er{}", unique());
    let mine = t.insert(&session, 20);
    t.emu.set_faults(Faults {
        error_rate: 0.3,
        ..Faults::default()
    });
    let out = t.stop(&["--all", "--provider", "modal", "--session", &session]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&mine), 0);
    assert!(t.emu.hits_with(tonic::Code::Unavailable) > 0);
}

#[test]
fn modal_a_slow_provider_is_waited_for_not_given_up_on() {
    let t = setup("modal-slow", "15s");
    let session = format!("sl{}", unique());
    let mine = t.insert(&session, 10);
    let other = t.insert(&format!("x{}", unique()), 1);
    t.emu.set_faults(Faults {
        latency: Duration::from_millis(150),
        ..Faults::default()
    });
    let out = t.stop(&["--all", "--provider", "modal", "--session", &session]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&mine), 0);
    assert_eq!(t.emu.count_running(&other), 1);
}

#[test]
fn modal_outage_past_the_deadline_leaves_the_session_pending_then_stop_finishes() {
    let t = setup("modal-outage", "2s");
    let (mut job, session) = guarded_owner(&t);
    let mine = t.insert(&session, 3);
    t.emu.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    sigkill(&mut job);

    let state = || {
        let out = run(t.sg().args(["sessions", "--json"]));
        json(&out.stdout)["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session"] == session.as_str())
            .map(|s| s["state"].as_str().unwrap_or("").to_string())
    };
    eventually(Duration::from_secs(15), "the session is pending", || {
        state().as_deref() == Some("pending")
    });
    assert_eq!(t.emu.count_running(&mine), 3);

    t.emu.set_faults(Faults::default());
    let out = t.stop(&["--all", "--provider", "modal", "--session", &session]);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(t.emu.count_running(&mine), 0);
}
