//! The packaging files are checked by the tools that will read them: the launchd plist by a
//! plist parser (Python's `plistlib`), the systemd units by `systemd-analyze verify` (Debian's
//! systemd; tests/run.sh installs it), and both run the sweep the README says they run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::Scratch;

fn packaging(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(rel)
}

#[test]
fn the_launchd_plist_parses_and_runs_the_sweep_service() {
    let plist = packaging("launchd/dev.sandguard.sweep.plist");
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, plistlib, sys; print(json.dumps(plistlib.load(open(sys.argv[1], 'rb'))))",
        ])
        .arg(&plist)
        .output()
        .expect("python3 (tests/run.sh installs it)");
    assert!(
        out.status.success(),
        "{} is not a valid plist: {}",
        plist.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["Label"], "dev.sandguard.sweep");
    let argv: Vec<&str> = v["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(argv[1..], ["sweep", "--every", "5m"]);
}

#[test]
fn the_systemd_units_verify_clean_and_have_no_ordering_cycle() {
    let units = [
        "sandguard-sweep.service",
        "sandguard-sweep.timer",
        "sandguard-sweep-once.service",
    ];
    let s = Scratch::new("systemd-verify");
    // The units run %h/.local/bin/sandguard: give `verify` a home where it exists.
    let home = s.path().join("home");
    std::fs::create_dir_all(home.join(".local/bin")).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_sandguard"),
        home.join(".local/bin/sandguard"),
    )
    .unwrap();
    let runtime = s.path().join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    let dir = packaging("systemd");
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .args(units.iter().map(|u| dir.join(u)))
        .env("HOME", &home)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("systemd-analyze (Debian's systemd; tests/run.sh installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    // verify prints problems it tolerates (an unknown key, a bad value) but still exits 0.
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify complained:\n{said}"
    );
    // What verify cannot see without enabling the unit: a unit WantedBy= a target and
    // After= it is an ordering cycle (a target is ordered after the units it wants).
    for unit in units {
        let text = std::fs::read_to_string(dir.join(unit)).unwrap();
        let values = |key: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix(key))
                .flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .collect()
        };
        for target in values("WantedBy=") {
            assert!(
                !values("After=").contains(&target),
                "{unit}: After={target} with WantedBy={target} is an ordering cycle"
            );
        }
    }
}
