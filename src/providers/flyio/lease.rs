//! Leases: what a `409 aborted: … lease currently held by …` means for a removal, and how long
//! it waits. A lease is someone's mutation lock, not a lifetime: the driver never sends the
//! nonce and never fights the lock, it waits until the lease ends.

use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::NAME;
use crate::providers::http::decode_json;

/// Added to a lease's expiry so the retry lands after it, not on its last instant.
pub(super) const LEASE_MARGIN: Duration = Duration::from_millis(200);

/// Whether a 409's message is a lease conflict (not some other state change in progress).
pub(super) fn is_lease_conflict(message: &str) -> bool {
    message
        .to_ascii_lowercase()
        .contains("lease currently held")
}

/// The expiry a lease conflict message names: `…, expires at 2026-08-14T09:57:35Z`.
pub(super) fn lease_expiry_in(message: &str) -> Option<i64> {
    let at = message.find("expires at ")? + "expires at ".len();
    let stamp: String = message[at..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '(' && *c != ';')
        .collect();
    crate::timefmt::parse_rfc3339(stamp.trim_end_matches([',', '.']))
}

/// The expiry (Unix seconds) in a `GET …/lease` body.
pub(super) fn parse_lease_body(body: &[u8]) -> Option<i64> {
    let lease: LeaseEnvelope = decode_json(body, NAME, "failed to read a lease").ok()?;
    Some(lease.data.expires_at)
}

/// How long until `expiry` (unix seconds) has passed, with a small margin; a short wait when
/// the expiry is unknown or already past.
pub(super) fn wait_until(expiry: Option<i64>, now: SystemTime) -> Duration {
    let Some(expiry) = expiry.and_then(|e| u64::try_from(e).ok()) else {
        return LEASE_MARGIN;
    };
    let end = SystemTime::UNIX_EPOCH + Duration::from_secs(expiry);
    end.duration_since(now).unwrap_or(Duration::ZERO) + LEASE_MARGIN
}

/// How long the message of a 409 makes a removal wait when it is a lease conflict, its expiry
/// read from the message or, when it names none, from the `GET …/lease` body, as
/// [`super::FlyProvider`] decides it. `None` for any other 409. For the fuzz target
/// `flyio_list`.
#[doc(hidden)]
pub fn lease_wait(message: &str, lease_body: &[u8]) -> Option<Duration> {
    is_lease_conflict(message).then(|| {
        let expiry = lease_expiry_in(message).or_else(|| parse_lease_body(lease_body));
        wait_until(expiry, SystemTime::now())
    })
}

#[derive(Debug, Deserialize)]
struct LeaseEnvelope {
    data: LeaseData,
}

#[derive(Debug, Deserialize)]
struct LeaseData {
    expires_at: i64,
}
