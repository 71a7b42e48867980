//! E2B in the conformance suite: the adapter for `support/e2b.rs` (labels are sandbox
//! metadata, `X-API-Key`, 100 a page). E2B has no quirk beyond what the shared tests check.

use std::process::Command;
use std::sync::Arc;

use super::{Cloud, Support};
use crate::support::e2b::{self, State};
use crate::support::emu::{Emulator, Faults, Hit};
use crate::support::unique;

const KEY: &str = "e2b_0123456789abcdef0123456789abcdef";

pub struct E2b {
    emu: Emulator,
    state: Arc<State>,
}

impl Cloud for E2b {
    const NAME: &'static str = "e2b";
    const PAGE: Option<usize> = Some(100);
    const UNAUTHORIZED: &'static str = "HTTP 401";
    const RUNNING: &'static str = "running";
    const IMAGE: &'static str = "base";
    const CREDENTIAL_VAR: &'static str = "E2B_API_KEY";
    const DROPPED_CONNECTIONS: Support = Support::Yes;
    const SERVER_TTL: Support = Support::Yes;

    fn start() -> E2b {
        let (emu, state) = e2b::start(KEY);
        E2b { emu, state }
    }

    fn configure(&self, cmd: &mut Command) {
        cmd.env("E2B_API_KEY", KEY)
            .env("E2B_API_URL", &self.emu.url);
    }

    fn wrong_credential(cmd: &mut Command) -> &'static str {
        let wrong = "e2b_fedcba9876543210fedcba9876543210";
        cmd.env("E2B_API_KEY", wrong);
        wrong
    }

    fn secrets() -> &'static [&'static str] {
        &[KEY]
    }

    fn detail(&self) -> String {
        format!("E2B API at {}", self.emu.url)
    }

    fn insert(&self, labels: &[(&str, &str)]) -> String {
        let id = format!("i{}", unique());
        self.state.insert(&id, labels);
        id
    }

    fn exists(&self, id: &str) -> bool {
        self.state.exists(id)
    }

    fn set_faults(&self, faults: Faults) {
        self.emu.set_faults(faults);
    }

    fn hits(&self) -> Vec<Hit> {
        self.emu.hits()
    }

    fn is_listing(hit: &Hit) -> bool {
        hit.method == "GET" && hit.path == "/v2/sandboxes"
    }

    fn expires_at(&self, id: &str) -> Option<i64> {
        self.state.get(id).map(|sb| sb.end_at)
    }
}

conformance!(E2b; dropped_connections, server_ttl);
