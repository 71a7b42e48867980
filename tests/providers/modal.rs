//! Modal in the conformance suite: the adapter for `support/modal.rs` (labels are sandbox
//! tags, a token id and secret on every gRPC call, 100 a page until an empty one), and Modal's
//! quirk: when a filtered listing leaves the tags out, the driver reads them itself.
//!
//! The gRPC emulator keeps its own log and faults; the adapter translates them: a call's
//! status is the HTTP status that gRPC code stands for (RESOURCE_EXHAUSTED 429, UNAVAILABLE
//! 503, …), and a throttle's wait is whole seconds.

use std::process::Command;

use super::{session_id, Cloud, Config, Rig, Support};
use crate::support::emu::{Faults, Hit};
use crate::support::modal::{self, ModalEmu, TOKEN_ID, TOKEN_SECRET};
use sandguard::providers::modal::wire;
use tonic::Code;

impl Cloud for ModalEmu {
    const NAME: &'static str = "modal";
    const PAGE: Option<usize> = Some(modal::PAGE_SIZE);
    const EMPTY_PAGE_ENDS_LISTING: bool = true;
    const UNAUTHORIZED: &'static str = "UNAUTHENTICATED";
    const RUNNING: &'static str = "running";
    const IMAGE: &'static str = "im-emulated";
    const CREDENTIAL_VAR: &'static str = "MODAL_TOKEN_SECRET";
    const DROPPED_CONNECTIONS: Support = Support::No(
        "every call shares one HTTP/2 connection, which tonic's server does not let a \
         handler cut",
    );
    const SERVER_TTL: Support =
        Support::No("Modal sets a sandbox's timeout when it is created, with no call to change it");

    fn start() -> ModalEmu {
        ModalEmu::start()
    }

    fn configure(&self, cmd: &mut Command) {
        cmd.env("MODAL_SERVER_URL", &self.url)
            .env("MODAL_TOKEN_ID", TOKEN_ID)
            .env("MODAL_TOKEN_SECRET", TOKEN_SECRET)
            .env_remove("MODAL_ENVIRONMENT")
            .env_remove("MODAL_PROFILE");
    }

    fn wrong_credential(cmd: &mut Command) -> &'static str {
        let wrong = "as-wrongsecret4242";
        cmd.env("MODAL_TOKEN_SECRET", wrong);
        wrong
    }

    fn secrets() -> &'static [&'static str] {
        &[TOKEN_ID, TOKEN_SECRET]
    }

    fn detail(&self) -> String {
        format!("Modal API at {}", self.url)
    }

    fn insert(&self, labels: &[(&str, &str)]) -> String {
        ModalEmu::insert(self, labels)
    }

    /// Not finished.
    fn exists(&self, id: &str) -> bool {
        self.running(id)
    }

    fn set_faults(&self, faults: Faults) {
        assert!(
            faults.drop_rate == 0.0,
            "the Modal emulator cannot drop connections"
        );
        ModalEmu::set_faults(
            self,
            modal::Faults {
                error_rate: faults.error_rate,
                throttle_rate: faults.throttle_rate,
                retry_after_secs: faults.retry_after_secs as f32,
                outage: faults.outage,
                latency: faults.latency,
            },
        );
    }

    fn hits(&self) -> Vec<Hit> {
        ModalEmu::hits(self)
            .into_iter()
            .map(|h| Hit {
                at: h.at,
                method: "POST".into(),
                status: http_status(h.code),
                path: h.path,
                early: h.early,
            })
            .collect()
    }

    fn is_listing(hit: &Hit) -> bool {
        hit.path == wire::SANDBOX_LIST
    }
}

/// The HTTP status a gRPC code stands for (as in gRPC's own HTTP mapping).
fn http_status(code: i32) -> u16 {
    match Code::from_i32(code) {
        Code::Ok => 200,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::Unauthenticated => 401,
        Code::PermissionDenied => 403,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::ResourceExhausted => 429,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::DeadlineExceeded => 504,
        _ => 500,
    }
}

// Neither optional part: no dropped connections, no TTL (the reasons are above).
conformance!(ModalEmu;);

#[test]
fn tags_are_read_one_by_one_when_a_filtered_listing_omits_them() {
    let rig = Rig::<ModalEmu>::new(Config::deadline(3));
    let session = session_id();
    let mine = rig.many(&session, 3);
    let other = rig.labelled(&session_id());
    let stranger = rig.stranger();
    rig.cloud.hide_tags_in_listings();

    let out = rig.stop_session(&session);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(rig.all_gone(&mine));
    assert!(rig.cloud.running(&other) && rig.cloud.running(&stranger));
    let reads = ModalEmu::hits(&rig.cloud)
        .iter()
        .filter(|h| h.path == wire::SANDBOX_TAGS_GET)
        .count();
    assert_eq!(reads, 3, "one SandboxTagsGet per listed sandbox");
}
