//! Helpers shared by the integration tests: the real `sandguard` binary with an isolated
//! environment, and a real Docker daemon driven through the `docker` CLI.
//!
//! Tests that need Docker call [`require_docker`], which fails loudly (never skips) when the
//! daemon is missing: `tests/run.sh` installs and starts one.

#![allow(dead_code)]

pub mod daytona;
pub mod e2b;
pub mod emu;
pub mod fifo;
pub mod flyio;
pub mod journal;
pub mod modal;
pub mod plugin;
pub mod redis;
pub mod sdk;
pub mod tenki;
pub mod terminal;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The test image `tests/run.sh` builds from a static busybox with `docker import`.
pub const IMAGE: &str = "sandguard-test/busybox:latest";

/// Tests that remove *every* managed sandbox (`stop --all` without `--session`) take this lock
/// for writing; every other Docker test holds it for reading, so they never see each other's
/// sandboxes vanish.
static GLOBAL: RwLock<()> = RwLock::new(());

pub fn shared() -> RwLockReadGuard<'static, ()> {
    GLOBAL
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    GLOBAL
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes an executable file (mode 0755, its directory made) so that no descriptor open for
/// writing it ever exists in this process: `sh` writes it, in a child of its own. The test
/// process forks children from many threads at once, and a child forked while this process
/// held the file open for writing keeps that descriptor until it execs; running the file
/// meanwhile fails with ETXTBSY ("Text file busy"), as a loaded CI run once saw.
pub fn write_executable(path: &Path, text: &str) {
    use std::io::Write;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut sh = Command::new("/bin/sh")
        .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    sh.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    assert!(sh.wait().unwrap().success(), "writing {}", path.display());
}

/// A private scratch directory, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "sandguard-it-{tag}-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    /// `name` in the directory, written with `text` (a config file, most often).
    pub fn file(&self, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A command whose standard streams go nowhere (a guarded program a test only kills).
pub trait Quiet {
    fn quiet(&mut self) -> &mut Self;
}

impl Quiet for Command {
    fn quiet(&mut self) -> &mut Command {
        self.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
    }
}

/// A process started in the background with [`Quiet`] streams (a sweep service), killed and
/// reaped on drop: it never outlives the test.
pub struct Background(pub std::process::Child);

impl Background {
    pub fn start(cmd: &mut Command) -> Background {
        Background(cmd.quiet().spawn().expect("spawn in the background"))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A short id unique within this test run.
pub fn unique() -> String {
    sandguard::testing::unix::random_hex(6).unwrap()
}

/// The real binary, with an environment that cannot see the developer's own config or state,
/// and with the default disposition of the signals the tests send to process groups. A suite
/// started under `nohup`, or as a background job of a script, ignores SIGHUP (and SIGINT,
/// SIGQUIT), and an ignored signal stays ignored across exec: the guarded programs would
/// shrug off the deaths the tests deal them and live out their `sleep`.
pub fn sandguard(scratch: &Scratch) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandguard"));
    // SAFETY: between fork and exec this only calls signal(2), which is async-signal-safe,
    // and touches no memory of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    cmd.env_remove("SANDGUARD_CONFIG")
        .env_remove("SANDGUARD_LOG")
        .env_remove("SANDGUARD_GRACE")
        .env_remove("DOCKER_API_VERSION")
        .env("HOME", scratch.path())
        .env("XDG_CONFIG_HOME", scratch.path().join("config"))
        .env("XDG_STATE_HOME", scratch.path().join("state"))
        .env("NO_COLOR", "1");
    cmd
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run(cmd: &mut Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("failed to run sandguard");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// `sessions show SESSION --json` by `cmd` (the binary with whatever config it needs),
/// answered with exit 0, parsed.
pub fn shown(cmd: &mut Command, session: &str) -> serde_json::Value {
    let out = run(cmd.args(["sessions", "show", session, "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out.stdout)
}

pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Panics with instructions when no Docker daemon answers: a test that needs Docker must
/// never pass by skipping.
pub fn require_docker() {
    let ok = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "these tests need a running Docker daemon: run tests/run.sh, which installs and starts one"
    );
    let image = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        image,
        "the test image {IMAGE} is missing: tests/run.sh builds it with docker import"
    );
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Containers, networks and volumes made by one test; whatever is left is removed on drop.
#[derive(Default)]
pub struct Resources {
    containers: Vec<String>,
    networks: Vec<String>,
    volumes: Vec<String>,
}

fn label_args(labels: &[(&str, &str)]) -> Vec<String> {
    labels
        .iter()
        .flat_map(|(k, v)| ["--label".to_string(), format!("{k}={v}")])
        .collect()
}

impl Resources {
    /// A running container (`sleep`) with these labels and no network.
    pub fn container(&mut self, labels: &[(&str, &str)]) -> String {
        self.container_with(labels, &[])
    }

    pub fn container_with(&mut self, labels: &[(&str, &str)], extra: &[&str]) -> String {
        let mut args: Vec<String> = vec!["run".into(), "-d".into()];
        if !extra.contains(&"--network") {
            args.extend(["--network".into(), "none".into()]);
        }
        args.extend(label_args(labels));
        args.extend(extra.iter().map(std::string::ToString::to_string));
        args.extend([IMAGE.to_string(), "sleep".into(), "3600".into()]);
        let id = docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        self.containers.push(id.clone());
        id
    }

    /// A container made elsewhere (by a guarded script) that this test must not leave
    /// behind, whatever happens to it.
    pub fn adopt_container(&mut self, id: &str) {
        self.containers.push(id.to_string());
    }

    /// A network made elsewhere (by a guarded script), as [`Resources::adopt_container`].
    pub fn adopt_network(&mut self, id: &str) {
        self.networks.push(id.to_string());
    }

    /// A volume made elsewhere (by a guarded script), as [`Resources::adopt_container`].
    pub fn adopt_volume(&mut self, name: &str) {
        self.volumes.push(name.to_string());
    }

    /// A container that was created but never started.
    pub fn created_container(&mut self, labels: &[(&str, &str)]) -> String {
        let mut args: Vec<String> = vec!["create".into(), "--network".into(), "none".into()];
        args.extend(label_args(labels));
        args.extend([IMAGE.to_string(), "sleep".into(), "3600".into()]);
        let id = docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        self.containers.push(id.clone());
        id
    }

    pub fn network(&mut self, labels: &[(&str, &str)]) -> String {
        let name = format!("sg-it-{}", unique());
        let mut args: Vec<String> = vec!["network".into(), "create".into(), "--internal".into()];
        args.extend(label_args(labels));
        args.push(name.clone());
        let id = docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        self.networks.push(id.clone());
        id
    }

    pub fn volume(&mut self, labels: &[(&str, &str)]) -> String {
        let name = format!("sg-it-{}", unique());
        let mut args: Vec<String> = vec!["volume".into(), "create".into()];
        args.extend(label_args(labels));
        args.push(name.clone());
        docker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        self.volumes.push(name.clone());
        name
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = Command::new("docker").args(["rm", "-f", "-v", c]).output();
        }
        for n in &self.networks {
            let _ = Command::new("docker").args(["network", "rm", n]).output();
        }
        for v in &self.volumes {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f", v])
                .output();
        }
    }
}

/// The ids of the containers (running or not) labelled `sandguard.session=SESSION`.
pub fn session_containers(session: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--no-trunc", "--filter"])
        .arg(format!("label=sandguard.session={session}"))
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

pub fn container_exists(id: &str) -> bool {
    Command::new("docker")
        .args(["container", "inspect", id])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn network_exists(id: &str) -> bool {
    Command::new("docker")
        .args(["network", "inspect", id])
        .output()
        .is_ok_and(|o| o.status.success())
}

pub fn volume_exists(name: &str) -> bool {
    Command::new("docker")
        .args(["volume", "inspect", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The names of a container's anonymous volumes.
pub fn volumes_of(id: &str) -> Vec<String> {
    docker(&[
        "container",
        "inspect",
        "-f",
        "{{range .Mounts}}{{.Name}} {{end}}",
        id,
    ])
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

/// A TCP listener on 127.0.0.1 that forwards every connection to the local Docker socket, so
/// tests can reach the real daemon through `DOCKER_HOST=tcp://…`. Runs until the process ends.
pub fn tcp_to_docker_socket() -> String {
    use std::io::copy;
    use std::net::{Shutdown, TcpListener};
    use std::os::unix::net::UnixStream;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let Ok(unix) = UnixStream::connect("/var/run/docker.sock") else {
                continue;
            };
            let (mut tcp_r, mut unix_w) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = copy(&mut tcp_r, &mut unix_w);
                let _ = unix_w.shutdown(Shutdown::Write);
            });
            let (mut unix_r, mut tcp_w) = (unix, tcp);
            std::thread::spawn(move || {
                let _ = copy(&mut unix_r, &mut tcp_w);
                let _ = tcp_w.shutdown(Shutdown::Write);
            });
        }
    });
    format!("tcp://{addr}")
}

/// An owner label for a process of this machine and boot that has exited.
pub fn dead_owner_label() -> String {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let me = sandguard::testing::identity::Identity::current().unwrap();
    child.wait().unwrap();
    sandguard::testing::identity::Identity {
        pid,
        start_time: 1,
        ..me
    }
    .to_label()
}

pub fn live_owner_label() -> String {
    sandguard::testing::identity::Identity::current()
        .unwrap()
        .to_label()
}

/// A config file for cloud tests: Docker off (so only the provider under test answers) and
/// short reclaim limits, plus `extra` lines.
pub fn cloud_config(s: &Scratch, extra: &str) -> PathBuf {
    let path = s.path().join("sandguard.toml");
    let text = format!(
        "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"4s\"\nretry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0\"\n{extra}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A guarded owner: `sandguard -- sh -c` that writes its session id and sleeps, in its own
/// process group (killed on drop).
pub struct Owner {
    pub child: std::process::Child,
    pub session: String,
    pub labels: String,
}

impl Owner {
    pub fn start(mut cmd: Command, s: &Scratch) -> Owner {
        use std::os::unix::process::CommandExt;
        let file = s.path().join(format!("owner-{}", unique()));
        let script = format!("printf '%s\\n%s\\n' \"$SANDGUARD_SESSION\" \"$SANDGUARD_LABELS\" > {0}.tmp && mv {0}.tmp {0}; exec sleep 600", file.display());
        let child = cmd
            .args(["--", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn the owner");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let text = loop {
            if let Ok(t) = std::fs::read_to_string(&file) {
                break t;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the guarded owner did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut lines = text.lines();
        let session = lines.next().unwrap_or_default().to_string();
        let labels = lines.next().unwrap_or_default().to_string();
        Owner {
            child,
            session,
            labels,
        }
    }

    /// The labels as pairs, as a program would stamp them.
    pub fn label_pairs(&self) -> Vec<(String, String)> {
        self.labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub fn kill(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls until `check` holds, for at most `limit`.
pub fn eventually(limit: std::time::Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}
