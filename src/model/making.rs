//! What programs and strangers make: a session's program creates a sandbox (labelled, through
//! the proxy, or unlabelled and then claimed), a stranger creates one (unlabelled, or with a
//! copy of a session's labels), either maybe from an image that carries sandguard labels.
//!
//! Decisions:
//! - **A sandbox carries its image's labels**, overridden by what its creator set, as a Docker
//!   container does; the fake keeps the image's labels beside it and lists it through the one
//!   inheritance rule (`crate::labels::inherited`).
//! - **The oracle is told whose label counts, by DESIGN's rule**: an inherited session label
//!   counts when the sandbox was created while that session lived, its ledger not yet over.
//!   Ledgers and providers date things in whole seconds, so a sandbox made from an ended
//!   session's image is made only once the clock is past the second its journal last wrote:
//!   the rule then has one answer, and the model asks it.
//! - An image that names a session with no journal (its sidecar died before it made one)
//!   carries none of its labels: no program could have been told them.

use std::collections::BTreeMap;
use std::time::Duration;

use super::ops::{box_id, Forge, Image, Make, PROVIDERS};
use super::oracle::Oracle;
use super::world::World;
use crate::labels;
use crate::ledger::SessionState;
use crate::providers::fake;
use crate::providers::Kind;
use crate::proxy::claim::Hold;

impl World {
    /// Session `s`'s program removes its sandbox `x` itself; through the proxy, the claim is
    /// released at once (acknowledged before the answer, as a create's claim is).
    pub(super) async fn removes(&mut self, s: usize, x: usize, proxy: bool, o: &mut Oracle) {
        if !o.alive(s) || (proxy && !self.guarded(s)) {
            return;
        }
        if proxy {
            // The proxy pins the release to what it removes, found before the removal.
            let target = self.pinned(x);
            if !self.take(x) {
                return;
            }
            if let Some(target) = target {
                if self.proxy_says(s, target, Hold::Release).await {
                    o.release(s, x);
                }
            }
        } else if !self.take(x) {
            return;
        }
        o.gone(x);
    }

    /// A stranger makes another sandbox under `x`'s id (a volume's name taken again): the one
    /// there now, if any, removed first; the new one unlabelled, nobody's.
    pub(super) fn reuse(&mut self, x: usize, o: &mut Oracle) {
        let Some(&p) = self.made.get(&x) else {
            return;
        };
        self.take(x);
        self.put(x, p, BTreeMap::new(), BTreeMap::new());
        o.create(x, None, false);
    }

    /// Removes sandbox `x` from its provider behind sandguard's back; whether it was there.
    fn take(&mut self, x: usize) -> bool {
        let Some(&p) = self.made.get(&x) else {
            return false;
        };
        let id = box_id(x);
        let mut all = self.fakes[p].sandboxes.lock().unwrap();
        let before = all.len();
        all.retain(|s| s.id != id);
        before != all.len()
    }

    /// Puts sandbox `x` on provider `provider`, carrying `image`'s labels overridden by
    /// `labels`, created now.
    fn put(
        &mut self,
        x: usize,
        provider: usize,
        labels: BTreeMap<String, String>,
        image: BTreeMap<String, String>,
    ) {
        let p = provider % self.fakes.len();
        let mut sandbox = fake::sandbox(&box_id(x), Kind::Instance, None);
        sandbox.provider = PROVIDERS[p].to_string();
        sandbox.created_at = Some(crate::timefmt::now_unix());
        self.generation += 1;
        sandbox.identity = Some(self.generation.to_string());
        self.latest.insert(x, self.generation.to_string());
        sandbox.labels = image.clone();
        sandbox.labels.extend(labels);
        self.fakes[p]
            .images
            .lock()
            .unwrap()
            .insert(box_id(x), image);
        self.fakes[p].sandboxes.lock().unwrap().push(sandbox);
        self.made.insert(x, p);
    }

    /// The labels `image` carries, and the session whose label they carry when it counts for
    /// a sandbox created now (see the module docs); waits, when that session's ledger is
    /// over, until the clock is past the second it last wrote.
    async fn image(&self, image: Option<Image>) -> (BTreeMap<String, String>, Option<usize>) {
        let Some(image) = image else {
            return (BTreeMap::new(), None);
        };
        let mut carried = BTreeMap::new();
        if image.detached {
            carried.insert(labels::DETACHED.to_string(), "true".to_string());
        }
        let Some(t) = image.session else {
            return (carried, None);
        };
        let Some(session) = self.sessions.get(&t) else {
            return (carried, None);
        };
        let Ok(view) = self.state.read_session(&session.id) else {
            return (carried, None);
        };
        carried.extend(
            session
                .labels
                .iter()
                .filter(|(k, _)| *k == labels::SESSION || *k == labels::OWNER)
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        if view.state == SessionState::Active {
            return (carried, Some(t));
        }
        let ended = i64::try_from(view.updated_ms / 1000).unwrap_or(i64::MAX);
        while crate::timefmt::now_unix() <= ended {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (carried, None)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn create(
        &mut self,
        s: usize,
        x: usize,
        provider: usize,
        how: Make,
        image: Option<Image>,
        o: &mut Oracle,
    ) -> Result<(), String> {
        let Some(session) = self.sessions.get(&s).filter(|_| o.alive(s)) else {
            return Ok(());
        };
        let mut labels = session.labels.clone();
        let guarded = self.guarded(s);
        let detached_image = image.is_some_and(|i| i.detached);
        match how {
            Make::Labelled { detached } | Make::Proxy { detached } => {
                if matches!(how, Make::Proxy { .. }) && !guarded {
                    return Ok(());
                }
                if detached {
                    labels.insert(labels::DETACHED.into(), "true".into());
                }
                // Its creator sets the session's labels: the image's session does not count,
                // unless it is the same (its own image: the inheritance rule decides).
                let (carried, inherited) = self.image(image).await;
                let own = carried.get(labels::SESSION) == labels.get(labels::SESSION);
                let label = if own && image.is_some_and(|i| i.session.is_some()) {
                    inherited
                } else {
                    Some(s)
                };
                self.put(x, provider, labels, carried);
                o.create(x, label, detached || detached_image);
                if let Make::Proxy { .. } = how {
                    // The proxy sees the create's own labels (`Hold::of`).
                    let acked = self.proxy_claim(s, x, detached).await;
                    o.claim(s, x, acked);
                }
                Ok(())
            }
            Make::ThenClaimed => {
                if !guarded {
                    return Ok(());
                }
                let (carried, label) = self.image(image).await;
                self.put(x, provider, BTreeMap::new(), carried);
                o.create(x, label, detached_image);
                self.claim(s, x, o).await
            }
        }
    }

    pub(super) async fn stranger(
        &mut self,
        x: usize,
        provider: usize,
        forge: Forge,
        image: Option<Image>,
        o: &mut Oracle,
    ) {
        let (carried, inherited) = self.image(image).await;
        let (labels, label, from_image) = match forge {
            // A copy of the labels its image carries cannot be told from the image's: the
            // inheritance rule decides, as for the image's own.
            Forge::Of(s)
                if carried
                    .get(labels::SESSION)
                    .is_some_and(|v| *v == World::session_id(s)) =>
            {
                (self.sessions[&s].labels.clone(), inherited, true)
            }
            Forge::Of(s) => match self.sessions.get(&s) {
                Some(v) => (v.labels.clone(), Some(s), false),
                None => (BTreeMap::new(), inherited, true),
            },
            Forge::None => (BTreeMap::new(), inherited, true),
        };
        self.put(x, provider, labels, carried);
        o.create(x, label, image.is_some_and(|i| i.detached));
        if from_image {
            o.inherited(x);
        }
    }
}
