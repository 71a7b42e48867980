//! `[notify]` through the real binary: each event sent once, in the documented shape
//! (`book/src/notifications.md`), to a local webhook server and to a command; a flood is one
//! event with a count; a webhook that answers 500 is retried then given up and logged without
//! its URL's path; a webhook that hangs never delays a reclaim.
//!
//! - [`sweep`]: the sweep's events (`orphans_reclaimed`, `reclaim_pending` then
//!   `pending_finished`, `detached_alive`, `sweeper_failing` and `sweeper_recovered`).
//! - [`sidecar`]: the sidecar's (`limit_reached`, `reclaim_pending` at the session's end).
//! - [`delivery`]: failing endpoints.
//!
//! [`Hook`] is the webhook: a std `TcpListener` on loopback, one thread, that records each
//! request's path and JSON body and answers as told ([`Answer`]).

mod config;
mod delivery;
mod sidecar;
mod sweep;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::plugin::{config, Plugin};
use crate::support::*;

/// How the webhook answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Ok,
    Status500,
    /// Reads the request and never answers (the connection is held open).
    Hang,
}

/// A local webhook; see the module docs.
pub(crate) struct Hook {
    pub port: u16,
    got: Arc<Mutex<Vec<serde_json::Value>>>,
}

/// The path the webhook URL carries, standing in for a Slack URL's token: never in a log.
pub(crate) const TOKEN: &str = "T0KEN-in-the-path";

impl Hook {
    pub fn start(answer: Answer) -> Hook {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let seen = got.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let seen = seen.clone();
                if let Some(stream) = serve(stream, answer, &seen) {
                    held.push(stream);
                }
            }
        });
        Hook { port, got }
    }

    /// `http://127.0.0.1:PORT/hooks/TOKEN`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks/{TOKEN}", self.port)
    }

    /// Every request body so far.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.got.lock().unwrap().clone()
    }

    /// The bodies whose `event` is `kind`.
    pub fn of(&self, kind: &str) -> Vec<serde_json::Value> {
        of(&self.events(), kind)
    }
}

fn of(events: &[serde_json::Value], kind: &str) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|e| e["event"] == kind)
        .cloned()
        .collect()
}

/// Reads one request and answers it; a hanging answer returns the stream to hold.
fn serve(
    stream: TcpStream,
    answer: Answer,
    seen: &Mutex<Vec<serde_json::Value>>,
) -> Option<TcpStream> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    assert!(
        line.starts_with("POST /hooks/"),
        "a POST to the URL: {line}"
    );
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
    seen.lock().unwrap().push(value);
    let mut stream = stream;
    match answer {
        Answer::Hang => Some(stream),
        Answer::Ok | Answer::Status500 => {
            let status = if answer == Answer::Ok {
                "200 OK"
            } else {
                "500 Internal Server Error"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            None
        }
    }
}

/// A command that appends each event (its stdin) to a file.
pub(crate) struct Sink(pub PathBuf);

impl Sink {
    pub fn new(s: &Scratch) -> Sink {
        Sink(s.path().join("events.jsonl"))
    }

    /// `command = [...]` for it.
    pub fn command(&self) -> String {
        format!(
            "command = [\"sh\", \"-c\", \"cat >> {}\"]\n",
            self.0.display()
        )
    }

    pub fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
            .collect()
    }

    pub fn of(&self, kind: &str) -> Vec<serde_json::Value> {
        of(&self.events(), kind)
    }
}

/// A scratch directory named `name` whose config has the `acme` plugin (a 2 s reclaim
/// deadline), to which a test appends its `[notify]`.
pub(crate) fn acme_rig(name: &str) -> (Scratch, Plugin, PathBuf) {
    let s = Scratch::new(name);
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "2s", &[&acme]);
    (s, acme, config)
}

/// `[notify]` with `lines` (short retries unless they say otherwise).
pub(crate) fn notify_table(lines: &str) -> String {
    format!("\n[notify]\n{lines}")
}

/// Appends `[notify]` with `lines` to the config file at `config`.
pub(crate) fn with_notify(config: &Path, lines: &str) {
    append(config, &notify_table(lines));
}

/// Appends `text` to the config file at `path`.
pub(crate) fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// Checks what every event carries: `event`, `host`, `at` (RFC 3339 UTC), and a `text` that
/// starts `sandguard on HOST: ` and never carries the webhook's token.
pub(crate) fn check_common(e: &serde_json::Value, kind: &str) {
    assert_eq!(e["event"], kind, "{e}");
    let host = e["host"].as_str().expect("host");
    assert!(!host.is_empty(), "{e}");
    let at = e["at"].as_str().expect("at");
    assert!(
        at.len() == 20 && at.ends_with('Z') && at.contains('T'),
        "{e}"
    );
    let text = e["text"].as_str().expect("text");
    assert!(text.starts_with(&format!("sandguard on {host}: ")), "{e}");
    assert!(!e.to_string().contains(TOKEN), "{e}");
}
