//! The creates the session's limits refuse, on the record: counted per provider and limit
//! ([`crate::budget::Refused`]), journaled (`create_refused`, with the limit, the count that
//! reached it, the provider and what the create named), logged, and told to `[notify]`.
//!
//! Decisions:
//! - **Journaled at each doubling, the rest at the end** ([`crate::budget::journals`]): the
//!   1st, 2nd, 4th, … refusal of a provider's creates by one limit is written as it happens;
//!   the latest of the others is kept here ([`Unjournaled`]) and written when the session ends
//!   ([`Sidecar::journal_refusals`], before the reclaim, and when the sidecar is stopped), so
//!   the journal ends with the exact count. A flood of 10 000 adds 15 records.
//! - **No sync of its own** (the budget's decisions): a record is written before the refusal
//!   is answered, and made durable by the next sync (a claim's, a control batch's, the
//!   end's, which [`Sidecar::journal_refusals`] makes when it wrote anything).
//! - **Logged as it is journaled**: the log line (`refused a sandbox create on e2b: limit …`,
//!   worded so that no article hangs on the provider's name) is written at `warn` for each
//!   journaled refusal, with the count so far, and at `debug` for the others: a flood must not
//!   grow the session's log without bound either.
//! - **Told once per limit** to `[notify]` (`limit_reached`, [`super::notify`]), as before.
//! - **Nothing secret**: what the create named comes from the proxy's [`crate::proxy::named`]
//!   (an image, a template, a snapshot), never the body's environment or the request's
//!   headers.

use std::collections::BTreeMap;

use super::lease::Clock;
use super::Sidecar;
use crate::budget::Exceeded;
use crate::ledger::Record;

/// The latest refusal of each provider (first) and limit (second) not journaled yet.
pub(super) type Unjournaled = BTreeMap<(String, String), Record>;

impl<C: Clock> Sidecar<C> {
    /// A create of `provider`'s sandbox, naming `create`, that `exceeded` refused: counted,
    /// and journaled, logged and told as the module docs say.
    pub(super) fn refused(
        &mut self,
        provider: &str,
        exceeded: &Exceeded,
        create: BTreeMap<String, String>,
    ) {
        let limit = exceeded.key();
        let n = self.budget.1.refused.count(provider, &limit);
        let record = Record::CreateRefused {
            provider: provider.to_string(),
            limit: limit.clone(),
            max: exceeded.over.max(),
            reached: exceeded.over.reached(),
            n,
            at: crate::ledger::now_ms(),
            create,
        };
        let line = format!("refused a sandbox create on {provider}: {exceeded}");
        let group = (provider.to_string(), limit.clone());
        if crate::budget::journals(n) {
            self.write(&record);
            self.unjournaled.remove(&group);
            tracing::warn!("{line} ({n} refused by `{limit}` so far)");
        } else {
            self.unjournaled.insert(group, record);
            tracing::debug!("{line} ({n} refused by `{limit}` so far)");
        }
        self.tell_limit(&limit, exceeded.provider.as_deref(), &line);
    }

    /// Journals the latest refusal of each group that was not journaled yet, and syncs if it
    /// wrote any: the session is ending (or its sidecar stopping), and its journal must end
    /// with the exact counts.
    pub(super) fn journal_refusals(&mut self) {
        let left = std::mem::take(&mut self.unjournaled);
        if left.is_empty() {
            return;
        }
        for record in left.values() {
            self.write(record);
        }
        self.sync();
    }
}
