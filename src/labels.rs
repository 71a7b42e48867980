//! The labels that mark a sandbox as owned, and the selector that decides which sandboxes a
//! command may touch.
//!
//! Ownership is decided by these labels (and by explicit claims), never by names and never by
//! "everything except". Drivers map the keys onto whatever their provider filters by; the
//! selector is also re-checked on every listed sandbox before anything is removed, so a
//! provider that ignored the filter still cannot lead sandguard to remove a stranger.

use std::collections::BTreeMap;

pub(crate) mod inherited;

/// The session id: present on every managed sandbox.
pub const SESSION: &str = "sandguard.session";
/// The owner identity in its label form (see `crate::identity`).
pub const OWNER: &str = "sandguard.owner";
/// Unix seconds after which the sandbox may be reclaimed whatever its owner's state.
pub const EXPIRES: &str = "sandguard.expires";
/// `true`: the sandbox survives its owner; only its TTL ends it.
pub const DETACHED: &str = "sandguard.detached";

/// Whether a value of [`DETACHED`] detaches: exactly `true`, the one reading every path uses
/// (the judgement through [`crate::providers::Sandbox::is_detached`], and the proxies when
/// they decide whether a create is claimed or detached).
pub fn detaches(value: &str) -> bool {
    value == "true"
}

/// Which sandboxes a listing asks for: every pair must match (AND). A `None` value asks that
/// the key is present with a non-empty value: an empty `sandguard.session` is no session (it
/// is how the Docker proxy blanks the labels a committed image would otherwise carry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    terms: Vec<(String, Option<String>)>,
}

impl Selector {
    /// Every sandbox managed by sandguard: those carrying `sandguard.session`.
    pub fn managed() -> Selector {
        Selector {
            terms: vec![(SESSION.to_string(), None)],
        }
    }

    /// Every sandbox a provider holds, labelled or not. Only to read what a claimed sandbox
    /// carries when its provider cannot look one up (`crate::reclaim`): never the selector
    /// of a removal, which is decided by labels and claims, never by "everything".
    pub(crate) fn anything() -> Selector {
        Selector { terms: Vec::new() }
    }

    /// The sandboxes of one session.
    pub fn session(id: &str) -> Selector {
        Selector {
            terms: vec![(SESSION.to_string(), Some(id.to_string()))],
        }
    }

    /// The terms, for drivers that translate them into their provider's filter.
    pub fn terms(&self) -> &[(String, Option<String>)] {
        &self.terms
    }

    /// The session this selector is bound to, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|(k, _)| k == SESSION)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Whether a sandbox's labels satisfy every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().all(|(k, v)| match (labels.get(k), v) {
            (Some(have), None) => !have.is_empty(),
            (Some(have), Some(want)) => have == want,
            (None, _) => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn look_alikes_do_not_match() {
        let sel = Selector::session("abc");
        assert!(sel.matches(&labels(&[(SESSION, "abc"), ("x", "y")])));
        assert!(!sel.matches(&labels(&[(SESSION, "abcd")])));
        assert!(!sel.matches(&labels(&[("sandguard.session2", "abc")])));
        assert!(!sel.matches(&labels(&[("other", "abc")])));
        assert!(!sel.matches(&labels(&[])));
        assert!(Selector::managed().matches(&labels(&[(SESSION, "s")])));
        assert!(!Selector::managed().matches(&labels(&[(SESSION, "")])));
        assert!(!Selector::managed().matches(&labels(&[(OWNER, "x")])));
    }
}
