//! Spend, through the real binary: `sandguard report`, the `SPEND` column of `sessions` and
//! the per-provider lines of `sessions show`, against a guarded run's real container, its
//! time measured against the wall clock; and the bad values `report` refuses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::*;
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};

/// Unix seconds (with their fraction) of Docker's `.Created`, `2026-12-06T02:43:24.123456789Z`.
fn created_at(id: &str) -> f64 {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.Created}}", id])
        .output()
        .expect("docker inspect");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let whole = sandguard::testing::timefmt::parse_rfc3339(&text)
        .unwrap_or_else(|| panic!("docker's Created {text:?}"));
    let fraction = text
        .split_once('.')
        .map(|(_, f)| f.trim_end_matches('Z'))
        .map_or(0.0, |f| format!("0.{f}").parse::<f64>().unwrap_or(0.0));
    whole as f64 + fraction
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn report(s: &Scratch, args: &[&str]) -> serde_json::Value {
    let out = run(sandguard(s).arg("report").args(args).arg("--json"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    json(&out.stdout)
}

#[test]
fn report_counts_a_guarded_containers_time_within_a_second_of_the_wall_clock() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("report");
    let ids = s.path().join("ids");
    let script = format!(
        r#"set -e
c=$(docker run -d --network none {IMAGE} sleep 3600)
ran=$(date +%s.%N)
sandguard claim docker "$c"
printf '%s\n' "$SANDGUARD_SESSION" "$c" "$ran" > {f}.tmp
mv {f}.tmp {f}
exec sleep 3600
"#,
        f = ids.display()
    );
    let mut child = guarded_with(&s, &[], &script);
    let [session, c, ran] = <[String; 3]>::try_from(wait_for_file(&ids, &mut child)).unwrap();
    let ran: f64 = ran.parse().unwrap();
    let mut r = Resources::default();
    r.adopt_container(&c);
    let created = created_at(&c);

    // While the owner lives: one sandbox, alive, its time so far growing.
    std::thread::sleep(Duration::from_millis(1500));
    let alive = report(&s, &[]);
    assert_eq!(alive["total"]["alive"], 1, "{alive}");
    assert!(
        alive["total"]["alive_seconds"].as_f64().unwrap() >= 1.0,
        "{alive}"
    );
    let table = run(sandguard(&s).arg("sessions"));
    assert!(table.stdout.contains("SPEND"), "{}", table.stdout);
    assert!(table.stdout.contains("(1 alive)"), "{}", table.stdout);

    // The owner dies; its sidecar removes the container. The real lifetime: from Docker's
    // own creation time to the moment the container is seen gone (polled every 10 ms).
    std::thread::sleep(Duration::from_millis(1000));
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while container_exists(&c) {
        assert!(std::time::Instant::now() < deadline, "{c} was not removed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let gone = now_secs();
    let real = gone - created;
    eventually(Duration::from_secs(15), "the session is reclaimed", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["state"] == "reclaimed"
    });

    let by_provider = report(&s, &["--by", "provider"]);
    assert_eq!(by_provider["by"], "provider");
    assert_eq!(by_provider["since"], serde_json::Value::Null);
    assert_eq!(by_provider["sessions"], 1);
    let rows = by_provider["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{by_provider}");
    assert_eq!(rows[0]["key"], "docker");
    let counted = rows[0]["seconds"].as_f64().unwrap();
    // Counted from the claim, which the proxy makes when the daemon answers the create: after
    // Docker's own creation time (a create takes a while on a loaded machine) and before
    // `docker run` returned; to the removal.
    assert!(
        counted > gone - ran - 0.5 && counted < real + 0.5,
        "counted {counted:.3} s; the container lived {real:.3} s, {:.3} s of it after docker \
         run returned",
        gone - ran
    );
    assert_eq!(rows[0]["sandboxes"], 1);
    assert_eq!(rows[0]["alive"], 0);
    assert_eq!(rows[0]["untimed"], 0);
    assert_eq!(by_provider["total"]["seconds"], rows[0]["seconds"]);

    let by_session = report(&s, &["--by", "session", "--since", "1h"]);
    assert_eq!(by_session["rows"][0]["key"], session.as_str());
    assert_eq!(by_session["rows"][0]["seconds"], rows[0]["seconds"]);
    assert!(by_session["since"].is_string(), "{by_session}");
    let by_day = report(&s, &["--by", "day"]);
    let days = by_day["rows"].as_array().unwrap();
    assert!(days[0]["key"].as_str().unwrap().len() == 10, "{by_day}");
    assert_eq!(by_day["total"]["seconds"], rows[0]["seconds"]);

    // The session's own figures say the same.
    let sessions = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    let spend = &sessions["sessions"][0]["spend"];
    assert_eq!(spend["seconds"], rows[0]["seconds"], "{sessions}");
    assert_eq!(
        spend["by_provider"]["docker"]["seconds"],
        rows[0]["seconds"]
    );
    let show = json(&run(sandguard(&s).args(["sessions", "show", &session, "--json"])).stdout);
    assert_eq!(show["spend"]["alive"], 0);
    assert_eq!(show["spend"]["seconds"], rows[0]["seconds"]);
    let text = run(sandguard(&s).args(["sessions", "show", &session]));
    assert!(text.stdout.contains("Sandbox time: "), "{}", text.stdout);
    assert!(
        text.stdout.contains("  docker: ") && text.stdout.contains("over 1 sandbox(es)"),
        "{}",
        text.stdout
    );
    let table = run(sandguard(&s).arg("report"));
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(
        table
            .stdout
            .starts_with("Sandbox time in the whole ledger, by provider:\nPROVIDER"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("\ntotal "), "{}", table.stdout);
    assert!(
        rows[0].get("estimate").is_none() && !table.stdout.contains('$'),
        "no price, no money: {by_provider}\n{}",
        table.stdout
    );

    // A price, configured after the fact: the same time, priced now (36 an hour is 0.01 a
    // second, so the estimate is the seconds over 100).
    let config = s.path().join("config/sandguard/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(&config, "[providers.docker]\nprice_per_hour = 36\n").unwrap();
    let priced = report(&s, &[]);
    let row = &priced["rows"][0];
    assert_eq!(row["seconds"], rows[0]["seconds"], "prices change no time");
    let cost = row["estimate"]["cost"].as_f64().unwrap();
    assert!((cost - counted / 100.0).abs() < 1e-6, "{priced}");
    assert_eq!(row["estimate"]["unpriced_seconds"], 0.0);
    assert_eq!(priced["total"]["estimate"], row["estimate"]);
    let cents = format!("~${:.2}", counted / 100.0);
    let table = run(sandguard(&s).arg("report")).stdout;
    assert!(table.lines().next().is_some(), "{table}");
    let header = table.lines().nth(1).unwrap();
    assert!(header.ends_with("COST"), "{table}");
    let total = table.lines().find(|l| l.starts_with("total ")).unwrap();
    assert!(total.ends_with(&cents), "{table}");
    assert!(table.contains("~$: an estimate"), "{table}");
    let sessions = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
    assert_eq!(
        sessions["sessions"][0]["spend"]["estimate"],
        row["estimate"]
    );
    let listed = run(sandguard(&s).arg("sessions")).stdout;
    assert!(listed.contains(&cents), "{listed}");
    let show = run(sandguard(&s).args(["sessions", "show", &session])).stdout;
    assert!(
        show.contains(&format!(", {cents} estimated.")) && show.contains("~$: an estimate"),
        "{show}"
    );
}

#[test]
fn report_refuses_a_bad_since_or_by_naming_the_value() {
    let s = Scratch::new("report-bad");
    for (args, value) in [
        (&["--since", "7x"][..], "7x"),
        (&["--since", "0"][..], "'0'"),
        (&["--since", "yesterday"][..], "yesterday"),
        (&["--by", "week"][..], "week"),
    ] {
        let out = run(sandguard(&s).arg("report").args(args));
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(value), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(args[0]), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
}

#[test]
fn report_of_an_empty_ledger_says_so() {
    let s = Scratch::new("report-empty");
    let out = run(sandguard(&s).args(["report", "--since", "7d"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("No sandbox time in the last 7d (since "),
        "{}",
        out.stdout
    );
    let v = report(&s, &["--by", "day"]);
    assert_eq!(v["rows"], serde_json::json!([]));
    assert_eq!(v["total"]["seconds"], 0.0);
    assert_eq!(v["sessions"], 0);
}
