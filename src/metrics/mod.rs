//! The sweep service's metrics (`sandguard sweep --every D --metrics ADDR`): what the
//! reaper did and whether it is alive, in the Prometheus text format, through the
//! `prometheus-client` crate (no exposition is written by hand).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `sandguard_sandboxes_reclaimed_total` | counter | `provider`, `cause` | objects removed (containers, their networks and volumes, cloud sandboxes) |
//! | `sandguard_removals_failed_total` | counter | `provider`, `status_class` | the sweep's removals that failed or were unfinished |
//! | `sandguard_provider_list_failures_total` | counter | `provider` | passes in which a provider could not be listed |
//! | `sandguard_store_failures_total` | counter | `store` | what the ledger or the fleet store could not do |
//! | `sandguard_sessions_pending` | gauge | | ledger sessions whose reclaim left something pending |
//! | `sandguard_sandboxes_pending` | gauge | `provider` | what those reclaims could not remove yet |
//! | `sandguard_sessions_watched` | gauge | | live owners this service adopted and watches |
//! | `sandguard_sessions_adopted_total` | counter | | owners it began to watch |
//! | `sandguard_sandboxes_alive` | gauge | `provider`, `kind` | managed objects at the last pass, less what it removed |
//! | `sandguard_sandbox_seconds_total` | counter | `provider` | sandbox time the ledger's sessions used |
//! | `sandguard_sweep_pass_duration_seconds` | histogram | | how long each pass took |
//! | `sandguard_sweep_last_pass_timestamp_seconds` | gauge | | when the last pass completed: the heartbeat |
//! | `sandguard_sweep_interval_seconds` | gauge | | `--every`, for an alert on the heartbeat |
//! | `sandguard_sweep_passes_total` | counter | `result` (`clean`, `unclean`) | passes completed |
//! | `sandguard_build_info` | gauge | `version` | always 1 |
//!
//! Every metric carries `host` (the `[fleet] host` id, or this machine's), so the sweepers of
//! a fleet can be scraped into one Prometheus and told apart.
//!
//! Decisions:
//! - **Removals are counted where they are recorded.** Most sandboxes are reclaimed by their
//!   sidecars, which serve nothing (a sidecar stays idle at zero wake-ups); what they did
//!   reaches these figures through the ledger ([`ledger::Tally`]): every journal of the state
//!   directory is read again when it changed, and each sandbox its story tells as removed
//!   is counted once, under the ending the journal gives (`owner_dead`, `lease_expired`,
//!   `bye`, `sweep`, `finished_pending`, `lifetime`, `spend`, `unrecorded`), or `stop` for a
//!   `sandguard stop`. This service's own reclaims of ledger sessions are journaled too, so
//!   they are counted from there, once; only what the sweep removes that no journal here
//!   records (a sandbox judged by its labels: `owner_dead`, `expired`; a fleet session of
//!   another host: `lease_expired`) is counted from the pass itself ([`crate::sweep::Untold`]).
//! - **Removed, not gone.** A removal the provider answered "already gone" is not counted: it
//!   was not this tool's doing.
//! - **Counted from when the service started.** The journals the first look finds are the
//!   baseline: what they already tell is not counted, only what they tell afterwards, and
//!   every session that starts later in full. The service takes that look before anything
//!   it does ([`crate::sweep::service`]): what happened before it started is not its doing;
//!   what its first pass reclaims is counted, as is a sidecar's reclaim that ends while it
//!   runs. A counter that began with the ledger's history would jump at every restart by
//!   whatever pruning took away. Pruned sessions leave their counts in the counters
//!   (counters never decrease).
//! - **Looked at on every scrape and after every pass**, so a sidecar's reclaim is counted
//!   at the next scrape, not a sweep interval later; a look costs a `stat` per session whose
//!   journal did not change, and keeps the story of unfinished sessions only.
//! - **Failures are the sweep's own attempts**: a sidecar's failed removals show as
//!   `sandguard_sessions_pending` / `sandguard_sandboxes_pending` (its journal's pending
//!   reclaim), which the next pass retries. `status_class` is `4xx`, `5xx`, … from the
//!   provider's HTTP status, or `none` (no answer: a timeout, a refused connection).
//! - **The heartbeat is a pass that ran to its end**, clean or not (a provider that cannot be
//!   listed is `sandguard_provider_list_failures_total`, not silence); a pass skipped because
//!   the ledger could not be locked is no heartbeat.
//! - **Alive is what the last pass listed**: per provider that answered, by kind (`instance`,
//!   `network`, `volume`), less what the pass removed. A provider that could not be listed
//!   has no figure at that pass (its series is dropped) rather than a stale one.

mod ledger;
pub(crate) mod serve;

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::ledger::StateDir;
use crate::reclaim::Outcome;
use crate::sweep::Pass;

/// A metric's labels, as `(name, value)` pairs.
type Labels = Vec<(&'static str, String)>;

/// The sweep service's figures, shared between its passes and the endpoint that serves them.
pub(crate) struct Metrics {
    registry: Registry,
    reclaimed: Family<Labels, Counter>,
    removals_failed: Family<Labels, Counter>,
    list_failures: Family<Labels, Counter>,
    store_failures: Family<Labels, Counter>,
    sessions_pending: Gauge,
    sandboxes_pending: Family<Labels, Gauge>,
    sessions_watched: Gauge,
    sessions_adopted: Counter,
    alive: Family<Labels, Gauge>,
    sandbox_seconds: Family<Labels, Counter<f64, AtomicU64>>,
    pass_duration: Histogram,
    last_pass: Gauge<f64, AtomicU64>,
    passes: Family<Labels, Counter>,
    /// What the journals told at the last look.
    tally: Mutex<ledger::Tally>,
}

/// The body of a scrape and its `Content-Type`.
pub(crate) struct Scrape {
    pub body: String,
    pub content_type: &'static str,
}

/// OpenMetrics' `Content-Type`, for a scraper that asks for it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

impl Metrics {
    /// Every metric registered, each labelled `host`, the interval given.
    pub(crate) fn new(host: &str, every: Duration) -> Metrics {
        let mut registry =
            Registry::with_labels(std::iter::once(("host".into(), host.to_string().into())));
        let m = Metrics {
            reclaimed: Family::default(),
            removals_failed: Family::default(),
            list_failures: Family::default(),
            store_failures: Family::default(),
            sessions_pending: Gauge::default(),
            sandboxes_pending: Family::default(),
            sessions_watched: Gauge::default(),
            sessions_adopted: Counter::default(),
            alive: Family::default(),
            sandbox_seconds: Family::default(),
            // 10 ms to about 5 min.
            pass_duration: Histogram::new(exponential_buckets(0.01, 2.0, 15)),
            last_pass: Gauge::default(),
            passes: Family::default(),
            tally: Mutex::new(ledger::Tally::default()),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register(
            "sandguard_sandboxes_reclaimed",
            "Objects removed (containers, their networks and volumes, cloud sandboxes), by provider and cause",
            m.reclaimed.clone(),
        );
        r.register(
            "sandguard_removals_failed",
            "The sweep's removals that failed or were unfinished, by provider and HTTP status class",
            m.removals_failed.clone(),
        );
        r.register(
            "sandguard_provider_list_failures",
            "Passes in which a provider could not be listed",
            m.list_failures.clone(),
        );
        r.register(
            "sandguard_store_failures",
            "What the ledger or the fleet store could not do",
            m.store_failures.clone(),
        );
        r.register(
            "sandguard_sessions_pending",
            "Ledger sessions whose reclaim left something pending",
            m.sessions_pending.clone(),
        );
        r.register(
            "sandguard_sandboxes_pending",
            "What pending reclaims could not remove yet, by provider",
            m.sandboxes_pending.clone(),
        );
        r.register(
            "sandguard_sessions_watched",
            "Live owners this service adopted and watches",
            m.sessions_watched.clone(),
        );
        r.register(
            "sandguard_sessions_adopted",
            "Live owners this service began to watch",
            m.sessions_adopted.clone(),
        );
        r.register(
            "sandguard_sandboxes_alive",
            "Managed objects the last pass listed, less what it removed, by provider and kind",
            m.alive.clone(),
        );
        r.register(
            "sandguard_sandbox_seconds",
            "Sandbox time the ledger's sessions used, by provider",
            m.sandbox_seconds.clone(),
        );
        r.register(
            "sandguard_sweep_pass_duration_seconds",
            "How long each sweep pass took",
            m.pass_duration.clone(),
        );
        r.register(
            "sandguard_sweep_last_pass_timestamp_seconds",
            "When the last sweep pass completed (Unix seconds): the heartbeat to alert on",
            m.last_pass.clone(),
        );
        let interval = Gauge::<f64, AtomicU64>::default();
        interval.set(every.as_secs_f64());
        r.register(
            "sandguard_sweep_interval_seconds",
            "The time between passes (--every)",
            interval,
        );
        r.register(
            "sandguard_sweep_passes",
            "Sweep passes completed, clean or not",
            m.passes.clone(),
        );
        let build = Family::<Labels, Gauge>::default();
        build
            .get_or_create(&labels([("version", env!("CARGO_PKG_VERSION"))]))
            .set(1);
        r.register("sandguard_build_info", "The running sandguard", build);
        Metrics { registry, ..m }
    }

    /// What one pass did (`took` to run): the heartbeat, its duration, its failures, what it
    /// removed that no journal here records, and what is alive.
    pub(crate) fn pass(&self, pass: &Pass, took: Duration) {
        self.pass_duration.observe(took.as_secs_f64());
        let result = if pass.is_clean() { "clean" } else { "unclean" };
        self.passes
            .get_or_create(&labels([("result", result)]))
            .inc();
        self.removals(pass);
        for f in &pass.list_failures {
            let provider = labels([("provider", f.provider.as_str())]);
            self.list_failures.get_or_create(&provider).inc();
        }
        self.alive.clear();
        for (provider, kinds) in &pass.listed {
            for (kind, listed) in kinds {
                let removed = pass
                    .removals
                    .iter()
                    .filter(|r| r.outcome.is_success())
                    .filter(|r| &r.sandbox.provider == provider && r.sandbox.kind == *kind)
                    .count();
                let key = labels([("provider", provider.as_str()), ("kind", kind.as_str())]);
                let alive = listed.saturating_sub(removed);
                self.alive.get_or_create(&key).set(alive as i64);
            }
        }
        self.last_pass.set(crate::ledger::now_ms() as f64 / 1000.0);
    }

    /// What an adopted session's watcher did when its owner died (no pass: no heartbeat).
    pub(crate) fn watched(&self, pass: &Pass) {
        self.removals(pass);
    }

    /// The failures, untold removals and store failures of a pass or a watcher's reclaim.
    fn removals(&self, pass: &Pass) {
        for r in &pass.removals {
            let (Outcome::Failed(f) | Outcome::Unfinished(f)) = &r.outcome else {
                continue;
            };
            let class = f
                .status
                .map_or_else(|| "none".into(), |s| format!("{}xx", s / 100));
            let key = labels([
                ("provider", r.sandbox.provider.as_str()),
                ("status_class", &class),
            ]);
            self.removals_failed.get_or_create(&key).inc();
        }
        for u in &pass.untold {
            let key = labels([("provider", u.provider.as_str()), ("cause", u.cause)]);
            self.reclaimed.get_or_create(&key).inc();
        }
        for f in &pass.store_failures {
            let key = labels([("store", f.store.as_str())]);
            self.store_failures.get_or_create(&key).inc();
        }
    }

    /// How many adopted owners are watched now; `new`: how many began to be.
    pub(crate) fn watching(&self, now: usize, new: usize) {
        self.sessions_watched.set(now as i64);
        self.sessions_adopted.inc_by(new as u64);
    }

    /// Reads the ledger's journals that changed since the last look and counts what they
    /// tell that is new (the module's decisions). Blocking: file reads.
    pub(crate) fn look(&self, state: &StateDir) {
        let mut tally = self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seen = tally.look(state, crate::ledger::now_ms());
        for ((provider, cause), n) in seen.removed {
            let key = labels([("provider", provider.as_str()), ("cause", cause)]);
            self.reclaimed.get_or_create(&key).inc_by(n);
        }
        for (provider, seconds) in seen.seconds {
            let key = labels([("provider", provider.as_str())]);
            self.sandbox_seconds.get_or_create(&key).inc_by(seconds);
        }
        self.sessions_pending.set(seen.sessions_pending as i64);
        self.sandboxes_pending.clear();
        for (provider, n) in seen.sandboxes_pending {
            let key = labels([("provider", provider.as_str())]);
            self.sandboxes_pending.get_or_create(&key).set(n as i64);
        }
    }

    /// The exposition: OpenMetrics when `accept` (a request's `Accept`) asks for it, the
    /// Prometheus text format (0.0.4) otherwise.
    pub(crate) fn scrape(&self, accept: &str) -> Scrape {
        let mut body = String::new();
        let (encoded, content_type) = if accept.contains("application/openmetrics-text") {
            (text::encode(&mut body, &self.registry), OPENMETRICS)
        } else {
            let encoded = prometheus_text::encode(&mut body, &self.registry);
            (encoded, prometheus_text::CONTENT_TYPE)
        };
        // Writing to a String cannot fail; an encoder's own error would leave a partial body.
        if let Err(e) = encoded {
            tracing::warn!("metrics: the exposition could not be encoded: {e}");
        }
        Scrape { body, content_type }
    }
}

#[cfg(test)]
mod tests;
