//! The container image (packaging/container), built offline by its own build script and run
//! against the host's Docker daemon through its socket:
//!
//! - `--version` in it says what the binary says, and a program guarded inside it
//!   (`sandguard run --docker-proxy -- sh -c …`, sandguard as the container's pid 1) that
//!   creates containers, one through the proxy and one labelled by hand, then is SIGKILLed,
//!   leaves nothing: the container exits 137 only once the reclaim is done;
//! - the Kubernetes pod's native sidecar (packaging/kubernetes/pod-native-sidecar.yaml) runs
//!   in it as the manifest says (its `args`, its literal `env`, `$(POD_UID)` expanded as the
//!   kubelet does, a 0777 state volume as an emptyDir is), waits for the agent's pid file,
//!   and reclaims the agent's container when the agent is killed.
//!
//! The image is built from the binary under test (`CARGO_BIN_EXE_sandguard`), not from a
//! release build: it is always there and always current when `cargo test` runs (the release
//! build comes later in tests/run.sh, for the wheel), so the test adds no compile time, and the
//! recipe is the same for any binary (`build.sh --binary`). Its shell, `sleep` and `kill` come
//! from the test image (a static busybox) and its `docker` from the host's CLI (with the
//! libraries ldd names), in a test-only image layered on the real one: the real image has no
//! shell, and the guarded program must create containers from inside it. Each test builds
//! and removes its own images, under names no other run uses (the daemon is shared).

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// One image test at a time: each builds on the daemon's legacy builder, whose cached steps
/// are shared between builds of the same binary (one test's removal must not meet the
/// other's build on them).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An image of this test's own, removed on drop, after its containers and the images built
/// on it (declared after it, they drop first). Never `rm -f`: that deletes an image other
/// images are built on (the builder's cached steps), and a later build that hits that cache
/// fails with "failed to get layer …: layer does not exist". Plain `rm` untags an image that
/// has other names (the same binary builds the same image) and prunes the cached steps.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["image", "rm", &self.0])
            .output();
    }
}

/// Named containers of this test's own, removed on drop.
#[derive(Default)]
struct Containers(Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for c in &self.0 {
            let _ = Command::new("docker").args(["rm", "-f", c]).output();
        }
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn docker(args: &[&str]) -> Run {
    run(Command::new("docker").args(args))
}

fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert_eq!(out.code, 0, "docker {args:?}: {}{}", out.stdout, out.stderr);
    out.stdout.trim().to_string()
}

/// `packaging/container/build.sh --binary <the binary under test>`, as users run it.
fn build_image() -> Image {
    let tag = format!("sandguard-test/sandguard:{}", unique());
    let started = std::time::Instant::now();
    let out = run(Command::new("bash")
        .arg(repo().join("packaging/container/build.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_sandguard"), "--tag", &tag]));
    assert_eq!(out.code, 0, "build.sh: {}", out.stderr);
    assert_eq!(out.stdout.trim(), tag, "build.sh prints the image's name");
    eprintln!("the image was built in {:?}", started.elapsed());
    Image(tag)
}

/// `docker build` of a test-only image: the legacy builder when buildx is missing, as
/// build.sh does.
fn docker_build(context: &Path, tag: &str) -> Image {
    let mut cmd = Command::new("docker");
    if docker(&["buildx", "version"]).code != 0 {
        cmd.env("DOCKER_BUILDKIT", "0");
    }
    let out = run(cmd.args(["build", "--quiet", "--tag", tag]).arg(context));
    assert_eq!(
        out.code, 0,
        "docker build {tag}: {}\n{}",
        out.stderr, out.stdout
    );
    Image(tag.to_string())
}

/// The real image plus busybox (sh, sleep, kill) and the host's docker CLI.
fn guarded_layer(base: &Image, s: &Scratch) -> Image {
    let context = s.path().join("layer");
    let cli = which("docker");
    let libs = context.join("libs");
    std::fs::create_dir_all(&libs).unwrap();
    std::fs::copy(&cli, context.join("docker")).unwrap();
    // The CLI's own libraries (the image has glibc's already; a CLI linking more brings them).
    // A static CLI (Docker's own builds are) needs none; then there is no `COPY libs/`: an
    // empty one makes the legacy builder's next step fail ("failed to get layer …: layer
    // does not exist", Docker 20.10).
    let ldd = Command::new("ldd").arg(&cli).output().unwrap();
    let mut copy_libs = "";
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        let to = libs.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(lib, &to).unwrap();
        copy_libs = "COPY libs/ /\n";
    }
    std::fs::write(
        context.join("Dockerfile"),
        format!(
            "FROM {IMAGE} AS busybox\nFROM {}\nCOPY --from=busybox /bin/ /bin/\n\
             {copy_libs}COPY docker /usr/bin/docker\n",
            base.0
        ),
    )
    .unwrap();
    docker_build(&context, &format!("{}-guarded", base.0))
}

fn which(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|f| f.is_file())
        })
        .unwrap_or_else(|| panic!("{name} is not on PATH"))
}

#[test]
fn the_image_runs_its_version_and_reclaims_what_a_program_guarded_in_it_made() {
    require_docker();
    let _g = shared();
    let _one = one_at_a_time();
    let s = Scratch::new("image");
    let image = build_image();
    let config = json(&docker_ok(&["image", "inspect", &image.0]))[0]["Config"].clone();
    assert_eq!(config["Entrypoint"][0], "/usr/local/bin/sandguard");
    let ours = run(sandguard(&s).arg("--version"));
    let version = docker_ok(&["run", "--rm", "--network", "none", &image.0, "--version"]);
    assert_eq!(version, ours.stdout.trim());
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );

    let layer = guarded_layer(&image, &s);
    let name = format!("sg-image-{}", unique());
    let mut containers = Containers(vec![name.clone()]);
    // One container through the Docker proxy (stamped by it), one on the daemon's own socket
    // labelled by hand; then the program kills itself.
    let script = r#"
        proxied=$(docker run -d --network none sandguard-test/busybox:latest sleep 600) || exit 3
        direct=$(DOCKER_HOST=unix:///var/run/docker.sock docker run -d --network none \
          --label "sandguard.session=$SANDGUARD_SESSION" sandguard-test/busybox:latest sleep 600) || exit 4
        echo "$proxied $direct $SANDGUARD_SESSION"
        docker inspect -f '{{index .Config.Labels "sandguard.session"}}' "$proxied"
        kill -9 $$
    "#;
    let out = run(Command::new("timeout").args([
        "120",
        "docker",
        "run",
        "--name",
        &name,
        "--network",
        "none",
        "-v",
        "/var/run/docker.sock:/var/run/docker.sock",
        &layer.0,
        "run",
        "--docker-proxy",
        "--",
        "sh",
        "-c",
        script,
    ]));
    let lines: Vec<&str> = out.stdout.lines().collect();
    let made: Vec<&str> = lines.first().map_or(vec![], |l| l.split(' ').collect());
    containers
        .0
        .extend(made.iter().take(2).map(|c| (*c).to_string()));
    // sandguard, pid 1 of the container, exits as its program did (128+9) once the sidecar
    // has finished reclaiming.
    assert_eq!(out.code, 137, "{}{}", out.stdout, out.stderr);
    assert_eq!(made.len(), 3, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        lines.get(1),
        Some(&made[2]),
        "the proxy stamped the session"
    );
    for c in &made[..2] {
        assert!(
            !container_exists(c),
            "{c} outlived its owner: {}",
            out.stderr
        );
    }
    drop(containers);
    drop(layer);
}

/// A manifest in packaging/kubernetes, as JSON (read by PyYAML; tests/run.sh installs it).
pub(crate) fn kubernetes_manifest(name: &str) -> serde_json::Value {
    let path = repo().join("packaging/kubernetes").join(name);
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(&path)
        .output()
        .expect("python3 (tests/run.sh installs it)");
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&String::from_utf8_lossy(&out.stdout))
}

/// Expands `$(VAR)` as the kubelet does in a container's args.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    env.iter().fold(arg.to_string(), |a, (k, v)| {
        a.replace(&format!("$({k})"), v)
    })
}

#[test]
fn the_pods_native_sidecar_runs_in_the_image_as_its_manifest_says() {
    require_docker();
    let _g = shared();
    let _one = one_at_a_time();
    let s = Scratch::new("image-pod");
    let image = build_image();
    let pod = kubernetes_manifest("pod-native-sidecar.yaml");
    let sidecar = &pod["spec"]["initContainers"][0];
    let agent = &pod["spec"]["containers"][0];
    assert!(sidecar["command"].is_null(), "the image's entrypoint runs");

    let mut uid = [0u8; 16];
    sandguard::testing::unix::random_bytes(&mut uid).unwrap();
    let hex: String = uid.iter().map(|b| format!("{b:02x}")).collect();
    let uid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    // The environment the kubelet would give: literal values as written, the downward API's
    // uid and name; secrets (the fleet store, E2B) left out, so the sidecar guards locally.
    let mut env: Vec<(String, String)> = vec![];
    for e in sidecar["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        match (
            e["value"].as_str(),
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Some(v), _) => env.push((name, v.to_string())),
            (None, Some("metadata.uid")) => env.push((name, uid.clone())),
            (None, Some("metadata.name")) => env.push((name, "agent".into())),
            _ => {}
        }
    }
    let args: Vec<String> = sidecar["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| expand(a.as_str().unwrap(), &env))
        .collect();
    let mount = |c: &serde_json::Value, volume: &str| -> String {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == volume)
            .map_or_else(
                || panic!("no {volume} mount"),
                |m| m["mountPath"].as_str().unwrap().to_string(),
            )
    };
    // The volumes: emptyDirs are 0777.
    let (run_dir, state_dir) = (s.path().join("run"), s.path().join("state"));
    for d in [&run_dir, &state_dir] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, Permissions::from_mode(0o777)).unwrap();
    }
    let u = unique();
    let (sidecar_name, agent_name) = (format!("sg-sidecar-{u}"), format!("sg-agent-{u}"));
    let containers = Containers(vec![agent_name.clone(), sidecar_name.clone()]);
    let mut cmd: Vec<String> = ["run", "-d", "--name", &sidecar_name, "--network", "none"]
        .map(String::from)
        .to_vec();
    cmd.extend([
        "-v".into(),
        "/var/run/docker.sock:/var/run/docker.sock".into(),
    ]);
    cmd.extend([
        "-v".into(),
        format!("{}:{}", run_dir.display(), mount(sidecar, "run")),
    ]);
    cmd.extend([
        "-v".into(),
        format!("{}:{}", state_dir.display(), mount(sidecar, "state")),
    ]);
    for (k, v) in &env {
        cmd.extend(["-e".into(), format!("{k}={v}")]);
    }
    cmd.push(image.0.clone());
    cmd.extend(args);
    docker_ok(&cmd.iter().map(String::as_str).collect::<Vec<_>>());

    // The agent: the manifest's script, with `exec my-agent` made a sleep, in the sidecar's
    // pid namespace (shareProcessNamespace) with the run volume.
    let script = agent["args"][0].as_str().unwrap();
    assert!(script.contains("exec my-agent"), "{script}");
    let script = script.replace("exec my-agent", "exec sleep 600");
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &agent_name,
        "--network",
        "none",
        "--pid",
        &format!("container:{sidecar_name}"),
        "-v",
        &format!("{}:{}", run_dir.display(), mount(agent, "run")),
        "-e",
        &format!("POD_UID={uid}"),
        IMAGE,
        "sh",
        "-c",
        &script,
    ]);
    let session = uid.replace('-', "");
    eventually(Duration::from_secs(30), "the sidecar says ready", || {
        docker(&["logs", &sidecar_name]).stdout.trim() == format!("ready {session}")
    });
    // What the agent made, stamped with its session (here from outside: the agent image has
    // no docker CLI).
    let mut made = Resources::default();
    let victim = made.container(&[("sandguard.session", &session)]);
    docker_ok(&["kill", &agent_name]);
    eventually(
        Duration::from_secs(30),
        "the agent's container is reclaimed",
        || !container_exists(&victim),
    );
    let code = docker_ok(&["wait", &sidecar_name]);
    let logs = docker(&["logs", &sidecar_name]);
    assert_eq!(code, "0", "the sidecar ended the session: {}", logs.stderr);
    // Its ledger is a 0700 directory inside the 0777 volume.
    let ledger = state_dir.join(
        Path::new(
            &env.iter()
                .find(|(k, _)| k == "SANDGUARD_STATE_DIR")
                .unwrap()
                .1,
        )
        .strip_prefix(mount(sidecar, "state"))
        .unwrap(),
    );
    let mode = std::fs::metadata(&ledger).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{}", ledger.display());
    assert!(ledger.join(format!("sessions/{session}.journal")).is_file());
    drop(containers);
}
