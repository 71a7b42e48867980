//! Modal's own Python SDK (`modal` 1.6.4) against the emulator, beside the real `sandguard`:
//! a client nobody here wrote checks the emulator's wire (grpclib over plain HTTP/2), its V1
//! and V2 RPCs, its auth token, its environments and its tags.
//!
//! The SDK calls exercised: `Sandbox.list(tags=...)` both ways (`SandboxListV2` after
//! `AuthTokenGet`, the 1.6.4 default, and `SandboxList` with `MODAL_SANDBOX_V2=0`),
//! `Sandbox.list()` without tags, `set_tags` (`SandboxTagsSet`, `SandboxTagsSetV2`),
//! `get_tags` (`SandboxTagsGet`, `SandboxTagsGetV2`) and `terminate` (`SandboxTerminate`,
//! `SandboxTerminateV2`), each generation chosen by the SDK from the id's shape.
//!
//! Not exercised, and why: `Sandbox.create` needs an app (`AppGetOrCreate`), an image build
//! and, for V2, the task command router: none of it is what sandguard calls, so the emulator
//! does not model it, and the test seeds the sandboxes itself. `Sandbox.from_id` needs
//! `SandboxWait`/`SandboxWaitV2`, likewise not emulated: handles come from `Sandbox.list()`.

use std::collections::BTreeMap;

use crate::providers::{session_id, Config, Rig};
use crate::support::modal::{path, ModalEmu, DEFAULT_ENVIRONMENT, TOKEN_ID, TOKEN_SECRET};
use crate::support::{json, run, sdk};
use sandguard::labels::SESSION;

/// One step with the SDK, by `ACTION`: `tag` (tag the sandboxes `TO_TAG` names, then list by
/// tag and read each one's tags), `list` (list by tag), `terminate` (terminate every one
/// listed by tag, then list by tag again). Prints `{"listed": [...], "tags": {...}}`.
const SCRIPT: &str = r#"
import json, os
import modal

tags = {"sandguard.session": os.environ["SESSION"]}
action = os.environ["ACTION"]

def by_tag():
    return sorted(sb.object_id for sb in modal.Sandbox.list(tags=tags))

out = {}
if action == "tag":
    wanted = set(os.environ["TO_TAG"].split(","))
    for sb in modal.Sandbox.list():
        if sb.object_id in wanted:
            sb.set_tags(tags)
    out["tags"] = {sb.object_id: sb.get_tags() for sb in modal.Sandbox.list(tags=tags)}
elif action == "terminate":
    for sb in modal.Sandbox.list(tags=tags):
        sb.terminate()
out["listed"] = by_tag()
print(json.dumps(out))
"#;

/// The calls to each RPC so far.
fn counts(emu: &ModalEmu) -> BTreeMap<&'static str, usize> {
    [
        path::AUTH_TOKEN_GET,
        path::SANDBOX_LIST,
        path::SANDBOX_LIST_V2,
        path::SANDBOX_TAGS_GET,
        path::SANDBOX_TAGS_GET_V2,
        path::SANDBOX_TAGS_SET,
        path::SANDBOX_TAGS_SET_V2,
        path::SANDBOX_TERMINATE,
        path::SANDBOX_TERMINATE_V2,
    ]
    .into_iter()
    .map(|p| (p, emu.calls(p)))
    .collect()
}

/// What a step added to each RPC's count.
fn added(before: &BTreeMap<&'static str, usize>, emu: &ModalEmu) -> BTreeMap<&'static str, usize> {
    counts(emu)
        .into_iter()
        .map(|(p, n)| (p, n - before[p]))
        .collect()
}

fn sorted(ids: &[&String]) -> serde_json::Value {
    let mut ids: Vec<&String> = ids.to_vec();
    ids.sort();
    serde_json::json!(ids)
}

#[test]
fn the_modal_sdk_and_sandguard_see_the_same_v1_and_v2_sandboxes_before_and_none_after() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let session = session_id();
    let tags = [(SESSION, session.as_str())];
    let dev = |v2, tags: &[(&str, &str)]| rig.cloud.insert_as(v2, "dev", tags);
    let (mine_v1, mine_v2) = (dev(false, &tags), dev(true, &tags));
    // Untagged until the SDK tags them.
    let (late_v1, late_v2) = (dev(false, &[]), dev(true, &[]));
    let other_session = session_id();
    let bystanders = [
        dev(true, &[(SESSION, other_session.as_str())]),
        dev(false, &[("app", "x")]),
        rig.cloud.insert_as(true, DEFAULT_ENVIRONMENT, &tags),
    ];
    // sandguard must read the tags itself; the SDK's listing filters on the server.
    rig.cloud.hide_tags_in_listings();
    let to_tag = format!("{late_v1},{late_v2}");
    let sdk_step = |action: &str, extra: &[(&str, &str)]| {
        let mut env = vec![
            ("MODAL_SERVER_URL", rig.cloud.url.as_str()),
            ("MODAL_TOKEN_ID", TOKEN_ID),
            ("MODAL_TOKEN_SECRET", TOKEN_SECRET),
            ("MODAL_ENVIRONMENT", "dev"),
            ("SESSION", session.as_str()),
            ("ACTION", action),
        ];
        env.extend_from_slice(extra);
        json(&sdk::ok(SCRIPT, &env))
    };
    let sandguard_sees = || {
        let out = run(rig.cmd().env("MODAL_ENVIRONMENT", "dev").args([
            "ps",
            "--json",
            "--provider",
            "modal",
        ]));
        assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
        let v = json(&out.stdout);
        let mut ids: Vec<String> = v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["session"] == session.as_str())
            .map(|x| x["instance_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        serde_json::json!(ids)
    };
    let ours = sorted(&[&mine_v1, &mine_v2, &late_v1, &late_v2]);

    let before = counts(&rig.cloud);
    let tagged = sdk_step("tag", &[("TO_TAG", &to_tag)]);
    let by_sdk = added(&before, &rig.cloud);
    assert_eq!(tagged["listed"], ours, "{tagged}");
    for id in [&mine_v1, &mine_v2, &late_v1, &late_v2] {
        assert_eq!(
            tagged["tags"][id.as_str()][SESSION],
            session.as_str(),
            "{tagged}"
        );
    }
    for rpc in [
        path::AUTH_TOKEN_GET,
        path::SANDBOX_LIST_V2,
        path::SANDBOX_TAGS_SET,
        path::SANDBOX_TAGS_SET_V2,
        path::SANDBOX_TAGS_GET,
        path::SANDBOX_TAGS_GET_V2,
    ] {
        assert!(by_sdk[rpc] > 0, "the SDK never called {rpc}: {by_sdk:?}");
    }
    assert_eq!(by_sdk[path::AUTH_TOKEN_GET], 1, "{by_sdk:?}");

    let before = counts(&rig.cloud);
    let v1_only = sdk_step("list", &[("MODAL_SANDBOX_V2", "0")]);
    let by_sdk = added(&before, &rig.cloud);
    assert_eq!(
        v1_only["listed"],
        sorted(&[&mine_v1, &late_v1]),
        "{v1_only}"
    );
    assert!(by_sdk[path::SANDBOX_LIST] > 0 && by_sdk[path::SANDBOX_LIST_V2] == 0);

    assert_eq!(sandguard_sees(), ours, "sandguard and the SDK disagree");

    let before = counts(&rig.cloud);
    let after = sdk_step("terminate", &[]);
    let by_sdk = added(&before, &rig.cloud);
    assert_eq!(after["listed"], serde_json::json!([]), "{after}");
    assert_eq!(by_sdk[path::SANDBOX_TERMINATE], 2, "{by_sdk:?}");
    assert_eq!(by_sdk[path::SANDBOX_TERMINATE_V2], 2, "{by_sdk:?}");
    assert_eq!(sandguard_sees(), serde_json::json!([]));
    assert_eq!(rig.cloud.count_running(&bystanders), 3);
}
