//! Whether a socket that discovery found may be used: DESIGN's "engines and endpoints are
//! trusted like the ledger". The socket must be owned by the user or root, and the directory
//! that holds it must be one only they can write to, by the same judgement as the ledger's
//! state directory ([`crate::unix::owner`], which says why group write and a sticky `/tmp`
//! count as others').
//!
//! Decisions:
//! - Two directories are judged when the path goes through a link: the one holding the name
//!   sandguard connects to (every connection goes by that path, so whoever can write there can
//!   swap the socket under it at any time) and the one holding the socket it leads to. Either
//!   may be reached through links of its own (`/var/run` is a link to `/run`): each is judged
//!   as the directory it leads to. Directories further up are not judged: a directory that
//!   only its owner can write cannot be renamed away by others unless its parent lets them,
//!   which for the candidates' parents (`/run/user/UID`, `/run`, `/var`, a home) is the
//!   system's own business.
//! - The socket's mode is not judged, its owner is: an engine leaves its socket writable by
//!   its group on purpose (`root:docker 0660`).
//! - A socket that cannot be inspected (it vanished between the search and the look) is
//!   skipped too, with the error: what cannot be judged is not used.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::unix::owner::{self, Exposed, Owners};

/// Why a socket that exists is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Distrust {
    /// A directory that holds it can be written by others.
    #[error("its directory {}: {why}", dir.display())]
    Directory { dir: PathBuf, why: Exposed },
    /// The socket is another user's.
    #[error("{0}")]
    Socket(Exposed),
    /// It could not be looked at; the error as its text (a [`Skipped`] is cloned and
    /// compared).
    #[error("cannot inspect {}: {detail}", path.display())]
    Unreadable { path: PathBuf, detail: String },
}

/// A socket that exists and was skipped, with whose it would be and why it was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Whose socket it would be: `rootless Docker's socket`.
    pub(crate) name: &'static str,
    pub(crate) path: PathBuf,
    pub(crate) why: Distrust,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({})", self.name, self.path.display(), self.why)
    }
}

/// `skipped` as a message lists them.
pub(crate) fn listed(skipped: &[Skipped]) -> String {
    skipped
        .iter()
        .map(Skipped::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the socket at `path` may be used: owned by one of `owners`, in directories only
/// they can write to (module docs).
pub(crate) fn judge(path: &Path, owners: Owners) -> Result<(), Distrust> {
    let real = std::fs::canonicalize(path).map_err(unreadable(path))?;
    let mut dirs: Vec<&Path> = path.parent().into_iter().chain(real.parent()).collect();
    dirs.dedup();
    for dir in dirs {
        let meta = std::fs::metadata(dir).map_err(unreadable(dir))?;
        owner::private_dir(&meta, owners).map_err(|why| Distrust::Directory {
            dir: dir.to_path_buf(),
            why,
        })?;
    }
    let meta = std::fs::metadata(&real).map_err(unreadable(&real))?;
    owner::owned(&meta, owners).map_err(Distrust::Socket)
}

fn unreadable(path: &Path) -> impl FnOnce(std::io::Error) -> Distrust {
    let path = path.to_path_buf();
    move |e| Distrust::Unreadable {
        path,
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    //! The judgement through [`super::super::search`], against fake runtime directories
    //! holding real bound sockets; the owner's half is `crate::unix::owner`'s tests (a socket
    //! given away needs root: the integration test `a_socket_owned_by_another_user_is_skipped`).

    use super::super::tests::{address, chmod, fake_linux, linux_list, FakeMac};
    use super::super::{search, DaemonAddress, Origin};

    /// Rootless Docker's socket in a runtime directory others can write (`XDG_RUNTIME_DIR=/tmp`:
    /// sticky and world-writable; plain world-writable; group-writable by a group of people)
    /// is skipped and named with why, and the next socket is chosen; in a directory only its
    /// owner writes, it wins. (Run as root, the directory is root's: its group is made one of
    /// people, gid 1000, since root's own group writing root's directory is the system's,
    /// `crate::unix::owner`.)
    #[test]
    fn a_socket_in_a_directory_others_can_write_is_skipped_and_the_next_chosen() {
        let fake = fake_linux("linux-planted");
        let list = linux_list(&fake);
        let (rootless, default) = (&list[0], list.last().unwrap());
        let _listeners = [FakeMac::bind(&rootless.path), FakeMac::bind(&default.path)];
        let runtime = rootless.path.parent().unwrap();
        if crate::unix::geteuid() == 0 {
            std::os::unix::fs::chown(runtime, None, Some(1000)).unwrap();
        }
        for mode in [0o1777, 0o777, 0o775, 0o730] {
            chmod(runtime, mode);
            let host = search(&list);
            assert_eq!(
                host.address.as_ref().map(DaemonAddress::expose),
                Ok(address(default).as_str())
            );
            assert_eq!(host.origin, Origin::Found);
            let skipped = format!(
                "; skipped as unsafe: rootless Docker's socket {} (its directory {}: it is \
             writable by group or others (mode {mode:04o})); set DOCKER_HOST or a Docker \
             context to use another",
                rootless.path.display(),
                runtime.display()
            );
            assert!(host.via.ends_with(&skipped), "{}", host.via);
        }
        chmod(runtime, 0o755);
        let host = search(&list);
        assert_eq!(
            host.address.as_ref().map(DaemonAddress::expose),
            Ok(address(rootless).as_str())
        );
        assert!(!host.via.contains("skipped"), "{}", host.via);
    }

    /// A link is judged by both directories: the one holding the name connected to (whoever can
    /// write there can swap the link) and the one holding the socket it leads to.
    #[test]
    fn a_link_is_judged_by_its_own_directory_and_its_sockets() {
        let fake = fake_linux("linux-links");
        let list = linux_list(&fake);
        let (rootless, default) = (&list[0], list.last().unwrap());
        let safe = fake.root.join("safe/engine.sock");
        let _engine = FakeMac::bind(&safe);
        let _default = FakeMac::bind(&default.path);
        let runtime = rootless.path.parent().unwrap();
        std::fs::create_dir_all(runtime).unwrap();
        std::os::unix::fs::symlink(&safe, &rootless.path).unwrap();

        for (link_dir, target_dir, skipped) in [
            (0o1777, 0o755, Some(runtime)),
            (0o755, 0o777, Some(safe.parent().unwrap())),
            (0o755, 0o755, None),
        ] {
            chmod(runtime, link_dir);
            chmod(safe.parent().unwrap(), target_dir);
            let host = search(&list);
            match skipped {
                Some(dir) => {
                    assert_eq!(
                        host.address.as_ref().map(DaemonAddress::expose),
                        Ok(address(default).as_str())
                    );
                    let why = format!("(its directory {}: it is writable", dir.display());
                    assert!(host.via.contains(&why), "{}", host.via);
                }
                None => assert_eq!(
                    host.address.as_ref().map(DaemonAddress::expose),
                    Ok(address(rootless).as_str())
                ),
            }
        }
    }

    /// With every socket that exists skipped there is no address, not the default one (which may
    /// be the socket skipped), and Docker is not configured by discovery.
    #[test]
    fn when_every_socket_found_is_skipped_there_is_no_address() {
        let fake = fake_linux("linux-untrusted");
        let list = linux_list(&fake);
        let default = list.last().unwrap();
        let _listener = FakeMac::bind(&default.path);
        chmod(default.path.parent().unwrap(), 0o777);
        let host = search(&list);
        assert_eq!(host.origin, Origin::Untrusted);
        let why = host.address.unwrap_err().to_string();
        let named = format!(
        "skipped as unsafe: the default socket {} (its directory {}: it is writable by group or \
         others (mode 0777)); set DOCKER_HOST to use one anyway",
        default.path.display(),
        default.path.parent().unwrap().display()
    );
        assert!(why.ends_with(&named), "{why}");
    }
}
