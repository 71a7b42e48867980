//! [`LineReader`]: control lines from a pipe, with memory bounded by one line.
//!
//! The buffer is [`MAX_LINE`] bytes and never grows. A line that fills it without a `\n` is
//! reported once as [`ProtocolError::TooLong`]; the bytes after it are dropped as they arrive,
//! up to the next `\n`, so a writer that never stops cannot make the sidecar allocate.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{parse_line, Command, ProtocolError, MAX_LINE};

/// Reads commands from the control pipe with bounded memory.
///
/// [`LineReader::next`] is cancel-safe, so it can sit in a `select!` arm: its only await is one
/// `read` (itself cancel-safe), and the buffer is consistent on both sides of it.
pub(crate) struct LineReader<R> {
    reader: R,
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Inside an oversized line that was already reported: drop bytes up to the next `\n`.
    skipping: bool,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R) -> LineReader<R> {
        LineReader {
            reader,
            buf: vec![0; MAX_LINE],
            start: 0,
            end: 0,
            skipping: false,
            eof: false,
        }
    }

    /// The next command, an error for a line that is not one, or `None` at end of input. A
    /// read error other than an end-of-file lookalike is returned once, then input ends.
    pub(crate) async fn next(&mut self) -> Option<Result<Command, ProtocolError>> {
        loop {
            if let Some(line) = self.take_line() {
                return Some(line);
            }
            if self.eof {
                return self.take_tail();
            }
            if self.end - self.start == MAX_LINE {
                self.start = 0;
                self.end = 0;
                self.skipping = true;
                return Some(Err(ProtocolError::TooLong));
            }
            self.compact();
            match self.reader.read(&mut self.buf[self.end..]).await {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_eof_like(&e) => self.eof = true,
                Err(e) => {
                    self.eof = true;
                    self.start = self.end;
                    return Some(Err(ProtocolError::Read(e)));
                }
            }
        }
    }

    /// A complete buffered line, parsed; drops the rest of a skipped line as it is found.
    fn take_line(&mut self) -> Option<Result<Command, ProtocolError>> {
        loop {
            let pending = &self.buf[self.start..self.end];
            let Some(pos) = pending.iter().position(|&b| b == b'\n') else {
                if self.skipping {
                    self.start = 0;
                    self.end = 0;
                }
                return None;
            };
            let line = self.start..self.start + pos + 1;
            self.start = line.end;
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            return Some(parse_line(&self.buf[line]));
        }
    }

    /// The last line when input ended without a newline.
    fn take_tail(&mut self) -> Option<Result<Command, ProtocolError>> {
        if self.start == self.end || self.skipping {
            self.skipping = false;
            self.start = self.end;
            return None;
        }
        let tail = self.start..self.end;
        self.start = self.end;
        Some(parse_line(&self.buf[tail]))
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }
}

/// Errors that mean the writer went away, which for a control pipe is the same as EOF.
fn is_eof_like(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncWriteExt, ReadBuf};

    use super::*;
    use crate::protocol::tests::target;

    async fn read_all<R: AsyncRead + Unpin>(r: R) -> Vec<Result<Command, ProtocolError>> {
        let mut reader = LineReader::new(r);
        let mut out = Vec::new();
        while let Some(item) = reader.next().await {
            out.push(item);
        }
        out
    }

    #[tokio::test]
    async fn an_oversized_line_is_reported_once_and_skipped() {
        let (mut tx, rx) = tokio::io::duplex(1024);
        let writer = async move {
            tx.write_all(b"renew\n").await.unwrap();
            tx.write_all(&vec![b'a'; 1 << 20]).await.unwrap();
            tx.write_all(b"\nclaim docker abc\n").await.unwrap();
            drop(tx);
        };
        let (_, got) = tokio::join!(writer, read_all(rx));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0].as_ref().unwrap(), &Command::Renew);
        assert!(matches!(got[1], Err(ProtocolError::TooLong)));
        assert_eq!(
            got[2].as_ref().unwrap(),
            &Command::Claim(target("docker", "abc"))
        );
    }

    #[tokio::test]
    async fn the_longest_allowed_line_passes_and_one_more_byte_does_not() {
        let claim = "claim docker ";
        let id = "i".repeat(MAX_LINE - claim.len() - 1);
        let fits = format!("{claim}{id}\n");
        assert_eq!(fits.len(), MAX_LINE);
        let input = format!("{fits}{claim}{id}i\nbye");
        let got = read_all(input.as_bytes()).await;
        // The id is too long for an id, but the line itself was read whole.
        assert!(matches!(got[0], Err(ProtocolError::BadId(_))), "{got:?}");
        assert!(matches!(got[1], Err(ProtocolError::TooLong)), "{got:?}");
        assert_eq!(got[2].as_ref().unwrap(), &Command::Bye);
        assert_eq!(got.len(), 3);
    }

    #[tokio::test]
    async fn lines_split_across_writes_and_a_final_line_without_newline() {
        let (mut tx, rx) = tokio::io::duplex(8);
        let writer = async move {
            for piece in ["cla", "im dock", "er abc\r", "\nrenew\nrelease", " e2b x1"] {
                tx.write_all(piece.as_bytes()).await.unwrap();
                tx.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        };
        let (_, got) = tokio::join!(writer, read_all(rx));
        let got: Vec<Command> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                Command::Claim(target("docker", "abc")),
                Command::Renew,
                Command::Release(target("e2b", "x1")),
            ]
        );
    }

    #[tokio::test]
    async fn an_oversized_line_cut_by_eof_ends_quietly() {
        let input = vec![b'z'; MAX_LINE * 3];
        let got = read_all(&input[..]).await;
        assert_eq!(got.len(), 1);
        assert!(matches!(got[0], Err(ProtocolError::TooLong)));
        assert!(read_all(&b""[..]).await.is_empty());
    }

    #[tokio::test]
    async fn a_malformed_line_does_not_stop_the_reader() {
        let got = read_all(&b"bogus\n\nbye\n"[..]).await;
        assert!(matches!(got[0], Err(ProtocolError::UnknownVerb(_))));
        assert!(matches!(got[1], Err(ProtocolError::Empty)));
        assert_eq!(got[2].as_ref().unwrap(), &Command::Bye);
    }

    /// Gives `data`, then fails with `kind` on every read.
    struct Failing(&'static [u8], io::ErrorKind);

    impl AsyncRead for Failing {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.0.is_empty() {
                return Poll::Ready(Err(self.1.into()));
            }
            buf.put_slice(self.0);
            self.0 = &[];
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn read_errors_end_the_input_once_reported() {
        let got = read_all(Failing(b"renew\nbye", io::ErrorKind::BrokenPipe)).await;
        let got: Vec<Command> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got, [Command::Renew, Command::Bye]);
        let got = read_all(Failing(b"renew\nby", io::ErrorKind::PermissionDenied)).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(matches!(got[1], Err(ProtocolError::Read(_))));
    }
}
