//! Just enough HTTP/1.1 for a byte-faithful proxy: read a message head, parse the request or
//! status line and the headers that frame a body ([`super::body`] copies the bodies), and
//! write the heads of the requests the proxy rewrites and of the answers it gives itself.
//!
//! Nothing here normalises what it forwards: heads go out as they came in, chunked bodies are
//! copied chunk by chunk with their extensions and trailers. Only a request whose body is
//! rewritten gets a new head (same lines, a fresh `Content-Length`, no `Transfer-Encoding`).
//!
//! Request heads are parsed strictly, because what the proxy cannot read it cannot stamp: a
//! head that is not UTF-8, has an obs-fold continuation line, a line without a colon, a header
//! name that is not a token, a control byte, a version other than HTTP/1.0 or 1.1, or is over
//! [`MAX_HEAD`] is refused (the caller answers 400 or 431 and closes). Go's server accepts some
//! of these (obs-text, folded lines, heads up to 1 MiB), which is exactly why they must not
//! reach it unread. Answers from the daemon are parsed leniently: the daemon is trusted.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest message head read; a longer request head is refused with 431.
pub(crate) const MAX_HEAD: usize = 64 * 1024;
/// The largest create or commit body buffered for rewriting; a larger one is refused (413).
pub(crate) const MAX_CREATE_BODY: u64 = 8 * 1024 * 1024;

/// What reading a head produced.
#[derive(Debug)]
pub(crate) enum Head {
    /// A complete head, ending with its empty line.
    Complete(Vec<u8>),
    /// EOF before the empty line: the bytes read so far.
    Partial(Vec<u8>),
    /// More than [`MAX_HEAD`] bytes without the empty line: the bytes read so far.
    TooLarge(Vec<u8>),
}

/// How a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Responses only: the body ends when the daemon closes the connection.
    UntilClose,
}

/// A parsed message head. `lines` are the header lines as received, without their CRLF.
#[derive(Debug)]
pub(crate) struct Message {
    /// Request: method, target. Response: version, status code (as text).
    pub first: (String, String),
    pub lines: Vec<String>,
    request_line: String,
}

/// Reads one head: lines up to and including the empty one. Empty lines before a request
/// line are skipped (RFC 9112 §2.2). `Ok(None)` is a clean EOF between messages.
pub(crate) async fn read_head<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Option<Head>> {
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
        if head.len() > MAX_HEAD {
            return Ok(Some(Head::TooLarge(head)));
        }
        if !line.ends_with(b"\n") {
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
    /// Parses a complete request head, strictly; `Err` says what is wrong with it.
    pub(crate) fn request(head: &[u8]) -> Result<Message, &'static str> {
        let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let request_line = lines.next().unwrap_or("").to_string();
        let mut words = request_line.splitn(3, ' ');
        let (method, target, version) = (words.next(), words.next(), words.next());
        let (Some(method), Some(target), Some(version)) = (method, target, version) else {
            return Err("the request line is not METHOD TARGET VERSION");
        };
        if !is_token(method) {
            return Err("the request method is not a token");
        }
        if target.is_empty() || target.chars().any(|c| c.is_control() || c == ' ') {
            return Err("the request target is empty or has a control character");
        }
        if version != "HTTP/1.1" && version != "HTTP/1.0" {
            return Err("the request is not HTTP/1.0 or HTTP/1.1");
        }
        let mut headers = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            if line.starts_with([' ', '\t']) {
                return Err("the request head has an obs-fold continuation line");
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err("a request header line has no colon");
            };
            if !is_token(name) {
                return Err("a request header name is not a token");
            }
            if value.chars().any(|c| c.is_control() && c != '\t') {
                return Err("a request header value has a control character");
            }
            headers.push(line.to_string());
        }
        Ok(Message {
            first: (method.to_string(), target.to_string()),
            lines: headers,
            request_line,
        })
    }

    /// Parses a complete response head; `None` when it is not HTTP/1.x.
    pub(crate) fn response(head: &[u8]) -> Option<Message> {
        let text = std::str::from_utf8(head).ok()?;
        let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let status_line = lines.next()?.to_string();
        let mut words = status_line.splitn(3, ' ');
        let (version, code) = (words.next()?, words.next()?);
        if !version.starts_with("HTTP/1.") || code.len() != 3 {
            return None;
        }
        if !code.bytes().all(|d| d.is_ascii_digit()) {
            return None;
        }
        let mut headers = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (name, _) = line.split_once(':')?;
            if name.is_empty() || name.bytes().any(|c| c.is_ascii_whitespace()) {
                return None;
            }
            headers.push(line.to_string());
        }
        Some(Message {
            first: (version.to_string(), code.to_string()),
            lines: headers,
            request_line: status_line,
        })
    }

    /// A request's method.
    pub(crate) fn method(&self) -> &str {
        &self.first.0
    }

    /// A request's target, as received.
    pub(crate) fn target(&self) -> &str {
        &self.first.1
    }

    /// Every value of a header, trimmed.
    pub(crate) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
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

    /// The body's framing; `None` when the headers contradict each other. A request's
    /// `Transfer-Encoding` must be exactly `chunked` on HTTP/1.1, as Go's server demands (it
    /// ignores the header on HTTP/1.0, and framing that Go reads otherwise is refused).
    pub(crate) fn framing(&self, response: bool) -> Option<Framing> {
        if self.values("transfer-encoding").next().is_some() {
            if !response {
                let mut te = self.values("transfer-encoding");
                let chunked = te.next().is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
                let http11 = self.request_line.ends_with(" HTTP/1.1");
                return (chunked && te.next().is_none() && http11).then_some(Framing::Chunked);
            }
            return Some(if self.has_token("transfer-encoding", "chunked") {
                Framing::Chunked
            } else {
                Framing::UntilClose
            });
        }
        let digits = |v: &str| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit());
        let mut lengths = self
            .values("content-length")
            .map(|v| v.parse::<u64>().ok().filter(|_| digits(v)));
        match lengths.next() {
            Some(Some(n)) if lengths.all(|m| m == Some(n)) => Some(Framing::Length(n)),
            Some(_) => None,
            None if response => Some(Framing::UntilClose),
            None => Some(Framing::None),
        }
    }

    /// Asks for `Connection: close`.
    pub(crate) fn wants_close(&self) -> bool {
        self.has_token("connection", "close")
    }

    /// Asks to switch protocols (attach, exec start): `Upgrade` or `Connection: Upgrade`.
    pub(crate) fn wants_upgrade(&self) -> bool {
        self.values("upgrade").next().is_some() || self.has_token("connection", "upgrade")
    }

    /// The status code of a response.
    pub(crate) fn status(&self) -> u16 {
        self.first.1.parse().unwrap_or(0)
    }

    /// Asks for `100 Continue` before it sends its body.
    pub(crate) fn expects_continue(&self) -> bool {
        self.has_token("expect", "100-continue")
    }

    /// This request's head for a rewritten body of `len` bytes: the same lines, the framing
    /// replaced, `Expect` dropped (the proxy already answered it), and the target replaced
    /// when `target` is given.
    pub(crate) fn rewritten(&self, target: Option<&str>, len: usize) -> Vec<u8> {
        let mut out = match target {
            Some(t) => format!("{} {t} {}\r\n", self.first.0, self.version()),
            None => format!("{}\r\n", self.request_line),
        };
        let mut typed = false;
        for line in &self.lines {
            let name = line.split(':').next().unwrap_or("").trim();
            if ["content-length", "transfer-encoding", "expect"]
                .iter()
                .any(|n| name.eq_ignore_ascii_case(n))
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

    fn version(&self) -> &str {
        self.request_line.rsplit(' ').next().unwrap_or("HTTP/1.1")
    }
}

/// RFC 9110 `token`: what a method and a header name must be.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

/// An answer of the proxy's own, closing the connection; the JSON body carries `message`,
/// which Docker clients print as they print the daemon's errors.
pub(crate) fn answer(status: u16, message: &str) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        _ => "Error",
    };
    let body = format!("{}\n", serde_json::json!({ "message": message }));
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> Result<Message, &'static str> {
        Message::request(text.as_bytes())
    }

    #[test]
    fn framing_by_headers() {
        let req = |h: &str| req(&format!("POST / HTTP/1.1\r\n{h}\r\n")).unwrap();
        assert_eq!(
            req("Content-Length: 5\r\n").framing(false),
            Some(Framing::Length(5))
        );
        assert_eq!(
            req("Transfer-Encoding: chunked\r\n").framing(false),
            Some(Framing::Chunked)
        );
        assert_eq!(req("").framing(false), Some(Framing::None));
        for bad in ["5\r\nContent-Length: 6", "+5", "-1", "0x5", "5 5", ""] {
            let m = req(&format!("Content-Length: {bad}\r\n"));
            assert_eq!(m.framing(false), None, "{bad}");
        }
        for te in [
            "gzip",
            "gzip, chunked",
            "chunked\r\nTransfer-Encoding: chunked",
        ] {
            let m = req(&format!("Transfer-Encoding: {te}\r\n"));
            assert_eq!(m.framing(false), None, "{te}");
        }
        let http10 = Message::request(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(
            http10.unwrap().framing(false),
            None,
            "Go ignores it on HTTP/1.0"
        );
        let resp = Message::response(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
        assert_eq!(resp.framing(true), Some(Framing::UntilClose));
        assert_eq!(resp.status(), 200);
        let up = req("Connection: Upgrade\r\nUpgrade: tcp\r\n");
        assert!(up.wants_upgrade());
    }

    #[test]
    fn request_heads_are_parsed_strictly() {
        let ok = req("POST /containers/create HTTP/1.1\r\nHost: d\r\nX-A: b\tc\r\n\r\n").unwrap();
        assert_eq!((ok.method(), ok.target()), ("POST", "/containers/create"));
        assert!(req("GET / HTTP/1.0\nHost: d\n\n").is_ok(), "bare LF");
        assert!(
            req("GET http://d/x?y HTTP/1.1\r\n\r\n").is_ok(),
            "absolute form"
        );
        for bad in [
            "GARBAGE\r\n\r\n",
            "GET / SPDY/3\r\n\r\n",
            "GET / HTTP/1.1 x\r\n\r\n",
            "GET  / HTTP/1.1\r\n\r\n",
            "G(T / HTTP/1.1\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "GET /\x01 HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nno colon here\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A: a\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\n\tX-A: a\r\n\r\n",
            "GET / HTTP/1.1\r\nX A: a\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A : a\r\n\r\n",
            "GET / HTTP/1.1\r\n: a\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n",
            "GET / HTTP/1.1\r\nX-A: a\x00\r\n\r\n",
        ] {
            assert!(req(bad).is_err(), "{bad:?}");
        }
        assert!(Message::request(b"GET / HTTP/1.1\r\nX-A: \xff\r\n\r\n").is_err());
    }

    #[test]
    fn a_rewritten_head_replaces_framing_expect_and_target() {
        let m = req("POST /commit?c=x HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n").unwrap();
        assert!(m.expects_continue());
        let head = String::from_utf8(m.rewritten(None, 12)).unwrap();
        assert_eq!(
            head,
            "POST /commit?c=x HTTP/1.1\r\nHost: d\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n"
        );
        let head = String::from_utf8(m.rewritten(Some("/commit?c=y"), 0)).unwrap();
        assert_eq!(
            head,
            "POST /commit?c=y HTTP/1.1\r\nHost: d\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn own_answers_close_and_say_why() {
        let a = String::from_utf8(answer(413, "sandguard: too large")).unwrap();
        assert!(a.starts_with("HTTP/1.1 413 Content Too Large\r\n"), "{a}");
        assert!(a.contains("Connection: close\r\n"));
        let body = a.split("\r\n\r\n").nth(1).unwrap();
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["message"], "sandguard: too large");
        assert!(a.contains(&format!("Content-Length: {}\r\n", body.len())));
    }

    #[tokio::test]
    async fn heads_skip_leading_blank_lines_and_stop_at_the_limit() {
        let wire = b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut r = tokio::io::BufReader::new(&wire[..]);
        let Some(Head::Complete(h)) = read_head(&mut r).await.unwrap() else {
            panic!("no head")
        };
        assert_eq!(h, &wire[2..]);
        assert!(read_head(&mut r).await.unwrap().is_none());
        let mut r = tokio::io::BufReader::new(&b"GET / HTTP/1.1\r\nHost: x"[..]);
        assert!(matches!(
            read_head(&mut r).await.unwrap(),
            Some(Head::Partial(_))
        ));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        let mut r = tokio::io::BufReader::new(big.as_bytes());
        assert!(matches!(
            read_head(&mut r).await.unwrap(),
            Some(Head::TooLarge(_))
        ));
    }
}
