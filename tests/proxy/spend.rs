//! Spend, proved against the provider's own record: a guarded program makes E2B sandboxes
//! through the cloud proxy with the vendor's SDK, kills some itself and is killed with the
//! rest; what sandguard counts (`sessions show --json`, `report --json`, the line on the
//! terminal) must match, within a second per sandbox and in total, when the emulator served
//! each create and each delete (`support::e2b::State::lives`). Prices set per template check
//! that each sandbox's size reached the journal and priced it.

use std::time::Duration;

use crate::proxy::cloud::{first_line, guarded, E2B_KEY};
use crate::support::terminal::{used, Terminal};
use crate::support::{cloud_config, e2b, eventually, json, run, sandguard, Scratch};
use crate::watch::wrapper::unsafe_kill;

/// Four sandboxes of two templates; the program kills the first two itself, a second apart,
/// and keeps the others until it is killed.
const AGENT: &str = r#"
import json, time
from e2b import Sandbox

made = []
for template in ("base", "gpu", "gpu", "base"):
    made.append(Sandbox.create(template=template))
    time.sleep(0.4)
time.sleep(1.0)
made[0].kill()
time.sleep(1.0)
made[1].kill()
print(json.dumps({"ids": [s.sandbox_id for s in made]}), flush=True)
time.sleep(600)
"#;

/// Prices that tell the templates apart: 3.6 an hour is 0.001 a second, 36 is 0.01.
const PRICES: &str =
    "\n[providers.e2b]\nprice_per_hour = 3.6\n\n[providers.e2b.prices]\ngpu = 36\n";

fn per_second(template: &str) -> f64 {
    match template {
        "gpu" => 0.01,
        _ => 0.001,
    }
}

#[test]
fn spend_matches_the_providers_own_record_of_each_sandbox_and_the_run_is_told_it() {
    let s = Scratch::new("spend-e2b");
    let config = cloud_config(&s, PRICES);
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let mut terminal = Terminal::open();
    let mut child = guarded(&s, &config, &env, &["run", "--cloud-proxy"], AGENT)
        .stderr(terminal.stderr())
        .spawn()
        .unwrap();
    let said = first_line(&mut child);
    let ids: Vec<String> = serde_json::from_value(said["ids"].clone()).unwrap();
    assert_eq!(ids.len(), 4, "{said}");
    std::thread::sleep(Duration::from_millis(1500));
    unsafe_kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    eventually(Duration::from_secs(10), "every sandbox is gone", || {
        ids.iter().all(|id| !state.exists(id))
    });

    // The provider's record: when each create was served and each delete removed it.
    let lives = state.lives();
    let lived = |id: &str| {
        let life = lives[id];
        let removed = life.removed_ms.expect("removed");
        (removed - life.created_ms) as f64 / 1000.0
    };
    let real: Vec<f64> = ids.iter().map(|id| lived(id)).collect();
    let real_total: f64 = real.iter().sum();
    let templates = ["base", "gpu", "gpu", "base"];
    let real_cost: f64 = real
        .iter()
        .zip(templates)
        .map(|(secs, t)| secs * per_second(t))
        .sum();

    let session = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout)["sessions"][0]
        ["session"]
        .as_str()
        .unwrap()
        .to_string();
    let show = || {
        let out = run(sandguard(&s)
            .env("SANDGUARD_CONFIG", &config)
            .args(["sessions", "show", &session, "--json"]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        json(&out.stdout)
    };
    eventually(Duration::from_secs(10), "the session is reclaimed", || {
        show()["state"] == "reclaimed"
    });
    let show = show();

    // Each sandbox: its time, its fate, its template and its price.
    let sandboxes = show["sandboxes"].as_array().unwrap();
    for (i, id) in ids.iter().enumerate() {
        let sandbox = sandboxes
            .iter()
            .find(|s| s["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} in {show}"));
        let fate = if i < 2 { "released" } else { "removed" };
        assert_eq!(
            sandbox["fate"], fate,
            "the program killed the first two: {sandbox}"
        );
        assert_eq!(sandbox["size"], templates[i], "{sandbox}");
        let counted = sandbox["seconds"].as_f64().unwrap();
        assert!(
            (counted - real[i]).abs() < 1.0,
            "{id}: counted {counted:.3} s, the provider served it {:.3} s",
            real[i]
        );
        let cost = sandbox["estimate"]["cost"].as_f64().unwrap();
        assert!(
            (cost - counted * per_second(templates[i])).abs() < 1e-6,
            "{id} priced by its template: {sandbox}"
        );
    }

    // The session's total, and the report's, against the provider's.
    let spend = &show["spend"];
    let counted = spend["seconds"].as_f64().unwrap();
    assert!(
        (counted - real_total).abs() < 1.0,
        "counted {counted:.3} s, the provider served {real_total:.3} s"
    );
    assert_eq!(spend["sandboxes"], 4);
    assert_eq!(spend["alive"], 0);
    let cost = spend["estimate"]["cost"].as_f64().unwrap();
    assert!(
        (cost - real_cost).abs() < 0.01,
        "{cost} against {real_cost}"
    );
    assert_eq!(spend["estimate"]["unpriced_seconds"], 0.0);
    let report = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .args(["report", "--json"]));
    let report = json(&report.stdout);
    assert_eq!(report["total"]["seconds"], spend["seconds"], "{report}");
    assert_eq!(report["total"]["estimate"], spend["estimate"], "{report}");

    // The line on the terminal, written as the first reclaim pass ended.
    let told = || {
        let text = terminal.text();
        let line = text.lines().find(|l| l.starts_with("sandguard: "))?;
        text.contains(&format!("{line}\n"))
            .then(|| line.to_string())
    };
    eventually(Duration::from_secs(5), "the terminal is told", || {
        told().is_some()
    });
    let text = told().unwrap();
    assert!(
        text.starts_with("sandguard: removed 2 sandboxes the program left; this run used "),
        "{text:?}"
    );
    let line = used(&text).unwrap();
    assert!(
        (line.seconds - real_total).abs() <= line.within + 1.0,
        "the line says {line:?}, the provider served {real_total:.3} s"
    );
    assert_eq!(line.by_provider.len(), 1, "{text:?}");
    assert!(line.cost.is_some(), "priced, so an estimate: {text:?}");
}
