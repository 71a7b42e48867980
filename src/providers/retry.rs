//! What every driver shares on the read side: reads retried a few times, paged listings walked
//! to their end, and errors flattened to one line.
//!
//! - [`read`]: a read (a listing page, an inspect) is retried [`READ_ATTEMPTS`] times on a
//!   transient failure, waiting the provider's `Retry-After` (capped at [`READ_MAX_WAIT`]) or a
//!   short doubling backoff (`READ_BACKOFF`, on the one backoff schedule of `crate::backoff`). Removals are not retried here: the reclaim path does that, with
//!   its own deadline.
//! - [`walk`]: a paged listing, followed page by page by whatever cursor the provider uses (an
//!   opaque token, a timestamp); a cursor that does not advance is an error, never an endless
//!   loop, and so is a listing of more than [`MAX_PAGES`] pages.
//! - [`error_chain`]: an error and its sources on one line (hyper's and tonic's top-level
//!   messages alone say little).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use super::ProviderError;
use crate::backoff::Backoff;

/// How many times a read is tried.
pub(crate) const READ_ATTEMPTS: u32 = 4;
/// The longest a read waits between attempts, whatever `Retry-After` says.
pub(crate) const READ_MAX_WAIT: Duration = Duration::from_secs(30);
/// The wait between a read's attempts when the provider gave no hint: 250 ms, doubling.
pub(crate) const READ_BACKOFF: Backoff = Backoff::new(Duration::from_millis(250), READ_MAX_WAIT);
/// The most pages a listing may have.
pub(crate) const MAX_PAGES: usize = 10_000;

/// Runs `attempt` until it succeeds, fails for good, or [`READ_ATTEMPTS`] are spent.
pub(crate) async fn read<T, F, Fut>(mut attempt: F) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt().await {
            Err(ProviderError::Transient {
                message,
                retry_after,
            }) if tries < READ_ATTEMPTS => {
                let wait = retry_after
                    .unwrap_or_else(|| READ_BACKOFF.delay(tries))
                    .min(READ_MAX_WAIT);
                tracing::debug!("{message}; retrying in {wait:?}");
                tokio::time::sleep(wait).await;
            }
            other => return other,
        }
    }
}

/// Walks a paged listing: `fetch(cursor)` returns one page and the next cursor (`None` at the
/// end). A cursor equal to the one just used is an error, not an endless loop.
pub(crate) async fn walk<C, T, F, Fut>(
    provider: &str,
    mut fetch: F,
) -> Result<Vec<T>, ProviderError>
where
    C: Clone + PartialEq + Debug,
    F: FnMut(Option<C>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<C>), ProviderError>>,
{
    let mut all = Vec::new();
    let mut cursor: Option<C> = None;
    for _ in 0..MAX_PAGES {
        let (items, next) = fetch(cursor.clone()).await?;
        all.extend(items);
        match next {
            None => return Ok(all),
            Some(n) if Some(&n) == cursor.as_ref() => {
                return Err(ProviderError::fatal(format!(
                    "{provider}: the listing's page cursor did not advance ({n:?})"
                )))
            }
            Some(n) => cursor = Some(n),
        }
    }
    Err(ProviderError::fatal(format!(
        "{provider}: more than {MAX_PAGES} pages"
    )))
}

/// `err` and each of its sources, joined with `: `, a part left out when the text so far
/// already says it.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reads_are_retried_then_given_up() {
        let mut calls = 0;
        let result: Result<(), _> = read(|| {
            calls += 1;
            async { Err(ProviderError::transient("503")) }
        })
        .await;
        assert!(matches!(result, Err(ProviderError::Transient { .. })));
        assert_eq!(calls, READ_ATTEMPTS);
        let mut calls = 0;
        let result: Result<(), _> = read(|| {
            calls += 1;
            async { Err(ProviderError::Fatal("401".into())) }
        })
        .await;
        assert!(matches!(result, Err(ProviderError::Fatal(_))));
        assert_eq!(calls, 1, "a fatal error is not retried");
    }

    #[tokio::test]
    async fn the_walk_follows_cursors_and_refuses_a_stuck_one() {
        let pages = |c: Option<u32>| async move {
            Ok::<_, ProviderError>(match c {
                None => (vec![1, 2], Some(7)),
                Some(7) => (vec![3], Some(9)),
                _ => (vec![4], None),
            })
        };
        assert_eq!(walk("p", pages).await.unwrap(), vec![1, 2, 3, 4]);
        let stuck = walk("p", |_c: Option<String>| async {
            Ok::<_, ProviderError>((vec![0], Some("same".to_string())))
        })
        .await;
        assert!(matches!(stuck, Err(ProviderError::Fatal(_))));
    }

    #[test]
    fn error_chains_are_one_line_without_repeats() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "request failed: connect",
            Some(Box::new(E("connect", Some(Box::new(E("refused", None)))))),
        );
        assert_eq!(error_chain(&e), "request failed: connect: refused");
    }
}
