//! `sandguard claim|release|detach PROVIDER ID`: for programs running under a session, one
//! control line written to `$SANDGUARD_FD` (a single `write`, atomic on a pipe), then
//! **confirmed**: the command returns 0 only once the session's sidecar has journaled the
//! line and the journal is on disk.
//!
//! The pipe is one-way, so the confirmation is read where the sidecar writes it: the session's
//! journal (`$SANDGUARD_SESSION` in the state directory). The command notes the journal's
//! length before writing, then waits (at most [`CONFIRM_TIMEOUT`]) for the matching record
//! after that point, and `fdatasync`s the journal itself before it returns, so a sidecar
//! SIGKILLed the moment `claim` returned cannot lose the claim.
//!
//! - The sidecar is the judge of a claim (and of a release or detach): one for a provider it
//!   has not configured, or with an id that can never name a sandbox of that provider (a
//!   Docker container *name*, `..`: [`crate::providers::ids`]), comes back `refused`, and the
//!   command prints the reason and exits 1 at once.
//! - `detach` first asks whether its session owns what it names ([`crate::watch::detach`], the
//!   rule the sidecar applies to every `detach` line): it reads the session's journal and lists
//!   the provider. What the session never claimed and that carries no label of it is refused
//!   there: exit 1, "… is not owned by session …: nothing was detached", and no line is sent
//!   (the sidecar would only log such a detach, journaling nothing, so there would be nothing
//!   to confirm). When ownership cannot be shown either way (the provider is not configured
//!   here, or did not answer within [`crate::watch::CLAIM_LOOKUP`]; the journal cannot be
//!   read) the line is sent and the sidecar judges, as it always did.
//! - Outside a session (`SANDGUARD_FD` unset, or not an open pipe) the commands exit 2 with a
//!   message saying how to get one; a sidecar that is gone exits 1. Bad words exit 2.
//! - The wrapper exports `SANDGUARD_CONFIG` when it read a config file, so the command finds
//!   the same state directory as the sidecar.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::output::Exit;
use crate::config::Settings;
use crate::ledger::{Record, StateDir};
use crate::protocol::{Command, Target};

/// How long the command waits for the sidecar to journal the line.
pub const CONFIRM_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The provider the sandbox lives on (docker, e2b, …)
    provider: String,
    /// The sandbox's id on that provider
    id: String,
}

/// Which line to send.
#[derive(Debug, Clone, Copy)]
pub enum Verb {
    Claim,
    Release,
    Detach,
}

pub fn run(verb: Verb, args: Args, settings: Result<Settings, String>) -> Exit {
    match send(verb, args, settings) {
        Ok(()) => Exit::Ok,
        Err((exit, message)) => {
            eprintln!("sandguard: {message}");
            exit
        }
    }
}

type Failure = (Exit, String);

fn send(verb: Verb, args: Args, settings: Result<Settings, String>) -> Result<(), Failure> {
    let usage = |m: String| (Exit::Usage, m);
    let failure = |m: String| (Exit::Failure, m);
    let target = Target::new(&args.provider, &args.id).map_err(|e| usage(e.to_string()))?;
    let command = match verb {
        Verb::Claim => Command::Claim(target.clone()),
        Verb::Release => Command::Release(target.clone()),
        Verb::Detach => Command::Detach(target.clone()),
    };
    let fd = session_fd().map_err(|m| {
        usage(format!(
            "not inside a sandguard session: {m} (run the program under `sandguard -- CMD`)"
        ))
    })?;
    if let (Verb::Detach, Ok(settings)) = (verb, &settings) {
        owned(settings, &target).map_err(failure)?;
    }
    let journal = journal(settings);
    let offset = journal
        .as_ref()
        .ok()
        .and_then(|(_, file)| file.metadata().ok())
        .map_or(0, |m| m.len());
    let mut pipe = std::fs::File::from(fd);
    match pipe.write_all(command.to_line().as_bytes()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            return Err(failure(
                "the session's sidecar is gone; nothing was recorded".into(),
            ))
        }
        Err(e) => {
            return Err(failure(format!(
                "cannot write to the session's control pipe: {e}"
            )))
        }
    }
    let (path, mut file) = journal.map_err(|m| {
        failure(format!(
            "the line was sent, but it cannot be confirmed: {m}"
        ))
    })?;
    match confirm(&mut file, offset, verb, &target, &pipe)? {
        Confirmed::Done => file
            .sync_data()
            .map_err(|e| failure(format!("cannot sync the journal {}: {e}", path.display()))),
        Confirmed::Refused(reason) => Err(failure(format!(
            "the session's sidecar refused {target}: {reason}"
        ))),
    }
}

enum Confirmed {
    Done,
    Refused(String),
}

/// Waits for the record that answers the line, after `offset` in the journal.
fn confirm(
    file: &mut std::fs::File,
    offset: u64,
    verb: Verb,
    target: &Target,
    pipe: &std::fs::File,
) -> Result<Confirmed, Failure> {
    let deadline = Instant::now() + CONFIRM_TIMEOUT;
    let mut pos = offset;
    let mut pause = Duration::from_micros(200);
    loop {
        let mut read = Vec::new();
        file.seek(SeekFrom::Start(pos))
            .and_then(|_| file.read_to_end(&mut read))
            .map_err(|e| {
                (
                    Exit::Failure,
                    format!("cannot read the session's journal: {e}"),
                )
            })?;
        // Only whole lines: the last one may still be being written.
        let complete = read.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in read[..complete].split(|&b| b == b'\n') {
            if let Some(answer) = answers(line, verb, target) {
                return Ok(answer);
            }
        }
        pos += complete as u64;
        if crate::unix::pipe_has_no_reader(pipe.as_fd()) {
            return Err((
                Exit::Failure,
                "the session's sidecar went away before it recorded the line".into(),
            ));
        }
        if Instant::now() >= deadline {
            // The sidecar records no answer to a detach it finds not owned: it logs it.
            let hint = match verb {
                Verb::Detach => " (a detach of what the session does not own is only logged, in the session's log)",
                Verb::Claim | Verb::Release => "",
            };
            return Err((
                Exit::Failure,
                format!("the session's sidecar did not record the line within {CONFIRM_TIMEOUT:?}{hint}"),
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Whether one journal line is the sidecar's answer to the line sent.
fn answers(line: &[u8], verb: Verb, target: &Target) -> Option<Confirmed> {
    let entry = crate::ledger::decode_line(line)?;
    let is = |p: &str, i: &str| p == target.provider && i == target.id;
    match (verb, entry) {
        (Verb::Claim, Record::Claim { provider, id })
        | (Verb::Detach, Record::Detach { provider, id })
        | (Verb::Release, Record::Release { provider, id })
            if is(&provider, &id) =>
        {
            Some(Confirmed::Done)
        }
        (
            Verb::Claim | Verb::Release | Verb::Detach,
            Record::Refused {
                provider,
                id,
                reason,
            },
        ) if is(&provider, &id) => Some(Confirmed::Refused(reason)),
        _ => None,
    }
}

/// `Err(message)` when the session shows it does not own what a detach names; `Ok` when it
/// does, or when that cannot be shown from here (see the module docs).
fn owned(settings: &Settings, target: &Target) -> Result<(), String> {
    use crate::watch::detach::{not_owned, ownership, Ownership};
    let Ok(session) = std::env::var("SANDGUARD_SESSION") else {
        return Ok(());
    };
    let registry = crate::providers::Registry::from_settings(settings);
    let Some(provider) = registry.get(&target.provider) else {
        return Ok(());
    };
    let Ok(view) = StateDir::open(&settings.state_dir).and_then(|s| s.read_session(&session))
    else {
        return Ok(());
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Ok(());
    };
    let selector = crate::labels::Selector::managed();
    let listed = runtime.block_on(async {
        let listing = provider.list(&selector);
        match tokio::time::timeout(crate::watch::CLAIM_LOOKUP, listing).await {
            Ok(Ok(found)) => Some(
                found
                    .into_iter()
                    .filter(|s| selector.matches(&s.labels))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        }
    });
    let held = view.claims.iter().chain(&view.detached);
    match ownership(provider.as_ref(), &session, target, held, listed.as_deref()) {
        Ownership::NotOwned => Err(not_owned(&session, target)),
        Ownership::Owned | Ownership::Unknown => Ok(()),
    }
}

/// The session's journal, open for reading.
fn journal(settings: Result<Settings, String>) -> Result<(PathBuf, std::fs::File), String> {
    let settings = settings?;
    let session = std::env::var("SANDGUARD_SESSION")
        .map_err(|_| "SANDGUARD_SESSION is not set".to_string())?;
    let state = StateDir::open(&settings.state_dir).map_err(|e| e.to_string())?;
    let path = state.journal_file(&session).map_err(|e| e.to_string())?;
    let file = std::fs::File::open(&path).map_err(|e| {
        format!(
            "the session's journal {} cannot be read ({e}); is this the state directory the session was started with?",
            path.display()
        )
    })?;
    Ok((path, file))
}

fn session_fd() -> Result<OwnedFd, String> {
    let raw = std::env::var("SANDGUARD_FD").map_err(|_| "SANDGUARD_FD is not set".to_string())?;
    let fd: i32 = raw
        .trim()
        .parse()
        .map_err(|_| format!("SANDGUARD_FD={raw:?} is not a descriptor number"))?;
    match crate::unix::take_fd(fd) {
        Ok(owned) if crate::unix::is_fifo(owned.as_fd()) => Ok(owned),
        not_a_pipe => {
            // Not ours after all: leave whatever the number names open, as found.
            let _ = not_a_pipe.map(std::os::fd::IntoRawFd::into_raw_fd);
            Err(format!(
                "SANDGUARD_FD={fd} is set, but descriptor {fd} is not open in this process: the \
                 program that started this command did not pass it on (Python's subprocess \
                 closes it unless given pass_fds=sandguard.pass_fds(), and under \
                 sandguard.guard() also env=g.child_env())"
            ))
        }
    }
}
