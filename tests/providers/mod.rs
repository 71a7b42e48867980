//! The providers' drivers and their emulators. The Docker driver's tests are in `docker/`
//! (ownership on the daemon, contexts, sockets, Podman's pods), plugin providers' in
//! `plugins.rs` and `plugin_removals.rs`; the rest of this folder is the cloud providers'
//! conformance suite.
//!
//! The cloud providers' conformance suite: the real `sandguard` binary against each provider's
//! emulator (`tests/support/`), no Docker involved.
//!
//! Like `object_store`'s shared tests, the same test functions (`suite.rs`) run against every
//! provider. Each emulator is adapted to one interface, [`Cloud`]: start it, point a command at
//! it, seed a sandbox with labels (each provider stores them its own way), ask whether an id
//! still exists, inject faults and read the request log. [`Rig`] is the one setup: a scratch
//! directory, a config written from explicit parameters ([`Config`]), and the emulator.
//!
//! Each provider's file (`e2b.rs`, `daytona.rs`, …) holds its adapter, one `conformance!` line
//! that makes a `#[test]` of every shared test that applies to it (so the names read
//! `providers::e2b::stop_touches_only_its_targets`), and only that provider's quirks. A shared
//! test that does not apply to an emulator (see [`Support`]) is not generated for it at all;
//! called anyway, it panics saying why, so it can never pass by skipping.

#[macro_use]
mod suite;

mod daytona;
pub(crate) mod docker;
mod e2b;
mod flyio;
mod modal;
mod plugin_removals;
mod plugins;
mod tenki;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::emu::{Faults, Hit};
use crate::support::{json, live_owner_label, run, sandguard, unique, Owner, Run, Scratch};
use sandguard::labels::{OWNER, SESSION};

/// Whether an emulator can play one part of the suite, and if not, why not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    Yes,
    No(&'static str),
}

impl Support {
    /// Panics, saying why, when the part does not apply: a test for it must fail, not pass.
    pub fn require<C: Cloud>(self, part: &str) {
        if let Support::No(why) = self {
            panic!("{part} does not apply to {}: {why}", C::NAME);
        }
    }
}

/// One cloud provider's emulator, as the shared tests see it.
pub trait Cloud: Sized {
    /// The driver's name (`--provider`, the JSON `provider`).
    const NAME: &'static str;
    /// Sandboxes per listing page; `None` when one answer lists everything.
    const PAGE: Option<usize>;
    /// The walk ends on an empty page, one request after the last full one.
    const EMPTY_PAGE_ENDS_LISTING: bool = false;
    /// Requests one removal takes when nothing goes wrong.
    const CALLS_PER_REMOVAL: usize = 1;
    /// What the error for a wrong credential says.
    const UNAUTHORIZED: &'static str;
    /// The HTTP status `--json` gives with that error (`None`: the provider does not speak
    /// HTTP status codes, Modal's gRPC).
    const UNAUTHORIZED_STATUS: Option<u16> = Some(401);
    /// The status `ps` shows for a running sandbox.
    const RUNNING: &'static str;
    /// The image `ps` shows for a sandbox the emulator seeded.
    const IMAGE: &'static str;
    /// Whether `ps` shows a sandbox's labels other than sandguard's own.
    const LISTS_OTHER_LABELS: bool = true;
    /// The variable without which the provider is not configured.
    const CREDENTIAL_VAR: &'static str;
    /// Whether the emulator can close a connection without answering.
    const DROPPED_CONNECTIONS: Support;
    /// Whether the provider ends sandboxes on a server-side TTL that the sidecar renews.
    const SERVER_TTL: Support;

    /// A fresh emulator on 127.0.0.1.
    fn start() -> Self;
    /// Puts the credentials and the emulator's URL into `cmd`.
    fn configure(&self, cmd: &mut Command);
    /// Replaces the credential in a configured `cmd` with a wrong one; returns it.
    fn wrong_credential(cmd: &mut Command) -> &'static str;
    /// Every secret of the right credentials: none may ever be printed.
    fn secrets() -> &'static [&'static str];
    /// What `providers` says of a reachable emulator.
    fn detail(&self) -> String;
    /// A running sandbox carrying these labels, the provider's way; returns its id.
    fn insert(&self, labels: &[(&str, &str)]) -> String;
    /// Whether `id` exists and is neither removed nor on its way out.
    fn exists(&self, id: &str) -> bool;
    /// What goes wrong from now on (`Faults::default()`: nothing).
    fn set_faults(&self, faults: Faults);
    /// Every request so far, with HTTP statuses (0: the connection was dropped).
    fn hits(&self) -> Vec<Hit>;
    /// Whether a request was a page of a listing (or what a page needs first).
    fn is_listing(hit: &Hit) -> bool;
    /// The requests one listing of everything the emulator holds takes, given that a single
    /// walk of its pages takes `one_walk`. Most providers list in one walk; Modal walks its V1
    /// and V2 listings and gets an auth token first.
    fn listing_requests(&self, one_walk: usize) -> usize {
        one_walk
    }
    /// When the provider itself will end `id` (Unix seconds), where it has a TTL.
    fn expires_at(&self, id: &str) -> Option<i64> {
        let _ = id;
        None
    }
}

/// The config every cloud test runs with: Docker off (so only the provider under test
/// answers), short retries, and the parameters a test sets.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `reclaim.deadline`: how long a reclaim may retry before the session is pending.
    pub deadline: Duration,
    /// `watch.grace` and `watch.renew_every`, for the TTL keeper.
    pub renewal: Option<(Duration, Duration)>,
    /// The provider table's `rate`: calls a second never to exceed.
    pub rate: Option<f64>,
}

impl Config {
    pub fn deadline(secs: u64) -> Config {
        Config {
            deadline: Duration::from_secs(secs),
            renewal: None,
            rate: None,
        }
    }

    fn text(&self, provider: &str) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut text = format!(
            "[providers.docker]\nenabled = false\n\n[reclaim]\ndeadline = \"{}\"\n\
             retry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0\"\n",
            ms(self.deadline)
        );
        if let Some((grace, every)) = self.renewal {
            text.push_str(&format!(
                "\n[watch]\ngrace = \"{}\"\nrenew_every = \"{}\"\n",
                ms(grace),
                ms(every)
            ));
        }
        if let Some(rate) = self.rate {
            text.push_str(&format!("\n[providers.{provider}]\nrate = {rate}\n"));
        }
        text
    }
}

/// One test's world: a scratch directory with a config, and an emulator.
pub struct Rig<C> {
    pub cloud: C,
    pub scratch: Scratch,
    config: PathBuf,
}

impl<C: Cloud> Rig<C> {
    pub fn new(config: Config) -> Rig<C> {
        Rig::around(C::start(), config)
    }

    /// A rig around an emulator started some other way (a quirk's own credential).
    pub fn around(cloud: C, config: Config) -> Rig<C> {
        let scratch = Scratch::new(&format!("cloud-{}", C::NAME));
        let path = scratch.file("sandguard.toml", config.text(C::NAME));
        Rig {
            cloud,
            scratch,
            config: path,
        }
    }

    /// `sandguard`, isolated, with this config and the emulator's credentials.
    pub fn cmd(&self) -> Command {
        let mut cmd = sandguard(&self.scratch);
        cmd.env("SANDGUARD_CONFIG", &self.config);
        self.cloud.configure(&mut cmd);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        run(self.cmd().args(args))
    }

    /// `stop --all --provider NAME --session SESSION`.
    pub fn stop_session(&self, session: &str) -> Run {
        self.run(&["stop", "--all", "--provider", C::NAME, "--session", session])
    }

    /// A sandbox of `session` as a live program made it, with one label of its own.
    pub fn labelled(&self, session: &str) -> String {
        self.cloud.insert(&[
            (SESSION, session),
            (OWNER, &live_owner_label()),
            ("app", "x"),
        ])
    }

    /// `n` sandboxes of `session`.
    pub fn many(&self, session: &str, n: usize) -> Vec<String> {
        (0..n).map(|_| self.labelled(session)).collect()
    }

    /// A sandbox sandguard did not make: it must survive everything.
    pub fn stranger(&self) -> String {
        self.cloud.insert(&[("app", "x")])
    }

    /// A guarded program (`sandguard -- sh -c …`) and `n` sandboxes made with its labels.
    pub fn owner_with(&self, n: usize) -> (Owner, Vec<String>) {
        let owner = Owner::start(self.cmd(), &self.scratch);
        assert_eq!(owner.session.len(), 32, "{:?}", owner.session);
        let labels = owner.label_pairs();
        assert!(
            labels
                .iter()
                .any(|(k, v)| k == SESSION && *v == owner.session),
            "{labels:?}"
        );
        assert!(labels.iter().any(|(k, _)| k == OWNER), "{labels:?}");
        let ids = (0..n).map(|_| self.cloud.insert(&pairs(&labels))).collect();
        (owner, ids)
    }

    /// The state `sessions --json` gives `session`.
    pub fn session_state(&self, session: &str) -> Option<String> {
        let v = json(&self.run(&["sessions", "--json"]).stdout);
        v["sessions"]
            .as_array()?
            .iter()
            .find(|x| x["session"] == session)
            .map(|x| x["state"].as_str().unwrap_or_default().to_string())
    }

    pub fn all_gone(&self, ids: &[String]) -> bool {
        ids.iter().all(|id| !self.cloud.exists(id))
    }

    pub fn all_exist(&self, ids: &[String]) -> bool {
        ids.iter().all(|id| self.cloud.exists(id))
    }
}

/// A random 32-hex session id, as `sandguard --` makes them.
pub fn session_id() -> String {
    format!("{}{}{}", unique(), unique(), unique())[..32].to_string()
}

/// SIGKILL to the wrapper alone: the program it guards lives on (its group dies with the
/// [`Owner`]).
pub fn kill_alone(owner: &mut Owner) {
    let status = Command::new("kill")
        .args(["-KILL", "--", &owner.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    owner.child.wait().unwrap();
}

/// Borrowed label pairs, as [`Cloud::insert`] takes them.
pub fn pairs(labels: &[(String, String)]) -> Vec<(&str, &str)> {
    labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}
