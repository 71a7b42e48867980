//! The Docker API proxy, for real: `sandguard run --docker-proxy -- sh -c '…docker …'` uses
//! the unmodified docker CLI (detached and interactive runs, exec, a followed log, a network,
//! a volume, a removal); everything it created is labelled, and after a SIGKILL everything is
//! reclaimed, while a container made outside the proxy survives. Raw bytes over the socket
//! show that a malformed request and a vanishing client leave the proxy serving.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{guarded_with, path_with_sandguard, unsafe_kill, wait_for_file};

fn docker_label(kind: &str, id: &str, key: &str) -> String {
    let out = std::process::Command::new("docker")
        .args([kind, "inspect", "-f"])
        .arg(format!("{{{{index .{} \"{key}\"}}}}", label_path(kind)))
        .arg(id)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn label_path(kind: &str) -> &'static str {
    match kind {
        "container" => "Config.Labels",
        _ => "Labels",
    }
}

#[test]
fn proxy_docker_cli_creations_are_labelled_and_reclaimed() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("proxy-cli");
    let mut bystanders = Resources::default();
    let stranger = bystanders.container(&[]);
    let out = s.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let u = unique();
    let script = format!(
        r#"set -e
ulimit -c 0
case "$DOCKER_HOST" in unix://*/docker.sock) ;; *) echo "DOCKER_HOST=$DOCKER_HOST" > {out}/bad; exit 9;; esac
c1=$(docker run -d --network none {IMAGE} sleep 3600)
echo hello-stdin | docker run -i --rm --network none {IMAGE} cat > {out}/stdin
docker exec "$c1" echo exec-ok > {out}/exec
c2=$(docker run -d --network none {IMAGE} sh -c 'while true; do echo tick; sleep 0.1; done')
timeout 20 docker logs -f "$c2" | head -n 3 > {out}/logs
net=$(docker network create --internal sg-proxy-{u})
vol=$(docker volume create sg-proxy-{u})
c3=$(docker create --network none {IMAGE} true)
docker rm "$c3" > /dev/null
docker ps -q --no-trunc > {out}/ps
printf '%s\n' "$c1" "$c2" "$net" "$vol" "$c3" > {out}/ids.tmp
mv {out}/ids.tmp {out}/ids
exec sleep 3600
"#,
        out = out.display()
    );
    let mut child = guarded_with(&s, &["run", "--docker-proxy"], &script);
    let ids = wait_for_file(&out.join("ids"), &mut child);
    let [c1, c2, net, vol, c3] = <[String; 5]>::try_from(ids).unwrap();
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
    assert_eq!(
        read("stdin"),
        "hello-stdin\n",
        "docker run -i through the proxy"
    );
    assert_eq!(read("exec"), "exec-ok\n", "docker exec through the proxy");
    assert_eq!(
        read("logs"),
        "tick\ntick\ntick\n",
        "docker logs -f through the proxy"
    );
    assert!(read("ps").contains(&c1), "docker ps through the proxy");
    assert!(!container_exists(&c3), "docker rm through the proxy");

    let session = docker_label("container", &c1, "sandguard.session");
    assert!(
        !session.is_empty(),
        "containers are stamped with the session"
    );
    assert_eq!(docker_label("container", &c2, "sandguard.session"), session);
    assert_eq!(docker_label("network", &net, "sandguard.session"), session);
    assert_eq!(docker_label("volume", &vol, "sandguard.session"), session);
    let journal = s
        .path()
        .join("state/sandguard/sessions")
        .join(format!("{session}.journal"));
    let journal = std::fs::read_to_string(&journal).unwrap_or_default();
    for claimed in [
        c1.clone(),
        format!("network/{net}"),
        format!("volume/{vol}"),
    ] {
        assert!(
            journal.contains(&claimed),
            "{claimed} is journaled as a claim"
        );
    }

    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    eventually(
        Duration::from_secs(10),
        "every container, network and volume made through the proxy is gone",
        || {
            !container_exists(&c1)
                && !container_exists(&c2)
                && !network_exists(&net)
                && !volume_exists(&vol)
        },
    );
    assert!(
        container_exists(&stranger),
        "a container made outside the proxy survives"
    );
}

/// Starts a guarded `sleep` behind the proxy and returns the job and the proxy's socket path.
fn proxy_only(s: &Scratch) -> (crate::watch::wrapper::Job, std::path::PathBuf) {
    let file = s.path().join("host");
    let script = format!(
        "echo \"$DOCKER_HOST\" > {f}.tmp; mv {f}.tmp {f}; exec sleep 3600",
        f = file.display()
    );
    let mut child = guarded_with(s, &["run", "--docker-proxy"], &script);
    let host = wait_for_file(&file, &mut child).join("");
    let path = host.strip_prefix("unix://").expect("a unix DOCKER_HOST");
    (child, path.into())
}

fn exchange(socket: &std::path::Path, bytes: &[u8]) -> String {
    let mut conn = UnixStream::connect(socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn proxy_survives_malformed_requests_and_clients_that_vanish() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("proxy-raw");
    let (mut child, socket) = proxy_only(&s);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600, "the socket is private");
    assert_eq!(
        mode(socket.parent().unwrap()),
        0o700,
        "its directory is private"
    );

    // Not HTTP at all: the proxy refuses it (400) and does not fall over.
    let answer = exchange(&socket, b"GARBAGE\x00\xff\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    let answer = exchange(&socket, b"GET / HTTP/1.1\r\nno colon\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");

    // A client that leaves in the middle of a streaming answer, and one that leaves in the
    // middle of its own request body.
    let mut events = UnixStream::connect(&socket).unwrap();
    events
        .write_all(b"GET /events HTTP/1.1\r\nHost: docker\r\n\r\n")
        .unwrap();
    let mut head = [0u8; 12];
    events.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    drop(events);
    let mut half = UnixStream::connect(&socket).unwrap();
    half.write_all(
        b"POST /containers/create HTTP/1.1\r\nHost: docker\r\nContent-Length: 500\r\n\r\n{\"Im",
    )
    .unwrap();
    drop(half);

    // Still serving: two requests on one kept-alive connection, with and without a version.
    let answer = exchange(
        &socket,
        b"GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\nGET /v1.41/containers/json?all=1 HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(answer.matches("HTTP/1.1 200 OK").count(), 2, "{answer}");
    assert!(answer.contains("\r\n\r\nOK"), "the ping answer: {answer}");

    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    eventually(
        Duration::from_secs(10),
        "the proxy socket is removed",
        || !socket.exists(),
    );
}

#[test]
fn proxy_path_is_on_the_ready_line() {
    // The SDK-facing contract: `watch --docker-proxy` says `ready SESSION
    // DOCKER_HOST=unix://… TESTCONTAINERS_RYUK_DISABLED=true`.
    let s = Scratch::new("proxy-ready");
    let session = format!("proxyready{}", unique());
    let mut cmd = sandguard(&s);
    cmd.env("PATH", path_with_sandguard())
        .env_remove("TESTCONTAINERS_RYUK_DISABLED")
        .args(["watch", "--docker-proxy", "--owner-pid", "1", "--session"])
        .arg(&session)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut watch = cmd.spawn().unwrap();
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(watch.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    // SIGTERM: the sidecar stops (reclaiming nothing) and removes its socket.
    unsafe_kill(watch.id() as i32, libc::SIGTERM);
    let _ = watch.wait();
    assert_eq!(words.len(), 4, "{line:?}");
    assert_eq!(&words[..2], ["ready", session.as_str()]);
    assert_eq!(words[3], "TESTCONTAINERS_RYUK_DISABLED=true", "{line:?}");
    let socket = words[2].strip_prefix("DOCKER_HOST=unix://").unwrap();
    assert!(socket.ends_with("/docker.sock"), "{line:?}");
    assert!(
        !std::path::Path::new(socket).exists(),
        "the socket is removed when the sidecar stops"
    );
}

#[test]
fn proxy_forwards_to_a_tcp_daemon() {
    // sandguard's own DOCKER_HOST (tcp here) is where the proxy forwards; the guarded program
    // sees only the proxy's unix socket.
    require_docker();
    let _g = shared();
    let s = Scratch::new("proxy-tcp");
    let file = s.path().join("made");
    let script = format!(
        "case \"$DOCKER_HOST\" in unix://*) ;; *) exit 9;; esac; \
         docker volume create sg-proxy-tcp-{u} > {f}.tmp && mv {f}.tmp {f}; exec sleep 3600",
        u = unique(),
        f = file.display()
    );
    // In a Job, so the process group is killed even if an assertion fails.
    let mut job = crate::watch::wrapper::Job({
        use std::os::unix::process::CommandExt;
        sandguard(&s)
            .env("PATH", path_with_sandguard())
            .env("DOCKER_HOST", tcp_to_docker_socket())
            .args(["run", "--docker-proxy", "--", "sh", "-c", &script])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    });
    let volume = wait_for_file(&file, &mut job).join("");
    assert!(!docker_label("volume", &volume, "sandguard.session").is_empty());
    unsafe_kill(job.id() as i32, libc::SIGKILL);
    job.wait().unwrap();
    eventually(Duration::from_secs(10), "the volume is reclaimed", || {
        !volume_exists(&volume)
    });
}
