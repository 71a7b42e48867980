//! The proxy against the scripted daemon of [`super`]: what is refused, what streams, and
//! what becomes a raw copy.

use super::*;

#[tokio::test]
async fn upgrades_become_a_raw_copy() {
    let rig = rig("hijack").await;
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    conn.write_all(
        b"POST /containers/c1/attach?stream=1 HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\nraw bytes \x00\x01",
    )
    .await
    .unwrap();
    conn.shutdown().await.unwrap();
    let mut out = Vec::new();
    conn.read_to_end(&mut out).await.unwrap();
    assert!(out.starts_with(b"HTTP/1.1 101 UPGRADED\r\n"));
    assert!(out.ends_with(b"\r\n\r\nraw bytes \x00\x01"));
    let _ = std::fs::remove_dir_all(&rig.dir);
}

/// Reads until the proxy closes the connection (at most 20 s).
async fn read_all(conn: &mut UnixStream) -> String {
    let mut out = Vec::new();
    let read = conn.read_to_end(&mut out);
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the proxy closed the connection")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends a `GET /_ping` on a fresh connection and returns what the daemon saw of it.
async fn ping(rig: &mut Rig) -> String {
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    conn.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let out = read_all(&mut conn).await;
    assert!(out.ends_with("ok"), "{out}");
    String::from_utf8(rig.seen.recv().await.unwrap()).unwrap()
}

#[tokio::test]
async fn garbage_is_refused_and_nothing_reaches_the_daemon() {
    let mut rig = rig("garbage").await;
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    conn.write_all(b"GARBAGE\r\n\r\nPOST /containers/create HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let out = read_all(&mut conn).await;
    drop(conn);
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert_eq!(out.matches("HTTP/1.1").count(), 1, "{out}");
    // A head cut short: no answer, nothing forwarded.
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    conn.write_all(b"POST /containers/create HTTP/1.1\r\nHost: d")
        .await
        .unwrap();
    conn.shutdown().await.unwrap();
    assert_eq!(read_all(&mut conn).await, "");
    // A head over 64 KiB, even one hyper's buffer let through, and what follows it.
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    let big = format!(
        "GET /_ping HTTP/1.1\r\nX-Big: {}\r\n\r\nPOST /containers/create HTTP/1.1\r\n\r\n",
        "a".repeat(65 * 1024)
    );
    conn.write_all(big.as_bytes()).await.unwrap();
    let out = read_all(&mut conn).await;
    assert!(out.starts_with("HTTP/1.1 431 "), "{out}");
    assert_eq!(out.matches("HTTP/1.1").count(), 1, "{out}");
    // The first connection the daemon saw is the next client's.
    let seen = ping(&mut rig).await;
    assert!(seen.starts_with("GET /_ping HTTP/1.1\r\n"), "{seen:?}");
    // A client that leaves mid-request does not hurt the next one.
    let mut half = UnixStream::connect(&rig.socket).await.unwrap();
    half.write_all(b"POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc")
        .await
        .unwrap();
    drop(half);
    ping(&mut rig).await;
    let _ = std::fs::remove_dir_all(&rig.dir);
}

#[tokio::test]
async fn an_answer_until_close_streams_and_the_next_request_is_still_judged() {
    let mut rig = rig("until-close").await;
    let claims = std::mem::replace(&mut rig.claims, mpsc::unbounded_channel().1);
    let acker = tokio::spawn(ack_claims(claims, 1));
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    let create = r#"{"Image":"x"}"#;
    let req = format!(
        "GET /until-close HTTP/1.1\r\nHost: d\r\n\r\nPOST /containers/create HTTP/1.1\r\nContent-Length: {}\r\n\r\n{create}",
        create.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    conn.shutdown().await.unwrap();
    let out = read_all(&mut conn).await;
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(out.contains("stream"), "{out}");
    assert!(out.ends_with("{\"Id\":\"c1\"}\n"), "{out}");
    let first = String::from_utf8(rig.seen.recv().await.unwrap()).unwrap();
    assert!(!first.contains("create"), "{first}");
    let second = String::from_utf8(rig.seen.recv().await.unwrap()).unwrap();
    assert!(
        second.starts_with("POST /containers/create HTTP/1.1\r\n"),
        "{second}"
    );
    assert!(second.contains(r#""sandguard.session":"s1""#), "{second}");
    assert_eq!(acker.await.unwrap()[0].id, "c1");
    let _ = std::fs::remove_dir_all(&rig.dir);
}

#[tokio::test]
async fn a_stream_reaches_the_client_as_it_comes() {
    let rig = rig("follow").await;
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    conn.write_all(b"GET /containers/c1/logs?follow=1 HTTP/1.1\r\nHost: d\r\n\r\n")
        .await
        .unwrap();
    let mut r = BufReader::new(conn);
    let mut seen = String::new();
    let read = async {
        while !seen.contains("first") {
            let mut line = String::new();
            assert!(r.read_line(&mut line).await.unwrap() > 0, "{seen}");
            seen.push_str(&line);
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .unwrap_or_else(|_| panic!("the first chunk did not come through: {seen:?}"));
    let _ = std::fs::remove_dir_all(&rig.dir);
}

/// Docker's older hijack (no `Upgrade`, as dockerode's `exec.start()` without `hijack`, which
/// testcontainers-node uses): the daemon's `200` and the raw output it streams until it closes
/// reach the client; the next connection is served as ever. A detached exec start passes too.
#[tokio::test]
async fn a_hijack_without_upgrade_streams_the_output_until_the_daemon_closes() {
    let mut rig = rig("no-upgrade").await;
    for (target, body) in [
        ("/v1.41/containers/c1/attach?stream=1&stdout=1", ""),
        ("/v1.41/exec/e1/start", r#"{"Detach":false,"Tty":false}"#),
    ] {
        let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
        let req = format!(
            "POST {target} HTTP/1.1\r\nHost: d\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(req.as_bytes()).await.unwrap();
        let out = read_all(&mut conn).await;
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(out.contains("application/vnd.docker.raw-stream"), "{out}");
        assert!(
            out.contains("\u{1}\0\0\0\0\0\0\u{3}out"),
            "the output: {out:?}"
        );
        let seen = String::from_utf8(rig.seen.recv().await.unwrap()).unwrap();
        assert!(seen.starts_with(&format!("POST {target} ")), "{seen}");
        assert!(seen.ends_with(body), "{seen}");
    }
    let seen = ping(&mut rig).await;
    assert!(seen.starts_with("GET /_ping"), "still served: {seen:?}");
    let mut conn = UnixStream::connect(&rig.socket).await.unwrap();
    let body = r#"{"Detach":true,"Tty":false}"#;
    let req = format!(
        "POST /v1.41/exec/e1/start HTTP/1.1\r\nHost: d\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.unwrap();
    let out = read_all(&mut conn).await;
    assert!(out.ends_with("ok"), "a detached exec start passes: {out}");
    let seen = String::from_utf8(rig.seen.recv().await.unwrap()).unwrap();
    assert!(seen.ends_with(body), "{seen}");
    let _ = std::fs::remove_dir_all(&rig.dir);
}
