//! What the judgement is told: how the sessions a sandbox names stand, gathered from this
//! machine's ledger and its judge of owners. This is the ownership module's only I/O, and it
//! is done once per reclaim or sweep pass, and only when needed: a sidecar whose sandboxes all
//! carry its own label never reads another journal.
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
use std::sync::{Arc, OnceLock};

use super::{Facts, Session, Sidecar};
use crate::identity::{Judge, Liveness};
use crate::ledger::{SessionState, SessionView, StateDir};
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

/// The ledger's sessions and the judge, read at most once.
pub(crate) struct Known {
    /// The state directory, opened when first needed.
    root: Option<std::path::PathBuf>,
    state: OnceLock<Option<StateDir>>,
    judge: OnceLock<Judge>,
    views: OnceLock<Vec<SessionView>>,
    /// A session whose journal is not read ([`Known::but`]).
    but: Option<String>,
    /// The sessions' claims by provider and the id each names (see [`Known::claimers`]),
    /// built from `views` when first needed.
    claims: OnceLock<ClaimIndex>,
    providers: Vec<Arc<dyn Provider>>,
}

/// Provider → the id a claim names, as the provider parses it → (the view's index, the claim).
type ClaimIndex = HashMap<String, HashMap<String, Vec<(usize, Target)>>>;

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("sessions", &self.views.get().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl Known {
    /// Knowledge read from the state directory at `root` when first needed (`None`: no
    /// ledger; every session is judged by its owner label alone).
    pub(crate) fn lazy(root: Option<std::path::PathBuf>, providers: &[Arc<dyn Provider>]) -> Known {
        Known {
            root,
            state: OnceLock::new(),
            judge: OnceLock::new(),
            views: OnceLock::new(),
            claims: OnceLock::new(),
            but: None,
            providers: providers.to_vec(),
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
        let _ = known.views.set(views);
        let _ = known.judge.set(judge);
        known
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
        self.judge.get_or_init(|| match self.state() {
            Some(state) => state.judge(),
            None => Judge::new(Default::default()),
        })
    }

    /// The ledger's sessions.
    pub(crate) fn views(&self) -> &[SessionView] {
        self.views.get_or_init(|| {
            let Some(state) = self.state() else {
                return Vec::new();
            };
            state.sessions_but(self.but.as_deref()).unwrap_or_else(|e| {
                tracing::warn!("cannot read the ledger to judge claims: {e}");
                Vec::new()
            })
        })
    }

    /// The ledger's view of session `id`, if it is there.
    pub(crate) fn view(&self, id: &str) -> Option<&SessionView> {
        self.views().iter().find(|v| v.id == id)
    }

    /// How session `id` stands; `owner_label` is what a sandbox says of its owner, used when
    /// the ledger does not have the session.
    pub(crate) fn session(&self, id: &str, owner_label: Option<&str>) -> Session {
        match self.view(id) {
            Some(view) => self.standing(view),
            None => Session {
                owner: owner_label.map_or(Liveness::Unknown, |o| self.judge().label(o)),
                ..Session::UNKNOWN
            },
        }
    }

    /// How a ledger session stands.
    pub(crate) fn standing(&self, view: &SessionView) -> Session {
        Session {
            owner: self.judge().label(&view.owner),
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
    pub(crate) fn claimers<'a>(&'a self, sandbox: &Sandbox, but: &str) -> Vec<(&'a str, Session)> {
        let views = self.views();
        let Some(by_id) = self.claim_index().get(&sandbox.provider) else {
            return Vec::new();
        };
        let mut found = BTreeSet::new();
        let prefixes = (1..=sandbox.id.len()).filter(|&end| sandbox.id.is_char_boundary(end));
        for claims in prefixes.filter_map(|end| by_id.get(&sandbox.id[..end])) {
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
        self.claims.get_or_init(|| {
            let mut index = ClaimIndex::new();
            for (n, view) in self.views().iter().enumerate() {
                for t in &view.claims {
                    let id = Sandbox::from_claim(&self.providers, t)
                        .map_or_else(|_| t.id.clone(), |named| named.id);
                    index
                        .entry(t.provider.clone())
                        .or_default()
                        .entry(id)
                        .or_default()
                        .push((n, t.clone()));
                }
            }
            index
        })
    }

    /// Whether a session that owns `sandbox` detached it in its ledger: the session whose
    /// label it carries, or a session that had claimed it (adopted it) when it detached it. A
    /// detach is its owner's word: one by a session that neither carries it in its label nor
    /// claimed it does not count.
    pub(crate) fn detached(&self, sandbox: &Sandbox) -> bool {
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

    /// Whether `sandbox`'s label counts as ownership ([`Facts::label_counts`]): what `ps` and
    /// `stop` show and take. Only an inherited label needs the ledger.
    pub(crate) fn label_counts(&self, sandbox: &Sandbox) -> bool {
        if !sandbox.inherited {
            return true;
        }
        let mut facts = Facts::of(sandbox);
        facts.labelled = facts
            .labelled
            .map(|(id, _)| (id, self.session(id, sandbox.owner())));
        facts.label_counts()
    }

    /// Everything the ledger says of `sandbox`, for a path that is no session's own (a sweep,
    /// `stop`).
    pub(crate) fn facts<'a>(&'a self, sandbox: &'a Sandbox) -> Facts<'a> {
        let mut facts = Facts::of(sandbox);
        facts.labelled = facts
            .labelled
            .map(|(id, _)| (id, self.session(id, sandbox.owner())));
        facts.claimed_by = self.claimers(sandbox, "");
        facts.detached = self.detached(sandbox);
        facts
    }
}
