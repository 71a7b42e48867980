//! `sandguard sweep --every D --provider e2b` over sessions that used Docker too: it finishes
//! their part on E2B, leaves Docker's to a sweep that has it and says so once, without
//! contradicting itself; a session whose Docker part was already done ends. Through the real
//! binary, the real daemon and the E2B emulator.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::support::e2b::{self, State};
use crate::support::emu::{Emulator, Faults};
use crate::support::plugin::{kill_sidecar, pairs, session_row};
use crate::support::*;
use crate::sweep::metrics::{scrape, value};
use crate::watch::sidecar::journal;

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

/// Docker (the real daemon) and E2B (the emulator), both configured for the sidecars and the
/// sweeps; short reclaims.
struct Mixed {
    s: Scratch,
    config: PathBuf,
    emu: Emulator,
    e2b: Arc<State>,
}

impl Mixed {
    fn new(tag: &str) -> Mixed {
        let s = Scratch::new(tag);
        let config = s.file(
            "sandguard.toml",
            "[reclaim]\ndeadline = \"3s\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n",
        );
        let (emu, e2b) = e2b::start(KEY);
        Mixed {
            s,
            config,
            emu,
            e2b,
        }
    }

    /// The real binary with both providers.
    fn cmd(&self) -> Command {
        let mut c = sandguard(&self.s);
        c.env("SANDGUARD_CONFIG", &self.config)
            .env("E2B_API_KEY", KEY)
            .env("E2B_API_URL", &self.emu.url);
        c
    }

    /// A guarded owner, a container and an E2B sandbox carrying its labels (their ids).
    fn owner(&self, r: &mut Resources) -> (Owner, String, String) {
        let owner = Owner::start(self.cmd(), &self.s);
        let labels = owner.label_pairs();
        let container = r.container(&pairs(&labels));
        let sandbox = format!("i{}", unique());
        self.e2b.insert(&sandbox, &pairs(&labels));
        (owner, container, sandbox)
    }

    fn state(&self, session: &str) -> serde_json::Value {
        let row = session_row(&mut self.cmd(), session);
        row["state"].clone()
    }

    /// `sweep --every 1s --provider e2b --metrics SOCK`, its stdout and stderr in files.
    fn e2b_service(&self, sock: &std::path::Path) -> (Background, PathBuf, PathBuf) {
        let (out, err) = (self.s.path().join("out"), self.s.path().join("err"));
        let child = self
            .cmd()
            .args(["sweep", "--every", "1s", "--provider", "e2b", "--metrics"])
            .arg(sock)
            .stdin(Stdio::null())
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .expect("spawn the sweep service");
        (Background(child), out, err)
    }
}

fn pending_sessions(sock: &std::path::Path) -> Option<f64> {
    value(&scrape(sock).2, "sandguard_sessions_pending", &[])
}

/// The sidecar removed the session's container but could not reach E2B: the session is
/// pending on E2B alone. A sweep that has only E2B finishes it, and it ends `reclaimed`
/// (before, the sweep found Docker "not listed by this reclaim" and the session stayed
/// pending for ever, the pending gauge with it).
#[test]
fn a_sweep_with_only_e2b_ends_a_session_whose_docker_part_was_done() {
    require_docker();
    let _g = shared();
    let m = Mixed::new("partial-done");
    let mut r = Resources::default();
    let (mut owner, container, sandbox) = m.owner(&mut r);
    let session = owner.session.clone();
    m.emu.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    owner.kill();
    eventually(
        Duration::from_secs(30),
        "the sidecar's reclaim ends pending",
        || {
            let row = session_row(&mut m.cmd(), &session);
            row["state"] == "pending" && row["sidecar_alive"] == false
        },
    );
    assert!(!container_exists(&container), "Docker's part is done");
    assert!(m.e2b.exists(&sandbox), "E2B's is pending");
    m.emu.set_faults(Faults::default());

    let sock = m.s.path().join("metrics.sock");
    let (_service, _, _) = m.e2b_service(&sock);
    eventually(
        Duration::from_secs(20),
        "the sweep that has E2B ends the session",
        || m.state(&session) == "reclaimed",
    );
    assert!(!m.e2b.exists(&sandbox));
    eventually(
        Duration::from_secs(10),
        "nothing is pending any more",
        || pending_sessions(&sock) == Some(0.0),
    );
}

/// Owner and sidecar SIGKILLed, nothing reclaimed: a service that has only E2B removes the
/// E2B sandbox on its first pass, leaves the session pending on Docker alone, says so once
/// (not once a pass), leaves it alone afterwards without writing to its journal, and a
/// sweep that has Docker ends it.
#[test]
fn a_sweep_with_only_e2b_finishes_its_part_and_says_once_that_docker_is_left() {
    require_docker();
    // The last sweep has Docker: it judges every managed container on the daemon.
    let _g = exclusive();
    let m = Mixed::new("partial-left");
    let mut r = Resources::default();
    let (mut owner, container, sandbox) = m.owner(&mut r);
    let session = owner.session.clone();
    kill_sidecar(&session);
    owner.kill();

    let sock = m.s.path().join("metrics.sock");
    let (_service, out, err) = m.e2b_service(&sock);
    eventually(Duration::from_secs(20), "the E2B part is done", || {
        !m.e2b.exists(&sandbox) && m.state(&session) == "pending"
    });
    assert!(container_exists(&container), "Docker is not this sweep's");
    let written = std::fs::metadata(journal(&m.s, &session)).unwrap().len();
    let passes = || {
        value(
            &scrape(&sock).2,
            "sandguard_sweep_passes_total",
            &[r#"result="clean""#],
        )
        .unwrap_or(0.0)
    };
    let first = passes();
    eventually(Duration::from_secs(20), "four more passes", || {
        passes() >= first + 4.0
    });

    let err = std::fs::read_to_string(err).unwrap();
    let said: Vec<&str> = err.lines().filter(|l| l.contains(&session)).collect();
    assert_eq!(said.len(), 1, "said once, not once a pass:\n{err}");
    assert!(
        said[0].contains("docker") && !said[0].contains("could not be removed"),
        "the words name what is left, and do not contradict themselves: {}",
        said[0]
    );
    let out = std::fs::read_to_string(out).unwrap();
    let left = format!("leave session {session}");
    assert_eq!(out.matches(&left).count(), 1, "{out}");
    let line = out.lines().find(|l| l.starts_with(&left)).unwrap();
    assert!(line.contains("docker"), "{line}");
    assert_eq!(
        std::fs::metadata(journal(&m.s, &session)).unwrap().len(),
        written,
        "passes that have nothing to do write nothing"
    );
    let body = scrape(&sock).2;
    let removed = [r#"provider="e2b""#, r#"cause="sweep""#];
    assert_eq!(
        value(&body, "sandguard_sandboxes_reclaimed_total", &removed),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(&body, "sandguard_sessions_pending", &[]),
        Some(1.0),
        "Docker's part is really pending:\n{body}"
    );

    let done = run(m.cmd().args(["sweep", "--provider", "docker"]));
    assert_eq!(done.code, 0, "{}{}", done.stdout, done.stderr);
    assert!(!container_exists(&container));
    assert_eq!(m.state(&session), "reclaimed");
    eventually(Duration::from_secs(10), "the gauge clears", || {
        pending_sessions(&sock) == Some(0.0)
    });
}
