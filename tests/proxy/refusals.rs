//! Refusals on the record, through the real binary: a create a limit refuses is journaled
//! (the limit, the count that reached it, the provider and what the create named: the Docker
//! image, the E2B template; never its environment), a flood of them grows the journal by a
//! record per doubling and one at the end (not one each), and `sessions show` (text and
//! `--json`) and `report` count them per session and provider, by limit. The refusal speaks
//! grammatical English ("this session has 1") in the client's error and the session's log.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::proxy::limits::{journal, limited};
use crate::support::*;
use crate::watch::sidecar::wait_state;

/// One `refused_creates` entry of `sessions show --json`, as a script reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RefusedJson {
    provider: String,
    limit: String,
    max: String,
    reached: String,
    creates: u64,
    first_at: String,
    last_at: String,
    #[serde(default)]
    create: BTreeMap<String, String>,
}

/// The part of `sessions show --json` this file reads.
#[derive(Debug, Deserialize)]
struct ShowJson {
    session: String,
    refused_creates: Vec<RefusedJson>,
}

/// `sessions show ID --json`, deserialised.
fn show(s: &Scratch, session: &str) -> ShowJson {
    let out = run(sandguard(s).args(["sessions", "show", session, "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// The journal's `create_refused` records, as JSON.
fn refusal_records(s: &Scratch, session: &str) -> Vec<serde_json::Value> {
    journal(s, session)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["ev"] == "create_refused")
        .collect()
}

/// The sidecar's log of a wrapped session.
fn log(s: &Scratch, session: &str) -> String {
    let path = crate::watch::sidecar::journal(s, session).with_extension("log");
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_flood_of_refused_docker_creates_is_journaled_per_doubling_shown_and_reported() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("refusals-docker");
    let out = s.path();
    let secret = format!("hunter2-{}", unique());
    let script = format!(
        r#"set -e
c1=$(docker create --network none {IMAGE} true)
i=0
while [ $i -lt 20 ]; do
  if docker create --network none -e SG_TOKEN={secret} {IMAGE} true > /dev/null 2> {out}/err; then
    echo made >> {out}/made
  fi
  i=$((i+1))
done
printf '%s\n' "$SANDGUARD_SESSION" "$c1" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
    );
    let lines = limited(&s, &["--max-sandboxes", "1"], &script);
    let [session, _c1] = <[String; 2]>::try_from(lines).unwrap();
    assert!(
        !out.join("made").exists(),
        "every create past the first was refused"
    );
    let err = std::fs::read_to_string(out.join("err")).unwrap();
    assert!(
        err.contains(
            "sandguard: limit `sandboxes` reached (at most 1 alive at once; this session has 1); \
             nothing was created"
        ),
        "the docker CLI shows the refusal in plain English: {err}"
    );
    wait_state(&s, &session, &["reclaimed"]);

    // The journal: the 1st, 2nd, 4th, 8th and 16th refusals as they happened, and the 20th
    // written at the session's end; each with the limit, the count and the image.
    let records = refusal_records(&s, &session);
    let ns: Vec<u64> = records.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, [1, 2, 4, 8, 16, 20], "{records:?}");
    for r in &records {
        assert_eq!(r["provider"], "docker", "{r}");
        assert_eq!(r["limit"], "sandboxes", "{r}");
        assert_eq!(r["max"], "1", "{r}");
        assert_eq!(r["reached"], "1", "{r}");
        assert_eq!(r["create"]["image"], IMAGE, "{r}");
    }
    let text = journal(&s, &session);
    assert!(!text.contains(&secret), "no environment value is journaled");
    assert!(!log(&s, &session).contains(&secret), "nor logged");

    // `sessions show`, as a script reads it and as a person does.
    let shown = show(&s, &session);
    assert_eq!(shown.session, session);
    let [refused] = <[RefusedJson; 1]>::try_from(shown.refused_creates).unwrap();
    assert_eq!(
        (refused.provider.as_str(), refused.limit.as_str()),
        ("docker", "sandboxes")
    );
    assert_eq!((refused.max.as_str(), refused.reached.as_str()), ("1", "1"));
    assert_eq!(refused.creates, 20);
    assert_eq!(refused.create.get("image").map(String::as_str), Some(IMAGE));
    assert!(refused.first_at <= refused.last_at, "{refused:?}");
    let words = run(sandguard(&s).args(["sessions", "show", &session]));
    assert!(
        words
            .stdout
            .contains("docker: 20 create(s) refused by limit `sandboxes`"),
        "{}",
        words.stdout
    );
    assert!(
        words.stdout.contains(&format!("image {IMAGE}")),
        "{}",
        words.stdout
    );

    // `report`: per session and per provider, by limit.
    for (by, key) in [("session", session.as_str()), ("provider", "docker")] {
        let out = run(sandguard(&s).args(["report", "--json", "--by", by]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        let v = json(&out.stdout);
        let rows = v["refused_creates"].as_array().expect("refused_creates");
        assert_eq!(rows.len(), 1, "{v}");
        assert_eq!(rows[0]["key"], key, "{v}");
        assert_eq!(rows[0]["provider"], "docker", "{v}");
        assert_eq!(rows[0]["limit"], "sandboxes", "{v}");
        assert_eq!(rows[0]["creates"], 20, "{v}");
    }
    let table = run(sandguard(&s).arg("report"));
    assert!(
        table
            .stdout
            .contains("Creates refused by a limit, by provider:"),
        "{}",
        table.stdout
    );
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with("docker") && l.contains("sandboxes") && l.ends_with("20")),
        "{}",
        table.stdout
    );
}

/// Creates one sandbox, then three more that the limit refuses, each with an environment
/// variable holding a secret; prints the id made and what the SDK raised.
const E2B_REFUSED_WITH_ENVS: &str = r#"
import json, os, sys, time
from e2b import Sandbox

first = Sandbox.create(template="base", timeout=300).sandbox_id
errors = []
for _ in range(3):
    try:
        Sandbox.create(template="base", timeout=300, envs={"API_TOKEN": sys.argv[1]})
    except Exception as e:
        errors.append(str(e))
session = os.environ["SANDGUARD_SESSION"]
print(json.dumps({"session": session, "ids": [first], "errors": errors}), flush=True)
time.sleep(600)
"#;

#[test]
fn a_refused_e2b_create_is_journaled_with_its_template_and_never_its_envs() {
    use crate::proxy::cloud::{first_line, guarded, kill, E2B_KEY};
    let s = Scratch::new("refusals-e2b");
    let (emu, state) = e2b::start(E2B_KEY);
    let env = [("E2B_API_KEY", E2B_KEY), ("E2B_API_URL", emu.url.as_str())];
    let config = cloud_config(&s, "");
    let secret = format!("hunter2-{}", unique());
    let args = ["run", "--cloud-proxy", "--max-sandboxes", "1"];
    let mut cmd = guarded(&s, &config, &env, &args, E2B_REFUSED_WITH_ENVS);
    let mut child = cmd.arg(&secret).spawn().unwrap();
    let said = first_line(&mut child);
    let errors: Vec<String> = serde_json::from_value(said["errors"].clone()).unwrap();
    assert_eq!(errors.len(), 3, "{said}");
    for e in &errors {
        assert!(
            e.contains(
                "sandguard: refused a sandbox create on e2b: limit `sandboxes` reached (at most \
                 1 alive at once; this session has 1)"
            ),
            "{e}"
        );
    }
    assert_eq!(state.creates().len(), 1, "no refused create reached E2B");
    let session = said["session"].as_str().unwrap().to_string();
    kill(child);
    wait_state(&s, &session, &["reclaimed"]);

    let records = refusal_records(&s, &session);
    let ns: Vec<u64> = records.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(
        ns,
        [1, 2, 3],
        "the first, the second, and the count at the end"
    );
    assert!(records.iter().all(|r| r["create"]["template"] == "base"));
    assert!(
        !journal(&s, &session).contains(&secret),
        "no env value journaled"
    );
    let logged = log(&s, &session);
    assert!(!logged.contains(&secret), "nor logged");
    assert!(
        logged.contains("refused a sandbox create on e2b: limit `sandboxes` reached"),
        "{logged}"
    );
    assert!(!logged.contains("a e2b"), "{logged}");
    let shown = show(&s, &session);
    let [refused] = <[RefusedJson; 1]>::try_from(shown.refused_creates).unwrap();
    assert_eq!(refused.provider, "e2b");
    assert_eq!(refused.creates, 3);
    assert_eq!(
        refused.create,
        BTreeMap::from([("template".to_string(), "base".to_string())])
    );
}
