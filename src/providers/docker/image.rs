//! The sandguard labels of the images containers were created from, for the rule that says
//! which of a container's labels count as its creator's ([`crate::labels::inherited`]: an
//! inherited label never makes a stranger ours, and never makes ours lose a detach).
//!
//! Decisions:
//! - The image is the one the container was created from: inspected by the container's
//!   `ImageID` (a content address), so re-tagging an image changes nothing. Its sandguard
//!   labels are cached per image id for the life of the driver: an id never names other
//!   content. Only images that exist are cached.
//! - An image that is gone (404) leaves the container's labels as they are: there is nothing
//!   to compare with, and Docker keeps an image while a container uses it, so this is rare.
//! - When the image cannot be inspected (a timeout, a 5xx, no `ImageID`), nothing is guessed:
//!   the container is neither listed as owned nor silently dropped; the listing reports an
//!   error naming it, so `ps`/`stop` exit 1 and a reclaim stays pending for the next sweep.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use bollard::errors::Error as BollardError;
use bollard::Docker;
use futures_util::stream::{self, StreamExt};

use super::error::{classify, short};
use crate::config::docker::DaemonAddress;
use crate::providers::ProviderError;

pub(super) use crate::labels::inherited::own_labels;
use crate::labels::inherited::{is_sandguard, Labels};

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
        host: &DaemonAddress,
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

    async fn inspect(
        &self,
        docker: &Docker,
        host: &DaemonAddress,
        id: &str,
    ) -> Result<Image, ProviderError> {
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

/// An image id without its `sha256:` prefix, cut as `docker images` shows it.
pub(super) fn bare(id: &str) -> &str {
    short(id.strip_prefix("sha256:").unwrap_or(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_ids_are_shown_short() {
        assert_eq!(bare("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(bare("abc"), "abc");
    }
}
