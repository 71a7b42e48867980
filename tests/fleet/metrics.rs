//! `sandguard sweep --fleet --every D --metrics ADDR`: a fleet sweeper's figures carry its
//! host id, and count the sessions of dead hosts it reclaimed (recorded in no journal of its
//! machine) under `lease_expired`.

use super::*;
use crate::sweep::metrics::{promtool, scrape, value};

#[test]
fn a_fleet_sweepers_metrics_are_labelled_by_its_host_and_count_what_it_reclaimed() {
    let _g = shared();
    let redis = Redis::start();
    let (emu, e2b) = sandguard_e2b();
    let boxes = dead_sessions(&redis, &e2b, 3);
    let b = Host::new("host-b", &redis.url(), &emu.url);
    let sock = b.scratch.path().join("metrics.sock");
    let _service = Background::start(
        b.cmd()
            .args(["sweep", "--fleet", "--every", "1s", "--metrics"])
            .arg(&sock),
    );
    eventually(
        Duration::from_secs(15),
        "the dead hosts' sandboxes are reclaimed",
        || boxes.iter().all(|sb| !e2b.exists(sb)),
    );
    let reclaimed = |body: &str| {
        value(
            body,
            "sandguard_sandboxes_reclaimed_total",
            &[
                r#"host="host-b""#,
                r#"provider="e2b""#,
                r#"cause="lease_expired""#,
            ],
        )
    };
    eventually(
        Duration::from_secs(10),
        "the scrape counts the three sandboxes",
        || reclaimed(&scrape(&sock).2) == Some(3.0),
    );
    let (_, _, body) = scrape(&sock);
    assert_eq!(reclaimed(&body), Some(3.0), "counted once each:\n{body}");
    assert!(
        value(
            &body,
            "sandguard_sweep_last_pass_timestamp_seconds",
            &[r#"host="host-b""#]
        )
        .is_some(),
        "{body}"
    );
    let (ok, said) = promtool(&body);
    assert!(ok, "promtool check metrics: {said}\n{body}");
}
