//! The size a create names, read from its body for prices (`crate::ledger::price`): the cloud
//! proxy hands it to the sidecar with the claim, which journals it.
//!
//! Decisions:
//! - **As the service reads it.** The key is found as the label map's is
//!   ([`Keys`]): E2B's Go service takes every case-folded spelling, in order, the last string
//!   winning (a `null` leaves the field as it was, as `encoding/json` does for a string);
//!   Daytona's `JSON.parse` takes the key as spelled, the last one replacing the others. A
//!   value that is not a string (which the service refuses) names no size.
//! - **Only a name worth printing.** The size comes from the program, so it is untrusted: a
//!   value longer than [`MAX_SIZE`] bytes, empty, or holding a control character names no
//!   size (the sandbox is priced at its provider's `price_per_hour`). It is never a reason
//!   to refuse a create: prices are an estimate, the guard is not.

use crate::proxy::json::{go_field, Json};
use crate::proxy::stamp::Keys;

/// The longest size kept, in bytes (a template id or alias, a snapshot name).
pub(crate) const MAX_SIZE: usize = 128;

/// The size `body` names at `keys`, if it names one worth keeping (see the module docs).
pub(crate) fn named(body: &[u8], keys: Keys) -> Option<String> {
    string_at(body, keys).filter(|s| kept(s))
}

/// The string `body` holds at the top-level key `keys`, as the service reads it (see the
/// module docs); `None` when it holds none, or a value that is not a string.
pub(crate) fn string_at(body: &[u8], keys: Keys) -> Option<String> {
    let Ok(Json::Object(pairs)) = Json::parse(body) else {
        return None;
    };
    let value = match keys {
        Keys::Go(name) => pairs
            .iter()
            .rfind(|(k, v)| go_field(k, name) && !matches!(v, Json::Null)),
        Keys::Exact(name) => pairs.iter().rfind(|(k, _)| k == name),
    };
    match value {
        Some((_, Json::String(s))) => Some(s.clone()),
        _ => None,
    }
}

fn kept(size: &str) -> bool {
    !size.is_empty() && size.len() <= MAX_SIZE && !size.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_read_as_the_service_reads_the_key() {
        let go = |body: &str| named(body.as_bytes(), Keys::Go("templateID"));
        assert_eq!(go(r#"{"templateID":"base"}"#).as_deref(), Some("base"));
        assert_eq!(
            go(r#"{"templateID":"base","TEMPLATEID":"gpu","templateid":null}"#).as_deref(),
            Some("gpu"),
            "case folded, the last string wins, a null changes nothing"
        );
        assert_eq!(go(r#"{"templateID":7}"#), None, "refused by the service");
        assert_eq!(go(r#"{"metadata":{}}"#), None);
        assert_eq!(go("not json"), None);
        let exact = |body: &str| named(body.as_bytes(), Keys::Exact("snapshot"));
        assert_eq!(
            exact(r#"{"snapshot":"a","Snapshot":"b","snapshot":"c"}"#).as_deref(),
            Some("c")
        );
        assert_eq!(exact(r#"{"snapshot":"a","snapshot":null}"#), None);
    }

    #[test]
    fn an_unprintable_or_overlong_size_is_no_size() {
        let go = |size: &str| {
            let body = serde_json::json!({ "templateID": size }).to_string();
            named(body.as_bytes(), Keys::Go("templateID"))
        };
        assert_eq!(
            go("code-interpreter-v1").as_deref(),
            Some("code-interpreter-v1")
        );
        assert_eq!(go(""), None);
        assert_eq!(go("base\u{1b}[2J"), None);
        assert_eq!(go(&"x".repeat(MAX_SIZE + 1)), None);
        assert!(go(&"x".repeat(MAX_SIZE)).is_some());
    }
}
