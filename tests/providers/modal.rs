//! Modal in the conformance suite: the adapter for `support/modal/` (labels are sandbox tags,
//! a token id and secret on every gRPC call, 100 a page until an empty one), with V1 and V2
//! sandboxes seeded in turn, so every shared test meets both generations; and Modal's quirks:
//! V2 sandboxes and their auth token, claimed V2 ids, listings without tags, environments.
//!
//! The gRPC emulator keeps its own log and faults; the adapter translates them: a call's
//! status is the HTTP status that gRPC code stands for (RESOURCE_EXHAUSTED 429, UNAVAILABLE
//! 503, …), and a throttle's wait is whole seconds. A listing is two walks (`SandboxList`,
//! `SandboxListV2`) and one `AuthTokenGet`.

mod quirks;
mod sdk;

use std::process::Command;

use super::{Cloud, Support};
use crate::support::emu::{Faults, Hit};
use crate::support::modal::{self, path, ModalEmu, TOKEN_ID, TOKEN_SECRET};
use tonic::Code;

impl Cloud for ModalEmu {
    const NAME: &'static str = "modal";
    const PAGE: Option<usize> = Some(modal::PAGE_SIZE);
    const EMPTY_PAGE_ENDS_LISTING: bool = true;
    const UNAUTHORIZED: &'static str = "UNAUTHENTICATED";
    const UNAUTHORIZED_STATUS: Option<u16> = None;
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

    /// V1 and V2 in turn.
    fn insert(&self, labels: &[(&str, &str)]) -> String {
        self.insert_mixed(labels)
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
                denied: Vec::new(),
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

    /// A page of either listing, or the auth token the V2 listing needs first.
    fn is_listing(hit: &Hit) -> bool {
        [
            path::SANDBOX_LIST,
            path::SANDBOX_LIST_V2,
            path::AUTH_TOKEN_GET,
        ]
        .contains(&hit.path.as_str())
    }

    /// The V1 walk (V1 sandboxes), the V2 walk (both generations), each ending on an empty
    /// page, and one auth token.
    fn listing_requests(&self, _one_walk: usize) -> usize {
        let (v1, v2) = self.running_by_generation();
        let walk = |n: usize| n.div_ceil(self.page_size()) + 1;
        walk(v1) + walk(v1 + v2) + 1
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
