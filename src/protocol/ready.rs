//! The sidecar's answer on its stdout, read by whoever started it (the wrapper, an SDK):
//! `ready SESSION [DOCKER_HOST]` once it holds the session (journal on disk, lock held), or
//! `error MESSAGE` when it could not start. Written and read here only.

use std::fmt;

/// What a sidecar said when it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyLine {
    /// It guards `session`; `docker_host` is its Docker API proxy's address, when it serves one.
    Ready {
        session: String,
        docker_host: Option<String>,
    },
    /// It could not start, and why.
    Error(String),
}

impl ReadyLine {
    /// Reads one line (with or without its `\n`). Anything that is neither form is an error
    /// that quotes (a little of) it; an empty line means the sidecar exited without a word.
    pub fn parse(line: &str) -> ReadyLine {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("ready ") {
            let mut words = rest.split_whitespace();
            if let Some(session) = words.next() {
                return ReadyLine::Ready {
                    session: session.to_string(),
                    docker_host: words.next().map(str::to_string),
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

impl fmt::Display for ReadyLine {
    /// The line as the sidecar writes it, without its `\n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadyLine::Ready {
                session,
                docker_host: Some(host),
            } => write!(f, "ready {session} {host}"),
            ReadyLine::Ready { session, .. } => write!(f, "ready {session}"),
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
                docker_host: None,
            },
            ReadyLine::Ready {
                session: "abc".into(),
                docker_host: Some("unix:///s/docker.sock".into()),
            },
            ReadyLine::Error("cannot open the state directory".into()),
        ] {
            assert_eq!(ReadyLine::parse(&format!("{line}\n")), line);
        }
        assert!(matches!(ReadyLine::parse(""), ReadyLine::Error(_)));
        assert!(matches!(ReadyLine::parse("ready"), ReadyLine::Error(_)));
        let ReadyLine::Error(e) = ReadyLine::parse("\u{1b}[2Jgarbage") else {
            panic!()
        };
        assert!(!e.contains('\u{1b}'), "{e}");
    }
}
