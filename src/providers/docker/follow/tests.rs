//! The follower's knowledge against a simulated daemon, in random histories: whatever order
//! events, lookups and broken streams come in, an id the follower says exists is a container
//! that exists, or one whose `destroy` event is still on its way (the one window the module
//! docs accept), and nothing is known after the stream broke.

use std::collections::{BTreeSet, VecDeque};

use super::*;
use crate::model::Rng;
use crate::providers::Kind;

const SESSION: &str = "s1";

#[derive(Debug, Clone)]
enum Event {
    Create(String),
    Destroy(String),
}

/// The daemon as the test sees it.
#[derive(Default)]
struct Daemon {
    exists: BTreeSet<String>,
    /// Events not yet delivered on the stream, in order.
    queue: VecDeque<Event>,
    /// Every event, in order, for a resubscription's replay.
    log: Vec<Event>,
    /// The stream is down: events go only to the log.
    down: bool,
    made: usize,
}

impl Daemon {
    fn emit(&mut self, event: Event) {
        self.log.push(event.clone());
        if !self.down {
            self.queue.push_back(event);
        }
    }

    fn in_flight_destroy(&self, id: &str) -> bool {
        self.queue
            .iter()
            .any(|e| matches!(e, Event::Destroy(d) if d == id))
    }
}

fn sandbox(id: &str) -> Sandbox {
    let mut s = Sandbox::claimed("docker", Kind::Instance, id);
    s.status = "running".into();
    s.labels
        .insert(labels::SESSION.to_string(), SESSION.to_string());
    s
}

fn id(n: usize) -> String {
    format!("{n:064x}")
}

#[test]
fn what_the_follower_says_exists_exists_in_every_history() {
    for seed in 0..2_000u64 {
        let mut rng = Rng::new(seed);
        let followed = Followed::default();
        followed.start(SESSION);
        let mut daemon = Daemon::default();
        // Lookups asked, not answered yet: the ids and what the daemon had of them then.
        let mut lookups: Vec<(Vec<String>, Vec<Sandbox>)> = Vec::new();
        let mut history = Vec::new();
        for _ in 0..60 {
            let op = rng.below(8);
            history.push(op);
            match op {
                0 | 1 => {
                    daemon.made += 1;
                    let new = id(daemon.made);
                    daemon.exists.insert(new.clone());
                    daemon.emit(Event::Create(new));
                }
                2 => {
                    let ids: Vec<String> = daemon.exists.iter().cloned().collect();
                    if !ids.is_empty() {
                        let gone = ids[rng.below(ids.len())].clone();
                        daemon.exists.remove(&gone);
                        daemon.emit(Event::Destroy(gone));
                    }
                }
                3 | 4 => match daemon.queue.pop_front() {
                    Some(Event::Create(id)) => followed.create(&id),
                    Some(Event::Destroy(id)) => followed.destroy(&id),
                    None => {}
                },
                5 => {
                    let asked = followed.pending();
                    let found = asked
                        .iter()
                        .filter(|id| daemon.exists.contains(*id))
                        .map(|id| sandbox(id))
                        .collect();
                    lookups.push((asked, found));
                }
                6 => {
                    if !lookups.is_empty() {
                        let (asked, found) = lookups.remove(rng.below(lookups.len()));
                        followed.looked_up(&asked, found, rng.chance(80));
                    }
                }
                _ => {
                    if daemon.down {
                        // Subscribed again, replaying the log from some point on.
                        daemon.down = false;
                        let from = rng.below(daemon.log.len() + 1);
                        daemon.queue = daemon.log[from..].iter().cloned().collect();
                    } else if rng.chance(30) {
                        daemon.down = true;
                        daemon.queue.clear();
                        followed.broke();
                        assert!(
                            (1..=daemon.made).all(|n| !followed.exists(&id(n))),
                            "seed {seed}: knowledge outlived its stream"
                        );
                    }
                }
            }
            for n in 1..=daemon.made {
                let id = id(n);
                if followed.exists(&id) {
                    assert!(
                        daemon.exists.contains(&id) || daemon.in_flight_destroy(&id),
                        "seed {seed}: {} said to exist after its destroy was delivered ({history:?})",
                        &id[..12]
                    );
                }
            }
            let known = followed
                .known(SESSION)
                .map(|f| f.sandboxes)
                .unwrap_or_default();
            for s in &known {
                assert!(followed.exists(&s.id), "seed {seed}: known but not present");
            }
            // The daemon numbers containers as it creates them and the stream delivers in
            // order, so known, oldest created first, is in ascending id order.
            assert!(
                known.windows(2).all(|w| w[0].id < w[1].id),
                "seed {seed}: known out of creation order ({history:?})"
            );
        }
    }
}

#[test]
fn known_comes_oldest_created_first_whatever_order_lookups_answer_in() {
    let followed = Followed::default();
    followed.start(SESSION);
    let created = [9, 2, 31, 5, 17, 4, 23, 11];
    for n in created {
        followed.create(&id(n));
    }
    for n in [17, 2, 11, 9, 4, 31, 23, 5] {
        followed.looked_up(&[id(n)], vec![sandbox(&id(n))], true);
    }
    let known: Vec<String> = followed
        .known(SESSION)
        .unwrap()
        .sandboxes
        .into_iter()
        .map(|s| s.id)
        .collect();
    let expected: Vec<String> = created.iter().map(|n| id(*n)).collect();
    assert_eq!(known, expected);
}

#[test]
fn only_full_ids_of_the_followed_session_count() {
    let followed = Followed::default();
    let known = |f: &Followed| f.known(SESSION).map(|f| f.sandboxes);
    assert_eq!(known(&followed), None, "not followed yet");
    followed.start(SESSION);
    assert_eq!(followed.known("other"), None);
    followed.create("0123456789ab");
    assert!(!followed.exists("0123456789ab"), "a prefix proves nothing");
    followed.create(&id(7));
    assert!(followed.exists(&id(7)));
    assert_eq!(known(&followed), Some(vec![]), "listed once looked up");
    followed.looked_up(&[id(7)], vec![sandbox(&id(7))], true);
    assert_eq!(known(&followed), Some(vec![sandbox(&id(7))]));
    followed.destroy(&id(7));
    assert_eq!(known(&followed), Some(vec![]));
    assert!(!followed.exists(&id(7)));
}

#[test]
fn following_is_whole_only_from_before_the_session_began_unbroken_and_looked_up() {
    let whole = |f: &Followed| f.known(SESSION).is_some_and(|f| f.whole);
    let began_ms = 1_800_000_000_500;
    // Replaying from the second before the session's: whole.
    let followed = Followed::default();
    followed.start(SESSION);
    followed.subscribing(1_799_999_999, Some(began_ms));
    assert!(whole(&followed));
    // A create whose lookup has not answered: not yet.
    followed.create(&id(1));
    assert!(!whole(&followed), "a lookup still due");
    followed.looked_up(&[id(1)], vec![sandbox(&id(1))], true);
    assert!(whole(&followed));
    // A broken stream: never again for this session, even once it is subscribed anew.
    followed.broke();
    assert!(!whole(&followed));
    followed.create(&id(2));
    followed.looked_up(&[id(2)], vec![sandbox(&id(2))], true);
    assert!(!whole(&followed));

    // Replaying from the session's own second, or later, or not knowing when it began: not
    // whole (a resumed session's earlier containers are on no stream).
    for (since, began) in [
        (1_800_000_000, Some(began_ms)),
        (1_800_000_003, Some(began_ms)),
        (1_799_999_000, None),
    ] {
        let followed = Followed::default();
        followed.start(SESSION);
        followed.subscribing(since, began);
        assert!(!whole(&followed), "since {since}, began {began:?}");
    }
}
