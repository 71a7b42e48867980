//! Shared by the Docker benchmarks: running containers made fast, their `destroy` events
//! watched, `docker rm -f` timed, and the machine's busy CPU read from `/proc/stat`.

#![allow(dead_code, unsafe_code)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const IMAGE: &str = "sandguard-test/busybox:latest";

/// Stops the bench at once, saying what to run, when no daemon answers or the test image
/// (which `tests/run.sh` builds) is missing.
pub fn require_image() {
    let ok = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "needs a running Docker daemon and the test image: run tests/run.sh once first"
    );
}

/// Starts `n` running containers with `labels`, 8 at a time; returns their ids.
pub fn start_containers(n: usize, labels: &[String]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "-P".into(),
        "8".into(),
        "-n".into(),
        "1".into(),
        "docker".into(),
        "run".into(),
        "-d".into(),
        "--network".into(),
        "none".into(),
    ];
    for l in labels {
        args.push("--label".into());
        args.push(l.clone());
    }
    args.extend([IMAGE.into(), "sleep".into(), "600".into()]);
    let mut xargs = Command::new("xargs")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("xargs");
    {
        let mut stdin = xargs.stdin.take().expect("stdin");
        use std::io::Write;
        for i in 0..n {
            let _ = writeln!(stdin, "{i}");
        }
    }
    let out = xargs.wait_with_output().expect("xargs output");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `docker events` for the destroy events of the containers matching `filter`.
pub fn destroy_watcher(filter: &str) -> std::process::Child {
    Command::new("docker")
        .args([
            "events",
            "--filter",
            "type=container",
            "--filter",
            "event=destroy",
            "--filter",
            filter,
            "--format",
            "{{.ID}}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker events")
}

/// Waits for `n` destroy events from `events`; returns when the last one arrived, or `None`
/// when the stream lost some. Seen once at 200 (2026-12-03): the watcher printed fewer
/// destroys than there were containers, while the sidecar's journal recorded all 200 removed
/// and none was left; the cause was not found (dockerd does drop an event for a subscriber
/// whose buffer of 1 024 stays full for 100 ms, but 200 do not fill it; the daemon wedged half
/// an hour later). A stream quiet for 30 s while no container matching `filter` is left has
/// lost events; that round's figure is unknown, not the time the bench gave up.
pub fn wait_destroys(events: &mut std::process::Child, n: usize, filter: &str) -> Option<Instant> {
    let stdout = events.stdout.take().expect("events stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if line.is_err() || tx.send(Instant::now()).is_err() {
                break;
            }
        }
    });
    let mut last = None;
    let mut seen = 0;
    let mut quiet = Duration::ZERO;
    while seen < n {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(at) => {
                seen += 1;
                last = Some(at);
                quiet = Duration::ZERO;
            }
            Err(_) => {
                let left = remaining(filter);
                if left == 0 {
                    eprintln!("docker events printed {seen} of {n} destroy events for {filter}, and none of those containers is left: round not counted");
                    last = None;
                    break;
                }
                // A daemon that removes nothing for minutes is wedged (seen once on this VM
                // after about an hour of removals: `docker rm -f` of one container hung too);
                // the bench stops with that rather than wait for ever.
                quiet += Duration::from_secs(30);
                assert!(
                    quiet < Duration::from_secs(300),
                    "dockerd removed nothing for 5 minutes with {left} containers matching {filter} left: restart it and run the bench again"
                );
            }
        }
    }
    let _ = events.kill();
    let _ = events.wait();
    last
}

/// How many containers, in any state, match `filter`.
pub fn remaining(filter: &str) -> usize {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter", filter])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The whole machine's busy CPU time so far: every CPU's user, nice, system, irq, softirq and
/// steal ticks from `/proc/stat` (idle and iowait left out).
pub fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .expect("cpu line")
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().expect("tick count"))
        .collect();
    let busy: u64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, t)| t)
        .sum();
    clock_ticks(busy)
}

/// `ticks` clock ticks (`/proc`'s unit of CPU time) as a duration.
pub fn clock_ticks(ticks: u64) -> Duration {
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// `docker rm -f` of `n` running containers: from the command's start to the last `destroy`,
/// and the machine's CPU time over it.
pub fn docker_rm_f(n: usize) -> Option<Timed> {
    let tag = format!("bench.rm={}", std::process::id());
    let ids = start_containers(n, std::slice::from_ref(&tag));
    std::thread::sleep(Duration::from_millis(300));
    let mut events = destroy_watcher(&format!("label={tag}"));
    std::thread::sleep(Duration::from_millis(200));
    let meter = Meter::start();
    let status = Command::new("docker")
        .arg("rm")
        .arg("-f")
        .args(&ids)
        .stdout(Stdio::null())
        .status()
        .expect("docker rm");
    assert!(status.success());
    let done = wait_destroys(&mut events, n, &format!("label={tag}"))?;
    Some(meter.until(done))
}

pub fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

pub fn median_f(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The CPU time dockerd and containerd (the daemons, not their shims) have used so far, read
/// from `/proc/PID/stat`: the daemons' share of a removal, apart from whatever else the
/// machine runs.
pub fn daemons_cpu() -> Duration {
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !matches!(&stat[open + 1..close], "dockerd" | "containerd") {
            continue;
        }
        let fields: Vec<u64> = stat[close + 2..]
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
        ticks += fields.get(11).copied().unwrap_or(0) + fields.get(12).copied().unwrap_or(0);
    }
    clock_ticks(ticks)
}

/// A removal's figures: its wall time, the whole machine's busy CPU over it, and the daemons'
/// own CPU ([`daemons_cpu`]).
#[derive(Debug, Clone, Copy)]
pub struct Timed {
    pub wall: Duration,
    pub machine: Duration,
    pub daemons: Duration,
}

/// Where a timed removal began.
pub struct Meter {
    at: Instant,
    machine: Duration,
    daemons: Duration,
}

impl Meter {
    pub fn start() -> Meter {
        Meter {
            daemons: daemons_cpu(),
            machine: machine_busy(),
            at: Instant::now(),
        }
    }

    /// The figures from the start to `done` (the CPU read now).
    pub fn until(&self, done: Instant) -> Timed {
        Timed {
            wall: done.duration_since(self.at),
            machine: machine_busy().saturating_sub(self.machine),
            daemons: daemons_cpu().saturating_sub(self.daemons),
        }
    }
}
