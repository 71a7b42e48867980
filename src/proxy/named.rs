//! What a create names, as far as the proxy reads it at the pipeline's *decide* step: the
//! Docker image, the E2B template, the Daytona snapshot. A create a limit refuses is journaled
//! with it (`create_refused`, [`crate::budget`]), so the record says which create was refused,
//! not only that one was.
//!
//! Decisions:
//! - **Only the fields an API names here, never the rest of the body.** A create body holds
//!   the program's environment (`Env`, `envs`, `envVars`), commands, and sometimes
//!   credentials; the journal, `sessions show` and `report` get only the names below, each read
//!   as the service reads its key ([`super::size::string_at`]). Headers (an API key, a
//!   registry's auth) are never read here.
//! - **Untrusted, so bounded and redacted.** A name comes from the program: a value longer than
//!   [`MAX_NAMED`] bytes, empty or holding a control character is left out (a refusal is
//!   recorded all the same), and what is kept goes through the one redaction of credentials
//!   ([`crate::providers::redact::redact`]): a template "id" that is a URL with a password, or
//!   `token=…`, never reaches the ledger.

use std::collections::BTreeMap;

use super::size::string_at;
use super::stamp::Keys;

/// The longest name kept, in bytes (an image reference with a registry, a path and a digest
/// fits).
pub(crate) const MAX_NAMED: usize = 256;

/// The fields a create of each API names what it makes by: (the word the journal uses, the key
/// as the service reads it).
pub(crate) const DOCKER: &[(&str, Keys)] = &[("image", Keys::Go("Image"))];
pub(crate) const E2B: &[(&str, Keys)] = &[("template", Keys::Go("templateID"))];
pub(crate) const DAYTONA: &[(&str, Keys)] = &[("snapshot", Keys::Exact("snapshot"))];

/// What `body` names at `fields`, each value worth keeping (see the module docs).
pub(crate) fn named(body: &[u8], fields: &[(&str, Keys)]) -> BTreeMap<String, String> {
    fields
        .iter()
        .filter_map(|&(word, keys)| {
            let value = string_at(body, keys)?;
            let kept = !value.is_empty()
                && value.len() <= MAX_NAMED
                && !value.chars().any(char::is_control);
            let no_secrets: [&crate::config::Secret; 0] = [];
            kept.then(|| {
                (
                    word.to_string(),
                    crate::providers::redact::redact(&value, no_secrets),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_names_its_image_or_template_and_nothing_else_of_its_body() {
        let docker = br#"{"Image":"busybox","Env":["TOKEN=hunter2"],"Cmd":["true"]}"#;
        assert_eq!(
            named(docker, DOCKER),
            BTreeMap::from([("image".to_string(), "busybox".to_string())])
        );
        let folded = br#"{"image":"alpine","IMAGE":"busybox:1.36"}"#;
        assert_eq!(
            named(folded, DOCKER)["image"],
            "busybox:1.36",
            "as Go reads it"
        );
        let e2b = br#"{"templateID":"base","envVars":{"API_TOKEN":"hunter2"}}"#;
        assert_eq!(named(e2b, E2B)["template"], "base");
        let daytona = br#"{"snapshot":"ubuntu","env":{"K":"hunter2"}}"#;
        assert_eq!(named(daytona, DAYTONA)["snapshot"], "ubuntu");
        for (body, fields) in [
            (&docker[..], DOCKER),
            (&e2b[..], E2B),
            (&daytona[..], DAYTONA),
        ] {
            let all = format!("{:?}", named(body, fields));
            assert!(!all.contains("hunter2"), "{all}");
        }
        assert!(named(b"{}", E2B).is_empty());
        assert!(named(b"not json", DOCKER).is_empty());
    }

    #[test]
    fn an_unprintable_overlong_or_secret_bearing_name_is_not_kept_as_it_came() {
        let body = |image: &str| serde_json::json!({ "Image": image }).to_string();
        let one = |image: &str| named(body(image).as_bytes(), DOCKER).remove("image");
        assert_eq!(one(""), None);
        assert_eq!(one("busybox\u{1b}[2J"), None);
        assert_eq!(one(&"x".repeat(MAX_NAMED + 1)), None);
        assert!(one(&"x".repeat(MAX_NAMED)).is_some());
        let url = one("https://deploy:hunter2@registry.example/app:1").unwrap();
        assert!(!url.contains("hunter2"), "{url}");
        let token = one("app?token=hunter2").unwrap();
        assert!(!token.contains("hunter2"), "{token}");
    }
}
