//! What one reclaim is after ([`Plan`]: the selector's matches plus the claims, minus what
//! must stay, each judged by [`crate::ownership`]) and what a sweep already listed for it
//! ([`Listed`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::time::Instant;

use super::{list, Options};
use crate::labels::Selector;
use crate::ownership::known::{Known, Own};
use crate::ownership::{self, Judgement};
use crate::protocol::Target;
use crate::providers::{Kind, Provider, Refusal, Sandbox};

/// What one reclaim is after: the selector's matches plus the claims, minus what must stay.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub selector: Selector,
    /// Sandboxes the owner claimed (they may carry no labels at all).
    pub claims: Vec<Sandbox>,
    /// Sandboxes never to remove: those the owner detached, as it named them.
    pub keep: Vec<Sandbox>,
    /// Claims that can never name a sandbox of theirs (reported as refused, never touched).
    pub refused: Vec<(Sandbox, Refusal)>,
    /// What a sweep already listed for every session it reclaims: a provider found there is
    /// not listed again by this reclaim (one not found there is).
    pub listed: Option<Arc<Listed>>,
    /// The facts every judge is told ([`Known`]: how other sessions stand, for claims of
    /// sandboxes that do not carry this session's label, and what any session detached).
    /// Never optional: a reclaim that knew nothing of the ledger would take what another
    /// session detached (DESIGN's "One set of facts for every judge").
    pub known: Arc<Known>,
    /// How this session stands, for a label its sandboxes only inherited (a Docker image
    /// committed with its labels): alive by default (its sidecar reclaims); a sweep that
    /// finishes an ended session says when it ended.
    pub own: ownership::Session,
}

impl Plan {
    /// What a session's reclaim is after: its labels, its claims as the providers read them,
    /// minus what it detached; judged on `known`'s facts.
    pub(crate) fn for_session<'a>(
        session: &str,
        providers: &[Arc<dyn Provider>],
        (claims, detached): (
            impl IntoIterator<Item = &'a Target>,
            impl IntoIterator<Item = &'a Target>,
        ),
        known: Arc<Known>,
    ) -> Plan {
        let mut plan = Plan {
            selector: Selector::session(session),
            claims: Vec::new(),
            keep: Vec::new(),
            refused: Vec::new(),
            listed: None,
            known,
            own: ownership::Session::GUARDED,
        };
        for t in claims {
            match Sandbox::from_claim(providers, t) {
                Ok(s) => plan.claims.push(s),
                Err(reason) => plan
                    .refused
                    .push((Sandbox::claimed(&t.provider, Kind::Instance, &t.id), reason)),
            }
        }
        // A detach the provider cannot read is kept as written: sparing too much is safe.
        plan.keep = detached
            .into_iter()
            .map(|t| {
                Sandbox::from_claim(providers, t)
                    .unwrap_or_else(|_| Sandbox::claimed(&t.provider, Kind::Instance, &t.id))
            })
            .collect();
        plan
    }

    /// Whether `s` (listed or claimed on `provider`) was detached: by a detach that names it
    /// either way (a prefix of its id, or it a prefix of the detach's), or by its id alone
    /// (sparing too much is safe), unless the detach was pinned to another object of that
    /// id (a volume removed and made again under its name is not the one detached).
    pub(super) fn keeps(&self, provider: &dyn Provider, s: &Sandbox) -> bool {
        self.keep.iter().any(|k| {
            k.provider == s.provider
                && ((k.id == s.id && crate::providers::same_identity(k, s))
                    || k.names(provider, s)
                    || s.names(provider, k))
        })
    }

    /// Whether the owner claimed `s` (as the provider reads its claims: a pinned one names
    /// only the object it was pinned to).
    pub(super) fn claimed(&self, provider: &dyn Provider, s: &Sandbox) -> bool {
        self.claims.iter().any(|c| c.names(provider, s))
    }

    /// The one judgement ([`crate::ownership`]) on `s` for this session's reclaim, on the
    /// facts [`Known`] gives for what the plan says (how the session stands, whether it
    /// detached `s`); `claimed`: the owner claimed it (in the plan, or late, during the settle
    /// delay).
    pub(super) fn judge(&self, provider: &dyn Provider, s: &Sandbox, claimed: bool) -> Judgement {
        let session = self.selector.session_id().unwrap_or_default();
        let own = Own {
            session,
            standing: self.own,
            claimed,
            detached: self.keeps(provider, s),
        };
        ownership::judge(
            ownership::Asker::Reclaim { session },
            &self.known.facts_for(s, own),
        )
    }
}

/// Every managed sandbox of the providers a sweep listed once for all the sessions it
/// reclaims, by provider and session, so that reclaiming 10 000 sessions costs one listing
/// per provider instead of 10 000 (and the sessions' listings do not run side by side). A
/// provider whose listing failed is left out: each session's reclaim lists it itself, with
/// its retries until its deadline, as without this.
#[derive(Debug, Default)]
pub(crate) struct Listed {
    by_provider: BTreeMap<String, HashMap<String, Vec<Sandbox>>>,
}

impl Listed {
    /// Lists every provider once (one attempt, under its pace: with shared paces, the pass's),
    /// keeping the providers that answered in full.
    pub(crate) async fn list(providers: &[Arc<dyn Provider>], options: &Options) -> Listed {
        let selector = Selector::managed();
        let deadline = Instant::now() + options.deadline;
        let work = providers.iter().map(|p| {
            let selector = &selector;
            async move {
                let pace = options.pace(p.name());
                let attempt =
                    list::attempt(p.as_ref(), selector, options, deadline, &pace, 1).await;
                (p.name().to_string(), attempt)
            }
        });
        let mut listed = Listed::default();
        for (provider, attempt) in futures_util::future::join_all(work).await {
            if attempt.retry.is_some() {
                tracing::info!(
                    "{provider} could not be listed for the whole sweep: each session lists it"
                );
                continue;
            }
            let sessions = listed.by_provider.entry(provider).or_default();
            for s in attempt.found {
                if let Some(session) = s.session().map(str::to_string) {
                    sessions.entry(session).or_default().push(s);
                }
            }
        }
        listed
    }

    /// What `provider` holds of `session`; `None` when the provider was not listed.
    pub(super) fn of(&self, provider: &str, session: &str) -> Option<Vec<Sandbox>> {
        self.by_provider
            .get(provider)
            .map(|s| s.get(session).cloned().unwrap_or_default())
    }

    /// Every managed sandbox `provider` holds; `None` when it was not listed.
    pub(super) fn all(&self, provider: &str) -> Option<Vec<Sandbox>> {
        self.by_provider
            .get(provider)
            .map(|s| s.values().flatten().cloned().collect())
    }
}
