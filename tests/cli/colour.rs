//! Colour in `ps` and `sessions`, through the real binary (STYLE: colour only on a terminal,
//! never with `NO_COLOR`): the words that say an owner's state (alive, dead, unknown) and a
//! session's (active, pending, reclaimed, clean) are coloured when stdout is a
//! pseudo-terminal, and not one escape is written when it is a pipe or `NO_COLOR` is set. The
//! colour changes nothing else: the terminal's table with its escapes taken out is the piped
//! one, columns aligned alike.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::journal::{start_line, write_journal};
use crate::support::plugin::{cmd, config, Plugin};
use crate::support::terminal::Terminal;
use crate::support::*;
use sandguard::labels::{OWNER, SESSION};

/// An owner on another machine: it cannot be judged from here.
const ELSEWHERE: &str = "0123456789abcdef-0123456789abcdef-4242-1-4026531836";

/// A scratch with a plugin provider listing three sandboxes whose owners are alive, dead and
/// unknown, and a ledger of four sessions, active, pending, reclaimed and clean; the config.
fn world(s: &Scratch) -> PathBuf {
    let acme = Plugin::new(s, "acme");
    let session = format!("col{}", unique());
    for (id, owner) in [
        ("sb-alive", live_owner_label()),
        ("sb-dead", dead_owner_label()),
        ("sb-unknown", ELSEWHERE.to_string()),
    ] {
        acme.insert(id, &[(SESSION, session.as_str()), (OWNER, owner.as_str())]);
    }
    // Three days old, so that every AGE reads `3d00h` in both runs compared below.
    let t0 = (sandguard::testing::timefmt::now_unix() - 3 * 86_400) * 1000;
    for (state, owner) in [
        (None, live_owner_label()),
        (Some("pending"), dead_owner_label()),
        (Some("reclaimed"), ELSEWHERE.to_string()),
        (Some("clean"), live_owner_label()),
    ] {
        let mut lines = vec![start_line(t0, &owner)];
        if let Some(state) = state {
            lines.push(format!(r#"{{"t":{t0},"ev":"end","state":"{state}"}}"#));
        }
        let id = format!("{}{}", state.unwrap_or("active"), unique());
        write_journal(s, &id, &lines);
    }
    config(s, "5s", &[&acme])
}

/// What `args` print to a pseudo-terminal, with `NO_COLOR` set or not, once they printed
/// `last` (a word of their last line).
fn on_terminal(s: &Scratch, config: &Path, args: &[&str], no_color: bool, last: &str) -> String {
    let mut terminal = Terminal::open();
    let mut c: Command = cmd(s, config);
    c.args(args)
        .env("TERM", "xterm-256color")
        .stdin(Stdio::null())
        .stdout(terminal.stdout())
        .stderr(Stdio::null());
    if no_color {
        c.env("NO_COLOR", "1");
    } else {
        c.env_remove("NO_COLOR");
    }
    let status = c.status().unwrap();
    assert!(status.success(), "{args:?}: {status}");
    terminal
        .wait_for(last, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{args:?} never printed {last:?}: {}", terminal.text()))
}

/// What `args` print to a pipe, `NO_COLOR` unset.
fn piped(s: &Scratch, config: &Path, args: &[&str]) -> String {
    let out = run(cmd(s, config).args(args).env_remove("NO_COLOR"));
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out.stdout
}

/// `text` without its SGR escapes (`ESC [ … m`).
fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let end = tail.find('m').expect("an SGR escape ends with m");
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

/// Whether `word` is written in a colour: an SGR escape just before it, a reset just after.
fn painted(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = &text[..at];
        let opened = before.ends_with('m')
            && before.rfind("\x1b[").is_some_and(|e| {
                before[e + 2..before.len() - 1]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ';')
            });
        opened && text[at + word.len()..].starts_with("\x1b[0m")
    })
}

fn check(s: &Scratch, config: &Path, args: &[&str], words: &[&str], last: &str) {
    let coloured = on_terminal(s, config, args, false, last);
    for word in words {
        assert!(
            painted(&coloured, word),
            "{args:?}: {word} is not coloured:\n{coloured:?}"
        );
    }
    let pipe = piped(s, config, args);
    assert!(!pipe.contains('\x1b'), "{args:?} piped:\n{pipe:?}");
    assert_eq!(
        plain(&coloured),
        pipe,
        "{args:?}: the colour changed the table"
    );
    let no_color = on_terminal(s, config, args, true, last);
    assert!(
        !no_color.contains('\x1b'),
        "{args:?} with NO_COLOR:\n{no_color:?}"
    );
    assert_eq!(no_color, pipe, "{args:?} with NO_COLOR");
}

#[test]
fn ps_and_sessions_colour_states_on_a_terminal_only() {
    let s = Scratch::new("colour");
    let config = world(&s);
    check(
        &s,
        &config,
        &["ps"],
        &["alive", "dead", "unknown"],
        "Stop with",
    );
    check(
        &s,
        &config,
        &["sessions"],
        &[
            "active",
            "pending",
            "reclaimed",
            "clean",
            "alive",
            "dead",
            "unknown",
        ],
        "SPEND:",
    );
}
