//! The tasks one client connection starts (its upstream connection's driver, the raw copy
//! after an upgrade), owned by that connection in both proxies: waited for once the client is
//! served ([`Tasks::finish`]: they end when their streams do), and aborted when the
//! connection's future is dropped (the proxy ending with its session), so no task outlives
//! the proxy that started it.

use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::task::JoinSet;

/// One client connection's tasks.
#[derive(Default)]
pub(crate) struct Tasks(Mutex<JoinSet<()>>);

impl Tasks {
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.lock().spawn(task);
    }

    /// Waits for every task started so far.
    pub(crate) async fn finish(&self) {
        let mut tasks = std::mem::take(&mut *self.lock());
        while tasks.join_next().await.is_some() {}
    }

    /// Copies both upgraded streams raw, once hyper hands them over, each direction shut
    /// down for writing when its source ends; `name` prefixes the log lines.
    pub(crate) fn splice(&self, name: &'static str, client: OnUpgrade, upstream: OnUpgrade) {
        self.spawn(async move {
            let (client, upstream) = match tokio::join!(client, upstream) {
                (Ok(c), Ok(u)) => (c, u),
                (Err(e), _) | (_, Err(e)) => {
                    return tracing::debug!("{name}: upgrade failed: {e}");
                }
            };
            let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
            if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
                tracing::debug!("{name}: raw stream ended: {e}");
            }
        });
    }

    fn lock(&self) -> MutexGuard<'_, JoinSet<()>> {
        // Nothing panics while holding the lock; a poisoned one still holds good data.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
