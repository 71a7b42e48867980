//! Just enough HTTP/1.1 for a byte-faithful proxy: read a message head, parse the request or
//! status line and the headers that frame a body ([`super::body`] copies the bodies), and
//! rewrite a create request's JSON body with the session's labels.
//!
//! Nothing here normalises what it forwards: heads go out as they came in, chunked bodies are
//! copied chunk by chunk with their extensions and trailers. Only a create request whose body
//! is rewritten gets a new head (same lines, a fresh `Content-Length`, no `Transfer-Encoding`).

use std::collections::BTreeMap;
use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest message head read before the bytes are treated as not HTTP.
pub const MAX_HEAD: usize = 64 * 1024;
/// The largest create body buffered for labelling; a larger one passes through unlabelled.
pub const MAX_CREATE_BODY: u64 = 8 * 1024 * 1024;

/// What reading a head produced.
#[derive(Debug)]
pub enum Head {
    /// A complete head, ending with its empty line.
    Complete(Vec<u8>),
    /// EOF (or an oversized head) before the empty line: the bytes read so far.
    Partial(Vec<u8>),
}

/// How a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Responses only: the body ends when the daemon closes the connection.
    UntilClose,
}

/// A parsed message head. `lines` are the header lines as received, without their CRLF.
#[derive(Debug)]
pub struct Message {
    /// Request: method, target. Response: version, status code (as text).
    pub first: (String, String),
    pub lines: Vec<String>,
    request_line: String,
}

/// Which Docker object a request creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    Container,
    Network,
    Volume,
}

/// Reads one head: lines up to and including the empty one. Empty lines before a request
/// line are skipped (RFC 9112 §2.2). `Ok(None)` is a clean EOF between messages.
pub async fn read_head<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Option<Head>> {
    let mut head = Vec::new();
    loop {
        let start = head.len();
        let n = (&mut *r)
            .take((MAX_HEAD - start) as u64 + 1)
            .read_until(b'\n', &mut head)
            .await?;
        if n == 0 {
            return Ok((!head.is_empty()).then_some(Head::Partial(head)));
        }
        let line = &head[start..];
        if !line.ends_with(b"\n") || head.len() > MAX_HEAD {
            return Ok(Some(Head::Partial(head)));
        }
        if line == b"\r\n" || line == b"\n" {
            if start == 0 {
                head.clear();
                continue;
            }
            return Ok(Some(Head::Complete(head)));
        }
    }
}

impl Message {
    /// Parses a complete head; `None` when it is not HTTP/1.x.
    pub fn parse(head: &[u8], response: bool) -> Option<Message> {
        let text = std::str::from_utf8(head).ok()?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let request_line = lines.next()?.to_string();
        let mut words = request_line.splitn(3, ' ');
        let (a, b, c) = (words.next()?, words.next()?, words.next()?);
        let first = if response {
            if !a.starts_with("HTTP/1.") || b.len() != 3 || !b.bytes().all(|d| d.is_ascii_digit()) {
                return None;
            }
            (a.to_string(), b.to_string())
        } else {
            let token = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_graphic());
            if !token(a) || !token(b) || !c.starts_with("HTTP/1.") {
                return None;
            }
            (a.to_string(), b.to_string())
        };
        let mut headers = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (name, _) = line.split_once(':')?;
            if name.is_empty() || name.bytes().any(|c| c.is_ascii_whitespace()) {
                return None;
            }
            headers.push(line.to_string());
        }
        Some(Message {
            first,
            lines: headers,
            request_line,
        })
    }

    /// Every value of a header, trimmed.
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.lines.iter().filter_map(move |l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// The body's framing; `None` when the headers contradict each other.
    pub fn framing(&self, response: bool) -> Option<Framing> {
        if self.values("transfer-encoding").next().is_some() {
            return Some(if self.has_token("transfer-encoding", "chunked") {
                Framing::Chunked
            } else if response {
                Framing::UntilClose
            } else {
                return None;
            });
        }
        let mut lengths = self.values("content-length").map(|v| v.parse::<u64>());
        match lengths.next() {
            Some(Ok(n)) if lengths.all(|m| m.ok() == Some(n)) => Some(Framing::Length(n)),
            Some(_) => None,
            None if response => Some(Framing::UntilClose),
            None => Some(Framing::None),
        }
    }

    /// Asks for `Connection: close`.
    pub fn wants_close(&self) -> bool {
        self.has_token("connection", "close")
    }

    /// Asks to switch protocols (attach, exec start): `Upgrade` or `Connection: Upgrade`.
    pub fn wants_upgrade(&self) -> bool {
        self.values("upgrade").next().is_some() || self.has_token("connection", "upgrade")
    }

    /// The status code of a response.
    pub fn status(&self) -> u16 {
        self.first.1.parse().unwrap_or(0)
    }

    /// The Docker object this request creates, if it is `POST [/vX.Y]/KIND/create`.
    pub fn creates(&self) -> Option<Create> {
        if self.first.0 != "POST" {
            return None;
        }
        let path = self.first.1.split(['?', '#']).next().unwrap_or("");
        let versioned = path
            .strip_prefix("/v")
            .filter(|r| r.starts_with(|c: char| c.is_ascii_digit()));
        let path = match versioned {
            Some(rest) => match rest.split_once('/') {
                Some((v, tail)) if v.bytes().all(|c| c.is_ascii_digit() || c == b'.') => tail,
                _ => return None,
            },
            None => path.strip_prefix('/')?,
        };
        match path.trim_end_matches('/') {
            "containers/create" => Some(Create::Container),
            "networks/create" => Some(Create::Network),
            "volumes/create" => Some(Create::Volume),
            _ => None,
        }
    }

    /// This request's head with a body of `len` bytes: the same lines, the framing replaced.
    pub fn with_length(&self, len: usize) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.request_line);
        let mut typed = false;
        for line in &self.lines {
            let name = line.split(':').next().unwrap_or("").trim();
            if name.eq_ignore_ascii_case("content-length")
                || name.eq_ignore_ascii_case("transfer-encoding")
            {
                continue;
            }
            typed |= name.eq_ignore_ascii_case("content-type");
            out.push_str(line);
            out.push_str("\r\n");
        }
        if !typed && len > 0 {
            out.push_str("Content-Type: application/json\r\n");
        }
        out.push_str(&format!("Content-Length: {len}\r\n\r\n"));
        out.into_bytes()
    }
}

/// The create body with the session's labels merged into its top-level `Labels` (the
/// session's values win). `None` when the body is not a JSON object: it then goes as it came
/// and the daemon judges it.
pub fn stamp(body: &[u8], labels: &BTreeMap<String, String>) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Object(Default::default())
    } else {
        serde_json::from_slice(body).ok()?
    };
    let object = value.as_object_mut()?;
    let entry = object
        .entry("Labels")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if entry.is_null() {
        *entry = serde_json::Value::Object(Default::default());
    }
    let map = entry.as_object_mut()?;
    for (k, v) in labels {
        map.insert(k.clone(), serde_json::Value::String(v.clone()));
    }
    serde_json::to_vec(&value).ok()
}

/// The id a create answer names: `Id` for containers and networks, `Name` for volumes.
pub fn created_id(kind: Create, body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let key = if kind == Create::Volume { "Name" } else { "Id" };
    value.get(key)?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str, response: bool) -> Option<Message> {
        Message::parse(text.as_bytes(), response)
    }

    #[test]
    fn creates_with_and_without_version() {
        let m = |t: &str| msg(&format!("POST {t} HTTP/1.1\r\nHost: d\r\n\r\n"), false).unwrap();
        assert_eq!(
            m("/v1.47/containers/create?name=x").creates(),
            Some(Create::Container)
        );
        assert_eq!(m("/containers/create").creates(), Some(Create::Container));
        assert_eq!(m("/v1.41/networks/create").creates(), Some(Create::Network));
        assert_eq!(m("/volumes/create").creates(), Some(Create::Volume));
        assert_eq!(m("/v1.47/containers/abc/start").creates(), None);
        assert_eq!(m("/v1.x/containers/create").creates(), None);
        let get = msg("GET /containers/create HTTP/1.1\r\n\r\n", false).unwrap();
        assert_eq!(get.creates(), None);
    }

    #[test]
    fn framing_by_headers() {
        let req = |h: &str| msg(&format!("POST / HTTP/1.1\r\n{h}\r\n"), false).unwrap();
        assert_eq!(
            req("Content-Length: 5\r\n").framing(false),
            Some(Framing::Length(5))
        );
        assert_eq!(
            req("Transfer-Encoding: chunked\r\n").framing(false),
            Some(Framing::Chunked)
        );
        assert_eq!(req("").framing(false), Some(Framing::None));
        assert_eq!(
            req("Content-Length: 5\r\nContent-Length: 6\r\n").framing(false),
            None
        );
        let resp = msg("HTTP/1.1 200 OK\r\n\r\n", true).unwrap();
        assert_eq!(resp.framing(true), Some(Framing::UntilClose));
        assert_eq!(resp.status(), 200);
        assert!(msg("HTTP/1.1 200 OK\r\nConnection: Upgrade\r\n\r\n", false).is_none());
        let up = msg(
            "POST /x HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
            false,
        );
        assert!(up.unwrap().wants_upgrade());
    }

    #[test]
    fn garbage_is_not_http() {
        assert!(msg("GARBAGE\r\n\r\n", false).is_none());
        assert!(msg("GET / HTTP/1.1\r\nno colon here\r\n\r\n", false).is_none());
        assert!(msg("GET / SPDY/3\r\n\r\n", false).is_none());
    }

    #[test]
    fn stamping_merges_labels() {
        let labels = BTreeMap::from([("sandguard.session".to_string(), "s1".to_string())]);
        let out = stamp(br#"{"Image":"x","Labels":{"a":"b"}}"#, &labels).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["Labels"]["a"], "b");
        assert_eq!(v["Labels"]["sandguard.session"], "s1");
        assert_eq!(v["Image"], "x");
        let out = stamp(br#"{"Name":"n","Labels":null}"#, &labels).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["Labels"]["sandguard.session"], "s1");
        let out = stamp(b"", &labels).unwrap();
        assert_eq!(out, br#"{"Labels":{"sandguard.session":"s1"}}"#);
        assert!(stamp(b"[1,2]", &labels).is_none());
        assert!(stamp(b"{not json", &labels).is_none());
    }

    #[test]
    fn new_head_replaces_the_framing() {
        let m = msg(
            "POST /containers/create HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap();
        let head = String::from_utf8(m.with_length(12)).unwrap();
        assert_eq!(
            head,
            "POST /containers/create HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn heads_skip_leading_blank_lines() {
        let wire = b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut r = tokio::io::BufReader::new(&wire[..]);
        let Some(Head::Complete(h)) = read_head(&mut r).await.unwrap() else {
            panic!("no head")
        };
        assert_eq!(h, &wire[2..]);
        assert!(read_head(&mut r).await.unwrap().is_none());
    }

    #[test]
    fn ids_from_answers() {
        assert_eq!(
            created_id(Create::Container, br#"{"Id":"abc","Warnings":[]}"#).as_deref(),
            Some("abc")
        );
        assert_eq!(
            created_id(Create::Volume, br#"{"Name":"v1","Driver":"local"}"#).as_deref(),
            Some("v1")
        );
        assert_eq!(created_id(Create::Network, b"{}"), None);
    }
}
