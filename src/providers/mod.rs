//! Providers: the one trait every driver implements, the error classes the reclaim path
//! decides by, and the registry built from configuration.
//!
//! The trait is deliberately narrow, only the calls reclaim needs: list by a label selector,
//! remove by id, say what the provider can do, and check that it is reachable. A driver turns
//! its provider's wire format into [`Sandbox`] and classifies every failure as
//! [`ProviderError::Gone`], [`ProviderError::Transient`] (with an optional retry-after) or
//! [`ProviderError::Fatal`], so reclaim never needs to know which provider it talks to.
//!
//! A provider is *configured* when its credentials (or, for Docker, a daemon address) are
//! present. Unconfigured providers are skipped silently by `ps`, `stop` and reclaim, and shown
//! with the reason by `sandguard providers`.

pub(crate) mod daytona;
pub(crate) mod docker;
pub(crate) mod e2b;
pub(crate) mod error;
#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod flyio;
pub(crate) mod http;
pub(crate) mod ids;
pub(crate) mod modal;
pub(crate) mod plugin;
pub(crate) mod redact;
mod registry;
pub(crate) mod retry;
pub(crate) mod tenki;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::labels::{self, Selector};
use crate::protocol::Target;

/// What a sandbox is, which decides the order of removal: every instance of a session goes
/// before its networks, and networks before volumes (a network with a container attached, or a
/// volume in use, cannot be removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A container, a VM, a cloud sandbox: what `ps` shows.
    Instance,
    /// A Docker network created for a session.
    Network,
    /// A Docker volume created for a session.
    Volume,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Instance => "instance",
            Kind::Network => "network",
            Kind::Volume => "volume",
        }
    }
}

/// What following proved of a session ([`Provider::known`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Following {
    /// The sandboxes known to exist, oldest first.
    pub sandboxes: Vec<Sandbox>,
    /// Whether following has seen every sandbox of the session made since the session
    /// began, but those whose news is still on its way: a reclaim whose settle pass lists
    /// anyway need not list before its first removals ([`crate::reclaim`]).
    pub whole: bool,
}

/// A provider's word, while it follows a session, that one of the session's sandboxes went
/// without sandguard removing it (Docker's `destroy` event: `docker run --rm`, a removal past
/// the proxy): the sidecar releases what it held of it ([`Provider::follow`]). DESIGN's "a
/// removal is what the provider confirmed": an event is such a confirmation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    /// What went, as the event names it (its provider, kind and full id).
    pub sandbox: Sandbox,
    /// Unix milliseconds when the provider said so.
    pub at_ms: u64,
}

/// Where a provider following a session tells what it saw go ([`Gone`]).
pub(crate) type GoneTx = tokio::sync::mpsc::UnboundedSender<Gone>;

/// One managed resource as a provider listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub provider: String,
    pub kind: Kind,
    /// The provider's id: what `remove` takes and what `stop ID` matches.
    pub id: String,
    /// The provider's own word for its state (`running`, `exited`, `paused`, …).
    pub status: String,
    /// Unix seconds, when the provider says.
    pub created_at: Option<i64>,
    /// When the provider itself will end it whatever its state (Unix seconds), where the
    /// provider has such a lifetime and the listing says it.
    pub expires_at: Option<i64>,
    pub image: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// Its `sandguard.session` label was not set by its creator but inherited (a Docker
    /// container started from an image committed with a session's labels): it counts only
    /// for a sandbox created while that session lived (`crate::ownership`, rule 3).
    pub inherited: bool,
    /// What tells this object from a later one of the same id, where the provider reuses ids
    /// (a Docker volume's only id is its name: its creation time). `None` where the id is the
    /// identity. A claim that carries one (`ID@IDENTITY`, [`Provider::pins`]) names only the
    /// object that had it ([`Provider::names`]).
    pub identity: Option<String>,
}

impl Sandbox {
    /// A sandbox known only from a claim: provider, kind and id, no labels.
    pub fn claimed(provider: &str, kind: Kind, id: &str) -> Sandbox {
        Sandbox {
            inherited: false,
            identity: None,
            provider: provider.to_string(),
            kind,
            id: id.to_string(),
            status: "claimed".into(),
            created_at: None,
            expires_at: None,
            image: None,
            labels: BTreeMap::new(),
        }
    }

    pub fn session(&self) -> Option<&str> {
        self.labels.get(labels::SESSION).map(String::as_str)
    }
    pub fn owner(&self) -> Option<&str> {
        self.labels.get(labels::OWNER).map(String::as_str)
    }

    /// Labelled `sandguard.detached=true`: it outlives its owner; only its TTL ends it.
    pub fn is_detached(&self) -> bool {
        self.labels
            .get(labels::DETACHED)
            .is_some_and(|v| labels::detaches(v))
    }

    /// Whether the claim (or detach) `target` names this sandbox as its provider reads ids (a
    /// Docker id prefix): the claim parsed ([`Sandbox::from_claim`]), then
    /// [`Sandbox::names`]; by the id alone when no provider here can read the claim.
    pub fn named_by(&self, providers: &[Arc<dyn Provider>], target: &Target) -> bool {
        if target.provider != self.provider {
            return false;
        }
        let provider = by_name(providers, &self.provider);
        match (provider, Sandbox::from_claim(providers, target)) {
            (Some(p), Ok(named)) => named.names(p.as_ref(), self),
            _ => target.id == self.id,
        }
    }

    /// Whether this claim (or detach), as its provider parsed it ([`Provider::parse_claim`]),
    /// names `listed`: the same provider, and that provider's [`Provider::names`] (exact by
    /// default, Docker's id prefix, a pinned identity). The one answer to "does claim C name
    /// sandbox S": [`Sandbox::named_by`] reads a ledger target through it, and every path
    /// that holds parsed claims (the reclaim's plan and judging, the TTL keeper's look-up, a
    /// claim or detach as it arrives, a detach's owner) asks it. Where two claims are
    /// compared ("do they name one object": a detach of a prefix of what was claimed), it is
    /// asked both ways.
    pub(crate) fn names(&self, provider: &dyn Provider, listed: &Sandbox) -> bool {
        self.provider == listed.provider && provider.names(self, listed)
    }

    /// The sandbox a claimed target names, as its provider reads the id (a Docker
    /// `network/ID` is a network), or why it can never name one ([`Provider::parse_claim`]).
    /// A provider that is not among `providers` cannot say: the claim is kept as it is, an
    /// instance, and its removal fails with that reason (the session stays pending for a
    /// sweep that has the provider), unless no provider could ever read it (empty, `..`:
    /// [`ids::unknown_provider_refusal`]).
    pub fn from_claim(
        providers: &[Arc<dyn Provider>],
        target: &Target,
    ) -> Result<Sandbox, Refusal> {
        match by_name(providers, &target.provider) {
            Some(p) => p.parse_claim(&target.id).map(|mut s| {
                s.provider = target.provider.clone();
                s
            }),
            None => match ids::unknown_provider_refusal(&target.id) {
                Some(why) => Err(Refusal(why)),
                None => Ok(Sandbox::claimed(
                    &target.provider,
                    Kind::Instance,
                    &target.id,
                )),
            },
        }
    }

    /// What names it among every provider's sandboxes.
    pub fn key(&self) -> SandboxKey {
        SandboxKey {
            provider: self.provider.clone(),
            id: self.id.clone(),
        }
    }
}

/// A sandbox's identity across providers: its provider and that provider's id for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxKey {
    pub provider: String,
    pub id: String,
}

/// Why a claimed id can never name a sandbox of a provider (a Docker container *name*, an
/// unconfigured provider): final, reported once, never retried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// What a provider can do; the trait says so instead of pretending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Sandboxes carry labels the provider can filter by (otherwise only claims find them).
    pub labels: bool,
    /// The provider can end a sandbox on its own after a timeout that sandguard renews.
    pub ttl: bool,
    /// Listing is paged.
    pub pagination: bool,
}

impl Capabilities {
    /// A cloud API with all three (E2B, Daytona, Tenki).
    pub const ALL: Capabilities = Capabilities {
        labels: true,
        ttl: true,
        pagination: true,
    };
}

/// What one listing found, beside the parts of it that failed. A provider whose listing has
/// independent parts (Docker: containers, networks, volumes) keeps what it could list when one
/// part fails: a broken volume plugin must not hide a session's containers.
#[derive(Debug, Default)]
pub struct Listing {
    pub found: Vec<Sandbox>,
    /// Empty when everything was listed. Anything here means sandboxes may be missing.
    pub errors: Vec<ProviderError>,
}

impl From<Result<Vec<Sandbox>, ProviderError>> for Listing {
    fn from(result: Result<Vec<Sandbox>, ProviderError>) -> Listing {
        match result {
            Ok(found) => Listing {
                found,
                errors: Vec::new(),
            },
            Err(e) => Listing {
                found: Vec::new(),
                errors: vec![e],
            },
        }
    }
}

/// What a provider says now of the one sandbox a claim names ([`Provider::describe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Described {
    /// It exists, as a listing would show it: its labels as ownership reads them, and its
    /// [`Sandbox::identity`] where the provider reuses ids.
    Found(Sandbox),
    /// Nothing has that id (or name) now.
    Gone,
    /// The provider cannot look up one sandbox: the claim is judged as it stands.
    Unsupported,
}

/// A sandbox provider. Object-safe, so the registry holds drivers and plugins alike.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// The name users type: `docker`, `e2b`, …
    fn name(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    /// Every resource whose labels satisfy `selector`, in every state, as far as the provider's
    /// own filter goes: a driver passes the selector on and returns what the provider answered,
    /// which may be more (a filter that cannot say "key present", a provider that ignores it).
    /// Callers check each result against the selector, once (`crate::reclaim::list_all`), so
    /// no driver repeats that step. A failure here is never an empty list: the caller must be
    /// able to say that sandboxes may still be running.
    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError>;
    /// Like [`Provider::list`], but what could be listed is kept beside what failed. The
    /// default is all or nothing; a driver whose listing has independent parts overrides it.
    async fn list_parts(&self, selector: &Selector) -> Listing {
        Listing::from(self.list(selector).await)
    }
    /// What a claimed id names on this provider, or why it can never name one of its
    /// sandboxes (a Docker container *name*, say: Docker would resolve it to whatever carries
    /// that name). A refusal is final: the claim is reported once and never retried. Every id
    /// that reaches a provider was read here first; the default is the conservative generic
    /// shape (`ids::GENERIC`), each driver narrows it to its provider's ids (`ids`).
    fn parse_claim(&self, id: &str) -> Result<Sandbox, Refusal> {
        ids::parse(self.name(), ids::GENERIC, id)
    }
    /// How the ledger names `sandbox`: the inverse of [`Provider::parse_claim`], so that a
    /// removal journaled for it clears the claim that named it, and a pending one is read back
    /// as the same kind (Docker's `network/ID`, never a bare id a sweep would take for a
    /// container). The id as it is, by default.
    fn claim_id(&self, sandbox: &Sandbox) -> String {
        sandbox.id.clone()
    }
    /// Whether `listed` is the sandbox that the claim (or detach) `claimed` names. Exact by
    /// default; Docker also accepts a unique id prefix, as its own API does. Whatever a
    /// driver accepts, `claimed.id` must be a prefix of `listed.id` (or equal to it): the
    /// ledger's index of claims looks a sandbox's claimers up by the prefixes of its id
    /// (`ownership::known`). A claim that carries an [`Sandbox::identity`] names only the
    /// object with that identity: a name is not an identity.
    fn names(&self, claimed: &Sandbox, listed: &Sandbox) -> bool {
        claimed.kind == listed.kind && claimed.id == listed.id && same_identity(claimed, listed)
    }
    /// Whether a claim of `claimed` is pinned to the object it names when it arrives: where
    /// the provider reuses the id (a Docker volume's name), the sidecar looks the object up
    /// ([`Provider::describe`]) and journals the claim with its identity
    /// (`ID@IDENTITY`, [`Provider::claim_id`]), so that it never names an object made later
    /// under the same id. Never, by default: ids are identities.
    fn pins(&self, claimed: &Sandbox) -> bool {
        let _ = claimed;
        false
    }
    /// What the provider says now of the one sandbox `claimed` names: the reclaim asks it of
    /// a claim that no listing answered for (listings find only what carries a session
    /// label), so that the judgement sees the labels it carries (`sandguard.detached=true`,
    /// another session's) and, where ids are names, whether it still is the object claimed;
    /// the sidecar asks it to pin a claim ([`Provider::pins`]). `Described::Unsupported` by
    /// default.
    async fn describe(&self, claimed: &Sandbox) -> Result<Described, ProviderError> {
        let _ = claimed;
        Ok(Described::Unsupported)
    }
    /// Removes one resource for good. `Err(Gone)` means it was not there (anymore).
    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError>;
    /// Whether the sidecar should connect soon after start (a local daemon whose first call
    /// also negotiates, so a reclaim finds it ready), or build its client at the first real
    /// call (a cloud API: its TLS and HTTP stacks cost memory an idle sidecar need not hold).
    fn warm_up(&self) -> bool {
        false
    }
    /// Follows `session`'s sandboxes as the provider reports them created and destroyed, until
    /// the future is dropped (a sidecar runs it beside its watch); returns at once where the
    /// provider has no such feed (the default). What it learns is [`Provider::known`], and
    /// each sandbox of the session it sees go is told to `gone` ([`Gone`]).
    /// `began_ms`: when the session began (Unix milliseconds), where known: following that
    /// saw everything since then is [`Following::whole`].
    async fn follow(&self, session: &str, began_ms: Option<u64>, gone: GoneTx) {
        let _ = (session, began_ms, gone);
    }
    /// The sandboxes of `session` that following proved exist, as they were listed when
    /// created: a reclaim removes them first. `None` when the session is not followed (the
    /// default).
    fn known(&self, session: &str) -> Option<Following> {
        let _ = session;
        None
    }
    /// Checks that the provider answers; on success a short description (version, endpoint).
    async fn check(&self) -> Result<String, ProviderError>;
    /// Makes the provider end `sandbox` on its own `ttl` from now unless renewed again (only
    /// where `Capabilities::ttl` says so). The sidecar calls it while the owner lives, so a
    /// machine that sleeps or dies still loses its sandboxes on the provider's side.
    async fn renew(&self, sandbox: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
        let _ = (sandbox, ttl);
        Err(ProviderError::fatal(format!(
            "{} has no server-side TTL",
            self.name()
        )))
    }
}

/// Whether `listed` has the identity the claim `claimed` carries, if it carries one.
pub(crate) fn same_identity(claimed: &Sandbox, listed: &Sandbox) -> bool {
    claimed
        .identity
        .as_ref()
        .is_none_or(|i| listed.identity.as_ref() == Some(i))
}

/// The provider called `name` among `providers` (the one lookup every path uses).
pub(crate) fn by_name<'a>(
    providers: &'a [Arc<dyn Provider>],
    name: &str,
) -> Option<&'a Arc<dyn Provider>> {
    providers.iter().find(|p| p.name() == name)
}

pub(crate) use error::{Detail, ProviderError};
pub(crate) use registry::{Entry, EntryState, Registry, SelectError};
