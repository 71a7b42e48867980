//! What the ledger's journals tell the metrics: the removals their stories record, the sandbox
//! time their sessions used, and what is pending; each journal read again only when it (or
//! its side file of stops) changed ([`StateDir::reread_history`]).

use std::collections::{BTreeMap, HashMap};

use crate::ledger::price::Prices;
use crate::ledger::spend::Spend;
use crate::ledger::story::{Fate, Story};
use crate::ledger::{HistoryStamp, SessionState, SessionView, StateDir};

/// A removal's provider and cause.
type Cause = (String, &'static str);

/// What the last look knew, session by session.
#[derive(Default)]
pub(super) struct Tally {
    sessions: HashMap<String, Known>,
    /// Whether a look has been made: the first one's findings are the baseline (the sweep
    /// service makes it before its first pass). A look that could not list the ledger is
    /// none: the next one is the baseline.
    primed: bool,
}

/// One session as the last look read it.
struct Known {
    stamp: HistoryStamp,
    /// Its view and story while its time can still grow (it is not over, or a sandbox of it
    /// is alive: a detached one runs on to its TTL); `None` otherwise.
    open: Option<(SessionView, Story)>,
    /// Its figures at that look: what has been counted of it.
    figures: Figures,
}

/// One session's figures at a moment.
#[derive(Default, Clone)]
struct Figures {
    removed: BTreeMap<Cause, u64>,
    seconds: BTreeMap<String, f64>,
    /// Pending sandboxes per provider.
    pending: BTreeMap<String, usize>,
    state: Option<SessionState>,
}

/// What one look found new, and what is pending now.
#[derive(Default)]
pub(super) struct Seen {
    /// Removals not counted before, by provider and cause.
    pub removed: BTreeMap<Cause, u64>,
    /// Sandbox time not counted before, by provider.
    pub seconds: BTreeMap<String, f64>,
    pub sessions_pending: usize,
    pub sandboxes_pending: BTreeMap<String, usize>,
}

impl Tally {
    /// Looks at every journal (see the module docs), at `now_ms`.
    pub(super) fn look(&mut self, state: &StateDir, now_ms: u64) -> Seen {
        let mut seen = Seen::default();
        let ids = match state.session_ids() {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!("metrics: the ledger could not be listed: {e}");
                return seen;
            }
        };
        let mut next = HashMap::with_capacity(ids.len());
        for id in ids {
            let before = self.sessions.remove(&id);
            let fresh = match state.reread_history(&id, before.as_ref().map(|k| k.stamp)) {
                Ok(Some((stamp, view, story))) => Some(Known::of(stamp, view, story, now_ms)),
                Ok(None) => None,
                // Being created (no start yet), or unreadable (the sweep says so): what was
                // known of it stands until it can be read.
                Err(e) => {
                    tracing::debug!("metrics: session {id} not read: {e}");
                    None
                }
            };
            let now = match (fresh, &before) {
                (Some(known), _) => known,
                (None, Some(known)) => known.at(now_ms),
                (None, None) => continue,
            };
            // The first look's sessions are the baseline; a session first seen later counts
            // whole.
            match &before {
                Some(known) => seen.add_new(&now.figures, &known.figures),
                None if self.primed => seen.add_new(&now.figures, &Figures::default()),
                None => {}
            }
            if now.figures.state == Some(SessionState::Pending) {
                seen.sessions_pending += 1;
            }
            for (provider, n) in &now.figures.pending {
                *seen.sandboxes_pending.entry(provider.clone()).or_default() += n;
            }
            next.insert(id, now);
        }
        // A session gone from the ledger (pruned) takes nothing back: counters never
        // decrease.
        self.sessions = next;
        self.primed = true;
        seen
    }
}

impl Known {
    fn of(stamp: HistoryStamp, view: SessionView, story: Story, now_ms: u64) -> Known {
        let (figures, alive) = Figures::of(&view, &story, now_ms);
        let open = (alive || !view.state.is_final()).then_some((view, story));
        Known {
            stamp,
            open,
            figures,
        }
    }

    /// The same journal at `now_ms`: an open session's time counted on.
    fn at(&self, now_ms: u64) -> Known {
        match &self.open {
            Some((view, story)) => Known::of(self.stamp, view.clone(), story.clone(), now_ms),
            None => Known {
                stamp: self.stamp,
                open: None,
                figures: self.figures.clone(),
            },
        }
    }
}

impl Figures {
    /// A session's figures at `now_ms`, and whether a sandbox of it is alive.
    fn of(view: &SessionView, story: &Story, now_ms: u64) -> (Figures, bool) {
        let mut f = Figures {
            state: Some(view.state),
            ..Figures::default()
        };
        for s in &story.sandboxes {
            let provider = s.target.provider.clone();
            match &s.fate {
                Fate::Removed {
                    ending,
                    gone: false,
                } => *f.removed.entry((provider, ending.as_str())).or_default() += 1,
                Fate::Stopped { gone: false } => {
                    *f.removed.entry((provider, "stop")).or_default() += 1;
                }
                Fate::Pending(_) => *f.pending.entry(provider).or_default() += 1,
                _ => {}
            }
        }
        // Time only: money is `report`'s, at the prices of the day.
        let spend = Spend::of(view, story, now_ms, &Prices::default());
        let alive = spend.by_provider.values().any(|s| s.alive > 0);
        f.seconds = spend
            .by_provider
            .into_iter()
            .map(|(provider, share)| (provider, share.time.as_secs_f64()))
            .collect();
        (f, alive)
    }
}

impl Seen {
    /// Adds what `now` tells beyond `counted`; a figure that went down (a story told
    /// differently once more of the journal was read) adds nothing.
    fn add_new(&mut self, now: &Figures, counted: &Figures) {
        for (key, n) in &now.removed {
            let new = n.saturating_sub(counted.removed.get(key).copied().unwrap_or(0));
            if new > 0 {
                *self.removed.entry(key.clone()).or_default() += new;
            }
        }
        for (provider, s) in &now.seconds {
            let new = s - counted.seconds.get(provider).copied().unwrap_or(0.0);
            if new > 0.0 {
                *self.seconds.entry(provider.clone()).or_default() += new;
            }
        }
    }
}
