//! The zero-code proxies: the Docker Engine API proxy (`--docker-proxy`) with the unmodified
//! docker CLI and raw bytes, and the cloud API proxy (`--cloud-proxy`) for E2B and Daytona with
//! the vendors' SDKs; what a create is stamped with, what is claimed, what is refused, and the
//! defaults that serve them without flags.
//!
//! - [`docker`]: the docker CLI through the proxy, labelled and reclaimed.
//! - [`docker_claims`]: a claim names only what the session brought into being; a create the
//!   proxy cannot stamp is refused (raw requests in `docker_claims::raw`).
//! - [`docker_labels`]: the session's labels win, and a create's answer waits for its claim.
//! - [`cloud`], [`cloud_routes`]: the cloud proxy, its routes and detached creates.
//! - [`defaults`]: `sandguard -- CMD` serves the proxies by default.
//! - [`limits`]: limits per session (`--max-sandboxes`, `--max-creates`) refuse a create in
//!   the client's own error, and make nothing.
//! - [`refusals`]: a refused create is on the record (journal, `sessions show`, `report`),
//!   a flood of them a record per doubling, never an environment value.
//! - [`lifetime`]: `--max-lifetime` ages the session's sandboxes, never its networks or
//!   volumes.
//! - [`releases`]: a removal through a proxy releases only what the provider confirmed gone;
//!   a `DELETE` it did not route frees no slot; what the daemon removes by itself
//!   (`docker run --rm`) is seen gone, gives its slot back and stops counting.
//! - [`spend`]: what a session's sandboxes cost in time (and money, priced per template) is
//!   what the provider served, per sandbox and in total, and the terminal is told it.

pub(crate) mod cloud;
mod cloud_routes;
mod defaults;
mod docker;
mod docker_claims;
mod docker_labels;
mod lifetime;
mod limits;
mod refusals;
mod releases;
mod spend;
