//! Plugin providers through the real binary: small shell-script plugins, found on `PATH` or
//! named by `[providers.NAME] command`, that keep their sandboxes as files in a scratch
//! directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use sandguard::labels::SESSION;

/// A fake provider: `list` prints every `STATE/*.json`, `remove` deletes one, `renew` logs
/// its request, `describe` answers. The verb is the script's first argument.
const FAKE: &str = r#"#!/bin/sh
state=__STATE__
case "$1" in
list)
  cat > "$state/../last-list-request"
  printf '{"sandboxes":['
  sep=''
  for f in "$state"/*.json; do
    [ -e "$f" ] || continue
    printf '%s' "$sep"; cat "$f"; sep=','
  done
  printf ']}\n'
  ;;
remove)
  id=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  if [ -e "$state/$id.json" ]; then rm -f "$state/$id.json"; echo '{"result":"removed"}'
  else echo '{"result":"gone"}'; fi
  ;;
renew) cat >> "${state%.state}.renewed"; echo >> "${state%.state}.renewed"; echo '{"result":"renewed"}' ;;
describe) echo '{"capabilities":{"labels":true,"ttl":__TTL__},"detail":"fake plugin"}' ;;
*) echo "unknown verb $1" >&2; exit 2 ;;
esac
"#;

struct Fake {
    state: PathBuf,
    script: PathBuf,
}

impl Fake {
    /// A fake plugin's script at `script`, with its state in a directory beside it.
    fn new(script: PathBuf) -> Fake {
        Fake::with_ttl(script, false)
    }

    /// A fake that says in `describe` whether it has a TTL (`renew` appends to `renewed`).
    fn with_ttl(script: PathBuf, ttl: bool) -> Fake {
        let state = script.with_extension("state");
        std::fs::create_dir_all(&state).unwrap();
        let text = FAKE
            .replace("__STATE__", &state.display().to_string())
            .replace("__TTL__", if ttl { "true" } else { "false" });
        write_script(&script, &text);
        Fake { state, script }
    }

    /// What `renew` was sent, one request a line.
    fn renewed(&self) -> String {
        std::fs::read_to_string(self.state.with_extension("renewed")).unwrap_or_default()
    }

    fn insert(&self, id: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let sandbox = serde_json::json!({
            "id": id, "status": "running", "created_at": 1_700_000_000, "image": "img",
            "labels": labels,
        });
        std::fs::write(self.state.join(format!("{id}.json")), sandbox.to_string()).unwrap();
    }

    fn exists(&self, id: &str) -> bool {
        self.state.join(format!("{id}.json")).exists()
    }
}

fn write_script(path: &Path, text: &str) {
    write_executable(path, text);
}

/// The scratch `bin` directory first on `PATH`.
fn bin(s: &Scratch) -> PathBuf {
    s.path().join("bin")
}

fn cmd(s: &Scratch, config: &Path) -> Command {
    let path = format!(
        "{}:{}",
        bin(s).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = sandguard(s);
    c.env("PATH", path).env("SANDGUARD_CONFIG", config);
    c
}

fn ids(v: &serde_json::Value, key: &str) -> Vec<String> {
    let mut ids: Vec<String> = v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["instance_id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn plugins_on_path_and_in_config_are_listed_and_ps_shows_their_sandboxes() {
    let s = Scratch::new("plugin-ps");
    let onpath = Fake::new(bin(&s).join("sandguard-provider-onpath"));
    let inconf = Fake::new(s.path().join("plugins/inconf"));
    let config = cloud_config(
        &s,
        &format!(
            "\n[providers.inconf]\ncommand = [\"sh\", \"{}\"]\ntimeout = \"10s\"\n",
            inconf.script.display()
        ),
    );
    onpath.insert("p1", &[(SESSION, "s1"), ("app", "x")]);
    onpath.insert("plain", &[("app", "x")]);
    inconf.insert("c1", &[(SESSION, "s2")]);

    let out = run(cmd(&s, &config).args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let rows = v["providers"].as_array().unwrap();
    for name in ["onpath", "inconf"] {
        let row = rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| {
            panic!("{name} is not listed: {v}");
        });
        assert_eq!(row["configured"], true, "{row}");
        assert_eq!(row["reachable"], true, "{row}");
        assert_eq!(row["detail"], "fake plugin", "{row}");
        assert_eq!(row["capabilities"]["ttl"], false, "{row}");
    }
    let text = run(cmd(&s, &config).arg("providers")).stdout;
    assert!(text.contains("onpath") && text.contains("inconf"), "{text}");

    let out = run(cmd(&s, &config).args(["ps", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(ids(&v, "sandboxes"), ["c1", "p1"]);
    let p1 = v["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["instance_id"] == "p1")
        .unwrap();
    assert_eq!(p1["provider"], "onpath");
    assert_eq!(p1["session"], "s1");
    assert_eq!(p1["image"], "img");
    // The plugin was asked for managed sandboxes only (it returned all; sandguard filtered).
    let request = std::fs::read_to_string(s.path().join("bin/last-list-request")).unwrap();
    assert_eq!(
        request.trim(),
        r#"{"selector":[["sandguard.session",null]]}"#
    );

    let out = run(cmd(&s, &config).args(["ps", "--provider", "inconf"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("c1") && !out.stdout.contains("p1"),
        "{}",
        out.stdout
    );
}

#[test]
fn stop_by_id_and_by_session_remove_exactly_their_targets() {
    let s = Scratch::new("plugin-stop");
    let fake = Fake::new(s.path().join("plugins/fk"));
    let config = cloud_config(
        &s,
        &format!(
            "\n[providers.fk]\ncommand = [\"{}\"]\n",
            fake.script.display()
        ),
    );
    for (id, session) in [("a1", "sa"), ("a2", "sa"), ("b1", "sb"), ("c1", "sc")] {
        fake.insert(id, &[(SESSION, session)]);
    }
    fake.insert("plain", &[]);
    let out = run(cmd(&s, &config).args(["stop", "a1"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!fake.exists("a1") && fake.exists("a2"));
    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "sa", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["results"][0]["instance_id"], "a2");
    assert_eq!(v["results"][0]["outcome"], "removed");
    assert!(!fake.exists("a2") && fake.exists("b1") && fake.exists("c1"));
    let out = run(cmd(&s, &config).args(["stop", "--all", "--provider", "fk"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!fake.exists("b1") && !fake.exists("c1"));
    assert!(fake.exists("plain"), "an unlabelled sandbox survives");
}

#[test]
fn the_owners_death_reclaims_its_sandboxes_in_a_plugin() {
    let s = Scratch::new("plugin-kill");
    let fake = Fake::new(bin(&s).join("sandguard-provider-fk"));
    let config = cloud_config(&s, "");
    let mut owner = Owner::start(cmd(&s, &config), &s);
    let labels = owner.label_pairs();
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for id in ["m1", "m2", "m3"] {
        fake.insert(id, &pairs);
    }
    fake.insert("other", &[(SESSION, "someoneelse")]);
    fake.insert("plain", &[]);
    owner.kill();
    eventually(
        Duration::from_secs(5),
        "the owner's three sandboxes are gone",
        || !fake.exists("m1") && !fake.exists("m2") && !fake.exists("m3"),
    );
    assert!(fake.exists("other") && fake.exists("plain"));
}

#[test]
fn a_crashing_a_hanging_and_a_garbage_plugin_are_errors_and_a_healthy_one_still_works() {
    let s = Scratch::new("plugin-bad");
    let healthy = Fake::new(bin(&s).join("sandguard-provider-healthy"));
    let dir = s.path().join("plugins");
    write_script(
        &dir.join("crash"),
        "#!/bin/sh\necho 'panic: the plugin fell over' >&2\nkill -SEGV $$\n",
    );
    // The hang leaves a child behind in its process group, and says who they are.
    let hung = s.path().join("hung");
    write_script(
        &dir.join("hang"),
        &format!(
            "#!/bin/sh\nsleep 3600 &\necho \"$$ $!\" >> {}\nexec sleep 3600\n",
            hung.display()
        ),
    );
    write_script(
        &dir.join("garbage"),
        "#!/bin/sh\necho 'hello, I am not JSON'\n",
    );
    let config = cloud_config(
        &s,
        &format!(
            "\n[providers.crash]\ncommand = [\"{0}/crash\"]\n\n[providers.hang]\ncommand = [\"{0}/hang\"]\ntimeout = \"1s\"\n\n[providers.garbage]\ncommand = [\"{0}/garbage\"]\n",
            dir.display()
        ),
    );
    healthy.insert("h1", &[(SESSION, "sh")]);
    healthy.insert("h2", &[(SESSION, "sh")]);

    let out = run(cmd(&s, &config).args(["ps", "--json"]));
    no_hung_plugin_left(&hung);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(ids(&v, "sandboxes"), ["h1", "h2"]);
    let error = |name: &str| -> String {
        v["errors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["provider"] == name)
            .unwrap_or_else(|| panic!("no error entry for {name}: {v}"))["error"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let crash = error("crash");
    assert!(
        crash.contains("killed by signal 11") && crash.contains("panic: the plugin fell over"),
        "{crash}"
    );
    assert!(
        error("hang").contains("did not answer `list` within 1s"),
        "{v}"
    );
    assert!(error("garbage").contains("not JSON"), "{v}");
    assert_eq!(v["errors"].as_array().unwrap().len(), 3, "{v}");

    let out = run(cmd(&s, &config).arg("ps"));
    no_hung_plugin_left(&hung);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("error: could not query garbage"),
        "{}",
        out.stdout
    );

    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "sh", "--json"]));
    no_hung_plugin_left(&hung);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["clean"], false);
    assert_eq!(v["errors"].as_array().unwrap().len(), 3, "{v}");
    assert!(!healthy.exists("h1") && !healthy.exists("h2"), "{v}");

    let out = run(cmd(&s, &config).args(["providers", "--json"]));
    no_hung_plugin_left(&hung);
    assert_eq!(out.code, 1);
    let v = json(&out.stdout);
    let row = |name: &str| {
        v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("healthy")["reachable"], true);
    for name in ["crash", "hang", "garbage"] {
        assert_eq!(row(name)["reachable"], false, "{name}");
    }
}

/// Every run of the hanging plugin (each line of `hung`: its pid, which is its process
/// group's id, and its child's) was killed with its whole group. Zombies count as gone.
fn no_hung_plugin_left(hung: &Path) {
    let text = std::fs::read_to_string(hung).expect("the hanging plugin ran");
    let groups: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
    eventually(
        Duration::from_secs(10),
        &format!("the hanging plugin's process groups {groups:?} are gone"),
        || {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                .all(|stat| {
                    // After the command's `)`: state, ppid, pgrp.
                    let rest: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
                    rest[0] == "Z" || !groups.contains(&rest[2])
                })
        },
    );
}

#[test]
fn a_plugin_may_not_take_a_built_in_name() {
    let s = Scratch::new("plugin-shadow");
    let fake = Fake::new(bin(&s).join("sandguard-provider-docker"));
    fake.insert("d1", &[(SESSION, "s")]);
    let config = cloud_config(&s, "");
    let out = run(cmd(&s, &config).args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let docker: Vec<_> = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == "docker")
        .collect();
    assert_eq!(docker.len(), 1, "{v}");
    assert_eq!(docker[0]["configured"], false, "the built-in, switched off");
    assert!(out.stderr.contains("ignoring the plugin"), "{}", out.stderr);
    let out = run(cmd(&s, &config).args(["ps", "--json"]));
    assert!(json(&out.stdout)["sandboxes"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn sweep_reclaims_an_orphan_in_a_plugin_and_spares_a_live_owners() {
    use sandguard::labels::OWNER;
    let s = Scratch::new("plugin-sweep");
    let fake = Fake::new(bin(&s).join("sandguard-provider-fk"));
    let config = cloud_config(&s, "");
    let dead = dead_owner_label();
    let live = live_owner_label();
    fake.insert("orphan", &[(SESSION, "gone-owner"), (OWNER, &dead)]);
    fake.insert("alive", &[(SESSION, "live-owner"), (OWNER, &live)]);
    let out = run(cmd(&s, &config).args(["sweep", "--dry-run"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(fake.exists("orphan"), "a dry run removes nothing");
    let out = run(cmd(&s, &config).arg("sweep"));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(!fake.exists("orphan"), "{}", out.stdout);
    assert!(fake.exists("alive"));
}

#[test]
fn the_sidecar_renews_ttls_only_on_plugins_that_describe_one() {
    let s = Scratch::new("plugin-ttl");
    let ttl = Fake::with_ttl(bin(&s).join("sandguard-provider-withttl"), true);
    let plain = Fake::new(bin(&s).join("sandguard-provider-nottl"));
    let config = cloud_config(&s, "\n[watch]\ngrace = \"10s\"\nrenew_every = \"1s\"\n");
    let mut owner = Owner::start(cmd(&s, &config), &s);
    let labels = owner.label_pairs();
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    ttl.insert("t1", &pairs);
    plain.insert("n1", &pairs);
    eventually(Duration::from_secs(8), "t1's TTL is renewed", || {
        ttl.renewed().contains(r#"{"id":"t1","ttl_secs":12}"#)
    });
    assert_eq!(
        plain.renewed(),
        "",
        "a plugin without a TTL is never asked to renew"
    );
    owner.kill();
    eventually(Duration::from_secs(5), "both are reclaimed", || {
        !ttl.exists("t1") && !plain.exists("n1")
    });
}

/// What the leaky plugins below print: none of it may reach output, logs or the ledger.
const PLUGIN_SECRETS: [&str; 5] = [
    "s3cr3t-t0k3n-1",
    "b3ar3r-s3cr3t-2",
    "k3y-s3cr3t-3",
    "1mag3-s3cr3t-4",
    "d3sc-s3cr3t-5",
];

/// Says on stderr what a chatty HTTP client says (a URL with its `token=`, the request's
/// `Authorization` header), then: `leaky` fails every verb; `refuses` lists its sandboxes
/// (an image with an `access_token=` in it) but answers `remove` with an error reply quoting an
/// `api_key=`, and describes itself with a `token=` in its detail.
const LEAKY: &str = r#"#!/bin/sh
state=__STATE__
echo "POST https://api.acme.test/v1/sandboxes?token=s3cr3t-t0k3n-1: 401" >&2
echo "> Authorization: Bearer b3ar3r-s3cr3t-2" >&2
[ "__MODE__" = leaky ] && exit 1
case "$1" in
list) printf '{"sandboxes":['; sep=''
      for f in "$state"/*.json; do [ -e "$f" ] || continue; printf '%s' "$sep"; cat "$f"; sep=','; done
      printf ']}\n' ;;
remove) echo '{"error":"refused: api_key=k3y-s3cr3t-3 is not allowed to delete"}' ;;
describe) echo '{"capabilities":{"labels":true,"ttl":false},"detail":"acme eu-1 token=d3sc-s3cr3t-5"}' ;;
*) exit 2 ;;
esac
"#;

fn assert_no_plugin_secret(what: &str, text: &str) {
    for secret in PLUGIN_SECRETS {
        assert!(!text.contains(secret), "{what} contains {secret}:\n{text}");
    }
}

/// A plugin's stderr, error replies and free text go through the HTTP
/// layer's redaction before they reach `ps`, `stop`, `providers`, the sidecar's log or the
/// session's journal.
#[test]
fn what_a_plugin_prints_is_redacted_everywhere() {
    let s = Scratch::new("plugin-leak");
    let mut states = Vec::new();
    for mode in ["leaky", "refuses"] {
        let script = bin(&s).join(format!("sandguard-provider-{mode}"));
        let state = script.with_extension("state");
        std::fs::create_dir_all(&state).unwrap();
        let text = LEAKY
            .replace("__STATE__", &state.display().to_string())
            .replace("__MODE__", mode);
        write_script(&script, &text);
        states.push(state);
    }
    let refuses = &states[1];
    let insert = |id: &str, labels: serde_json::Value| {
        let sandbox = serde_json::json!({
            "id": id, "status": "running", "image": "acme.io/py?access_token=1mag3-s3cr3t-4",
            "labels": labels,
        });
        std::fs::write(refuses.join(format!("{id}.json")), sandbox.to_string()).unwrap();
    };
    insert("r1", serde_json::json!({ SESSION: "sr" }));
    let config = cloud_config(&s, "");

    let commands: &[&[&str]] = &[
        &["ps"],
        &["ps", "--json"],
        &["providers"],
        &["providers", "--json"],
        &["stop", "r1"],
        &["stop", "--all", "--session", "sr"],
        &["stop", "--all", "--session", "sr", "--json"],
    ];
    for args in commands {
        let out = run(cmd(&s, &config).env("SANDGUARD_LOG", "trace").args(*args));
        assert_eq!(out.code, 1, "{args:?} fails: {}{}", out.stdout, out.stderr);
        assert_no_plugin_secret(&format!("stdout of {args:?}"), &out.stdout);
        assert_no_plugin_secret(&format!("stderr of {args:?}"), &out.stderr);
    }
    // The redaction hides the values, not what happened.
    let out = run(cmd(&s, &config).args(["ps", "--json"]));
    let v = json(&out.stdout);
    let leaky = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["provider"] == "leaky")
        .unwrap()["error"]
        .to_string();
    assert!(
        leaky.contains("exited with status 1")
            && leaky.contains("token=[redacted]")
            && leaky.contains("Authorization: Bearer [redacted]"),
        "{leaky}"
    );

    // A guarded session whose sidecar meets both plugins when its owner dies.
    let mut sidecar = cmd(&s, &config);
    sidecar.env("SANDGUARD_LOG", "trace");
    let mut owner = Owner::start(sidecar, &s);
    let labels: serde_json::Map<String, serde_json::Value> = owner
        .label_pairs()
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::from(v)))
        .collect();
    insert("r2", serde_json::Value::Object(labels));
    owner.kill();
    eventually(
        Duration::from_secs(20),
        "the session is left pending",
        || {
            let v = json(&run(cmd(&s, &config).args(["sessions", "--json"])).stdout);
            v["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["session"] == owner.session.as_str() && x["state"] == "pending")
        },
    );
    let mut files = 0;
    for file in walk(&s.path().join("state")) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert_no_plugin_secret(&file.display().to_string(), &text);
        files += 1;
    }
    assert!(files >= 2, "the session's journal and log were checked");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The race behind "Text file busy" when a test ran a plugin it had just written, forced: a
/// thread spawns children without pause (each forked child holds this process's descriptors
/// until it execs) while this thread writes a script and runs it at once, 200 times. Written
/// by `write_executable` (by `sh`, so no descriptor of it open for writing exists here), every
/// run starts; written with `std::fs::write` and a chmod, as the plugin tests did, some failed
/// with ETXTBSY.
#[test]
fn a_script_written_while_other_threads_fork_runs_every_time() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let s = Scratch::new("etxtbsy");
    let stop = Arc::new(AtomicBool::new(false));
    let forker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::process::Command::new("/bin/true").status();
            }
        })
    };
    let mut busy = 0;
    for n in 0..200 {
        let path = s.path().join(format!("bin/script-{n}"));
        write_executable(&path, "#!/bin/sh\nexit 0\n");
        match std::process::Command::new(&path).status() {
            Ok(status) => assert!(status.success()),
            Err(e) if e.raw_os_error() == Some(26) => busy += 1,
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    stop.store(true, Ordering::Relaxed);
    forker.join().unwrap();
    assert_eq!(busy, 0, "runs that failed with ETXTBSY, of 200");
}
