//! The sockets Docker-compatible engines make where their users find them, looked for when
//! nothing names a daemon (no `DOCKER_HOST`, no context, no `[providers.docker] host`).
//!
//! One list per platform ([`candidates`]), a plain function of the platform and the
//! environment, so the macOS list is built and tested on Linux too; [`crate::unix::PLATFORM`]
//! picks the list at build time. The first candidate that is a socket sandguard can trust wins
//! ([`search`]; what it trusts, [`trust`]).
//!
//! Decisions:
//! - macOS, in this order (each path from the engine's own sources or documentation):
//!   1. Docker Desktop: `~/.docker/run/docker.sock`, where Docker Desktop 4.13 and later
//!      listen (docs.docker.com, "Mac permission requirements": `/var/run/docker.sock` is
//!      only a link to it, made when "Allow the default Docker socket" is on). First: it is
//!      the engine most Macs run, and what `/var/run/docker.sock` usually links to.
//!   2. Colima: `<colima dir>/default/docker.sock`, the default profile's socket (Colima's
//!      FAQ, "Docker socket location", v0.4.0 and later; `HostSocketFile` in its
//!      `environment/container/docker/context.go`). The colima dir is `$COLIMA_HOME`, else
//!      `~/.colima`, else `$XDG_CONFIG_HOME/colima` (`~/.config/colima`), the order of
//!      `configBaseDir` in Colima's `config/files.go` and of its FAQ; each is a candidate in
//!      that order. Other profiles (`colima start -p NAME`) are found by the `colima-NAME`
//!      context Colima makes current when it starts, before this list is read.
//!   3. OrbStack: `~/.orbstack/run/docker.sock`, the endpoint of the `orbstack` context
//!      OrbStack creates.
//!   4. Rancher Desktop: `~/.rd/docker.sock`, the host end of the Lima forward of the VM's
//!      `/var/run/docker.sock` (`altAppHome` is `~/.rd` in Rancher Desktop's `rdctl paths`;
//!      the forward is set up in its Lima backend).
//!   5. Podman machine, the Docker-compatible API socket:
//!      `$TMPDIR/podman/podman-machine-default-api.sock` (`/tmp` without `TMPDIR`), where
//!      Podman 5 and later forward the default machine's API (`apiSocket` in podman's
//!      `pkg/machine/vmconfigs/sockets_darwin.go`, runtime dir `$TMPDIR/podman` in
//!      `pkg/machine/env`; since commit e58cb97, "Change API socket to be machine name
//!      isolated", in 5.0.0); then `$XDG_DATA_HOME/containers/podman/machine/podman.sock`
//!      (`~/.local/share/…`), the per-user link to the running machine's socket that Podman
//!      keeps when `podman-mac-helper` is installed (`setupForwardingLinks` in
//!      `pkg/machine/shim/networking_unix.go`). Podman 4's sockets (`…/machine/qemu/
//!      podman.sock`, `…/machine/<name>/podman.sock`) are not looked for: a Podman 4 machine
//!      does not run under Podman 5, so those paths belong to installs two major versions
//!      old; `DOCKER_HOST` reaches them.
//!   6. `/var/run/docker.sock`: on a Mac a link that whichever engine was allowed to make it
//!      made (Docker Desktop, `podman-mac-helper`, OrbStack, Rancher Desktop's administrative
//!      access), so an engine's own socket, earlier in the list, names the engine better.
//! - Linux, and every other Unix, in this order:
//!   1. rootless Docker: `$XDG_RUNTIME_DIR/docker.sock`, where `dockerd-rootless.sh` listens
//!      (Docker's "Rootless mode" docs; the `rootless` context its setup tool makes names the
//!      same socket, and a current context is read before this list);
//!   2. rootless Podman: `$XDG_RUNTIME_DIR/podman/podman.sock`, the user unit `podman.socket`'s
//!      `%t/podman/podman.sock` and `podman system service`'s default for a user;
//!   3. rootful Podman: `/run/podman/podman.sock`, the system unit's socket;
//!   4. `/var/run/docker.sock`, rootful dockerd's (and, with `podman-docker`, a link to 3).
//!
//!   A user's own engine comes before the system's: a socket in the user's runtime directory
//!   is one the user started, while the system sockets are root's, often unreadable to the
//!   user, and with the Docker proxy (the default) the program reaches the engine chosen
//!   here whatever its client's own default. When several exist, `via` names the others (see
//!   below): never a silent guess. Without `XDG_RUNTIME_DIR` (cron, `su`, a service without a
//!   login) the runtime directory is `/run/user/<uid>`, where `pam_systemd` makes it and
//!   where Podman looks itself when the variable is unset.
//! - "Exists as a socket" is `stat` following links (a link to a live socket counts; a
//!   dangling link, a regular file or a directory does not). Nothing is connected to while
//!   resolving: resolution stays one `stat` per candidate on every start, and a choice that
//!   changed with whichever daemon happened to answer would be a guess. A stale socket that
//!   wins shows as unreachable in `sandguard providers`, naming the others present.
//! - When several exist, the first wins and the others are named in [`DockerHost::via`]
//!   (a link to the chosen socket is said to be one), with what to set to choose another.
//!   When none exists, the address is [`DEFAULT_HOST`] and `via` names every path looked at.
//! - A socket another user could have made is skipped, whichever list it is on ([`trust`]:
//!   the socket owned by the user or root, its directory writable by no one else; a sticky
//!   world-writable directory such as `/tmp` is writable by others too, and is skipped, since
//!   anyone there may take the name whenever the engine is stopped). Rootless Docker's
//!   `$XDG_RUNTIME_DIR/docker.sock` with `XDG_RUNTIME_DIR=/tmp`, common in containers and CI,
//!   would otherwise hand whoever got there first every create the proxy forwards, secrets in
//!   the environment included. A skipped socket is named in `via` with why (so in `sandguard
//!   providers`), and the search goes on to the next candidate. When every socket that exists
//!   is skipped there is no address ([`Origin::Untrusted`], [`HostError::Untrusted`]), never the
//!   default one, which may be the very socket skipped; the Docker driver then counts as
//!   configured and fails every use saying which and why (the wrapper warns, `ps` and `sweep`
//!   exit 1), since a socket there says Docker is used here, and the user's own engine must not
//!   be left unguarded in silence. `DOCKER_HOST` or a context uses one anyway: an address the
//!   user names is not judged (`crate::config::docker`).
//! - Path variables that are not absolute (`HOME=relative`) are ignored, as the XDG base
//!   directory spec says of its own: a relative path would be resolved against whatever the
//!   working directory happens to be.

mod trust;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

pub(crate) use trust::listed;
pub(crate) use trust::Skipped;

use super::{DaemonAddress, DockerHost, HostError, Origin, DEFAULT_HOST, DEFAULT_SOCKET};
use crate::config::Env;
use crate::unix::owner::Owners;

/// Whose list of sockets [`candidates`] gives: Linux (the user's rootless engines, then the
/// system's) or macOS (the desktop engines' sockets in the user's home, then the default
/// socket); this binary's is [`crate::unix::PLATFORM`].
pub(crate) use crate::unix::Platform;

/// One place an engine's socket may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Whose socket it is, as messages say it: `Colima's socket`, `the default socket`.
    pub(crate) name: &'static str,
    pub(crate) path: PathBuf,
}

const DESKTOP: &str = "Docker Desktop's socket";
const COLIMA: &str = "Colima's socket";
const ORBSTACK: &str = "OrbStack's socket";
const RANCHER: &str = "Rancher Desktop's socket";
const PODMAN: &str = "Podman machine's socket";
const ROOTLESS_DOCKER: &str = "rootless Docker's socket";
const ROOTLESS_PODMAN: &str = "rootless Podman's socket";
const ROOTFUL_PODMAN: &str = "rootful Podman's socket";
const DEFAULT: &str = "the default socket";

/// Rootful Podman's socket (its system unit `podman.socket`).
const PODMAN_SYSTEM_SOCKET: &str = "/run/podman/podman.sock";

/// Where to look on `platform`, in order, each path once. A candidate whose variables are
/// unset (no `HOME`, no `COLIMA_HOME`) is left out.
pub(crate) fn candidates(platform: Platform, env: &dyn Env) -> Vec<Candidate> {
    let home = absolute(env, "HOME");
    let listed: Vec<(&'static str, Option<PathBuf>)> = match platform {
        Platform::MacOs => {
            let colima = absolute(env, "COLIMA_HOME");
            let config = absolute(env, "XDG_CONFIG_HOME").or_else(|| under(&home, ".config"));
            let data = absolute(env, "XDG_DATA_HOME").or_else(|| under(&home, ".local/share"));
            let tmp = absolute(env, "TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
            vec![
                (DESKTOP, under(&home, ".docker/run/docker.sock")),
                (COLIMA, under(&colima, "default/docker.sock")),
                (COLIMA, under(&home, ".colima/default/docker.sock")),
                (COLIMA, under(&config, "colima/default/docker.sock")),
                (ORBSTACK, under(&home, ".orbstack/run/docker.sock")),
                (RANCHER, under(&home, ".rd/docker.sock")),
                (
                    PODMAN,
                    Some(tmp.join("podman/podman-machine-default-api.sock")),
                ),
                (
                    PODMAN,
                    under(&data, "containers/podman/machine/podman.sock"),
                ),
                (DEFAULT, Some(PathBuf::from(DEFAULT_SOCKET))),
            ]
        }
        Platform::Linux => {
            let runtime = absolute(env, "XDG_RUNTIME_DIR").or_else(|| {
                Some(PathBuf::from(format!(
                    "/run/user/{}",
                    crate::unix::geteuid()
                )))
            });
            vec![
                (ROOTLESS_DOCKER, under(&runtime, "docker.sock")),
                (ROOTLESS_PODMAN, under(&runtime, "podman/podman.sock")),
                (ROOTFUL_PODMAN, Some(PathBuf::from(PODMAN_SYSTEM_SOCKET))),
                (DEFAULT, Some(PathBuf::from(DEFAULT_SOCKET))),
            ]
        }
    };
    let mut seen = HashSet::new();
    listed
        .into_iter()
        .filter_map(|(name, path)| Some(Candidate { name, path: path? }))
        .filter(|c| seen.insert(c.path.clone()))
        .collect()
}

/// The first of `candidates` that is a socket this user can trust, naming the others that
/// exist and those skipped; else no address when some were skipped, else the default
/// address, naming where it looked.
pub(crate) fn search(candidates: &[Candidate]) -> DockerHost {
    let owners = Owners::user_or_root();
    let mut safe = Vec::new();
    let mut skipped = Vec::new();
    for c in candidates.iter().filter(|c| is_socket(&c.path)) {
        match trust::judge(&c.path, owners) {
            Ok(()) => safe.push(c),
            Err(why) => skipped.push(Skipped {
                name: c.name,
                path: c.path.clone(),
                why,
            }),
        }
    }
    match safe.split_first() {
        Some((chosen, others)) => found(chosen, others, &skipped),
        None if !skipped.is_empty() => DockerHost {
            // The error names them and why; `via` says only where they came from.
            via: "the engine sockets sandguard looks for".into(),
            address: Err(HostError::Untrusted(skipped)),
            origin: Origin::Untrusted,
        },
        None => {
            let looked: Vec<PathBuf> = candidates.iter().map(|c| c.path.clone()).collect();
            DockerHost {
                address: Ok(DaemonAddress::new(DEFAULT_HOST)),
                via: format!(
                    "the default address: no engine socket exists at {}",
                    shown(&looked)
                ),
                origin: Origin::Default { looked },
            }
        }
    }
}

/// `chosen`, with the others present and those skipped named in `via`.
fn found(chosen: &Candidate, others: &[&Candidate], skipped: &[Skipped]) -> DockerHost {
    let mut via = format!(
        "{}, the first engine socket found in sandguard's order",
        chosen.name
    );
    let mut distinct = !skipped.is_empty();
    if !others.is_empty() {
        let chosen_target = std::fs::canonicalize(&chosen.path).ok();
        let named: Vec<String> = others
            .iter()
            .map(|o| {
                let same =
                    chosen_target.is_some() && std::fs::canonicalize(&o.path).ok() == chosen_target;
                distinct |= !same;
                let link = if same {
                    " (a link to the same socket)"
                } else {
                    ""
                };
                format!("{} {}{link}", o.name, o.path.display())
            })
            .collect();
        via.push_str(&format!("; also present: {}", named.join(", ")));
    }
    if !skipped.is_empty() {
        via.push_str(&format!("; skipped as unsafe: {}", listed(skipped)));
    }
    if distinct {
        via.push_str("; set DOCKER_HOST or a Docker context to use another");
    }
    DockerHost {
        address: Ok(DaemonAddress::new(format!(
            "unix://{}",
            chosen.path.display()
        ))),
        via,
        origin: Origin::Found,
    }
}

/// Whether `path` is a socket, following links.
fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// `$name` as a path, when it is set and absolute.
fn absolute(env: &dyn Env, name: &str) -> Option<PathBuf> {
    env.var(name).map(PathBuf::from).filter(|p| p.is_absolute())
}

fn under(base: &Option<PathBuf>, rest: &str) -> Option<PathBuf> {
    base.as_ref().map(|b| b.join(rest))
}

/// Paths as a message lists them.
pub(crate) fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
pub(crate) mod tests;
