//! The one redaction of a text known to be one URL (a Docker daemon's address, the fleet
//! store's): the password of its user info and the value of every credential-shaped query
//! parameter are hidden, the rest kept. DESIGN: credentials in any URL are redacted wherever
//! the URL is printed, logged, journaled or sent.
//!
//! Decisions:
//! - The user name is kept, as Go's `URL.Redacted` keeps it: it says whose access the address
//!   carries (`ssh://deploy@host`) and is not the secret. A query's parameters are judged by
//!   their keys, as in free text (`?access_token=…`, [`super::redact`]'s credential keys).
//! - A text that does not parse as a URL, or parses only as one without an authority
//!   (`user:pw@host:2375`, its scheme left out, parses as scheme `user` and path `pw@…`),
//!   cannot be split into what is secret and what is not: it shows as its scheme (`tcp://…`),
//!   or as `…`, whenever it holds an `@` or a `?`. A path without either
//!   (`/var/run/docker.sock`) has nothing to hide and shows as it is.
//! - A URL that parses is shown as the URL parser writes it (`HTTP://H` as `http://h/`, an `@`
//!   in a password as `%40`), the form a client connecting to it uses too.

use super::{hide, shapes};

/// `text`, known to be one URL, as it may be shown (module docs): the password of its user
/// info and the values of its credential-shaped query parameters replaced by
/// [`super::MARK`].
pub(crate) fn url(text: &str) -> String {
    let parsed = match reqwest::Url::parse(text) {
        Ok(parsed) if !parsed.cannot_be_a_base() => parsed,
        _ if !text.contains(['@', '?']) => return text.to_string(),
        _ => {
            return match text.split_once("://") {
                Some((scheme, _)) => format!("{scheme}://…"),
                None => "…".into(),
            }
        }
    };
    let shown = parsed.as_str();
    let mut spans = Vec::new();
    if let Some(password) = parsed.password() {
        // The serialisation is `scheme://username:password@…`.
        let at = parsed.scheme().len() + "://".len() + parsed.username().len() + 1;
        spans.push((at, at + password.len()));
    }
    // The first `?` starts the query: one in the user info or the path is percent-encoded.
    if let (Some(_), Some(start)) = (parsed.query(), shown.find('?')) {
        let end = shown.find('#').unwrap_or(shown.len());
        let query = &shown[start..end];
        spans.extend(
            shapes(query)
                .into_iter()
                .map(|(from, to)| (start + from, start + to)),
        );
    }
    hide(shown, spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_loses_its_password_and_its_query_credentials_and_keeps_the_rest() {
        for (text, want) in [
            (
                "tcp://user:s3cretPW@127.0.0.1:2375",
                "tcp://user:[redacted]@127.0.0.1:2375",
            ),
            ("redis://:pw@h:1/0", "redis://:[redacted]@h:1/0"),
            // An `@` in the password (percent-encoded by the parser) or in the path.
            ("tcp://u:p@ss@host:1", "tcp://u:[redacted]@host:1"),
            ("unix:///run/a@b/docker.sock", "unix:///run/a@b/docker.sock"),
            (
                "https://h/x?page=2&access_token=abc#top",
                "https://h/x?page=2&access_token=[redacted]#top",
            ),
            ("ssh://deploy@host:22", "ssh://deploy@host:22"),
            ("unix:///var/run/docker.sock", "unix:///var/run/docker.sock"),
            ("tcp://127.0.0.1:1", "tcp://127.0.0.1:1"),
            // Not a URL with an authority: nothing of it is shown that could be secret.
            ("user:pw@host:2375", "…"),
            ("tcp://u:pa/ss@host", "tcp://…"),
            ("redis://a:b@[bad", "redis://…"),
            ("/var/run/docker.sock", "/var/run/docker.sock"),
        ] {
            assert_eq!(url(text), want, "{text}");
        }
    }
}
