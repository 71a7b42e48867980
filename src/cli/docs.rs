//! `sandguard completions SHELL` and `sandguard man`: shell completions and a man page,
//! generated from the clap definitions themselves so they never drift from the real flags.
//! Packagers write them to files (see `packaging/README.md`).

use clap::CommandFactory;

use super::output::{self, Exit};
use super::Cli;

#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// bash, zsh, fish, elvish or powershell
    shell: clap_complete::Shell,
}

pub fn completions(args: CompletionArgs) -> Exit {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "sandguard", &mut buf);
    output::emit(&String::from_utf8_lossy(&buf));
    Exit::Ok
}

pub fn man() -> Exit {
    let mut buf = Vec::new();
    match clap_mangen::Man::new(Cli::command()).render(&mut buf) {
        Ok(()) => {
            output::emit(&String::from_utf8_lossy(&buf));
            Exit::Ok
        }
        Err(e) => {
            eprintln!("sandguard: cannot render the man page: {e}");
            Exit::Failure
        }
    }
}
