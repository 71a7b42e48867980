//! How a proxy (the Docker API proxy, the cloud API proxy) tells the sidecar what it saw
//! created: a [`Claim`] down the sidecar's one claims channel, acknowledged once journaled.
//! Both proxies send through [`claim`]; what each does when no acknowledgement comes is its
//! own decision (the Docker proxy passes the daemon's answer on, its labels marking the
//! object; the cloud proxy withholds the answer).

use std::fmt;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::protocol::Target;

/// A claim from a proxy; the sidecar answers on `ack` once it is journaled.
#[derive(Debug)]
pub struct Claim {
    pub target: Target,
    pub ack: oneshot::Sender<()>,
}

/// How long a create answer waits for the sidecar to journal its claim.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a claim was not acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotClaimed {
    /// The sidecar takes no more claims: the session is ending.
    Closed,
    /// The sidecar dropped it unanswered: the session is ending.
    Dropped,
    /// No acknowledgement within [`ACK_TIMEOUT`].
    TimedOut,
}

impl fmt::Display for NotClaimed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotClaimed::Closed => {
                f.write_str("the sidecar takes no more claims (the session is ending)")
            }
            NotClaimed::Dropped => {
                f.write_str("the sidecar dropped the claim (the session is ending)")
            }
            NotClaimed::TimedOut => write!(
                f,
                "the sidecar did not journal it within {} s",
                ACK_TIMEOUT.as_secs()
            ),
        }
    }
}

/// Sends `target` to the sidecar and waits (at most [`ACK_TIMEOUT`]) until it is journaled.
pub async fn claim(
    claims: &mpsc::UnboundedSender<Claim>,
    target: Target,
) -> Result<(), NotClaimed> {
    let (ack, acked) = oneshot::channel();
    claims
        .send(Claim { target, ack })
        .map_err(|_| NotClaimed::Closed)?;
    match tokio::time::timeout(ACK_TIMEOUT, acked).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(NotClaimed::Dropped),
        Err(_) => Err(NotClaimed::TimedOut),
    }
}
