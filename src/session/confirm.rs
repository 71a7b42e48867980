//! The one way an owner tells its sidecar a claim, release or detach **and knows it was
//! recorded**: [`send`] writes the control line (one `write`, atomic on a pipe) and returns only
//! once the sidecar has journaled its answer and the journal is on disk. `sandguard claim`
//! (and `release`, `detach`), [`crate::Guard`]'s methods and the Python helper (which runs the
//! CLI) all come here; heartbeats and `bye` are not confirmed (a heartbeat is answered by
//! nothing, and `bye` by its outcome line).
//!
//! The pipe is one-way, so the answer is read where the sidecar writes it: the session's
//! journal. The journal's length is noted before the write; the answer is the first matching
//! record after that point (a `claim`/`release`/`detach` of the same target, or a `refused` of
//! it), waited for at most [`CONFIRM_TIMEOUT`], polling from 0.2 ms up to 20 ms. Then the
//! journal is `fdatasync`ed from this side too, so a sidecar SIGKILLed the moment this returns
//! cannot lose what it recorded.
//!
//! Decisions:
//! - A refusal is an error ([`ConfirmError::Refused`]) with the sidecar's reason: the owner
//!   must not believe a sandbox is guarded when it is not.
//! - A sidecar that is gone before the write is [`ConfirmError::Gone`]; one that goes away
//!   while the answer is awaited (its pipe has no reader) is [`ConfirmError::WentAway`]:
//!   either way nothing may be assumed recorded.
//! - The sidecar records nothing for a detach of what the session does not own (it logs it):
//!   such a detach times out here, and the message says where to look.

use std::io::{Read, Seek, SeekFrom};
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::backoff::Backoff;
use crate::ledger::Record;
use crate::protocol::{Command, Target};

/// How long [`send`] waits for the sidecar to journal its answer.
pub(crate) const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a line was not confirmed.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    #[error("the session's sidecar is gone; nothing was recorded")]
    Gone,
    #[error("cannot write to the session's control pipe: {0}")]
    Write(#[source] std::io::Error),
    #[error("the line was sent, but it cannot be confirmed: the session's journal {} cannot be read ({source}); is this the state directory the session was started with?", path.display())]
    Journal {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the line was sent, but it cannot be confirmed: {0}")]
    Unconfirmable(String),
    #[error("cannot read the session's journal: {0}")]
    Read(#[source] std::io::Error),
    #[error("the session's sidecar went away before it recorded the line")]
    WentAway,
    #[error("the session's sidecar did not record the line within {CONFIRM_TIMEOUT:?}{}", if *.detach { " (a detach of what the session does not own is only logged, in the session's log)" } else { "" })]
    Timeout { detach: bool },
    #[error("the session's sidecar refused {target}: {reason}")]
    Refused { target: Target, reason: String },
    #[error("cannot sync the journal {}: {source}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Sends `command` (a claim, release or detach) on `pipe`, the session's control pipe, and
/// waits until the sidecar has recorded its answer in `journal` (see the module docs).
pub(crate) fn send(
    pipe: BorrowedFd<'_>,
    journal: &Path,
    command: &Command,
) -> Result<(), ConfirmError> {
    let (Command::Claim(target) | Command::Release(target) | Command::Detach(target)) = command
    else {
        return send_unconfirmed(pipe, command);
    };
    let opened = std::fs::File::open(journal);
    let offset = opened
        .as_ref()
        .ok()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    send_unconfirmed(pipe, command)?;
    let mut file = opened.map_err(|source| ConfirmError::Journal {
        path: journal.to_path_buf(),
        source,
    })?;
    wait_for_answer(&mut file, offset, command, target, pipe)?;
    file.sync_data().map_err(|source| ConfirmError::Sync {
        path: journal.to_path_buf(),
        source,
    })
}

/// Writes the line and nothing more: for what is answered by nothing (a heartbeat), or where
/// the journal cannot be found (the caller says the line is unconfirmed).
pub(crate) fn send_unconfirmed(
    pipe: BorrowedFd<'_>,
    command: &Command,
) -> Result<(), ConfirmError> {
    match crate::unix::write_without_sigpipe(pipe, command.to_line().as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ConfirmError::Gone),
        Err(e) => Err(ConfirmError::Write(e)),
    }
}

/// Waits for the record that answers `command`, after `offset` in the journal.
fn wait_for_answer(
    file: &mut std::fs::File,
    offset: u64,
    command: &Command,
    target: &Target,
    pipe: BorrowedFd<'_>,
) -> Result<(), ConfirmError> {
    let deadline = Instant::now() + CONFIRM_TIMEOUT;
    let mut pos = offset;
    let pause = Backoff::new(Duration::from_micros(200), Duration::from_millis(20));
    let mut polls = 0;
    loop {
        let mut read = Vec::new();
        file.seek(SeekFrom::Start(pos))
            .and_then(|_| file.read_to_end(&mut read))
            .map_err(ConfirmError::Read)?;
        // Only whole lines: the last one may still be being written.
        let complete = read.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in read[..complete].split(|&b| b == b'\n') {
            match answer(line, command, target) {
                Some(Answer::Recorded) => return Ok(()),
                Some(Answer::Refused(reason)) => {
                    return Err(ConfirmError::Refused {
                        target: target.clone(),
                        reason,
                    })
                }
                None => {}
            }
        }
        pos += complete as u64;
        if crate::unix::pipe_has_no_reader(pipe) {
            return Err(ConfirmError::WentAway);
        }
        if Instant::now() >= deadline {
            let detach = matches!(command, Command::Detach(_));
            return Err(ConfirmError::Timeout { detach });
        }
        polls += 1;
        std::thread::sleep(pause.delay(polls));
    }
}

/// How the sidecar answered a line, as its journal says.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// The claim, release or detach is recorded.
    Recorded,
    /// It was refused, for the reason journaled.
    Refused(String),
}

/// Whether one journal line answers `command`, and how.
fn answer(line: &[u8], command: &Command, target: &Target) -> Option<Answer> {
    let entry = crate::ledger::decode_line(line)?;
    let is = |p: &str, i: &str| p == target.provider && i == target.id;
    match (command, entry) {
        // A claim or a detach may be journaled pinned to the object it names
        // (`Target::answers`).
        (Command::Claim(_), Record::Claim { provider, id, .. })
        | (Command::Detach(_), Record::Detach { provider, id, .. })
            if (Target {
                provider: provider.clone(),
                id: id.clone(),
            })
            .answers(target) =>
        {
            Some(Answer::Recorded)
        }
        (Command::Release(_), Record::Release { provider, id }) if is(&provider, &id) => {
            Some(Answer::Recorded)
        }
        // A claim pinned when it arrived may be refused as pinned (another session holds
        // that object).
        (
            _,
            Record::Refused {
                provider,
                id,
                reason,
            },
        ) if (Target {
            provider: provider.clone(),
            id: id.clone(),
        })
        .answers(target) =>
        {
            Some(Answer::Refused(reason))
        }
        _ => None,
    }
}
