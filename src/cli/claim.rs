//! `sandguard claim|release|detach PROVIDER ID`: for programs running under a session, one
//! control line written to `$SANDGUARD_FD` (a single `write`, atomic on a pipe), then
//! **confirmed**: the command returns 0 only once the session's sidecar has journaled the
//! line and the journal is on disk.
//!
//! The confirmation is [`crate::session::confirm`]'s, the one every helper uses: the
//! session's journal (`$SANDGUARD_SESSION` in the state directory) is read for the sidecar's
//! answer, and synced, before the command returns.
//!
//! - The sidecar is the judge of a claim (and of a release or detach): one for a provider it
//!   has not configured, or with an id that can never name a sandbox of that provider (a
//!   Docker container *name*, `..`: [`crate::providers::ids`]), comes back `refused`, and the
//!   command prints the reason and exits 1 at once.
//! - `detach` first asks whether its session owns what it names ([`crate::ownership::detach`], the
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

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use super::{Error, Exit};
use crate::config::{ConfigError, Settings};
use crate::ledger::StateDir;
use crate::protocol::{Command, Target};

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    /// The provider the sandbox lives on (docker, e2b, …)
    provider: String,
    /// The sandbox's id on that provider
    id: String,
}

/// Which line to send.
#[derive(Debug, Clone, Copy)]
pub(super) enum Verb {
    Claim,
    Release,
    Detach,
}

/// Sends the line and waits for its confirmation; see the module docs.
pub(super) fn run(
    verb: Verb,
    args: Args,
    settings: Result<Settings, ConfigError>,
) -> Result<Exit, Error> {
    let target = Target::new(&args.provider, &args.id).map_err(|e| Error::Usage(e.to_string()))?;
    let command = match verb {
        Verb::Claim => Command::Claim(target.clone()),
        Verb::Release => Command::Release(target.clone()),
        Verb::Detach => Command::Detach(target.clone()),
    };
    let fd = session_fd().map_err(|e| {
        Error::Usage(format!(
            "not inside a sandguard session: {e} (run the program under `sandguard -- CMD`)"
        ))
    })?;
    if let (Verb::Detach, Ok(settings)) = (verb, &settings) {
        owned(settings, &target)?;
    }
    use crate::session::confirm;
    match journal(settings) {
        Ok(journal) => confirm::send(fd.as_fd(), &journal, &command),
        // Sent all the same: the sidecar records it; only this command cannot know.
        Err(e) => confirm::send_unconfirmed(fd.as_fd(), &command)
            .and(Err(confirm::ConfirmError::Unconfirmable(e.to_string()))),
    }?;
    Ok(Exit::Ok)
}

/// `Err` when the session shows it does not own what a detach names; `Ok` when it does, or
/// when that cannot be shown from here (see the module docs).
fn owned(settings: &Settings, target: &Target) -> Result<(), Error> {
    use crate::ownership::detach::{not_owned, ownership, Ownership};
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
        Ownership::NotOwned => Err(Error::Failed(not_owned(&session, target))),
        Ownership::Owned | Ownership::Unknown => Ok(()),
    }
}

/// Where the session's journal is.
fn journal(settings: Result<Settings, ConfigError>) -> Result<PathBuf, Error> {
    let settings = settings?;
    let session = std::env::var("SANDGUARD_SESSION")
        .map_err(|_| Error::Failed("SANDGUARD_SESSION is not set".into()))?;
    let state = StateDir::open(&settings.state_dir)?;
    Ok(state.journal_file(&session)?)
}

/// Why `$SANDGUARD_FD` is no control pipe of a session.
#[derive(Debug, thiserror::Error)]
enum NoSession {
    #[error("SANDGUARD_FD is not set")]
    Unset,
    #[error("SANDGUARD_FD={0:?} is not a descriptor number")]
    NotANumber(String),
    #[error(
        "SANDGUARD_FD={0} is set, but descriptor {0} is not open in this process: the \
         program that started this command did not pass it on (Python's subprocess \
         closes it unless given pass_fds=sandguard.pass_fds(), and under \
         sandguard.guard() also env=g.child_env())"
    )]
    NotOpen(i32),
}

fn session_fd() -> Result<OwnedFd, NoSession> {
    let raw = std::env::var("SANDGUARD_FD").map_err(|_| NoSession::Unset)?;
    let fd: i32 = raw
        .trim()
        .parse()
        .map_err(|_| NoSession::NotANumber(raw.clone()))?;
    match crate::unix::take_fd(fd) {
        Ok(owned) if crate::unix::is_fifo(owned.as_fd()) => Ok(owned),
        not_a_pipe => {
            // Not ours after all: leave whatever the number names open, as found.
            let _ = not_a_pipe.map(std::os::fd::IntoRawFd::into_raw_fd);
            Err(NoSession::NotOpen(fd))
        }
    }
}
