//! A loopback TCP proxy in front of the Docker socket that timestamps the first `DELETE`
//! request it relays after it is armed: the moment a removal reaches Docker, as the daemon
//! would see it, without touching the daemon. The timestamp is taken when the read that
//! carries `DELETE /` returns, before the bytes go on.
//!
//! It runs on one tokio current-thread runtime of its own: a connection costs a task and one
//! connection to `/var/run/docker.sock`, not two new threads. The sidecar opens a connection
//! per request (bollard keeps none idle), so a thread pair per connection added its spawns to
//! every request of the path being measured.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Proxy {
    /// `tcp://127.0.0.1:PORT`, for `DOCKER_HOST`.
    pub url: String,
    first_delete: Arc<Mutex<Option<Instant>>>,
    armed: Arc<Mutex<bool>>,
}

impl Proxy {
    pub fn start() -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("tcp://{}", listener.local_addr().expect("address"));
        let first_delete = Arc::new(Mutex::new(None));
        let armed = Arc::new(Mutex::new(false));
        let (fd, arm) = (first_delete.clone(), armed.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let Ok(daemon) = tokio::net::UnixStream::connect("/var/run/docker.sock").await
                    else {
                        continue;
                    };
                    tokio::spawn(relay(client, daemon, fd.clone(), arm.clone()));
                }
            });
        });
        Proxy {
            url,
            first_delete,
            armed,
        }
    }

    /// From now on, the first `DELETE` is timestamped.
    pub fn arm(&self) {
        *self.first_delete.lock().unwrap() = None;
        *self.armed.lock().unwrap() = true;
    }

    /// When the first `DELETE` since [`Proxy::arm`] was relayed, waiting at most `limit`.
    pub fn wait_first_delete(&self, limit: Duration) -> Option<Instant> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(t) = *self.first_delete.lock().unwrap() {
                *self.armed.lock().unwrap() = false;
                return Some(t);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        None
    }
}

/// Copies one connection both ways, timestamping the first armed `DELETE`; each direction is
/// half-closed when its source ends.
async fn relay(
    client: tokio::net::TcpStream,
    daemon: tokio::net::UnixStream,
    first: Arc<Mutex<Option<Instant>>>,
    armed: Arc<Mutex<bool>>,
) {
    let (mut c_read, mut c_write) = client.into_split();
    let (mut d_read, mut d_write) = daemon.into_split();
    let up = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match c_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now();
            if buf[..n].windows(8).any(|w| w == b"DELETE /") && *armed.lock().unwrap() {
                let mut slot = first.lock().unwrap();
                if slot.is_none() {
                    *slot = Some(now);
                }
            }
            if d_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = d_write.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut d_read, &mut c_write).await;
        let _ = c_write.shutdown().await;
    };
    tokio::join!(up, down);
}
