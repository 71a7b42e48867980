//! Typed sandbox ids, through the real binary: an id that
//! no provider's parser accepts (empty, `.`, `..`, with a `/`, a percent-encoded dot segment,
//! a space, a leading `-`, …) is refused when it is claimed, and nothing a refused claim
//! named ever reaches a provider; `stop ""` is a usage error that removes nothing.
//!
//! The claims are generated (every cloud provider × every bad shape), not one example: the
//! rule is a class.

use std::os::unix::process::CommandExt;

use crate::support::daytona::Daytona;
use crate::support::emu::Emulator;
use crate::support::flyio::Fly;
use crate::support::modal::{self, ModalEmu};
use crate::support::tenki::{self, Tenki};
use crate::support::*;
use crate::watch::sidecar::{journal, wait_state};
use crate::watch::wrapper::{path_with_sandguard, wait_for_file, Job};
use sandguard::labels::SESSION;
use sandguard::testing::protocol::Target;

const E2B_KEY: &str = "e2b_1d5e1d5e1d5e1d5e1d5e";
const DAYTONA_KEY: &str = "dtn_1d5e1d5e1d5e1d5e1d5e1d5e";
const FLY_TOKEN: &str = "fly-1d5e1d5e1d5e";
const FLY_APP: &str = "app";

/// Every cloud provider a claim can name.
const PROVIDERS: [&str; 5] = ["e2b", "daytona", "flyio", "tenki", "modal"];

/// Shapes no provider's id may take. The protocol itself refuses the empty one and those
/// with a space or a control character (exit 2); the sidecar refuses the rest (exit 1).
const BAD_IDS: [&str; 14] = [
    "", ".", "..", "a/b", "../x", "x/..", "./", "/", "%2e%2e", ".%2e", "%2E.", "a b", "a\tb", "-rf",
];

struct Clouds {
    e2b: Emulator,
    e2b_state: std::sync::Arc<e2b::State>,
    daytona: Daytona,
    fly: Fly,
    tenki: Tenki,
    modal: ModalEmu,
}

/// A guarded session with every cloud provider pointed at its emulator (Docker off), whose
/// script runs `sandguard VERB PROVIDER -- ID` once per case, writing each exit status and
/// message.
fn session_claiming(s: &Scratch, clouds: &Clouds, cases: &[(&str, &str, &str)]) -> (Job, String) {
    let out = s.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let quote = |w: &str| format!("'{}'", w.replace('\'', r"'\''"));
    let mut script = String::new();
    for (n, (verb, provider, id)) in cases.iter().enumerate() {
        script.push_str(&format!(
            "sandguard {verb} {provider} -- {id} 2> {o}/err-{n}; echo $? > {o}/code-{n}\n",
            id = quote(id),
            o = out.display()
        ));
    }
    script.push_str(&format!(
        "echo \"$SANDGUARD_SESSION\" > {o}/s.tmp; mv {o}/s.tmp {o}/s\nexec sleep 600",
        o = out.display()
    ));
    let child = sandguard(s)
        .env("PATH", path_with_sandguard())
        .env("SANDGUARD_CONFIG", cloud_config(s, ""))
        .env("E2B_API_KEY", E2B_KEY)
        .env("E2B_API_URL", &clouds.e2b.url)
        .env("DAYTONA_API_KEY", DAYTONA_KEY)
        .env("DAYTONA_API_URL", clouds.daytona.api_url())
        .env("FLY_API_TOKEN", FLY_TOKEN)
        .env("FLY_API_HOSTNAME", &clouds.fly.url)
        .env("FLY_APP_NAME", FLY_APP)
        .env("TENKI_API_KEY", tenki::TOKEN)
        .env("TENKI_API_URL", clouds.tenki.url())
        .env("MODAL_TOKEN_ID", modal::TOKEN_ID)
        .env("MODAL_TOKEN_SECRET", modal::TOKEN_SECRET)
        .env("MODAL_SERVER_URL", &clouds.modal.url)
        .env_remove("DAYTONA_SERVER_URL")
        .env_remove("TENKI_AUTH_TOKEN")
        .env_remove("TENKI_API_ENDPOINT")
        .env_remove("MODAL_ENVIRONMENT")
        .env_remove("MODAL_PROFILE")
        .args(["--", "sh", "-c", &script])
        .quiet()
        .process_group(0)
        .spawn()
        .expect("spawn sandguard");
    let mut job = Job(child);
    let session = wait_for_file(&out.join("s"), &mut job).remove(0);
    (job, session)
}

/// Points 1 and part B: `sandguard claim|release|detach P ID` for every provider and every
/// bad shape is refused (exit 1 with the sidecar's reason, or 2 where the protocol refuses the word),
/// nothing is journaled as claimed, and after the owner dies no provider received a removal,
/// a stop, or any request on a collection or app path; every stranger is still there.
#[test]
fn claims_of_ids_no_parser_accepts_are_refused_and_reach_no_provider() {
    let _g = shared();
    let s = Scratch::new("trust-ids");
    let (e2b, e2b_state) = e2b::start(E2B_KEY);
    let clouds = Clouds {
        e2b,
        e2b_state,
        daytona: Daytona::start(DAYTONA_KEY),
        fly: Fly::start(FLY_APP, FLY_TOKEN),
        tenki: Tenki::start(),
        modal: ModalEmu::start(),
    };
    clouds.e2b_state.insert("stranger0001", &[("app", "x")]);
    let strangers = (
        clouds.daytona.insert(&[("app", "x")]),
        clouds.fly.insert(&[("app", "x")]),
        clouds.tenki.insert(&[], &[("app", "x")]),
        clouds.modal.insert(&[("app", "x")]),
    );
    let cases: Vec<(&str, &str, &str)> = ["claim", "release", "detach"]
        .iter()
        .flat_map(|v| PROVIDERS.iter().map(move |p| (*v, *p)))
        .flat_map(|(v, p)| BAD_IDS.iter().map(move |id| (v, p, *id)))
        .collect();
    let (mut owner, session) = session_claiming(&s, &clouds, &cases);

    let out = s.path().join("out");
    for (n, (verb, provider, id)) in cases.iter().enumerate() {
        let code = wait_for_file(&out.join(format!("code-{n}")), &mut owner).remove(0);
        let err = std::fs::read_to_string(out.join(format!("err-{n}"))).unwrap();
        let (want, says) = if Target::new(provider, id).is_ok() {
            ("1", "refused")
        } else {
            ("2", "")
        };
        assert_eq!(code, want, "sandguard {verb} {provider} {id:?}: {err}");
        assert!(
            err.contains(says),
            "sandguard {verb} {provider} {id:?}: {err}"
        );
    }
    let journaled = std::fs::read_to_string(journal(&s, &session)).unwrap();
    for ev in ["claim", "release", "detach"] {
        assert!(
            !journaled.contains(&format!(r#""ev":"{ev}""#)),
            "a bad id was journaled as {ev}:\n{journaled}"
        );
    }

    drop(owner);
    wait_state(&s, &session, &["clean", "reclaimed", "pending"]);
    for (name, emu) in [
        ("e2b", &clouds.e2b),
        ("daytona", &clouds.daytona.emu),
        ("flyio", &*clouds.fly),
    ] {
        let mutations: Vec<String> = emu
            .hits()
            .iter()
            .filter(|h| h.method != "GET")
            .map(|h| format!("{} {}", h.method, h.path))
            .collect();
        assert!(mutations.is_empty(), "{name} received {mutations:?}");
    }
    assert_eq!(clouds.tenki.calls("TerminateSession"), 0);
    for rpc in ["SandboxTerminate", "SandboxTerminateV2"] {
        assert_eq!(
            clouds
                .modal
                .calls(&format!("/modal.client.ModalClient/{rpc}")),
            0,
            "{rpc}"
        );
    }
    assert!(clouds.e2b_state.exists("stranger0001"));
    assert!(clouds.daytona.is_live(&strangers.0));
    assert!(clouds.fly.exists(&strangers.1));
    assert!(clouds.tenki.alive(&strangers.2));
    assert!(clouds.modal.running(&strangers.3));
}

/// Point 2: `sandguard stop ""` is a usage error (exit 2) that removes nothing; before, the
/// empty string was a prefix of every id and the only managed container went.
#[test]
fn stop_with_an_empty_id_is_a_usage_error_and_removes_nothing() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("trust-ids-stop");
    let session = format!("ids{}", unique());
    let mut r = Resources::default();
    let mine = r.container(&[(SESSION, &session)]);
    for args in [&["stop", ""][..], &["stop", "", "--session", &session]] {
        let out = run(sandguard(&s).args(args));
        assert_eq!(out.code, 2, "{args:?}: {} {}", out.stdout, out.stderr);
        assert!(out.stderr.contains("INSTANCE_ID"), "{}", out.stderr);
        assert!(container_exists(&mine), "{args:?} removed {mine}");
    }
    // Still reachable by its real id.
    let out = run(sandguard(&s).args(["stop", &mine[..12]]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
}
