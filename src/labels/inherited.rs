//! Labels a sandbox carries from its image: which of them count as its creator's. The one
//! judgement's input (rule 3 of `crate::ownership`), written once for every provider whose
//! sandboxes inherit labels (Docker's containers from their images; the model test's fake).
//! A leaf beside the label keys, so the drivers that list and the judgement both read it.
//!
//! A container carries its image's labels as its own, and the two cannot be told apart: a
//! label equal to the image's may have been set by the creator, or only inherited. The rule is
//! fail-safe in both directions:
//!
//! - **An inherited label never makes a stranger ours.** When the sandbox's
//!   `sandguard.session` equals its image's, its sandguard labels are kept, marked
//!   [`crate::providers::Sandbox::inherited`]: the judgement counts them only for a sandbox
//!   created while that session lived (a session's own `docker commit`, started again with
//!   `$SANDGUARD_LABELS`); after the session ended, only labels the creator set count. When the
//!   session label differs (the creator set its own, or none), every other `sandguard.*` label
//!   equal to the image's is dropped: an inherited `sandguard.owner` or `sandguard.expires` is
//!   not the creator's, and must not judge or end the creator's sandbox.
//! - **An inherited label never makes ours lose a detach.** `sandguard.detached` is kept
//!   whatever the image carries: a container that carries `sandguard.detached=true` is
//!   honoured as detached, as `docker inspect` shows it, whether its creator asked for it or
//!   its image carried it. Keeping it can only spare a sandbox, never remove one.
//!
//! The proxies' claims do not depend on any of this: what a create through a proxy made is
//! claimed by id, so a label equal to the image's on it is still its session's.

use std::collections::BTreeMap;

use crate::labels;

/// A set of labels.
pub(crate) type Labels = BTreeMap<String, String>;

/// Whether `key` is one of sandguard's labels.
pub(crate) fn is_sandguard(key: &str) -> bool {
    key.starts_with("sandguard.")
}

/// `labels` (a sandbox's, as its provider shows them) as ownership reads them, given the
/// sandguard labels of the image it was created from, and whether its session label was only
/// inherited (see the module docs).
pub(crate) fn own_labels(labels: Labels, image: &Labels) -> (Labels, bool) {
    let session = labels::SESSION;
    if labels
        .get(session)
        .is_some_and(|v| image.get(session) == Some(v))
    {
        return (labels, true);
    }
    let own = labels
        .into_iter()
        .filter(|(k, v)| k == labels::DETACHED || !(is_sandguard(k) && image.get(k) == Some(v)))
        .collect();
    (own, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_inherited_session_is_kept_marked_other_inherited_labels_are_dropped() {
        let image = labels(&[
            ("sandguard.session", "S"),
            ("sandguard.owner", "O"),
            ("maintainer", "m"),
        ]);
        let container = labels(&[
            ("sandguard.session", "T"), // its own session
            ("sandguard.owner", "O"),   // inherited: dropped
            ("maintainer", "m"),        // not sandguard's: kept
            ("sandguard.expires", "9"), // the image has none: its own
        ]);
        assert_eq!(
            own_labels(container, &image),
            (
                labels(&[
                    ("maintainer", "m"),
                    ("sandguard.expires", "9"),
                    ("sandguard.session", "T"),
                ]),
                false
            )
        );
        let same = labels(&[("sandguard.session", "S"), ("sandguard.owner", "O")]);
        assert_eq!(own_labels(same.clone(), &image), (same, true));
        let untouched = labels(&[("sandguard.session", "S")]);
        assert_eq!(
            own_labels(untouched.clone(), &Labels::new()),
            (untouched, false)
        );
    }

    /// Every mix of what the image carries (a session's labels or none, detached or not) and
    /// what the creator set: a container that carries `sandguard.detached=true` keeps it, and
    /// a session label the creator did not set is never one that counts unmarked.
    #[test]
    fn a_detach_is_kept_whatever_the_image_carries() {
        for image_session in [None, Some("S"), Some("T")] {
            for image_detached in [false, true] {
                for own_session in [None, Some("S")] {
                    for own_detached in [false, true] {
                        let mut image = Labels::new();
                        let mut container = Labels::new();
                        if let Some(s) = image_session {
                            image.insert(labels::SESSION.into(), s.into());
                            container.insert(labels::SESSION.into(), s.into());
                        }
                        if image_detached {
                            image.insert(labels::DETACHED.into(), "true".into());
                            container.insert(labels::DETACHED.into(), "true".into());
                        }
                        if let Some(s) = own_session {
                            container.insert(labels::SESSION.into(), s.into());
                        }
                        if own_detached {
                            container.insert(labels::DETACHED.into(), "true".into());
                        }
                        let carried = container.get(labels::DETACHED).cloned();
                        let (own, inherited) = own_labels(container.clone(), &image);
                        let case = format!(
                            "image {image_session:?} detached {image_detached}, own \
                             {own_session:?} detached {own_detached}"
                        );
                        assert_eq!(own.get(labels::DETACHED).cloned(), carried, "{case}");
                        let session = container.get(labels::SESSION);
                        let from_image = session.is_some() && session == image.get(labels::SESSION);
                        assert_eq!(inherited, from_image, "{case}");
                    }
                }
            }
        }
    }
}
