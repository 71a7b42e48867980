//! One error for every subcommand, and the one place that turns an error into an exit code.
//!
//! A subcommand returns `Ok(Exit)` when it did its work (which may itself be a failure the
//! user must see in the exit code: a provider that did not answer, a removal that failed, with
//! the details already printed; or, for the wrapper, CMD's own status), and `Err(Error)` when
//! it could not do it at all; [`super::Invocation::run`] prints `sandguard: {error}` once and
//! exits with [`Error::exit`]. Every subcommand reports this way: `ps`, `stop`, `sweep`,
//! `sessions`, `providers`, the wrapper (`run`), the sidecar (`watch`) and `claim`, `release`,
//! `detach`.
//!
//! Decisions:
//! - **The wrapper's failures are 125, whatever their cause.** A bad config is exit 2
//!   elsewhere, but under `sandguard -- CMD` any failure before CMD ran must be told apart
//!   from CMD's own codes: the wrapper's own error says which ([`WrapError`], [`Error::Wrap`]). CMD not found is
//!   127 and not executable 126, as a shell says.
//! - **The sidecar's start-up failures keep their own split** ([`StartError`]): bad
//!   configuration or arguments 2, anything else 1. Its `error` line on stdout is written by
//!   `watch` before the error is returned; the error itself is printed here like any other.

use crate::config::ConfigError;
use crate::ledger::LedgerError;
use crate::providers::SelectError;
use crate::session::confirm::ConfirmError;
use crate::watch::start::StartError;
use crate::wrapper::WrapError;

use super::output::Exit;

/// Why a subcommand could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
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
    /// The sidecar could not start (`watch`; its `error` line is already on stdout).
    #[error(transparent)]
    Start(#[from] StartError),
    /// A `claim`, `release` or `detach` line was not confirmed by the session's sidecar.
    #[error(transparent)]
    Confirm(#[from] ConfirmError),
    /// The wrapper could not run CMD: 125 when it failed before CMD ran (whatever the step),
    /// 127 when CMD does not exist, 126 when it cannot be executed.
    #[error(transparent)]
    Wrap(#[from] WrapError),
    /// Anything else that stopped the command.
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// The exit code: see the module docs and DESIGN's exit-code table.
    pub(crate) fn exit(&self) -> Exit {
        match self {
            Error::Config(_) | Error::Usage(_) => Exit::Usage,
            Error::Provider(SelectError::Unconfigured(_)) => Exit::Usage,
            Error::Start(StartError::Usage(_)) => Exit::Usage,
            Error::Provider(SelectError::Unknown(_))
            | Error::Ledger(_)
            | Error::Start(StartError::Failed(_))
            | Error::Confirm(_)
            | Error::Failed(_) => Exit::Failure,
            Error::Wrap(WrapError::BeforeCommand(_)) => Exit::OwnFailure,
            Error::Wrap(WrapError::CommandNotFound(_)) => Exit::NotFound,
            Error::Wrap(WrapError::CannotExecute { .. }) => Exit::NotExecutable,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Failed(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrapper::Failure;

    #[test]
    fn the_wrappers_failures_are_125_whatever_their_cause() {
        let usage = Error::Usage("bad".into());
        assert_eq!(usage.exit().code(), 2);
        let bad_config = ConfigError::JwtWithoutOrganization;
        assert_eq!(Error::Config(bad_config).exit().code(), 2);
        let bad_config = ConfigError::JwtWithoutOrganization;
        let before = WrapError::from(Failure::Config(bad_config));
        assert_eq!(Error::from(before).exit().code(), 125);
        let not_found = WrapError::CommandNotFound("x".into());
        assert_eq!(Error::from(not_found).exit().code(), 127);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = WrapError::CannotExecute {
            program: "x".into(),
            source: denied,
        };
        assert_eq!(Error::from(e).exit().code(), 126);
        assert_eq!(Error::Start(StartError::Usage("u".into())).exit().code(), 2);
        assert_eq!(
            Error::Start(StartError::Failed("f".into())).exit().code(),
            1
        );
    }
}
