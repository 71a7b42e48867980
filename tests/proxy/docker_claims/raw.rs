//! The proxy's trust rules with raw bytes over its socket, against the real daemon: encoded
//! and absolute-form targets and lowercase `labels` keys are stamped and claimed; heads the
//! proxy cannot parse and bodies it cannot stamp are refused (400, 413, 431) and nothing
//! reaches the daemon unstamped.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::{labels, marked, owner, session_of, Faults, Made, Owner};
use crate::support::*;

/// A guarded owner that only serves the proxy.
fn proxy_owner(s: &Scratch) -> Owner {
    owner(s, "echo ready > $OUT/ids")
}

/// Sends `bytes` on one connection (then its end) and reads until the proxy closes it.
fn raw(socket: &Path, bytes: &[u8]) -> String {
    let mut conn = UnixStream::connect(socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut reader = conn.try_clone().unwrap();
    let bytes = bytes.to_vec();
    // Written from a thread (a refused body may be left unread), then half-closed.
    let writer = std::thread::spawn(move || {
        let _ = conn.write_all(&bytes);
        let _ = conn.shutdown(std::net::Shutdown::Write);
    });
    let mut out = Vec::new();
    let _ = reader.read_to_end(&mut out);
    let _ = writer.join();
    String::from_utf8_lossy(&out).into_owned()
}

fn post(target: &str, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "POST {target} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    [head.as_bytes(), body].concat()
}

/// A container create body carrying `sg-tp=MARKER` under `key`.
fn container(key: &str, marker: &str) -> String {
    format!(
        r#"{{"Image":"{IMAGE}","Cmd":["sleep","3600"],"HostConfig":{{"NetworkMode":"none"}},"{key}":{{"sg-tp":"{marker}"}}}}"#
    )
}

fn status(answer: &str) -> u16 {
    let line = answer.lines().next().unwrap_or_default();
    line.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

fn answer_json(answer: &str) -> serde_json::Value {
    serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap_or_default()
}

/// Checks that a create was answered 201, stamped with this session and claimed.
fn stamped(f: &mut Faults, o: &Owner, answer: &str, marker: &str, what: &str) {
    if status(answer) != 201 {
        return f.check(false, format!("{what}: not created: {answer}"));
    }
    let id = answer_json(answer)["Id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    f.eq(
        session_of("container", &id),
        o.session.clone(),
        &format!("{what}: session"),
    );
    f.eq(
        labels("container", &id)["sg-tp"].clone(),
        marker.into(),
        &format!("{what}: labels"),
    );
    f.check(o.journal().contains(&id), format!("{what}: claimed"));
}

/// Checks that a request was refused by the proxy (with `code`, and one answer only) and
/// nothing with `marker` was created.
fn refused_head(f: &mut Faults, answer: &str, code: u16, marker: &str, what: &str) {
    let first = answer.lines().next().unwrap_or_default();
    f.eq(status(answer), code, &format!("{what}: status ({first})"));
    f.eq(
        answer.matches("HTTP/1.1 ").count(),
        1,
        &format!("{what}: answers"),
    );
    f.check(
        marked(marker).is_empty(),
        format!("{what}: a container was created"),
    );
}

/// As [`refused_head`], for a request the proxy read and judged: its answer says why.
fn refused(f: &mut Faults, answer: &str, code: u16, marker: &str, what: &str) {
    refused_head(f, answer, code, marker, what);
    f.check(answer.contains("sandguard: "), format!("{what}: says why"));
}

#[test]
fn encoded_and_absolute_targets_and_lowercase_labels_are_stamped() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-targets");
    let mut made = Made::default();
    let mut f = Faults::default();
    let mut o = proxy_owner(&s);
    let u = unique();
    let cases = [
        ("/v1.41/containers/%63reate", "Labels", "percent-encoded"),
        ("/v1.41/containers%2Fcreate", "Labels", "an encoded slash"),
        (
            "http://docker/v1.41/containers/create",
            "Labels",
            "absolute-form",
        ),
        ("/containers/create", "labels", "a lowercase labels key"),
        (
            "/v1.41/containers/create",
            "lABELſ",
            "a labels key Go folds",
        ),
    ];
    for (i, (target, key, what)) in cases.iter().enumerate() {
        let marker = format!("{u}-{i}");
        made.markers.push(marker.clone());
        // A session label of its own, which the last key would override the proxy's with.
        let body = container(key, &marker);
        let body = body.replace(r#""sg-tp""#, r#""sandguard.session":"evil","sg-tp""#);
        let answer = raw(&o.socket, &post(target, body.as_bytes()));
        stamped(&mut f, &o, &answer, &marker, what);
    }
    o.kill_and_wait();
    for (i, (_, _, what)) in cases.iter().enumerate() {
        f.check(
            marked(&format!("{u}-{i}")).is_empty(),
            format!("{what}: reclaimed"),
        );
    }
    f.none();
}

#[test]
fn heads_the_proxy_cannot_parse_are_refused_with_nothing_forwarded() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-heads");
    let mut made = Made::default();
    let mut f = Faults::default();
    let o = proxy_owner(&s);
    let u = unique();
    let big = format!("X-Big: {}\r\n", "a".repeat(70 * 1024));
    // The first is judged by the proxy (its answer says why); hyper refuses the others.
    let cases: [(&[u8], u16, &str); 4] = [
        (b"X-Bytes: \xff\xfe\r\n", 400, "a non-UTF-8 header byte"),
        (b"X-Fold: a\r\n folded\r\n", 400, "an obs-fold line"),
        (big.as_bytes(), 431, "a head over 64 KiB"),
        (b"no colon\r\n", 400, "a line without a colon"),
    ];
    for (i, (line, code, what)) in cases.iter().enumerate() {
        let marker = format!("{u}-{i}");
        made.markers.push(marker.clone());
        let first = [b"GET /_ping HTTP/1.1\r\nHost: docker\r\n", *line, b"\r\n"].concat();
        let create = post(
            "/containers/create",
            container("Labels", &marker).as_bytes(),
        );
        let answer = raw(&o.socket, &[first, create].concat());
        match i {
            0 => refused(&mut f, &answer, *code, &marker, what),
            _ => refused_head(&mut f, &answer, *code, &marker, what),
        }
    }
    // EOF in the middle of a head: the connection closes without an answer.
    let answer = raw(&o.socket, b"POST /containers/create HTTP/1.1\r\nHost: d");
    f.eq(answer, String::new(), "a head cut short");
    // Still serving.
    let ping = raw(
        &o.socket,
        b"GET /_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
    );
    f.check(ping.ends_with("OK"), format!("still serving: {ping}"));
    f.none();
}

/// Podman's own API creates what the proxy cannot stamp: every request there but a read is
/// refused with a `sandguard:` answer, and on Podman (tests/engines.txt) nothing is created;
/// a read passes through to the engine.
#[test]
fn podmans_own_api_is_refused_but_for_reads() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-libpod");
    let mut made = Made::default();
    let mut f = Faults::default();
    let o = proxy_owner(&s);
    let u = unique();
    // Podman's SpecGenerator: lowercase keys, `labels` among them.
    let spec = |marker: &str| {
        format!(
            r#"{{"image":"{IMAGE}","command":["sleep","3600"],"netns":{{"nsmode":"none"}},"labels":{{"sg-tp":"{marker}"}}}}"#
        )
    };
    let cases = [
        (
            "/v4.0.0/libpod/containers/create",
            "a libpod container create",
        ),
        ("/libpod/containers/create", "one without a version"),
        ("/v4.0.0/libpod%2Fcontainers/create", "an encoded slash"),
    ];
    for (i, (target, what)) in cases.iter().enumerate() {
        let marker = format!("{u}-{i}");
        made.markers.push(marker.clone());
        let answer = raw(&o.socket, &post(target, spec(&marker).as_bytes()));
        refused(&mut f, &answer, 403, &marker, what);
        f.check(
            answer.contains("/libpod/"),
            format!("{what}: names the API"),
        );
    }
    let ping = raw(
        &o.socket,
        b"GET /v4.0.0/libpod/_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n",
    );
    f.check(
        status(&ping) != 403 && !ping.contains("sandguard:"),
        format!("a libpod read passes: {ping}"),
    );
    f.none();
}

#[test]
fn create_bodies_the_proxy_cannot_stamp_are_refused() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-bodies");
    let mut made = Made::default();
    let mut f = Faults::default();
    let mut o = proxy_owner(&s);
    let u = unique();
    let body = |i: usize| container("Labels", &format!("{u}-{i}"));
    // Invalid UTF-8 inside a string: Go reads it (as U+FFFD), serde does not.
    let invalid_utf8: Vec<u8> = body(2)
        .replace("sleep", "sl\u{1}ep")
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xff } else { b })
        .collect();
    let pad = |body: String| body.replacen('{', &format!("{{{}", " ".repeat(9 << 20)), 1);
    let padded = pad(body(3));
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            body(0).replace("3600", r"\ud800").into(),
            400,
            "a lone surrogate",
        ),
        (
            [body(1).as_bytes(), b" x"].concat(),
            400,
            "bytes after the object",
        ),
        (invalid_utf8, 400, "invalid UTF-8 in a string"),
        (padded.into(), 413, "a body over 8 MiB"),
        (b"[1]".to_vec(), 400, "not an object"),
    ];
    for (i, (bytes, code, what)) in cases.into_iter().enumerate() {
        let marker = format!("{u}-{i}");
        made.markers.push(marker.clone());
        let answer = raw(&o.socket, &post("/v1.41/containers/create", &bytes));
        refused(&mut f, &answer, code, &marker, what);
    }
    let marker = format!("{u}-chunked");
    made.markers.push(marker.clone());
    let padded = pad(container("Labels", &marker));
    let chunked = format!(
        "POST /containers/create HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{padded}\r\n0\r\n\r\n",
        padded.len()
    );
    let answer = raw(&o.socket, chunked.as_bytes());
    refused(&mut f, &answer, 413, &marker, "a chunked body over 8 MiB");

    // `null` is a volume create Go accepts (a random name): it is stamped like `{}`.
    let answer = raw(&o.socket, &post("/volumes/create", b"null"));
    let name = answer_json(&answer)["Name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    f.check(!name.is_empty(), format!("a null volume create: {answer}"));
    made.volumes.push(name.clone());
    f.eq(
        session_of("volume", &name),
        o.session.clone(),
        "a null volume create: session",
    );
    let claim = format!("volume/{name}");
    f.check(
        o.journal().contains(&claim),
        "a null volume create: claimed",
    );
    o.kill_and_wait();
    f.check(!volume_exists(&name), "a null volume create: reclaimed");
    f.none();
}

/// Docker's older hijack, as dockerode sends `exec.start()` without `hijack` (testcontainers-
/// node's `container.exec`): an exec start with no `Upgrade` through the proxy gets the
/// daemon's `200` and the command's output, streamed until the daemon closes.
#[test]
fn an_exec_start_without_upgrade_streams_its_output() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-legacy-exec");
    let mut made = Made::default();
    let mut f = Faults::default();
    let mut o = proxy_owner(&s);
    let marker = unique();
    made.markers.push(marker.clone());
    let answer = raw(
        &o.socket,
        &post(
            "/v1.41/containers/create",
            container("Labels", &marker).as_bytes(),
        ),
    );
    stamped(&mut f, &o, &answer, &marker, "the container");
    let id = answer_json(&answer)["Id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let started = raw(
        &o.socket,
        &post(&format!("/v1.41/containers/{id}/start"), b""),
    );
    f.check(status(&started) == 204, format!("started: {started}"));
    let exec = br#"{"Cmd":["echo","hi-from-legacy-exec"],"AttachStdout":true,"AttachStderr":true,"Tty":true}"#;
    let created = raw(
        &o.socket,
        &post(&format!("/v1.41/containers/{id}/exec"), exec),
    );
    let exec_id = answer_json(&created)["Id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    f.check(status(&created) == 201, format!("exec created: {created}"));
    let body = br#"{"Detach":false,"Tty":true}"#;
    let out = raw(
        &o.socket,
        &post(&format!("/v1.41/exec/{exec_id}/start"), body),
    );
    f.check(status(&out) == 200, format!("exec started: {out}"));
    f.check(
        out.contains("hi-from-legacy-exec"),
        format!("the output came through: {out:?}"),
    );
    o.kill_and_wait();
    f.check(marked(&marker).is_empty(), "reclaimed");
    f.none();
}
