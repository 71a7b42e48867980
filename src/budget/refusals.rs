//! Creates a limit refused, counted: how many of each provider's creates each limit refused
//! over the session's life ([`Refused`], kept with the [`super::Slots`] a journal folds to,
//! so a resumed sidecar counts on), and which of them the journal records ([`journals`]).
//!
//! Decisions:
//! - **One count per provider and limit.** A refusal is counted under the provider whose
//!   create it was and the limit that refused it, as the config names it (`sandboxes`,
//!   `providers.e2b.limits.sandboxes`): the question a refusal answers is "which limit
//!   stopped which provider's creates, and how often". What each create named (an image, a
//!   template) is not a key: an agent looping over random names would make the groups, and
//!   with them the journal, grow without bound.
//! - **Journaled at each doubling, and once more at the end.** The 1st, 2nd, 4th, 8th, …
//!   refusal of a group is journaled as it happens (a `create_refused` record carrying its
//!   number `n`, the limit, the count that reached it and what the create named); the others
//!   are counted in memory, and the sidecar journals the last one's record when the session
//!   ends (`crate::watch::refusals`). A flood of 10 000 refusals (an agent retrying in a loop)
//!   adds 15 records, not 10 000; the first refusal, the one a person looks for, is always
//!   there whole; and every record's `n` is the running count, so a reader keeps the largest.
//!   A sidecar killed mid-flood loses at most the refusals since the last doubling (fewer than
//!   half): the count is history, and no later decision reads it.

use std::collections::BTreeMap;

use serde::Serialize;

/// How many creates each limit refused, per provider: provider → limit key → count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Refused(BTreeMap<String, BTreeMap<String, u64>>);

impl Refused {
    /// One more create of `provider` refused by `limit`: its number in the session (from 1).
    pub(crate) fn count(&mut self, provider: &str, limit: &str) -> u64 {
        let n = self.entry(provider, limit);
        *n += 1;
        *n
    }

    /// A journaled refusal, the `n`th of its group (as the journal's record says): the count
    /// is at least `n`.
    pub(crate) fn seen(&mut self, provider: &str, limit: &str, n: u64) {
        let count = self.entry(provider, limit);
        *count = (*count).max(n);
    }

    /// The count of `provider`'s creates `limit` refused.
    #[cfg(test)]
    pub(crate) fn of(&self, provider: &str, limit: &str) -> u64 {
        self.0
            .get(provider)
            .and_then(|l| l.get(limit))
            .copied()
            .unwrap_or(0)
    }

    fn entry(&mut self, provider: &str, limit: &str) -> &mut u64 {
        self.0
            .entry(provider.to_string())
            .or_default()
            .entry(limit.to_string())
            .or_default()
    }
}

/// Whether the `n`th refusal of a group is journaled as it happens (see the module docs).
pub(crate) fn journals(n: u64) -> bool {
    n.is_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_provider_and_limit_carry_on_from_the_journal() {
        let mut refused = Refused::default();
        assert_eq!(refused.count("docker", "sandboxes"), 1);
        assert_eq!(refused.count("docker", "sandboxes"), 2);
        assert_eq!(refused.count("e2b", "sandboxes"), 1);
        assert_eq!(refused.count("docker", "creates"), 1);
        refused.seen("docker", "sandboxes", 16);
        refused.seen("docker", "sandboxes", 4);
        assert_eq!(refused.of("docker", "sandboxes"), 16, "the largest n read");
        assert_eq!(refused.count("docker", "sandboxes"), 17);
        assert_eq!(refused.of("daytona", "sandboxes"), 0);
    }

    #[test]
    fn a_flood_of_ten_thousand_is_fifteen_records_with_the_end() {
        let mut refused = Refused::default();
        let written = (0..10_000)
            .map(|_| refused.count("docker", "sandboxes"))
            .filter(|&n| journals(n))
            .count();
        // 1, 2, 4, …, 8192, and the 10 000th at the session's end.
        assert_eq!(written + 1, 15);
    }
}
