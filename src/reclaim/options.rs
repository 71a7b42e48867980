//! The limits of one reclaim ([`Options`]): its deadline, its retries, the per-provider pace
//! it shares with others ([`Paces`]) and what may cut it short ([`Cutoff`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::cutoff::Cutoff;
use super::pace::Pace;
use crate::config::ReclaimSettings;

/// Limits of one reclaim.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub concurrency: usize,
    /// Providers whose window is not `concurrency` ([`ReclaimSettings::windows`]).
    pub windows: BTreeMap<String, usize>,
    pub deadline: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Delay before the second listing; `None` lists once.
    pub settle: Option<Duration>,
    /// Calls a second never to exceed, per provider (`[providers.NAME] rate`).
    pub rates: BTreeMap<String, f64>,
    /// Where each provider's [`Pace`] comes from: a fresh one per reclaim (the default), or
    /// one shared by every reclaim run with these options ([`Paces::shared`]).
    pub paces: Paces,
    /// What brings the deadline forward: the sweep service's stop ([`super::cutoff`]);
    /// never, by default.
    pub cutoff: Cutoff,
}

impl Options {
    /// Calls in flight at once to provider `name`.
    pub(crate) fn window(&self, name: &str) -> usize {
        self.windows
            .get(name)
            .copied()
            .unwrap_or(self.concurrency)
            .max(1)
    }

    /// The rate cap of provider `name`, if it has one.
    pub(crate) fn rate(&self, name: &str) -> Option<f64> {
        self.rates.get(name).copied()
    }

    /// These options with one pace per provider shared by every reclaim that uses them (or a
    /// clone of them): a sweep reclaiming several sessions at once calls each provider as
    /// politely as one reclaim would.
    pub(crate) fn sharing_paces(&self) -> Options {
        Options {
            paces: Paces::shared(),
            ..self.clone()
        }
    }

    /// The pace of `provider` for one reclaim: its own, or the shared one.
    pub(super) fn pace(&self, provider: &str) -> Arc<Pace> {
        let fresh = || Arc::new(Pace::new(self.window(provider), self.rate(provider)));
        match &self.paces.0 {
            None => fresh(),
            Some(shared) => shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(provider.to_string())
                .or_insert_with(fresh)
                .clone(),
        }
    }
}

/// The paces of a reclaim's providers. Not shared (the default), every reclaim makes its own;
/// shared, the first reclaim to call a provider makes its pace and every later one (through a
/// clone of the same [`Options`]) waits at the same gate, in the same window, at the same
/// rate: a `Retry-After` holds back every session's calls to that provider, and
/// `[providers.NAME] rate` caps them all together.
#[derive(Clone, Default)]
pub(crate) struct Paces(Option<Arc<std::sync::Mutex<PaceMap>>>);

/// The shared paces, by provider.
type PaceMap = BTreeMap<String, Arc<Pace>>;

impl Paces {
    /// Paces shared by every holder of a clone of this value.
    pub(crate) fn shared() -> Paces {
        Paces(Some(Arc::default()))
    }
}

impl std::fmt::Debug for Paces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "shared"
        } else {
            "per reclaim"
        })
    }
}

impl From<&ReclaimSettings> for Options {
    fn from(s: &ReclaimSettings) -> Self {
        Options {
            concurrency: s.concurrency,
            windows: s.windows.clone(),
            deadline: s.deadline,
            retry_initial: s.retry_initial,
            retry_max: s.retry_max,
            settle: Some(s.settle).filter(|d| !d.is_zero()),
            rates: s.rates.clone(),
            paces: Paces::default(),
            cutoff: Cutoff::default(),
        }
    }
}
