//! sandguard makes sure no sandbox outlives the program that owns it.
//!
//! A *sandbox* is a Docker container (with its networks and volumes) or a cloud sandbox, found
//! through a *provider* driver. Every sandbox created under a guarded *session* carries the
//! session's labels (`sandguard.session`, `sandguard.owner`, …); sandguard decides ownership
//! by those labels and by explicit claims, never by names.
//!
//! # Map of the modules
//!
//! - [`cli`]: one file per subcommand. Owns the clap types, resolves them into
//!   [`config::Settings`] once, and turns results into output and an exit code.
//! - [`guard`]: the Rust SDK helper: [`Guard::start`] spawns the sidecar for the current
//!   process and offers the labels, claims and a clean `bye` on drop.
//! - [`config`]: config file + environment + flags → one resolved [`config::Settings`].
//! - [`identity`]: the owner identity (machine id + boot id + pid + start time) and the
//!   liveness check that never trusts a bare pid.
//! - [`labels`]: the label keys and the selector that says which sandboxes a command may touch.
//! - [`ledger`]: the durable record of sessions on this machine: a private state directory, one
//!   append-only, fsynced journal per session, and the `flock` that says its sidecar still lives.
//! - [`protocol`]: the control lines an owner sends its sidecar (`claim`, `release`, `detach`,
//!   `renew`, `bye`): parser, writer, and a line reader whose memory stays bounded.
//! - [`providers`]: the provider trait, the error classes reclaim decides by, the registry, and
//!   one module per driver; [`providers::plugin`] runs external `sandguard-provider-NAME`
//!   executables as providers.
//! - [`reclaim`]: the one removal path used by `stop` (and by the sidecar and sweep): bounded
//!   concurrency per provider, retries with backoff and jitter, `Retry-After`, "already gone"
//!   counted as success, ordered phases (containers, then networks, then volumes).
//! - [`sweep`]: orphan detection (dead owners, dead sidecars, expired TTLs, pending
//!   reclaims) over the ledger and every provider; periodic mode adopts live owners.
//! - [`session`]: session ids and the labels a session's sandboxes carry.
//! - [`watch`]: the sidecar: its event loop, the owner's death sources (pidfd, `/proc`
//!   fallback), the lease on the boot clock, and what happens at the end (reclaim, ledger);
//!   [`providers::docker::proxy`] is the optional Docker API proxy that labels and claims what any Docker
//!   client creates through it.
//! - [`timefmt`]: the small amount of calendar arithmetic sandguard needs (RFC 3339, uptimes).
//! - [`unix`]: the only module with `unsafe`; every block carries a `SAFETY:` comment.
//!
//! # Flow
//!
//! Data flows one way: entry point → session → watch → reclaim → providers → ledger. Nothing
//! below `cli` knows about clap; nothing outside `providers` knows a provider's wire format.

pub mod cli;
pub mod config;
pub mod identity;
pub mod labels;
pub mod ledger;
pub mod protocol;
pub mod providers;
pub mod reclaim;
pub mod session;
pub mod sweep;
pub mod timefmt;
pub mod unix;
pub mod watch;

pub use session::guard::Guard;
