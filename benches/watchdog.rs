//! The watchdog's two speed figures, measured with the real binary and the real daemon:
//!
//! 1. **Reclaim latency**: from `SIGKILL` of a guarded owner to the sidecar's first remove
//!    request reaching Docker. Each run starts `sandguard -- sleep 600` with `DOCKER_HOST`
//!    pointing at a loopback proxy in front of the local socket, creates one container carrying
//!    the session's labels, kills the owner, and timestamps the first `DELETE` the proxy sees.
//!    This is the label path (the sidecar must list before it can remove); a claimed sandbox
//!    skips the listing.
//! 2. **Wrapper overhead**: `sandguard -- true` against plain `true`, median of many runs,
//!    with no provider configured (see the comment at the measurement).
//!
//! Run: `cargo bench --bench watchdog` (needs `docker info` to work and the test image that
//! `tests/run.sh` builds). `RUNS=200 cargo bench --bench watchdog` for more runs.

#[path = "common/report.rs"]
mod report_file;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const IMAGE: &str = "sandguard-test/busybox:latest";

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let exe = env!("CARGO_BIN_EXE_sandguard");
    let ok = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "needs a running Docker daemon and the test image: run tests/run.sh once first"
    );

    let state = std::env::temp_dir().join(format!("sandguard-bench-{}", std::process::id()));
    // Overhead first: the latency runs leave the daemon busy removing containers.
    // No provider configured here: each run's sidecar reclaims (lists the daemon) after its
    // `true` exits, and back-to-back runs would otherwise measure the daemon's load, not the
    // wrapper.
    std::fs::create_dir_all(&state).expect("state dir");
    let no_providers = state.join("no-providers.toml");
    std::fs::write(&no_providers, "[providers.docker]\nenabled = false\n").expect("config");
    let wrapped = time_runs(runs.max(200), || {
        let mut cmd = Command::new(exe);
        cmd.args(["--", "true"])
            .env("XDG_STATE_HOME", &state)
            .env("SANDGUARD_CONFIG", &no_providers);
        cmd
    });
    let plain = time_runs(runs.max(200), || Command::new("true"));
    let (w, p) = (median(&wrapped), median(&plain));
    report_file::record(
        "wrapper overhead (cargo bench --bench watchdog)",
        &format!(
            "`sandguard -- true` median {:.2} ms, `true` median {:.2} ms, added {:.2} ms",
            ms(w),
            ms(p),
            ms(w.saturating_sub(p))
        ),
    );
    // The same with the defaults on, as a user runs it: Docker configured (the local daemon),
    // so each run's sidecar looks at the daemon and serves the Docker proxy before `ready`.
    // Each run waits 50 ms afterwards (outside the timing), so that one run's reclaim (a
    // listing of the daemon) is over before the next starts.
    let wrapped_docker = time_runs(runs.max(200), || {
        std::thread::sleep(Duration::from_millis(50));
        let mut cmd = Command::new(exe);
        cmd.args(["--", "true"])
            .env("XDG_STATE_HOME", &state)
            .env("SANDGUARD_CONFIG", "/dev/null");
        cmd
    });
    let d = median(&wrapped_docker);
    report_file::record(
        "wrapper overhead, defaults on (cargo bench --bench watchdog)",
        &format!(
            "`sandguard -- true` with the Docker proxy served: median {:.2} ms, added {:.2} ms \
             over `true`, {:.2} ms over the wrapper without providers",
            ms(d),
            ms(d.saturating_sub(p)),
            ms(d.saturating_sub(w))
        ),
    );
    let proxy = Proxy::start();
    let mut latencies = Vec::with_capacity(runs);
    for i in 0..runs {
        match reclaim_latency(exe, &state, &proxy) {
            Ok(d) => latencies.push(d),
            Err(e) => eprintln!("run {i}: {e}"),
        }
    }
    report("owner SIGKILL -> first remove request", &mut latencies);

    let _ = std::fs::remove_dir_all(&state);
}

fn reclaim_latency(exe: &str, state: &std::path::Path, proxy: &Proxy) -> Result<Duration, String> {
    let mut owner = Command::new(exe)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$SANDGUARD_LABELS\"; exec sleep 600",
        ])
        .env("DOCKER_HOST", &proxy.url)
        .env("XDG_STATE_HOME", state)
        .env("SANDGUARD_CONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut labels = String::new();
    let mut out = owner.stdout.take().ok_or("no stdout")?;
    let mut byte = [0u8; 1];
    while out.read(&mut byte).map_err(|e| e.to_string())? == 1 && byte[0] != b'\n' {
        labels.push(byte[0] as char);
    }
    let mut args = vec!["run", "-d", "--network", "none"];
    let label_args: Vec<String> = labels
        .split(',')
        .map(std::string::ToString::to_string)
        .collect();
    for l in &label_args {
        args.extend(["--label", l.as_str()]);
    }
    args.extend([IMAGE, "sleep", "600"]);
    let created = Command::new("docker")
        .args(&args)
        .output()
        .map_err(|e| e.to_string())?;
    if !created.status.success() {
        return Err(String::from_utf8_lossy(&created.stderr).into_owned());
    }
    // Let the sidecar finish its warm-up (it starts 100 ms after `ready`) so the figure is the
    // steady state of a program that runs for more than a moment.
    std::thread::sleep(Duration::from_millis(250));
    proxy.arm();
    let killed = Instant::now();
    owner.kill().map_err(|e| e.to_string())?;
    let first = proxy
        .wait_first_delete(Duration::from_secs(10))
        .ok_or("no remove request within 10 s")?;
    let _ = owner.wait();
    Ok(first.saturating_duration_since(killed))
}

/// A loopback TCP proxy to the Docker socket that timestamps the first `DELETE` request after
/// it is armed.
struct Proxy {
    url: String,
    first_delete: Arc<Mutex<Option<Instant>>>,
    armed: Arc<Mutex<bool>>,
}

impl Proxy {
    fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let url = format!("tcp://{}", listener.local_addr().expect("address"));
        let first_delete = Arc::new(Mutex::new(None));
        let armed = Arc::new(Mutex::new(false));
        let (fd, arm) = (first_delete.clone(), armed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(daemon) = UnixStream::connect("/var/run/docker.sock") else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let (fd, arm) = (fd.clone(), arm.clone());
                let (mut c_read, mut d_write) = (
                    client.try_clone().expect("clone"),
                    daemon.try_clone().expect("clone"),
                );
                std::thread::spawn(move || pump_requests(&mut c_read, &mut d_write, &fd, &arm));
                let (mut d_read, mut c_write) = (daemon, client);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut d_read, &mut c_write);
                    let _ = c_write.shutdown(Shutdown::Write);
                });
            }
        });
        Proxy {
            url,
            first_delete,
            armed,
        }
    }

    fn arm(&self) {
        *self.first_delete.lock().unwrap() = None;
        *self.armed.lock().unwrap() = true;
    }

    fn wait_first_delete(&self, limit: Duration) -> Option<Instant> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(t) = *self.first_delete.lock().unwrap() {
                *self.armed.lock().unwrap() = false;
                return Some(t);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    }
}

fn pump_requests(
    from: &mut TcpStream,
    to: &mut UnixStream,
    first: &Mutex<Option<Instant>>,
    armed: &Mutex<bool>,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        if buf[..n].windows(8).any(|w| w == b"DELETE /") && *armed.lock().unwrap() {
            let mut slot = first.lock().unwrap();
            if slot.is_none() {
                *slot = Some(now);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

fn time_runs(n: usize, mut make: impl FnMut() -> Command) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let mut cmd = make();
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let t = Instant::now();
            let _ = cmd.status();
            t.elapsed()
        })
        .collect()
}

fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s.get(s.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(what: &str, v: &mut [Duration]) {
    v.sort();
    if v.is_empty() {
        report_file::record(what, "no successful runs");
        return;
    }
    let pct = |p: f64| {
        v[((v.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(v.len() - 1)]
    };
    let line = format!(
        "{} runs, p50 {:.2} ms, p99 {:.2} ms, min {:.2} ms, max {:.2} ms (histogram: latency.svg)",
        v.len(),
        ms(pct(0.50)),
        ms(pct(0.99)),
        ms(v[0]),
        ms(v[v.len() - 1])
    );
    report_file::record(&format!("{what} (cargo bench --bench watchdog)"), &line);
    let values: Vec<f64> = v.iter().map(|d| ms(*d)).collect();
    report_file::histogram_svg(
        "latency",
        "owner SIGKILL -> first remove request (ms)",
        &values,
        20,
    );
}
