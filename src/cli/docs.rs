//! `sandguard completions SHELL` and `sandguard man`: shell completions and a man page,
//! generated from the clap definitions themselves so they never drift from the real flags.
//! Packagers write them to files (see `packaging/README.md`).

use clap::CommandFactory;

use super::output::{self, Exit};
use super::{Cli, Error};

#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// bash, zsh, fish, elvish or powershell
    shell: clap_complete::Shell,
}

pub fn completions(args: CompletionArgs) -> Result<Exit, Error> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "sandguard", &mut buf);
    output::emit(&String::from_utf8_lossy(&buf));
    Ok(Exit::Ok)
}

pub fn man() -> Result<Exit, Error> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut buf)
        .map_err(|e| Error::Failed(format!("cannot render the man page: {e}")))?;
    output::emit(&String::from_utf8_lossy(&buf));
    Ok(Exit::Ok)
}
