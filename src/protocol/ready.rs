//! The sidecar's answer on its stdout, read by whoever started it (the wrapper, an SDK):
//! `ready SESSION [NAME=VALUE ...]` once it holds the session (journal on disk, lock held), or
//! `error MESSAGE` when it could not start. Written and read here only.
//!
//! Each word after the session is one variable the guarded program gets: the Docker proxy's
//! `DOCKER_HOST=unix:///…/docker.sock`, the cloud proxy's `E2B_API_URL=http://127.0.0.1:PORT`
//! and `DAYTONA_API_URL=http://127.0.0.1:PORT/api`. Values hold no whitespace. For
//! compatibility with sidecars that wrote `ready SESSION DOCKER_HOST`, a word without `=` is
//! read as `DOCKER_HOST`.

use std::fmt;

/// What a sidecar said when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadyLine {
    /// It guards `session`; `env` is what the program gets (its proxies' addresses), in order.
    Ready {
        session: String,
        env: Vec<(String, String)>,
    },
    /// It could not start, and why.
    Error(String),
}

impl ReadyLine {
    /// Reads one line (with or without its `\n`). Anything that is neither form is an error
    /// that quotes (a little of) it; an empty line means the sidecar exited without a word.
    pub(crate) fn parse(line: &str) -> ReadyLine {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("ready ") {
            let mut words = rest.split_whitespace();
            if let Some(session) = words.next() {
                return ReadyLine::Ready {
                    session: session.to_string(),
                    env: words.map(assignment).collect(),
                };
            }
        }
        if let Some(reason) = line.strip_prefix("error ") {
            return ReadyLine::Error(reason.to_string());
        }
        if line.is_empty() {
            return ReadyLine::Error("the sidecar exited before it was ready".into());
        }
        ReadyLine::Error(format!(
            "unexpected answer from the sidecar: \"{}\"",
            super::echo(line.as_bytes())
        ))
    }
}

/// One `NAME=VALUE` word; a word without `=` is the Docker proxy's address of old.
fn assignment(word: &str) -> (String, String) {
    match word.split_once('=') {
        Some((name, value)) => (name.to_string(), value.to_string()),
        None => ("DOCKER_HOST".to_string(), word.to_string()),
    }
}

impl fmt::Display for ReadyLine {
    /// The line as the sidecar writes it, without its `\n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadyLine::Ready { session, env } => {
                write!(f, "ready {session}")?;
                for (name, value) in env {
                    write!(f, " {name}={value}")?;
                }
                Ok(())
            }
            ReadyLine::Error(reason) => write!(f, "error {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_lines_round_trip_and_anything_else_is_an_error() {
        for line in [
            ReadyLine::Ready {
                session: "abc".into(),
                env: vec![],
            },
            ReadyLine::Ready {
                session: "abc".into(),
                env: vec![
                    ("DOCKER_HOST".into(), "unix:///s/docker.sock".into()),
                    ("E2B_API_URL".into(), "http://127.0.0.1:4000".into()),
                ],
            },
            ReadyLine::Error("cannot open the state directory".into()),
        ] {
            assert_eq!(ReadyLine::parse(&format!("{line}\n")), line);
        }
        assert_eq!(
            ReadyLine::parse("ready abc unix:///old.sock"),
            ReadyLine::Ready {
                session: "abc".into(),
                env: vec![("DOCKER_HOST".into(), "unix:///old.sock".into())],
            },
            "a word without `=` is the Docker proxy's address"
        );
        assert!(matches!(ReadyLine::parse(""), ReadyLine::Error(_)));
        assert!(matches!(ReadyLine::parse("ready"), ReadyLine::Error(_)));
        let ReadyLine::Error(e) = ReadyLine::parse("\u{1b}[2Jgarbage") else {
            panic!()
        };
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
