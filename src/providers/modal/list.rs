//! Listing: the V1 walk (`SandboxList`) and the V2 walk (`SandboxListV2`) side by side, one
//! sandbox once, and the tags read for every sandbox a listing returned without them.
//!
//! Decisions:
//! - Both walks run, always, concurrently. Modal's SDK says `SandboxListV2` lists V1
//!   sandboxes too, but a reaper that relied on it would miss every V1 sandbox the day it
//!   does not; a sandbox both walks return counts once. Each walk is a part of the listing
//!   ([`crate::providers::Provider::list_parts`]): one that fails (no auth token, say) is
//!   reported beside what the other found, never taken for an empty listing.
//! - Both carry `environment_name` (`MODAL_ENVIRONMENT`, `[providers.modal] environment`;
//!   empty: the default environment only) and no `app_id`: a session's sandboxes may belong
//!   to any app. Modal's client warns that listing without an app is deprecated (2026-08-10).
//! - `SandboxInfo.tags` is marked "not yet exposed" in Modal's proto. Every sandbox listed
//!   without tags, by any listing (`ps` and `stop --all` list without a session filter), gets
//!   them from `SandboxTagsGet` or `SandboxTagsGetV2` by its id's shape, at most
//!   [`TAG_READS`] at a time: one call per untagged sandbox, so `ps` and `stop --all` see
//!   sandguard's sandboxes whether or not the server fills the field. A sandbox whose tags
//!   cannot be read cannot be judged: it is left out and the listing reports the failure
//!   (once, with a count); one gone meanwhile (NOT_FOUND) keeps no tags, so it matches
//!   nothing.
//! - Paging: newest first; the next page asks for `before_timestamp` = the last sandbox's
//!   `created_at`, and an empty page ends the walk. A timestamp that does not move back is an
//!   error, not a loop. Sandboxes sharing the exact `created_at` of a page's last one and
//!   falling on the next page are skipped, as by Modal's own clients.

use std::collections::HashSet;

use futures_util::stream::{self, StreamExt};

use super::wire::{self, Api, SandboxInfo, SandboxListRequest, SandboxListResponse, SandboxTag};
use super::{ModalProvider, NAME};
use crate::labels::Selector;
use crate::providers::{retry, Listing, ProviderError};

/// Tag reads in flight at once.
pub(super) const TAG_READS: usize = 8;

impl ModalProvider {
    /// Both walks, merged; then the missing tags.
    pub(super) async fn list_each(&self, selector: &Selector) -> Listing {
        let tags = tag_filter(selector);
        let (v1, v2) = tokio::join!(self.walk(Api::V1, &tags), self.walk(Api::V2, &tags));
        let mut seen = HashSet::new();
        let mut infos = Vec::new();
        let mut errors = Vec::new();
        for part in [v1, v2] {
            match part {
                Ok(found) => infos.extend(found.into_iter().filter(|s| seen.insert(s.id.clone()))),
                Err(e) => errors.push(e),
            }
        }
        let (infos, unread) = self.fill_tags(infos).await;
        errors.extend(unread);
        Listing {
            found: infos.into_iter().map(super::to_sandbox).collect(),
            errors,
        }
    }

    /// Every page of one listing RPC.
    async fn walk(&self, api: Api, tags: &[SandboxTag]) -> Result<Vec<SandboxInfo>, ProviderError> {
        retry::walk(NAME, |before: Option<OrderedTime>| async move {
            let before = before.map(|t| t.0);
            let page = self.list_page(api, tags, before).await?;
            let Some(last) = page.last().map(|s| s.created_at) else {
                return Ok((Vec::new(), None));
            };
            if !next_page_moves_back(before, last) {
                return Err(ProviderError::fatal(format!(
                    "{NAME}: the {} listing did not move back in time \
                     (before_timestamp {before:?}, last created_at {last})",
                    Api::rpc(api.list())
                )));
            }
            Ok((page, Some(OrderedTime(last))))
        })
        .await
    }

    async fn list_page(
        &self,
        api: Api,
        tags: &[SandboxTag],
        before: Option<f64>,
    ) -> Result<Vec<SandboxInfo>, ProviderError> {
        let request = SandboxListRequest {
            before_timestamp: before.unwrap_or(0.0),
            environment_name: self.environment.clone(),
            include_finished: false,
            tags: tags.to_vec(),
            ..Default::default()
        };
        let what = format!("failed to list sandboxes ({})", Api::rpc(api.list()));
        let page: SandboxListResponse =
            self.read(api, api.list(), request, &what)
                .await
                .map_err(|e| match e {
                    // No such app or environment: a configuration error, not an empty listing.
                    ProviderError::Gone(m) => ProviderError::Fatal(m),
                    other => other,
                })?;
        Ok(page.sandboxes)
    }

    /// `infos` with the tags of those listed without any read, less those whose tags could
    /// not be read; and the failure to read them, if any.
    async fn fill_tags(
        &self,
        infos: Vec<SandboxInfo>,
    ) -> (Vec<SandboxInfo>, Option<ProviderError>) {
        let reads = stream::iter(infos)
            .map(|mut info| async move {
                if !info.tags.is_empty() {
                    return Ok(info);
                }
                match self.tags_of(&info.id).await {
                    Ok(tags) => {
                        info.tags = tags;
                        Ok(info)
                    }
                    Err(ProviderError::Gone(_)) => Ok(info),
                    Err(e) => Err(e),
                }
            })
            .buffered(TAG_READS)
            .collect::<Vec<_>>()
            .await;
        let mut infos = Vec::new();
        let mut failures = Vec::new();
        for read in reads {
            match read {
                Ok(info) => infos.push(info),
                Err(e) => failures.push(e),
            }
        }
        (infos, unread(failures))
    }

    async fn tags_of(&self, id: &str) -> Result<Vec<SandboxTag>, ProviderError> {
        let api = Api::of(id);
        let request = wire::SandboxTagsGetRequest {
            sandbox_id: id.to_string(),
        };
        let what = format!("failed to read the tags of sandbox {id}");
        let reply: wire::SandboxTagsGetResponse =
            self.read(api, api.tags_get(), request, &what).await?;
        Ok(reply.tags)
    }
}

/// The failures to read tags as one error: the first fatal one (else the first), saying how
/// many sandboxes went unjudged.
fn unread(mut failures: Vec<ProviderError>) -> Option<ProviderError> {
    if failures.is_empty() {
        return None;
    }
    let n = failures.len();
    let first = failures
        .iter()
        .position(|e| matches!(e, ProviderError::Fatal(_)))
        .unwrap_or(0);
    let error = failures.swap_remove(first);
    Some(if n == 1 {
        error
    } else {
        error.map_message(|m| format!("{m} (and the tags of {} more sandboxes)", n - 1))
    })
}

/// The selector's valued terms as Modal tags (all must match). Key-only terms have no tag
/// equivalent and are left to the local check.
pub(super) fn tag_filter(selector: &Selector) -> Vec<SandboxTag> {
    selector
        .terms()
        .iter()
        .filter_map(|(k, v)| {
            v.as_ref().map(|v| SandboxTag {
                tag_name: k.clone(),
                tag_value: v.clone(),
            })
        })
        .collect()
}

/// A page cursor: a creation time (an `f64` that is never NaN here: checked before use).
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrderedTime(f64);

/// Whether a page ending at `last` lets the walk go on: the timestamp must be a real time and
/// strictly older than the bound that produced the page.
pub(super) fn next_page_moves_back(before: Option<f64>, last: f64) -> bool {
    last.is_finite() && last > 0.0 && before.is_none_or(|b| last < b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_read_failures_are_one_error_fatal_first() {
        assert_eq!(unread(vec![]), None);
        let one = unread(vec![ProviderError::transient("a")]).unwrap();
        assert_eq!(one.to_string(), "a");
        let many = unread(vec![
            ProviderError::transient("a"),
            ProviderError::fatal("b"),
            ProviderError::transient("c"),
        ])
        .unwrap();
        assert!(matches!(many, ProviderError::Fatal(_)));
        assert_eq!(many.to_string(), "b (and the tags of 2 more sandboxes)");
    }
}
