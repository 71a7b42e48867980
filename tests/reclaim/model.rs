//! Random histories through the real binary, the real Docker daemon and the E2B emulator,
//! checked after every step against the one oracle of the ownership rules
//! (`sandguard::testing::oracle`): the few dozen beside the thousands that the in-process
//! model (`src/model`) runs against the fake provider, drawn from the same generator
//! (`sandguard::testing::rng`).
//!
//! A history is made of sessions (guarded owners that take `claim`/`detach` commands from a
//! fifo and run them with the real `sandguard claim`), containers and E2B sandboxes created by
//! them (labelled, labelled detached, unlabelled then claimed), by strangers (unlabelled,
//! forged with a session's labels), claims of another session's sandbox, detaches, a session's
//! own `docker commit`, `stop ID` (empty, `.`, a prefix), `stop --all --session`, sweeps,
//! owner deaths (SIGKILL, a plain exit) and E2B deletes failing with 503. The oracle
//! (`sandguard::testing::oracle`, the in-process model's) knows, for each sandbox, who owns it
//! by the rules (a label owns; a claim adopts, never steals; detach wins), and after every step
//! the test checks that nothing it protects is gone,
//! and, once an owner's session has ended, that nothing it owned is left.
//!
//! `SANDGUARD_MODEL_DOCKER_SEED` replays one history; `SANDGUARD_MODEL_DOCKER_CASES` sets how
//! many (default 30). A failure prints the seed and the history up to the failing step.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{path_with_sandguard, Job};

use sandguard::testing::oracle::Oracle;
use sandguard::testing::rng::Rng;

/// Who a container was made for: the generator's sketch, to pick plausible steps (which
/// session may claim it); whether it may go is the oracle's to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Session(usize),
    Stranger,
}

#[derive(Debug)]
struct Made {
    id: String,
    owner: Owner,
    /// Carries the owning session's label (what `stop --all --session` lists).
    labelled: bool,
    detached: bool,
    /// `stop ID` named it: the user may remove what they name, detached or not (a fact of
    /// the history the oracle does not model for real ids).
    named: bool,
    /// An E2B sandbox (in the emulator), not a Docker container.
    cloud: bool,
}

impl Made {
    fn provider(&self) -> &'static str {
        if self.cloud {
            "e2b"
        } else {
            "docker"
        }
    }

    /// How a command names it: a Docker container by the 12-digit prefix `docker ps` shows.
    fn short(&self) -> &str {
        if self.cloud {
            &self.id
        } else {
            &self.id[..12]
        }
    }
}

struct Session {
    job: Job,
    id: String,
    labels: Vec<(String, String)>,
    fifo: PathBuf,
    acks: PathBuf,
    sent: usize,
    /// The owner is dead (or exited) and its reclaim was waited for.
    over: bool,
}

struct World {
    s: Scratch,
    config: PathBuf,
    sessions: Vec<Session>,
    made: Vec<Made>,
    res: Resources,
    log: Vec<String>,
    /// The one oracle of the ownership rules; sandboxes are named by their index in `made`.
    oracle: Oracle,
    /// Images committed by the history, removed at its end.
    images: Vec<String>,
    emu: crate::support::emu::Emulator,
    e2b: std::sync::Arc<crate::support::e2b::State>,
}

/// The E2B emulator's key.
const E2B_KEY: &str = "e2b_5eed5eed5eed5eed5eed5eed5eed5eed";

impl Drop for World {
    fn drop(&mut self) {
        for image in &self.images {
            let _ = std::process::Command::new("docker")
                .args(["rmi", "-f", image])
                .output();
        }
    }
}

impl World {
    fn new(seed: u64) -> World {
        let s = Scratch::new(&format!("model-docker-{seed}"));
        let config = s.file("sandguard.toml", "[reclaim]\ndeadline = \"10s\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n");
        let (emu, e2b) = crate::support::e2b::start(E2B_KEY);
        World {
            s,
            config,
            sessions: Vec::new(),
            made: Vec::new(),
            res: Resources::default(),
            log: Vec::new(),
            oracle: Oracle::default(),
            images: Vec::new(),
            emu,
            e2b,
        }
    }

    fn cmd(&self) -> std::process::Command {
        let mut cmd = sandguard(&self.s);
        cmd.env("SANDGUARD_CONFIG", &self.config)
            .env("E2B_API_KEY", E2B_KEY)
            .env("E2B_API_URL", &self.emu.url);
        cmd
    }

    fn live(&self) -> Vec<usize> {
        (0..self.sessions.len())
            .filter(|n| !self.sessions[*n].over)
            .collect()
    }

    /// A guarded owner that runs each line written to its fifo as `sandguard LINE`, and
    /// appends the status to its acks file.
    fn start(&mut self) {
        use std::os::unix::process::CommandExt;
        let n = self.sessions.len();
        let fifo = self.s.path().join(format!("fifo{n}"));
        let acks = self.s.path().join(format!("acks{n}"));
        let info = self.s.path().join(format!("info{n}"));
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let script = format!(
            "printf '%s\\n%s\\n' \"$SANDGUARD_SESSION\" \"$SANDGUARD_LABELS\" > {info}.tmp && mv {info}.tmp {info}; \
             while true; do read -r line < {fifo} || continue; [ \"$line\" = exit ] && exit 0; \
             sandguard $line >/dev/null 2>&1; echo $? >> {acks}; done",
            info = info.display(),
            fifo = fifo.display(),
            acks = acks.display(),
        );
        let child = self
            .cmd()
            .env("PATH", path_with_sandguard())
            .args(["--", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn an owner");
        let mut job = Job(child);
        let lines = crate::watch::wrapper::wait_for_file(&info, &mut job.0);
        let labels = lines[1]
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.sessions.push(Session {
            job,
            id: lines[0].clone(),
            labels,
            fifo,
            acks,
            sent: 0,
            over: false,
        });
        self.oracle.start(n);
    }

    /// Has session `n` run `sandguard LINE` and waits for its status.
    fn tell(&mut self, n: usize, line: &str) {
        use std::os::unix::fs::OpenOptionsExt;
        let session = &mut self.sessions[n];
        eventually(Duration::from_secs(20), "the owner reads its fifo", || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&session.fifo)
                .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()))
                .is_ok()
        });
        if line == "exit" {
            return;
        }
        session.sent += 1;
        let (acks, want) = (session.acks.clone(), session.sent);
        eventually(Duration::from_secs(20), "the command is done", || {
            std::fs::read_to_string(&acks).is_ok_and(|t| t.lines().count() >= want)
        });
    }

    fn labels_of(&self, n: usize) -> Vec<(String, String)> {
        self.sessions[n].labels.clone()
    }

    /// A container, or (`cloud`) an E2B sandbox in the emulator, with these labels.
    fn create(
        &mut self,
        labels: &[(String, String)],
        owner: Owner,
        detached: bool,
        cloud: bool,
    ) -> usize {
        let mut pairs: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if detached {
            pairs.push(("sandguard.detached", "true"));
        }
        let id = if cloud {
            let id = format!("i{}", unique());
            self.e2b.insert(&id, &pairs);
            id
        } else {
            self.res.container(&pairs)
        };
        // A label owns: the labels are those of the session the sandbox is made for (a
        // stranger forging them hands it to that session).
        let label = match owner {
            Owner::Session(n) if !labels.is_empty() => Some(n),
            _ => None,
        };
        self.oracle.create(self.made.len(), label, detached);
        self.made.push(Made {
            id,
            owner,
            labelled: !labels.is_empty(),
            detached,
            named: false,
            cloud,
        });
        self.made.len() - 1
    }

    /// Session `n` claims sandbox `c` (through its owner's `sandguard claim`); the sidecar
    /// confirms what the rules let stand.
    fn claim(&mut self, n: usize, c: usize) {
        let line = format!("claim {} {}", self.made[c].provider(), self.made[c].id);
        self.tell(n, &line);
        let stands = self.oracle.claim_stands(n, c);
        self.oracle.claim(n, c, stands);
    }

    fn exists(&self, m: &Made) -> bool {
        if m.cloud {
            self.e2b.exists(&m.id)
        } else {
            container_exists(&m.id)
        }
    }

    /// SIGKILLs session `n`'s owner (its process group) and waits for its reclaim.
    fn kill(&mut self, n: usize) {
        let pid = self.sessions[n].job.0.id();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .status();
        let _ = self.sessions[n].job.0.wait();
        self.ended(n);
    }

    /// Waits until session `n`'s sidecar is gone and its state is final.
    fn ended(&mut self, n: usize) {
        let id = self.sessions[n].id.clone();
        eventually(Duration::from_secs(30), "the session ends", || {
            let row = crate::support::plugin::session_row(&mut self.cmd(), &id);
            row["sidecar_alive"] == false
                && matches!(row["state"].as_str(), Some("reclaimed" | "clean"))
        });
        self.sessions[n].over = true;
        self.oracle.owner_dies(n);
    }

    /// Every journal and log of the ledger, for a failure's report.
    fn ledger_text(&self) -> String {
        let dir = self.s.path().join("state/sandguard/sessions");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        files
            .iter()
            .filter(|p| p.is_file())
            .map(|p| {
                let text = std::fs::read_to_string(p).unwrap_or_default();
                format!("--- {}\n{text}", p.display())
            })
            .collect()
    }

    /// The invariants: nothing protected is gone; nothing an ended session owned is left.
    fn check(&self, seed: u64) {
        let fail = |what: String| {
            panic!(
                "seed {seed} (SANDGUARD_MODEL_DOCKER_SEED={seed}): {what}\nhistory:\n  {}\n{}",
                self.log.join("\n  "),
                self.ledger_text()
            )
        };
        for (x, m) in self.made.iter().enumerate() {
            let exists = self.exists(m);
            if !exists && !m.named {
                if let Err(why) = self.oracle.may_ever_remove(x) {
                    fail(format!("{m:?} was removed, but {why}"));
                }
            }
            if exists && !m.named {
                if let Some(why) = self.oracle.must_be_gone(x, false) {
                    fail(format!("{m:?} is left after its session ended: {why}"));
                }
            }
        }
    }

    /// One random step.
    fn step(&mut self, rng: &mut Rng) {
        let live = self.live();
        if live.is_empty() || (self.sessions.len() < 3 && rng.below(5) == 0) {
            self.log.push("start a session".into());
            return self.start();
        }
        let n = live[rng.below(live.len())];
        // One sandbox in three is an E2B sandbox in the emulator, the rest Docker containers.
        let cloud = rng.below(3) == 0;
        let what = if cloud { "E2B sandbox" } else { "container" };
        match rng.below(10) {
            0 | 1 => {
                self.log
                    .push(format!("session {n} creates a labelled {what}"));
                let labels = self.labels_of(n);
                self.create(&labels, Owner::Session(n), false, cloud);
            }
            2 => {
                let labels = self.labels_of(n);
                let c = self.create(&labels, Owner::Session(n), true, cloud);
                if rng.below(2) == 0 {
                    // A program that claims everything it makes, detached or not: detach wins.
                    self.log.push(format!(
                        "session {n} creates a {what} labelled detached and claims it"
                    ));
                    self.claim(n, c);
                } else {
                    self.log
                        .push(format!("session {n} creates a {what} labelled detached"));
                }
            }
            3 => {
                self.log.push(format!(
                    "session {n} creates an unlabelled {what} and claims it"
                ));
                let c = self.create(&[], Owner::Session(n), false, cloud);
                self.claim(n, c);
            }
            4 if rng.below(3) == 0 => {
                // A provider fault: E2B answers its next deletes 503 (the reclaim retries).
                self.log
                    .push("E2B fails its next three deletes (503)".into());
                for _ in 0..3 {
                    self.e2b.answer_next("DELETE", 503, None);
                }
            }
            4 => {
                self.log
                    .push(format!("a stranger creates an unlabelled {what}"));
                self.create(&[], Owner::Stranger, false, cloud);
            }
            5 => {
                // Another live session's container (never stolen) or a stranger's unlabelled
                // one (adopted: it becomes the claimer's).
                let candidates: Vec<usize> = (0..self.made.len())
                    .filter(|c| {
                        let m = &self.made[*c];
                        self.exists(m)
                            && match m.owner {
                                Owner::Session(o) => o != n && !self.sessions[o].over,
                                Owner::Stranger => !m.labelled,
                            }
                    })
                    .collect();
                if let Some(&c) = candidates.get(rng.below(candidates.len().max(1))) {
                    self.log.push(format!(
                        "session {n} claims container {c} ({:?})",
                        self.made[c].owner
                    ));
                    self.claim(n, c);
                    if self.made[c].owner == Owner::Stranger {
                        self.made[c].owner = Owner::Session(n);
                    }
                }
            }
            6 => {
                let ours: Vec<usize> = (0..self.made.len())
                    // What still exists: detaching what a `stop` already removed protects
                    // nothing, and would make its removal look like a broken promise.
                    .filter(|c| {
                        let m = &self.made[*c];
                        m.owner == Owner::Session(n) && !m.detached && self.exists(m)
                    })
                    .collect();
                if let Some(&c) = ours.get(rng.below(ours.len().max(1))) {
                    self.log.push(format!("session {n} detaches container {c}"));
                    let line = format!(
                        "detach {} {}",
                        self.made[c].provider(),
                        self.made[c].short()
                    );
                    self.tell(n, &line);
                    self.made[c].detached = true;
                    self.oracle.detach(n, c);
                }
            }
            7 => {
                self.log
                    .push(format!("the owner of session {n} is SIGKILLed"));
                self.kill(n);
            }
            8 => {
                self.log.push(format!("the owner of session {n} exits"));
                self.tell(n, "exit");
                let _ = self.sessions[n].job.0.wait();
                self.ended(n);
            }
            9 if rng.below(2) == 0 => self.commit_or_stop(n, rng),
            _ => {
                if rng.below(2) == 0 {
                    self.log.push("sweep".into());
                    let _ = run(self.cmd().arg("sweep"));
                } else {
                    self.log
                        .push(format!("stop --all --session of session {n}"));
                    let id = self.sessions[n].id.clone();
                    let _ = run(self.cmd().args(["stop", "--all", "--session", &id]));
                }
            }
        }
    }
}

impl World {
    /// Either the session commits one of its containers and starts another from that image
    /// with its labels (equal to the image's: the session's own all the same), or the user
    /// runs `stop ID` with an id that is empty, a dot segment, or a container's 12-digit prefix.
    fn commit_or_stop(&mut self, n: usize, rng: &mut Rng) {
        let ours: Vec<usize> = (0..self.made.len())
            .filter(|c| self.made[*c].owner == Owner::Session(n) && self.made[*c].labelled)
            // Not a detached one: its image would carry `sandguard.detached=true`, and so would
            // every container started from it (while the session lives, all it inherits counts).
            .filter(|c| !self.made[*c].cloud && !self.made[*c].detached)
            .filter(|c| self.exists(&self.made[*c]))
            .collect();
        if rng.below(2) == 0 && !ours.is_empty() {
            let c = ours[rng.below(ours.len())];
            let image = format!("sandguard-test/model-{}:latest", unique());
            self.log.push(format!(
                "session {n} commits container {c} and starts its image with its labels"
            ));
            let id = self.made[c].id.clone();
            let _ = std::process::Command::new("docker")
                .args(["commit", &id, &image])
                .output();
            self.images.push(image.clone());
            let mut args = vec!["run", "-d", "--network", "none"]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>();
            for (k, v) in &self.labels_of(n) {
                args.extend(["--label".into(), format!("{k}={v}")]);
            }
            args.extend([image, "sleep".into(), "600".into()]);
            let out = std::process::Command::new("docker")
                .args(&args)
                .output()
                .unwrap();
            let new = String::from_utf8_lossy(&out.stdout).trim().to_string();
            self.res.adopt_container(&new);
            self.oracle.create(self.made.len(), Some(n), false);
            self.made.push(Made {
                id: new,
                owner: Owner::Session(n),
                labelled: true,
                detached: false,
                named: false,
                cloud: false,
            });
            return;
        }
        let id = match rng.below(self.made.len() + 2) {
            0 => String::new(),
            1 => ".".to_string(),
            c => {
                let c = c - 2;
                // The user names a managed sandbox: theirs to remove, detached or not.
                if self.made[c].labelled {
                    self.made[c].named = true;
                }
                self.made[c].id[..12].to_string()
            }
        };
        self.log.push(format!("stop {id:?}"));
        let _ = run(self.cmd().args(["stop", &id]));
    }
}

/// A forged container: a stranger stamps a live session's labels; by the rules it is that
/// session's (a label owns), so the oracle counts it as such.
fn forge(world: &mut World, rng: &mut Rng) {
    let live = world.live();
    if let Some(&n) = live.get(rng.below(live.len().max(1))) {
        world
            .log
            .push(format!("a stranger forges session {n}'s labels"));
        let labels = world.labels_of(n);
        world.create(&labels, Owner::Session(n), false, rng.below(3) == 0);
    }
}

#[test]
fn random_histories_against_the_real_daemon_keep_the_trust_rules() {
    require_docker();
    // Its sweeps judge every container on the daemon: no other Docker test runs meanwhile.
    let _g = exclusive();
    let seeds: Vec<u64> = match std::env::var("SANDGUARD_MODEL_DOCKER_SEED") {
        Ok(seed) => vec![seed.parse().expect("a seed is a number")],
        Err(_) => {
            let cases = std::env::var("SANDGUARD_MODEL_DOCKER_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(30);
            let base = u64::from_str_radix(&unique(), 16).unwrap_or(1);
            (0..cases)
                .map(|n| base.wrapping_add(n * 7919) | 1)
                .collect()
        }
    };
    for seed in seeds {
        let mut rng = Rng::new(seed);
        let mut world = World::new(seed);
        let steps = 4 + rng.below(6);
        for _ in 0..steps {
            if rng.below(8) == 0 {
                forge(&mut world, &mut rng);
            } else {
                world.step(&mut rng);
            }
            world.check(seed);
        }
        // The end of every history: every owner dies; nothing it owned is left.
        for n in world.live() {
            world
                .log
                .push(format!("the owner of session {n} is SIGKILLed (end)"));
            world.kill(n);
        }
        world.check(seed);
    }
}
