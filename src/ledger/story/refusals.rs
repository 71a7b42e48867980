//! The creates a session's limits refused, told from its `create_refused` records: one
//! [`RefusedCreates`] per provider and limit, for `sessions show` and `report`.
//!
//! Decisions:
//! - **The journal holds a record per doubling and one at the end** (`crate::budget::refusals`),
//!   each with the running count `n`: the count told is the largest `n` read, never the
//!   number of records.
//! - **The first refusal is told whole**: what its create named (`create`) and when; the
//!   limit and the count that reached it are the latest record's (a spend grows between
//!   refusals). The latest `at` is the last refusal journaled, which, with the record the
//!   sidecar writes at the end, is the last refusal there was.
//! - **Each record's step is kept** ([`RefusedCreates::steps`]: when, and the running count),
//!   so `report --since` and `--by day` count the refusals that fell in a window or a day by
//!   the records' times: the refusals between two records are counted at the later one's.

use std::collections::BTreeMap;

use crate::ledger::record::Record;

/// The creates of `provider` that `limit` refused in one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedCreates {
    pub provider: String,
    /// Its key, as the config names it (`sandboxes`, `providers.e2b.limits.creates`).
    pub limit: String,
    /// The limit and the count that reached it, in the refusal's words (the latest record's).
    pub max: String,
    pub reached: String,
    /// How many were refused (the largest `n` read).
    pub count: u64,
    /// Unix milliseconds of the first refusal journaled, and of the last.
    pub first_ms: u64,
    pub last_ms: u64,
    /// What the first refused create named (`image`, `template`, `snapshot`).
    pub create: BTreeMap<String, String>,
    /// Each record's time and running count, oldest first.
    pub steps: Vec<(u64, u64)>,
}

/// The refused creates of a journal, gathered in the order their groups first appear.
#[derive(Debug, Default)]
pub(super) struct Gathered(Vec<RefusedCreates>);

impl Gathered {
    /// A `create_refused` record (any other record is not this module's, and is ignored).
    pub(super) fn add_record(&mut self, record: Record) {
        let Record::CreateRefused {
            provider,
            limit,
            max,
            reached,
            n,
            at,
            create,
        } = record
        else {
            return;
        };
        let found = self
            .0
            .iter_mut()
            .find(|r| r.provider == provider && r.limit == limit);
        let Some(r) = found else {
            return self.0.push(RefusedCreates {
                provider,
                limit,
                max,
                reached,
                count: n,
                first_ms: at,
                last_ms: at,
                create,
                steps: vec![(at, n)],
            });
        };
        if n < r.count {
            return; // an older count, written out of order: what it says is known already
        }
        (r.max, r.reached, r.count) = (max, reached, n);
        r.last_ms = r.last_ms.max(at);
        r.steps.push((at, n));
    }

    pub(super) fn finish(self) -> Vec<RefusedCreates> {
        self.0
    }
}

impl RefusedCreates {
    /// How many of these refusals fell in `[since_ms, now_ms]`, each group of refusals between
    /// two records counted at the later record's time (see the module docs); `key` names the
    /// group a time falls in (a day), giving the count per group.
    pub(crate) fn counted(
        &self,
        since_ms: u64,
        now_ms: u64,
        key: impl Fn(u64) -> String,
    ) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        let mut before = 0;
        for &(at, n) in &self.steps {
            let step = n.saturating_sub(before);
            before = before.max(n);
            if step == 0 || at < since_ms || at > now_ms {
                continue;
            }
            let k = key(at);
            match out.iter_mut().find(|(g, _)| *g == k) {
                Some((_, c)) => *c += step,
                None => out.push((k, step)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(provider: &str, limit: &str, n: u64, at: u64, image: Option<&str>) -> Record {
        Record::CreateRefused {
            provider: provider.into(),
            limit: limit.into(),
            max: "1".into(),
            reached: n.to_string(),
            n,
            at,
            create: image
                .map(|i| BTreeMap::from([("image".to_string(), i.to_string())]))
                .unwrap_or_default(),
        }
    }

    #[test]
    fn the_first_is_told_whole_and_the_count_is_the_largest_n() {
        let mut g = Gathered::default();
        g.add_record(seen("docker", "sandboxes", 1, 10, Some("busybox")));
        g.add_record(seen("e2b", "sandboxes", 1, 11, None));
        g.add_record(seen("docker", "sandboxes", 2, 12, Some("alpine")));
        g.add_record(seen("docker", "sandboxes", 20, 30, Some("alpine")));
        let told = g.finish();
        assert_eq!(told.len(), 2);
        let docker = &told[0];
        assert_eq!(
            (docker.count, docker.first_ms, docker.last_ms),
            (20, 10, 30)
        );
        assert_eq!(docker.create["image"], "busybox", "the first's create");
        assert_eq!(docker.reached, "20", "the latest's count");
        assert_eq!(told[1].provider, "e2b");
    }

    #[test]
    fn a_window_counts_the_refusals_up_to_each_record_at_its_time() {
        let mut g = Gathered::default();
        for (n, at) in [(1, 10), (2, 20), (4, 30), (6, 40)] {
            g.add_record(seen("docker", "sandboxes", n, at, None));
        }
        let r = &g.finish()[0];
        let all = r.counted(0, 100, |_| String::new());
        assert_eq!(all, [(String::new(), 6)]);
        assert_eq!(r.counted(25, 100, |_| String::new()), [(String::new(), 4)]);
        let days = r.counted(0, 100, |at| (at / 20).to_string());
        assert_eq!(
            days,
            [
                ("0".to_string(), 1),
                ("1".to_string(), 3),
                ("2".to_string(), 2)
            ]
        );
        assert!(r.counted(41, 100, |_| String::new()).is_empty());
    }
}
