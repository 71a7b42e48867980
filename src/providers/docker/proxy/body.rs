//! Message bodies, copied by their framing as they arrive: `Content-Length`, chunked (size
//! lines, extensions and trailers copied verbatim), or until the connection ends. A body can
//! also be read whole, within a limit, for the create requests and answers the proxy rewrites
//! or reads; a body over that limit fails with an error [`is_too_large`] recognises.

use std::io;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::http::Framing;

/// Copies a body by its framing. With `keep`, the decoded payload is also appended to it.
pub(crate) async fn copy_body<R, W>(
    r: &mut R,
    w: &mut W,
    framing: Framing,
    mut keep: Option<&mut Vec<u8>>,
) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match framing {
        Framing::None => Ok(()),
        Framing::Length(n) => copy_exact(r, w, n, keep).await,
        Framing::UntilClose => {
            copy_tee(r, w, u64::MAX, keep.as_deref_mut()).await?;
            Ok(())
        }
        Framing::Chunked => copy_chunked(r, w, keep).await,
    }
}

async fn copy_exact<R, W>(
    r: &mut R,
    w: &mut W,
    n: u64,
    keep: Option<&mut Vec<u8>>,
) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if copy_tee(r, w, n, keep).await? < n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "body cut short",
        ));
    }
    Ok(())
}

/// Copies up to `limit` bytes as they arrive (no buffering beyond one read), flushing each.
async fn copy_tee<R, W>(
    r: &mut R,
    w: &mut W,
    limit: u64,
    mut keep: Option<&mut Vec<u8>>,
) -> io::Result<u64>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut done = 0u64;
    while done < limit {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            break;
        }
        let n = buf
            .len()
            .min((limit - done).min(usize::MAX as u64) as usize);
        w.write_all(&buf[..n]).await?;
        if let Some(k) = keep.as_deref_mut() {
            k.extend_from_slice(&buf[..n]);
        }
        r.consume(n);
        done += n as u64;
        w.flush().await?;
    }
    Ok(done)
}

/// Copies a chunked body verbatim: size lines, data, and the trailer section.
async fn copy_chunked<R, W>(r: &mut R, w: &mut W, mut keep: Option<&mut Vec<u8>>) -> io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    loop {
        let line = read_line(r).await?;
        w.write_all(&line).await?;
        let text = std::str::from_utf8(&line).map_err(|_| bad("bad chunk size"))?;
        let size = text.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            loop {
                let trailer = read_line(r).await?;
                w.write_all(&trailer).await?;
                if trailer == b"\r\n" || trailer == b"\n" {
                    return w.flush().await;
                }
            }
        }
        copy_exact(r, w, size, keep.as_deref_mut()).await?;
        let end = read_line(r).await?;
        w.write_all(&end).await?;
        w.flush().await?;
    }
}

async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    (&mut *r).take(4096).read_until(b'\n', &mut line).await?;
    if !line.ends_with(b"\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "chunk framing cut short",
        ));
    }
    Ok(line)
}

/// Reads a whole body (decoded) of at most `limit` bytes as sent (chunk framing included).
pub(crate) async fn read_body<R: AsyncBufRead + Unpin>(
    r: &mut R,
    framing: Framing,
    limit: u64,
) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    let mut sink = Limited(limit);
    copy_body(r, &mut sink, framing, Some(&mut data)).await?;
    Ok(data)
}

/// The error of a body over its limit (see [`is_too_large`]).
#[derive(Debug)]
struct TooLarge;

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("message too large")
    }
}

impl std::error::Error for TooLarge {}

/// Whether reading a body failed because it was over its limit.
pub(crate) fn is_too_large(e: &io::Error) -> bool {
    e.get_ref().is_some_and(
        <dyn std::error::Error + std::marker::Send + std::marker::Sync + 'static>::is::<TooLarge>,
    )
}

/// A writer that discards, failing once more than its limit was written.
struct Limited(u64);

impl AsyncWrite for Limited {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        if buf.len() as u64 > self.0 {
            return std::task::Poll::Ready(Err(io::Error::other(TooLarge)));
        }
        self.0 -= buf.len() as u64;
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Reads a whole body of at most `limit` bytes: the raw bytes as received, and decoded.
pub(crate) async fn read_buffered<R: AsyncBufRead + Unpin>(
    r: &mut R,
    framing: Framing,
    limit: u64,
) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut raw = Vec::new();
    let mut data = Vec::new();
    let mut sink = Limited(limit);
    {
        let mut tee = Tee(&mut raw, &mut sink);
        copy_body(r, &mut tee, framing, Some(&mut data)).await?;
    }
    Ok((raw, data))
}

/// Writes into a `Vec` and a limit at once.
struct Tee<'a>(&'a mut Vec<u8>, &'a mut Limited);

impl AsyncWrite for Tee<'_> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let this = &mut *self;
        match std::pin::Pin::new(&mut *this.1).poll_write(cx, buf) {
            std::task::Poll::Ready(Ok(n)) => {
                this.0.extend_from_slice(&buf[..n]);
                std::task::Poll::Ready(Ok(n))
            }
            other => other,
        }
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::docker::proxy::http::{read_head, Head};

    #[tokio::test]
    async fn chunked_bodies_are_copied_verbatim_and_decoded() {
        let wire = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let mut r = tokio::io::BufReader::new(&wire[..]);
        let mut out = Vec::new();
        let mut data = Vec::new();
        copy_body(&mut r, &mut out, Framing::Chunked, Some(&mut data))
            .await
            .unwrap();
        assert_eq!(out, &wire[..wire.len() - 4]);
        assert_eq!(data, b"Wikipedia");
        let head = read_head(&mut r).await.unwrap();
        assert!(matches!(head, Some(Head::Partial(b)) if b == b"NEXT"));
    }

    #[tokio::test]
    async fn bodies_over_the_limit_are_recognised() {
        let wire = b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n";
        let mut r = tokio::io::BufReader::new(&wire[..]);
        // The limit counts the bytes as sent, chunk framing included.
        let e = read_body(&mut r, Framing::Chunked, 23).await.unwrap_err();
        assert!(is_too_large(&e), "{e}");
        let mut r = tokio::io::BufReader::new(&wire[..]);
        assert_eq!(
            read_body(&mut r, Framing::Chunked, 24).await.unwrap(),
            b"Wikipedia"
        );
        let e = io::Error::other("message too large");
        assert!(!is_too_large(&e), "only the limit's own error");
    }
}
