//! Following one session's containers as Docker creates and destroys them, so that a sidecar
//! knows them before its owner dies (issue 25: at death the first removal goes out without a
//! listing first, and without the look-alike inspect).
//!
//! A sidecar subscribes to Docker's event stream (`GET /events`), filtered to container
//! `create` and `destroy` events carrying its session's label; the subscription costs no
//! wake-up while nothing happens. For each created container it lists that one container
//! (`filters={"id":[…]}`, the ordinary listing code, so the image check of `image` runs now,
//! while the owner lives, and its cache is warm at death), and holds the result until the
//! `destroy` event. What it holds is used two ways:
//!
//! - **Known first** ([`Followed::known`]): the sidecar's reclaim judges and removes these at
//!   once. A listing stays the source of completeness: a container the follower missed
//!   (created before the subscription, while the stream was down, or whose lookup had not
//!   answered yet) is found there and removed as before. Docker's labels cannot change after
//!   create, so what the lookup listed is what a listing at death would say.
//! - **Whole** ([`Following::whole`], issue 44): following that has not broken since its first
//!   subscription, which replayed from a second before the session began, and that has no
//!   lookup still due, has seen every container of the session but those whose `create` is
//!   still on its way (made in the last instant before death). Then the reclaim skips the
//!   listing beside its first removals and leaves completeness to its settle pass's listing,
//!   which finds those too: when fifty sidecars die at once, 150 listings fewer reach the
//!   daemon while it removes. One residue is named: the daemon replays `since` from the
//!   events it keeps in memory (the last 256, all kinds, all containers), so on a daemon
//!   that made more than that in the five seconds before the subscription, a create of the
//!   session's first moments can be missing from the replay. Nothing is left by it: the
//!   settle pass removes that container, two seconds later than the listing would have.
//! - **Gone by itself** (issue 55): every `destroy` of a container of the session is told to
//!   the sidecar ([`crate::providers::Gone`], timed by the event), whoever removed it: the
//!   daemon itself (`docker run --rm`, the commonest agent pattern) or a client past the
//!   proxy. The sidecar releases what it held of it, so its slot is freed and its time stops
//!   where the daemon said it went; a removal the provider confirmed, never one a request
//!   merely asked for. A destroy on the stream is told whether or not its `create` was, since
//!   the stream is filtered by the session's label and the daemon sends it only once the
//!   container is gone; one replayed after a resubscription is told again (a release of what
//!   is no longer held does nothing).
//! - **No inspect** ([`Followed::exists`]): a container is removed by its full id, which
//!   Docker matches before any name, so a full id is only ambiguous once its container is
//!   gone (a stranger may then be *named* like it). An id whose `create` event arrived on this
//!   stream, and whose `destroy` event has not, names a container that exists now: its removal
//!   skips `claim::resolve`'s inspect. Anything else (a claim, a prefix, a sweep's listing, an
//!   id seen before the stream broke) is inspected as before.
//!
//! Decisions:
//! - Events are asked for `since` a few seconds before the subscription, so a container
//!   created between the sidecar's start and the subscription is still seen; the daemon
//!   replays what it kept. A clock skew with a remote daemon can only lose creates (found by
//!   the listing at death) or replay a few more (harmless: each is looked up).
//! - The stream is ordered, and a container's `destroy` always follows its `create`, so an id
//!   whose `create` came on this stream sees its `destroy` on it too, with one exception in
//!   the daemon: dockerd gives each subscriber a buffer of 1 024 events and drops an event
//!   for a subscriber whose buffer is still full after 100 ms (`daemon/events`, a publisher
//!   with a send timeout, so that one slow client cannot hold the others). Only this
//!   session's creates and destroys enter the buffer, so a drop needs the session to churn
//!   over a thousand containers while the sidecar reads nothing (stopped, or starved for
//!   CPU). A destroy dropped that way leaves an id held whose container is gone; its removal
//!   at death by that full id then finds nothing (`Gone`), unless a container has since been
//!   *named* with exactly that id, which only someone who read the id and chose it as a name
//!   can make. That residue is accepted and named here (2026-12-03, issue 25): closing it
//!   would mean the inspect again, on the path P1 measures. When the stream ends or fails
//!   everything held is forgotten at once and the subscription is made anew after a
//!   backoff: held knowledge never outlives the stream that proved it.
//! - A lookup that answers after the container's `destroy` fills nothing; one that failed
//!   (an image that could not be checked) leaves the container to the listing at death.
//! - **Podman says `remove` where Docker says `destroy`.** Podman's Docker-compatible
//!   `/events` (4.3) sends a container's removal as `remove` and never `destroy`, and its
//!   `event` filter matches the name it sends. Both are subscribed to and both end the
//!   following (Docker has no container event named `remove`). Without it, on Podman every
//!   followed id stayed held after its container went, and since Podman resolves a reference
//!   by full id and then by *name*, the removal at death by that id reached a stranger named
//!   with it (`trust_docker::follow::a_stranger_named_like_a_followed_container_that_went_is_kept`,
//!   run on Podman by `tests/run.sh` step 1b, failed so before 2026-12-05).
//! - Only sidecars follow (`watch::service`); `ps`, `stop` and sweeps list and inspect as
//!   before.
//! - [`Followed::known`] gives the containers in the order their `create` events came, the
//!   oldest first, which is the order `docker rm -f $(docker ps -aq --filter …)`'s arguments
//!   would be in if the user wrote them by creation. Removing in a hash map's order instead
//!   costs the daemon measurably more: 200 forced removals, 50 in flight, took a median 6.94 s
//!   in creation order and 7.68 s shuffled over 7 interleaved rounds (issue 25's P2, which
//!   sets the sidecar against `docker rm -f`). The order changes nothing else: every target
//!   is still removed, inside the same window.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use bollard::query_parameters::EventsOptions;
use futures_util::StreamExt;
use tokio::sync::Notify;

use super::error::short;
use super::DockerProvider;
use crate::labels::{self, Selector};
use crate::providers::{Following, Gone, GoneTx, Kind, Provider, Sandbox};

/// How far back the first subscription asks the daemon to replay.
const SINCE: Duration = Duration::from_secs(5);
/// The backoff between subscriptions, doubling up to [`RESUBSCRIBE_MAX`].
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(200);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(30);
/// A full Docker id.
const FULL_ID: usize = 64;

/// What the follower holds (see the module docs).
#[derive(Default)]
pub(super) struct Followed {
    state: Mutex<State>,
    /// Wakes the lookup loop when a `create` arrived.
    created: Notify,
}

#[derive(Default)]
struct State {
    /// The session followed, once following started.
    session: Option<String>,
    /// Containers whose `create` event arrived on the current stream and whose `destroy`
    /// has not, by full id.
    present: HashMap<String, Held>,
    /// How many `create` events were taken, to number the next one.
    creates: u64,
    /// The stream has not broken since it was first asked for, and that first subscription
    /// replayed from before the session began: every container of the session made so far
    /// has its `create` on it (see the module docs for what may still be on its way).
    whole: bool,
}

/// One container held.
struct Held {
    /// The order its `create` event came in (see [`Followed::known`]).
    order: u64,
    /// `None` until its lookup answered.
    sandbox: Option<Sandbox>,
}

impl Followed {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the container with the full id `id` exists now, as this stream proves it (see
    /// the module docs): its removal needs no inspect.
    pub(super) fn exists(&self, id: &str) -> bool {
        id.len() == FULL_ID && self.state().present.contains_key(id)
    }

    /// The containers of `session` known to exist, as listed when they were created, oldest
    /// first (see the module docs), and whether that is all of them but what is on its way
    /// ([`State::whole`], and no lookup still due); `None` when this session is not followed.
    pub(super) fn known(&self, session: &str) -> Option<Following> {
        let state = self.state();
        if state.session.as_deref() != Some(session) {
            return None;
        }
        let mut held: Vec<&Held> = state.present.values().collect();
        held.sort_by_key(|h| h.order);
        let whole = state.whole && held.iter().all(|h| h.sandbox.is_some());
        Some(Following {
            sandboxes: held.into_iter().filter_map(|h| h.sandbox.clone()).collect(),
            whole,
        })
    }

    fn start(&self, session: &str) {
        self.state().session = Some(session.to_string());
    }

    /// A `create` event.
    fn create(&self, id: &str) {
        if id.len() == FULL_ID {
            let mut state = self.state();
            let order = state.creates;
            state.creates += 1;
            state.present.entry(id.to_string()).or_insert(Held {
                order,
                sandbox: None,
            });
            drop(state);
            self.created.notify_one();
        }
    }

    /// A `destroy` event.
    fn destroy(&self, id: &str) {
        if self.state().present.remove(id).is_some() {
            tracing::debug!(
                "docker container {} destroyed: no longer followed",
                short(id)
            );
        }
    }

    /// The first subscription is asked for, replaying from `since` (Unix seconds): it covers
    /// the whole session when that is before the second the session began in.
    fn subscribing(&self, since: u64, began_ms: Option<u64>) {
        self.state().whole = began_ms.is_some_and(|began| since < began / 1000);
    }

    /// The stream ended or failed: nothing it proved is known any more, and what it missed
    /// is not known to be nothing, for as long as this session is followed.
    fn broke(&self) {
        let mut state = self.state();
        state.present.clear();
        state.whole = false;
    }

    /// The ids whose lookup is due.
    fn pending(&self) -> Vec<String> {
        let state = self.state();
        let mut ids: Vec<String> = state
            .present
            .iter()
            .filter(|(_, h)| h.sandbox.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// What the lookup of `asked` found. A container still held is filled in; one not found
    /// while the listing answered in full is forgotten (gone, or not what the event said);
    /// with `complete` false the rest stay pending, for the listing at death.
    fn looked_up(&self, asked: &[String], found: Vec<Sandbox>, complete: bool) {
        let mut state = self.state();
        let found_ids: HashSet<String> = found.iter().map(|s| s.id.clone()).collect();
        for s in found {
            if let Some(Held {
                sandbox: slot @ None,
                ..
            }) = state.present.get_mut(&s.id)
            {
                tracing::debug!("following docker container {}", short(&s.id));
                *slot = Some(s);
            }
        }
        if complete {
            for id in asked.iter().filter(|id| !found_ids.contains(*id)) {
                if matches!(state.present.get(id), Some(Held { sandbox: None, .. })) {
                    state.present.remove(id);
                }
            }
        }
    }
}

impl DockerProvider {
    /// Follows `session`'s containers until the task is dropped, telling `gone` each one
    /// destroyed (see the module docs).
    pub(super) async fn follow_session(&self, session: &str, began_ms: Option<u64>, gone: GoneTx) {
        self.followed.start(session);
        tokio::join!(
            self.subscribe(session, began_ms, &gone),
            self.look_up(session)
        );
    }

    /// The event stream, subscribed again whenever it ends.
    async fn subscribe(&self, session: &str, began_ms: Option<u64>, gone: &GoneTx) {
        let mut since = unix_now().saturating_sub(SINCE.as_secs());
        self.followed.subscribing(since, began_ms);
        let mut pause = RESUBSCRIBE_MIN;
        loop {
            match self.client().await {
                Ok(docker) => {
                    let options = EventsOptions {
                        since: Some(since.to_string()),
                        until: None,
                        filters: Some(HashMap::from([
                            ("type".to_string(), vec!["container".to_string()]),
                            (
                                "event".to_string(),
                                ["create", "destroy", "remove"].map(String::from).to_vec(),
                            ),
                            (
                                "label".to_string(),
                                vec![format!("{}={session}", labels::SESSION)],
                            ),
                        ])),
                    };
                    let mut events = docker.events(Some(options));
                    while let Some(event) = events.next().await {
                        let event = match event {
                            Ok(event) => event,
                            Err(e) => {
                                tracing::debug!("docker event stream failed: {e}");
                                break;
                            }
                        };
                        pause = RESUBSCRIBE_MIN;
                        let id = event.actor.and_then(|a| a.id).unwrap_or_default();
                        match event.action.as_deref() {
                            Some("create") => self.followed.create(&id),
                            Some("destroy" | "remove") => {
                                self.followed.destroy(&id);
                                let at_ms = event
                                    .time_nano
                                    .and_then(|n| u64::try_from(n / 1_000_000).ok())
                                    .unwrap_or_else(crate::ledger::now_ms);
                                let _ = gone.send(Gone {
                                    sandbox: Sandbox::claimed(self.name(), Kind::Instance, &id),
                                    at_ms,
                                });
                            }
                            _ => {}
                        }
                    }
                }
                Err(e) => tracing::debug!("docker events not followed yet: {e}"),
            }
            self.followed.broke();
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RESUBSCRIBE_MAX);
            // Events while the stream was down are lost to it: the listing at death finds
            // what they created. Replaying from here only repeats what is forgotten anyway.
            since = unix_now().saturating_sub(1);
        }
    }

    /// Lists each created container once, a batch at a time.
    async fn look_up(&self, session: &str) {
        let selector = Selector::session(session);
        loop {
            self.followed.created.notified().await;
            let ids = self.followed.pending();
            if ids.is_empty() {
                continue;
            }
            let Ok(docker) = self.client().await else {
                continue;
            };
            let mut filters = super::list::label_filters(&selector);
            filters.insert("id".to_string(), ids.clone());
            let listing = self.list_containers(docker, filters, &selector).await;
            let found = listing
                .found
                .into_iter()
                .filter(|s| ids.contains(&s.id) && selector.matches(&s.labels))
                .collect();
            self.followed
                .looked_up(&ids, found, listing.errors.is_empty());
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests;
