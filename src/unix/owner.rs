//! Whether a file or directory is one only this user (or root) can change: the one judgement
//! behind the ledger's state directory (`crate::ledger`) and the engine sockets that
//! discovery finds (`crate::config::docker::sockets`), so both refuse for the same reasons,
//! said the same way.
//!
//! Decisions:
//! - Group write counts as others' write: sandguard cannot tell who is in a group (members are
//!   listed in one place and primary groups in another, and both change), so a group is judged
//!   as strangers.
//! - The sticky bit does not make a directory safe (`/tmp`, mode 1777). It stops others from
//!   removing or renaming our entries, not from making their own under a name that is free:
//!   a socket path in such a directory is theirs to take whenever its engine is stopped, and
//!   every later connection by path (the Docker proxy connects once per request) would then
//!   reach them. What the rule asks is "not writable by others", and a sticky directory is.
//! - One exception, where root is trusted ([`Owners::UserOrRoot`]: what the system made): a
//!   directory root owns may be writable by its group when that group is root's own or
//!   `daemon` ([`SYSTEM_GROUPS`]: gid 0, `root`/`wheel`, and 1, `daemon`, on Linux, the BSDs
//!   and macOS alike), whose members are the system's own accounts. macOS makes
//!   `/private/var/run` `root:daemon 0775` (its `/var/run/docker.sock` is the link Docker
//!   Desktop makes), and without it that socket, the last of the macOS list, would always be
//!   skipped. No other group is trusted so, system or not: macOS's `staff` (20) and
//!   `everyone` (12) hold every user, Ubuntu's `adm` (4) its first one, `docker` people.
//!   The ledger ([`Owners::User`]) allows no group write at all.
//! - Only the mode bits and the owner are read (`stat(2)`), not ACLs: what `ls -l` shows.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// The groups whose write to a directory root owns is the system's own (module docs): gid 0
/// (`root`, `wheel`) and 1 (`daemon`).
pub(crate) const SYSTEM_GROUPS: [u32; 2] = [0, 1];

/// Who may own what is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// This user alone (`uid`): the ledger's state directory, which sandguard makes itself.
    User(u32),
    /// This user (`uid`) or root: what the system or an engine made (`/var/run`, a daemon's
    /// socket). Root can change anything anyway, so trusting it gives nothing away.
    UserOrRoot(u32),
}

impl Owners {
    /// [`Owners::User`] for this process's effective user.
    pub(crate) fn user() -> Owners {
        Owners::User(super::geteuid())
    }

    /// [`Owners::UserOrRoot`] for this process's effective user.
    pub(crate) fn user_or_root() -> Owners {
        Owners::UserOrRoot(super::geteuid())
    }

    fn allow(self, owner: u32) -> bool {
        match self {
            Owners::User(me) => owner == me,
            Owners::UserOrRoot(me) => owner == me || owner == 0,
        }
    }
}

impl std::fmt::Display for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Owners::User(me) | Owners::UserOrRoot(me @ 0) => write!(f, "uid {me}"),
            Owners::UserOrRoot(me) => write!(f, "uid {me} or root"),
        }
    }
}

/// Why someone other than [`Owners`] can change a file or directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposed {
    #[error("it is a symlink")]
    Symlink,
    #[error("it is not a directory")]
    NotDirectory,
    #[error("it is owned by uid {owner}, not by {owners}")]
    Owner { owner: u32, owners: Owners },
    #[error("it is writable by group or others (mode {mode:04o})")]
    Writable { mode: u32 },
}

/// Whether `meta` is a directory that only `owners` can write to. `meta` from
/// `symlink_metadata` refuses a link ([`Exposed::Symlink`]); from `metadata`, the directory a
/// link leads to is judged.
pub(crate) fn private_dir(meta: &Metadata, owners: Owners) -> Result<(), Exposed> {
    if meta.file_type().is_symlink() {
        return Err(Exposed::Symlink);
    }
    if !meta.is_dir() {
        return Err(Exposed::NotDirectory);
    }
    owned(meta, owners)?;
    let systems = matches!(owners, Owners::UserOrRoot(_)) && meta.uid() == 0;
    match meta.mode() & 0o022 {
        0 => Ok(()),
        0o020 if systems && SYSTEM_GROUPS.contains(&meta.gid()) => Ok(()),
        _ => Err(Exposed::Writable {
            mode: meta.mode() & 0o7777,
        }),
    }
}

/// Whether `meta` is owned by one of `owners`. Its mode is not judged: a daemon's socket is
/// `rw` for its group on purpose (`docker.sock` is `root:docker 0660`), which lets the group
/// connect, not replace it.
pub(crate) fn owned(meta: &Metadata, owners: Owners) -> Result<(), Exposed> {
    match owners.allow(meta.uid()) {
        true => Ok(()),
        false => Err(Exposed::Owner {
            owner: meta.uid(),
            owners,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir_with_mode(tag: &str, mode: u32) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sg-owner-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        dir
    }

    #[test]
    fn a_directory_is_private_when_only_its_owner_writes_it() {
        let me = Owners::user();
        for (mode, want) in [
            (0o700, Ok(())),
            (0o755, Ok(())),
            (0o1777, Err(Exposed::Writable { mode: 0o1777 })),
            (0o770, Err(Exposed::Writable { mode: 0o770 })),
            (0o703, Err(Exposed::Writable { mode: 0o703 })),
        ] {
            let dir = dir_with_mode(&format!("{mode:o}"), mode);
            let meta = std::fs::metadata(&dir).unwrap();
            assert_eq!(private_dir(&meta, me), want, "mode {mode:o}");
            std::fs::remove_dir(&dir).unwrap();
        }
        let dir = dir_with_mode("kinds", 0o700);
        let (file, link) = (dir.join("f"), dir.join("l"));
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let lstat = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap();
        assert_eq!(private_dir(&lstat(&file), me), Err(Exposed::NotDirectory));
        assert_eq!(private_dir(&lstat(&link), me), Err(Exposed::Symlink));
        // Followed, a link is judged as the directory it leads to.
        assert_eq!(private_dir(&std::fs::metadata(&link).unwrap(), me), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Root's directory written by root's own group or `daemon` (macOS's `/private/var/run`,
    /// `root:daemon 0775`) is the system's, where root is trusted; never for the ledger, and
    /// never for another group.
    #[test]
    #[ignore = "needs root to give a directory to root's groups; tests/run.sh runs ignored tests as root"]
    fn a_roots_directory_its_system_group_writes_is_the_systems() {
        assert_eq!(super::super::geteuid(), 0, "run as root");
        let dir = dir_with_mode("system-group", 0o775);
        let chown = |gid: u32| std::os::unix::fs::chown(&dir, Some(0), Some(gid)).unwrap();
        let meta = || std::fs::metadata(&dir).unwrap();
        for gid in SYSTEM_GROUPS {
            chown(gid);
            assert_eq!(
                private_dir(&meta(), Owners::UserOrRoot(1000)),
                Ok(()),
                "{gid}"
            );
            let writable = Err(Exposed::Writable { mode: 0o775 });
            assert_eq!(private_dir(&meta(), Owners::User(0)), writable, "{gid}");
        }
        chown(4);
        let writable = Err(Exposed::Writable { mode: 0o775 });
        assert_eq!(private_dir(&meta(), Owners::UserOrRoot(1000)), writable);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        chown(0);
        let writable = Err(Exposed::Writable { mode: 0o777 });
        assert_eq!(private_dir(&meta(), Owners::UserOrRoot(1000)), writable);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn an_owner_is_the_user_or_where_allowed_root() {
        let dir = dir_with_mode("who", 0o700);
        let meta = std::fs::metadata(&dir).unwrap();
        let mine = super::super::geteuid();
        let other = mine + 1;
        assert_eq!(owned(&meta, Owners::User(mine)), Ok(()));
        let refused = owned(&meta, Owners::User(other)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("it is owned by uid {mine}, not by uid {other}")
        );
        // Root's files are trusted where root is; anyone else's never.
        match mine {
            0 => assert_eq!(owned(&meta, Owners::UserOrRoot(other)), Ok(())),
            _ => assert_eq!(
                owned(&meta, Owners::UserOrRoot(other))
                    .unwrap_err()
                    .to_string(),
                format!("it is owned by uid {mine}, not by uid {other} or root")
            ),
        }
        assert_eq!(Owners::UserOrRoot(0).to_string(), "uid 0");
        std::fs::remove_dir(&dir).unwrap();
    }
}
