//! The rest of the benchmark suite, with the real binary:
//!
//! 1. **Docker reclaim throughput**: a guarded owner's 10 / 50 / 100 / 200 running containers,
//!    from its SIGKILL to the last `destroy` event, against `docker rm -f` of as many containers
//!    in the same run; the ratio per size (goal ≤ 1.0), plotted in `throughput.svg`. Beside it,
//!    the whole machine's CPU time over each side's removal and how busy it kept the cores: the
//!    figure that shows whether a difference in time is a difference in work.
//! 2. **An idle sidecar**: its RSS and its wake-ups (context switches) over 10 s, read from
//!    `/proc`, without heartbeats (goal: under 4 MiB, no wake-ups).
//! 3. **A sweep over 10 000 emulated E2B sandboxes** (`sweep --dry-run`): CPU time and peak RSS
//!    of that one sandguard process (goal: under 1 s, under 50 MiB), from the rusage `wait4`
//!    returns for its pid alone, not `RUSAGE_CHILDREN`, which would add every child this bench
//!    reaped before (the claims sidecars, `docker`, `xargs`) and report the largest peak RSS
//!    among them. (`wait4`'s figures include the sweep's own waited-for children; it starts
//!    none.)
//! 4. **Claims at scale**: 5 000, 20 000 and 100 000 `claim` lines written as fast as a pipe
//!    takes them; the wall time until the last one is journaled, and the sidecar's CPU time
//!    (goal: linear, a claim costs the same at 100 000 as at 5 000).
//!
//! 5. **A report over 10 000 sessions**: 10 000 journals written through the library's journal
//!    writer into a scratch state directory (each with claims, a release and a removal, one
//!    in four still holding a sandbox), then `sandguard report --json` over them: its wall
//!    time (goal: under 1 s).
//!
//! Run: `cargo bench --bench suite` (needs the daemon and test image from `tests/run.sh`).
//! `SIZES=10,50` picks the throughput sizes and `ROUNDS=5` the rounds per size (default 3: each
//! round measures sandguard and `docker rm -f` in turn, the CLI first in every other round, and
//! the median ratio is reported beside every round's); `ONLY=claims` runs one part (idle, claims, sweep, throughput, report).
//! `BEFORE=/path/to/an/older/sandguard` also measures that binary's reclaim at each size, in
//! the same rounds against the same `docker rm -f`, marked `before`.

// sysconf for the clock tick, as a user would read CPU time; wait4 for one child's rusage.
#![allow(unsafe_code)]

#[path = "common/docker.rs"]
mod docker;
#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;
#[path = "common/report.rs"]
mod report;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use docker::{
    clock_ticks, destroy_watcher, docker_rm_f, machine_busy, median, median_f, start_containers,
    wait_destroys,
};

fn main() {
    let exe = env!("CARGO_BIN_EXE_sandguard");
    let scratch = std::env::temp_dir().join(format!("sandguard-suite-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    // `ONLY=claims` (or idle, sweep, throughput, report) runs one part.
    let only = std::env::var("ONLY").ok();
    let run = |part: &str| only.as_deref().is_none_or(|o| o == part);
    if run("idle") {
        idle_sidecar(exe, &scratch);
    }
    if run("claims") {
        claims_at_scale(exe, &scratch);
    }
    if run("sweep") {
        sweep_scale(exe, &scratch);
    }
    if run("throughput") {
        throughput(exe, &scratch);
    }
    if run("report") {
        report_scale(exe, &scratch);
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

fn throughput(exe: &str, scratch: &std::path::Path) {
    let sizes: Vec<usize> = std::env::var("SIZES").ok().map_or_else(
        || vec![10, 50, 100, 200],
        |s| s.split(',').filter_map(|x| x.parse().ok()).collect(),
    );
    // Rounds per size: dockerd's own time swings ±15 % from one run to the next (for both
    // sides), so one round decides the ratio by chance; the median of several does less so.
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(3);
    let before = std::env::var("BEFORE").ok();
    let mut bars = Vec::new();
    for n in sizes {
        let (mut ours, mut olds, mut manuals) = (Vec::new(), Vec::new(), Vec::new());
        let (mut our_cpu, mut manual_cpu) = (Vec::new(), Vec::new());
        let mut lost = 0;
        for round in 0..rounds {
            // Who goes first alternates, so that whatever the earlier removal leaves the
            // daemon and kernel doing (deferred namespace and mount teardown) weighs on both
            // sides alike. A round where a side's events were lost is left out whole.
            let manual_first = round % 2 == 1;
            let mut manual = manual_first.then(|| docker_rm_f(n));
            let guarded = reclaim_of(exe, n, scratch);
            let old = before.as_deref().map(|old| reclaim_of(old, n, scratch));
            if !manual_first {
                manual = Some(docker_rm_f(n));
            }
            match (guarded, manual.flatten(), old) {
                (Some(g), Some(m), None | Some(Some(_))) => {
                    ours.push(g.0);
                    our_cpu.push(g.1);
                    manuals.push(m.wall);
                    manual_cpu.push(m.machine);
                    if let Some(Some(o)) = old {
                        olds.push(o.0);
                    }
                }
                _ => lost += 1,
            }
        }
        if ours.is_empty() {
            report::record(
                "Docker reclaim throughput (cargo bench --bench suite)",
                &format!("P2 {n} containers: every round lost destroy events, no figure"),
            );
            continue;
        }
        let counted = if lost == 0 {
            format!("{}", ours.len())
        } else {
            format!("{} ({lost} lost to dropped events)", ours.len())
        };
        let ratios = |times: &[Duration]| -> Vec<f64> {
            times
                .iter()
                .zip(&manuals)
                .map(|(t, m)| t.as_secs_f64() / m.as_secs_f64())
                .collect()
        };
        let (guarded, manual, ratio) = (median(&ours), median(&manuals), median_f(&ratios(&ours)));
        let each = |r: &[f64]| {
            r.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        report::record(
            "Docker reclaim throughput (cargo bench --bench suite)",
            &format!(
                "P2 {n} containers, median of {counted} rounds: sandguard {:.0} ms after SIGKILL, `docker rm -f` {:.0} ms, **ratio {ratio:.2}** (goal ≤ 1.0; each round: {})",
                guarded.as_secs_f64() * 1e3,
                manual.as_secs_f64() * 1e3,
                each(&ratios(&ours))
            ),
        );
        // The whole machine's CPU over each side's removal (every process and the kernel,
        // from /proc/stat), and how busy that kept the two cores: equal CPU at the same
        // utilisation means both sides asked for the same work and the daemon set the pace.
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let busy = |cpu: &[Duration], wall: &[Duration]| -> f64 {
            median_f(
                &cpu.iter()
                    .zip(wall)
                    .map(|(c, w)| c.as_secs_f64() / (w.as_secs_f64() * cores))
                    .collect::<Vec<_>>(),
            ) * 100.0
        };
        report::record(
            "Docker reclaim throughput (cargo bench --bench suite)",
            &format!(
                "P2 {n} containers, machine CPU over the removal (median): sandguard {:.2} s at {:.0} % of {cores} cores, `docker rm -f` {:.2} s at {:.0} % (CPU ratio each round: {})",
                median(&our_cpu).as_secs_f64(),
                busy(&our_cpu, &ours),
                median(&manual_cpu).as_secs_f64(),
                busy(&manual_cpu, &manuals),
                each(
                    &our_cpu
                        .iter()
                        .zip(&manual_cpu)
                        .map(|(o, m)| o.as_secs_f64() / m.as_secs_f64())
                        .collect::<Vec<_>>()
                ),
            ),
        );
        if !olds.is_empty() {
            report::record(
                "Docker reclaim throughput (cargo bench --bench suite)",
                &format!(
                    "P2 before (BEFORE binary, same rounds) {n} containers: {:.0} ms after SIGKILL, **ratio {:.2}** (each round: {})",
                    median(&olds).as_secs_f64() * 1e3,
                    median_f(&ratios(&olds)),
                    each(&ratios(&olds))
                ),
            );
        }
        bars.push((n.to_string(), ratio));
    }
    report::bar_svg(
        "throughput",
        "sandguard reclaim time / docker rm -f time (lower is better)",
        "containers",
        "ratio",
        &bars,
    );
}

/// SIGKILL of a guarded owner whose `n` running containers carry its labels → the last
/// `destroy` event, and the machine's CPU time over it.
fn reclaim_of(exe: &str, n: usize, scratch: &std::path::Path) -> Option<(Duration, Duration)> {
    let mut owner = Command::new(exe)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"$SANDGUARD_SESSION $SANDGUARD_LABELS\"; exec sleep 600",
        ])
        .env("XDG_STATE_HOME", scratch)
        .stdout(Stdio::piped())
        .spawn()
        .expect("owner");
    let mut line = String::new();
    BufReader::new(owner.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("labels");
    let (session, labels) = line.trim().split_once(' ').expect("session and labels");
    let labels: Vec<String> = labels.split(',').map(str::to_string).collect();
    let ids = start_containers(n, &labels);
    assert_eq!(ids.len(), n, "all containers started");
    std::thread::sleep(Duration::from_millis(300));
    let filter = format!("label=sandguard.session={session}");
    let mut events = destroy_watcher(&filter);
    std::thread::sleep(Duration::from_millis(200));
    let (killed, cpu) = (Instant::now(), machine_busy());
    owner.kill().expect("kill");
    let _ = owner.wait();
    let done = wait_destroys(&mut events, n, &filter)?;
    Some((done.duration_since(killed), machine_busy() - cpu))
}

fn proc_status(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn idle_sidecar(exe: &str, scratch: &std::path::Path) {
    let mut sidecar = Command::new(exe)
        .args(["watch", "--owner-pid", &std::process::id().to_string()])
        .env("XDG_STATE_HOME", scratch)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("sidecar");
    let mut ready = String::new();
    BufReader::new(sidecar.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready");
    // Let the provider warm-up (100 ms after ready) finish.
    std::thread::sleep(Duration::from_secs(1));
    let pid = sidecar.id();
    let switches = || {
        proc_status(pid, "voluntary_ctxt_switches:")
            + proc_status(pid, "nonvoluntary_ctxt_switches:")
    };
    let before = switches();
    std::thread::sleep(Duration::from_secs(10));
    let wakeups = switches() - before;
    let (rss_kib, anon_kib, file_kib) = (
        proc_status(pid, "VmRSS:"),
        proc_status(pid, "RssAnon:"),
        proc_status(pid, "RssFile:"),
    );
    let _ = sidecar.kill();
    let _ = sidecar.wait();
    report::record(
        "idle sidecar (cargo bench --bench suite)",
        &format!(
            "RSS {:.2} MiB ({:.2} MiB private, {:.2} MiB the binary's shared file pages), {wakeups} wake-ups in 10 s without heartbeats (Docker configured)",
            rss_kib as f64 / 1024.0,
            anon_kib as f64 / 1024.0,
            file_kib as f64 / 1024.0
        ),
    );
}

/// Streams `n` claims into a sidecar; returns (wall time to the last journaled, sidecar CPU).
fn claims(exe: &str, scratch: &std::path::Path, n: usize) -> (Duration, Duration) {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let session = format!("claims{n}x{}", std::process::id());
    let (read_end, write_end) = sandguard::testing::unix::pipe().expect("pipe");
    let mut cmd = Command::new(exe);
    cmd.args(["watch", "--owner-pid", &std::process::id().to_string()])
        .args(["--session", &session, "--control-fd", "3"])
        .env("XDG_STATE_HOME", scratch)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut sidecar =
        sandguard::testing::unix::spawn_in_new_session(&mut cmd, read_end.as_raw_fd(), 3)
            .expect("sidecar");
    drop(cmd);
    drop(read_end);
    let mut ready = String::new();
    BufReader::new(sidecar.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("ready");
    let journal = scratch.join(format!("sandguard/sessions/{session}.journal"));
    let started = Instant::now();
    let mut pipe = std::fs::File::from(write_end);
    // Written from a thread, so that a sidecar too slow to drain the pipe fails the bench at
    // the deadline below instead of blocking this write for ever.
    let writer = std::thread::spawn(move || {
        let mut batch = String::with_capacity(1 << 16);
        for i in 0..n {
            batch.push_str(&format!("claim docker {i:064x}\n"));
            if batch.len() > 60_000 || i + 1 == n {
                pipe.write_all(batch.as_bytes()).expect("write claims");
                batch.clear();
            }
        }
        pipe
    });
    let last = format!("{:064x}", n - 1);
    loop {
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        if text.contains(&last) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "claims not journaled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let wall = started.elapsed();
    let cpu = cpu_time(sidecar.id());
    drop(writer.join().expect("writer"));
    let _ = sidecar.kill();
    let _ = sidecar.wait();
    (wall, cpu)
}

/// utime + stime of a process, from /proc/PID/stat (fields 14 and 15, clock ticks).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    clock_ticks(fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0))
}

fn claims_at_scale(exe: &str, scratch: &std::path::Path) {
    let mut parts = Vec::new();
    for n in [5_000, 20_000, 100_000] {
        let (wall, cpu) = claims(exe, scratch, n);
        parts.push(format!(
            "{n} claims journaled in {:.2} s, sidecar CPU {:.2} s ({:.1} µs a claim)",
            wall.as_secs_f64(),
            cpu.as_secs_f64(),
            cpu.as_secs_f64() * 1e6 / n as f64
        ));
    }
    report::record(
        "claims at scale (cargo bench --bench suite)",
        &parts.join("; "),
    );
}

fn sweep_scale(exe: &str, scratch: &std::path::Path) {
    let key = "e2b_00000000000000000000000000000000";
    let (emu, state) = e2b::start(key);
    // Owners on another machine: judged by TTL only, so the sweep must look at each and leave it.
    let owner = "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1";
    for i in 0..10_000 {
        state.insert(
            &format!("s{i:05}"),
            &[
                ("sandguard.session", &format!("sess{}", i % 500)),
                ("sandguard.owner", owner),
            ],
        );
    }
    let config = scratch.join("sweep.toml");
    std::fs::write(&config, "[providers.docker]\nenabled = false\n").expect("config");
    let mut child = Command::new(exe)
        .args(["sweep", "--dry-run", "--json", "--provider", "e2b"])
        .env("E2B_API_KEY", key)
        .env("E2B_API_URL", &emu.url)
        .env("SANDGUARD_CONFIG", &config)
        .env("XDG_STATE_HOME", scratch)
        .stdout(Stdio::piped())
        .spawn()
        .expect("sweep");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    let (code, cpu, peak_kib) = wait_alone(child);
    let decisions = out.matches("\"verdict\"").count();
    report::record(
        "sweep over 10 000 emulated sandboxes (cargo bench --bench suite)",
        &format!(
            "exit {code}, {decisions} decisions, the sweep process alone (wait4): CPU {cpu:.2} s \
             (goal < 1 s), peak RSS {:.1} MiB (goal < 50 MiB)",
            peak_kib as f64 / 1024.0
        ),
    );
}

/// Reaps `child` with `wait4` and returns (exit code, user + system CPU seconds, peak RSS in
/// KiB) of that one process: the rusage of its pid alone, not every reaped child's.
fn wait_alone(child: std::process::Child) -> (i32, f64, i64) {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: wait4 reaps our own child `pid` and fills the status and rusage it is given; a
    // zeroed rusage is a valid value. `child` is not waited for by std afterwards (dropping a
    // Child does not wait).
    let (reaped, usage) = unsafe {
        let reaped = libc::wait4(pid, &mut status, 0, usage.as_mut_ptr());
        (reaped, usage.assume_init())
    };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        code,
        secs(usage.ru_utime) + secs(usage.ru_stime),
        usage.ru_maxrss,
    )
}

/// Writes `n` sessions' journals into the state directory `state` through the library's
/// journal writer (unsynced: the figure is the reader's, not the disk's).
fn write_journals(state: &std::path::Path, n: usize) {
    use sandguard::testing::ledger::{Record, StateDir};
    let dir = StateDir::open(state).expect("state directory");
    let claim = |provider: &str, id: String| Record::Claim {
        provider: provider.into(),
        id,
        size: None,
    };
    for i in 0..n {
        let start = Record::Start {
            owner: "aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-1-1".into(),
            pid: 1,
            grace_ms: 5_000,
            labels: Default::default(),
        };
        let mut journal = dir
            .create_session_unsynced(&format!("report{i:05}"), start)
            .expect("journal");
        let records = [
            claim("docker", format!("{i:012x}")),
            claim("e2b", format!("sbx{i}")),
            claim("docker", format!("network/{i:012x}")),
            Record::Release {
                provider: "e2b".into(),
                id: format!("sbx{i}"),
            },
            Record::Removed {
                provider: "docker".into(),
                id: format!("network/{i:012x}"),
                outcome: "removed".into(),
                at: None,
                limit: None,
            },
        ];
        for record in &records {
            journal.write(record).expect("write");
        }
        if i % 4 != 0 {
            journal
                .write(&Record::Removed {
                    provider: "docker".into(),
                    id: format!("{i:012x}"),
                    outcome: "gone".into(),
                    at: None,
                    limit: None,
                })
                .expect("write");
        }
    }
}

fn report_scale(exe: &str, scratch: &std::path::Path) {
    let n = 10_000;
    let home = scratch.join("report");
    let state = home.join("sandguard");
    write_journals(&state, n);
    let config = scratch.join("report.toml");
    std::fs::write(&config, "").expect("config");
    let mut times = Vec::new();
    let mut sessions = 0;
    for _ in 0..3 {
        let started = Instant::now();
        let out = Command::new(exe)
            .args(["report", "--json", "--by", "session"])
            .env("SANDGUARD_CONFIG", &config)
            .env("XDG_STATE_HOME", &home)
            .output()
            .expect("report");
        times.push(started.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        sessions = v["sessions"].as_u64().unwrap_or(0);
    }
    report::record(
        "report over 10 000 sessions (cargo bench --bench suite)",
        &format!(
            "`sandguard report --json --by session` over {n} journals ({sessions} sessions \
             counted): median wall time {:.3} s of 3 runs (goal < 1 s)",
            median(&times).as_secs_f64()
        ),
    );
    let _ = std::fs::remove_dir_all(&home);
}
