//! Owner identity and liveness.
//!
//! A process is never identified by its pid alone: pids are reused. An [`Identity`] is
//! machine id + boot id + pid + process start time (field 22 of `/proc/PID/stat`, in clock ticks
//! since boot). Same machine, same boot, same pid and same start time: the same process. Same
//! machine, another boot: that process is dead. Another machine: nothing can be said from here
//! ([`Liveness::Unknown`]); only a lease or a TTL can judge it.
//!
//! # The label form
//!
//! The identity travels on sandboxes as the `sandguard.owner` label, one string safe for every
//! provider's label rules (at most 63 characters of `[0-9a-z-]`):
//! `<machine16>-<boot16>-<pid>-<start>`, where `machine16` and `boot16` are the first 16 hex
//! digits of `/etc/machine-id` and of the boot id (dashes removed). 64 bits of each is plenty
//! to tell machines and boots apart, and keeps the label short.

use std::fmt;
use std::sync::OnceLock;

/// The identity of one process on one boot of one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub machine: String,
    pub boot: String,
    pub pid: u32,
    pub start_time: u64,
}

/// Whether an owner still runs, as far as this machine can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    Alive,
    Dead,
    /// Another machine, or an owner label that cannot be read.
    Unknown,
}

impl Liveness {
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Alive => "alive",
            Liveness::Dead => "dead",
            Liveness::Unknown => "unknown",
        }
    }
}

/// The facts that identify this machine and this boot, read once per process.
#[derive(Debug, Clone)]
pub struct Host {
    pub machine: String,
    pub boot: String,
}

/// A machine id used when none can be read (some containers have no `/etc/machine-id`). Owners
/// carrying it are always judged [`Liveness::Unknown`] by everyone else, and by this machine.
const UNKNOWN_MACHINE: &str = "0000000000000000";

impl Host {
    /// This machine and this boot.
    pub fn current() -> &'static Host {
        static HOST: OnceLock<Host> = OnceLock::new();
        HOST.get_or_init(|| {
            let machine = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok())
                .map(|s| short_hex(&s))
                .filter(|s| s.len() == 16)
                .unwrap_or_else(|| UNKNOWN_MACHINE.to_string());
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| short_hex(&s))
                .unwrap_or_default();
            Host { machine, boot }
        })
    }
}

/// The first 16 hex digits of an id, lower-case, dashes and whitespace dropped.
fn short_hex(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase()
}

impl Identity {
    /// The identity of `pid` on this machine now, or `None` if it does not exist.
    pub fn of_pid(pid: u32) -> Option<Identity> {
        let host = Host::current();
        let stat = ProcStat::read(pid)?;
        Some(Identity {
            machine: host.machine.clone(),
            boot: host.boot.clone(),
            pid,
            start_time: stat.start_time,
        })
    }

    /// The identity of the calling process.
    pub fn current() -> Option<Identity> {
        Identity::of_pid(std::process::id())
    }

    /// The label form, `<machine16>-<boot16>-<pid>-<start>`.
    pub fn to_label(&self) -> String {
        format!(
            "{}-{}-{}-{}",
            self.machine, self.boot, self.pid, self.start_time
        )
    }

    /// Reads the label form back; `None` for anything malformed.
    pub fn parse_label(label: &str) -> Option<Identity> {
        let mut parts = label.split('-');
        let machine = parts.next()?;
        let boot = parts.next()?;
        let pid = parts.next()?.parse().ok()?;
        let start_time = parts.next()?.parse().ok()?;
        let hex16 = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if parts.next().is_some() || !hex16(machine) || !hex16(boot) {
            return None;
        }
        Some(Identity {
            machine: machine.to_string(),
            boot: boot.to_string(),
            pid,
            start_time,
        })
    }

    /// Whether this identity's process still runs, judged from this machine.
    pub fn liveness(&self) -> Liveness {
        self.liveness_on(Host::current(), ProcStat::read)
    }

    fn liveness_on(&self, host: &Host, read: impl Fn(u32) -> Option<ProcStat>) -> Liveness {
        if self.machine == UNKNOWN_MACHINE || self.machine != host.machine {
            return Liveness::Unknown;
        }
        if self.boot != host.boot {
            return Liveness::Dead;
        }
        match read(self.pid) {
            Some(stat) if stat.start_time == self.start_time && !stat.exited() => Liveness::Alive,
            _ => Liveness::Dead,
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_label())
    }
}

/// The two fields of `/proc/PID/stat` that identity needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// Field 3: `R`, `S`, `D`, `Z`, …
    pub state: char,
    /// Field 22: start time in clock ticks after boot.
    pub start_time: u64,
}

impl ProcStat {
    /// Reads `/proc/PID/stat`; `None` when the process does not exist.
    pub fn read(pid: u32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        ProcStat::parse(&text)
    }

    /// Parses the fields after the *last* `)`: the command name may itself contain spaces and
    /// parentheses.
    pub fn parse(text: &str) -> Option<ProcStat> {
        let rest = &text[text.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3, so field N is at index N - 3.
        let state = fields.first()?.chars().next()?;
        let start_time = fields.get(22 - 3)?.parse().ok()?;
        Some(ProcStat { state, start_time })
    }

    /// A zombie (`Z`) or dead (`X`) process has exited; only its parent has not reaped it yet.
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 120 0 0 0 1 0 0 0 20 0 1 0 987654 1000 100 18446744073709551615";

    #[test]
    fn stat_is_read_after_the_last_parenthesis() {
        let s = ProcStat::parse(STAT).unwrap();
        assert_eq!(
            s,
            ProcStat {
                state: 'S',
                start_time: 987654
            }
        );
        assert!(ProcStat::parse("12 (x) S 1").is_none());
    }

    #[test]
    fn the_label_round_trips_and_is_label_safe() {
        let id = Identity {
            machine: "0123456789abcdef".into(),
            boot: "fedcba9876543210".into(),
            pid: 4194304,
            start_time: 18446744073709551615,
        };
        let label = id.to_label();
        assert!(label.len() <= 63, "{label}");
        assert!(label
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-'));
        assert_eq!(Identity::parse_label(&label), Some(id));
        for bad in [
            "",
            "x",
            "0123456789abcdef-fedcba9876543210-1",
            "0123456789abcdef-fedcba9876543210-1-2-3",
            "0123-fedcba9876543210-1-2",
        ] {
            assert_eq!(Identity::parse_label(bad), None, "{bad}");
        }
    }

    #[test]
    fn liveness_needs_the_same_machine_boot_pid_and_start_time() {
        let host = Host {
            machine: "0123456789abcdef".into(),
            boot: "1111111111111111".into(),
        };
        let id = Identity {
            machine: host.machine.clone(),
            boot: host.boot.clone(),
            pid: 7,
            start_time: 100,
        };
        let running = |_| {
            Some(ProcStat {
                state: 'S',
                start_time: 100,
            })
        };
        let reused = |_| {
            Some(ProcStat {
                state: 'S',
                start_time: 101,
            })
        };
        let zombie = |_| {
            Some(ProcStat {
                state: 'Z',
                start_time: 100,
            })
        };
        assert_eq!(id.liveness_on(&host, running), Liveness::Alive);
        assert_eq!(id.liveness_on(&host, reused), Liveness::Dead);
        assert_eq!(id.liveness_on(&host, zombie), Liveness::Dead);
        assert_eq!(id.liveness_on(&host, |_| None), Liveness::Dead);
        let other_boot = Identity {
            boot: "2222222222222222".into(),
            ..id.clone()
        };
        assert_eq!(other_boot.liveness_on(&host, running), Liveness::Dead);
        let other_machine = Identity {
            machine: "aaaaaaaaaaaaaaaa".into(),
            ..id
        };
        assert_eq!(other_machine.liveness_on(&host, running), Liveness::Unknown);
    }

    #[test]
    fn this_process_is_alive() {
        let me = Identity::current().unwrap();
        assert_eq!(me.liveness(), Liveness::Alive);
        assert_eq!(Identity::parse_label(&me.to_label()), Some(me));
    }
}
