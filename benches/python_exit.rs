//! What a guard costs a Python program that exits cleanly with nothing in flight (issue #15,
//! point 5a; goal: the exit under 50 ms): `with sandguard.guard(renew_every=None): pass`, run
//! RUNS times in one interpreter, timing the block's end (`__exit__`: `bye`, then the
//! sidecar's word on the reclaim) and the whole statement (start-up included). The module is
//! the one in `packaging/python` (no wheel needed), the binary this bench's release build;
//! the sidecar's Docker provider lists the real daemon (the default config), so the exit pays
//! one listing, as a user's program does.
//!
//! Run: `cargo bench --bench python_exit` (needs `python3` and `docker info` to work).
//! `RUNS=100 cargo bench --bench python_exit` for more.

#[path = "common/report.rs"]
mod report_file;

use std::process::Command;

/// Times `RUNS` guarded blocks; prints one `exit_ms total_ms` line per run.
const PROGRAM: &str = r#"
import os, sys, time
import sandguard
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    g = sandguard.guard(renew_every=None)
    with g:
        ending = time.perf_counter()
    ended = time.perf_counter()
    assert g.outcome.clean, g.outcome
    print(f"{(ended - ending) * 1000:.3f} {(ended - started) * 1000:.3f}", flush=True)
"#;

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let state = std::env::temp_dir().join(format!("sandguard-bench-pyexit-{}", std::process::id()));
    std::fs::create_dir_all(&state).expect("state dir");
    let out = Command::new("python3")
        .args(["-c", PROGRAM, &runs.to_string()])
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/packaging/python"),
        )
        .env("SANDGUARD_BIN", env!("CARGO_BIN_EXE_sandguard"))
        .env("XDG_STATE_HOME", &state)
        .env("HOME", &state)
        .env_remove("SANDGUARD_CONFIG")
        .output()
        .expect("run python3");
    let _ = std::fs::remove_dir_all(&state);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mut exits, mut totals): (Vec<f64>, Vec<f64>) = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.parse::<f64>().ok()?, b.parse::<f64>().ok()?))
        })
        .unzip();
    assert_eq!(exits.len(), runs, "one line per run");
    let line = format!(
        "`with sandguard.guard(): pass`, {runs} runs: exit (bye → outcome) median {:.1} ms, p90 {:.1} ms, max {:.1} ms; whole block median {:.1} ms (goal: exit < 50 ms)",
        percentile(&mut exits, 0.5),
        percentile(&mut exits, 0.9),
        percentile(&mut exits, 1.0),
        percentile(&mut totals, 0.5),
    );
    report_file::record("python exit (cargo bench --bench python_exit)", &line);
}

fn percentile(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i]
}
