//! What the judgement is told: how the sessions a sandbox names stand, gathered from this
//! machine's ledger and its judge of owners, and built into [`Facts`] here alone
//! ([`facts`](self::facts): every path that judges asks [`Known`] for them). This is the
//! ownership module's only I/O, done only when needed (a sidecar whose sandboxes all carry
//! its own label never reads another journal), and at most once per [`Known`]: a reclaim or
//! sweep pass reads the ledger once ([`Known::lazy`], [`Known::of`]); a sidecar judging claims
//! makes a [`Known`] for each batch of control lines and reads other sessions through a
//! [`Cache`] it keeps for its life, which reads a journal again only when its inode, length or
//! modification time changed (and probes its lock every batch).
//!
//! Decisions:
//! - A session in the ledger stands as its journal says: its owner judged from its `start`
//!   record, its sidecar alive while the journal's lock is held, ended when its state is not
//!   `active`: at the record that ended its active life (its reclaim's start), not its last
//!   record, which a sweep finishing a pending reclaim keeps moving (a stranger's container
//!   made from the session's image while it was pending would otherwise count as made while
//!   it lived); in whole seconds as Docker dates a container: a sandbox created in the same
//!   second as the end counts as created while it lived (the settle pass covers such late
//!   creates anyway).
//! - A session not in the ledger is judged by the owner label its sandbox carries; with no
//!   readable label it is unknown. No fleet lease is known here: the fleet pass adds its own.
//! - A detach counts when its session owns the sandbox: the session whose label it carries,
//!   or a session that had claimed it (see [`Known::detached`]).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::{Session, Sidecar};
use crate::identity::{Judge, Liveness};
use crate::ledger::{Reread, SessionState, SessionView, Stamp, StateDir};
use crate::protocol::Target;
use crate::providers::{Provider, Sandbox};

/// When a ledger session ended (unix seconds, of the record that ended its active life,
/// rounded down as Docker rounds a container's creation time), if it is no longer active.
pub(crate) fn ended_at(view: &SessionView) -> Option<i64> {
    (view.state != SessionState::Active).then(|| {
        let ms = view.ended_ms.unwrap_or(view.updated_ms);
        i64::try_from(ms / 1000).unwrap_or(i64::MAX)
    })
}

mod facts;

pub(crate) use facts::Own;

/// Where every judge of one sidecar gets its facts: the claims judged as they arrive, the
/// keepers' rounds (TTL, lifetime, spend) and the reclaim at the end each take one [`Known`]
/// from here ([`Source::known`]), read from the same ledger through the same [`Cache`]. So a
/// keeper, which runs while the owner lives, is told what any other session detached or
/// claimed exactly as the reclaim at the end is (DESIGN's "One set of facts for every
/// judge"); none can be handed "nothing known".
#[derive(Clone)]
pub(crate) struct Source {
    /// The state directory the sidecar's journal is in.
    root: Option<std::path::PathBuf>,
    /// The sidecar's session: its own records are its judges' ([`Own`]), its journal is not
    /// read here.
    session: String,
    cache: Arc<Cache>,
    providers: Vec<Arc<dyn Provider>>,
}

impl Source {
    pub(crate) fn new(
        root: Option<std::path::PathBuf>,
        session: &str,
        providers: &[Arc<dyn Provider>],
    ) -> Source {
        Source {
            root,
            session: session.to_string(),
            cache: Arc::default(),
            providers: providers.to_vec(),
        }
    }

    /// The facts of one use (a batch of claims, a keeper's round, the reclaim): other
    /// sessions' journals read again only where they changed since the last use.
    pub(crate) fn known(&self) -> Known {
        Known::lazy(self.root.clone(), &self.providers)
            .but(&self.session)
            .cached(&self.cache)
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("root", &self.root)
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// What is known of the sessions a sandbox names: the ledger's sessions and the judge of
/// owners, each read at most once (through a [`Cache`] for a sidecar's batches of claims).
pub(crate) struct Known {
    /// The state directory, opened when first needed.
    root: Option<std::path::PathBuf>,
    state: OnceLock<Option<StateDir>>,
    judge: OnceLock<Judge>,
    /// The sessions, with their claims indexed when first needed.
    views: OnceLock<Arc<Views>>,
    /// A session whose journal is not read ([`Known::but`]).
    but: Option<String>,
    /// Where a sidecar keeps the other sessions between its batches of claims
    /// ([`Known::cached`]).
    cache: Option<Arc<Cache>>,
    providers: Vec<Arc<dyn Provider>>,
    /// Each owner label judged so far, by the label ([`Known::owner`]).
    owners: Mutex<HashMap<String, Liveness>>,
    /// Which user each live owner label runs as, once read (`Known::user`).
    users: Mutex<HashMap<String, super::User>>,
}

/// The ledger's sessions as one read saw them, and their claims indexed by provider and the
/// id each names (see [`Known::claimers`]), built when first needed. Shared, unchanged, by
/// every batch of a sidecar while no journal changed ([`Cache`]).
#[derive(Default)]
struct Views {
    list: Vec<SessionView>,
    claims: OnceLock<ClaimIndex>,
}

/// Provider → its claims by the id each names.
type ClaimIndex = HashMap<String, ByProvider>;

/// One provider's claims: the id a claim names, as the provider parses it → (the view's
/// index, the claim); and the lengths of those ids, so that a sandbox's id is looked up by
/// the prefixes some claim can be, not by every prefix of it (64 hashes for a Docker id).
#[derive(Default)]
struct ByProvider {
    by_id: HashMap<String, Vec<(usize, Target)>>,
    lengths: BTreeSet<usize>,
}

/// Other sessions as a sidecar last read them, kept between its batches of claims.
///
/// Decisions (issue 41, P8):
/// - A journal is read again only when its [`Stamp`] (inode, length, modification time)
///   changed: it is append-only, so a view folded at one stamp is that journal's truth until
///   it changes. Its lock is probed at every batch all the same: a sidecar dies, or a sweep
///   adopts its session, without writing a line, and whether a session may live (the claim
///   rule: a claim never steals) depends on it.
/// - A session whose journal appeared or went away, or changed, or whose lock changed hands,
///   makes the next batch build the views and their claim index again from what is cached
///   (only the changed journals are read): a stale answer never stands in for a journal that
///   moved. While nothing changed, a batch reuses the index as it is: a claim then costs the
///   same whatever the other sessions hold (100 000 claims beside 25 000 of another session
///   cost 6.75 s of CPU, most of it reading that journal again for every batch).
/// - The state directory and the judge of owners are kept for the sidecar's life: the boots
///   this machine ran change only when it boots again, which a sidecar does not survive.
#[derive(Default)]
pub(crate) struct Cache {
    inner: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    state: Option<StateDir>,
    judge: Option<Judge>,
    /// Each session's journal as last read.
    journals: HashMap<String, (Stamp, SessionView)>,
    /// What the last batch was given, while nothing changed.
    built: Option<Arc<Views>>,
}

impl Cache {
    /// The sessions of the state directory at `root` but `but`, read again only where their
    /// journals changed; `None` when the ledger cannot be opened or listed (logged).
    fn views(&self, root: &Path, but: Option<&str>) -> Option<Arc<Views>> {
        let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if c.state.is_none() {
            c.state = StateDir::open(root)
                .map_err(|e| tracing::warn!("cannot open the ledger to judge claims: {e}"))
                .ok();
        }
        let state = c.state.clone()?;
        let ids = state
            .session_ids()
            .map_err(|e| tracing::warn!("cannot read the ledger to judge claims: {e}"))
            .ok()?;
        let ids: Vec<String> = ids
            .into_iter()
            .filter(|id| Some(id.as_str()) != but)
            .collect();
        let mut changed = ids.len() != c.journals.len();
        let mut journals = HashMap::with_capacity(ids.len());
        for id in ids {
            let seen = c.journals.remove(&id);
            let reread = state.reread_session(&id, seen.as_ref().map(|(stamp, _)| *stamp));
            match (reread, seen) {
                (Ok(Reread::Same { sidecar_alive }), Some((stamp, mut view))) => {
                    changed |= view.sidecar_alive != sidecar_alive;
                    view.sidecar_alive = sidecar_alive;
                    journals.insert(id, (stamp, view));
                }
                (Ok(Reread::Read(stamp, view)), _) => {
                    changed = true;
                    journals.insert(id, (stamp, *view));
                }
                (Ok(Reread::Same { .. }), None) => changed = true,
                (Err(e), _) => {
                    changed = true;
                    tracing::warn!("skipping session {id}: {e}");
                }
            }
        }
        // One that went away since (pruned) is not kept.
        changed |= !c.journals.is_empty();
        c.journals = journals;
        if changed || c.built.is_none() {
            let mut list: Vec<SessionView> = c.journals.values().map(|(_, v)| v.clone()).collect();
            list.sort_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)));
            c.built = Some(Arc::new(Views {
                list,
                claims: OnceLock::new(),
            }));
        }
        c.built.clone()
    }

    fn judge(&self, root: &Path) -> Judge {
        let mut c = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if c.judge.is_none() {
            c.judge = Some(match StateDir::open(root) {
                Ok(state) => state.judge(),
                Err(_) => Judge::new(Default::default()),
            });
        }
        c.judge
            .clone()
            .unwrap_or_else(|| Judge::new(Default::default()))
    }
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("sessions", &self.views.get().map(|v| v.list.len()))
            .finish_non_exhaustive()
    }
}

impl Known {
    /// Knowledge read from the state directory at `root` when first needed (`None`: no
    /// ledger here, as for a fleet sweep on another host: every session is judged by its
    /// owner label alone).
    pub(crate) fn lazy(root: Option<std::path::PathBuf>, providers: &[Arc<dyn Provider>]) -> Known {
        Known {
            root,
            state: OnceLock::new(),
            judge: OnceLock::new(),
            views: OnceLock::new(),
            but: None,
            cache: None,
            providers: providers.to_vec(),
            owners: Mutex::default(),
            users: Mutex::default(),
        }
    }

    /// The same, without reading session `session`'s journal: for a sidecar judging claims,
    /// which asks only about other sessions (its own journal, reread for every batch of
    /// claims, would cost more with every claim it holds).
    pub(crate) fn but(mut self, session: &str) -> Known {
        self.but = Some(session.to_string());
        self
    }

    /// Knowledge of sessions already read (a sweep has them).
    pub(crate) fn of(
        views: Vec<SessionView>,
        judge: Judge,
        providers: &[Arc<dyn Provider>],
    ) -> Known {
        let known = Known::lazy(None, providers);
        let _ = known.views.set(Arc::new(Views {
            list: views,
            claims: OnceLock::new(),
        }));
        let _ = known.judge.set(judge);
        known
    }

    /// The same, reading other sessions through `cache`, which a sidecar keeps between its
    /// batches of claims ([`Cache`]): only the journals that changed are read again.
    pub(crate) fn cached(mut self, cache: &Arc<Cache>) -> Known {
        self.cache = Some(cache.clone());
        self
    }

    fn state(&self) -> Option<&StateDir> {
        self.state
            .get_or_init(|| {
                let root = self.root.as_deref()?;
                StateDir::open(root)
                    .map_err(|e| tracing::warn!("cannot open the ledger to judge claims: {e}"))
                    .ok()
            })
            .as_ref()
    }

    fn judge(&self) -> &Judge {
        self.judge.get_or_init(|| match (&self.cache, &self.root) {
            (Some(cache), Some(root)) => cache.judge(root),
            _ => match self.state() {
                Some(state) => state.judge(),
                None => Judge::new(Default::default()),
            },
        })
    }

    /// The ledger's sessions.
    pub(crate) fn views(&self) -> &[SessionView] {
        &self.read().list
    }

    fn read(&self) -> &Views {
        self.views.get_or_init(|| {
            if let (Some(cache), Some(root)) = (&self.cache, &self.root) {
                return cache.views(root, self.but.as_deref()).unwrap_or_default();
            }
            let Some(state) = self.state() else {
                return Arc::default();
            };
            let list = state.sessions_but(self.but.as_deref()).unwrap_or_else(|e| {
                tracing::warn!("cannot read the ledger to judge claims: {e}");
                Vec::new()
            });
            Arc::new(Views {
                list,
                claims: OnceLock::new(),
            })
        })
    }

    /// The ledger's view of session `id`, if it is there.
    pub(crate) fn view(&self, id: &str) -> Option<&SessionView> {
        self.views().iter().find(|v| v.id == id)
    }

    /// How session `id` stands; `owner_label` is what a sandbox says of its owner, used when
    /// the ledger does not have the session.
    fn session(&self, id: &str, owner_label: Option<&str>) -> Session {
        match self.view(id) {
            Some(view) => self.standing(view),
            None => Session {
                owner: owner_label.map_or(Liveness::Unknown, |o| self.owner(o)),
                ..Session::UNKNOWN
            },
        }
    }

    /// How the owner an owner label names stands, judged once per [`Known`] (a reclaim or
    /// sweep pass, a sidecar's batch of claims): a batch of claims that name sandboxes
    /// another session claimed asks about that session's owner once, not once a claim (a
    /// read of `/proc/PID/stat` each: 20 000 such claims cost 0.15 s of CPU). Safe under
    /// the trust rules: a dead identity stays dead (a pid's start time is part of it), and an
    /// owner judged alive that dies during the pass is only kept a pass longer; never the
    /// other way round.
    fn owner(&self, label: &str) -> Liveness {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&judged) = owners.get(label) {
            return judged;
        }
        let judged = self.judge().label(label);
        owners.insert(label.to_string(), judged);
        judged
    }

    /// How a ledger session stands.
    pub(crate) fn standing(&self, view: &SessionView) -> Session {
        Session {
            owner: self.owner(&view.owner),
            sidecar: if view.sidecar_alive {
                Sidecar::Alive
            } else {
                Sidecar::Gone
            },
            ended_at: ended_at(view),
            lease: super::Lease::None,
        }
    }

    /// Whether `target` (a claim or detach) names `sandbox`, as its provider reads ids.
    pub(crate) fn names(&self, target: &Target, sandbox: &Sandbox) -> bool {
        sandbox.named_by(&self.providers, target)
    }

    /// The ledger sessions other than `but` whose claims name `sandbox`, and how each stands,
    /// in the ledger's order.
    ///
    /// Asked once per claim that arrives and once per sandbox a reclaim or sweep lists, so it
    /// must not walk every claim of the ledger: a sidecar given 100 000 claims beside a
    /// session of 25 000 spent minutes in that walk (2026-12-03). The claims are indexed once
    /// by the id each names as its provider parses it, and a claim can only name a sandbox
    /// whose id starts with that id ([`Provider::names`]: exact, or Docker's prefix), so the
    /// candidates are the claims under each prefix of the sandbox's id; each is then asked
    /// [`Known::names`], the one answer, as before.
    pub(super) fn claimers<'a>(&'a self, sandbox: &Sandbox, but: &str) -> Vec<(&'a str, Session)> {
        let views = self.views();
        let Some(index) = self.claim_index().get(&sandbox.provider) else {
            return Vec::new();
        };
        let mut found = BTreeSet::new();
        let prefixes = index
            .lengths
            .range(1..=sandbox.id.len())
            .filter(|&&end| sandbox.id.is_char_boundary(end));
        for claims in prefixes.filter_map(|&end| index.by_id.get(&sandbox.id[..end])) {
            for (n, t) in claims {
                if views[*n].id != but && self.names(t, sandbox) {
                    found.insert(*n);
                }
            }
        }
        found
            .into_iter()
            .map(|n| (views[n].id.as_str(), self.standing(&views[n])))
            .collect()
    }

    /// Every session's claims by provider and named id (see [`Known::claimers`]). A claim no
    /// provider here can read names by its id as written, as [`Sandbox::named_by`] reads it.
    fn claim_index(&self) -> &ClaimIndex {
        self.read().claims.get_or_init(|| {
            let mut index = ClaimIndex::new();
            for (n, view) in self.views().iter().enumerate() {
                for t in &view.claims {
                    let id = Sandbox::from_claim(&self.providers, t)
                        .map_or_else(|_| t.id.clone(), |named| named.id);
                    let of = index.entry(t.provider.clone()).or_default();
                    of.lengths.insert(id.len());
                    of.by_id.entry(id).or_default().push((n, t.clone()));
                }
            }
            index
        })
    }

    /// Whether a session that owns `sandbox` detached it in its ledger: the session whose
    /// label it carries, or a session that had claimed it (adopted it) when it detached it. A
    /// detach is its owner's word: one by a session that neither carries it in its label nor
    /// claimed it does not count.
    fn detached(&self, sandbox: &Sandbox) -> bool {
        let label = sandbox.session().filter(|s| !s.is_empty());
        self.views().iter().any(|v| {
            let mine = if label == Some(v.id.as_str()) {
                &v.detached
            } else {
                &v.detached_claims
            };
            mine.iter().any(|t| self.names(t, sandbox))
        })
    }
}

#[cfg(test)]
mod tests;
