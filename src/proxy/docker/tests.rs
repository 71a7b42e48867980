//! The proxy against a scripted daemon on a unix socket: what reaches the daemon, what comes
//! back, and what is claimed. (The real daemon: `tests/proxy/docker*.rs`.)

use super::*;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

mod streams;

struct Rig {
    dir: std::path::PathBuf,
    socket: std::path::PathBuf,
    claims: mpsc::UnboundedReceiver<Ask>,
    /// Every byte the daemon received, per connection, sent when the connection ends.
    seen: mpsc::UnboundedReceiver<Vec<u8>>,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
    _guard: SocketDir,
}

/// A daemon that answers each request (read up to its blank line, plus `Content-Length`)
/// with `answer(request head)`; an attach gets a 101 and an echo.
async fn rig(name: &str) -> Rig {
    let dir = std::env::temp_dir().join(format!("sg-proxy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let daemon_path = dir.join("daemon.sock");
    let daemon = UnixListener::bind(&daemon_path).unwrap();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let daemon_task = tokio::spawn(async move {
        while let Ok((conn, _)) = daemon.accept().await {
            let seen_tx = seen_tx.clone();
            tokio::spawn(async move {
                let log = fake_daemon(conn).await;
                let _ = seen_tx.send(log);
            });
        }
    });
    let (tx, claims) = mpsc::unbounded_channel();
    let labels = BTreeMap::from([("sandguard.session".to_string(), "s1".to_string())]);
    let (proxy, guard) = Proxy::bind(
        &dir.join("p"),
        "unused",
        Upstream::Unix(daemon_path),
        labels,
        tx,
    )
    .unwrap();
    let socket = guard.socket().to_path_buf();
    let proxy_task = tokio::spawn(proxy.run());
    Rig {
        dir,
        socket,
        claims,
        seen,
        _tasks: vec![daemon_task, proxy_task],
        _guard: guard,
    }
}

async fn fake_daemon(conn: UnixStream) -> Vec<u8> {
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r);
    let mut log = Vec::new();
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            if r.read_until(b'\n', &mut line).await.unwrap_or(0) == 0 {
                return log;
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).to_string();
        let len = text
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        let mut body = vec![0; len];
        r.read_exact(&mut body).await.unwrap();
        log.extend_from_slice(&head);
        log.extend_from_slice(&body);
        let hijack = text.contains("/attach") || text.contains("/start");
        let detached = String::from_utf8_lossy(&body).contains(r#""Detach":true"#);
        if hijack && !detached && !text.contains("Upgrade: tcp") {
            // Docker's older hijack: `200`, then the output raw until the daemon closes.
            w.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n\x01\0\0\0\0\0\0\x03out",
            )
            .await
            .unwrap();
            w.shutdown().await.unwrap();
            return log;
        }
        if text.contains("/attach") {
            w.write_all(b"HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
                .await
                .unwrap();
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.unwrap();
            w.write_all(&rest).await.unwrap();
            return log;
        }
        if text.contains("follow=1") {
            // One chunk now; the rest never comes: the client must see it while the
            // stream is open (until the proxy closes this connection).
            w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
                .await
                .unwrap();
            let mut rest = Vec::new();
            let _ = r.read_to_end(&mut rest).await;
            return log;
        }
        if text.contains("/until-close") {
            // An answer the end of the connection delimits; then go on reading, to see
            // whether anything else is forwarded.
            w.write_all(b"HTTP/1.1 200 OK\r\n\r\nstream").await.unwrap();
            w.shutdown().await.unwrap();
            continue;
        }
        let answer = if text.contains("/volumes/create") {
            volume_answer(&body)
        } else if text.contains("/create") || text.contains("/commit") {
            b"HTTP/1.1 201 Created\r\nContent-Length: 12\r\n\r\n{\"Id\":\"c1\"}\n".to_vec()
        } else {
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec()
        };
        w.write_all(&answer).await.unwrap();
    }
}

/// Docker's idempotent volume create: a volume named `existing` comes back with its own
/// labels; any other is made with the labels asked for. Chunked, split mid-token.
fn volume_answer(body: &[u8]) -> Vec<u8> {
    let asked: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let name = asked["Name"].as_str().unwrap_or("v1");
    let labels = match name {
        "existing" => serde_json::json!({"old": "label"}),
        _ => asked["Labels"].clone(),
    };
    let json = serde_json::json!({"Name": name, "Labels": labels}).to_string();
    let (a, b) = json.split_at(5);
    format!(
        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    )
    .into_bytes()
}

async fn ack_claims(mut claims: mpsc::UnboundedReceiver<Ask>, n: usize) -> Vec<Target> {
    let mut got = Vec::new();
    while got.len() < n {
        match claims.recv().await {
            Some(Ask::Claim(c)) => {
                let _ = c.ack.send(());
                got.push(c.target);
            }
            // A sidecar with no limits: no slot is needed.
            Some(Ask::Slot { answer, .. }) => {
                let _ = answer.send(Ok(None));
            }
            Some(Ask::SlotDone { .. }) => {}
            None => break,
        }
    }
    got
}

#[tokio::test]
async fn creates_are_stamped_and_claimed_on_a_kept_alive_connection() {
    let mut rig = rig("create").await;
    let claims = std::mem::replace(&mut rig.claims, mpsc::unbounded_channel().1);
    let acker = tokio::spawn(ack_claims(claims, 2));
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    let body = r#"{"Image":"x","Labels":{"a":"b"}}"#;
    let req = format!(
        "POST /v1.47/containers/create HTTP/1.1\r\nHost: docker\r\nContent-Length: {}\r\n\r\n{body}\
         POST /volumes/create HTTP/1.1\r\nHost: docker\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{{}}\r\n0\r\n\r\n\
         GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    conn.shutdown().await.unwrap();
    let mut answers = String::new();
    conn.read_to_string(&mut answers).await.unwrap();
    assert_eq!(answers.matches("HTTP/1.1 ").count(), 3, "{answers}");
    assert!(answers.contains("{\"Id\":\"c1\"}\n"));
    assert!(
        answers.contains(r#""Name":"v1"}"#),
        "the volume answer, read whole to be claimed: {answers}"
    );
    assert!(answers.ends_with("ok"));
    let seen = String::from_utf8(rig.seen.recv().await.unwrap()).unwrap();
    assert!(seen.contains(r#""sandguard.session":"s1""#), "{seen}");
    assert!(seen.contains(r#""a":"b""#));
    assert!(!seen.contains("Transfer-Encoding"));
    assert!(seen.contains("GET /_ping HTTP/1.1\r\nHost: docker\r\n\r\n"));
    let got = acker.await.unwrap();
    let _ = std::fs::remove_dir_all(&rig.dir);
    let ids: Vec<&str> = got.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["c1", "volume/v1"]);
}

#[tokio::test]
async fn named_volumes_are_made_first_and_claimed_only_when_new() {
    let mut rig = rig("volumes").await;
    let claims = std::mem::replace(&mut rig.claims, mpsc::unbounded_channel().1);
    let acker = tokio::spawn(ack_claims(claims, 2));
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    let body = r#"{"Image":"x","HostConfig":{"Binds":["existing:/a","fresh:/b","/host:/c"],"Mounts":[{"Type":"volume","Source":"m","VolumeOptions":{"Labels":{"l":"1"}}}]}}"#;
    let req = format!(
        "POST /v1.41/containers/create HTTP/1.1\r\nHost: d\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    assert!(out.ends_with("{\"Id\":\"c1\"}\n"), "{out}");
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(String::from_utf8(rig.seen.recv().await.unwrap()).unwrap());
    }
    let creates: Vec<&String> = seen
        .iter()
        .filter(|s| s.contains("volumes/create"))
        .collect();
    assert_eq!(creates.len(), 3, "{seen:?}");
    assert!(creates
        .iter()
        .all(|s| s.starts_with("POST /v1.41/volumes/create HTTP/1.1\r\n")));
    assert!(creates
        .iter()
        .all(|s| s.contains(r#""sandguard.session":"s1""#)));
    assert!(creates
        .iter()
        .any(|s| s.contains(r#""Name":"m","Labels":{"l":"1","#)));
    let got = acker.await.unwrap();
    let ids: Vec<&str> = got.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["volume/fresh", "volume/m"],
        "made first; never `existing`"
    );
    let _ = std::fs::remove_dir_all(&rig.dir);
}

#[tokio::test]
async fn commits_are_rewritten() {
    let mut rig = rig("commit").await;
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    let body = r#"{"Labels":{"sandguard.session":"s1","keep":"1"}}"#;
    let req = format!(
        "POST /v1.41/commit?container=c HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    conn.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 201"), "{out}");
    let seen = String::from_utf8(rig.seen.recv().await.unwrap()).unwrap();
    let change = "&changes=LABEL%20sandguard.session%3D%22%22%20sandguard.owner%3D%22%22";
    assert!(
        seen.starts_with(&format!("POST /v1.41/commit?container=c{change}")),
        "{seen}"
    );
    assert!(
        seen.ends_with("\r\n\r\n{\"Labels\":{\"keep\":\"1\"}}"),
        "{seen}"
    );
    let _ = std::fs::remove_dir_all(&rig.dir);
}

#[test]
fn upstream_addresses() {
    let parse = |a: &str| Upstream::parse(&crate::config::docker::DaemonAddress::new(a));
    assert!(
        matches!(parse("unix:///var/run/docker.sock"), Ok(Upstream::Unix(p)) if p == Path::new("/var/run/docker.sock"))
    );
    assert!(matches!(parse("tcp://127.0.0.1:2375"), Ok(Upstream::Tcp(a)) if a == "127.0.0.1:2375"));
    assert!(parse("ssh://host").is_err());
    // What cannot be forwarded to is named redacted.
    let refused = parse("ssh://me:s3cret@host").unwrap_err().to_string();
    assert!(
        refused.contains("\"ssh://me:[redacted]@host\""),
        "{refused}"
    );
}
