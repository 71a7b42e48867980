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

pub(crate) mod death;

use std::collections::BTreeSet;
use std::fmt;

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

// This machine's facts are read in `unix` (host.rs), below this module and `config`: both
// need the machine id, and neither imports the other.
pub(crate) use crate::unix::{current_boot, Host};

impl Identity {
    /// The identity of `pid` on this machine now, or `None` if it does not exist.
    pub fn of_pid(pid: u32) -> Option<Identity> {
        let host = Host::current();
        let stat = crate::unix::process_stat(pid)?;
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

// What `kill(pid, 0)` says, as `unix::probe_pid` answers it.
pub(crate) use crate::unix::{Probe, ProcStat};

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
        self.liveness_with(id, crate::unix::process_stat, crate::unix::probe_pid)
    }

    /// The user (real uid) the process `id` names runs as, when it is alive on this machine
    /// ([`Judge::liveness`]) and its uid can be read ([`crate::unix::process_uid`]). The uid
    /// is read between two judgements of its liveness: a pid the owner left and another
    /// process took in between has another start time, and is no answer.
    pub fn user(&self, id: &Identity) -> Option<u32> {
        if self.liveness(id) != Liveness::Alive {
            return None;
        }
        let uid = crate::unix::process_uid(id.pid)?;
        (self.liveness(id) == Liveness::Alive).then_some(uid)
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
        if id.machine == crate::unix::UNKNOWN_MACHINE || id.machine != host.machine {
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
            Some(stat) if stat.start_time == id.start_time && !stat.exited => Liveness::Alive,
            Some(_) => Liveness::Dead,
            None => match probe(id.pid) {
                Probe::NoSuchProcess => Liveness::Dead,
                Probe::Hidden => Liveness::Unknown,
            },
        }
    }
}

#[cfg(test)]
mod tests;
