//! This machine, this boot and this pid namespace as the OS names them ([`Host`]): the facts
//! an owner identity ([`crate::identity`]) is made of, read once per process.
//!
//! Kept here, below `identity` and `config`, because both need the machine's id (the identity
//! for its labels, the fleet config for this host's default name) and neither may import the
//! other. What the facts mean for an owner's liveness is `identity`'s.

use std::sync::OnceLock;

/// The facts that identify this machine, this boot and this pid namespace, read once per
/// process.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    pub machine: String,
    pub boot: String,
    /// This process's pid namespace (Linux: the inode of `/proc/self/ns/pid`, `None` when it
    /// cannot be read; macOS, which has none: always 0).
    pub pidns: Option<u64>,
}

/// A machine id used when none can be read (some containers have no `/etc/machine-id`; a Mac
/// whose `gethostuuid` fails). Owners
/// carrying it are always judged [`crate::identity::Liveness::Unknown`] by everyone else, and
/// by this machine.
pub(crate) const UNKNOWN_MACHINE: &str = "0000000000000000";

impl Host {
    /// This machine, this boot and this pid namespace.
    pub(crate) fn current() -> &'static Host {
        static HOST: OnceLock<Host> = OnceLock::new();
        HOST.get_or_init(|| {
            let machine = super::os::machine_id()
                .map(|s| short_hex(&s))
                .filter(|s| s.len() == 16)
                .unwrap_or_else(|| UNKNOWN_MACHINE.to_string());
            Host {
                machine,
                boot: current_boot(),
                pidns: super::os::pid_namespace(),
            }
        })
    }
}

/// This boot's id in its short form (empty when it cannot be read).
pub(crate) fn current_boot() -> String {
    super::os::boot_id()
        .map(|s| short_hex(&s))
        .unwrap_or_default()
}

/// The first 16 hex digits of an id, lower-case, dashes and whitespace dropped.
fn short_hex(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect::<String>()
        .to_ascii_lowercase()
}
