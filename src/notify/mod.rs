//! Notifications (`[notify]`): events about reclaims, budgets and the sweeper itself, sent to a
//! command (the event as JSON on its stdin) and/or a webhook (the event POSTed as JSON), after
//! the work they tell of and never in its way.
//!
//! - [`Event`]: a kind word ([`Kind`]) and a JSON object whose every event carries `event`,
//!   `host`, `at` (RFC 3339, UTC) and `text` (one line a chat tool shows as is); each kind adds
//!   its counts (see `book/src/notifications.md` for every shape).
//! - [`Notifier`]: a handle that queues events on a bounded channel to its own task
//!   ([`deliver`]) and never blocks or awaits in the caller; [`Notifier::flush`] waits, for at
//!   most a bound, for what is queued, before a short-lived process exits.
//! - [`sweep::Tracker`]: what a sweep's passes are told as, with the memory across passes some
//!   events need (what was told already, how many passes in a row failed).
//!
//! Decisions:
//! - **Never in the way**: [`Notifier::send`] is a `try_send`; a full queue drops the event
//!   with a warning rather than wait. Events are sent after the pass (or the reclaim) they
//!   tell of is done, so a webhook that hangs delays nothing but later events.
//! - **One event per kind per pass**, with counts: a thousand orphans are one
//!   `orphans_reclaimed` with `count: 1000`; sessions and sandboxes are named when few (at
//!   most [`NAMED`]), and `more` says how many were not.
//! - **Nothing secret in a payload**: every string of the JSON (the `text`, a provider's error,
//!   an id) goes through the one redaction of the logs ([`crate::providers::redact`]), with
//!   every credential the configuration holds (the providers', the fleet store's, the webhook
//!   URL itself) as known secrets.
//! - **Built only when asked for**: no `[notify]` target, no notifier, no task; the sidecar
//!   builds one only when an event exists ([`Lazy`]), so an idle sidecar does no work and has
//!   no wake-up for it.

pub(crate) mod deliver;
pub(crate) mod sweep;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{NotifySettings, Secret, Settings};

/// How many events may wait for delivery; one more is dropped (with a warning).
const QUEUE: usize = 64;

/// How long a stopping sweep service, or an exiting sidecar, waits for what is queued.
pub(crate) const STOP_FLUSH: Duration = Duration::from_secs(2);

/// How long a one-shot sweep waits for what is queued before it exits: one attempt's
/// default timeout (a cron job should end; what was reclaimed was reclaimed either way).
pub(crate) const ONE_SHOT_FLUSH: Duration = Duration::from_secs(10);

/// How many sessions or sandboxes an event names; the rest are counted in `more`.
pub(crate) const NAMED: usize = 10;

/// What an event is about: its `event` word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A reclaim left sandboxes pending.
    ReclaimPending,
    /// A sweep finished what a session had pending.
    PendingFinished,
    /// A sweep reclaimed dead owners' sandboxes.
    OrphansReclaimed,
    /// A budget limit was hit.
    LimitReached,
    /// A detached sandbox is alive longer than `detached_after`.
    DetachedAlive,
    /// The sweeper's store or a provider's listing failed in two passes in a row.
    SweeperFailing,
    /// After `sweeper_failing`, a pass without failure.
    SweeperRecovered,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::ReclaimPending => "reclaim_pending",
            Kind::PendingFinished => "pending_finished",
            Kind::OrphansReclaimed => "orphans_reclaimed",
            Kind::LimitReached => "limit_reached",
            Kind::DetachedAlive => "detached_alive",
            Kind::SweeperFailing => "sweeper_failing",
            Kind::SweeperRecovered => "sweeper_recovered",
        }
    }
}

/// One event: its kind, its line of text, and the fields of its kind.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub kind: Kind,
    /// When it happened (Unix seconds): its `at`, the same for every target.
    pub at: i64,
    pub text: String,
    pub fields: Map<String, Value>,
}

impl Event {
    pub(crate) fn new(kind: Kind, text: impl Into<String>) -> Event {
        Event {
            kind,
            at: crate::timefmt::now_unix(),
            text: text.into(),
            fields: Map::new(),
        }
    }

    /// The event with `key` set to `value`.
    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> Event {
        self.fields.insert(key.to_string(), value.into());
        self
    }

    /// The JSON sent: `event`, `host`, `at`, `text`, then the kind's fields, every string
    /// redacted.
    pub(crate) fn payload(&self, host: &str, secrets: &[Secret]) -> Value {
        let mut out = Map::new();
        out.insert("event".into(), self.kind.as_str().into());
        out.insert("host".into(), host.into());
        out.insert("at".into(), crate::timefmt::format_rfc3339(self.at).into());
        out.insert(
            "text".into(),
            format!("sandguard on {host}: {}", self.text).into(),
        );
        for (k, v) in &self.fields {
            out.insert(k.clone(), v.clone());
        }
        let mut value = Value::Object(out);
        redact(&mut value, secrets);
        value
    }
}

/// Every string in `value` through the logs' redaction.
fn redact(value: &mut Value, secrets: &[Secret]) {
    match value {
        Value::String(s) => *s = crate::providers::redact::redact(s, secrets),
        Value::Array(items) => items.iter_mut().for_each(|v| redact(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| redact(v, secrets)),
        _ => {}
    }
}

/// Every credential `settings` holds: what a payload must never carry.
pub(crate) fn secrets(settings: &Settings) -> Vec<Secret> {
    let clouds = [
        &settings.e2b,
        &settings.daytona,
        &settings.flyio,
        &settings.tenki,
        &settings.modal,
    ];
    let mut all: Vec<Secret> = clouds
        .iter()
        .flat_map(|c| [c.token.clone(), c.secret.clone()])
        .flatten()
        .collect();
    if let Some(fleet) = &settings.fleet {
        all.push(Secret::new(fleet.store.expose()));
        all.extend(fleet.user.clone());
        all.extend(fleet.password.clone());
    }
    if let Some(hook) = settings.notify.as_ref().and_then(|n| n.webhook.as_ref()) {
        all.push(hook.secret().clone());
    }
    all
}

/// The handle events are sent through; see the module docs.
///
/// Each target (the command, the webhook) has its own queue and task: a webhook that hangs
/// delays its own later events, never the command's.
pub(crate) struct Notifier {
    queues: Mutex<Vec<mpsc::Sender<Event>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Notifier {
    /// Starts a delivery task per target of `settings` (on the current tokio runtime); `host`
    /// is each payload's `host`.
    pub(crate) fn start(settings: &NotifySettings, host: String, secrets: Vec<Secret>) -> Notifier {
        let mut queues = Vec::new();
        let mut tasks = Vec::new();
        for target in deliver::Target::all(settings, &host, &secrets) {
            let (tx, rx) = mpsc::channel(QUEUE);
            queues.push(tx);
            tasks.push(tokio::spawn(target.run(rx)));
        }
        Notifier {
            queues: Mutex::new(queues),
            tasks: Mutex::new(tasks),
        }
    }

    /// The notifier `settings` ask for, if any (`[notify]` names a target).
    pub(crate) fn from_settings(settings: &Settings) -> Option<Arc<Notifier>> {
        let notify = settings.notify.as_ref()?;
        Some(Arc::new(Notifier::start(
            notify,
            settings.host.id(),
            secrets(settings),
        )))
    }

    /// Queues `event` for each target without waiting; a full (or closed) queue drops it,
    /// with a warning.
    pub(crate) fn send(&self, event: Event) {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        for tx in queues.iter() {
            if tx.try_send(event.clone()).is_err() {
                tracing::warn!(
                    "notify: event {} dropped: {QUEUE} events are waiting for delivery already",
                    event.kind.as_str(),
                );
            }
        }
    }

    /// Closes the queues and waits, for at most `bound`, for what is queued to be delivered
    /// (or given up); past the bound the rest is dropped, with a warning.
    pub(crate) async fn flush(&self, bound: Duration) {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        let deadline = tokio::time::Instant::now() + bound;
        for mut task in tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
                tracing::warn!(
                    "notify: events still undelivered after {bound:?} were dropped on exit"
                );
            }
        }
    }
}

impl Drop for Notifier {
    /// The delivery tasks do not outlive their handle.
    fn drop(&mut self) {
        if let Ok(tasks) = self.tasks.get_mut() {
            tasks.drain(..).for_each(|t| t.abort());
        }
    }
}

/// A notifier built at its first event (the sidecar's: idle, it has none and no task).
pub(crate) struct Lazy {
    settings: Option<(NotifySettings, crate::config::HostSettings, Vec<Secret>)>,
    built: Option<Notifier>,
}

impl Lazy {
    /// Nothing is built, nor the host's name read, until [`Lazy::send`].
    pub(crate) fn new(settings: &Settings) -> Lazy {
        Lazy {
            settings: settings
                .notify
                .clone()
                .map(|n| (n, settings.host.clone(), secrets(settings))),
            built: None,
        }
    }

    /// Nothing to send to.
    pub(crate) fn none() -> Lazy {
        Lazy {
            settings: None,
            built: None,
        }
    }

    pub(crate) fn is_configured(&self) -> bool {
        self.settings.is_some()
    }

    /// Sends `event`, starting the notifier if this is the first (on the current runtime).
    pub(crate) fn send(&mut self, event: Event) {
        if self.built.is_none() {
            let Some((settings, host, secrets)) = &self.settings else {
                return;
            };
            self.built = Some(Notifier::start(settings, host.id(), secrets.clone()));
        }
        if let Some(n) = &self.built {
            n.send(event);
        }
    }

    /// Flushes what was sent, if anything was, for at most `bound`.
    pub(crate) async fn flush(&mut self, bound: Duration) {
        if let Some(n) = self.built.take() {
            n.flush(bound).await;
        }
    }
}

#[cfg(test)]
mod tests;
