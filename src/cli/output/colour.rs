//! Colour for the words that say a state in `ps` and `sessions` tables (STYLE: colour only on
//! a terminal, never with `NO_COLOR`); diagnostics on stderr take the same rule
//! ([`crate::cli::init_logging`]).
//!
//! Decisions:
//! - **When**: the stream is a terminal, `NO_COLOR` is unset or empty (no-color.org: "present
//!   and not an empty string" turns it off) and `TERM` is not `dumb`. A pipe, a file, `--json`:
//!   never, so nothing that parses the output ever meets an escape. There is no flag to force
//!   colour on: nothing needs it yet, and each flag is one more thing to keep.
//! - **What**: only the state words, so that a glance down a column finds what needs a look.
//!   An owner `alive` green, `dead` red (its sandboxes are orphans: a sweep takes them),
//!   `unknown` yellow (judged by its lease or TTL only). A session `active` green, `reclaiming`
//!   yellow (a reclaim at work, or one that died midway), `pending` red (sandboxes left
//!   running, billing, until a sweep finishes them), `reclaimed` cyan (sandguard did its job),
//!   `clean` dim (nothing was left to do).
//! - **How**: the eight basic colours' SGR codes and dim, reset after each word: every
//!   terminal has them and the user's theme picks the shade. A cell is padded as its plain
//!   text ([`super::painted_table`]), so the columns line up as they do in a pipe.

use std::io::IsTerminal;

/// A colour a state word is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hue {
    Green,
    Red,
    Yellow,
    Cyan,
    Dim,
}

impl Hue {
    fn sgr(self) -> &'static str {
        match self {
            Hue::Green => "\x1b[32m",
            Hue::Red => "\x1b[31m",
            Hue::Yellow => "\x1b[33m",
            Hue::Cyan => "\x1b[36m",
            Hue::Dim => "\x1b[2m",
        }
    }

    /// The colour of an owner's or a session's state word, as the tables write them; `None`
    /// for any other word (`-`, a provider's own state).
    pub(crate) fn of_state(word: &str) -> Option<Hue> {
        Some(match word {
            "alive" | "active" => Hue::Green,
            "dead" | "pending" => Hue::Red,
            "unknown" | "reclaiming" => Hue::Yellow,
            "reclaimed" => Hue::Cyan,
            "clean" => Hue::Dim,
            _ => return None,
        })
    }
}

/// Whether a stream gets colour (see the module's decisions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paint {
    on: bool,
}

impl Paint {
    /// For what is written to stdout.
    pub(crate) fn stdout() -> Paint {
        Paint::when(std::io::stdout().is_terminal())
    }

    /// For what is written to stderr.
    pub(crate) fn stderr() -> Paint {
        Paint::when(std::io::stderr().is_terminal())
    }

    /// No colour, whatever the stream.
    pub(crate) fn off() -> Paint {
        Paint { on: false }
    }

    pub(crate) fn is_on(self) -> bool {
        self.on
    }

    fn when(terminal: bool) -> Paint {
        let no_color = std::env::var_os("NO_COLOR");
        let term = std::env::var_os("TERM");
        Paint {
            on: wanted(terminal, no_color.as_deref(), term.as_deref()),
        }
    }

    /// `text` in `hue` when colour is on; as it is otherwise, or without a hue.
    pub(crate) fn word(self, text: &str, hue: Option<Hue>) -> String {
        match hue.filter(|_| self.on) {
            Some(hue) => format!("{}{text}\x1b[0m", hue.sgr()),
            None => text.to_string(),
        }
    }
}

/// The rule, on what the process was given: a terminal, `NO_COLOR` unset or empty, `TERM` not
/// `dumb`.
fn wanted(
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    terminal && no_color.is_none_or(std::ffi::OsStr::is_empty) && term.is_none_or(|t| t != "dumb")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color_or_a_dumb_one() {
        let os = |s: &'static str| Some(OsStr::new(s));
        assert!(wanted(true, None, os("xterm-256color")));
        assert!(wanted(true, None, None));
        assert!(wanted(true, os(""), None), "an empty NO_COLOR is unset");
        assert!(!wanted(true, os("1"), None));
        assert!(
            !wanted(true, os("0"), None),
            "any value but empty turns it off"
        );
        assert!(!wanted(true, None, os("dumb")));
        assert!(!wanted(false, None, os("xterm")));
    }

    #[test]
    fn a_state_word_is_wrapped_and_reset_and_nothing_else_is() {
        let on = Paint { on: true };
        assert_eq!(
            on.word("dead", Hue::of_state("dead")),
            "\x1b[31mdead\x1b[0m"
        );
        assert_eq!(on.word("-", Hue::of_state("-")), "-");
        assert_eq!(Paint::off().word("dead", Hue::of_state("dead")), "dead");
        for word in [
            "alive",
            "dead",
            "unknown",
            "active",
            "reclaiming",
            "pending",
            "reclaimed",
            "clean",
        ] {
            assert!(Hue::of_state(word).is_some(), "{word}");
        }
    }
}
