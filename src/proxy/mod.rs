//! The two API proxies: any client, unchanged, creates only labelled, claimed sandboxes.
//!
//! - [`docker`]: the Docker API proxy, on a private unix socket the program reaches through
//!   `DOCKER_HOST` (containers, networks, volumes; commits kept free of sandguard's labels;
//!   removals release their claims).
//! - [`cloud`]: the E2B and Daytona API proxy, on a loopback port the SDKs reach through
//!   `E2B_API_URL` / `DAYTONA_API_URL`.
//!
//! What both share lives here, once:
//!
//! - [`create`]: the one create pipeline (read → decide → stamp → forward → claim) both run,
//!   each API filling in its steps ([`create::Creates`]); [`refusal`]: why a proxy answers a
//!   request itself, one typed value each API words in its own error shape;
//! - [`tasks`]: the tasks a connection spawns, owned by the connection;
//! - [`accept`]: the accept loop, every connection a task it owns;
//! - [`path`]: a request path read as the service reads it before routing;
//! - [`headers`]: one hop's headers kept on that hop;
//! - [`stamp`]: the session's labels merged into a create body's label map, as the service
//!   reads it ([`json`] keeps a body as Go's decoder reads it);
//! - [`size`]: the size a cloud create names (its template, its snapshot), journaled with its
//!   claim for prices;
//! - [`named`]: what a create names (its image, template or snapshot, never its environment),
//!   journaled with a refusal of it;
//! - [`claim`]: how a proxy hands the sidecar a claim, a detach or a release and waits until it
//!   is journaled;
//! - [`release`]: whether the answer to a `DELETE` of a claimed sandbox releases its claim,
//!   the one decision both proxies take on the path the provider routed.
//!
//! Both are started by the sidecar (`watch::start::proxies`) and their claims arrive in its
//! loop (`watch::arrival`). The proxies sit above the drivers: they read a provider's wire
//! format only for its create calls, and reach the Docker daemon through the driver's
//! [`crate::providers::docker::daemon`].

pub(crate) mod accept;
pub(crate) mod claim;
pub(crate) mod cloud;
pub(crate) mod create;
pub(crate) mod docker;
pub(crate) mod headers;
pub(crate) mod json;
pub(crate) mod named;
pub(crate) mod path;
pub(crate) mod refusal;
pub(crate) mod release;
pub(crate) mod size;
pub(crate) mod stamp;
pub(crate) mod tasks;
