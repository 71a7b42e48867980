//! Owner identity and liveness; [`death`] watches a live owner until it dies (used by the
//! sidecar and by a sweep that adopts a live owner).
//!
//! A process is never identified by its pid alone: pids are reused. An [`Identity`] is
//! machine id + boot id + pid namespace + pid + process start time (field 22 of
//! `/proc/PID/stat`, in clock ticks since boot). Same machine, same boot, same pid namespace,
//! same pid and same start time: the same process.
//!
//! # Unknown is not dead
//!
//! [`Judge::liveness`] says [`Liveness::Dead`] only when death is proven from here:
//! - this machine, this boot, this pid namespace, and the pid is gone (`kill(pid, 0)` says
//!   `ESRCH`) or belongs to another process (another start time, or a zombie);
//! - this machine, and a boot that this machine is *known* to have run (it is in the state
//!   directory's list of boots, [`crate::ledger::StateDir::known_boots`]) and that is not the
//!   current one.
//!
//! Everything else is [`Liveness::Unknown`], judged only by a lease or a TTL: another machine;
//! a boot this machine never recorded (a cloned VM image with a baked-in machine id looks like
//! "this machine, another boot"); another pid namespace (a CI job in a container that shares
//! the host's Docker socket has the host's boot id but its own pids); a pid that exists but
//! whose `/proc` entry cannot be read (`hidepid=2`); an owner label without a namespace
//! (written before namespaces were recorded) or that cannot be parsed.
//!
//! # The label form
//!
//! The identity travels on sandboxes as the `sandguard.owner` label, one string of
//! `[0-9a-z-]`: `<machine16>-<boot16>-<pid>-<start>-<pidns>`, where `machine16` and `boot16`
//! are the first 16 hex digits of `/etc/machine-id` and of the boot id (dashes removed), and
//! `pidns` is the inode number of the owner's pid namespace (`/proc/self/ns/pid`). 64 bits of
//! each id is plenty to tell machines and boots apart. A label with only the first four parts
//! (older versions) still parses, with no namespace, and is never judged dead from its pid.

pub mod death;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::OnceLock;

/// The identity of one process on one boot of one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub machine: String,
    pub boot: String,
    pub pid: u32,
    pub start_time: u64,
    /// The inode of the pid namespace `pid` is numbered in; `None` when it was not recorded.
    pub pidns: Option<u64>,
}

/// Whether an owner still runs, as far as this machine can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Liveness {
    Alive,
    /// Proven dead: see the module docs for what counts as proof.
    Dead,
    /// Cannot be judged from here; only a lease or a TTL can.
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

/// The facts that identify this machine, this boot and this pid namespace, read once per
/// process.
#[derive(Debug, Clone)]
pub struct Host {
    pub machine: String,
    pub boot: String,
    /// This process's pid namespace; `None` when `/proc/self/ns/pid` cannot be read.
    pub pidns: Option<u64>,
}

/// A machine id used when none can be read (some containers have no `/etc/machine-id`). Owners
/// carrying it are always judged [`Liveness::Unknown`] by everyone else, and by this machine.
const UNKNOWN_MACHINE: &str = "0000000000000000";

impl Host {
    /// This machine, this boot and this pid namespace.
    pub fn current() -> &'static Host {
        static HOST: OnceLock<Host> = OnceLock::new();
        HOST.get_or_init(|| {
            let machine = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok())
                .map(|s| short_hex(&s))
                .filter(|s| s.len() == 16)
                .unwrap_or_else(|| UNKNOWN_MACHINE.to_string());
            Host {
                machine,
                boot: current_boot(),
                pidns: pid_namespace(),
            }
        })
    }
}

/// This boot's id in its short form (empty when it cannot be read).
pub fn current_boot() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| short_hex(&s))
        .unwrap_or_default()
}

/// The inode of this process's pid namespace.
fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
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
            pidns: host.pidns,
        })
    }

    /// The identity of the calling process.
    pub fn current() -> Option<Identity> {
        Identity::of_pid(std::process::id())
    }

    /// The label form, `<machine16>-<boot16>-<pid>-<start>-<pidns>`.
    pub fn to_label(&self) -> String {
        let base = format!(
            "{}-{}-{}-{}",
            self.machine, self.boot, self.pid, self.start_time
        );
        match self.pidns {
            Some(ns) => format!("{base}-{ns}"),
            None => base,
        }
    }

    /// Reads the label form back (four or five parts); `None` for anything malformed.
    pub fn parse_label(label: &str) -> Option<Identity> {
        let mut parts = label.split('-');
        let machine = parts.next()?;
        let boot = parts.next()?;
        let pid = parts.next()?.parse().ok()?;
        let start_time = parts.next()?.parse().ok()?;
        let pidns = match parts.next() {
            Some(ns) => Some(ns.parse().ok()?),
            None => None,
        };
        let hex16 = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if parts.next().is_some() || !hex16(machine) || !hex16(boot) {
            return None;
        }
        Some(Identity {
            machine: machine.to_string(),
            boot: boot.to_string(),
            pid,
            start_time,
            pidns,
        })
    }

    /// Whether this identity's process still runs, judged from this machine and pid
    /// namespace, knowing no boot but the current one. For an owner the caller watches itself
    /// (the sidecar); a sweep uses a [`Judge`] that knows the boots this machine has run.
    pub fn liveness(&self) -> Liveness {
        Judge::new(BTreeSet::new()).liveness(self)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_label())
    }
}

/// Judges owners from this machine: the host's facts plus the boots this machine is known to
/// have run.
#[derive(Debug, Clone)]
pub struct Judge {
    host: Host,
    known_boots: BTreeSet<String>,
}

/// What `kill(pid, 0)` says about a pid whose `/proc` entry cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `ESRCH`: no such process in this namespace.
    NoSuchProcess,
    /// It exists (or may: `EPERM`), but cannot be inspected.
    Hidden,
}

impl Judge {
    /// A judge for this host that knows `known_boots` (short boot ids) besides the current one.
    pub fn new(known_boots: BTreeSet<String>) -> Judge {
        Judge {
            host: Host::current().clone(),
            known_boots,
        }
    }

    /// Whether the process `id` names still runs; see the module docs.
    pub fn liveness(&self, id: &Identity) -> Liveness {
        self.liveness_with(id, ProcStat::read, crate::unix::probe_pid)
    }

    /// Judges an owner label; an unreadable label is unknown.
    pub fn label(&self, label: &str) -> Liveness {
        Identity::parse_label(label).map_or(Liveness::Unknown, |id| self.liveness(&id))
    }

    fn liveness_with(
        &self,
        id: &Identity,
        read: impl Fn(u32) -> Option<ProcStat>,
        probe: impl Fn(u32) -> Probe,
    ) -> Liveness {
        let host = &self.host;
        if id.machine == UNKNOWN_MACHINE || id.machine != host.machine {
            return Liveness::Unknown;
        }
        if id.boot != host.boot {
            // Only a boot this machine recorded is one it ran; a cloned image's boots are not.
            return if !host.boot.is_empty() && self.known_boots.contains(&id.boot) {
                Liveness::Dead
            } else {
                Liveness::Unknown
            };
        }
        match (id.pidns, host.pidns) {
            (Some(theirs), Some(ours)) if theirs == ours => {}
            _ => return Liveness::Unknown,
        }
        match read(id.pid) {
            Some(stat) if stat.start_time == id.start_time && !stat.exited() => Liveness::Alive,
            Some(_) => Liveness::Dead,
            None => match probe(id.pid) {
                Probe::NoSuchProcess => Liveness::Dead,
                Probe::Hidden => Liveness::Unknown,
            },
        }
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
    /// Reads `/proc/PID/stat`; `None` when it cannot be read (no such process, or hidden).
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
            pidns: Some(4026531836),
        };
        let label = id.to_label();
        assert!(label
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-'));
        assert_eq!(Identity::parse_label(&label), Some(id.clone()));
        let old = Identity::parse_label("0123456789abcdef-fedcba9876543210-1-2").unwrap();
        assert_eq!((old.pid, old.start_time, old.pidns), (1, 2, None));
        for bad in [
            "",
            "x",
            "0123456789abcdef-fedcba9876543210-1",
            "0123456789abcdef-fedcba9876543210-1-2-3-4",
            "0123456789abcdef-fedcba9876543210-1-2-x",
            "0123-fedcba9876543210-1-2",
        ] {
            assert_eq!(Identity::parse_label(bad), None, "{bad}");
        }
    }

    fn judge(boots: &[&str]) -> Judge {
        Judge {
            host: Host {
                machine: "0123456789abcdef".into(),
                boot: "1111111111111111".into(),
                pidns: Some(99),
            },
            known_boots: boots.iter().map(|b| b.to_string()).collect(),
        }
    }

    fn owner() -> Identity {
        Identity {
            machine: "0123456789abcdef".into(),
            boot: "1111111111111111".into(),
            pid: 7,
            start_time: 100,
            pidns: Some(99),
        }
    }

    const RUNNING: ProcStat = ProcStat {
        state: 'S',
        start_time: 100,
    };

    #[test]
    fn alive_needs_the_same_machine_boot_namespace_pid_and_start_time() {
        let j = judge(&[]);
        let gone = |_| Probe::NoSuchProcess;
        let hidden = |_| Probe::Hidden;
        let at = |stat: ProcStat| move |_| Some(stat);
        assert_eq!(
            j.liveness_with(&owner(), at(RUNNING), gone),
            Liveness::Alive
        );
        let reused = ProcStat {
            start_time: 101,
            ..RUNNING
        };
        assert_eq!(j.liveness_with(&owner(), at(reused), gone), Liveness::Dead);
        let zombie = ProcStat {
            state: 'Z',
            ..RUNNING
        };
        assert_eq!(j.liveness_with(&owner(), at(zombie), gone), Liveness::Dead);
        assert_eq!(j.liveness_with(&owner(), |_| None, gone), Liveness::Dead);
        // hidepid=2: the pid exists but /proc does not show it.
        assert_eq!(
            j.liveness_with(&owner(), |_| None, hidden),
            Liveness::Unknown
        );
    }

    #[test]
    fn another_namespace_machine_or_unrecorded_boot_is_unknown_never_dead() {
        let gone = |_| Probe::NoSuchProcess;
        let nothing = |_| None;
        let j = judge(&["2222222222222222"]);
        let other_ns = Identity {
            pidns: Some(100),
            ..owner()
        };
        assert_eq!(j.liveness_with(&other_ns, nothing, gone), Liveness::Unknown);
        let unrecorded = Identity {
            pidns: None,
            ..owner()
        };
        assert_eq!(
            j.liveness_with(&unrecorded, nothing, gone),
            Liveness::Unknown
        );
        let other_machine = Identity {
            machine: "aaaaaaaaaaaaaaaa".into(),
            ..owner()
        };
        assert_eq!(
            j.liveness_with(&other_machine, nothing, gone),
            Liveness::Unknown
        );
        // A boot this machine ran and ended: dead. One it never recorded (a clone): unknown.
        let known = Identity {
            boot: "2222222222222222".into(),
            ..owner()
        };
        assert_eq!(j.liveness_with(&known, nothing, gone), Liveness::Dead);
        let cloned = Identity {
            boot: "3333333333333333".into(),
            ..owner()
        };
        assert_eq!(j.liveness_with(&cloned, nothing, gone), Liveness::Unknown);
    }

    #[test]
    fn this_process_is_alive() {
        let me = Identity::current().unwrap();
        assert!(me.pidns.is_some());
        assert_eq!(me.liveness(), Liveness::Alive);
        assert_eq!(Identity::parse_label(&me.to_label()), Some(me));
    }
}
