//! What the program removes itself through the cloud proxy (E2B's kill, Daytona's delete):
//! released at once, as the Docker proxy releases what it sees removed
//! (`crate::proxy::docker::removal`).
//!
//! A `DELETE` of a sandbox that the service confirms (`crate::proxy::release`: `2xx` on a path
//! it routes as sent, or its `404` for the very id the claim holds) releases the claim this
//! proxy made for it, journaled and acknowledged before the answer reaches the program. So
//! the session's ledger says when the program ended its sandbox, and its spend
//! (`crate::ledger::spend`) stops there, instead of running on until a reclaim finds it gone at
//! the program's death; and `sessions show` tells it as released.
//!
//! Decisions:
//! - **Only what this proxy claimed is released**, found by the id the path names, or (for
//!   Daytona, whose delete takes an id or a name) by the name the create answer gave it. A
//!   delete of anything else passes untouched and journals nothing.
//! - **When the service accepts it.** Daytona deletes asynchronously (200, then `destroying`);
//!   the sandbox is the program's no longer from that answer on, and a reclaim would find it
//!   gone, so its time ends there. Any other answer (a 409, a 429, a 5xx) releases nothing:
//!   the sandbox is still claimed and the program may try again, or sandguard reclaims it.
//! - **A `404` releases only for the id it names**: a delete by a Daytona name answered
//!   `404` says nothing of the claimed id (a name is not an identity), and a `404` of a path
//!   the service does not route (E2B's `/v2/sandboxes/{id}`) is its router's, not "no such
//!   sandbox": neither releases. The answer is read for it only then, and passed on as it
//!   came.
//! - A release that is not acknowledged (the session is ending) is logged and the answer
//!   passes all the same: the claim it leaves is harmless, as a reclaim finds the sandbox
//!   gone.

use std::sync::Mutex;

use http_body_util::Either;
use hyper::body::Incoming;
use hyper::{Request, Response};

use super::{forward, Body, Hold, Shared};
use crate::protocol::Target;
use crate::proxy::release::{self, Routed};

/// One sandbox this proxy claimed: its id and, where the service has them, its name.
#[derive(Debug)]
struct Made {
    id: String,
    name: Option<String>,
}

/// What this proxy claimed and has not seen removed.
#[derive(Debug, Default)]
pub(super) struct Claimed(Mutex<Vec<Made>>);

impl Claimed {
    /// Remembers a sandbox the proxy claimed.
    pub(super) fn made(&self, id: &str, name: Option<String>) {
        self.lock().push(Made {
            id: id.to_string(),
            name,
        });
    }

    /// The id of the sandbox `given` names (its id, else its name), if this proxy claimed it.
    fn find(&self, given: &str) -> Option<String> {
        let made = self.lock();
        let by_id = made.iter().find(|m| m.id == given);
        let found = by_id.or_else(|| made.iter().find(|m| m.name.as_deref() == Some(given)))?;
        Some(found.id.clone())
    }

    /// Forgets the sandbox claimed as `id`: `false` when it was released already.
    fn take(&self, id: &str) -> bool {
        let mut made = self.lock();
        let at = made.iter().position(|m| m.id == id);
        at.map(|at| made.remove(at)).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Made>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A `DELETE` of the sandbox `given` names, `routed` as the service takes it: passed on; once
/// the service confirms it (`crate::proxy::release`), what this proxy claimed for it is
/// released (journaled) before the answer goes back.
pub(super) async fn remove(
    req: Request<Incoming>,
    shared: &Shared,
    given: &str,
    routed: Routed,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let answer = match forward::send(parts, Either::Left(body), shared).await {
        Ok(answer) => forward::answer_as_is(answer.map(Either::Left)),
        Err(own) => return own,
    };
    let Some(id) = shared.claimed.find(given) else {
        return answer;
    };
    let by_id = (id == given).then_some(given);
    match release::judge(answer, routed, by_id).await {
        Ok((answer, true)) => {
            if shared.claimed.take(&id) {
                release(shared, &id).await;
            }
            answer
        }
        Ok((answer, false)) => answer,
        Err(release::Unread) => {
            let api = shared.api.name();
            let message =
                format!("sandguard: the {api} API's answer to a delete could not be read");
            super::answer(502, &message)
        }
    }
}

async fn release(shared: &Shared, id: &str) {
    let Ok(target) = Target::new(shared.api.name(), id) else {
        return;
    };
    if let Err(e) = crate::proxy::claim::claim(&shared.claims, target, Hold::Release, None).await {
        tracing::debug!("cloud proxy: the release of {id} was not journaled ({e})");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_claimed_is_found_by_id_or_name_once() {
        let c = Claimed::default();
        c.made("d1", Some("web".into()));
        c.made("d2", None);
        assert_eq!(c.find("other"), None);
        assert_eq!(c.find("web").as_deref(), Some("d1"));
        assert!(c.take("d1"));
        assert!(!c.take("d1"), "released once");
        assert_eq!(c.find("web"), None);
        assert_eq!(c.find("d2").as_deref(), Some("d2"));
    }
}
