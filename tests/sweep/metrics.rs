//! `sandguard sweep --every D --metrics ADDR`: what a scraper reads is what the test
//! reclaimed, the heartbeat moves, and Prometheus' own `promtool check metrics` accepts the
//! exposition. Through the real binary, the real daemon and a real sidecar killed with
//! SIGKILL.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::plugin::kill_sidecar;
use crate::support::*;
use crate::watch::wrapper::{guarded, script, unsafe_kill, wait_for_file};
use sandguard::labels::{OWNER, SESSION};

/// One `GET /metrics` on the unix socket `sock`: the status line, the headers and the body.
pub(crate) fn scrape(sock: &Path) -> (String, String, String) {
    let mut stream = UnixStream::connect(sock)
        .unwrap_or_else(|e| panic!("no metrics on {}: {e}", sock.display()));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: sandguard\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// The value of the series `name{labels}` whose labels include every one of `want`
/// (`key="value"` each), or `None`.
pub(crate) fn value(body: &str, name: &str, want: &[&str]) -> Option<f64> {
    body.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let labels: Vec<&str> = labels.split(',').collect();
        want.iter()
            .all(|w| labels.contains(w))
            .then(|| value.parse().unwrap())
    })
}

/// `promtool check metrics` (Debian's `prometheus`) on `body`: its verdict, panicking with
/// instructions when promtool is missing (CI installs it; a skipped check is no pass).
pub(crate) fn promtool(body: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is needed: tests/run.sh installs it (Debian's prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn the_sweeps_metrics_count_what_it_and_the_sidecars_reclaimed_and_promtool_accepts_them() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweep-metrics");
    let mut r = Resources::default();
    // An orphan of a dead owner: the service's first pass removes it (judged by its labels,
    // recorded in no journal).
    let orphan_session = format!("o{}", unique());
    let orphan = r.container(&[(SESSION, &orphan_session), (OWNER, &dead_owner_label())]);

    let sock = s.path().join("metrics.sock");
    let service = Background::start(
        sandguard(&s)
            .args([
                "sweep",
                "--every",
                "1s",
                "--provider",
                "docker",
                "--metrics",
            ])
            .arg(&sock),
    );
    eventually(Duration::from_secs(10), "the socket is served", || {
        sock.exists()
    });
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket is private");
    eventually(
        Duration::from_secs(10),
        "the first pass removes the orphan",
        || !container_exists(&orphan),
    );

    // A guarded program with four containers (three labelled, one claimed), SIGKILLed: its
    // sidecar reclaims them and the service counts them from the ledger.
    let ids = s.path().join("ids");
    let mut job = guarded(&s, &script(&ids, "sleep 3600"));
    let containers = wait_for_file(&ids, &mut job);
    assert_eq!(containers.len(), 4);
    unsafe_kill(job.id() as i32, libc::SIGKILL);
    let _ = job.0.wait();
    eventually(
        Duration::from_secs(15),
        "the sidecar reclaims the program's containers",
        || containers.iter().all(|c| !container_exists(c)),
    );

    let reclaimed = |body: &str| {
        value(
            body,
            "sandguard_sandboxes_reclaimed_total",
            &[r#"provider="docker""#, r#"cause="owner_dead""#],
        )
    };
    eventually(
        Duration::from_secs(10),
        "the scrape counts the orphan and the four containers",
        || reclaimed(&scrape(&sock).2) == Some(5.0),
    );
    let (status, headers, body) = scrape(&sock);
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    assert_eq!(reclaimed(&body), Some(5.0), "counted once each:\n{body}");
    // Every series says which host it is from.
    assert!(
        body.lines()
            .filter(|l| l.starts_with("sandguard_"))
            .all(|l| l.contains("host=\"")),
        "{body}"
    );
    assert_eq!(value(&body, "sandguard_sessions_pending", &[]), Some(0.0));
    let seconds = value(
        &body,
        "sandguard_sandbox_seconds_total",
        &[r#"provider="docker""#],
    );
    assert!(
        seconds.is_some_and(|s| s > 0.0),
        "sandbox time: {seconds:?}\n{body}"
    );
    assert!(
        value(
            &body,
            "sandguard_sandboxes_alive",
            &[r#"provider="docker""#, r#"kind="instance""#]
        )
        .is_some(),
        "{body}"
    );
    assert_eq!(
        value(&body, "sandguard_sweep_interval_seconds", &[]),
        Some(1.0)
    );

    // The heartbeat moves with every pass.
    let heartbeat = |body: &str| value(body, "sandguard_sweep_last_pass_timestamp_seconds", &[]);
    let first = heartbeat(&body).expect("a heartbeat");
    let now = sandguard::testing::timefmt::now_unix() as f64;
    assert!((now - first).abs() < 10.0, "heartbeat {first}, now {now}");
    eventually(Duration::from_secs(10), "the heartbeat moves", || {
        heartbeat(&scrape(&sock).2).is_some_and(|t| t > first)
    });
    assert!(value(
        &body,
        "sandguard_sweep_passes_total",
        &[r#"result="clean""#]
    )
    .is_some_and(|n| n >= 1.0));

    let (ok, said) = promtool(&body);
    assert!(ok, "promtool check metrics: {said}\n{body}");

    // Anything but GET /metrics is not found; the service stops and takes its socket along.
    let mut stream = UnixStream::connect(&sock).unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: sandguard\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    let pid = service.0.id() as i32;
    unsafe_kill(pid, libc::SIGTERM);
    eventually(
        Duration::from_secs(5),
        "the socket is removed when the service ends",
        || !sock.exists(),
    );
    drop(service);
}

/// An orphan the service finds when it starts (its owner and its sidecar SIGKILLed before it
/// ran, nobody left to reclaim it) is reclaimed by the service's first pass, and counted:
/// the baseline is the ledger as it was before that pass, so what the pass does is the
/// service's own. The pass that matters most, a reaper restarted after a crash or a reboot.
#[test]
fn the_first_pass_of_a_service_is_counted() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("sweep-metrics-first");
    let ids = s.path().join("ids");
    let mut job = guarded(&s, &script(&ids, "sleep 3600"));
    let containers = wait_for_file(&ids, &mut job);
    let mut r = Resources::default();
    for c in &containers {
        r.adopt_container(c);
    }
    let sessions = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let session = sessions["sessions"][0]["session"]
        .as_str()
        .unwrap()
        .to_string();
    kill_sidecar(&session);
    unsafe_kill(job.id() as i32, libc::SIGKILL);
    let _ = job.0.wait();
    assert!(
        containers.iter().all(|c| container_exists(c)),
        "nobody reclaims before the service starts"
    );

    let sock = s.path().join("metrics.sock");
    let _service = Background::start(
        sandguard(&s)
            .args([
                "sweep",
                "--every",
                "1s",
                "--provider",
                "docker",
                "--metrics",
            ])
            .arg(&sock),
    );
    eventually(
        Duration::from_secs(20),
        "the first pass reclaims the orphaned session",
        || containers.iter().all(|c| !container_exists(c)),
    );
    let reclaimed = |body: &str| {
        value(
            body,
            "sandguard_sandboxes_reclaimed_total",
            &[r#"provider="docker""#, r#"cause="sweep""#],
        )
    };
    eventually(
        Duration::from_secs(10),
        "the scrape counts the four containers of the first pass",
        || reclaimed(&scrape(&sock).2) == Some(4.0),
    );
    let body = scrape(&sock).2;
    assert_eq!(value(&body, "sandguard_sessions_pending", &[]), Some(0.0));
    let (ok, said) = promtool(&body);
    assert!(ok, "promtool check metrics: {said}\n{body}");
}

#[test]
fn metrics_are_refused_on_a_wider_address_or_without_a_service() {
    let s = Scratch::new("sweep-metrics-usage");
    let out = run(sandguard(&s).args(["sweep", "--every", "1m", "--metrics", "0.0.0.0:9464"]));
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("loopback"), "{}", out.stderr);
    let out = run(sandguard(&s).args(["sweep", "--metrics", "127.0.0.1:9464"]));
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("--metrics needs --every"),
        "{}",
        out.stderr
    );
    let out = run(sandguard(&s).args([
        "sweep",
        "--every",
        "1m",
        "--dry-run",
        "--metrics",
        "127.0.0.1:9464",
    ]));
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    // An address in use fails the command at once, before any pass.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(sandguard(&s).args(["sweep", "--every", "1m", "--metrics", &addr]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("sandguard:"), "{}", out.stderr);
}

/// The alert rules the book gives (packaging/prometheus/) are valid and fire as documented:
/// Prometheus' own rule tests, on series shaped like the ones served above.
#[test]
fn the_documented_alerts_fire_when_the_reaper_stops() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/prometheus");
    let out = Command::new("promtool")
        .args(["test", "rules", "sandguard-rules.test.yml"])
        .current_dir(&dir)
        .output()
        .expect("promtool is needed: tests/run.sh installs it (Debian's prometheus package)");
    assert!(
        out.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The rule the book shows is the one tested, line for line.
    let rules = std::fs::read_to_string(dir.join("sandguard-rules.yml")).unwrap();
    let book = Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/metrics.md");
    let book = std::fs::read_to_string(book).unwrap();
    let start = book
        .find("- alert: SandguardSweepStopped")
        .expect("the book's rule");
    let shown: Vec<&str> = book[start..]
        .lines()
        .take_while(|l| !l.starts_with("```"))
        .map(str::trim)
        .collect();
    assert_eq!(shown.len(), 3, "{shown:?}");
    let tested: Vec<&str> = rules.lines().map(str::trim).collect();
    let at = tested
        .iter()
        .position(|l| *l == shown[0])
        .expect("the rules file has the book's alert");
    assert_eq!(
        &tested[at..at + 3],
        &shown[..],
        "the book's rule is the tested one"
    );
}
