//! The watchdog's speed goals (issue 25's P1 and P4), measured with the real binary and the
//! real daemon, each figure printed beside its goal:
//!
//! 1. **P1, reclaim latency**: from `SIGKILL` of a guarded owner to the sidecar's first remove
//!    request reaching Docker, p50 and p99 (goal p50 < 2 ms, p99 < 10 ms), on two paths run
//!    in turn, `RUNS` each (default 100):
//!    - the *label path*: the bench creates one container itself (`docker run` with the
//!      session's `$SANDGUARD_LABELS`), so the sidecar learns of it only by listing;
//!    - the *proxy path*: the container is created through the sidecar's Docker API proxy
//!      (the owner's `$DOCKER_HOST`), which labels it and hands the sidecar its id as a claim.
//!
//!    The sidecar's own `DOCKER_HOST` is a loopback proxy in front of the local socket
//!    (`common/first_delete.rs`) that timestamps the first `DELETE` it relays; the sidecar's
//!    Docker proxy forwards to the same address. Each run waits 250 ms after the create, so
//!    the sidecar's warm-up (100 ms after `ready`) is over: the figure is the steady state of
//!    a program that runs for more than a moment.
//! 2. **P4, wrapper start**: `sandguard -- true` against `tini -s -- true` (goal ≤ 2×), with
//!    the defaults (`SANDGUARD_CONFIG=/dev/null`: the Docker proxy on when the daemon answers,
//!    the cloud proxy on when credentials are found) and with every proxy off
//!    (`--no-docker-proxy --no-cloud-proxy`, Docker still configured). Beside them plain
//!    `true` and `sandguard -- true` with no provider configured (the older "added over
//!    `true`" figure, goal < 5 ms). All five run in turn, `PAIRS` rounds (default 50), the
//!    order rotated every round so that none always follows another; each run is preceded by
//!    a 50 ms pause outside the timing, so that the previous run's sidecar (which lists the
//!    daemon after its program exits) is not measured. Figures are medians; the ratio is the
//!    ratio of the medians.
//!
//! 3. **Why the detached start is a hand-written `clone` on Linux** (issue 38): the time the
//!    wrapper spends starting its sidecar before it can exec the program, three ways, each
//!    starting `sandguard --version` (the same binary, the same exec), `PAIRS` × 4 rounds in
//!    turn, medians:
//!    - *clone*: `unix::spawn_detached`, what the wrapper does (the process between shares
//!      the wrapper's memory, `clone(CLONE_VM | CLONE_VFORK)`; nothing waits for the exec);
//!    - *posix_spawn + wait*: std's spawn with nothing to run between fork and exec (glibc's
//!      posix_spawn, itself a `CLONE_VM | CLONE_VFORK` clone) and a wait for the child's end,
//!      which any self-exec stub needs (nextest's way: a stub process that does the setsid and
//!      the second fork, then exits): its exec and exit are the least such a stub costs;
//!    - *fork + wait*: std's spawn with a `pre_exec` (a copy of the address space), the way
//!      SDKs start `watch --daemonize`, with the same wait.
//!
//! Run: `cargo bench --bench watchdog` (needs `docker info` to work, the test image that
//! `tests/run.sh` builds, and `tini`, which `benches/run.sh` installs). `RUNS=200` and
//! `PAIRS=100` for more runs; `ONLY=latency`, `ONLY=wrapper` or `ONLY=start` runs one part.
//!
//! **Before and after**: `BEFORE=/path/to/an/older/sandguard` runs that binary too, in the same
//! run, interleaved with this one (every P1 run and every P4 round measures both in turn), and
//! prints its figures beside this build's, marked `before`: one machine state for both, so a
//! change is measured against what it replaced rather than against another hour's noise.

#[path = "common/docker.rs"]
mod docker;
#[path = "common/first_delete.rs"]
mod first_delete;
#[path = "common/report.rs"]
mod report_file;

use docker::IMAGE;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use first_delete::Proxy;

fn main() {
    let env_n = |key: &str, default: usize| {
        std::env::var(key)
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(default)
    };
    let exe = env!("CARGO_BIN_EXE_sandguard");
    docker::require_image();
    let only = std::env::var("ONLY").ok();
    let run = |part: &str| only.as_deref().is_none_or(|o| o == part);

    let state = std::env::temp_dir().join(format!("sandguard-bench-{}", std::process::id()));
    std::fs::create_dir_all(&state).expect("state dir");
    // The wrapper first: the latency runs leave the daemon busy removing containers.
    let before = std::env::var("BEFORE").ok();
    let before = before.as_deref();
    if run("wrapper") {
        wrapper(exe, before, &state, env_n("PAIRS", 50));
    }
    if run("latency") {
        latency(exe, before, &state, env_n("RUNS", 100));
    }
    if run("start") {
        start(exe, env_n("PAIRS", 50) * 4);
    }
    let _ = std::fs::remove_dir_all(&state);
}

/// The detached start against its alternatives (see the module docs, 3).
#[allow(unsafe_code)]
fn start(exe: &str, rounds: usize) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let null = || {
        std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap()
    };
    let args = [std::ffi::OsString::from("--version")];
    let clone = || {
        let (out, control) = (null(), null());
        let fd = out.as_raw_fd();
        sandguard::testing::unix::spawn_detached(
            Path::new(exe),
            &args,
            [fd, fd, fd],
            (control.as_raw_fd(), 3),
            &[],
        )
        .unwrap();
    };
    let posix_spawn = || {
        let status = Command::new(exe)
            .args(&args)
            .stdout(null())
            .status()
            .unwrap();
        assert!(status.success());
    };
    let fork = || {
        let mut cmd = Command::new(exe);
        cmd.args(&args).stdout(null());
        // SAFETY: an empty hook; its presence alone makes std fork instead of posix_spawn.
        unsafe { cmd.pre_exec(|| Ok(())) };
        assert!(cmd.status().unwrap().success());
    };
    let ways: [(&str, &dyn Fn()); 3] = [
        ("clone", &clone),
        ("posix_spawn + wait", &posix_spawn),
        ("fork + wait", &fork),
    ];
    let mut times = vec![Vec::new(); ways.len()];
    for round in 0..rounds {
        for k in 0..ways.len() {
            let i = (k + round) % ways.len();
            // The previous start's last process is still loading: let it finish.
            std::thread::sleep(Duration::from_millis(5));
            let t = Instant::now();
            (ways[i].1)();
            times[i].push(t.elapsed());
        }
    }
    for (i, (name, _)) in ways.iter().enumerate() {
        let m = median(&times[i]);
        println!(
            "start, {name}: median {:.3} ms over {rounds} ({:.1}× clone)",
            ms(m),
            m.as_secs_f64() / median(&times[0]).as_secs_f64()
        );
    }
}

/// P4: the five commands in turn (see the module docs).
fn wrapper(exe: &str, before: Option<&str>, state: &Path, rounds: usize) {
    let tini = ["tini", "/usr/bin/tini"]
        .into_iter()
        .find(|t| Command::new(t).arg("--version").output().is_ok())
        .expect("needs tini (apt-get install tini; benches/run.sh installs it)");
    let no_providers = state.join("no-providers.toml");
    std::fs::write(&no_providers, "[providers.docker]\nenabled = false\n").expect("config");
    let sandguard = |exe: &str, flags: &[&str], config: &Path| {
        let mut cmd = Command::new(exe);
        cmd.args(flags)
            .args(["--", "true"])
            .env("XDG_STATE_HOME", state)
            .env("SANDGUARD_CONFIG", config);
        cmd
    };
    let variants: Vec<Box<dyn Fn() -> Command>> = vec![
        Box::new(|| Command::new("true")),
        Box::new(|| {
            let mut cmd = Command::new(tini);
            cmd.args(["-s", "--", "true"]);
            cmd
        }),
        Box::new(|| sandguard(exe, &[], Path::new("/dev/null"))),
        Box::new(|| {
            sandguard(
                exe,
                &["--no-docker-proxy", "--no-cloud-proxy"],
                Path::new("/dev/null"),
            )
        }),
        Box::new(|| sandguard(exe, &[], &no_providers)),
    ];
    let mut variants = variants;
    if let Some(old) = before {
        variants.push(Box::new(move || {
            sandguard(old, &[], Path::new("/dev/null"))
        }));
        variants.push(Box::new(move || {
            sandguard(
                old,
                &["--no-docker-proxy", "--no-cloud-proxy"],
                Path::new("/dev/null"),
            )
        }));
    }
    let mut times = vec![Vec::with_capacity(rounds); variants.len()];
    for round in 0..rounds {
        for k in 0..variants.len() {
            let i = (round + k) % variants.len();
            std::thread::sleep(Duration::from_millis(50));
            let mut cmd = variants[i]();
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let t = Instant::now();
            let status = cmd.status().expect("run");
            times[i].push(t.elapsed());
            assert!(status.success(), "variant {i} failed: {status}");
        }
    }
    let [plain, tini, defaults, off, bare] = [0, 1, 2, 3, 4].map(|i| median(&times[i]));
    if before.is_some() {
        let [old_defaults, old_off] = [5, 6].map(|i| median(&times[i]));
        report_file::record(
            "wrapper start (cargo bench --bench watchdog)",
            &format!(
                "P4 before (BEFORE binary, same rounds): defaults on {:.2} ms, **{:.2}×** tini; \
                 every proxy off {:.2} ms, **{:.2}×** tini",
                ms(old_defaults),
                old_defaults.as_secs_f64() / tini.as_secs_f64(),
                ms(old_off),
                old_off.as_secs_f64() / tini.as_secs_f64()
            ),
        );
    }
    let ratio = |d: Duration| d.as_secs_f64() / tini.as_secs_f64();
    let what = "wrapper start (cargo bench --bench watchdog)";
    report_file::record(
        what,
        &format!(
            "P4 defaults on: `sandguard -- true` median {:.2} ms vs `tini -s -- true` {:.2} ms: \
             **{:.2}×** (goal ≤ 2×); {rounds} rounds in turn",
            ms(defaults),
            ms(tini),
            ratio(defaults)
        ),
    );
    report_file::record(
        what,
        &format!(
            "P4 every proxy off: `sandguard --no-docker-proxy --no-cloud-proxy -- true` median \
             {:.2} ms vs `tini -s -- true` {:.2} ms: **{:.2}×** (goal ≤ 2×)",
            ms(off),
            ms(tini),
            ratio(off)
        ),
    );
    report_file::record(
        what,
        &format!(
            "no provider configured: `sandguard -- true` median {:.2} ms, `true` {:.2} ms, \
             added **{:.2} ms** (goal < 5 ms)",
            ms(bare),
            ms(plain),
            ms(bare.saturating_sub(plain))
        ),
    );
}

#[derive(Clone, Copy)]
enum Path1 {
    Label,
    Proxy,
}

/// P1: `runs` deaths on each path, in turn (with `before`, that binary's in turn too).
fn latency(exe: &str, before: Option<&str>, state: &Path, runs: usize) {
    let proxy = Proxy::start();
    let builds: Vec<&str> = std::iter::once(exe).chain(before).collect();
    // [build][path]: the deaths measured.
    let mut times = vec![[Vec::with_capacity(runs), Vec::with_capacity(runs)]; builds.len()];
    for i in 0..runs {
        for (b, build) in builds.iter().enumerate() {
            for (p, path) in [Path1::Label, Path1::Proxy].into_iter().enumerate() {
                match reclaim_latency(build, state, &proxy, path) {
                    Ok(d) => times[b][p].push(d),
                    Err(e) => eprintln!("run {i}: {e}"),
                }
            }
        }
    }
    for (b, [label, claimed]) in times.iter_mut().enumerate() {
        let (mark, suffix) = match b {
            0 => ("", ""),
            _ => (" before (BEFORE binary, same runs)", "_before"),
        };
        report(
            &format!("P1{mark} label path (created without the proxy: listed, then removed)"),
            &format!("latency{suffix}"),
            label,
        );
        report(
            &format!("P1{mark} proxy path (created through the Docker proxy: claimed)"),
            &format!("latency_proxy{suffix}"),
            claimed,
        );
    }
}

fn reclaim_latency(
    exe: &str,
    state: &Path,
    proxy: &Proxy,
    path: Path1,
) -> Result<Duration, String> {
    let mut owner = Command::new(exe)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$SANDGUARD_LABELS $DOCKER_HOST\"; exec sleep 600",
        ])
        .env("DOCKER_HOST", &proxy.url)
        .env("XDG_STATE_HOME", state)
        .env("SANDGUARD_CONFIG", "/dev/null")
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    let mut out = owner.stdout.take().ok_or("no stdout")?;
    let mut byte = [0u8; 1];
    while out.read(&mut byte).map_err(|e| e.to_string())? == 1 && byte[0] != b'\n' {
        line.push(byte[0] as char);
    }
    let (labels, owner_host) = line.split_once(' ').ok_or("no labels")?;
    let mut docker = Command::new("docker");
    docker.args(["run", "-d", "--network", "none"]);
    match path {
        Path1::Label => {
            for l in labels.split(',') {
                docker.args(["--label", l]);
            }
        }
        Path1::Proxy => {
            if !owner_host.starts_with("unix://") {
                let _ = owner.kill();
                let _ = owner.wait();
                return Err(format!("no Docker proxy served: DOCKER_HOST={owner_host}"));
            }
            docker.env("DOCKER_HOST", owner_host);
        }
    }
    let created = docker
        .args([IMAGE, "sleep", "600"])
        .output()
        .map_err(|e| e.to_string())?;
    if !created.status.success() {
        let _ = owner.kill();
        let _ = owner.wait();
        return Err(String::from_utf8_lossy(&created.stderr).into_owned());
    }
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

fn median(v: &[Duration]) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    s.get(s.len() / 2).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn report(what: &str, svg: &str, v: &mut [Duration]) {
    let bench = "owner SIGKILL -> first remove request (cargo bench --bench watchdog)";
    v.sort();
    if v.is_empty() {
        report_file::record(bench, &format!("{what}: no successful runs"));
        return;
    }
    let pct = |p: f64| {
        v[((v.len() as f64 * p).ceil() as usize)
            .saturating_sub(1)
            .min(v.len() - 1)]
    };
    let line = format!(
        "{what}: {} runs, **p50 {:.2} ms** (goal < 2 ms), **p99 {:.2} ms** (goal < 10 ms), \
         min {:.2} ms, max {:.2} ms (histogram: {svg}.svg)",
        v.len(),
        ms(pct(0.50)),
        ms(pct(0.99)),
        ms(v[0]),
        ms(v[v.len() - 1])
    );
    report_file::record(bench, &line);
    let values: Vec<f64> = v.iter().map(|d| ms(*d)).collect();
    report_file::histogram_svg(svg, &format!("{what}: ms"), &values, 20);
}
