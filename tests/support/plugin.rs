//! A plugin provider whose removals fail on purpose, and the helpers of the tests that use it.
//!
//! Removal failures come from [`Plugin`], a shell-script plugin provider whose behaviour is
//! set per sandbox, so no test needs a provider to misbehave by chance; the plugin tests
//! switch Docker off, so their sweeps never touch the shared daemon. Used by the tests of
//! reclaim failures, detaches, exit codes, the sweep service and plugin removals.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// The plugin: sandboxes are `STATE/ID.json`; `STATE/ID.mode` says how `remove` answers for
/// that sandbox, `STATE.list` how `list` answers; every call is appended to `LOG` as
/// `VERB ID NANOSECONDS`.
///
/// Remove modes: `fatal` (`retry: false`), `busy` (`retry: true`), `afterN` (`retry: true`,
/// `retry_after_secs: N`), `crash` (SIGSEGV, no reply), `big` (a valid `removed` reply over
/// 16 MiB, and nothing removed), `gate` (touches `STATE/ID.started`, then waits until
/// `STATE/ID.open` exists before it removes: a removal held on its way); `once-MODE` answers
/// MODE the first time only. List modes:
/// `down` (an error reply), `big` (a listing over 16 MiB), `unstartable` (lists, then takes
/// its own execute permission away, so the next call cannot start).
const SCRIPT: &str = r#"#!/bin/sh
ulimit -c 0
state=__STATE__
req=$(cat)
id=$(printf '%s' "$req" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
echo "$1 $id $(date +%s%N)" >> "$state.log"
case "$1" in
list)
  mode=$(cat "$state.list" 2>/dev/null)
  case "$mode" in
  down) echo '{"error":"the acme API is down","retry":false}'; exit 0 ;;
  big) printf '{"sandboxes":[],"pad":"'; head -c 17825792 /dev/zero | tr '\0' a; printf '"}\n'; exit 0 ;;
  esac
  printf '{"sandboxes":['; sep=''
  for f in "$state"/*.json; do
    s=$(cat "$f" 2>/dev/null) || continue; printf '%s%s' "$sep" "$s"; sep=','
  done
  printf ']}\n'
  if [ "$mode" = unstartable ]; then chmod a-x "$0"; fi
  ;;
remove)
  mode=$(cat "$state/$id.mode" 2>/dev/null)
  case "$mode" in
  once-*) if [ -e "$state/$id.tried" ]; then mode=; else touch "$state/$id.tried"; mode=${mode#once-}; fi ;;
  gate) touch "$state/$id.started"; while [ ! -e "$state/$id.open" ]; do sleep 0.02; done; mode= ;;
  esac
  case "$mode" in
  fatal) echo '{"error":"quota says no","retry":false}' ;;
  busy) echo '{"error":"busy, try again","retry":true}' ;;
  after*) echo "{\"error\":\"rate limited\",\"retry\":true,\"retry_after_secs\":${mode#after}}" ;;
  crash) echo 'panic: remove fell over' >&2; kill -SEGV $$ ;;
  big) printf '{"result":"removed","pad":"'; head -c 17825792 /dev/zero | tr '\0' a; printf '"}\n' ;;
  *) if rm "$state/$id.json" 2>/dev/null; then echo '{"result":"removed"}'; else echo '{"result":"gone"}'; fi ;;
  esac
  ;;
describe) echo '{"capabilities":{"labels":true,"ttl":false},"detail":"promises plugin"}' ;;
*) exit 2 ;;
esac
"#;

/// A plugin provider in a scratch directory (see [`SCRIPT`]).
pub(crate) struct Plugin {
    pub name: String,
    pub script: PathBuf,
    state: PathBuf,
}

impl Plugin {
    pub fn new(s: &Scratch, name: &str) -> Plugin {
        let dir = s.path().join("plugins");
        let script = dir.join(name);
        let state = dir.join(format!("{name}.state"));
        std::fs::create_dir_all(&state).unwrap();
        let text = SCRIPT.replace("__STATE__", &state.display().to_string());
        super::write_executable(&script, &text);
        Plugin {
            name: name.to_string(),
            script,
            state,
        }
    }

    /// A running sandbox with these labels.
    pub fn insert(&self, id: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let sandbox = serde_json::json!({ "id": id, "status": "running", "labels": labels });
        std::fs::write(self.state.join(format!("{id}.json")), sandbox.to_string()).unwrap();
    }

    /// A running sandbox with these labels, created at `created_at` (Unix seconds).
    pub fn insert_created(&self, id: &str, labels: &[(&str, &str)], created_at: i64) {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let sandbox = serde_json::json!({
            "id": id, "status": "running", "labels": labels, "created_at": created_at,
        });
        std::fs::write(self.state.join(format!("{id}.json")), sandbox.to_string()).unwrap();
    }

    /// How `remove` answers for `id` from now on (`None`: it removes).
    pub fn set_mode(&self, id: &str, mode: Option<&str>) {
        let file = self.state.join(format!("{id}.mode"));
        match mode {
            Some(m) => std::fs::write(file, m).unwrap(),
            None => {
                let _ = std::fs::remove_file(file);
            }
        }
    }

    /// How `list` answers from now on (`None`: it lists).
    pub fn set_list(&self, mode: Option<&str>) {
        let file = self.state.with_extension("state.list");
        match mode {
            Some(m) => std::fs::write(file, m).unwrap(),
            None => {
                let _ = std::fs::remove_file(file);
            }
        }
    }

    /// Where a `gate` removal of `id` says it started, and the file that lets it go on.
    pub fn gate(&self, id: &str) -> (PathBuf, PathBuf) {
        (
            self.state.join(format!("{id}.started")),
            self.state.join(format!("{id}.open")),
        )
    }

    pub fn exists(&self, id: &str) -> bool {
        self.state.join(format!("{id}.json")).exists()
    }

    /// When each `verb` call about `id` started, in nanoseconds since the epoch.
    pub fn calls(&self, verb: &str, id: &str) -> Vec<u128> {
        let log =
            std::fs::read_to_string(self.state.with_extension("state.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| {
                let mut w = l.split(' ');
                let (v, i, t) = (w.next()?, w.next()?, w.next()?);
                (v == verb && i == id).then(|| t.parse().ok())?
            })
            .collect()
    }

    /// Its `[providers.NAME]` table.
    fn table(&self) -> String {
        format!(
            "\n[providers.{}]\ncommand = [\"{}\"]\ntimeout = \"20s\"\n",
            self.name,
            self.script.display()
        )
    }
}

/// A config with Docker off, these plugins, and a reclaim `deadline` (short retries, no
/// settle pass).
pub(crate) fn config(s: &Scratch, deadline: &str, plugins: &[&Plugin]) -> PathBuf {
    let path = s.path().join("promises.toml");
    let mut text = format!(
        "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"{deadline}\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n"
    );
    for p in plugins {
        text.push_str(&p.table());
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// The real binary with `config`.
pub(crate) fn cmd(s: &Scratch, config: &Path) -> Command {
    let mut c = sandguard(s);
    c.env("SANDGUARD_CONFIG", config);
    c
}

/// The labels of a guarded owner, as `insert` takes them.
pub(crate) fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// One session's row of `sessions --json` (`Null` when the ledger does not have it).
pub(crate) fn session_row(c: &mut Command, session: &str) -> serde_json::Value {
    let out = run(c.args(["sessions", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out.stdout)["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session"] == session)
        .cloned()
        .unwrap_or_default()
}

/// The `results` entry for `id` in a `stop`/`sweep --json` answer.
pub(crate) fn result_of<'a>(v: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["instance_id"] == id)
        .unwrap_or_else(|| panic!("no result for {id}: {v}"))
}

/// SIGKILLs the sidecar of `session` and waits until it is gone.
pub(crate) fn kill_sidecar(session: &str) {
    let pid = crate::watch::wrapper::sidecar_pid(session);
    crate::watch::wrapper::unsafe_kill(pid as i32, libc::SIGKILL);
    eventually(
        std::time::Duration::from_secs(5),
        "the sidecar is gone",
        || !Path::new(&format!("/proc/{pid}")).exists(),
    );
}

/// Kills the sidecar of a session on drop if it still runs: a test that fails because its
/// sidecar never saw the owner die must not leave that sidecar behind.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct SidecarReaper(pub String);

impl Drop for SidecarReaper {
    fn drop(&mut self) {
        if let Some(pid) = crate::watch::wrapper::find_process(&format!("--session {}", self.0)) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}
