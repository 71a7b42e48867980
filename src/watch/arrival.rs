//! Claims and detaches judged as they arrive on the control pipe: [`Sidecar::may_claim`] (the
//! one judgement's claim rule, against the ledger and one listing of the provider per batch),
//! `owns` (a detach counts only from a session that owns what it names) and `accept` (what no
//! provider of the session can act on is journaled `refused`); and as they arrive from the
//! proxies (`on_proxy_ask`: a create, claimed and acknowledged once on disk, and its slot
//! under the session's limits taken and ended, or refused and put on the record:
//! `super::refusals`).

use super::lease::Clock;
use super::triggers::refusal;
use super::{Sidecar, Triggers, CLAIM_LOOKUP};
use crate::budget::Exceeded;
use crate::ledger::Record;
use crate::ownership::detach;
use crate::ownership::{self, known::Known};
use crate::protocol::{Command, Target};
use crate::providers::Kind;
use crate::providers::{Described, Provider};
use crate::proxy::claim::{Ask as ProxyAsk, Hold};

/// The providers' managed sandboxes, listed at most once per batch of control lines.
#[derive(Default)]
pub(super) struct Listings(
    std::collections::HashMap<String, Option<Vec<crate::providers::Sandbox>>>,
);

impl Listings {
    async fn of(&mut self, provider: &dyn Provider) -> &[crate::providers::Sandbox] {
        self.answered(provider).await.unwrap_or_default()
    }

    /// The listing, or `None` when the provider did not answer within [`CLAIM_LOOKUP`].
    async fn answered(&mut self, provider: &dyn Provider) -> Option<&[crate::providers::Sandbox]> {
        if !self.0.contains_key(provider.name()) {
            let selector = crate::labels::Selector::managed();
            let found = match tokio::time::timeout(CLAIM_LOOKUP, provider.list(&selector)).await {
                Ok(Ok(found)) => Some(
                    found
                        .into_iter()
                        .filter(|s| selector.matches(&s.labels))
                        .collect(),
                ),
                _ => None,
            };
            self.0.insert(provider.name().to_string(), found);
        }
        self.0.get(provider.name()).and_then(Option::as_deref)
    }
}

impl<C: Clock> Sidecar<C> {
    /// Whether an owner's `claim` (or `detach`) may be taken (the one judgement's rule,
    /// [`ownership::may_claim`]): not while another session that may still live claimed the
    /// same sandbox, or while the sandbox carries the label of another session that may still
    /// live; refused (and journaled so) otherwise. The labels are read from one listing of the
    /// provider per batch of lines, bounded by [`CLAIM_LOOKUP`]: a provider that cannot say in
    /// time leaves the label rule to the reclaim's judgement. The proxies' claims skip this:
    /// what a create just brought into being nobody else holds.
    pub(super) async fn may_claim(
        &mut self,
        t: &Target,
        known: &Known,
        listed: &mut Listings,
    ) -> bool {
        if self.holds(t) {
            return true;
        }
        let Some(provider) = crate::providers::by_name(&self.providers, &t.provider).cloned()
        else {
            return true; // refused by `accept`, with the reason
        };
        let Ok(named) = provider.parse_claim(&t.id) else {
            return true; // refused by `accept`, with the parser's reason
        };
        let found = listed.of(provider.as_ref()).await;
        let sandbox = found
            .iter()
            .find(|s| named.names(provider.as_ref(), s))
            .cloned()
            .unwrap_or_else(|| crate::providers::Sandbox {
                provider: t.provider.clone(),
                ..named
            });
        let facts = known.claim_facts(&sandbox, &self.session);
        match ownership::may_claim(&self.session, &facts) {
            Ok(()) => true,
            Err(why) => self.refuse(t, why.to_string()),
        }
    }

    /// The claim `t` as it is journaled: where its provider reuses ids ([`Provider::pins`]: a
    /// Docker volume's name), pinned to the object the id names now (`ID@IDENTITY`), so the
    /// claim never names one made later under the same id. `None` when there is nothing to
    /// pin it to (nothing of that id exists, or the provider cannot say in time): refused,
    /// journaled with the reason, so the owner hears it (a claim that names whatever comes
    /// to carry a name would be worse than none).
    pub(super) async fn pin(&mut self, t: Target) -> Option<Target> {
        let provider = crate::providers::by_name(&self.providers, &t.provider).cloned();
        let Some((provider, named)) =
            provider.and_then(|p| p.parse_claim(&t.id).ok().map(|named| (p, named)))
        else {
            return Some(t); // refused by `accept`, with the reason
        };
        if !provider.pins(&named) {
            return Some(t);
        }
        let what = format!(
            "{} {}",
            named.kind.as_str(),
            crate::protocol::echo(t.id.as_bytes())
        );
        let why = match tokio::time::timeout(CLAIM_LOOKUP, provider.describe(&named)).await {
            Ok(Ok(Described::Found(now))) => {
                return Some(Target {
                    provider: t.provider.clone(),
                    id: provider.claim_id(&now),
                })
            }
            Ok(Ok(Described::Unsupported)) => return Some(t),
            Ok(Ok(Described::Gone)) => format!(
                "no {what} exists: a claim names the object there when it is made, and there is none"
            ),
            Ok(Err(e)) => format!("cannot tell which {what} it names now ({e}); claim it again"),
            Err(_) => format!(
                "cannot tell which {what} it names now ({} did not answer within {CLAIM_LOOKUP:?}); claim it again",
                t.provider
            ),
        };
        self.refuse(&t, why);
        None
    }

    /// Whether the session owns what a `detach` line names ([`detach::ownership`]); when it
    /// shows it does not, the refusal is logged and nothing is journaled.
    pub(super) async fn owns(&mut self, t: &Target, listed: &mut Listings) -> bool {
        if self.holds(t) {
            return true;
        }
        let Some(provider) = crate::providers::by_name(&self.providers, &t.provider).cloned()
        else {
            return true; // refused by `accept`, with the reason
        };
        let found = listed.answered(provider.as_ref()).await;
        let held = self.holdings();
        let held = held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = held.claims.iter().chain(&held.detached);
        match detach::ownership(provider.as_ref(), &self.session, t, held, found) {
            detach::Ownership::NotOwned => {
                tracing::warn!("refused detach: {}", detach::not_owned(&self.session, t));
                false
            }
            detach::Ownership::Owned | detach::Ownership::Unknown => true,
        }
    }

    /// A create seen by a proxy (Docker's or the cloud one): claimed as if the owner had written
    /// the line (or detached, when the create asked for `sandguard.detached=true`: detach wins
    /// over any claim, so such a create is never journaled as a claim), then acknowledged
    /// (once on disk) so the proxy hands the service's answer to the client. A removal the
    /// program made through a proxy is released the same way.
    ///
    /// A create's slot under the session's limits is decided here too, one ask at a time
    /// ([`Sidecar::take_slot`]), and its end journaled.
    pub(super) async fn on_proxy_ask<R>(&mut self, ask: Option<ProxyAsk>, t: &mut Triggers<R>) {
        match ask {
            Some(ProxyAsk::Slot {
                provider,
                create,
                answer,
            }) => {
                let _ = answer.send(self.slot(&provider, create).await);
            }
            Some(ProxyAsk::SlotDone { n, made }) => {
                self.budget.1.done(n, made);
                self.write(&Record::SlotDone { n, made });
            }
            Some(ProxyAsk::Claim(c)) => {
                let command = match c.hold {
                    Hold::Claim => Command::Claim(c.target),
                    Hold::Detach => Command::Detach(c.target),
                    Hold::Release => Command::Release(c.target),
                };
                self.apply_sized(command, c.size);
                self.sync();
                let _ = c.ack.send(());
            }
            None => t.proxy = None,
        }
    }

    /// A slot for a create of `provider`'s sandbox under the session's limits
    /// ([`crate::budget`]): written to the journal before the answer, so the count survives
    /// the sidecar's crash (the kernel holds what was written); `None` when the session has no
    /// limit. It is made durable by the claim's sync that follows the create: a machine
    /// that crashes in between loses the slot together with the program that asked for it,
    /// whose session is then over (a sync of its own would be one more fdatasync per create).
    ///
    /// A create that would pass `sandboxes` is decided again once the provider was asked what
    /// the session still holds there ([`Sidecar::confirm_held`]): what went by itself (a
    /// `docker run --rm` whose event is still on its way) frees its slot first, and only
    /// what the provider says exists is counted against the limit.
    ///
    /// A refusal is on the record ([`Sidecar::refused`]): counted, and journaled with what the
    /// create names (`create`) as `super::refusals` decides.
    async fn slot(
        &mut self,
        provider: &str,
        create: std::collections::BTreeMap<String, String>,
    ) -> Result<Option<u64>, Exceeded> {
        if !self.budget.0.any() {
            return Ok(None);
        }
        let mut taken = self.take_slot(provider);
        if let Err(Exceeded {
            over: crate::budget::Over::Sandboxes { .. },
            ..
        }) = taken
        {
            if self.confirm_held(provider).await {
                taken = self.take_slot(provider);
            }
        }
        match taken {
            Ok(n) => {
                self.write(&Record::Slot {
                    provider: provider.to_string(),
                    n,
                });
                Ok(Some(n))
            }
            Err(exceeded) => {
                self.refused(provider, &exceeded, create);
                Err(exceeded)
            }
        }
    }

    /// The one slot decision ([`crate::budget::Slots::take`]) against what the session holds
    /// now; nothing journaled or told.
    fn take_slot(&mut self, provider: &str) -> Result<u64, Exceeded> {
        let mut slots = std::mem::take(&mut self.budget.1);
        let taken = slots.take(&self.budget.0, provider, &*self);
        self.budget.1 = slots;
        taken
    }

    /// Limits observed outside the proxies: `claimed` more claims arrived by the control pipe
    /// (the label and claim paths, where nothing is refused at create). A count over
    /// `sandboxes` or `creates` is reported, once each per sidecar, in its log and on the
    /// terminal; nothing is removed for it (`lifetime` is the only limit that removes).
    /// `creates` counts the claims this sidecar was told of plus the slots that made a
    /// sandbox.
    pub(super) fn observe(&mut self, claimed: u64) {
        let limits = self.budget.0.session;
        self.observed.claims += claimed;
        let mut over = Vec::new();
        if let Some(limit) = limits.sandboxes.filter(|_| !self.observed.told_sandboxes) {
            let held = self.held_sandboxes(None);
            if held > u64::from(limit) {
                self.observed.told_sandboxes = true;
                over.push((
                    "sandboxes",
                    format!(
                        "this session holds {held} sandboxes, over its limit `sandboxes` ({limit})"
                    ),
                ));
            }
        }
        if let Some(limit) = limits.creates.filter(|_| !self.observed.told_creates) {
            let made = self.observed.claims + self.budget.1.made;
            if made > u64::from(limit) {
                self.observed.told_creates = true;
                over.push((
                    "creates",
                    format!(
                    "this session was told of {made} sandboxes, over its limit `creates` ({limit})"
                ),
                ));
            }
        }
        for (key, line) in over {
            let line = format!(
                "{line}; claims are not refused (only a create through a proxy is), nothing removed"
            );
            tracing::warn!("{line}");
            self.tell_limit(key, None, &line);
            if let Some(notice) = &self.notice {
                notice(&line);
            }
        }
    }

    /// How many sandboxes the session holds now, claimed or detached (a Docker network or
    /// volume is not a sandbox; what no provider here can read counts, the safe side), in all
    /// or of one provider.
    fn held_sandboxes(&self, provider: Option<&str>) -> u64 {
        let held = self.held();
        let is_sandbox =
            |t: &&Target| provider.is_none_or(|p| t.provider == p) && self.is_sandbox(t);
        let claims = held.claims.iter().filter(is_sandbox).count();
        let detached = held.detached.iter().filter(is_sandbox).count();
        (claims + detached) as u64
    }

    /// Whether `t` names a sandbox (not a Docker network or volume); what no provider here can
    /// read counts as one, the safe side of a limit. Each target is parsed once
    /// ([`Sidecar::kinds`]): a limited create counts every held claim, and parsing them all
    /// again each time made its cost grow with what the session holds (P7).
    pub(super) fn is_sandbox(&self, t: &Target) -> bool {
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = kinds.get(t) {
            return *known;
        }
        let sandbox = crate::providers::by_name(&self.providers, &t.provider)
            .and_then(|p| p.parse_claim(&t.id).ok())
            .is_none_or(|named| named.kind == Kind::Instance);
        kinds.insert(t.clone(), sandbox);
        sandbox
    }

    /// A detach the judgement allows, applied once no keeper's call is on its way: a removal
    /// or renewal already in flight lands first (at most [`super::ttl::HALT_WAIT`]; the keepers check
    /// the holdings before each later call), and a sandbox a limit removed meanwhile is not
    /// confirmed detached, as if it would live on: its detach is refused, saying so. Found by
    /// the model, seed 564188974: a lifetime's removal in flight removed a sandbox its owner's
    /// detach had just been confirmed for.
    pub(super) async fn detach(&mut self, t: Target) {
        let calls = self.halting.calls();
        let _quiet = tokio::time::timeout(super::ttl::HALT_WAIT, calls.lock()).await;
        let mut removed = Vec::new();
        while let Some(aged) = self.aged.as_mut().and_then(|rx| rx.try_recv().ok()) {
            removed.push(aged.target.clone());
            self.on_aged(Some(aged));
        }
        let named = |r: &Target| {
            r == &t
                || r.answers(&t)
                || t.answers(r)
                || crate::providers::Sandbox::from_claim(&self.providers, r)
                    .is_ok_and(|s| s.named_by(&self.providers, &t))
        };
        match removed.iter().find(|r| named(r)) {
            Some(_) => {
                self.refuse(
                    &t,
                    "removed by the session's limit before the detach arrived".into(),
                );
            }
            None => {
                self.apply(Command::Detach(t));
            }
        }
    }

    /// Whether a claim, release or detach names something a provider of this session can act on;
    /// otherwise it is journaled `refused`, once, with the reason.
    pub(super) fn accept(&mut self, t: &Target) -> bool {
        match refusal(&self.providers, t) {
            None => true,
            Some(reason) => self.refuse(t, reason),
        }
    }

    /// Journals `t` as refused for `reason` (final, reported once); always `false`.
    fn refuse(&mut self, t: &Target, reason: String) -> bool {
        tracing::warn!("refused {} {}: {reason}", t.provider, t.id);
        self.write(&Record::Refused {
            provider: t.provider.clone(),
            id: t.id.clone(),
            reason,
        });
        false
    }
}

/// What the limits observed on claims so far ([`Sidecar::observe`]).
#[derive(Debug, Default)]
pub(super) struct Observed {
    /// Claims told by the control pipe.
    claims: u64,
    told_sandboxes: bool,
    told_creates: bool,
}

/// What the session holds and used, for its limits' decisions ([`crate::budget::Slots::take`]).
impl<C: Clock> crate::budget::Usage for Sidecar<C> {
    fn held(&self, provider: Option<&str>) -> u64 {
        self.held_sandboxes(provider)
    }

    fn used(&self, provider: Option<&str>, like: crate::budget::Spend) -> crate::budget::Spend {
        self.meter.used(like, provider, crate::ledger::now_ms())
    }
}
