//! A pseudo-terminal, for what the wrapper says when a user runs it (its last line comes only
//! to a stderr that is a terminal), for a question a command asks there (`stop --all`) and
//! for what a command prints to a terminal (colour), and the reading of that line's usage
//! part.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

/// A pseudo-terminal: what the wrapper's stderr is when a user runs it. Everything written to
/// it is collected by a thread until the last writer closes it.
pub struct Terminal {
    slave: Option<OwnedFd>,
    seen: Arc<Mutex<String>>,
    /// The master's side a user types on.
    keyboard: std::fs::File,
}

impl Terminal {
    pub fn open() -> Terminal {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty fills two descriptors; null name, termios and window size are
        // allowed.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just made and are owned by nobody else.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let seen = Arc::new(Mutex::new(String::new()));
        let sink = seen.clone();
        let master = std::fs::File::from(master);
        let keyboard = master.try_clone().expect("dup the terminal's master");
        std::thread::spawn(move || {
            let mut master = master;
            let mut buf = [0u8; 1024];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Terminal {
            slave: Some(slave),
            seen,
            keyboard,
        }
    }

    /// The terminal as a child's stderr (our own copy is closed when the child is spawned).
    pub fn stderr(&mut self) -> Stdio {
        Stdio::from(self.slave.take().expect("one child per terminal"))
    }

    /// The terminal as a child's stdout: what a user sees a command print (our own copy is
    /// closed when the child is spawned).
    pub fn stdout(&mut self) -> Stdio {
        Stdio::from(self.slave.take().expect("one child per terminal"))
    }

    /// The terminal as a child's stdin and stderr, as a user's shell gives them (our own copy
    /// is closed when the child is spawned).
    pub fn stdin_and_stderr(&mut self) -> (Stdio, Stdio) {
        let slave = self.slave.take().expect("one child per terminal");
        let again = slave.try_clone().expect("dup the terminal");
        (Stdio::from(slave), Stdio::from(again))
    }

    pub fn text(&self) -> String {
        self.seen.lock().unwrap().replace('\r', "")
    }

    /// What the terminal shows once it shows `needle`, waiting at most `limit`; `None` if it
    /// never did.
    pub fn wait_for(&self, needle: &str, limit: std::time::Duration) -> Option<String> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let text = self.text();
            if text.contains(needle) {
                return Some(text);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Types `line` and Enter, as a user answering a question.
    pub fn type_line(&self, line: &str) {
        (&self.keyboard)
            .write_all(format!("{line}\n").as_bytes())
            .expect("type on the terminal");
    }
}

/// What a run used, as its last line says it (`this run used 1.4 sandbox-hours, ~$0.07
/// estimated (e2b 1.2 h, docker 0.2 h)`).
#[derive(Debug, Clone, PartialEq)]
pub struct Used {
    /// The total, in seconds.
    pub seconds: f64,
    /// How finely it is said, in seconds: half a unit of its last digit.
    pub within: f64,
    /// The estimate (`~$0.07`), when prices are set.
    pub cost: Option<String>,
    /// Each provider's part, in seconds, as said.
    pub by_provider: Vec<(String, f64)>,
}

/// The usage part of the line `text` holds, `None` when it says none. Panics on a usage part
/// that is not in the documented shape (`src/cli/watch/terminal.rs`).
pub fn used(text: &str) -> Option<Used> {
    let rest = text.split("this run used ").nth(1)?;
    let (head, rest) = rest
        .split_once(" (")
        .expect("the providers follow the total");
    let parts = rest.split(')').next().unwrap();
    let (amount, unit_cost) = head.split_once(' ').expect("an amount and a unit");
    let (unit, cost) = match unit_cost.split_once(", ") {
        Some((unit, cost)) => {
            let cost = cost
                .strip_suffix(" estimated")
                .expect("an estimate says so");
            (unit, Some(cost.to_string()))
        }
        None => (unit_cost, None),
    };
    let size = match unit {
        "sandbox-hours" => 3600.0,
        "sandbox-minutes" => 60.0,
        "sandbox-seconds" => 1.0,
        other => panic!("unknown unit {other:?} in {text:?}"),
    };
    let number = |n: &str| -> f64 {
        match n {
            "<0.1" => 0.0,
            n => n
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("{n:?} in {text:?}")),
        }
    };
    let within = |n: &str| if n.contains('.') { 0.05 } else { 0.5 } * size;
    let by_provider = parts
        .split(", ")
        .map(|part| {
            let words: Vec<&str> = part.split(' ').collect();
            let [provider, n, _unit] = words[..] else {
                panic!("{part:?} in {text:?}");
            };
            (provider.to_string(), number(n) * size)
        })
        .collect();
    Some(Used {
        seconds: number(amount) * size,
        within: within(amount),
        cost,
        by_provider,
    })
}
