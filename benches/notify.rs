//! Notifications never delay a reclaim (issue 43): the time from `SIGKILL` of a guarded
//! program to its containers being gone, measured three ways in one run, interleaved (the
//! order rotated every round), `RUNS` rounds (default 15):
//!
//! - **no notify**: no `[notify]` table;
//! - **webhook answers**: `[notify] webhook` to a loopback server that answers 200;
//! - **webhook hangs**: the same server reads each request and never answers (`timeout =
//!   "60s"`), so the sidecar's delivery task is stuck on it when the owner dies.
//!
//! Each round's program (`sandguard run --docker-proxy --max-sandboxes 2 -- sh -c …`) runs
//! two containers through the Docker proxy and asks for a third, which the limit refuses: that
//! is a `limit_reached` event, so in the two webhook variants the sidecar's notifier is
//! running, and (waited for before the kill) its webhook has the event, answered or hanging.
//! Then the program is killed and the bench polls the daemon's socket (`GET /containers/json`
//! filtered by the session's label, every 2 ms) until none is left. Medians and p90 are
//! printed and appended to `bench-results/results.md`.
//!
//! Run: `cargo bench --bench notify` (needs `docker info` to work and the test image that
//! `tests/run.sh` builds). `RUNS=30` for more rounds.

#[path = "common/docker.rs"]
mod docker;
#[path = "common/http.rs"]
mod http;
#[path = "common/report.rs"]
mod report_file;

use docker::IMAGE;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SOCKET: &str = "/var/run/docker.sock";

#[derive(Clone, Copy)]
enum Variant {
    None,
    Answers,
    Hangs,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::None => "no notify",
            Variant::Answers => "webhook answers",
            Variant::Hangs => "webhook hangs",
        }
    }
}

/// A loopback webhook that answers 200 or never; counts the requests it read.
struct Hook {
    port: u16,
    got: Arc<AtomicUsize>,
}

impl Hook {
    fn start(hang: bool) -> Hook {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(AtomicUsize::new(0));
        let count = got.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':') {
                        if k.eq_ignore_ascii_case("content-length") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                count.fetch_add(1, Ordering::SeqCst);
                let mut stream = stream;
                if hang {
                    held.push(stream);
                } else {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            }
        });
        Hook { port, got }
    }
}

/// How many containers carry `sandguard.session=SESSION`, asked of the daemon's socket.
fn containers_of(session: &str) -> usize {
    let mut s = UnixStream::connect(SOCKET).expect("the Docker socket");
    let filter = format!("%7B%22label%22%3A%5B%22sandguard.session%3D{session}%22%5D%7D");
    let request =
        format!("GET /containers/json?all=1&filters={filter} HTTP/1.0\r\nHost: docker\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.matches("\"Id\"").count()
}

/// One round: the program's two containers, the refused third, the kill, the time to gone.
fn round(exe: &str, dir: &Path, config: &Path, hook: Option<&Hook>) -> Duration {
    use std::os::unix::process::CommandExt;
    let ready = dir.join(format!("ready-{}", std::process::id()));
    let _ = std::fs::remove_file(&ready);
    let script = format!(
        "docker run -d --network none {IMAGE} sleep 600 >/dev/null
docker run -d --network none {IMAGE} sleep 600 >/dev/null
docker create --network none {IMAGE} true >/dev/null 2>&1
echo \"$SANDGUARD_SESSION\" > {r}.tmp && mv {r}.tmp {r}
exec sleep 3600",
        r = ready.display()
    );
    let before = hook.map(|h| h.got.load(Ordering::SeqCst));
    let mut child = Command::new(exe)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_STATE_HOME", dir.join("state"))
        .env("SANDGUARD_CONFIG", config)
        .args([
            "run",
            "--docker-proxy",
            "--max-sandboxes",
            "2",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sandguard");
    let deadline = Instant::now() + Duration::from_secs(60);
    let session = loop {
        if let Ok(s) = std::fs::read_to_string(&ready) {
            break s.trim().to_string();
        }
        assert!(Instant::now() < deadline, "the program did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    if let (Some(h), Some(before)) = (hook, before) {
        while h.got.load(Ordering::SeqCst) == before {
            assert!(Instant::now() < deadline, "the limit was not told");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(containers_of(&session), 2, "two containers before the kill");
    let killed = Instant::now();
    let _ = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status();
    let _ = child.wait();
    while containers_of(&session) > 0 {
        assert!(killed.elapsed() < Duration::from_secs(30), "not reclaimed");
        std::thread::sleep(Duration::from_millis(2));
    }
    let took = killed.elapsed();
    // The sidecar's leftovers (a flush of at most 2 s) are no part of the next round.
    std::thread::sleep(Duration::from_millis(200));
    took
}

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(15);
    let exe = env!("CARGO_BIN_EXE_sandguard");
    docker::require_image();
    let dir = std::env::temp_dir().join(format!("sandguard-bench-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let answers = Hook::start(false);
    let hangs = Hook::start(true);
    let write = |name: &str, text: String| -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let plain = write("none.toml", String::new());
    let answering = write(
        "answers.toml",
        format!(
            "[notify]\nwebhook = \"http://127.0.0.1:{}/hook\"\n",
            answers.port
        ),
    );
    let hanging = write(
        "hangs.toml",
        format!(
            "[notify]\nwebhook = \"http://127.0.0.1:{}/hook\"\ntimeout = \"60s\"\n",
            hangs.port
        ),
    );
    let variants = [Variant::None, Variant::Answers, Variant::Hangs];
    let mut samples: [Vec<Duration>; 3] = Default::default();
    for r in 0..runs {
        for k in 0..3 {
            let i = (r + k) % 3;
            let took = match variants[i] {
                Variant::None => round(exe, &dir, &plain, None),
                Variant::Answers => round(exe, &dir, &answering, Some(&answers)),
                Variant::Hangs => round(exe, &dir, &hanging, Some(&hangs)),
            };
            samples[i].push(took);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("SIGKILL of a guarded program -> its 2 containers gone, {runs} rounds interleaved:");
    for (i, v) in variants.iter().enumerate() {
        let s = &mut samples[i];
        let line = format!(
            "notify: kill -> gone, {}: median {:.1} ms, p90 {:.1} ms ({} runs)",
            v.name(),
            http::ms(http::pct(s, 50)),
            http::ms(http::pct(s, 90)),
            s.len()
        );
        report_file::record("notify", &line);
    }
}
