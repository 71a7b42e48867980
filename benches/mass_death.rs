//! Mass death (issue 44): a cancelled CI job kills many guarded programs at the same moment.
//! `N` programs run under `sandguard --` with the defaults (the Docker proxy on), each makes
//! `K` containers through it (`docker run` on its `$DOCKER_HOST`), then sleeps; all `N` are
//! SIGKILLed at once (one `killpg`: they share a process group, their sidecars do not), and
//! the time runs from the kill to the last `destroy` event of the `N × K` containers. Against
//! it, in the same round, `docker rm -f` of `N × K` such containers made directly, timed from
//! the command's start to its last `destroy` (the same measure as P2, `benches/suite.rs`).
//!
//! Rounds alternate which side goes first (whatever one side's teardown leaves the kernel
//! doing weighs on both alike); every round's ratio is printed, and the median ratio is the
//! figure (goal ≤ 1.1). Beside it: the machine's busy CPU over each side's removal (from
//! `/proc/stat`: dockerd, containerd, the shims and the sidecars together), the daemons' own
//! (dockerd and containerd: what sandguard's requests cost them, apart from anything else
//! the machine runs), and the sidecars'
//! private memory in all (`Private_Clean + Private_Dirty` of `/proc/PID/smaps_rollup`, read
//! just before the kill).
//!
//! Run: `cargo bench --bench mass_death` (a Docker daemon and the test image, as for
//! `tests/run.sh`). `SHAPES=50x2,20x5` (the default) picks the shapes, `ROUNDS=5` (default)
//! the rounds per shape. `BEFORE=/path/to/an/older/sandguard` measures that binary too, in
//! the same rounds, marked `before`.

// killpg, to kill every program at the same moment.
#![allow(unsafe_code)]

#[path = "common/docker.rs"]
mod docker;
#[path = "common/report.rs"]
mod report;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use docker::{
    destroy_watcher, docker_rm_f, median, median_f, remaining, wait_destroys, Meter, Timed, IMAGE,
};

const BENCH: &str = "Mass death (cargo bench --bench mass_death)";

fn main() {
    docker::require_image();
    let shapes: Vec<(usize, usize)> = std::env::var("SHAPES")
        .unwrap_or_else(|_| "50x2,20x5".into())
        .split(',')
        .filter_map(|s| {
            let (n, k) = s.split_once('x')?;
            Some((n.parse().ok()?, k.parse().ok()?))
        })
        .collect();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(5);
    let exe = env!("CARGO_BIN_EXE_sandguard");
    let before = std::env::var("BEFORE").ok();
    let scratch = std::env::temp_dir().join(format!("sandguard-mass-{}", std::process::id()));
    for (n, k) in shapes {
        shape(exe, before.as_deref(), &scratch, n, k, rounds);
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

fn shape(exe: &str, before: Option<&str>, scratch: &Path, n: usize, k: usize, rounds: usize) {
    let (mut ours, mut olds, mut manuals) = (Vec::new(), Vec::new(), Vec::new());
    let mut memory = Vec::new();
    let mut lost = 0;
    for round in 0..rounds {
        let manual_first = round % 2 == 1;
        let mut manual = manual_first.then(|| docker_rm_f(n * k));
        let guarded = mass_death(exe, scratch, n, k);
        let old = before.map(|old| mass_death(old, scratch, n, k));
        if !manual_first {
            manual = Some(docker_rm_f(n * k));
        }
        match (guarded, manual.flatten(), old) {
            (Some((g, kib)), Some(m), None | Some(Some(_))) => {
                ours.push(g);
                memory.push(kib);
                manuals.push(m);
                if let Some(Some((o, _))) = old {
                    olds.push(o);
                }
            }
            _ => lost += 1,
        }
    }
    if ours.is_empty() {
        report::record(
            BENCH,
            &format!("{n} × {k}: every round lost destroy events, no figure"),
        );
        return;
    }
    let walls = |sides: &[Timed]| sides.iter().map(|s| s.wall).collect::<Vec<_>>();
    let ratios = |sides: &[Timed]| -> Vec<f64> {
        sides
            .iter()
            .zip(&manuals)
            .map(|(s, m)| s.wall.as_secs_f64() / m.wall.as_secs_f64())
            .collect()
    };
    let each = |r: &[f64]| {
        r.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let counted = if lost == 0 {
        ours.len().to_string()
    } else {
        format!("{} ({lost} lost to dropped events)", ours.len())
    };
    let cpu = |sides: &[Timed]| median(&sides.iter().map(|s| s.machine).collect::<Vec<_>>());
    let daemons = |sides: &[Timed]| median(&sides.iter().map(|s| s.daemons).collect::<Vec<_>>());
    report::record(
        BENCH,
        &format!(
            "{n} programs × {k} containers, SIGKILLed at once, median of {counted} rounds: sandguard {:.0} ms, `docker rm -f` of {} {:.0} ms, **ratio {:.2}** (goal ≤ 1.1; each round: {}); machine CPU over the removal {:.2} s against {:.2} s, dockerd and containerd's {:.2} s against {:.2} s; the {n} sidecars' private memory {:.1} MiB",
            median(&walls(&ours)).as_secs_f64() * 1e3,
            n * k,
            median(&walls(&manuals)).as_secs_f64() * 1e3,
            median_f(&ratios(&ours)),
            each(&ratios(&ours)),
            cpu(&ours).as_secs_f64(),
            cpu(&manuals).as_secs_f64(),
            daemons(&ours).as_secs_f64(),
            daemons(&manuals).as_secs_f64(),
            median_f(&memory) / 1024.0,
        ),
    );
    if !olds.is_empty() {
        report::record(
            BENCH,
            &format!(
                "{n} × {k} before (BEFORE binary, same rounds): {:.0} ms, **ratio {:.2}** (each round: {}); machine CPU {:.2} s, the daemons' {:.2} s",
                median(&walls(&olds)).as_secs_f64() * 1e3,
                median_f(&ratios(&olds)),
                each(&ratios(&olds)),
                cpu(&olds).as_secs_f64(),
                daemons(&olds).as_secs_f64(),
            ),
        );
    }
}

/// `n` guarded programs with `k` containers each, SIGKILLed at once: the wall time and
/// machine CPU from the kill to the last destroy, and the sidecars' private memory (KiB)
/// just before; `None` when the event stream lost destroys.
fn mass_death(exe: &str, scratch: &Path, n: usize, k: usize) -> Option<(Timed, f64)> {
    let tag = format!("bench.mass={}-{}", std::process::id(), unique());
    let ready = scratch.join(format!("ready-{}", unique()));
    std::fs::create_dir_all(&ready).expect("scratch");
    let script = format!(
        "for i in $(seq {k}); do docker run -d --network none --label {tag} {IMAGE} sleep 600 >/dev/null || exit 1; done; \
         echo \"$SANDGUARD_SESSION\" > {ready}/$$.tmp && mv {ready}/$$.tmp {ready}/$$; exec sleep 600",
        ready = ready.display()
    );
    let mut group = 0;
    let mut owners: Vec<Child> = Vec::with_capacity(n);
    for _ in 0..n {
        let owner = Command::new(exe)
            .args(["--", "sh", "-c", &script])
            .env("XDG_STATE_HOME", scratch)
            .env_remove("SANDGUARD_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(group)
            .spawn()
            .expect("a guarded program");
        if group == 0 {
            group = owner.id() as i32;
        }
        owners.push(owner);
    }
    let sessions = wait_ready(&ready, &mut owners, n);
    let filter = format!("label={tag}");
    assert_eq!(remaining(&filter), n * k, "every container made");
    let private_kib: f64 = sessions.iter().map(|s| sidecar_private_kib(s)).sum();
    // The sidecars' warm-up after their program's `ready` is long over by now; the events
    // stream is subscribed before the kill.
    std::thread::sleep(Duration::from_millis(300));
    let mut events = destroy_watcher(&filter);
    std::thread::sleep(Duration::from_millis(200));
    let meter = Meter::start();
    // SAFETY: killpg only sends a signal, to the group this bench made.
    let sent = unsafe { libc::killpg(group, libc::SIGKILL) };
    assert_eq!(sent, 0, "killpg");
    for mut o in owners {
        let _ = o.wait();
    }
    let done = wait_destroys(&mut events, n * k, &filter)?;
    let side = meter.until(done);
    let _ = std::fs::remove_dir_all(&ready);
    Some((side, private_kib))
}

/// Until each of the `n` programs has made its containers; their session ids.
fn wait_ready(ready: &Path, owners: &mut [Child], n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done: Vec<PathBuf> = std::fs::read_dir(ready)
            .expect("ready dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_none())
            .collect();
        if done.len() == n {
            return done
                .iter()
                .map(|p| std::fs::read_to_string(p).unwrap().trim().to_string())
                .collect();
        }
        for o in owners.iter_mut() {
            if let Ok(Some(status)) = o.try_wait() {
                panic!("a guarded program ended ({status}) before making its containers");
            }
        }
        assert!(
            Instant::now() < deadline,
            "the programs did not start in 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The private memory (KiB) of the sidecar of `session`, found by its command line.
fn sidecar_private_kib(session: &str) -> f64 {
    let needle = format!("--session {session}");
    let pid = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            text.contains(&needle).then_some(pid)
        })
        .unwrap_or_else(|| panic!("no sidecar for session {session}"));
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    rollup
        .lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum()
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{nanos:x}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
