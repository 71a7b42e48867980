//! The one create pipeline both proxies run, step by step:
//!
//! 1. **read**: the create body, whole, at most [`MAX_CREATE_BODY`] ([`Refusal::TooLarge`]
//!    over it, [`Refusal::Unreadable`] when it cannot be read): a body is stamped whole or not
//!    passed on at all;
//! 2. **decide**: a create of a sandbox ([`Creates::counted`]) takes a slot under the
//!    session's limits from the sidecar ([`super::claim::slot`], [`crate::budget`]), decided
//!    one at a time and journaled before the create goes on (and before it is stamped: the
//!    Docker proxy's stamp makes a container's named volumes, which a refused create must
//!    not leave); over a limit it is refused ([`Refusal::Limit`]), and the sidecar journals
//!    the refusal with what the create names ([`Creates::named`]). A refusal here, as at every step, creates nothing and claims
//!    nothing. The slot's end is told after the answer: made, or given back when the create
//!    failed (an answer not `2xx`, or no answer);
//! 3. **stamp**: the API's own step ([`Creates::stamp`]): the session's labels merged into the
//!    body's label map as the service reads it, what the create asks the session to hold
//!    ([`Hold`]), and what the claim will need (the size it names, `super::size`); whatever must exist first is made here (the
//!    Docker proxy's named volumes, labelled and claimed). A body that cannot be stamped is
//!    refused ([`Refusal::Unstampable`]; its slot given back), never passed on unstamped;
//! 4. **forward**: the stamped body sent on with a fresh `Content-Length`
//!    ([`Creates::forward`]); an answer that is not `2xx` goes back as it came, errors
//!    included;
//! 5. **claim**: a `2xx` answer read whole, the id it names as this session's
//!    ([`Creates::created`]) handed to the sidecar and acknowledged once journaled
//!    ([`super::claim`]) before the answer goes back.
//!
//! What happens when the last step cannot finish (an answer that cannot be read, that names no
//! id of this session's, a claim not acknowledged) is each API's decision
//! ([`Creates::unclaimed`]): the Docker proxy passes the daemon's answer on (the object
//! carries the session's labels, so a reclaim finds it), the cloud proxy withholds it (`503`:
//! the program never holds a sandbox sandguard did not claim).

use std::collections::BTreeMap;
use std::future::Future;

use http_body_util::{Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::CONTENT_LENGTH;
use hyper::http::request::Parts;
use hyper::Response;
use tokio::sync::mpsc;

use super::claim::{Ask, Hold, NotClaimed};
use super::headers::strip_hop_by_hop;
use super::refusal::Refusal;
use super::stamp::{collect, TooLarge, MAX_CREATE_BODY};
use crate::protocol::Target;

/// A body as both proxies pass it: streamed as it arrives, or built by the proxy (a stamped
/// create, an answer read whole to be claimed, the proxy's own answer).
pub(crate) type Body = Either<Incoming, Full<Bytes>>;

/// A create body stamped with the session's labels.
pub(crate) struct Stamped<M> {
    pub body: Vec<u8>,
    /// What the sidecar journals for what the create makes.
    pub hold: Hold,
    /// The size the create names, journaled with its claim (`super::size`); `None` for the
    /// Docker proxy's creates.
    pub size: Option<String>,
    /// What [`Creates::created`] needs to read the answer (the Docker object's kind and name).
    pub made: M,
}

/// Why a create's `2xx` answer names nothing that was claimed.
#[derive(Debug)]
pub(crate) enum Unclaimed {
    /// It names no id, or none this session made (a Docker volume that existed before).
    NotOurs,
    /// The id it names cannot be a claim's target.
    BadId {
        id: String,
        why: crate::protocol::ProtocolError,
    },
    /// The sidecar did not acknowledge the claim.
    NotAcknowledged(Target, NotClaimed),
}

/// One API's part of the pipeline.
pub(crate) trait Creates: Sync {
    /// What stamping learned that reading the answer needs.
    type Made: Send;

    /// Step 2: the body stamped, or why it cannot be.
    fn stamp(
        &self,
        body: &[u8],
    ) -> impl Future<Output = Result<Stamped<Self::Made>, Refusal>> + Send;

    /// Step 4: the stamped body sent on; `Err` is the proxy's own answer (the service could
    /// not be reached).
    fn forward(
        &self,
        parts: Parts,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<Response<Incoming>, Response<Body>>> + Send;

    /// An answer passed back as it came (not `2xx`, or nothing to claim in it).
    fn as_is(&self, answer: Response<Incoming>) -> Response<Body>;

    /// Step 5: the claim's target for what a `2xx` answer says was made.
    fn created(&self, made: Self::Made, answer: &[u8]) -> Result<Target, Unclaimed>;

    /// The provider whose sandbox this create makes, when the session's limits count it (a
    /// Docker container, an E2B or Daytona sandbox; not a network or a volume).
    fn counted(&self) -> Option<&str>;

    /// What the create body names (`super::named`: its image, template or snapshot), for the
    /// record of a refusal.
    fn named(&self, body: &[u8]) -> BTreeMap<String, String>;

    /// The sidecar's channel (claims and slots).
    fn claims(&self) -> &mpsc::UnboundedSender<Ask>;

    /// The answer for a `2xx` create answer that could not be read whole (its body is gone).
    fn unreadable(&self) -> Response<Body>;

    /// The answer for a create whose claim could not be made; `None` passes the service's
    /// answer on.
    fn unclaimed(&self, why: Unclaimed) -> Option<Response<Body>>;
}

/// Runs a create through the five steps; `Err` is a refusal (nothing was sent on).
pub(crate) async fn create<C: Creates>(
    api: &C,
    mut parts: Parts,
    body: Incoming,
) -> Result<Response<Body>, Refusal> {
    let body = read(body).await?;
    // Decided before stamping: the Docker proxy's stamp makes a container's named volumes,
    // which a refused create must not leave behind.
    let slot = match api.counted() {
        Some(provider) => super::claim::slot(api.claims(), provider, api.named(&body))
            .await
            .map_err(Refusal::Limit)?,
        None => None,
    };
    // The slot's end, told once whatever the answer: made, unless the create surely failed.
    let done = |made: bool| {
        if let Some(n) = slot {
            super::claim::slot_done(api.claims(), n, made);
        }
    };
    let stamped = match api.stamp(&body).await {
        Ok(stamped) => stamped,
        Err(refusal) => {
            done(false);
            return Err(refusal);
        }
    };
    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
    parts
        .headers
        .insert(CONTENT_LENGTH, stamped.body.len().into());
    let answer = match api.forward(parts, stamped.body).await {
        Ok(answer) => answer,
        Err(own) => {
            done(false);
            return Ok(own);
        }
    };
    if !answer.status().is_success() {
        done(false);
        return Ok(api.as_is(answer));
    }
    // A `2xx` answer made the sandbox, whatever becomes of its claim: it counts, and its slot
    // is closed only after its claim is journaled (or failed), so that the sandbox is never
    // uncounted in between.
    let (parts, data) = answer.into_parts();
    let Ok(data) = collect(data, MAX_CREATE_BODY).await else {
        done(true);
        return Ok(api.unreadable());
    };
    let claimed = match api.created(stamped.made, &data) {
        Ok(target) => super::claim::claim(api.claims(), target.clone(), stamped.hold, stamped.size)
            .await
            .map_err(|e| Unclaimed::NotAcknowledged(target, e)),
        Err(why) => Err(why),
    };
    done(true);
    if let Err(why) = claimed {
        if let Some(own) = api.unclaimed(why) {
            return Ok(own);
        }
    }
    Ok(rebuilt(parts, data))
}

/// Step 1: a body read whole, at most [`MAX_CREATE_BODY`].
pub(crate) async fn read(body: Incoming) -> Result<Bytes, Refusal> {
    collect(body, MAX_CREATE_BODY)
        .await
        .map_err(|TooLarge(over)| match over {
            true => Refusal::TooLarge,
            false => Refusal::Unreadable,
        })
}

/// An answer read whole, sent on without its hop's headers and with a fresh
/// `Content-Length`.
pub(crate) fn rebuilt(mut parts: hyper::http::response::Parts, data: Bytes) -> Response<Body> {
    strip_hop_by_hop(&mut parts.headers, false);
    parts.headers.insert(CONTENT_LENGTH, data.len().into());
    Response::from_parts(parts, Either::Right(Full::from(data)))
}
