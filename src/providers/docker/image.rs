//! Labels inherited from an image are not ownership.
//!
//! A container carries its image's labels as its own. An image committed or built elsewhere
//! with `sandguard.session=S` would make every container started from it, by anyone, look
//! like one of S's sandboxes, and S's reclaim (or a sweep) would remove it. So a listed
//! container loses every `sandguard.*` label whose value equals the same label on its image
//! ([`own_labels`]); other labels are left as they are.
//!
//! Decisions:
//! - The image is the one the container was created from: inspected by the container's
//!   `ImageID` (a content address), so re-tagging an image changes nothing. Its sandguard
//!   labels are cached per image id for the life of the driver: an id never names other
//!   content. Only images that exist are cached.
//! - An image that is gone (404) leaves the container's labels as they are: there is nothing
//!   to compare with, and Docker keeps an image while a container uses it, so this is rare.
//! - A label the container was given with the same value as its image's cannot be told from
//!   an inherited one. For `sandguard.session` that is the case of a container started from a
//!   session's own `docker commit` with `$SANDGUARD_LABELS`: the container keeps its labels,
//!   marked [`crate::providers::Sandbox::inherited`], and the one judgement
//!   ([`crate::ownership`]) counts them only when the container was created while that
//!   session lived (after it ended, only labels its creator set count). Any other sandguard
//!   label equal to its image's is dropped (a claim still covers such a container).
//! - When the image cannot be inspected (a timeout, a 5xx, no `ImageID`), nothing is guessed:
//!   the container is neither listed as owned nor silently dropped; the listing reports an
//!   error naming it, so `ps`/`stop` exit 1 and a reclaim stays pending for the next sweep.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bollard::errors::Error as BollardError;
use bollard::Docker;
use futures_util::stream::{self, StreamExt};

use super::error::{classify, short};
use crate::providers::ProviderError;

/// The `sandguard.*` labels of one image.
pub(super) type Labels = BTreeMap<String, String>;

/// How many images are inspected at once.
const CONCURRENCY: usize = 4;

/// What is known about one image.
#[derive(Debug, Clone)]
pub(super) enum Image {
    Exists(Arc<Labels>),
    /// Docker answered 404.
    Gone,
}

/// Images' sandguard labels by image id (see the module docs).
#[derive(Default)]
pub(super) struct ImageCache(Mutex<HashMap<String, Arc<Labels>>>);

impl ImageCache {
    fn get(&self, id: &str) -> Option<Arc<Labels>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn put(&self, id: &str, labels: Arc<Labels>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.to_string(), labels);
    }

    /// Each of `ids`: from the cache, else inspected (a few at a time).
    pub(super) async fn lookup(
        &self,
        docker: &Docker,
        host: &str,
        ids: BTreeSet<String>,
    ) -> HashMap<String, Result<Image, ProviderError>> {
        stream::iter(ids)
            .map(|id| async move {
                let image = match self.get(&id) {
                    Some(labels) => Ok(Image::Exists(labels)),
                    None => self.inspect(docker, host, &id).await,
                };
                (id, image)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }

    async fn inspect(&self, docker: &Docker, host: &str, id: &str) -> Result<Image, ProviderError> {
        match docker.inspect_image(id).await {
            Ok(image) => {
                let labels: Labels = image
                    .config
                    .and_then(|c| c.labels)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(k, _)| is_sandguard(k))
                    .collect();
                let labels = Arc::new(labels);
                self.put(id, labels.clone());
                Ok(Image::Exists(labels))
            }
            Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(Image::Gone),
            Err(e) => Err(classify(host, &format!("inspect image {} on", bare(id)), e)),
        }
    }
}

fn is_sandguard(key: &str) -> bool {
    key.starts_with("sandguard.")
}

/// An image id without its `sha256:` prefix, cut as `docker images` shows it.
pub(super) fn bare(id: &str) -> &str {
    short(id.strip_prefix("sha256:").unwrap_or(id))
}

/// `labels` as ownership reads them, and whether the session label was inherited: a
/// container whose `sandguard.session` equals its image's keeps its sandguard labels, marked
/// inherited (the judgement counts them only for a container created while that session
/// lived); otherwise the `sandguard.*` labels its image gave it are dropped.
pub(super) fn own_labels(labels: Labels, image: &Labels) -> (Labels, bool) {
    let session = crate::labels::SESSION;
    if labels
        .get(session)
        .is_some_and(|v| image.get(session) == Some(v))
    {
        return (labels, true);
    }
    let own = labels
        .into_iter()
        .filter(|(k, v)| !(is_sandguard(k) && image.get(k) == Some(v)))
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

    #[test]
    fn image_ids_are_shown_short() {
        assert_eq!(bare("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(bare("abc"), "abc");
    }
}
