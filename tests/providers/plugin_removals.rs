//! Plugin providers on the remove side, through the real binary.
//!
//! - `retry: true` is retried and `retry_after_secs` waited out; `retry: false` is final.
//! - A plugin that crashes in `remove` is retried until the deadline, the session is left
//!   `pending`, and a later sweep (the plugin healthy again) finishes it.
//! - A plugin that cannot be started is an entry under `errors` (listing) and a final
//!   `failed` (removal), never retried.
//! - A reply over 16 MiB is refused, even when it says `removed`.

use std::time::{Duration, Instant};

use sandguard::labels::SESSION;

use crate::support::plugin::{cmd, config, pairs, result_of, session_row, Plugin};
use crate::support::*;

#[test]
fn retry_and_retry_after_secs_are_honoured_and_retry_false_is_final() {
    let s = Scratch::new("p14-retry");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "10s", &[&acme]);
    for (id, mode) in [
        ("later", "once-after2"),
        ("again", "once-busy"),
        ("never", "once-fatal"),
    ] {
        acme.insert(id, &[(SESSION, "s14")]);
        acme.set_mode(id, Some(mode));
    }
    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "s14", "--json"]));
    let v = json(&out.stdout);
    assert_eq!(result_of(&v, "later")["outcome"], "removed", "{v}");
    assert_eq!(result_of(&v, "again")["outcome"], "removed", "{v}");
    // `retry: false` was final: not asked again, although the plugin would now succeed.
    assert_eq!(result_of(&v, "never")["outcome"], "failed", "{v}");
    assert_eq!(acme.calls("remove", "never").len(), 1);
    assert!(acme.exists("never"));
    assert_eq!(out.code, 1, "the final failure sets the exit code: {v}");

    let later = acme.calls("remove", "later");
    assert_eq!(later.len(), 2, "{later:?}");
    let waited = Duration::from_nanos((later[1] - later[0]) as u64);
    assert!(
        waited >= Duration::from_secs(2),
        "retry_after_secs 2 was not waited out: the second call came after {waited:?}"
    );
    assert_eq!(
        acme.calls("remove", "again").len(),
        2,
        "`retry: true` is retried"
    );
}

#[test]
fn a_crash_in_remove_leaves_the_session_pending_and_a_later_sweep_finishes_it() {
    let s = Scratch::new("p14-crash");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "2s", &[&acme]);
    let mut owner = Owner::start(cmd(&s, &config), &s);
    let labels = owner.label_pairs();
    acme.insert("c1", &pairs(&labels));
    acme.insert("c2", &pairs(&labels));
    acme.set_mode("c1", Some("crash"));
    owner.kill();
    eventually(Duration::from_secs(20), "the session is pending", || {
        session_row(&mut cmd(&s, &config), &owner.session)["state"] == "pending"
    });
    assert!(
        acme.exists("c1") && !acme.exists("c2"),
        "only the crash is left"
    );
    assert!(
        acme.calls("remove", "c1").len() > 1,
        "a crash is transient: retried until the deadline"
    );
    let row = session_row(&mut cmd(&s, &config), &owner.session);
    assert_eq!(row["pending"][0]["id"], "c1", "{row}");

    // The plugin is fixed; the next sweep finishes the pending reclaim.
    acme.set_mode("c1", None);
    let out = run(cmd(&s, &config).args(["sweep", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    assert_eq!(result_of(&v, "c1")["outcome"], "removed", "{v}");
    assert!(!acme.exists("c1"));
    let row = session_row(&mut cmd(&s, &config), &owner.session);
    assert_eq!(row["state"], "reclaimed", "{row}");
}

#[test]
fn a_plugin_that_cannot_start_is_an_error_entry_and_a_final_failure() {
    let s = Scratch::new("p14-nostart");
    let acme = Plugin::new(&s, "acme");
    let lost = Plugin::new(&s, "lost");
    // `lost` points at a program that does not exist.
    let config = config(&s, "10s", &[&acme, &lost]);
    std::fs::remove_file(&lost.script).unwrap();
    acme.insert("a1", &[(SESSION, "s14")]);

    for args in [
        &["ps", "--json"][..],
        &["stop", "--all", "--json"],
        &["sweep", "--json"],
    ] {
        let out = run(cmd(&s, &config).args(args));
        assert_eq!(out.code, 1, "{args:?}: {}{}", out.stdout, out.stderr);
        let v = json(&out.stdout);
        let errors = v["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1, "{args:?}: {v}");
        assert_eq!(errors[0]["provider"], "lost", "{v}");
        assert!(
            errors[0]["error"]
                .as_str()
                .unwrap()
                .contains("cannot run plugin"),
            "{v}"
        );
    }
    assert!(
        !acme.exists("a1"),
        "`stop --all` still removed what acme listed"
    );

    // A plugin that lists, then cannot be started for `remove`: final, not retried until the
    // 10 s deadline.
    acme.insert("a2", &[(SESSION, "s14")]);
    acme.set_list(Some("unstartable"));
    let started = Instant::now();
    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "s14", "--json"]));
    let took = started.elapsed();
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let a2 = result_of(&v, "a2");
    assert_eq!(a2["outcome"], "failed", "{v}");
    assert!(
        a2["error"].as_str().unwrap().contains("cannot run plugin"),
        "{v}"
    );
    assert!(took < Duration::from_secs(8), "retried for {took:?}");
}

#[test]
fn a_plugin_reply_over_16_mib_is_refused() {
    let s = Scratch::new("p14-big");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "10s", &[&acme]);
    acme.insert("b1", &[(SESSION, "s14")]);
    acme.set_mode("b1", Some("big"));
    let out = run(cmd(&s, &config).args(["stop", "--all", "--session", "s14", "--json"]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v = json(&out.stdout);
    let b1 = result_of(&v, "b1");
    assert_eq!(b1["outcome"], "failed", "a protocol error is final: {v}");
    assert!(b1["error"].as_str().unwrap().contains("too large"), "{v}");
    assert_eq!(acme.calls("remove", "b1").len(), 1);

    acme.set_list(Some("big"));
    let out = run(cmd(&s, &config).args(["ps", "--json"]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"][0]["provider"], "acme", "{v}");
    assert!(
        v["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{v}"
    );
}
