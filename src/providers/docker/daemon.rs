//! Where the real Docker daemon listens, and a connection to it: what the Docker API proxy
//! forwards to and what the driver's few requests outside bollard (Podman's pods) are sent
//! on.

use std::io;
use std::path::PathBuf;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;

use crate::config::docker::DaemonAddress;

/// Where the real daemon listens.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
    Unix(PathBuf),
    Tcp(String),
}

/// A Docker host address the proxy (and the driver's own requests) cannot connect to: its
/// scheme is neither `unix://` nor `tcp://` / `http://` (`ssh://`, `npipe://`, …). Printed
/// redacted, as every [`DaemonAddress`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Docker proxy cannot forward to {0:?}: use unix:///path or tcp://host:port")]
pub(crate) struct UnsupportedHost(pub(crate) DaemonAddress);

/// The driver's own requests fail for good with it.
impl From<UnsupportedHost> for crate::providers::Detail {
    fn from(e: UnsupportedHost) -> Self {
        e.to_string().into()
    }
}

impl Upstream {
    /// From a Docker host address: `unix:///path`, `tcp://host:port` or `http://host:port`.
    pub(crate) fn parse(address: &DaemonAddress) -> Result<Upstream, UnsupportedHost> {
        let host = address.expose();
        if let Some(path) = host.strip_prefix("unix://") {
            return Ok(Upstream::Unix(PathBuf::from(path)));
        }
        for scheme in ["tcp://", "http://"] {
            if let Some(addr) = host.strip_prefix(scheme) {
                return Ok(Upstream::Tcp(addr.trim_end_matches('/').to_string()));
            }
        }
        Err(UnsupportedHost(address.clone()))
    }

    pub(crate) async fn connect(&self) -> io::Result<Box<dyn Io>> {
        Ok(match self {
            Upstream::Unix(p) => Box::new(UnixStream::connect(p).await?),
            Upstream::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
        })
    }
}

/// A connection to the daemon, over a unix socket or TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
