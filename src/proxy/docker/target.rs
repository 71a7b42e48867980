//! Where a request goes, decided as Docker decides it: the request target normalised the way
//! Go's `net/http` and gorilla/mux (Docker's router) read it, then matched against the few
//! routes the proxy rewrites or must recognise.
//!
//! Go parses the target with `url.ParseRequestURI`: an absolute-form target
//! (`http://docker/v1.41/containers/create`, any scheme) routes by its path, the query is cut
//! at the first `?`, and the path is percent-decoded before routing, so `%63reate` is `create`
//! and `containers%2Fcreate` is `containers/create`. gorilla/mux answers a path that is not
//! clean (dot segments, doubled slashes) with a redirect rather than routing it, and one with
//! a trailing slash with its own `404 page not found` (Docker's router is not `StrictSlash`);
//! the proxy cleans the path and matches anyway, so such a path is at worst stamped once too
//! often, never passed on unstamped. A target Go would refuse (a bad `%` escape, a relative
//! path) is refused here too. Routes match case-sensitively, as mux does; the methods `POST`
//! and `DELETE` match in any case (a superset: stamping a request mux would not route costs
//! nothing).
//!
//! Decision: a superset is safe for a create, not for a removal, whose answer releases a
//! claim (`crate::proxy::release`). So a [`Route::Remove`] also says whether mux routes it
//! as sent ([`Routed::Exactly`]): the method exactly `DELETE` (mux compares methods as
//! registered) and the decoded path already clean, with no trailing slash, doubled slash or
//! dot segment; anything else reached the daemon as a redirect or a `404` of its router, and
//! releases nothing.

use crate::proxy::path::{clean, decode};
pub(crate) use crate::proxy::release::Routed;

/// Which Docker object a request creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Create {
    Container,
    Network,
    Volume,
}

/// What the proxy does with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST [/vX.Y]/{containers,networks,volumes}/create`: stamped, its answer claimed.
    /// `version` is the prefix as routed (`/v1.41`, or empty), for the proxy's own requests.
    Create {
        kind: Create,
        version: String,
    },
    /// `POST [/vX.Y]/commit`: sandguard's labels are kept out of the image.
    Commit,
    /// `[/vX.Y]/containers/{id}/attach`: the daemon hijacks the connection (with `101` when
    /// asked for an upgrade).
    Attach,
    /// `[/vX.Y]/exec/{id}/start`: hijacked as an attach is, unless its body asks to detach.
    ExecStart,
    /// `DELETE [/vX.Y]/{containers,networks,volumes}/{id}`: what the program removes itself;
    /// its claim is released once the daemon says it is gone. `given` is the id or name as
    /// the request named it; `routed`, whether mux takes the request as sent for the removal.
    Remove {
        kind: Create,
        given: String,
        routed: Routed,
    },
    /// `POST [/vX.Y]/{containers,networks,volumes}/prune`: the answer names what went.
    Prune {
        kind: Create,
    },
    /// Any request but `GET` or `HEAD` under `[/vX.Y]/libpod/`: Podman's own API, which the
    /// proxy does not stamp (refused, [`LIBPOD_REFUSED`]).
    Libpod,
    Other,
}

/// Why a request to Podman's own API is refused. Podman serves two APIs on one socket: the
/// Docker-compatible one, which the proxy stamps, and its own (`/libpod/…`), whose creates
/// (`containers/create`, `pods/create`, `networks/create`, `volumes/create`, `kube/play`, a
/// checkpoint `restore` with `import`, `quadlets`, …) carry labels under other keys and are
/// answered in other shapes. Rather than pass on a create it cannot stamp, the proxy refuses
/// every request there that could change anything (all but `GET` and `HEAD`), the way it
/// refuses any request it cannot judge. No Docker client sends them (the docker CLI,
/// docker-py, testcontainers and compose speak the compatible API, which Podman serves in
/// full); Podman's own clients read `CONTAINER_HOST`, not the `DOCKER_HOST` the proxy is
/// given, and reach the engine directly, where what they make is sandguard's only if it
/// carries `$SANDGUARD_LABELS` (the label path).
pub(crate) const LIBPOD_REFUSED: &str =
    "sandguard: the Docker proxy serves the Docker API and does not \
     label what Podman's own API (/libpod/) would create; use the Docker-compatible API \
     (DOCKER_HOST), or reach Podman directly and label what you create with $SANDGUARD_LABELS";

/// Routes a request by its method and raw target. `Err` names why Go would refuse it.
pub fn route(method: &str, target: &str) -> Result<Route, &'static str> {
    let Some(path) = path(target)? else {
        return Ok(Route::Other);
    };
    let Ok(path) = String::from_utf8(path) else {
        return Ok(Route::Other); // no Docker route has bytes that are not UTF-8
    };
    let segments = clean(&path);
    let (version, rest) = match segments.split_first() {
        Some((v, rest)) if is_version(v) => (format!("/{v}"), rest),
        _ => (String::new(), &segments[..]),
    };
    let post = method.eq_ignore_ascii_case("POST");
    let delete = method.eq_ignore_ascii_case("DELETE");
    let create = |kind| Route::Create {
        kind,
        version: version.clone(),
    };
    let kind = |plural: &str| match plural {
        "containers" => Some(Create::Container),
        "networks" => Some(Create::Network),
        "volumes" => Some(Create::Volume),
        _ => None,
    };
    let read = method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD");
    Ok(match rest {
        ["libpod", ..] if !read => Route::Libpod,
        [plural, "prune"] if post && kind(plural).is_some() => Route::Prune {
            kind: kind(plural).unwrap_or(Create::Container),
        },
        [plural, given] if delete && kind(plural).is_some() => Route::Remove {
            kind: kind(plural).unwrap_or(Create::Container),
            given: (*given).to_string(),
            routed: match method == "DELETE" && path == format!("/{}", segments.join("/")) {
                true => Routed::Exactly,
                false => Routed::Not,
            },
        },
        ["containers", "create"] if post => create(Create::Container),
        ["networks", "create"] if post => create(Create::Network),
        ["volumes", "create"] if post => create(Create::Volume),
        ["commit"] if post => Route::Commit,
        ["containers", _, .., "attach"] => Route::Attach,
        ["exec", _, .., "start"] => Route::ExecStart,
        _ => Route::Other,
    })
}

/// The decoded path of a request target, as Go's `url.ParseRequestURI` sets `URL.Path`;
/// `None` when it has none to route by (`*`, an opaque `scheme:path`).
fn path(target: &str) -> Result<Option<Vec<u8>>, &'static str> {
    if target == "*" {
        return Ok(None);
    }
    let (scheme, rest) = split_scheme(target)?;
    let rest = rest.split('?').next().unwrap_or("");
    let rest = match (scheme, rest.strip_prefix("//")) {
        // Absolute form: the path starts after the authority.
        (true, Some(authority)) => authority.find('/').map_or("", |i| &authority[i..]),
        (_, _) if rest.starts_with('/') => rest,
        (true, _) => return Ok(None),
        (false, _) => return Err("its request target is not a path or an absolute URL"),
    };
    decode(rest).map(Some)
}

/// Go's `getScheme`: `[A-Za-z][A-Za-z0-9+.-]*:`, else no scheme at all.
fn split_scheme(target: &str) -> Result<(bool, &str), &'static str> {
    for (i, c) in target.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("its request target has no scheme before ':'"),
            b':' => return Ok((true, &target[i + 1..])),
            _ => break,
        }
    }
    Ok((false, target))
}

/// Docker's version prefix: `v[0-9.]+`.
fn is_version(segment: &str) -> bool {
    segment
        .strip_prefix('v')
        .is_some_and(|v| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit() || c == b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(kind: Create, version: &str) -> Result<Route, &'static str> {
        Ok(Route::Create {
            kind,
            version: version.into(),
        })
    }

    #[test]
    fn creates_however_the_target_is_spelled() {
        let c = |t: &str| route("POST", t);
        assert_eq!(c("/containers/create"), create(Create::Container, ""));
        let v141 = create(Create::Container, "/v1.41");
        for t in [
            "/v1.41/containers/create?name=x",
            "/v1.41/containers/%63reate",
            "/v1.41/containers%2Fcreate",
            "/v1.41/containers%2fcreate/",
            "http://docker/v1.41/containers/create",
            "HTTP+X://docker:2375/v1.41/containers/create?x",
            "x:/v1.41/containers/create",
            "//v1.41//containers/./create",
            "/v1.41/images/../containers/create",
            "/v1.41/containers/create#frag?",
        ] {
            let want = if t.contains('#') {
                Ok(Route::Other)
            } else {
                v141.clone()
            };
            assert_eq!(c(t), want, "{t}");
        }
        assert_eq!(
            c("/v1.47/networks/create"),
            create(Create::Network, "/v1.47")
        );
        assert_eq!(c("/volumes/create"), create(Create::Volume, ""));
        assert_eq!(c("/v1.41/commit?container=x"), Ok(Route::Commit));
        assert_eq!(route("post", "/commit"), Ok(Route::Commit));
    }

    #[test]
    fn what_is_not_a_create() {
        let c = |t: &str| route("POST", t);
        assert_eq!(route("GET", "/containers/create"), Ok(Route::Other));
        assert_eq!(c("/v1.41/containers/abc/start"), Ok(Route::Other));
        assert_eq!(c("/v1.x/containers/create"), Ok(Route::Other));
        assert_eq!(c("/CONTAINERS/create"), Ok(Route::Other));
        assert_eq!(c("/containers/create%ff"), Ok(Route::Other));
        assert_eq!(c("http://docker"), Ok(Route::Other));
        assert_eq!(c("x:containers/create"), Ok(Route::Other));
        assert_eq!(c("*"), Ok(Route::Other));
        assert_eq!(
            c("/v1.41/containers/create?/x"),
            create(Create::Container, "/v1.41")
        );
    }

    #[test]
    fn podmans_own_api_is_refused_unless_it_only_reads() {
        for (method, target) in [
            ("POST", "/v4.0.0/libpod/containers/create"),
            ("POST", "/libpod/pods/create"),
            ("post", "/v5.0.0/libpod/kube/play"),
            ("POST", "http://d/v4.0.0/libpod%2Fvolumes/create"),
            ("DELETE", "/v4.0.0/libpod/containers/abc"),
            ("PUT", "/libpod/containers/abc/archive"),
        ] {
            assert_eq!(
                route(method, target),
                Ok(Route::Libpod),
                "{method} {target}"
            );
        }
        assert_eq!(route("GET", "/v4.0.0/libpod/_ping"), Ok(Route::Other));
        assert_eq!(route("HEAD", "/libpod/_ping"), Ok(Route::Other));
        assert_eq!(route("POST", "/v1.41/LIBPOD/pods/create"), Ok(Route::Other));
    }

    #[test]
    fn targets_go_refuses() {
        assert!(route("POST", "/containers/%zzreate").is_err());
        assert!(route("POST", "/containers/create%2").is_err());
        assert!(route("POST", "containers/create").is_err());
        assert!(route("POST", "%2Fv1.41/containers/create").is_err());
        assert!(route("POST", ":/containers/create").is_err());
        assert!(route("POST", "1x:/containers/create").is_err());
    }

    #[test]
    fn removals_and_prunes() {
        let remove = |kind, given: &str| {
            Ok(Route::Remove {
                kind,
                given: given.into(),
                routed: Routed::Exactly,
            })
        };
        assert_eq!(
            route("DELETE", "/v1.41/volumes/v1?force=1"),
            remove(Create::Volume, "v1")
        );
        assert_eq!(
            route("DELETE", "/containers/%61bc"),
            remove(Create::Container, "abc")
        );
        assert_eq!(
            route("DELETE", "http://d/v1.41/networks/n1"),
            remove(Create::Network, "n1")
        );
        assert_eq!(route("GET", "/volumes/v1"), Ok(Route::Other));
        assert_eq!(route("DELETE", "/images/i1"), Ok(Route::Other));
        assert_eq!(
            route("POST", "/v1.41/volumes/prune"),
            Ok(Route::Prune {
                kind: Create::Volume
            })
        );
        assert_eq!(route("GET", "/volumes/prune"), Ok(Route::Other));
    }

    #[test]
    fn a_removal_mux_does_not_route_as_sent_is_not_routed() {
        let not = |kind, given: &str| {
            Ok(Route::Remove {
                kind,
                given: given.into(),
                routed: Routed::Not,
            })
        };
        for target in [
            "/v1.41/containers/abc/",
            "/v1.41/containers/abc%2F",
            "/v1.41//containers/abc",
            "//containers/abc",
            "/v1.41/containers/./abc",
            "/v1.41/images/../containers/abc",
            "/v1.41/containers/abc/.",
        ] {
            assert_eq!(
                route("DELETE", target),
                not(Create::Container, "abc"),
                "{target}"
            );
        }
        assert_eq!(
            route("delete", "/v1.41/volumes/v1"),
            not(Create::Volume, "v1"),
            "mux matches the method as registered"
        );
    }

    #[test]
    fn hijacks() {
        for t in [
            "/v1.41/containers/abc/attach?stream=1",
            "/containers/a%2Fb/attach",
        ] {
            assert_eq!(route("POST", t), Ok(Route::Attach), "{t}");
        }
        assert_eq!(route("POST", "/v1.41/exec/e1/start"), Ok(Route::ExecStart));
        assert_eq!(route("POST", "/containers/attach"), Ok(Route::Other));
    }
}
