//! The creates the limits refused, across the ledger, for `sandguard report`: per group (a
//! session, a provider, a day), per provider whose creates were refused and per limit, from
//! each session's story ([`crate::ledger::story::RefusedCreates`]).
//!
//! Decisions:
//! - **Beside the time, not in it.** A refused create made nothing and holds no time: it is a
//!   row of its own (group, provider, limit, how many), never a sandbox of [`super::Share`].
//! - **A window counts by the journal's records.** A refusal is counted at the time of the
//!   record that carries its count (the journal writes one per doubling and one at the end,
//!   `crate::budget::refusals`), so `--since` and `--by day` place the refusals between two
//!   records at the later one's time: at most the time a flood lasted, and exact for the
//!   common case of refusals that stop with the session.

use std::collections::BTreeMap;

use super::{By, Window};
use crate::ledger::story::Story;
use crate::ledger::SessionView;

/// How many creates of `provider` the limit `limit` refused in the group `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefusedRow {
    /// The session id, the provider or the day, as the report's rows are keyed.
    pub key: String,
    pub provider: String,
    /// Its key, as the config names it.
    pub limit: String,
    pub creates: u64,
}

/// Every session's refused creates in `window`, grouped `by`: sessions in the order given
/// (oldest first), providers and days in order.
pub(super) fn tally(histories: &[(SessionView, Story)], window: Window, by: By) -> Vec<RefusedRow> {
    let mut rows: Vec<RefusedRow> = Vec::new();
    let mut index: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let since = window.since_ms.unwrap_or(0);
    for (view, story) in histories {
        for refused in &story.refused {
            let key = |at: u64| match by {
                By::Session => view.id.clone(),
                By::Provider => refused.provider.clone(),
                By::Day => super::day_of(at),
                // Never asked of a ledger (`By::Host`): all of it is one machine's.
                By::Host => String::new(),
            };
            for (group, creates) in refused.counted(since, window.now_ms, key) {
                let at = (group, refused.provider.clone(), refused.limit.clone());
                match index.get(&at) {
                    Some(&i) => rows[i].creates += creates,
                    None => {
                        index.insert(at.clone(), rows.len());
                        let (key, provider, limit) = at;
                        rows.push(RefusedRow {
                            key,
                            provider,
                            limit,
                            creates,
                        });
                    }
                }
            }
        }
    }
    if by != By::Session {
        rows.sort_by(|a, b| (&a.key, &a.provider, &a.limit).cmp(&(&b.key, &b.provider, &b.limit)));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::story;

    fn history(id: &str, journal: &[&str]) -> (SessionView, Story) {
        let view = SessionView::blank(id);
        let text = journal.join("\n") + "\n";
        (view, story::tell(text.as_bytes(), b""))
    }

    fn refused(provider: &str, limit: &str, n: u64, at: u64) -> String {
        format!(
            r#"{{"t":{at},"ev":"create_refused","provider":"{provider}","limit":"{limit}","max":"1","reached":"1","n":{n},"at":{at}}}"#
        )
    }

    #[test]
    fn refusals_are_counted_per_group_provider_and_limit() {
        const DAY: u64 = 86_400_000;
        let a = [
            refused("docker", "sandboxes", 1, 10),
            refused("docker", "sandboxes", 2, 20),
            refused("docker", "sandboxes", 5, DAY + 5),
            refused("e2b", "creates", 1, 30),
        ];
        let b = [refused("docker", "sandboxes", 3, 40)];
        let histories = [
            history("a", &a.iter().map(String::as_str).collect::<Vec<_>>()),
            history("b", &b.iter().map(String::as_str).collect::<Vec<_>>()),
        ];
        let all = Window::all(2 * DAY);
        let row = |key: &str, provider: &str, limit: &str, creates| RefusedRow {
            key: key.into(),
            provider: provider.into(),
            limit: limit.into(),
            creates,
        };
        assert_eq!(
            tally(&histories, all, By::Provider),
            [
                row("docker", "docker", "sandboxes", 8),
                row("e2b", "e2b", "creates", 1)
            ]
        );
        assert_eq!(
            tally(&histories, all, By::Session),
            [
                row("a", "docker", "sandboxes", 5),
                row("a", "e2b", "creates", 1),
                row("b", "docker", "sandboxes", 3)
            ]
        );
        let by_day = tally(&histories, all, By::Day);
        assert_eq!(by_day[0], row("1970-01-01", "docker", "sandboxes", 5));
        assert_eq!(by_day[2], row("1970-01-02", "docker", "sandboxes", 3));
        let late = Window {
            since_ms: Some(DAY),
            now_ms: 2 * DAY,
        };
        assert_eq!(
            tally(&histories, late, By::Provider),
            [row("docker", "docker", "sandboxes", 3)],
            "only the refusals counted at the record in the window"
        );
    }
}
