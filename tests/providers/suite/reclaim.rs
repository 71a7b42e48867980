//! The shared tests of reclaim over time: the owner's death, throttling, server errors,
//! dropped connections, latency and an outage, and TTL renewal while the owner lives.

use std::time::Duration;

use super::ok;
use crate::providers::{kill_alone, pairs, session_id, Cloud, Config, Rig};
use crate::support::emu::{Faults, Hit};
use crate::support::eventually;
use sandguard::labels::DETACHED;

pub fn the_owners_death_reclaims_its_sandboxes_only<C: Cloud>() {
    let rig = Rig::<C>::new(Config::deadline(3));
    let (mut alone, theirs) = rig.owner_with(3);
    let (mut group, group_s) = rig.owner_with(3);
    let other = rig.labelled(&session_id());
    let stranger = rig.stranger();
    assert!(rig.all_exist(&theirs) && rig.all_exist(&group_s));
    // One wrapper dies alone, its program living on; the other with its whole group.
    kill_alone(&mut alone);
    group.kill();
    eventually(
        Duration::from_secs(5),
        "the dead owners' sandboxes are removed",
        || rig.all_gone(&theirs) && rig.all_gone(&group_s),
    );
    assert!(
        rig.cloud.exists(&other),
        "another session's sandbox survives"
    );
    assert!(
        rig.cloud.exists(&stranger),
        "an unlabelled sandbox survives"
    );
}

/// Stops a session of `n` sandboxes under `faults`: every one is removed, and nothing else.
fn stop_under<C: Cloud>(config: Config, n: usize, faults: Faults) -> Rig<C> {
    let rig = Rig::<C>::new(config);
    let session = session_id();
    let mine = rig.many(&session, n);
    let other = rig.labelled(&session_id());
    let stranger = rig.stranger();
    rig.cloud.set_faults(faults);
    let out = rig.stop_session(&session);
    rig.cloud.set_faults(Faults::default());
    ok(&out);
    assert!(rig.all_gone(&mine), "{}", out.stdout);
    assert!(rig.cloud.exists(&other) && rig.cloud.exists(&stranger));
    rig
}

fn statuses(hits: &[Hit], status: u16) -> usize {
    hits.iter().filter(|h| h.status == status).count()
}

pub fn a_429_storm_is_waited_out_with_no_request_before_its_retry_after<C: Cloud>() {
    // At the default concurrency: requests merely in flight when a 429 was sent do not count
    // as early (see `emu::IN_FLIGHT`).
    let faults = Faults {
        throttle_rate: 0.5,
        retry_after_secs: 1,
        ..Faults::default()
    };
    // Ten removal calls face the storm, whatever a removal takes. Every 429 here shuts the
    // provider's gate for a second, so the run is about one second per throttled call: more
    // calls would only test the deadline. Volume against a real rate limit is measured by
    // `cargo bench --bench e2b_reclaim` (a token bucket, not a coin toss).
    let n = 10 / C::CALLS_PER_REMOVAL;
    let rig = stop_under::<C>(Config::deadline(30), n, faults);
    let hits = rig.cloud.hits();
    assert!(statuses(&hits, 429) > 0, "the storm never hit");
    let t0 = hits[0].at;
    let timeline: Vec<String> = hits
        .iter()
        .map(|h| {
            let ms = h.at.duration_since(t0).as_millis();
            let early = if h.early { "  EARLY" } else { "" };
            format!("{ms:>6} ms {} {}{early}", h.status, h.path)
        })
        .collect();
    assert!(
        hits.iter().all(|h| !h.early),
        "requests sent before their Retry-After:\n{}",
        timeline.join("\n")
    );
}

pub fn server_errors_are_retried_until_everything_is_removed<C: Cloud>() {
    let faults = Faults {
        error_rate: 0.3,
        ..Faults::default()
    };
    let rig = stop_under::<C>(Config::deadline(15), 40, faults);
    assert!(statuses(&rig.cloud.hits(), 503) > 0, "no 5xx was injected");
}

pub fn dropped_connections_are_retried_until_everything_is_removed<C: Cloud>() {
    C::DROPPED_CONNECTIONS.require::<C>("dropping connections");
    let faults = Faults {
        drop_rate: 0.25,
        ..Faults::default()
    };
    let rig = stop_under::<C>(Config::deadline(15), 10, faults);
    assert!(
        statuses(&rig.cloud.hits(), 0) > 0,
        "no connection was dropped"
    );
}

pub fn a_slow_provider_is_waited_for_not_given_up_on<C: Cloud>() {
    let faults = Faults {
        latency: Duration::from_millis(150),
        ..Faults::default()
    };
    stop_under::<C>(Config::deadline(4), 20, faults);
}

pub fn an_outage_past_the_deadline_leaves_sessions_pending_until_stop_or_a_sweep<C: Cloud>() {
    let rig = Rig::<C>::new(Config::deadline(1));
    let (mut first, firsts) = rig.owner_with(3);
    let (mut second, seconds) = rig.owner_with(3);
    let survivors = vec![rig.labelled(&session_id()), rig.stranger()];
    rig.cloud.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    // One wrapper dies alone, the other with its whole group.
    kill_alone(&mut first);
    second.kill();
    for owner in [&first, &second] {
        eventually(Duration::from_secs(15), "the session is pending", || {
            rig.session_state(&owner.session).as_deref() == Some("pending")
        });
    }
    assert!(rig.all_exist(&firsts) && rig.all_exist(&seconds));
    rig.cloud.set_faults(Faults::default());

    // A stop finishes one session and touches nothing else.
    ok(&rig.stop_session(&first.session));
    assert!(rig.all_gone(&firsts));
    assert!(rig.all_exist(&seconds) && rig.all_exist(&survivors));

    // The next sweep finishes the other pending reclaim and closes its session.
    let out = rig.run(&["sweep"]);
    ok(&out);
    let said = format!("reclaim session {}: a reclaim is pending", second.session);
    assert!(out.stdout.contains(&said), "{}", out.stdout);
    assert!(rig.all_gone(&seconds));
    assert!(rig.all_exist(&survivors));
    assert_eq!(
        rig.session_state(&second.session).as_deref(),
        Some("reclaimed")
    );
}

pub fn while_the_owner_lives_its_sandboxes_ttls_are_renewed_past_the_grace<C: Cloud>() {
    C::SERVER_TTL.require::<C>("renewing server-side TTLs");
    let grace = Duration::from_secs(2 * 3600);
    let rig = Rig::<C>::new(Config {
        deadline: Duration::from_secs(3),
        renewal: Some((grace, Duration::from_secs(1))),
        rate: None,
    });
    let (owner, renewed) = rig.owner_with(1);
    let mut labels = owner.label_pairs();
    labels.push((DETACHED.to_string(), "true".to_string()));
    let detached = rig.cloud.insert(&pairs(&labels));
    let kept = rig.cloud.expires_at(&detached).expect("a TTL to read");
    let now = sandguard::testing::timefmt::now_unix();
    let past_grace = now + grace.as_secs() as i64;
    // Renewed to grace + 2 × renew_every from now, far beyond what the emulator gave it.
    eventually(
        Duration::from_secs(10),
        "the owner's sandbox has its TTL renewed past the grace",
        || {
            rig.cloud
                .expires_at(&renewed[0])
                .is_some_and(|t| t >= past_grace)
        },
    );
    assert_eq!(
        rig.cloud.expires_at(&detached),
        Some(kept),
        "a detached sandbox keeps its own TTL"
    );
    assert!(
        kept < past_grace,
        "the emulator's own TTL is short of the grace"
    );
    drop(owner);
}
