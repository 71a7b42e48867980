//! Whether the answer to a `DELETE` of a claimed sandbox releases its claim: one decision
//! ([`releases`]) that both proxies take (`super::docker::removal`, `super::cloud::removal`),
//! after DESIGN's rule "A removal is what the provider confirmed". A released claim frees the
//! sandbox's slot under the session's limits and ends its spend, so a `DELETE` the provider
//! refused must release nothing.
//!
//! Decisions:
//! - **Judged on the path the provider routes, not on a cleaned one.** Each proxy recognises
//!   a removal on a normalised path (so that an encoded or dotted path cannot hide one), a
//!   superset; whether the provider's router takes the path *as sent* for its removal route
//!   is a second fact, [`Routed`], which each API decides as its router does: Docker's mux
//!   (`super::docker::target`), E2B's gin and Daytona's Express (`super::cloud::e2b`,
//!   `super::cloud::daytona`). A path the router redirects, answers itself (`404 page not
//!   found`, `405`) or gives another route is [`Routed::Not`], whatever its status: it
//!   releases nothing.
//! - **`2xx` on the routed path releases**: the provider says it removed (or, for Daytona,
//!   began to destroy) the sandbox the request named.
//! - **`404` releases only when it is "not found" for the claim's very id** ([`NotFound`]):
//!   the request named the sandbox by the id the claim holds (not by a name or an id prefix,
//!   which a renamed or another object could answer for), and the answer's JSON `message`
//!   names that id as a whole word (`No such container: ID`, `network ID not found`, `get
//!   NAME: no such volume`, E2B's `Sandbox "ID" doesn't exist…`, Daytona's `Sandbox with ID
//!   or name ID not found`; Podman's alike). A router's own 404 (`page not found`) names no
//!   id. The body is read only for such a `404` (at most [`MAX_NOT_FOUND`] bytes) and goes
//!   back to the program as it came, byte for byte ([`judge`]).
//! - **Anything else releases nothing**: another `4xx` (a `409` "in progress", a `400`), a
//!   `5xx`, a `3xx`. The claim stays; a later removal, the provider's event, a listing that
//!   no longer has it, or the session's reclaim settles it. Releasing too late costs a slot
//!   held a while; releasing too early would let a live sandbox out of the budget.

use http_body_util::{BodyExt, Limited};
use hyper::body::Body as _;
use hyper::{Response, StatusCode};

use super::create::{rebuilt, Body};

/// The largest `404` body read to learn what it names; a larger one names nothing.
pub(crate) const MAX_NOT_FOUND: u64 = 64 * 1024;

/// Whether the provider's router takes a `DELETE`'s path, as sent, for its removal route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed {
    /// Exactly the removal route, as the router matches it: its method (`DELETE`, in that
    /// case) and the path the program sent, not a cleaned or redirected form of it.
    Exactly,
    /// Anything else (a trailing or doubled slash mux answers `404` or redirects, a path off
    /// the route, a method in another case): what the provider answers is not its removal's.
    Not,
}

/// What a `404` answer to a routed `DELETE` says of the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotFound {
    /// The provider's "no such sandbox" for the very id the claim holds: the request named
    /// it by that id, and the answer names it.
    ThatId,
    /// Anything else: no `404`, a `404` that names no id (a router's own), or a request that
    /// named the sandbox by a name or a prefix.
    Unsaid,
}

/// Whether the answer `status` to a `DELETE` of a claimed sandbox, routed as `routed`,
/// releases the claim (see the module docs): `2xx` on [`Routed::Exactly`], or `404` there
/// with [`NotFound::ThatId`]; nothing else. Pure: both proxies and the model ask it.
pub(crate) fn releases(routed: Routed, status: u16, not_found: NotFound) -> bool {
    match (routed, status) {
        (Routed::Not, _) => false,
        (Routed::Exactly, 200..=299) => true,
        (Routed::Exactly, 404) => not_found == NotFound::ThatId,
        (Routed::Exactly, _) => false,
    }
}

/// The body of a `404` answer could not be read whole: the answer is lost, and the proxy
/// answers `502` in its own shape.
#[derive(Debug)]
pub(crate) struct Unread;

/// The answer to a `DELETE` of a claimed sandbox as it goes back to the program, and whether
/// it releases the claim ([`releases`]). `by_id` is the claim's id when the request named the
/// sandbox by that very id: only then is a `404` on a routed path read (at most
/// [`MAX_NOT_FOUND`]) to learn whether it names that id, and passed on with the same bytes.
pub(crate) async fn judge(
    answer: Response<Body>,
    routed: Routed,
    by_id: Option<&str>,
) -> Result<(Response<Body>, bool), Unread> {
    let status = answer.status().as_u16();
    let read = routed == Routed::Exactly && status == StatusCode::NOT_FOUND.as_u16();
    let (Some(id), true) = (by_id, read) else {
        return Ok((answer, releases(routed, status, NotFound::Unsaid)));
    };
    if answer.body().size_hint().lower() > MAX_NOT_FOUND {
        return Ok((answer, false));
    }
    let (parts, body) = answer.into_parts();
    let max = usize::try_from(MAX_NOT_FOUND).unwrap_or(usize::MAX);
    let data = match Limited::new(body, max).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Err(Unread),
    };
    let said = not_found(&data, id);
    Ok((rebuilt(parts, data), releases(routed, status, said)))
}

/// Whether a `404` body names `id`: a JSON object whose `message` holds `id` as a whole word
/// (not inside a longer id or name).
pub(crate) fn not_found(body: &[u8], id: &str) -> NotFound {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message")?.as_str().map(str::to_string));
    match message {
        Some(m) if names(&m, id) => NotFound::ThatId,
        _ => NotFound::Unsaid,
    }
}

/// `id` in `text`, with no id character (`[A-Za-z0-9_.-]`) either side of it.
fn names(text: &str, id: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    !id.is_empty()
        && text.match_indices(id).any(|(at, _)| {
            !part(text[..at].chars().next_back()) && !part(text[at + id.len()..].chars().next())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_routed_removal_the_provider_confirmed_releases() {
        use NotFound::{ThatId, Unsaid};
        use Routed::{Exactly, Not};
        for status in [200, 202, 204] {
            assert!(releases(Exactly, status, Unsaid), "{status}");
            assert!(!releases(Not, status, ThatId), "{status} off the route");
        }
        assert!(releases(Exactly, 404, ThatId));
        assert!(!releases(Exactly, 404, Unsaid), "a 404 naming no id");
        assert!(!releases(Not, 404, ThatId), "a 404 of a path not routed");
        for status in [301, 307, 400, 401, 403, 405, 409, 429, 500, 502, 503] {
            assert!(!releases(Exactly, status, ThatId), "{status}");
        }
    }

    #[test]
    fn a_404_names_the_id_as_a_whole_word_in_its_message() {
        let id = "3f2a9c";
        let says = |body: &str| not_found(body.as_bytes(), id);
        for body in [
            r#"{"message":"No such container: 3f2a9c"}"#,
            r#"{"message":"network 3f2a9c not found"}"#,
            r#"{"message":"get 3f2a9c: no such volume"}"#,
            r#"{"code":404,"message":"Sandbox \"3f2a9c\" doesn't exist or you don't have access to it"}"#,
            r#"{"statusCode":404,"error":"Not Found","message":"Sandbox with ID or name 3f2a9c not found"}"#,
            r#"{"cause":"no such container","message":"no container with name or ID \"3f2a9c\" found: no such container","response":404}"#,
        ] {
            assert_eq!(says(body), NotFound::ThatId, "{body}");
        }
        for body in [
            r#"{"message":"page not found"}"#,
            "404 page not found",
            r#"{"message":"No such container: 3f2a9c0"}"#,
            r#"{"message":"No such container: x3f2a9c"}"#,
            r#"{"message":"No such container: 3f2a9c.1"}"#,
            r#"{"error":"No such container: 3f2a9c"}"#,
            r#"{"message":null}"#,
            "",
        ] {
            assert_eq!(says(body), NotFound::Unsaid, "{body}");
        }
        assert_eq!(not_found(br#"{"message":"x"}"#, ""), NotFound::Unsaid);
        assert_eq!(
            not_found(br#"{"message":"get e: no such volume"}"#, "e"),
            NotFound::ThatId
        );
        assert_eq!(
            not_found(br#"{"message":"page not found"}"#, "e"),
            NotFound::Unsaid
        );
    }
}
