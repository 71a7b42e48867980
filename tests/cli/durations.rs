//! Times as the tables print them, through the real binary: a session whose three sandboxes
//! lived 1 minute, 11 seconds and 4 seconds (its journal written by hand, so the times are
//! exact) is 1m15s of sandbox time in `sessions`, `sessions show` and `report`, as a user adds
//! the parts up, and each part is written by the same rule (`src/timefmt.rs`).

use crate::support::journal::{start_line, write_journal};
use crate::support::*;

/// A reclaimed session an hour old whose docker, e2b and daytona sandboxes lived 60 s, 11 s
/// and 4 s; its id.
fn session_of_three(s: &Scratch) -> String {
    let session = format!("dur{}", unique());
    let t0 = (sandguard::testing::timefmt::now_unix() - 3600) * 1000;
    // An owner on another machine: judged by nobody here.
    let owner = "0123456789abcdef-0123456789abcdef-4242-1-4026531836";
    let sandboxes = [
        ("docker", "3f2a9c0e11b2", 60_000),
        ("e2b", "isbxeleven", 11_000),
        ("daytona", "sbx-four", 4_000),
    ];
    let mut lines = vec![start_line(t0, owner)];
    for (provider, id, _) in sandboxes {
        lines.push(format!(
            r#"{{"t":{t0},"ev":"claim","provider":"{provider}","id":"{id}"}}"#
        ));
    }
    for (provider, id, lived) in sandboxes {
        let t = t0 + lived;
        lines.push(format!(
            r#"{{"t":{t},"ev":"removed","provider":"{provider}","id":"{id}","outcome":"removed"}}"#
        ));
    }
    let end = t0 + 61_000;
    lines.push(format!(r#"{{"t":{end},"ev":"end","state":"reclaimed"}}"#));
    write_journal(s, &session, &lines);
    session
}

#[test]
fn sandbox_time_adds_up_as_a_user_adds_it() {
    let s = Scratch::new("durations");
    let session = session_of_three(&s);
    let ok = |args: &[&str]| {
        let out = run(sandguard(&s).args(args));
        assert_eq!(out.code, 0, "{args:?}: {}{}", out.stdout, out.stderr);
        out.stdout
    };

    let json = json(&ok(&["sessions", "--json"]));
    assert_eq!(json["sessions"][0]["spend"]["seconds"], 75.0, "{json}");
    let table = ok(&["sessions"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(&session))
        .unwrap_or_else(|| panic!("no row for {session}:\n{table}"));
    assert!(row.contains("   1m15s   "), "SPEND: {row}");

    let show = ok(&["sessions", "show", &session]);
    for line in [
        "Sandbox time: 1m15s.",
        "  docker: 1m00s over 1 sandbox(es)",
        "  e2b: 11s over 1 sandbox(es)",
        "  daytona: 4s over 1 sandbox(es)",
    ] {
        assert!(show.contains(line), "no {line:?} in:\n{show}");
    }

    let report = ok(&["report"]);
    let total = report
        .lines()
        .find(|l| l.starts_with("total "))
        .unwrap_or_else(|| panic!("no total in:\n{report}"));
    assert!(total.contains(" 1m15s "), "{total}\n{report}");
}
