//! `sandguard claim|release|detach PROVIDER ID`: for shell scripts running under a session,
//! one control line written to `$SANDGUARD_FD` (a single `write`, atomic on a pipe).
//!
//! Outside a session (`SANDGUARD_FD` unset, or not an open pipe) they exit 2 with a message
//! saying how to get one; a sidecar that is gone (the pipe has no reader) exits 1.

use std::io::Write;

use super::output::Exit;
use crate::protocol::{Command, Target};

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

pub fn main(verb: Verb, args: Args) -> Exit {
    let target = match Target::new(&args.provider, &args.id) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sandguard: {e}");
            return Exit::Usage;
        }
    };
    let command = match verb {
        Verb::Claim => Command::Claim(target),
        Verb::Release => Command::Release(target),
        Verb::Detach => Command::Detach(target),
    };
    let fd = match session_fd() {
        Ok(fd) => fd,
        Err(message) => {
            eprintln!("sandguard: not inside a sandguard session: {message} (run the script under `sandguard -- CMD`)");
            return Exit::Usage;
        }
    };
    let mut pipe = std::fs::File::from(fd);
    match pipe.write_all(command.to_line().as_bytes()) {
        Ok(()) => Exit::Ok,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            eprintln!("sandguard: the session's sidecar is gone; nothing was recorded");
            Exit::Failure
        }
        Err(e) => {
            eprintln!("sandguard: cannot write to the session's control pipe: {e}");
            Exit::Failure
        }
    }
}

fn session_fd() -> Result<std::os::fd::OwnedFd, String> {
    let raw = std::env::var("SANDGUARD_FD").map_err(|_| "SANDGUARD_FD is not set".to_string())?;
    let fd: i32 = raw
        .trim()
        .parse()
        .map_err(|_| format!("SANDGUARD_FD={raw:?} is not a descriptor number"))?;
    if fd < 0 || !crate::unix::is_fifo(fd) {
        return Err(format!("SANDGUARD_FD={fd} is not an open pipe"));
    }
    crate::unix::take_fd(fd).map_err(|e| e.to_string())
}
