//! `FLY_API_TOKEN` as the `Authorization` header the Machines API takes, decided the way
//! fly-go's `tokens` package decides it (`Parse`, `StripAuthorizationScheme`, `FlapsHeader`,
//! read at `superfly/fly-go@22d6e518f42d:tokens/tokens.go`).
//!
//! Decisions:
//! - Any scheme the user pasted with the token is stripped first: `FlyV1 ` or `Bearer `, any
//!   case, repeated (`Bearer FlyV1 fm2_…`), surrounding blanks ignored. `fly tokens create`
//!   prints its tokens with `FlyV1 ` in front, and the docs' curl examples put `Bearer ` there.
//! - What is left is a comma-separated list of parts. A part whose prefix before the first `_`
//!   is `fm1r`, `fm1a` or `fm2` is a macaroon; any other part is a user (OAuth/`fo1_`) token.
//! - With at least one macaroon the header is `FlyV1 <macaroons joined by ",">` and the user
//!   tokens are left out, as fly-go's Machines client (`FlapsHeader`) sends it. Without one it
//!   is `Bearer <tokens joined by ",">`. A macaroon sent as `Bearer` is refused by the API.
//! - Unlike fly-go, empty parts (a trailing comma) are dropped and a scheme word alone is no
//!   token; a token with no part at all is a configuration error that names the variable,
//!   never the value.
//! - Every part is a secret of its own ([`Header::parts`]): an API quoting one part back must
//!   not leak it.

use crate::config::Secret;
use crate::providers::ProviderError;

/// The parts fly-go's `Parse` calls macaroons.
const MACAROON_PREFIXES: &[&str] = &["fm1r", "fm1a", "fm2"];

/// The header value and the token parts in it.
pub(super) struct Header {
    pub value: Secret,
    pub parts: Vec<Secret>,
}

/// The `Authorization` value for `token` (see the module doc).
pub(super) fn header(token: &Secret) -> Result<Header, ProviderError> {
    let parts: Vec<&str> = strip_scheme(token.expose())
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return Err(ProviderError::fatal(
            "flyio: FLY_API_TOKEN (or [providers.flyio] api_token) holds no token",
        ));
    }
    let macaroons: Vec<&str> = parts.iter().copied().filter(|p| is_macaroon(p)).collect();
    let value = if macaroons.is_empty() {
        format!("Bearer {}", parts.join(","))
    } else {
        format!("FlyV1 {}", macaroons.join(","))
    };
    Ok(Header {
        value: Secret::new(value),
        parts: parts.into_iter().map(Secret::new).collect(),
    })
}

/// `token` without the `FlyV1`/`Bearer` schemes in front of it.
fn strip_scheme(token: &str) -> &str {
    let is_scheme = |w: &str| w.eq_ignore_ascii_case("Bearer") || w.eq_ignore_ascii_case("FlyV1");
    let mut rest = token.trim();
    while let Some((word, after)) = rest.split_once(char::is_whitespace) {
        if !is_scheme(word) {
            break;
        }
        rest = after.trim_start();
    }
    if is_scheme(rest) {
        ""
    } else {
        rest
    }
}

fn is_macaroon(part: &str) -> bool {
    part.split_once('_')
        .is_some_and(|(prefix, _)| MACAROON_PREFIXES.contains(&prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(token: &str) -> String {
        header(&Secret::new(token))
            .unwrap()
            .value
            .expose()
            .to_string()
    }

    #[test]
    fn the_scheme_follows_the_token() {
        assert_eq!(value("fo1_abc"), "Bearer fo1_abc");
        assert_eq!(value("fm2_abc"), "FlyV1 fm2_abc");
        assert_eq!(value("fm1r_abc"), "FlyV1 fm1r_abc");
        assert_eq!(value("fm1a_abc"), "FlyV1 fm1a_abc");
        assert_eq!(value("fm2_abc,fm2_def"), "FlyV1 fm2_abc,fm2_def");
        // Only fly-go's three prefixes are macaroons.
        assert_eq!(value("fm3_abc"), "Bearer fm3_abc");
        assert_eq!(value("fm2abc"), "Bearer fm2abc");
    }

    #[test]
    fn a_pasted_scheme_is_stripped() {
        assert_eq!(value("FlyV1 fm2_abc,fm2_def"), "FlyV1 fm2_abc,fm2_def");
        assert_eq!(value("Bearer fo1_abc"), "Bearer fo1_abc");
        assert_eq!(value("Bearer fm2_abc"), "FlyV1 fm2_abc");
        assert_eq!(value("  bearer   flyv1 fm2_abc \n"), "FlyV1 fm2_abc");
        assert_eq!(value("FlyV1 fo1_abc"), "Bearer fo1_abc");
    }

    #[test]
    fn user_tokens_beside_macaroons_stay_home_and_empty_parts_go() {
        assert_eq!(value("fo1_u, fm2_a ,fm2_b,"), "FlyV1 fm2_a,fm2_b");
        assert_eq!(value("fo1_u,,fo1_v"), "Bearer fo1_u,fo1_v");
        let h = header(&Secret::new("FlyV1 fm2_a,fo1_u")).unwrap();
        let parts: Vec<&str> = h.parts.iter().map(Secret::expose).collect();
        assert_eq!(parts, ["fm2_a", "fo1_u"]);
    }

    #[test]
    fn no_token_is_an_error_that_does_not_quote_it() {
        for blank in ["", "  ", "FlyV1 ", "Bearer ,", "FlyV1 Bearer", "bearer"] {
            let e = header(&Secret::new(blank)).err().expect(blank);
            assert!(e.to_string().contains("holds no token"), "{e}");
        }
    }
}
