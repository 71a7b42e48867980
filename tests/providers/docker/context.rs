//! Docker contexts, through the real binary: a context (named by `DOCKER_CONTEXT` or by
//! `currentContext` in `~/.docker/config.json`) that points at a second socket — a forwarder
//! to the real daemon that counts its connections — is where `providers`, `stop` and the
//! `--docker-proxy` upstream go; `DOCKER_HOST` still wins; a context that cannot be followed
//! is an error naming the context and its file, never the default socket.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{path_with_sandguard, unsafe_kill, wait_for_file, Job};
use sandguard::labels::SESSION;

/// A unix socket at `path` forwarding to the real daemon; the count is its connections.
fn counting_forwarder(path: &Path) -> Arc<AtomicUsize> {
    use std::io::copy;
    use std::net::Shutdown;
    let listener = UnixListener::bind(path).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            let Ok(daemon) = UnixStream::connect("/var/run/docker.sock") else {
                continue;
            };
            let (mut c_r, mut d_w) = (client.try_clone().unwrap(), daemon.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = copy(&mut c_r, &mut d_w);
                let _ = d_w.shutdown(Shutdown::Write);
            });
            let (mut d_r, mut c_w) = (daemon, client);
            std::thread::spawn(move || {
                let _ = copy(&mut d_r, &mut c_w);
                let _ = c_w.shutdown(Shutdown::Write);
            });
        }
    });
    count
}

/// Where `docker context create` keeps the context `name` under `<home>/.docker`: the
/// directory is the SHA-256 of the name (computed by `sha256sum`, not by sandguard).
fn meta_path(home: &Path, name: &str) -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "printf %s \"$1\" | sha256sum", "sh", name])
        .output()
        .unwrap();
    let digest = String::from_utf8(out.stdout).unwrap();
    let digest = digest.split_whitespace().next().unwrap();
    assert_eq!(digest.len(), 64, "sha256sum: {digest}");
    home.join(".docker/contexts/meta")
        .join(digest)
        .join("meta.json")
}

/// Writes the context `name` under `<home>/.docker` as `docker context create` lays it out.
fn write_context(home: &Path, name: &str, meta: &str) -> PathBuf {
    let path = meta_path(home, name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, meta).unwrap();
    path
}

fn endpoint(host: &str) -> String {
    format!(
        r#"{{"Name":"x","Metadata":{{}},"Endpoints":{{"docker":{{"Host":"{host}","SkipTLSVerify":false}}}}}}"#
    )
}

/// `sandguard` with none of the Docker CLI's variables from the harness.
pub(crate) fn bare(s: &Scratch) -> Command {
    let mut cmd = sandguard(s);
    cmd.env_remove("DOCKER_HOST")
        .env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_CONFIG");
    cmd
}

/// The `docker` row of `sandguard providers --json`.
pub(crate) fn docker_detail(out: &Run) -> serde_json::Value {
    json(&out.stdout)["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "docker")
        .unwrap()
        .clone()
}

#[test]
fn docker_context_is_followed_by_the_driver_and_the_proxy() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("dctx");
    let socket = s.path().join("second.sock");
    let count = counting_forwarder(&socket);
    let address = format!("unix://{}", socket.display());
    write_context(s.path(), "second", &endpoint(&address));

    // The current context of `docker context use`.
    std::fs::write(
        s.path().join(".docker/config.json"),
        r#"{"auths":{},"currentContext":"second"}"#,
    )
    .unwrap();
    let out = run(bare(&s).args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    let docker = docker_detail(&out);
    let detail = docker["detail"].as_str().unwrap();
    assert!(detail.contains(&address), "{docker}");
    assert!(detail.contains("currentContext"), "{docker}");
    assert!(count.load(Ordering::SeqCst) > 0);

    // `DOCKER_CONTEXT`, with `currentContext` naming another, unusable one: the variable wins.
    std::fs::write(
        s.path().join(".docker/config.json"),
        r#"{"currentContext":"elsewhere"}"#,
    )
    .unwrap();
    let mut r = Resources::default();
    let session = format!("dctx{}", unique());
    let id = r.container(&[(SESSION, &session)]);
    let before = count.load(Ordering::SeqCst);
    let out = run(bare(&s).env("DOCKER_CONTEXT", "second").args(["stop", &id]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!container_exists(&id));
    assert!(
        count.load(Ordering::SeqCst) > before,
        "stop went through the context's socket"
    );

    // The proxy's upstream and the sidecar's reclaim follow the context too.
    let file = s.path().join("made");
    let script = format!(
        "case \"$DOCKER_HOST\" in unix://*/docker.sock) ;; *) exit 9;; esac; \
         docker volume create sg-dctx-{u} > {f}.tmp && mv {f}.tmp {f}; exec sleep 3600",
        u = unique(),
        f = file.display()
    );
    let before = count.load(Ordering::SeqCst);
    let mut job = Job({
        use std::os::unix::process::CommandExt;
        bare(&s)
            .env("PATH", path_with_sandguard())
            .env("DOCKER_CONTEXT", "second")
            .args(["run", "--docker-proxy", "--", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    });
    let volume = wait_for_file(&file, &mut job).join("");
    assert!(
        count.load(Ordering::SeqCst) > before,
        "the proxy forwarded to the context's socket"
    );
    unsafe_kill(job.id() as i32, libc::SIGKILL);
    job.wait().unwrap();
    eventually(Duration::from_secs(10), "the volume is reclaimed", || {
        !volume_exists(&volume)
    });
}

#[test]
fn docker_host_beats_a_context_and_default_means_the_default_socket() {
    require_docker();
    let s = Scratch::new("dctx-host");
    let out = run(bare(&s)
        .env("DOCKER_CONTEXT", "missing")
        .env("DOCKER_HOST", "unix:///var/run/docker.sock")
        .args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(docker_detail(&out)["detail"]
        .as_str()
        .unwrap()
        .contains("at unix:///var/run/docker.sock (from DOCKER_HOST)"));
    let out = run(bare(&s)
        .env("DOCKER_CONTEXT", "default")
        .args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(docker_detail(&out)["detail"]
        .as_str()
        .unwrap()
        .contains("at unix:///var/run/docker.sock (from the default socket"));
}

#[test]
fn a_context_that_cannot_be_followed_is_an_error_naming_it_and_its_file() {
    let s = Scratch::new("dctx-bad");
    let missing = meta_path(s.path(), "gone");
    let k8s = write_context(
        s.path(),
        "k8s",
        r#"{"Name":"k8s","Endpoints":{"kubernetes":{}}}"#,
    );
    for (name, meta, how) in [
        ("gone", missing, "DOCKER_CONTEXT"),
        ("k8s", k8s, "currentContext"),
    ] {
        let mut cmd = bare(&s);
        if how == "DOCKER_CONTEXT" {
            cmd.env("DOCKER_CONTEXT", name);
            let _ = std::fs::remove_file(s.path().join(".docker/config.json"));
        } else {
            std::fs::write(
                s.path().join(".docker/config.json"),
                format!(r#"{{"currentContext":"{name}"}}"#),
            )
            .unwrap();
        }
        let out = run(cmd.args(["providers", "--json"]));
        assert_eq!(out.code, 1, "{name}: {} {}", out.stdout, out.stderr);
        let docker = docker_detail(&out);
        assert_eq!(docker["configured"], true, "{docker}");
        assert_eq!(docker["reachable"], false, "{docker}");
        let detail = docker["detail"].as_str().unwrap();
        assert!(detail.contains(&format!("{name:?}")), "{detail}");
        assert!(detail.contains(&meta.display().to_string()), "{detail}");
        assert!(!detail.contains("/var/run/docker.sock"), "{detail}");

        // The proxy refuses to start rather than forward to the default socket.
        let mut cmd = bare(&s);
        if how == "DOCKER_CONTEXT" {
            cmd.env("DOCKER_CONTEXT", name);
        }
        let out = run(cmd.env("PATH", path_with_sandguard()).args([
            "run",
            "--docker-proxy",
            "--",
            "true",
        ]));
        assert_ne!(out.code, 0, "{name}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("{name:?}"))
                && out.stderr.contains(&meta.display().to_string()),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn a_context_with_tls_material_is_refused_naming_it_rather_than_spoken_to_in_plain_http() {
    let s = Scratch::new("dctx-tls");
    let meta = write_context(s.path(), "secure", &endpoint("tcp://127.0.0.1:2376"));
    // `docker context create --docker "host=…,ca=…,cert=…,key=…"` keeps the files here.
    let tls = meta
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .replace("/contexts/meta/", "/contexts/tls/");
    let tls = Path::new(&tls).join("docker");
    std::fs::create_dir_all(&tls).unwrap();
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::write(tls.join(f), "-----BEGIN CERTIFICATE-----\n").unwrap();
    }
    let out = run(bare(&s)
        .env("DOCKER_CONTEXT", "secure")
        .args(["providers", "--json"]));
    assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
    let docker = docker_detail(&out);
    assert_eq!(docker["reachable"], false, "{docker}");
    let detail = docker["detail"].as_str().unwrap();
    assert!(
        detail.contains("\"secure\"")
            && detail.contains("TLS")
            && detail.contains(&tls.display().to_string()),
        "{detail}"
    );
}
