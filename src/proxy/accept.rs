//! The one accept loop both proxies serve from (the Docker API proxy on its unix socket, the
//! cloud API proxy on its loopback port).
//!
//! Decisions:
//!
//! - Every connection is a task in one [`JoinSet`] that the loop owns: dropping the loop's
//!   future (the sidecar ending) ends every connection with it, and finished connections are
//!   reaped as they end, so a long session does not pile up handles.
//! - An accept error (out of descriptors, most likely) is logged and the loop pauses 50 ms,
//!   so the connections it has can finish and free theirs instead of the loop spinning.
//! - A TCP connection gets `TCP_NODELAY`: requests and answers are small and latency-bound.
//! - Each connection's errors are the connection's own: the function serving it returns
//!   nothing, and one client that misbehaves ends only its connection.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;

/// How long the loop pauses after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A listening socket the loop accepts from.
pub(crate) trait Listener {
    type Conn: Send + 'static;
    fn accept_one(&self) -> impl Future<Output = io::Result<Self::Conn>> + Send;
}

impl Listener for UnixListener {
    type Conn = UnixStream;
    async fn accept_one(&self) -> io::Result<UnixStream> {
        Ok(self.accept().await?.0)
    }
}

impl Listener for TcpListener {
    type Conn = TcpStream;
    async fn accept_one(&self) -> io::Result<TcpStream> {
        let (conn, _) = self.accept().await?;
        // Only a lost optimisation if it fails; the connection still works.
        let _ = conn.set_nodelay(true);
        Ok(conn)
    }
}

/// Accepts connections on `listener` and serves each with `serve`, in a task this loop owns,
/// until the returned future is dropped. `name` prefixes the log lines ("docker proxy").
pub(crate) async fn serve<L, F, Fut>(name: &str, listener: L, serve: F)
where
    L: Listener,
    F: Fn(L::Conn) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept_one() => match accepted {
                Ok(conn) => {
                    connections.spawn(serve(conn));
                }
                Err(e) => {
                    tracing::warn!("{name}: accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
