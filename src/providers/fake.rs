//! An in-memory provider for unit and loop tests: it lists what it holds (filtered by the
//! selector, as a real provider would), removes by id, can fail its first removals
//! transiently (optionally with a retry-after), and records every removal call.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Capabilities, Kind, Provider, ProviderError, Sandbox};
use crate::labels::{Selector, SESSION};

#[derive(Default)]
pub struct Fake {
    pub sandboxes: Mutex<Vec<Sandbox>>,
    /// This many removal calls fail transiently before any succeeds.
    pub fail_first: u32,
    pub retry_after: Option<Duration>,
    pub calls: AtomicU32,
    /// This many listings fail transiently before any succeeds.
    pub fail_lists: AtomicU32,
    /// Ids are matched by prefix (as Docker's are) in [`Provider::names`].
    pub prefix_ids: bool,
    /// Every removal call: id, kind, when.
    pub calls_log: Mutex<Vec<(String, Kind, Instant)>>,
}

impl Fake {
    pub fn holding(sandboxes: Vec<Sandbox>) -> Arc<Fake> {
        Arc::new(Fake {
            sandboxes: Mutex::new(sandboxes),
            ..Default::default()
        })
    }

    pub fn flaky(
        sandboxes: Vec<Sandbox>,
        fail_first: u32,
        retry_after: Option<Duration>,
    ) -> Arc<Fake> {
        Arc::new(Fake {
            sandboxes: Mutex::new(sandboxes),
            fail_first,
            retry_after,
            ..Default::default()
        })
    }

    /// The ids still held, sorted.
    pub fn remaining(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.id.clone())
            .collect();
        ids.sort();
        ids
    }
}

#[async_trait::async_trait]
impl Provider for Fake {
    fn name(&self) -> &str {
        "fake"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: false,
            pagination: false,
        }
    }
    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        if self
            .fail_lists
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(ProviderError::transient("daemon unreachable"));
        }
        Ok(self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .filter(|s| selector.matches(&s.labels))
            .cloned()
            .collect())
    }
    async fn remove(&self, s: &Sandbox) -> Result<(), ProviderError> {
        self.calls_log
            .lock()
            .unwrap()
            .push((s.id.clone(), s.kind, Instant::now()));
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            return Err(ProviderError::Transient {
                message: "503 Service Unavailable".into(),
                retry_after: self.retry_after,
            });
        }
        let mut all = self.sandboxes.lock().unwrap();
        let before = all.len();
        all.retain(|x| x.id != s.id);
        if all.len() == before {
            return Err(ProviderError::gone(format!("{} not found", s.id)));
        }
        Ok(())
    }
    async fn check(&self) -> Result<String, ProviderError> {
        Ok("fake".into())
    }
    fn names(&self, claimed: &Sandbox, listed: &Sandbox) -> bool {
        claimed.kind == listed.kind
            && if self.prefix_ids {
                listed.id.starts_with(&claimed.id)
            } else {
                listed.id == claimed.id
            }
    }
}

/// A sandbox of the fake provider, labelled with `session` when given.
pub fn sandbox(id: &str, kind: Kind, session: Option<&str>) -> Sandbox {
    let labels = session
        .map(|s| [(SESSION.to_string(), s.to_string())].into())
        .unwrap_or_default();
    Sandbox {
        inherited: false,
        provider: "fake".into(),
        kind,
        id: id.into(),
        status: "running".into(),
        created_at: None,
        expires_at: None,
        image: None,
        labels,
    }
}
