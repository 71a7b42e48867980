//! An in-memory provider for unit and loop tests: it lists what it holds (filtered by the
//! selector, as a real provider would), removes by id, can fail its first removals
//! transiently (optionally with a retry-after), and records every removal call.
//!
//! For the model-based test ([`crate::model`]) it can also be switched into faults at any time
//! (the next N removals answer 503, or 429 with a `Retry-After`; the next N listings fail;
//! every list and remove call is slowed by a latency), carry another name (so one history has
//! two providers), and have a server-side TTL whose renewals it records with their time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Capabilities, Detail, Kind, Provider, ProviderError, Sandbox};
use crate::labels::{Selector, SESSION};

#[derive(Default)]
pub(crate) struct Fake {
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
    /// The provider's name; `fake` when unset.
    pub name: Option<String>,
    /// Whether it has a server-side TTL ([`Capabilities::ttl`]); renewals go to `renewals`.
    pub ttl: bool,
    /// Every renewal call: id, the identity it was pinned to, when.
    pub renewals: Mutex<Vec<(String, Option<String>, Instant)>>,
    /// This many further removal calls fail transiently (503, or 429 with
    /// `fault_retry_after`), whenever they come: a fault switched on during a test.
    pub fail_removes: AtomicU32,
    pub fault_retry_after: Mutex<Option<Duration>>,
    /// Every list and remove call takes this long first.
    pub latency: Mutex<Duration>,
    /// The sandguard labels of the image each sandbox (by id) was created from: listed, it
    /// carries them as Docker's containers do, read by the one inheritance rule
    /// (`crate::labels::inherited`).
    pub images: Mutex<std::collections::HashMap<String, crate::labels::inherited::Labels>>,
    /// Its ids are names anyone may take again once free (a Docker volume's): each sandbox
    /// carries an [`Sandbox::identity`], claims are pinned to it (`ID@IDENTITY`), and a
    /// removal of a pinned one is refused when the id names another object now.
    pub reuses_ids: bool,
    /// It cannot look up one sandbox ([`Provider::describe`] answers `Unsupported`), as a
    /// plugin cannot.
    pub no_lookup: bool,
    /// It follows sessions as Docker's event stream does ([`Provider::follow`]: instances
    /// only, its following whole from the start), save that the instance of a session made
    /// last is never known: its news is still on its way, as a create's at the instant of
    /// death is, and only a listing finds it.
    pub follows: bool,
    /// The sessions followed, and where each is told what went ([`Fake::vanish`]).
    pub followed: Mutex<std::collections::HashMap<String, super::GoneTx>>,
    /// Every listing made (answered or failed).
    pub lists: AtomicU32,
}

impl Fake {
    /// Removes sandbox `id` as the provider would by itself (an autoremove, its own TTL):
    /// behind sandguard's back, told as an event to the sessions followed whose label it
    /// carries, as Docker's `destroy` is; whether it was there.
    pub(crate) fn vanish(&self, id: &str) -> bool {
        let mut all = self.sandboxes.lock().unwrap();
        let Some(at) = all.iter().position(|s| s.id == id) else {
            return false;
        };
        let gone = all.remove(at);
        drop(all);
        let images = self.images.lock().unwrap();
        let seen = seen_through(gone.clone(), &images);
        drop(images);
        let followed = self.followed.lock().unwrap();
        let told = seen
            .session()
            .and_then(|s| followed.get(s))
            .filter(|_| gone.kind == Kind::Instance);
        if let Some(tx) = told {
            let _ = tx.send(super::Gone {
                sandbox: gone,
                at_ms: crate::ledger::now_ms(),
            });
        }
        true
    }

    pub(crate) fn holding(sandboxes: Vec<Sandbox>) -> Arc<Fake> {
        Arc::new(Fake {
            sandboxes: Mutex::new(sandboxes),
            ..Default::default()
        })
    }

    pub(crate) fn flaky(
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
    pub(crate) fn remaining(&self) -> Vec<String> {
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

    /// Whether a fault is switched on (failing removals or listings, or a latency).
    pub(crate) fn faulty(&self) -> bool {
        self.fail_removes.load(Ordering::SeqCst) > 0
            || self.fail_lists.load(Ordering::SeqCst) > 0
            || !self.latency.lock().unwrap().is_zero()
    }

    /// Switches every fault off.
    pub(crate) fn heal(&self) {
        self.fail_removes.store(0, Ordering::SeqCst);
        self.fail_lists.store(0, Ordering::SeqCst);
        *self.latency.lock().unwrap() = Duration::ZERO;
    }

    async fn slow(&self) {
        let latency = *self.latency.lock().unwrap();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
    }
}

#[async_trait::async_trait]
impl Provider for Fake {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("fake")
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            labels: true,
            ttl: self.ttl,
            pagination: false,
        }
    }
    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.slow().await;
        if self
            .fail_lists
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(ProviderError::transient("daemon unreachable"));
        }
        let images = self.images.lock().unwrap();
        Ok(self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .filter(|s| selector.matches(&s.labels))
            .cloned()
            .map(|s| seen_through(s, &images))
            .collect())
    }
    async fn remove(&self, s: &Sandbox) -> Result<(), ProviderError> {
        self.calls_log
            .lock()
            .unwrap()
            .push((s.id.clone(), s.kind, Instant::now()));
        self.slow().await;
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            return Err(ProviderError::Transient {
                message: "503 Service Unavailable".into(),
                retry_after: self.retry_after,
            });
        }
        if self
            .fail_removes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            let retry_after = *self.fault_retry_after.lock().unwrap();
            let message = match retry_after {
                Some(_) => Detail::http("429 Too Many Requests", 429),
                None => Detail::http("503 Service Unavailable", 503),
            };
            return Err(ProviderError::Transient {
                message,
                retry_after,
            });
        }
        let mut all = self.sandboxes.lock().unwrap();
        if let Some(now) = all
            .iter()
            .find(|x| x.id == s.id && !super::same_identity(s, x))
        {
            return Err(ProviderError::Refused(format!(
                "{} now is not the one claimed ({:?}, not {:?})",
                s.id, now.identity, s.identity
            )));
        }
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
    fn warm_up(&self) -> bool {
        self.follows
    }
    async fn follow(&self, session: &str, _began_ms: Option<u64>, gone: super::GoneTx) {
        if self.follows {
            self.followed
                .lock()
                .unwrap()
                .insert(session.to_string(), gone);
            std::future::pending::<()>().await;
        }
    }
    fn known(&self, session: &str) -> Option<super::Following> {
        if !self.followed.lock().unwrap().contains_key(session) {
            return None;
        }
        let images = self.images.lock().unwrap();
        let selector = Selector::session(session);
        let mut sandboxes: Vec<Sandbox> = self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.kind == Kind::Instance)
            .cloned()
            .map(|s| seen_through(s, &images))
            .filter(|s| selector.matches(&s.labels))
            .collect();
        sandboxes.pop();
        Some(super::Following {
            sandboxes,
            whole: true,
        })
    }
    async fn renew(&self, s: &Sandbox, _ttl: Duration) -> Result<(), ProviderError> {
        if !self.ttl {
            return Err(ProviderError::fatal("fake has no server-side TTL"));
        }
        let all = self.sandboxes.lock().unwrap();
        let now = all.iter().find(|x| x.id == s.id);
        // A renewal of an object that is gone is still logged (a call after a death is one
        // whatever it finds); one that names an object made since under the same id renews
        // nothing of it, and is not.
        if now.is_none_or(|x| super::same_identity(s, x)) {
            self.renewals
                .lock()
                .unwrap()
                .push((s.id.clone(), s.identity.clone(), Instant::now()));
        }
        match now {
            Some(x) if super::same_identity(s, x) => Ok(()),
            _ => Err(ProviderError::gone(format!("{} not found", s.id))),
        }
    }
    fn names(&self, claimed: &Sandbox, listed: &Sandbox) -> bool {
        claimed.kind == listed.kind
            && super::same_identity(claimed, listed)
            && if self.prefix_ids {
                listed.id.starts_with(&claimed.id)
            } else {
                listed.id == claimed.id
            }
    }
    fn parse_claim(&self, id: &str) -> Result<Sandbox, super::Refusal> {
        let (bare, identity) = match id.split_once('@') {
            Some((bare, identity)) if self.reuses_ids => (bare, Some(identity)),
            _ => (id, None),
        };
        if identity.is_some_and(|i| i.is_empty() || !i.bytes().all(|b| b.is_ascii_digit())) {
            return Err(super::Refusal(format!("bad identity in {id:?}")));
        }
        let mut sandbox = super::ids::parse(self.name(), super::ids::GENERIC, bare)?;
        sandbox.identity = identity.map(str::to_string);
        Ok(sandbox)
    }
    fn claim_id(&self, sandbox: &Sandbox) -> String {
        match &sandbox.identity {
            Some(identity) => format!("{}@{identity}", sandbox.id),
            None => sandbox.id.clone(),
        }
    }
    fn pins(&self, claimed: &Sandbox) -> bool {
        self.reuses_ids && claimed.identity.is_none()
    }
    async fn describe(&self, claimed: &Sandbox) -> Result<super::Described, ProviderError> {
        if self.no_lookup {
            return Ok(super::Described::Unsupported);
        }
        self.slow().await;
        let images = self.images.lock().unwrap();
        let found = self
            .sandboxes
            .lock()
            .unwrap()
            .iter()
            .find(|s| s.id == claimed.id)
            .cloned();
        Ok(match found {
            Some(s) => super::Described::Found(seen_through(s, &images)),
            None => super::Described::Gone,
        })
    }
}

/// A sandbox as the fake lists it: its labels read with its image's, if it has one.
fn seen_through(
    mut s: Sandbox,
    images: &std::collections::HashMap<String, crate::labels::inherited::Labels>,
) -> Sandbox {
    if let Some(image) = images.get(&s.id) {
        (s.labels, s.inherited) =
            crate::labels::inherited::own_labels(std::mem::take(&mut s.labels), image);
    }
    s
}

/// A sandbox of the fake provider, labelled with `session` when given.
pub(crate) fn sandbox(id: &str, kind: Kind, session: Option<&str>) -> Sandbox {
    let labels = session
        .map(|s| [(SESSION.to_string(), s.to_string())].into())
        .unwrap_or_default();
    Sandbox {
        inherited: false,
        identity: None,
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
