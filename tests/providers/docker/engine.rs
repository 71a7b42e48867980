//! Two small Engine API stand-ins for the Docker trust tests, both speaking just enough
//! HTTP/1.1 (one request per connection, answered with `Connection: close`):
//!
//! - [`faulty_forwarder`]: a TCP listener in front of the real daemon that answers 500 to
//!   the requests a test picks (every volume listing, say) and forwards everything else to
//!   `/var/run/docker.sock`.
//! - [`serve`]: a scripted fake daemon on a unix socket, for states a real daemon cannot be
//!   brought into on demand (a stale network endpoint of a container that no longer exists).
//!
//! Both run on threads until the test process ends, like `support::tcp_to_docker_socket`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

/// One request as the client sent it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The path without the `/v1.NN` version prefix and without the query.
    pub path: String,
    /// The request line and headers, as sent.
    pub head: String,
    pub body: Vec<u8>,
}

impl Request {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Reads one request (head, then a `Content-Length` body); `None` at EOF or on garbage.
fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let end = line == "\r\n";
        head.push_str(&line);
        if end {
            break;
        }
    }
    let mut first = head.lines().next()?.split(' ');
    let method = first.next()?.to_string();
    let target = first.next()?;
    let path = target.split('?').next()?;
    let path = match path.strip_prefix("/v1.") {
        Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => path,
    }
    .to_string();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        head,
        body,
    })
}

fn respond(out: &mut impl Write, status: u16, body: &str) {
    let reason = match status {
        200 => "OK",
        204 => "No Content",
        403 => "Forbidden",
        404 => "Not Found",
        _ => "Error",
    };
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = out.flush();
}

/// A `tcp://127.0.0.1:PORT` address that reaches the real daemon, except that every request
/// `fails` picks is answered 500 (as a broken volume plugin fails every volume listing).
pub fn faulty_forwarder(fails: fn(&Request) -> bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&tcp);
                let Some(req) = read_request(&mut reader) else {
                    return;
                };
                let mut out = &tcp;
                if fails(&req) {
                    respond(
                        &mut out,
                        500,
                        r#"{"message":"injected by the test: a plugin is broken"}"#,
                    );
                    return;
                }
                forward(&req, &mut out);
            });
        }
    });
    format!("tcp://{addr}")
}

/// Sends `req` to the real daemon with `Connection: close` and copies the answer back whole.
fn forward(req: &Request, out: &mut impl Write) {
    let Ok(mut unix) = UnixStream::connect("/var/run/docker.sock") else {
        respond(
            out,
            502,
            r#"{"message":"test forwarder: no docker socket"}"#,
        );
        return;
    };
    let head: String = req
        .head
        .split_inclusive("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:") && *l != "\r\n")
        .collect();
    let _ = unix.write_all(head.as_bytes());
    let _ = unix.write_all(b"Connection: close\r\n\r\n");
    let _ = unix.write_all(&req.body);
    let _ = std::io::copy(&mut unix, out);
}

/// What the fake daemon answers: status and JSON body for one request.
pub type Handler = dyn Fn(&Request) -> (u16, String) + Send + Sync;

/// Serves `handler` on a unix socket at `path`; returns the `unix://` address.
pub fn serve(path: &Path, handler: Arc<Handler>) -> String {
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let handler = handler.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                if let Some(req) = read_request(&mut reader) {
                    let (status, body) = handler(&req);
                    respond(&mut &stream, status, &body);
                }
            });
        }
    });
    format!("unix://{}", path.display())
}
