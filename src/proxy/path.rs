//! A request path read as the services behind both proxies read it before routing: Go's
//! `url.PathUnescape` (Docker, E2B) and `path.Clean` (gorilla/mux); Express decodes and
//! resolves alike (Daytona). Each proxy routes on what these return, so an encoded or
//! dotted path cannot hide a create from it.

/// Percent-decoding as Go's `url.PathUnescape` does it (`+` stays `+`).
pub(crate) fn decode(path: &str) -> Result<Vec<u8>, &'static str> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
            match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => return Err("its request target has a bad % escape"),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// The segments of a path after resolving `.` and `..` and dropping empty ones (Go's
/// `path.Clean`, which mux applies before routing).
pub(crate) fn clean(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for s in path.split('/') {
        match s {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    out
}
