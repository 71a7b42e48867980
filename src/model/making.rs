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
//! - **An image may carry a `sandguard.expires` already past** (a `--max-lifetime` session's
//!   container committed with its labels). The oracle is told it counts only where it came
//!   with the session label the sandbox carries from that image and that label counts
//!   (ownership before age): a stranger's sandbox from an ended session's image is nobody's,
//!   and its inherited expiry ends nothing.
//! - **The provider removes a sandbox by itself** ([`World::vanish`]: an autoremove, its own
//!   TTL) and says so to the sessions it follows, as Docker's `destroy` does; a session that
//!   claimed it must see it gone (`crate::watch::gone`): the step waits, within the model's
//!   patience, until no live session's ledger still claims it where the provider can be
//!   asked (see [`World::vanish`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::ops::{box_id, Forge, Image, Make, Refusal, PROVIDERS};
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

    /// Session `s`'s program asks the proxy to remove its sandbox `x`, and the provider
    /// answers `answer` without removing it: what the proxy hands its sidecar is what the
    /// proxies' one decision says of that answer ([`crate::proxy::release::releases`]). The
    /// sandbox is still there, so whatever of it the session's ledger claimed before must
    /// still be claimed after: `Err` (starting with [`super::world::UNCONFIRMED`]) if not.
    pub(super) async fn refused(
        &mut self,
        s: usize,
        x: usize,
        answer: Refusal,
        o: &mut Oracle,
    ) -> Result<(), String> {
        use crate::proxy::release::{releases, NotFound, Routed};
        if !o.alive(s) || !self.guarded(s) {
            return Ok(());
        }
        let Some(target) = self.pinned(x) else {
            return Ok(());
        };
        let claimed = |world: &World| {
            let id = &world.sessions[&s].id;
            world
                .state
                .read_session(id)
                .is_ok_and(|v| v.claims.iter().any(|c| c == &target || target.answers(c)))
        };
        let before = claimed(self);
        let (routed, status) = match answer {
            Refusal::NotRouted => (Routed::Not, 404),
            Refusal::RouterNotFound => (Routed::Exactly, 404),
            Refusal::Conflict => (Routed::Exactly, 409),
            Refusal::ServerError => (Routed::Exactly, 500),
        };
        if releases(routed, status, NotFound::Unsaid) {
            self.proxy_says(s, target.clone(), Hold::Release).await;
        }
        if before && !claimed(self) && self.pinned(x).as_ref() == Some(&target) {
            return Err(format!(
                "{}s{s} no longer claims {} after the provider refused its removal ({answer:?})",
                super::world::UNCONFIRMED,
                box_id(x)
            ));
        }
        Ok(())
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

    /// The provider removes sandbox `x` by itself, telling the sessions it follows; then,
    /// where every provider is healthy and `x`'s provider has a server-side TTL (the keeper
    /// looks up what its listing does not answer for, every few milliseconds), waits until no
    /// live session's ledger still claims that object: a claim on something the provider says
    /// is gone must be released (its slot freed, its time ended). `Err` (starting with
    /// [`super::world::HELD_GONE`]) when one still does after the model's patience.
    pub(super) async fn vanish(&mut self, x: usize, o: &mut Oracle) -> Result<(), String> {
        let Some(&p) = self.made.get(&x) else {
            return Ok(());
        };
        let identity = self.latest.get(&x).cloned().unwrap_or_default();
        if !self.fakes[p].vanish(&box_id(x)) {
            return Ok(());
        }
        o.gone(x);
        if !self.healthy() || !self.fakes[p].ttl {
            return Ok(());
        }
        let (bare, pinned) = (box_id(x), format!("{}@{identity}", box_id(x)));
        let holds = |c: &crate::protocol::Target| {
            c.provider == PROVIDERS[p] && (c.id == bare || c.id == pinned)
        };
        let deadline = tokio::time::Instant::now() + super::world::PATIENCE;
        loop {
            let holders: Vec<String> = self
                .sessions
                .values()
                .filter(|v| v.run.is_some() && !v.faults.died())
                .filter(|v| {
                    self.state
                        .read_session(&v.id)
                        .is_ok_and(|view| view.claims.iter().any(holds))
                })
                .map(|v| v.id.clone())
                .collect();
            if holders.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline || !self.healthy() {
                return Err(format!(
                    "{}{} went by itself, but {} still claim it",
                    super::world::HELD_GONE,
                    box_id(x),
                    holders.join(", ")
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
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
        if image.expires {
            carried.insert(labels::EXPIRES.to_string(), "1".to_string());
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
                let from_image = own && image.is_some_and(|i| i.session.is_some());
                let label = if from_image { inherited } else { Some(s) };
                self.put(x, provider, labels, carried);
                o.create(x, label, detached || detached_image);
                if from_image && expires(image) {
                    o.expired(x);
                }
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
                let from_image = carried.contains_key(labels::SESSION);
                self.put(x, provider, BTreeMap::new(), carried);
                o.create(x, label, detached_image);
                if from_image && expires(image) {
                    o.expired(x);
                }
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
        let session_from_image = from_image && carried.contains_key(labels::SESSION);
        self.put(x, provider, labels, carried);
        o.create(x, label, image.is_some_and(|i| i.detached));
        if from_image {
            o.inherited(x);
        }
        if session_from_image && expires(image) {
            o.expired(x);
        }
    }
}

/// Whether `image` carries a `sandguard.expires` (already past).
fn expires(image: Option<Image>) -> bool {
    image.is_some_and(|i| i.expires)
}
