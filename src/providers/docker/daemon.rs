//! Where the real Docker daemon listens, and a connection to it: what the Docker API proxy
//! forwards to and what the driver's few requests outside bollard (Podman's pods) are sent
//! on.

use std::io;
use std::path::PathBuf;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixStream;

/// Where the real daemon listens.
#[derive(Debug, Clone)]
pub(crate) enum Upstream {
    Unix(PathBuf),
    Tcp(String),
}

impl Upstream {
    /// From a Docker host address: `unix:///path`, `tcp://host:port` or `http://host:port`.
    pub(crate) fn parse(host: &str) -> Result<Upstream, String> {
        if let Some(path) = host.strip_prefix("unix://") {
            return Ok(Upstream::Unix(PathBuf::from(path)));
        }
        for scheme in ["tcp://", "http://"] {
            if let Some(addr) = host.strip_prefix(scheme) {
                return Ok(Upstream::Tcp(addr.trim_end_matches('/').to_string()));
            }
        }
        Err(format!(
            "the Docker proxy cannot forward to {host:?}: use unix:///path or tcp://host:port"
        ))
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
