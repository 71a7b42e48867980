//! `sandguard sweep` and `sweep --every`, against the real daemon and the real ledger: dead
//! sidecars and owners, orphans by label, TTLs, adoption of a live owner, dry runs; owners
//! that cannot be judged, sessions that stay owners of their labels, detaches in the ledger,
//! final states, the ledger's growth; what the service says, and how it stops.
//!
//! - [`metrics`]: what `sweep --every --metrics` serves.
//! - [`dashboard`]: the Grafana dashboard asks only for what it serves.
//! - [`orphans`]: what a sweep reclaims, and what it adopts.
//! - [`rules`]: the ownership rules on the sweep's side.
//! - [`output`]: what `sweep --every` says.
//! - [`partial`]: a sweep that has some of a session's providers (`--provider`).
//! - [`service`]: `sweep --every` stopping on SIGTERM: what it adopted released, a pass at
//!   work cut short.

mod dashboard;
pub(crate) mod metrics;
mod orphans;
mod output;
mod partial;
mod rules;
mod service;
