//! One provider's share of a reclaim pass, judged: every sandbox listed and every claim goes
//! through the one judgement ([`Plan::judge`]); a claim no complete listing answered for is
//! looked up first ([`Provider::describe`]) and judged by what it carries.

use std::collections::HashSet;

use tokio::time::Instant;

use super::{key, pace, remove, Failure, ListFailure, Options, Outcome, Plan, Removal};
use crate::labels::Selector;
use crate::providers::{Described, Provider, ProviderError, Refusal, Sandbox, SandboxKey};

/// The judging state of one provider's share of a pass.
pub(super) struct Judged<'a> {
    provider: &'a dyn Provider,
    plan: &'a Plan,
    /// Judged already (this pass or a finished earlier one).
    seen: HashSet<SandboxKey>,
    claims: Vec<Sandbox>,
    /// The claims a listed sandbox answered for.
    matched: HashSet<usize>,
    /// Claims no complete listing answered for, to be looked up one by one ([`Judged::describe`]).
    bare: Vec<Sandbox>,
}

impl<'a> Judged<'a> {
    /// The judging of `claims` and what `provider` lists for `plan`; `seen`: judged already.
    pub(super) fn new(
        provider: &'a dyn Provider,
        plan: &'a Plan,
        seen: HashSet<SandboxKey>,
        claims: Vec<Sandbox>,
    ) -> Judged<'a> {
        Judged {
            provider,
            plan,
            seen,
            claims,
            matched: HashSet::new(),
            bare: Vec::new(),
        }
    }

    /// What of `found` the judgement removes, and the claims it refuses (reported, final);
    /// with `complete`, the claims nothing listed answered for are set aside to be looked up
    /// ([`Judged::describe`]).
    pub(super) fn sort(
        &mut self,
        found: Vec<Sandbox>,
        complete: bool,
    ) -> (Vec<Sandbox>, Vec<Removal>) {
        let mut targets = Vec::new();
        let mut refused = Vec::new();
        for s in found {
            for (n, c) in self.claims.iter().enumerate() {
                if c.names(self.provider, &s) {
                    self.matched.insert(n);
                }
            }
            self.decide(s, &mut targets, &mut refused);
        }
        if complete {
            let bare: Vec<Sandbox> = (0..self.claims.len())
                .filter(|n| self.matched.insert(*n))
                .map(|n| self.claims[n].clone())
                .collect();
            self.bare.extend(bare);
        }
        (targets, refused)
    }

    /// The claims no listing answered for, each looked up ([`Provider::describe`]) and judged
    /// as the provider describes it: by the labels it carries (a listing finds only what
    /// carries a session label, so a claimed sandbox labelled `sandguard.detached=true` alone
    /// is seen only here), and, where ids are names, only when it still is the object
    /// claimed. A provider that cannot look one up is listed once, whole, for all of them
    /// ([`Judged::seen_in`]). A look-up that keeps failing (retried as a removal is, until the
    /// deadline) leaves its claim unfinished: nobody can tell what it carries.
    pub(super) async fn describe(
        &mut self,
        options: &Options,
        deadline: Instant,
        pace: &pace::Pace,
    ) -> (Vec<Sandbox>, Vec<Removal>) {
        use futures_util::stream::{self, StreamExt};
        let bare = std::mem::take(&mut self.bare);
        let provider = self.provider;
        let described: Vec<(Sandbox, Result<Described, ProviderError>)> = stream::iter(bare)
            .map(|c| async move {
                let call = || provider.describe(&c);
                let (d, _) = remove::retrying(provider, options, deadline, pace, call).await;
                (c, d)
            })
            .buffer_unordered(options.window(provider.name()).max(1))
            .collect()
            .await;
        let (unsupported, described): (Vec<_>, Vec<_>) = described
            .into_iter()
            .partition(|(_, d)| matches!(d, Ok(Described::Unsupported)));
        let unsupported: Vec<Sandbox> = unsupported.into_iter().map(|(c, _)| c).collect();
        let listed = self.seen_in(unsupported, options, deadline, pace).await;
        let mut targets = Vec::new();
        let mut refused = Vec::new();
        for (claim, answer) in described.into_iter().chain(listed) {
            match answer {
                Ok(Described::Found(s)) if claim.names(provider, &s) => {
                    self.decide(s, &mut targets, &mut refused);
                }
                Ok(Described::Found(s)) => refused.push(not_the_one(claim, &s)),
                Ok(Described::Gone) | Err(ProviderError::Gone(_)) => refused.push(Removal {
                    at_ms: None,
                    sandbox: claim,
                    outcome: Outcome::Gone,
                    attempts: 0,
                }),
                Ok(Described::Unsupported) => self.decide(claim, &mut targets, &mut refused),
                Err(ProviderError::Refused(why)) => refused.push(Removal {
                    at_ms: None,
                    sandbox: claim,
                    outcome: Outcome::Refused(Refusal(why)),
                    attempts: 0,
                }),
                Err(e) => refused.push(Removal {
                    at_ms: None,
                    sandbox: claim,
                    outcome: Outcome::Unfinished(e.into()),
                    attempts: 0,
                }),
            }
        }
        (targets, refused)
    }

    /// `claims` as one listing of everything the provider holds shows them
    /// ([`Selector::anything`]), for a provider that cannot look up one sandbox: each found
    /// there is described by it; one not found is judged as it stands
    /// ([`Described::Unsupported`]: its removal says whether it exists); a listing that keeps
    /// failing leaves them all unfinished.
    async fn seen_in(
        &self,
        claims: Vec<Sandbox>,
        options: &Options,
        deadline: Instant,
        pace: &pace::Pace,
    ) -> Vec<(Sandbox, Result<Described, ProviderError>)> {
        if claims.is_empty() {
            return Vec::new();
        }
        let provider = self.provider;
        let anything = Selector::anything();
        let call = || provider.list(&anything);
        let (listed, _) = remove::retrying(provider, options, deadline, pace, call).await;
        claims
            .into_iter()
            .map(|c| {
                let answer = match &listed {
                    Ok(all) => Ok(all
                        .iter()
                        .find(|s| c.names(provider, s))
                        .cloned()
                        .map_or(Described::Unsupported, Described::Found)),
                    Err(e) => Err(e.clone()),
                };
                (c, answer)
            })
            .collect()
    }

    fn decide(&mut self, s: Sandbox, targets: &mut Vec<Sandbox>, refused: &mut Vec<Removal>) {
        if self.seen.contains(&key(&s)) {
            return;
        }
        let claimed = self.plan.claimed(self.provider, &s)
            || self.claims.iter().any(|c| c.names(self.provider, &s));
        let judgement = self.plan.judge(self.provider, &s, claimed);
        if judgement.removes() {
            self.seen.insert(key(&s));
            targets.push(s);
        } else if judgement.reason.is_detached() {
            self.seen.insert(key(&s));
        } else if claimed {
            // A claim the judgement will not honour: said once, final. (A detached one is
            // kept above without a word: that is what its owner asked.)
            self.seen.insert(key(&s));
            refused.push(Removal {
                at_ms: None,
                sandbox: s,
                outcome: Outcome::Refused(Refusal(judgement.reason.to_string())),
                attempts: 0,
            });
        }
    }

    /// The claims no listing answered for by the deadline: nobody can tell whose they are.
    pub(super) fn unjudged(&self, failure: &ListFailure) -> Vec<Removal> {
        (0..self.claims.len())
            .filter(|n| !self.matched.contains(n))
            .map(|n| &self.claims[n])
            .filter(|c| !self.seen.contains(&key(c)))
            .map(|c| Removal {
                at_ms: None,
                sandbox: c.clone(),
                outcome: Outcome::Unfinished(Failure {
                    message: format!(
                        "not judged: {} could not be listed ({})",
                        failure.provider, failure.error
                    ),
                    ..failure.error.clone()
                }),
                attempts: 0,
            })
            .collect()
    }
}

/// A claim whose id now names another object than the one claimed (a volume made since under
/// the same name): refused, final; what is there now is not the session's by this claim.
fn not_the_one(claim: Sandbox, now: &Sandbox) -> Removal {
    let why = format!(
        "{} {} {:?} now is not the one claimed (claimed: {}, there now: {}): a name is not an \
         identity",
        claim.provider,
        claim.kind.as_str(),
        claim.id,
        claim.identity.as_deref().unwrap_or("?"),
        now.identity.as_deref().unwrap_or("?"),
    );
    Removal {
        at_ms: None,
        sandbox: claim,
        outcome: Outcome::Refused(Refusal(why)),
        attempts: 0,
    }
}
