//! What the program removes itself through the cloud proxy (E2B's kill, Daytona's delete):
//! released at once, as the Docker proxy releases what it sees removed
//! (`crate::proxy::docker::removal`).
//!
//! A `DELETE` of a sandbox that the service answers as done (`2xx`, or `404`: it is not there)
//! releases the claim this proxy made for it, journaled and acknowledged before the answer
//! reaches the program. So the session's ledger says when the program ended its sandbox, and
//! its spend (`crate::ledger::spend`) stops there, instead of running on until a reclaim finds
//! it gone at the program's death; and `sessions show` tells it as released.
//!
//! Decisions:
//! - **Only what this proxy claimed is released**, found by the id the path names, or (for
//!   Daytona, whose delete takes an id or a name) by the name the create answer gave it. A
//!   delete of anything else passes untouched and journals nothing.
//! - **When the service accepts it.** Daytona deletes asynchronously (200, then `destroying`);
//!   the sandbox is the program's no longer from that answer on, and a reclaim would find it
//!   gone, so its time ends there. Any other answer (a 409, a 429, a 5xx) releases nothing:
//!   the sandbox is still claimed and the program may try again, or sandguard reclaims it.
//! - A release that is not acknowledged (the session is ending) is logged and the answer
//!   passes all the same: the claim it leaves is harmless, as a reclaim finds the sandbox
//!   gone.

use std::sync::Mutex;

use hyper::body::Incoming;
use hyper::{Request, Response};

use super::{forward, Body, Hold, Shared};
use crate::protocol::Target;

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

    /// Forgets the sandbox `given` names (its id, else its name) and returns its id, if this
    /// proxy claimed it.
    fn take(&self, given: &str) -> Option<String> {
        let mut made = self.lock();
        let at = made
            .iter()
            .position(|m| m.id == given)
            .or_else(|| made.iter().position(|m| m.name.as_deref() == Some(given)))?;
        Some(made.remove(at).id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Made>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A `DELETE` of the sandbox `given` names: passed on; once answered as done, what this proxy
/// claimed for it is released (journaled) before the answer goes back.
pub(super) async fn remove(req: Request<Incoming>, shared: &Shared, given: &str) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let answer = match forward::send(parts, http_body_util::Either::Left(body), shared).await {
        Ok(answer) => answer,
        Err(own) => return own,
    };
    let status = answer.status();
    if status.is_success() || status == hyper::StatusCode::NOT_FOUND {
        if let Some(id) = shared.claimed.take(given) {
            release(shared, &id).await;
        }
    }
    forward::answer_as_is(answer.map(http_body_util::Either::Left))
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
        assert_eq!(c.take("other"), None);
        assert_eq!(c.take("web").as_deref(), Some("d1"));
        assert_eq!(c.take("d1"), None, "released once");
        assert_eq!(c.take("d2").as_deref(), Some("d2"));
    }
}
