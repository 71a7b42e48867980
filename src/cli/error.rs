//! One error for every subcommand, and the one place that turns an error into an exit code.
//!
//! A subcommand returns `Ok(Exit)` when it did its work (which may itself be a failure the
//! user must see in the exit code: a provider that did not answer, a removal that failed, with
//! the details already printed), and `Err(Error)` when it could not do it at all; [`super::run`]
//! prints `sandguard: {error}` once and exits with [`Error::exit`].

use crate::config::ConfigError;
use crate::ledger::LedgerError;
use crate::providers::SelectError;

use super::output::Exit;

/// Why a subcommand could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration (file, environment or flags) is bad.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// What the user typed makes no sense.
    #[error("{0}")]
    Usage(String),
    /// `--provider` named no provider (exit 1), or one that is not configured (exit 2: the
    /// command line asks for something the configuration does not give).
    #[error(transparent)]
    Provider(#[from] SelectError),
    /// The ledger could not be used.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Anything else that stopped the command.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// The exit code: 2 for bad usage or bad config, 1 for everything else.
    pub fn exit(&self) -> Exit {
        match self {
            Error::Config(_) | Error::Usage(_) => Exit::Usage,
            Error::Provider(SelectError::Unconfigured(_)) => Exit::Usage,
            Error::Provider(SelectError::Unknown(_)) | Error::Ledger(_) | Error::Failed(_) => {
                Exit::Failure
            }
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Failed(e.to_string())
    }
}
