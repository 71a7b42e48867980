//! How a proxy (the Docker API proxy, the cloud API proxy) tells the sidecar what it saw
//! created: a [`Claim`] down the sidecar's one claims channel, acknowledged once journaled.
//! Both proxies send through [`claim`]; what each does when no acknowledgement comes is its
//! own decision (the Docker proxy passes the daemon's answer on, its labels marking the
//! object; the cloud proxy withholds the answer).
//!
//! A claim says what the sidecar journals for the new id ([`Hold`]): a create whose own labels
//! (after the session's were merged in, as the service reads them) carry
//! `sandguard.detached=true` asked to outlive its owner, and detach wins over any claim, so it
//! is journaled as a `detach`, never as a `claim`. It still carries the session's labels: the
//! session knows it made it, and only its TTL ends it. Any other value (`"false"`, `true` as a
//! JSON boolean, a key in another case) is no detach, exactly as [`crate::providers::Sandbox`]
//! reads the label at reclaim time.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::budget::Exceeded;
use crate::labels;
use crate::protocol::Target;
use crate::proxy::json::Json;

/// What a proxy asks of the sidecar, down its one channel (one order, one decision at a
/// time): a claim, or a create slot under the session's limits ([`crate::budget`]).
#[derive(Debug)]
pub(crate) enum Ask {
    Claim(Claim),
    /// A create of a sandbox of `provider` asks for a slot: answered once the slot is
    /// journaled with its number, `None` when the session has no limit (nothing is
    /// journaled), or the limit it would pass (its refusal journaled with `create`, what the
    /// create names: `super::named`).
    Slot {
        provider: String,
        create: BTreeMap<String, String>,
        answer: oneshot::Sender<Result<Option<u64>, Exceeded>>,
    },
    /// Slot `n`'s create is done: `made` when it made a sandbox (not acknowledged: a slot
    /// left open counts, which is the safe side of a budget).
    SlotDone {
        n: u64,
        made: bool,
    },
}

/// A claim from a proxy; the sidecar answers on `ack` once it is journaled.
#[derive(Debug)]
pub(crate) struct Claim {
    pub target: Target,
    /// What the sidecar journals for `target`.
    pub hold: Hold,
    /// The size the create named (`crate::ledger::price`), journaled with the claim.
    pub size: Option<String>,
    pub ack: oneshot::Sender<()>,
}

/// What a create asked the session to do with the object it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Owned: reclaimed when the owner dies.
    Claim,
    /// Created with `sandguard.detached=true`: it outlives its owner; only its TTL ends it.
    Detach,
    /// Removed by the program through the proxy: the session no longer holds it, and its
    /// claim is released at once, so the ledger never keeps a claim on an id (a volume's name)
    /// that no longer names what was made.
    Release,
}

impl Hold {
    /// From the label map a create was stamped with (its last value per key, as Go's and
    /// JavaScript's decoders keep it).
    pub(crate) fn of(labels: &[(String, Json)]) -> Hold {
        let value = labels.iter().rev().find(|(k, _)| k == labels::DETACHED);
        match value {
            Some((_, Json::String(v))) if labels::detaches(v) => Hold::Detach,
            _ => Hold::Claim,
        }
    }
}

/// How long a create answer waits for the sidecar to journal its claim.
pub(crate) const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a claim was not acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotClaimed {
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

/// Sends `target` to the sidecar, to be journaled as `hold` says (with the `size` its create
/// named, if any), and waits (at most [`ACK_TIMEOUT`]) until it is journaled.
pub(crate) async fn claim(
    claims: &mpsc::UnboundedSender<Ask>,
    target: Target,
    hold: Hold,
    size: Option<String>,
) -> Result<(), NotClaimed> {
    let (ack, acked) = oneshot::channel();
    let claim = Claim {
        target,
        hold,
        size,
        ack,
    };
    claims
        .send(Ask::Claim(claim))
        .map_err(|_| NotClaimed::Closed)?;
    match tokio::time::timeout(ACK_TIMEOUT, acked).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(NotClaimed::Dropped),
        Err(_) => Err(NotClaimed::TimedOut),
    }
}

/// A slot for a create of a sandbox of `provider`, naming `create` (waits at most [`ACK_TIMEOUT`] for the
/// sidecar to decide and journal it): `Ok(None)` when the session has no limit, or when no
/// sidecar takes asks any more (the session is ending: the create goes on as it would without
/// limits, labelled, and the settle pass finds it).
pub(crate) async fn slot(
    asks: &mpsc::UnboundedSender<Ask>,
    provider: &str,
    create: BTreeMap<String, String>,
) -> Result<Option<u64>, SlotRefusal> {
    let (answer, answered) = oneshot::channel();
    let ask = Ask::Slot {
        provider: provider.to_string(),
        create,
        answer,
    };
    if asks.send(ask).is_err() {
        return Ok(None);
    }
    match tokio::time::timeout(ACK_TIMEOUT, answered).await {
        Ok(Ok(Ok(slot))) => Ok(slot),
        Ok(Ok(Err(exceeded))) => Err(SlotRefusal::Exceeded(exceeded)),
        Ok(Err(_)) => Ok(None),
        Err(_) => Err(SlotRefusal::TimedOut),
    }
}

/// Why a create got no slot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SlotRefusal {
    /// A limit of the session.
    Exceeded(Exceeded),
    /// The sidecar did not decide within [`ACK_TIMEOUT`]: with limits set, a create is not
    /// passed on uncounted.
    TimedOut,
}

/// Tells the sidecar slot `n`'s create is done (`made`: it made a sandbox).
pub(crate) fn slot_done(asks: &mpsc::UnboundedSender<Ask>, n: u64, made: bool) {
    let _ = asks.send(Ask::SlotDone { n, made });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_string_true_under_the_exact_key_detaches() {
        let hold = |pairs: &[(&str, Json)]| {
            let pairs: Vec<(String, Json)> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            Hold::of(&pairs)
        };
        assert_eq!(
            hold(&[("sandguard.detached", Json::str("true"))]),
            Hold::Detach
        );
        let last_wins = [
            ("sandguard.detached", Json::str("false")),
            ("sandguard.detached", Json::str("true")),
        ];
        assert_eq!(hold(&last_wins), Hold::Detach);
        for no in [
            vec![],
            vec![("sandguard.detached", Json::str("false"))],
            vec![("sandguard.detached", Json::str("TRUE"))],
            vec![("sandguard.detached", Json::Bool(true))],
            vec![("Sandguard.Detached", Json::str("true"))],
            vec![
                ("sandguard.detached", Json::str("true")),
                ("sandguard.detached", Json::Null),
            ],
        ] {
            assert_eq!(hold(&no), Hold::Claim, "{no:?}");
        }
    }
}
