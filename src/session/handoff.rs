//! The wrapper's handoff to its sidecar as one typed value ([`Handoff`]): what the sidecar is
//! given, by role. The wrapper makes the session itself so the program starts at once
//! (`crate::watch::start::handoff`), then starts the sidecar with these descriptors open, and
//! names them in one hidden argument, `watch --handoff VALUE`, which this module alone
//! encodes ([`Handoff::encode`]) and decodes ([`Handoff::decode`]): no flag names are joined
//! by hand on one side and matched by clap on the other.
//!
//! Decisions:
//! - **One value, generic over what a descriptor is**: borrowed while the wrapper lends them
//!   (`BorrowedFd`), numbers on the command line ([`RawFd`]), owned once the sidecar takes
//!   them ([`OwnedFd`]). Each step is one conversion of the same shape.
//! - **JSON** for the encoding: the Docker socket's path is free text, and serde is already
//!   here. A path that is not UTF-8 cannot be handed over (the wrapper fails with exit 125
//!   and says so); the state directory's paths are the user's own and UTF-8 in practice.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::proxy::cloud::Api;

/// What the wrapper hands its sidecar (see the module docs); `F` is how a descriptor is held.
#[derive(Debug, Clone)]
pub(crate) struct Handoff<F> {
    /// The new session's journal: open, locked, its `start` written but not synced.
    pub journal: F,
    /// An exit watch the owner opened of itself while alive (`crate::unix::watch_self`; `None`
    /// where the platform has none to hand).
    pub owner_exit: Option<F>,
    /// The Docker proxy's listener and its socket's path.
    pub docker: Option<(F, PathBuf)>,
    /// The cloud proxies' listeners.
    pub cloud: Vec<(Api, F)>,
}

impl<F> Handoff<F> {
    /// The same handoff with each descriptor converted by `f`; the first failure.
    pub(crate) fn try_map<G, E>(
        self,
        mut f: impl FnMut(F, &'static str) -> Result<G, E>,
    ) -> Result<Handoff<G>, E> {
        Ok(Handoff {
            journal: f(self.journal, "journal")?,
            owner_exit: self
                .owner_exit
                .map(|fd| f(fd, "owner's exit watch"))
                .transpose()?,
            docker: match self.docker {
                Some((fd, socket)) => Some((f(fd, "Docker proxy")?, socket)),
                None => None,
            },
            cloud: self
                .cloud
                .into_iter()
                .map(|(api, fd)| Ok((api, f(fd, api.name())?)))
                .collect::<Result<_, E>>()?,
        })
    }

    /// Every descriptor it holds.
    pub(crate) fn each(&self) -> impl Iterator<Item = &F> {
        std::iter::once(&self.journal)
            .chain(&self.owner_exit)
            .chain(self.docker.as_ref().map(|(fd, _)| fd))
            .chain(self.cloud.iter().map(|(_, fd)| fd))
    }
}

impl<F: AsRawFd> Handoff<F> {
    /// The numbers these descriptors have in this process.
    pub(crate) fn raw(&self) -> Handoff<RawFd> {
        let raw = |fd: &F| fd.as_raw_fd();
        Handoff {
            journal: raw(&self.journal),
            owner_exit: self.owner_exit.as_ref().map(raw),
            docker: self.docker.as_ref().map(|(fd, s)| (raw(fd), s.clone())),
            cloud: self.cloud.iter().map(|(api, fd)| (*api, raw(fd))).collect(),
        }
    }
}

/// Why a `watch --handoff` value is not a handoff (clap prints it for the argument).
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotAHandoff {
    #[error("not a sandguard handoff: {0}")]
    Json(#[from] serde_json::Error),
    #[error("not a sandguard handoff: no cloud proxy {0:?}")]
    UnknownCloud(String),
    #[error("not a sandguard handoff: a negative descriptor")]
    Negative,
}

/// The wire form: the same fields, descriptors as numbers, cloud proxies by name.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    journal: RawFd,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner_exit: Option<RawFd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    docker: Option<(RawFd, PathBuf)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cloud: Vec<(String, RawFd)>,
}

impl Handoff<RawFd> {
    /// The value of `watch --handoff`; an error names a path that cannot be handed over.
    pub(crate) fn encode(&self) -> Result<String, String> {
        if let Some((_, socket)) = &self.docker {
            if socket.to_str().is_none() {
                return Err(format!(
                    "the Docker proxy's socket {} is not UTF-8: it cannot be handed over",
                    socket.display()
                ));
            }
        }
        let wire = Wire {
            journal: self.journal,
            owner_exit: self.owner_exit,
            docker: self.docker.clone(),
            cloud: self
                .cloud
                .iter()
                .map(|(api, fd)| (api.name().to_string(), *fd))
                .collect(),
        };
        serde_json::to_string(&wire).map_err(|e| e.to_string())
    }

    /// What `watch --handoff VALUE` names (clap's value parser for it).
    pub(crate) fn decode(value: &str) -> Result<Handoff<RawFd>, NotAHandoff> {
        let wire: Wire = serde_json::from_str(value)?;
        let cloud = wire
            .cloud
            .into_iter()
            .map(|(name, fd)| match Api::named(&name) {
                Some(api) => Ok((api, fd)),
                None => Err(NotAHandoff::UnknownCloud(name)),
            })
            .collect::<Result<_, NotAHandoff>>()?;
        let handoff = Handoff {
            journal: wire.journal,
            owner_exit: wire.owner_exit,
            docker: wire.docker,
            cloud,
        };
        if handoff.each().any(|fd| *fd < 0) {
            return Err(NotAHandoff::Negative);
        }
        Ok(handoff)
    }

    /// Takes ownership of the descriptors named (inherited from the wrapper).
    pub(crate) fn take(self) -> Result<Handoff<OwnedFd>, String> {
        self.try_map(|fd, what| {
            crate::unix::take_fd(fd).map_err(|e| format!("the handed {what} at {fd}: {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handoff_reads_back_as_it_was_written() {
        let handoff = Handoff {
            journal: 11,
            owner_exit: Some(12),
            docker: Some((13, PathBuf::from("/st ate/a,b:c/docker.sock"))),
            cloud: vec![(Api::E2b, 14), (Api::Daytona, 15)],
        };
        let back = Handoff::decode(&handoff.encode().unwrap()).unwrap();
        assert_eq!(
            back.each().copied().collect::<Vec<_>>(),
            [11, 12, 13, 14, 15]
        );
        assert_eq!(back.docker, handoff.docker);
        assert_eq!(back.cloud, handoff.cloud);
        let bare = Handoff {
            journal: 10,
            owner_exit: None,
            docker: None,
            cloud: vec![],
        };
        assert_eq!(bare.encode().unwrap(), r#"{"journal":10}"#);
        for bad in [
            "",
            "{}",
            r#"{"journal":-1}"#,
            r#"{"journal":10,"cloud":[["modal",11]]}"#,
            r#"{"journal":10,"extra":1}"#,
        ] {
            assert!(Handoff::decode(bad).is_err(), "{bad}");
        }
    }
}
