//! The sidecar's last word on its stdout, after `bye`: how the reclaim of what the owner
//! still held went, so that the owner's helper (Python `close()`, Rust [`crate::Guard::close`])
//! can report it and return at once.
//!
//! ```text
//! ended clean
//! ended left N: PROVIDER/ID REASON; PROVIDER/* not listed: REASON; …
//! ```
//!
//! Decisions:
//! - **One line, written before the settle pass.** The owner waits for this line, not for the
//!   sidecar to exit: a clean exit costs the program one reclaim pass, not the settle delay.
//!   What the settle pass then finds (a create that was in flight) is reclaimed and journaled
//!   as any reclaim is, and logged, but no longer reported to the program: it has gone.
//! - **What was left**: a sandbox whose removal failed or was unfinished at the deadline, and a
//!   provider that could not be listed (its id is `*`: anything of the session may remain
//!   there). A refusal (a claim that names no sandbox of ours) is final, not left.
//! - **Echo-safe**: ids and reasons come from providers. Each is shown as
//!   [`super::echo`] shows untrusted text (at most [`super::ECHO_LIMIT`] characters, control
//!   and non-ASCII characters escaped); an id loses its spaces and `;`, a reason its `;`, so
//!   the line always splits back into the same items. At most [`MAX_ITEMS`] items are named;
//!   `N` counts them all. The line stays far below the control protocol's [`super::MAX_LINE`].

use std::fmt;

/// The most items named on the line (`N` still counts every one).
pub(super) const MAX_ITEMS: usize = 16;

/// One thing the reclaim after `bye` left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    pub provider: String,
    /// The sandbox's id, or `*` for a provider that could not be listed.
    pub id: String,
    pub reason: String,
}

/// What the sidecar says after `bye`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByeOutcome {
    /// Everything the owner held is gone.
    Clean,
    /// `count` things were left (the first `MAX_ITEMS` of them named).
    Left { count: usize, items: Vec<Left> },
}

impl ByeOutcome {
    /// The outcome of `left`: clean when it is empty.
    pub fn from_left(left: Vec<Left>) -> ByeOutcome {
        if left.is_empty() {
            return ByeOutcome::Clean;
        }
        let count = left.len();
        let items = left.into_iter().take(MAX_ITEMS).map(Left::safe).collect();
        ByeOutcome::Left { count, items }
    }

    pub fn is_clean(&self) -> bool {
        matches!(self, ByeOutcome::Clean)
    }

    /// Reads the line (with or without its `\n`); `None` when it is not an outcome line.
    pub fn parse(line: &str) -> Option<ByeOutcome> {
        let rest = line.trim().strip_prefix("ended ")?;
        if rest == "clean" {
            return Some(ByeOutcome::Clean);
        }
        let (count, items) = rest.strip_prefix("left ")?.split_once(':')?;
        let count = count.parse().ok()?;
        let items = items
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Left::parse)
            .collect::<Option<Vec<_>>>()?;
        Some(ByeOutcome::Left { count, items })
    }
}

impl Left {
    fn safe(self) -> Left {
        let id = super::echo(self.id.as_bytes()).replace([' ', ';'], "_");
        let reason = super::echo(self.reason.as_bytes()).replace(';', ",");
        Left {
            provider: super::echo(self.provider.as_bytes()).replace([' ', ';', '/'], "_"),
            id: if id.is_empty() { "?".into() } else { id },
            reason,
        }
    }

    fn parse(item: &str) -> Option<Left> {
        let (who, reason) = item.split_once(' ').unwrap_or((item, ""));
        let (provider, id) = who.split_once('/')?;
        Some(Left {
            provider: provider.to_string(),
            id: id.to_string(),
            reason: reason.to_string(),
        })
    }
}

impl fmt::Display for ByeOutcome {
    /// The line as the sidecar writes it, without its `\n`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByeOutcome::Clean => write!(f, "ended clean"),
            ByeOutcome::Left { count, items } => {
                write!(f, "ended left {count}:")?;
                for (i, l) in items.iter().enumerate() {
                    let sep = if i == 0 { " " } else { "; " };
                    write!(f, "{sep}{}/{} {}", l.provider, l.id, l.reason)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(provider: &str, id: &str, reason: &str) -> Left {
        Left {
            provider: provider.into(),
            id: id.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn outcome_lines_round_trip() {
        let clean = ByeOutcome::from_left(vec![]);
        assert_eq!(clean.to_string(), "ended clean");
        let some = ByeOutcome::from_left(vec![
            left("docker", "3f2a", "failed: conflict"),
            left("e2b", "*", "not listed: connection refused"),
        ]);
        assert_eq!(
            some.to_string(),
            "ended left 2: docker/3f2a failed: conflict; e2b/* not listed: connection refused"
        );
        for o in [clean, some] {
            assert_eq!(ByeOutcome::parse(&format!("{o}\n")), Some(o));
        }
        assert_eq!(ByeOutcome::parse("ready abc"), None);
        assert_eq!(ByeOutcome::parse("ended left x: a/b c"), None);
    }

    #[test]
    fn hostile_ids_and_reasons_cannot_break_the_line() {
        let o = ByeOutcome::from_left(vec![left(
            "docker",
            "a b;c\n",
            "boom; \u{1b}[2J\nended clean",
        )]);
        let line = o.to_string();
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        let ByeOutcome::Left { count, items } = ByeOutcome::parse(&line).unwrap() else {
            panic!("{line}")
        };
        assert_eq!((count, items.len()), (1, 1), "{line}");
        assert_eq!(items[0].provider, "docker");
        assert!(!items[0].id.contains(' '), "{line}");
    }

    #[test]
    fn many_items_are_counted_not_all_named() {
        let many = (0..100).map(|i| left("docker", &format!("c{i}"), "failed: x"));
        let o = ByeOutcome::from_left(many.collect());
        let ByeOutcome::Left { count, items } = ByeOutcome::parse(&o.to_string()).unwrap() else {
            panic!()
        };
        assert_eq!((count, items.len()), (100, MAX_ITEMS));
    }
}
