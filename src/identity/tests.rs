//! Unit tests of `identity`.

use super::*;

#[test]
fn the_label_round_trips_and_is_label_safe() {
    let id = Identity {
        machine: "0123456789abcdef".into(),
        boot: "fedcba9876543210".into(),
        pid: 4194304,
        start_time: 18446744073709551615,
        pidns: Some(4026531836),
    };
    let label = id.to_label();
    assert!(label
        .bytes()
        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'-'));
    assert_eq!(Identity::parse_label(&label), Some(id.clone()));
    let old = Identity::parse_label("0123456789abcdef-fedcba9876543210-1-2").unwrap();
    assert_eq!((old.pid, old.start_time, old.pidns), (1, 2, None));
    for bad in [
        "",
        "x",
        "0123456789abcdef-fedcba9876543210-1",
        "0123456789abcdef-fedcba9876543210-1-2-3-4",
        "0123456789abcdef-fedcba9876543210-1-2-x",
        "0123-fedcba9876543210-1-2",
    ] {
        assert_eq!(Identity::parse_label(bad), None, "{bad}");
    }
}

fn judge(boots: &[&str]) -> Judge {
    Judge {
        host: Host {
            machine: "0123456789abcdef".into(),
            boot: "1111111111111111".into(),
            pidns: Some(99),
        },
        known_boots: boots.iter().map(std::string::ToString::to_string).collect(),
    }
}

fn owner() -> Identity {
    Identity {
        machine: "0123456789abcdef".into(),
        boot: "1111111111111111".into(),
        pid: 7,
        start_time: 100,
        pidns: Some(99),
    }
}

const RUNNING: ProcStat = ProcStat {
    exited: false,
    start_time: 100,
};

#[test]
fn alive_needs_the_same_machine_boot_namespace_pid_and_start_time() {
    let j = judge(&[]);
    let gone = |_| Probe::NoSuchProcess;
    let hidden = |_| Probe::Hidden;
    let at = |stat: ProcStat| move |_| Some(stat);
    assert_eq!(
        j.liveness_with(&owner(), at(RUNNING), gone),
        Liveness::Alive
    );
    let reused = ProcStat {
        start_time: 101,
        ..RUNNING
    };
    assert_eq!(j.liveness_with(&owner(), at(reused), gone), Liveness::Dead);
    let zombie = ProcStat {
        exited: true,
        ..RUNNING
    };
    assert_eq!(j.liveness_with(&owner(), at(zombie), gone), Liveness::Dead);
    assert_eq!(j.liveness_with(&owner(), |_| None, gone), Liveness::Dead);
    // hidepid=2: the pid exists but /proc does not show it.
    assert_eq!(
        j.liveness_with(&owner(), |_| None, hidden),
        Liveness::Unknown
    );
}

#[test]
fn another_namespace_machine_or_unrecorded_boot_is_unknown_never_dead() {
    let gone = |_| Probe::NoSuchProcess;
    let nothing = |_| None;
    let j = judge(&["2222222222222222"]);
    let other_ns = Identity {
        pidns: Some(100),
        ..owner()
    };
    assert_eq!(j.liveness_with(&other_ns, nothing, gone), Liveness::Unknown);
    let unrecorded = Identity {
        pidns: None,
        ..owner()
    };
    assert_eq!(
        j.liveness_with(&unrecorded, nothing, gone),
        Liveness::Unknown
    );
    let other_machine = Identity {
        machine: "aaaaaaaaaaaaaaaa".into(),
        ..owner()
    };
    assert_eq!(
        j.liveness_with(&other_machine, nothing, gone),
        Liveness::Unknown
    );
    // A boot this machine ran and ended: dead. One it never recorded (a clone): unknown.
    let known = Identity {
        boot: "2222222222222222".into(),
        ..owner()
    };
    assert_eq!(j.liveness_with(&known, nothing, gone), Liveness::Dead);
    let cloned = Identity {
        boot: "3333333333333333".into(),
        ..owner()
    };
    assert_eq!(j.liveness_with(&cloned, nothing, gone), Liveness::Unknown);
}

#[test]
fn this_process_is_alive() {
    let me = Identity::current().unwrap();
    assert!(me.pidns.is_some());
    assert_eq!(me.liveness(), Liveness::Alive);
    assert_eq!(Identity::parse_label(&me.to_label()), Some(me));
}

#[test]
fn a_live_owners_user_is_read_and_a_dead_or_unknown_ones_is_not() {
    let j = Judge::new(BTreeSet::new());
    let me = Identity::current().unwrap();
    assert_eq!(j.user(&me), Some(crate::unix::geteuid()));
    // The same pid with another start time: another process, which tells nothing of this one.
    let reused = Identity {
        start_time: me.start_time + 1,
        ..me.clone()
    };
    assert_eq!(j.user(&reused), None);
    let elsewhere = Identity {
        machine: "1111111111111111".into(),
        ..me
    };
    assert_eq!(j.user(&elsewhere), None);
}
